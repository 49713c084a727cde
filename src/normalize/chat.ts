/**
 * `POST /v1/chat/completions` body -> NormalizedRequest: validate, flatten content parts, map roles,
 * apply the model's defaults and caps.
 */
import { GatewayError } from '../errors/index.ts'
import type { ModelConfig } from '../config/schema.ts'
import { chatCompletionRequestSchema, MAX_TEXT_CHARS } from './schemas.ts'
import type { ChatMessageInput } from './schemas.ts'
import { assertKind, resolveSampling, resolveStream } from './sampling.ts'
import { assertJsonObject, parseRequest } from './zod-errors.ts'
import type { NormalizedMessage, NormalizedRequest } from './types.ts'

/**
 * Validates an OpenAI chat completion body for `model` and returns podgate's normalized request.
 * Throws `GatewayError('invalid_request')` (400) with OpenAI's `param` on the first problem.
 *
 * @example
 * const request = normalizeChatRequest(await c.req.json(), config.models['llama'], 'llama')
 * // request.messages: [{ role: 'system', content: '...' }, ...]; request.sampling.max_tokens: 512
 */
export function normalizeChatRequest(body: unknown, model: ModelConfig, alias: string): NormalizedRequest {
  assertJsonObject(body)
  assertKind('chat', model, alias)
  const req = parseRequest(chatCompletionRequestSchema, body)
  const { stream, includeUsage } = resolveStream(req)
  const normalized: NormalizedRequest = {
    kind: 'chat',
    model: alias,
    stream,
    includeUsage,
    messages: normalizeMessages(req.messages),
    sampling: resolveSampling(req, model, alias),
  }
  if (req.user != null) normalized.user = req.user
  return normalized
}

function normalizeMessages(messages: readonly ChatMessageInput[]): NormalizedMessage[] {
  let totalChars = 0
  const out: NormalizedMessage[] = []
  for (const message of messages) {
    const content = typeof message.content === 'string'
      ? message.content
      : message.content.map((part) => part.text).join('\n')
    totalChars += content.length
    // Each string is bounded by the schema; this bounds their sum, which is what the GPU actually sees.
    if (totalChars > MAX_TEXT_CHARS) {
      throw new GatewayError(
        'invalid_request',
        `The messages are too long: more than ${MAX_TEXT_CHARS} characters in total`,
        { param: 'messages' },
      )
    }
    // vLLM's chat templates know `system`; `developer` is OpenAI's newer name for the same role.
    const role = message.role === 'developer' ? 'system' : message.role
    const normalized: NormalizedMessage = { role, content }
    if (message.name != null) normalized.name = message.name
    out.push(normalized)
  }
  return out
}
