/**
 * What both request kinds share after validation: the model's kind check, streaming flags, and the
 * sampling params with per-model defaults and caps applied. Everything here depends on the model, so it
 * runs after the (model-independent) schema parse.
 */
import { GatewayError } from '../errors/index.ts'
import type { ModelConfig } from '../config/schema.ts'
import type { ChatCompletionRequest, CompletionRequest } from './schemas.ts'
import type { RequestKind, SamplingParams } from './types.ts'

/** `max_tokens` when neither the caller nor the model config names one. */
export const FALLBACK_MAX_TOKENS = 512

const ROUTE_OF: Record<RequestKind, string> = { chat: '/v1/chat/completions', completion: '/v1/completions' }

/** Refuses a request kind the model is not configured for, pointing at the route it does serve. */
export function assertKind(kind: RequestKind, model: ModelConfig, alias: string): void {
  if (model.kinds.includes(kind)) return
  const other: RequestKind = kind === 'chat' ? 'completion' : 'chat'
  throw new GatewayError(
    'invalid_request',
    `model '${alias}' only accepts ${other} requests: use ${ROUTE_OF[other]}`,
    { param: 'model' },
  )
}

export interface StreamFlags {
  stream: boolean
  includeUsage: boolean
}

/** `stream_options` without `stream: true` is a 400, as on OpenAI. */
export function resolveStream(req: ChatCompletionRequest | CompletionRequest): StreamFlags {
  const stream = req.stream === true
  if (req.stream_options != null && !stream) {
    throw new GatewayError(
      'invalid_request',
      "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
      { param: 'stream_options' },
    )
  }
  return { stream, includeUsage: req.stream_options?.include_usage === true }
}

/**
 * The caller's sampling params in worker-vllm's names, with the model's `defaults` filling only what the
 * caller left out (null counts as left out). Keys are set in `SAMPLING_KEYS` order.
 */
export function resolveSampling(
  req: ChatCompletionRequest | CompletionRequest,
  model: ModelConfig,
  alias: string,
): SamplingParams {
  const d = model.defaults
  const maxTokens = resolveMaxTokens(req, model, alias)
  const n = req.n ?? undefined
  const bestOf = req.best_of ?? undefined
  if (n !== undefined && n > model.maxChoices) throw tooMany('n', n, model.maxChoices, alias)
  if (bestOf !== undefined) {
    // best_of generates (and costs) that many sequences, but vLLM bills only the returned ones: cap it too.
    if (bestOf > model.maxChoices) throw tooMany('best_of', bestOf, model.maxChoices, alias)
    if (bestOf < (n ?? 1)) {
      throw new GatewayError('invalid_request', `'best_of' must be at least 'n' (${n ?? 1}), got ${bestOf}`, {
        param: 'best_of',
      })
    }
  }

  let minTokens = req.min_tokens ?? undefined
  if (minTokens !== undefined && minTokens > maxTokens) {
    throw new GatewayError(
      'invalid_request',
      `'min_tokens' must be at most max_tokens (${maxTokens}), got ${minTokens}`,
      { param: 'min_tokens' },
    )
  }
  // A configured default must never turn a valid request into an error: it yields to the caller's max.
  if (minTokens === undefined && d.min_tokens !== undefined) minTokens = Math.min(d.min_tokens, maxTokens)

  const stop = req.stop ?? d.stop
  // Only set params become keys (no `key: undefined`), always in this order: consumers that enumerate
  // keys (upstream bodies, cache keys, logs) then see one shape whatever the caller's key order was.
  const params: SamplingParams = { max_tokens: maxTokens }
  put(params, 'n', n)
  put(params, 'best_of', bestOf)
  put(params, 'temperature', req.temperature ?? d.temperature)
  put(params, 'top_p', req.top_p ?? d.top_p)
  put(params, 'top_k', req.top_k ?? d.top_k)
  put(params, 'min_p', req.min_p ?? d.min_p)
  put(params, 'presence_penalty', req.presence_penalty ?? d.presence_penalty)
  put(params, 'frequency_penalty', req.frequency_penalty ?? d.frequency_penalty)
  put(params, 'repetition_penalty', req.repetition_penalty ?? d.repetition_penalty)
  put(params, 'length_penalty', req.length_penalty)
  put(params, 'stop', stop == null ? undefined : typeof stop === 'string' ? [stop] : [...stop])
  put(params, 'stop_token_ids', req.stop_token_ids)
  put(params, 'ignore_eos', req.ignore_eos)
  put(params, 'min_tokens', minTokens)
  put(params, 'skip_special_tokens', req.skip_special_tokens)
  put(params, 'spaces_between_special_tokens', req.spaces_between_special_tokens)
  put(params, 'include_stop_str_in_output', req.include_stop_str_in_output)
  put(params, 'seed', req.seed ?? d.seed)
  return params
}

/**
 * The caller's `max_tokens` (or its alias `max_completion_tokens`), refused above the model's cap;
 * else the model's default, clamped to the cap.
 */
function resolveMaxTokens(req: ChatCompletionRequest | CompletionRequest, model: ModelConfig, alias: string): number {
  const maxTokens = req.max_tokens ?? undefined
  const maxCompletionTokens = req.max_completion_tokens ?? undefined
  if (maxTokens !== undefined && maxCompletionTokens !== undefined && maxTokens !== maxCompletionTokens) {
    throw new GatewayError(
      'invalid_request',
      `'max_tokens' (${maxTokens}) and 'max_completion_tokens' (${maxCompletionTokens}) are aliases: send one of them`,
      { param: 'max_completion_tokens' },
    )
  }
  const asked = maxTokens ?? maxCompletionTokens
  if (asked === undefined) {
    return Math.min(model.defaultMaxTokens ?? model.defaults.max_tokens ?? FALLBACK_MAX_TOKENS, model.maxTokensCap)
  }
  if (asked > model.maxTokensCap) {
    // Name the field the caller actually sent, so the error points at their own code.
    const param = maxTokens !== undefined ? 'max_tokens' : 'max_completion_tokens'
    throw new GatewayError(
      'invalid_request',
      `'${param}' must be at most ${model.maxTokensCap} for model '${alias}', got ${asked}`,
      { param },
    )
  }
  return asked
}

function put<K extends keyof SamplingParams>(
  target: SamplingParams,
  key: K,
  value: SamplingParams[K] | null | undefined,
): void {
  if (value != null) target[key] = value
}

function tooMany(param: 'n' | 'best_of', value: number, max: number, alias: string): GatewayError {
  return new GatewayError('invalid_request', `'${param}' must be at most ${max} for model '${alias}', got ${value}`, {
    param,
  })
}
