/**
 * `POST /v1/completions` body -> NormalizedRequest: validate what podgate reads (the prompt may be a
 * string, strings, token ids or arrays of token ids), apply the model's caps and defaults, and keep
 * everything else (`echo`, `logprobs`, `prompt_embeds`, ...) for the endpoint.
 */
import type { ModelConfig } from '../config/schema.ts'
import { readSampling } from './chat.ts'
import { textOrTokensCost, jsonFieldChars, CHARS_PER_TOKEN } from './estimate.ts'
import { completionRequestSchema } from './schemas.ts'
import { assertKind, resolveLimits, resolveStream, withDefaults } from './sampling.ts'
import { shorthandSampling } from './shorthand.ts'
import { assertJsonObject, parseRequest } from './zod-errors.ts'
import type { NormalizedRequest } from './types.ts'

/**
 * Validates an OpenAI completion body for `model` and returns podgate's normalized request.
 * Throws `GatewayError('invalid_request')` (400) with OpenAI's `param` on the first problem.
 *
 * @example
 * const request = normalizeCompletionRequest({ model: 'llama', prompt: ['Once', 'Twice'] }, config.models['llama'], 'llama')
 * // request.estimate.sequences === 2
 */
export function normalizeCompletionRequest(body: unknown, model: ModelConfig, alias: string): NormalizedRequest {
  assertJsonObject(body)
  assertKind('completion', model, alias)
  const req = parseRequest(completionRequestSchema, body)
  const { stream, includeUsage } = resolveStream(req)
  const limits = resolveLimits(req, model, alias)
  const forwarded = withDefaults(body, model, limits.maxTokens)
  const cost = textOrTokensCost(req.prompt, 'prompt')
  // Only one string prompt has a native form; several prompts or token ids go as an `openai_route` job.
  const prompt = typeof req.prompt === 'string' ? req.prompt : req.prompt.length === 1 && typeof req.prompt[0] === 'string' ? req.prompt[0] : undefined
  const sampling = prompt === undefined ? undefined : shorthandSampling(forwarded, limits.maxTokens)
  const normalized: NormalizedRequest = {
    kind: 'completion',
    model: alias,
    stream,
    includeUsage,
    body: forwarded,
    shorthand: sampling !== undefined,
    sampling: sampling ?? readSampling(forwarded, limits.maxTokens),
    estimate: {
      promptTokens: cost.tokens + Math.ceil(jsonFieldChars(forwarded) / CHARS_PER_TOKEN),
      sequences: cost.count * Math.max(limits.n ?? 1, limits.bestOf ?? 1),
    },
  }
  if (sampling && prompt !== undefined) normalized.prompt = prompt
  if (req.user != null) normalized.user = req.user
  return normalized
}
