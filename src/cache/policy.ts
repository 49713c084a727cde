/**
 * Whether a request may be answered from, or stored in, podgate's cache: the request's own
 * `Cache-Control` and `x-podgate-cache` headers, its sampling, and the model's cache settings.
 */
import type { NormalizedRequest } from '../normalize/types.ts'

/** The header podgate answers with (`HIT`, `MISS`, `BYPASS`, `COALESCED`) and callers may send (`on`, `off`). */
export const CACHE_HEADER = 'x-podgate-cache'

export type CacheStatus = 'HIT' | 'MISS' | 'BYPASS' | 'COALESCED'

export interface ModelCacheSettings {
  /** Cache this model's answers at all. */
  enabled: boolean
  /** Cache requests that are not deterministic (no `temperature: 0`, no `seed`) too. */
  nonDeterministic: boolean
  ttlSeconds: number
}

export type CacheDecision =
  | { cacheable: false }
  | {
      cacheable: true
      /** `false` on `Cache-Control: no-cache`: skip the lookup, still store the fresh answer. */
      lookup: boolean
      /** From `Cache-Control: max-age=N`: the oldest entry the caller accepts, in seconds. */
      maxAgeSeconds: number | undefined
      ttlSeconds: number
    }

export interface CacheDecisionInput {
  request: NormalizedRequest
  headers: Headers
  settings: ModelCacheSettings
}

/**
 * @example
 * const decision = decideCaching({ request: ctx.request, headers: c.req.raw.headers, settings })
 * if (!decision.cacheable) return next(ctx)
 */
export function decideCaching(input: CacheDecisionInput): CacheDecision {
  const { request, headers, settings } = input
  if (!settings.enabled) return { cacheable: false }
  const directives = parseCacheControl(headers.get('cache-control'))
  if (directives.noStore) return { cacheable: false }
  const optIn = headers.get(CACHE_HEADER)?.trim().toLowerCase()
  if (optIn === 'off') return { cacheable: false }
  if (optIn !== 'on' && !settings.nonDeterministic && !isDeterministic(request)) return { cacheable: false }
  return { cacheable: true, lookup: !directives.noCache, maxAgeSeconds: directives.maxAge, ttlSeconds: settings.ttlSeconds }
}

interface CacheControl {
  noStore: boolean
  noCache: boolean
  maxAge?: number
}

export function parseCacheControl(value: string | null): CacheControl {
  const result: CacheControl = { noStore: false, noCache: false }
  if (!value) return result
  for (const part of value.split(',')) {
    const [rawName = '', rawArg] = part.split('=', 2)
    const name = rawName.trim().toLowerCase()
    if (name === 'no-store') result.noStore = true
    else if (name === 'no-cache') result.noCache = true
    else if (name === 'max-age' && rawArg !== undefined) {
      const seconds = Number(rawArg.trim().replace(/^"|"$/g, ''))
      // `max-age=0` means "nothing stored is fresh enough": a refresh, like no-cache.
      if (Number.isInteger(seconds) && seconds >= 0) result.maxAge = Math.min(result.maxAge ?? seconds, seconds)
    }
  }
  return result
}

/** Embeddings, greedy decoding or a fixed seed: the same request gives the same answer, so a stored one is as good. */
export function isDeterministic(request: NormalizedRequest): boolean {
  return request.kind === 'embedding' || request.sampling.temperature === 0 || request.sampling.seed !== undefined
}
