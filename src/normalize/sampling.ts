/**
 * What every request kind shares after validation: the model's kind check, streaming flags, the limits
 * podgate enforces (max_tokens cap, n and best_of), and the forwarded body with the model's defaults
 * filling only what the caller left out (null counts as left out).
 */
import { GatewayError, invalidRequest } from '../errors/index.ts'
import type { ModelConfig } from '../config/schema.ts'
import type { RequestKind } from './types.ts'
import { OPENAI_ROUTE } from './upstream-bodies.ts'

/** `max_tokens` when neither the caller nor the model config names one. */
export const FALLBACK_MAX_TOKENS = 512

/**
 * The body podgate forwards: the caller's, with the model's `defaults` where the caller sent none and
 * `max_tokens` set when the caller named no limit (so the model's cap bounds every generation). The
 * caller's object is not changed.
 */
export function withDefaults(body: Record<string, unknown>, model: ModelConfig, maxTokens: number): Record<string, unknown> {
  const out: Record<string, unknown> = { ...body }
  if (out.max_tokens == null && out.max_completion_tokens == null) out.max_tokens = maxTokens
  for (const [name, value] of Object.entries(model.defaults)) {
    if (name === 'max_tokens' || value === undefined || out[name] != null) continue
    // A configured default must never turn a valid request into an error: it yields to the caller's max.
    out[name] = name === 'min_tokens' ? Math.min(value as number, maxTokens) : value
  }
  return out
}

/** Refuses a request kind the model is not configured for, pointing at the routes it does serve. */
export function assertKind(kind: RequestKind, model: ModelConfig, alias: string): void {
  if ((model.kinds as readonly string[]).includes(kind)) return
  const routes = model.kinds.map((k) => OPENAI_ROUTE[k as RequestKind]).join(' or ')
  const what = model.kinds.length === 1 ? `${model.kinds[0]} requests` : `${model.kinds.join(' and ')} requests`
  throw invalidRequest(`model '${alias}' only accepts ${what}: use ${routes}`, { param: 'model' })
}

export interface StreamFlags {
  stream: boolean
  includeUsage: boolean
}

interface StreamFields {
  stream?: boolean | null
  stream_options?: { include_usage?: boolean | null } | null
}

/** `stream_options` without `stream: true` is a 400, as on OpenAI and vLLM; an empty one is not (vLLM serves it). */
export function resolveStream(req: StreamFields): StreamFlags {
  const stream = req.stream === true
  if (req.stream_options != null && Object.keys(req.stream_options).length > 0 && !stream) {
    throw invalidRequest(
      "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
      { param: 'stream_options' },
    )
  }
  // vLLM's StreamOptions defaults `include_usage` to true: `{}` asks for usage, a null member does not.
  const asked = req.stream_options?.include_usage
  return { stream, includeUsage: stream && req.stream_options != null && (asked === true || asked === undefined) }
}

/**
 * The caller's `max_tokens` (or its alias `max_completion_tokens`), refused above the model's cap;
 * else the model's default, clamped to the cap.
 */
function resolveMaxTokens(req: LimitFields, model: ModelConfig, alias: string): number {
  const maxTokens = req.max_tokens ?? undefined
  const maxCompletionTokens = req.max_completion_tokens ?? undefined
  if (maxTokens !== undefined && maxCompletionTokens !== undefined && maxTokens !== maxCompletionTokens) {
    throw invalidRequest(
      `'max_tokens' (${maxTokens}) and 'max_completion_tokens' (${maxCompletionTokens}) are aliases: send one of them`,
      { param: 'max_completion_tokens' },
    )
  }
  // Name the field the caller actually sent, so the error points at their own code.
  return outputCap(maxTokens ?? maxCompletionTokens, maxTokens !== undefined ? 'max_tokens' : 'max_completion_tokens', model, alias)
}

interface LimitFields {
  max_tokens?: number | null
  max_completion_tokens?: number | null
  n?: number | null
  best_of?: number | null
}

export interface Limits {
  maxTokens: number
  n: number | undefined
  bestOf: number | undefined
}

/** The caller's max_tokens, n and best_of checked against the model's caps. */
export function resolveLimits(req: LimitFields, model: ModelConfig, alias: string): Limits {
  const maxTokens = resolveMaxTokens(req, model, alias)
  const n = req.n ?? undefined
  const bestOf = req.best_of ?? undefined
  if (n !== undefined && n > model.maxChoices) throw tooMany('n', n, model.maxChoices, alias)
  if (bestOf !== undefined) {
    // best_of generates (and costs) that many sequences, but vLLM bills only the returned ones: cap it too.
    if (bestOf > model.maxChoices) throw tooMany('best_of', bestOf, model.maxChoices, alias)
    if (bestOf < (n ?? 1)) {
      throw invalidRequest(`'best_of' must be at least 'n' (${n ?? 1}), got ${bestOf}`, {
        param: 'best_of',
      })
    }
  }
  return { maxTokens, n, bestOf }
}

/**
 * A caller's output cap (`param`: `max_tokens`, `max_output_tokens`, ...) checked against the model's
 * `maxTokensCap`, or the model's default when the caller sent none.
 */
export function outputCap(asked: number | undefined, param: string, model: ModelConfig, alias: string): number {
  if (asked === undefined) return Math.min(model.defaultMaxTokens ?? model.defaults.max_tokens ?? FALLBACK_MAX_TOKENS, model.maxTokensCap)
  if (asked > model.maxTokensCap) {
    throw invalidRequest(`'${param}' must be at most ${model.maxTokensCap} for model '${alias}', got ${asked}`, { param })
  }
  return asked
}

function tooMany(param: 'n' | 'best_of', value: number, max: number, alias: string): GatewayError {
  return invalidRequest(`'${param}' must be at most ${max} for model '${alias}', got ${value}`, {
    param,
  })
}
