/**
 * `POST /v1/completions` body -> NormalizedRequest: validate, unwrap the one-string prompt array, apply
 * the model's defaults and caps.
 */
import { GatewayError } from '../errors/index.ts'
import type { ModelConfig } from '../config/schema.ts'
import { completionRequestSchema } from './schemas.ts'
import { assertKind, resolveSampling, resolveStream } from './sampling.ts'
import { assertJsonObject, parseRequest } from './zod-errors.ts'
import type { NormalizedRequest } from './types.ts'

/**
 * Validates an OpenAI completion body for `model` and returns podgate's normalized request.
 * Throws `GatewayError('invalid_request')` (400) with OpenAI's `param` on the first problem.
 *
 * @example
 * const request = normalizeCompletionRequest({ model: 'llama', prompt: 'Once' }, config.models['llama'], 'llama')
 * // request.prompt === 'Once'
 */
export function normalizeCompletionRequest(body: unknown, model: ModelConfig, alias: string): NormalizedRequest {
  assertJsonObject(body)
  assertKind('completion', model, alias)
  rejectTokenIdPrompt(body.prompt)
  const req = parseRequest(completionRequestSchema, body)
  const { stream, includeUsage } = resolveStream(req)
  const normalized: NormalizedRequest = {
    kind: 'completion',
    model: alias,
    stream,
    includeUsage,
    prompt: typeof req.prompt === 'string' ? req.prompt : req.prompt[0] ?? '',
    sampling: resolveSampling(req, model, alias),
  }
  if (req.user != null) normalized.user = req.user
  return normalized
}

/**
 * OpenAI also accepts token ids (`[1, 2]` or `[[1, 2]]`). They only make sense for the served model's
 * tokenizer, which podgate does not know. Checked before the schema because a union's type error could
 * only say "expected a string" at `prompt[0]`, hiding the reason.
 */
function rejectTokenIdPrompt(prompt: unknown): void {
  if (!Array.isArray(prompt)) return
  const first: unknown = prompt[0]
  if (typeof first === 'number' || Array.isArray(first)) {
    throw new GatewayError(
      'invalid_request',
      'podgate does not support token-id prompts yet: send the prompt as a string',
      { param: 'prompt' },
    )
  }
}
