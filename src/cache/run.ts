/**
 * The cache stage's options and what its parts (lookup, capture, coalescing, replay) share. Types only,
 * so each part imports them without importing the stage that runs the parts.
 */
import type { Context } from 'hono'
import type { CompletionContext } from '../pipeline/index.ts'
import type { ResolvedModel } from '../routing/models.ts'
import type { GatewayEnv } from '../types.ts'
import type { Flight } from './flight.ts'
import type { CacheKey } from './key.ts'
import type { ModelCacheSettings } from './policy.ts'
import type { CacheTiers, GenerationCache } from './store.ts'

export interface CacheStageOptions {
  /** The cache settings of a model. */
  settings: (model: ResolvedModel) => ModelCacheSettings
  /** `key`: entries per credential (`principal.keyId`); `gateway`: shared by every caller. */
  scope: 'key' | 'gateway'
  /** The tiers a request may use (either may be missing). */
  tiers: (c: Context<GatewayEnv>) => CacheTiers
  /** KV holding purge generations. */
  kv: (c: Context<GatewayEnv>) => KVNamespace
  generations: GenerationCache
  /** Largest entry stored, in bytes of JSON. */
  maxEntryBytes: number
  /** Identical requests in flight share one upstream call. */
  coalesce: boolean
  /** The cache's clock, in ms. */
  now: () => number
  /** Where storage failures are reported (they never fail a request); a promise it returns is held by the request's waitUntil. */
  log?: (line: Record<string, unknown>) => void
}

/** Where a cacheable request's answer goes: its key and how long it is kept. */
export interface Plan {
  key: CacheKey
  ttlSeconds: number
}

/** What the stage's parts share: its options, the flights in the air in this isolate, its log. */
export interface CacheRun {
  options: CacheStageOptions
  flights: Map<string, Flight>
  /** Writes a line about a request (level `warn` unless it says), with its id and model as failure lines carry them. */
  log: (ctx: CompletionContext, line: Record<string, unknown>) => void
}
