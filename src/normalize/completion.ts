/**
 * `POST /v1/completions` body -> NormalizedRequest: validate what podgate reads (the prompt may be a
 * string, strings, token ids or arrays of token ids), apply the model's caps and defaults, and keep
 * everything else (`echo`, `logprobs`, `prompt_embeds`, ...) for the endpoint.
 */
import type { ModelConfig } from '../config/schema.ts'
import { invalidRequest } from '../errors/index.ts'
import { readSampling } from './chat.ts'
import { textOrTokensCost, jsonFieldChars, CHARS_PER_TOKEN } from './estimate.ts'
import { completionRequestSchema } from './schemas.ts'
import { assertKind, resolveLimits, resolveStream, withDefaults } from './sampling.ts'
import { mayShorthand, shorthandSampling } from './shorthand.ts'
import type { ShorthandOptions } from './shorthand.ts'
import { parseBounded } from './bounded.ts'
import { assertJsonObject } from './zod-errors.ts'
import type { NormalizedRequest } from './types.ts'

/**
 * Validates an OpenAI completion body for `model` and returns podgate's normalized request.
 * Throws `GatewayError('invalid_request')` (400) with OpenAI's `param` on the first problem.
 *
 * @example
 * const request = normalizeCompletionRequest({ model: 'llama', prompt: ['Once', 'Twice'] }, config.models['llama'], 'llama')
 * // request.estimate.sequences === 2
 */
export function normalizeCompletionRequest(body: unknown, model: ModelConfig, alias: string, options: ShorthandOptions = {}): NormalizedRequest {
  assertJsonObject(body)
  assertKind('completion', model, alias)
  const req = parseBounded(completionRequestSchema, body)
  // vLLM takes `prompt_embeds` in place of (or beside) `prompt`.
  if (req.prompt == null && body.prompt_embeds == null) throw invalidRequest("Missing required parameter: 'prompt'", { param: 'prompt' })
  // `max_tokens: 0` with `echo` scores the prompt without generating (vLLM runs it as one token); without `echo` vLLM refuses it.
  if (req.max_tokens === 0 && body.echo !== true) {
    // Native input has no `echo`: pointing there would send the caller to a field it refuses.
    const hint = options.nativeInput ? '' : " (0 only scores the prompt, with 'echo': true)"
    throw invalidRequest(`'max_tokens' must be at least 1, got 0${hint}`, { param: 'max_tokens' })
  }
  const { stream, includeUsage } = resolveStream(req)
  const limits = resolveLimits(req, model, alias)
  const forwarded = withDefaults(body, model, limits.maxTokens)
  // vLLM's completions read only `max_tokens` (16 when absent): the chat alias is sent under that name.
  if (forwarded.max_completion_tokens != null) {
    forwarded.max_tokens = limits.maxTokens
    delete forwarded.max_completion_tokens
  }
  // Prompt embeddings are sized by the upstream's usage when the answer settles: podgate cannot count their tokens.
  const cost = req.prompt == null ? { tokens: 0, count: Array.isArray(body.prompt_embeds) ? body.prompt_embeds.length : 1 } : textOrTokensCost(req.prompt, 'prompt')
  // Only one string prompt has a native form; several prompts, token ids or embeddings go as an `openai_route` job.
  const prompt = typeof req.prompt === 'string' ? req.prompt : req.prompt?.length === 1 && typeof req.prompt[0] === 'string' ? req.prompt[0] : undefined
  const sampling = prompt === undefined || !mayShorthand(model, options) ? undefined : shorthandSampling(forwarded, limits.maxTokens, options)
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
