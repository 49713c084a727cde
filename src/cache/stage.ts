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
import type { CompletionContext, CompletionHandler, CompletionStage } from '../pipeline/index.ts'
import type { CacheRun, CacheStageOptions, Plan } from './run.ts'
import { coalesceOrLead } from './coalesce.ts'
import { cacheKey } from './key.ts'
import { decideCaching } from './policy.ts'
import type { CacheDecision } from './policy.ts'
import { replay, withCacheHeaders } from './replay.ts'
import { readEntry } from './store.ts'

export type { CacheRun, CacheStageOptions, Plan } from './run.ts'

/**
 * @example
 * stages.push(cacheStage({ settings: () => ({ enabled: true, nonDeterministic: false, ttlSeconds: 300 }),
 *   scope: 'key', tiers: () => ({ cache: caches.default }), kv: (c) => c.env.PODGATE_KV,
 *   generations: new GenerationCache({ ttlMs: 5000, now: Date.now }), maxEntryBytes: 1 << 20,
 *   coalesce: true, now: Date.now }))
 */
export function cacheStage(options: CacheStageOptions): CompletionStage {
  const run: CacheRun = { options, flights: new Map(), log: options.log ?? (() => undefined) }
  const prepared = new WeakMap<CompletionContext, Prepared>()

  /** What the stage decides and reads before it looks up, worked out once per request. */
  function prepare(ctx: CompletionContext): Prepared {
    const known = prepared.get(ctx)
    if (known) return known
    const { c, request } = ctx
    const decision = decideCaching({ request, headers: c.req.raw.headers, settings: options.settings(ctx.model) })
    const keyId = scopeKeyId(options, ctx)
    let plan: Prepared = { keyId }
    if (decision.cacheable && !(options.scope === 'key' && keyId === undefined)) {
      let generation: Promise<string>
      try {
        generation = options.generations.token(options.kv(c), request.model, keyId, waitUntilOf(c))
      } catch (error) {
        // A binding that throws is this read's failure, met by the stage.
        generation = Promise.reject(error)
      }
      // Awaited by the stage; a stage ahead of it that refuses the request leaves it unawaited.
      generation.catch(() => undefined)
      plan = { keyId, cacheable: { decision, generation } }
    }
    prepared.set(ctx, plan)
    return plan
  }

  async function cache(ctx: CompletionContext, next: CompletionHandler): Promise<Response> {
    const { c, request } = ctx
    const { keyId, cacheable } = prepare(ctx)
    if (!cacheable) return withCacheHeaders(await next(ctx), 'BYPASS')
    const { decision } = cacheable

    let generation: string
    try {
      generation = await cacheable.generation
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
  // The purge generation's KV read, awaited when the isolate has no copy younger than 2 ×
  // `generationCacheMs` (a new isolate's first requests), overlaps the stages ahead of it: the quota
  // stage waits for its own KV list then too.
  cache.warm = (ctx: CompletionContext) => {
    try {
      prepare(ctx)
    } catch {
      // The stage meets the same failure when it runs.
    }
  }
  return cache
}

interface Prepared {
  keyId: string | undefined
  /** Set when the request is cacheable in its scope: the decision, and the purge generation's read. */
  cacheable?: { decision: Extract<CacheDecision, { cacheable: true }>; generation: Promise<string> }
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
