/**
 * Request normalization: OpenAI request bodies -> `NormalizedRequest` -> the upstream bodies of both
 * Runpod modes. Validation errors are `GatewayError('invalid_request')` with OpenAI's `param`.
 * podgate reads only the fields in `PODGATE_READS`; the rest passes through.
 */
export { normalizeChatRequest } from './chat.ts'
export { normalizeCompletionRequest } from './completion.ts'
export { normalizeEmbeddingRequest } from './embedding.ts'
export { COHERE_ROUTES, normalizeRouteRequest, VLLM_ROUTES } from './route.ts'
export type { StreamDialect, VllmRoute } from './route.ts'
export { toNativeInput, toOpenAIBody, SAMPLING_KEYS, OPENAI_ROUTE } from './upstream-bodies.ts'
export { assertNativeSampling } from './shorthand.ts'
export {
  chatCompletionRequestSchema,
  completionRequestSchema,
  embeddingRequestSchema,
  MAX_MESSAGES,
  MAX_STOP_SEQUENCES,
  MAX_TEXT_CHARS,
} from './schemas.ts'
export type { ChatCompletionRequest, ChatMessageInput, CompletionRequest, EmbeddingRequest } from './schemas.ts'
export { FALLBACK_MAX_TOKENS } from './sampling.ts'
export { CHARS_PER_TOKEN, MEDIA_PART_TOKENS } from './estimate.ts'
export { PODGATE_READS, FRAMING_FIELDS } from './reads.ts'
export { assertJsonObject, invalidRequestFromIssues, parseRequest } from './zod-errors.ts'
export type { NormalizedMessage, NormalizedRequest, RequestEstimate, RequestKind, SamplingParams } from './types.ts'
