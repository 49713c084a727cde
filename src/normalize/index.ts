/**
 * Request normalization: OpenAI request bodies -> `NormalizedRequest` -> the upstream bodies of both
 * Runpod modes. Validation errors are `GatewayError('invalid_request')` with OpenAI's `param`.
 */
export { normalizeChatRequest } from './chat.ts'
export { normalizeCompletionRequest } from './completion.ts'
export { toNativeInput, toOpenAIBody, SAMPLING_KEYS } from './upstream-bodies.ts'
export {
  chatCompletionRequestSchema,
  completionRequestSchema,
  MAX_MESSAGES,
  MAX_STOP_SEQUENCES,
  MAX_TEXT_CHARS,
} from './schemas.ts'
export type { ChatCompletionRequest, ChatMessageInput, CompletionRequest } from './schemas.ts'
export { FALLBACK_MAX_TOKENS } from './sampling.ts'
export { assertJsonObject, invalidRequestFromIssues, parseRequest } from './zod-errors.ts'
export type { NormalizedMessage, NormalizedRequest, RequestKind, SamplingParams } from './types.ts'
