/**
 * vLLM's other routes (`/v1/responses`, `/v1/messages`, `/v1/rerank`, `/tokenize`, ...) -> NormalizedRequest.
 *
 * podgate reads only what it needs from these bodies: `model` (routing and key scope), `stream` on the
 * routes that generate, and their output cap (`max_output_tokens`, `max_tokens`), which is capped per
 * model and filled in when absent, so every generation is bounded and the quota reservation is sized.
 * Everything else reaches vLLM as the caller wrote it; vLLM validates its own formats.
 */
import type { ModelConfig } from '../config/schema.ts'
import { invalidRequest } from '../errors/index.ts'
import { CHARS_PER_TOKEN, MEDIA_PART_TOKENS } from './estimate.ts'
import { assertKind, outputCap } from './sampling.ts'
import type { NormalizedRequest, RequestKind } from './types.ts'

/** How a stream of a generating route is framed and ends (streaming/dialects.ts reads it). */
export type StreamDialect = 'responses' | 'messages'

/**
 * @example
 * normalizeRouteRequest({ model: 'llama-8b', input: 'Hi' }, config.models['llama-8b'], 'llama-8b', VLLM_ROUTES.responses!)
 * // body.max_output_tokens: the model's default; estimate: { promptTokens: 2, sequences: 1 }
 */
export function normalizeRouteRequest(body: Record<string, unknown>, model: ModelConfig, alias: string, route: VllmRoute): NormalizedRequest {
  if (route.kind) assertKind(route.kind, model, alias)
  const { generates } = route
  const forwarded = { ...body }
  let maxTokens = 0
  let stream = false
  if (generates) {
    const asked = forwarded[generates.maxField] ?? undefined
    if (asked !== undefined && (typeof asked !== 'number' || !Number.isInteger(asked) || asked < 1)) {
      throw invalidRequest(`'${generates.maxField}' must be an integer of at least 1`, { param: generates.maxField })
    }
    maxTokens = forwarded[generates.maxField] = outputCap(asked, generates.maxField, model, alias)
    if (forwarded.stream != null && typeof forwarded.stream !== 'boolean') {
      throw invalidRequest("'stream' must be a boolean", { param: 'stream' })
    }
    stream = forwarded.stream === true
  }
  return {
    kind: route.kind ?? 'embedding',
    model: alias,
    stream,
    includeUsage: false,
    body: forwarded,
    shorthand: false,
    sampling: { max_tokens: maxTokens },
    estimate: { promptTokens: route.kind ? promptTokensOf(body) : 0, sequences: generates ? 1 : 0 },
    route,
  }
}

export interface VllmRoute {
  /** vLLM's path: what `openai_route` names, and what follows `/openai` on Runpod's OpenAI route. */
  path: string
  /**
   * The kind a model must accept (`kinds` in its config) to be called on this route. Routes without one
   * (`count_tokens`, `/tokenize`, `/detokenize`) run only the tokenizer: they cost a request, no tokens.
   */
  kind?: RequestKind
  /** Set on routes that generate: the body's output cap field and the stream's dialect. */
  generates?: { maxField: 'max_output_tokens' | 'max_tokens'; dialect: StreamDialect }
}

/** podgate's `/v1/<name>` routes for vLLM's other routes. Errors on `messages*` use Anthropic's shape. */
export const VLLM_ROUTES: Readonly<Record<string, VllmRoute>> = {
  responses: { path: '/v1/responses', kind: 'chat', generates: { maxField: 'max_output_tokens', dialect: 'responses' } },
  messages: { path: '/v1/messages', kind: 'chat', generates: { maxField: 'max_tokens', dialect: 'messages' } },
  'messages/count_tokens': { path: '/v1/messages/count_tokens' },
  rerank: { path: '/v1/rerank', kind: 'embedding' },
  score: { path: '/v1/score', kind: 'embedding' },
  classify: { path: '/classify', kind: 'embedding' },
  pooling: { path: '/pooling', kind: 'embedding' },
  tokenize: { path: '/tokenize' },
  detokenize: { path: '/detokenize' },
}

/**
 * vLLM's routes of Cohere's v2 API, served at podgate's `/v2/rerank` and `/v2/embed`: `/v2/rerank` (vLLM
 * answers it as `/v1/rerank`) and `/v2/embed` (vLLM since spring 2026, PR #37074; its `max_tokens` truncates the input).
 */
export const COHERE_ROUTES: readonly VllmRoute[] = [
  { path: '/v2/rerank', kind: 'embedding' },
  { path: '/v2/embed', kind: 'embedding' },
]

/**
 * The prompt a body of any shape may hold: its text at ~4 characters a token, its token ids one each, and
 * an inline image (a base64 `data:` URL, Anthropic's `base64` source) a media part, as on chat: as text,
 * a 75 KB image would reserve 25,000 tokens. `model` left out; the upstream's usage settles it.
 */
function promptTokensOf(body: Record<string, unknown>): number {
  let chars = 0
  let ids = 0
  let media = 0
  const stack: unknown[] = Object.entries(body).flatMap(([name, value]) => (name === 'model' ? [] : [value]))
  while (stack.length > 0) {
    const value = stack.pop()
    if (typeof value === 'string') {
      if (/^data:[^,]{0,200};base64,/.test(value)) media++
      else chars += value.length
    } else if (typeof value === 'number') ids++
    // One push per item: spreading a million token ids into one call would overflow the stack.
    else if (Array.isArray(value)) for (const item of value) stack.push(item)
    // An object; null and booleans read no type and hold no keys.
    else if ((value as Record<string, unknown> | null)?.type === 'base64') media++
    else for (const key in value as object) stack.push((value as Record<string, unknown>)[key])
  }
  return Math.ceil(chars / CHARS_PER_TOKEN) + ids + media * MEDIA_PART_TOKENS
}
