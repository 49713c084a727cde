/**
 * `POST /v1/embeddings` body -> NormalizedRequest: validate `input` (a string, strings, token ids or
 * arrays of token ids) or vLLM's chat form (`messages`), and forward everything else (`encoding_format`,
 * `dimensions`, ...) unchanged.
 * Embeddings have no native shorthand: native endpoints get an `openai_route` job.
 */
import type { ModelConfig } from '../config/schema.ts'
import { invalidRequest } from '../errors/index.ts'
import { chatPromptTokens, textOrTokensCost } from './estimate.ts'
import { embeddingRequestSchema } from './schemas.ts'
import { assertKind } from './sampling.ts'
import { parseBounded } from './bounded.ts'
import { assertJsonObject } from './zod-errors.ts'
import type { NormalizedRequest } from './types.ts'

/**
 * @example
 * const request = normalizeEmbeddingRequest({ model: 'embed', input: ['a', 'b'] }, config.models['embed'], 'embed')
 * // request.estimate: { promptTokens: 2, sequences: 0 }
 */
export function normalizeEmbeddingRequest(body: unknown, model: ModelConfig, alias: string): NormalizedRequest {
  assertJsonObject(body)
  assertKind('embedding', model, alias)
  const req = parseBounded(embeddingRequestSchema, body)
  if (req.input == null && req.messages == null) throw invalidRequest("Missing required parameter: 'input'", { param: 'input' })
  // vLLM embeds chat `messages` (its chat form, for multimodal embedding models) in place of `input`.
  const promptTokens = (req.input == null ? 0 : textOrTokensCost(req.input, 'input').tokens) + (req.messages == null ? 0 : chatPromptTokens({}, req.messages))
  const normalized: NormalizedRequest = {
    kind: 'embedding',
    model: alias,
    stream: false,
    includeUsage: false,
    body: { ...body },
    shorthand: false,
    sampling: { max_tokens: 0 },
    estimate: { promptTokens, sequences: 0 },
  }
  if (req.user != null) normalized.user = req.user
  return normalized
}
