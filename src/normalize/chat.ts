/**
 * `POST /v1/chat/completions` body -> NormalizedRequest: validate what podgate reads, apply the model's
 * caps and defaults, and keep everything else for the endpoint.
 */
import { chatCompletionRequestSchema } from './schemas.ts'
import { assertKind, resolveLimits, resolveStream, withDefaults } from './sampling.ts'
import { mayShorthand, shorthandMessages, shorthandSampling } from './shorthand.ts'
import type { ShorthandOptions } from './shorthand.ts'
import { chatPromptTokens } from './estimate.ts'
import { parseBounded } from './bounded.ts'
import { assertJsonObject } from './zod-errors.ts'
import type { ModelConfig } from '../config/schema.ts'
import type { NormalizedRequest, SamplingParams } from './types.ts'

/** The sampling params podgate itself reads, for a request that does not fit the native shorthand. */
export function readSampling(body: Record<string, unknown>, maxTokens: number): NormalizedRequest['sampling'] {
  const sampling: NormalizedRequest['sampling'] = { max_tokens: maxTokens }
  if (typeof body.n === 'number') sampling.n = body.n
  if (typeof body.best_of === 'number') sampling.best_of = body.best_of
  if (typeof body.temperature === 'number') sampling.temperature = body.temperature
  if (body.seed != null) sampling.seed = body.seed as SamplingParams['seed']
  return sampling
}

/**
 * Validates an OpenAI chat completion body for `model` and returns podgate's normalized request.
 * Throws `GatewayError('invalid_request')` (400) with OpenAI's `param` on the first problem.
 *
 * @example
 * const request = normalizeChatRequest(await c.req.json(), config.models['llama'], 'llama')
 * // request.body: the caller's body (tools, response_format, ... included) + max_tokens: 512
 */
export function normalizeChatRequest(body: unknown, model: ModelConfig, alias: string, options: ShorthandOptions = {}): NormalizedRequest {
  assertJsonObject(body)
  assertKind('chat', model, alias)
  const req = parseBounded(chatCompletionRequestSchema, body)
  const { stream, includeUsage } = resolveStream(req)
  const limits = resolveLimits(req, model, alias)
  const forwarded = withDefaults(body, model, limits.maxTokens)
  const promptTokens = chatPromptTokens(forwarded, req.messages)
  const sampling = mayShorthand(model, options) ? shorthandSampling(forwarded, limits.maxTokens, options) : undefined
  const messages = sampling ? shorthandMessages(req.messages, options) : undefined
  const normalized: NormalizedRequest = {
    kind: 'chat',
    model: alias,
    stream,
    includeUsage,
    body: forwarded,
    shorthand: messages !== undefined,
    sampling: sampling ?? readSampling(forwarded, limits.maxTokens),
    estimate: { promptTokens, sequences: Math.max(limits.n ?? 1, limits.bestOf ?? 1) },
  }
  if (messages) normalized.messages = messages
  if (req.user != null) normalized.user = req.user
  return normalized
}
