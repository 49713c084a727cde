/**
 * The cache stage of the completion pipeline: decides, scopes and looks up; a miss goes to coalescing
 * (`coalesce.ts`), whose leader captures and stores the answer (`capture.ts`); hits are replayed
 * (`replay.ts`).
 *
 * A cacheable request costs one lookup on a miss (Cache API, then KV); the answer it then gets from
 * upstream is recorded from podgate's own output as it streams by and stored off the response path,
 * only once `ctx.outcome` says it ended well. Identical requests arriving meanwhile join that call.
 */
import { waitUntilOf } from '../http/context.ts'
import type { CompletionContext, CompletionStage } from '../pipeline/index.ts'
import type { ResolvedModel } from '../routing/models.ts'
import { coalesceOrLead } from './coalesce.ts'
import type { Flight } from './flight.ts'
import { cacheKey } from './key.ts'
import type { CacheKey } from './key.ts'
import { decideCaching } from './policy.ts'
import type { ModelCacheSettings } from './policy.ts'
import { replay, withCacheHeaders } from './replay.ts'
import { readEntry } from './store.ts'
import type { CacheTiers, GenerationCache } from './store.ts'
import type { Context } from 'hono'
import type { GatewayEnv } from '../types.ts'

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
  /** Where storage failures are reported (they never fail a request). */
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
  log: (line: Record<string, unknown>) => void
}

/**
 * @example
 * stages.push(cacheStage({ settings: () => ({ enabled: true, nonDeterministic: false, ttlSeconds: 300 }),
 *   scope: 'key', tiers: () => ({ cache: caches.default }), kv: (c) => c.env.PODGATE_KV,
 *   generations: new GenerationCache({ ttlMs: 5000, now: Date.now }), maxEntryBytes: 1 << 20,
 *   coalesce: true, now: Date.now }))
 */
export function cacheStage(options: CacheStageOptions): CompletionStage {
  const run: CacheRun = { options, flights: new Map(), log: options.log ?? (() => undefined) }

  return async function cache(ctx, next) {
    const { c, request } = ctx
    const decision = decideCaching({ request, headers: c.req.raw.headers, settings: options.settings(ctx.model) })
    const keyId = scopeKeyId(options, ctx)
    if (!decision.cacheable || (options.scope === 'key' && keyId === undefined)) return withCacheHeaders(await next(ctx), 'BYPASS')

    let generation: string
    try {
      generation = await options.generations.token(options.kv(c), request.model, keyId)
    } catch (error) {
      // Without the purge generation a lookup could serve a purged answer: serve this one uncached.
      run.log({ level: 'warn', message: 'cache generation read failed', cause: String(error) })
      return withCacheHeaders(await next(ctx), 'BYPASS')
    }
    // A token minted with a `sub` reads and writes its end user's entries only; a purge of the key covers them.
    const subject = c.get('principal')?.subject
    const scope = keyId === undefined ? 'shared' : subject ? `key:${keyId}:sub:${subject}` : `key:${keyId}`
    const key = await cacheKey({ request, scope, generation })
    const plan: Plan = { key, ttlSeconds: decision.ttlSeconds }

    if (decision.lookup) {
      const hit = await lookup(run, ctx, plan)
      if (hit) {
        const age = Math.max(0, options.now() - hit.storedAt)
        const fresh = age <= decision.ttlSeconds * 1000 && (decision.maxAgeSeconds === undefined || age <= decision.maxAgeSeconds * 1000)
        if (fresh) {
          ctx.settle({ ok: true, usage: hit.answer.usage, cached: true })
          return replay(hit.answer, request, 'HIT', age)
        }
      }
    }
    return coalesceOrLead(run, ctx, next, plan, false)
  }
}

/**
 * Whose entries a request reads and writes: the caller's key (`scope: 'key'`), or `undefined` for the
 * gateway-wide scope. The one place the cache scope is computed.
 */
function scopeKeyId(options: CacheStageOptions, ctx: CompletionContext): string | undefined {
  return options.scope === 'key' ? ctx.c.get('principal')?.keyId : undefined
}

/** The stored entry for the plan's key, or undefined; a storage failure is a miss. */
async function lookup(run: CacheRun, ctx: CompletionContext, plan: Plan) {
  const hit = await readEntry(run.options.tiers(ctx.c), plan.key, waitUntilOf(ctx.c)).catch((error: unknown) => {
    run.log({ level: 'warn', message: 'cache lookup failed', cause: String(error) })
    return undefined
  })
  return hit?.entry
}
