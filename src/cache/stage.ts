/**
 * The cache stage of the completion pipeline: decides, scopes and looks up; a miss goes to coalescing
 * (`coalesce.ts`), whose leader captures and stores the answer (`capture.ts`); hits are replayed
 * (`replay.ts`).
 *
 * A cacheable request costs one lookup on a miss (Cache API, then KV); the answer it then gets from
 * upstream is recorded from podgate's own output as it streams by and stored off the response path,
 * only once `ctx.outcome` says it ended well. Identical requests arriving meanwhile join that call.
 */
import { decideCaching } from './policy.ts'
import type { CacheDecision } from './policy.ts'
import { waitUntilOf } from '../http/context.ts'
import { coalesceOrLead } from './coalesce.ts'
import { cacheKey } from './key.ts'
import { replay, withCacheHeaders } from './replay.ts'
import { readEntry } from './store.ts'
import type { CacheEntry } from './store.ts'
import type { CompletionContext, CompletionHandler, CompletionStage } from '../pipeline/index.ts'
import type { CacheRun, CacheStageOptions, Plan } from './run.ts'

export type { CacheRun, CacheStageOptions, Plan } from './run.ts'

/** A request cacheable in its scope: the purge generation's read, then its key and lookup (a fresh entry and its age, or none). */
interface Prepared {
  generation: Promise<string>
  lookup: () => Promise<{ plan: Plan; hit: FreshHit | undefined }>
}

/**
 * The stored entry for the plan's key if it is fresh for this request, rendered; a storage failure is a
 * miss, and so is an entry that cannot be rendered (one an older version stored with a missing choice):
 * the miss's answer overwrites it.
 */
async function freshHit(run: CacheRun, ctx: CompletionContext, plan: Plan, decision: CacheableDecision): Promise<FreshHit | undefined> {
  const hit = await readEntry(run.options.tiers(ctx.c), plan.key, waitUntilOf(ctx.c)).catch((error: unknown) => {
    run.log(ctx, { message: 'cache lookup failed', cause: String(error) })
    return undefined
  })
  if (!hit) return undefined
  const age = Math.max(0, run.options.now() - hit.entry.storedAt)
  const fresh = age <= decision.ttlSeconds * 1000 && (decision.maxAgeSeconds === undefined || age <= decision.maxAgeSeconds * 1000)
  try {
    return fresh ? { entry: hit.entry, response: replay(hit.entry.answer, ctx, 'HIT', age) } : undefined
  } catch (error) {
    // Served as a miss, but said: an entry this version cannot replay is a defect to see, not only to survive.
    run.log(ctx, { message: 'cache entry unreadable', cause: String(error) })
    return undefined
  }
}

/** A stored answer fresh enough for the request, and its replay. */
interface FreshHit {
  entry: CacheEntry
  response: Response
}

type CacheableDecision = Extract<CacheDecision, { cacheable: true }>

/**
 * Whose entries a request reads and writes: the caller's key (`scope: 'key'`), or `undefined` for the
 * gateway-wide scope. The one place the cache scope is computed.
 */
function scopeKeyId(options: CacheStageOptions, ctx: CompletionContext): string | undefined {
  return options.scope === 'key' ? ctx.c.get('principal')?.keyId : undefined
}

/**
 * @example
 * stages.push(cacheStage({ settings: () => ({ enabled: true, nonDeterministic: false, ttlSeconds: 300 }),
 *   scope: 'key', tiers: () => ({ cache: caches.default }), kv: (c) => c.env.PODGATE_KV,
 *   generations: new GenerationCache({ ttlMs: 5000, now: Date.now }), maxEntryBytes: 1 << 20,
 *   coalesce: true, now: Date.now }))
 */
export function cacheStage(options: CacheStageOptions): CompletionStage {
  const run: CacheRun = { options, flights: new Map(), log: (ctx, line) => waitUntilOf(ctx.c)(Promise.resolve(options.log?.({ level: 'warn', request_id: ctx.c.get('requestId'), model: ctx.model.alias, ...line }))) }
  const prepared = new WeakMap<CompletionContext, Prepared | null>()

  /** What the stage decides and reads before it looks up, worked out once per request; null: not cacheable. */
  function prepare(ctx: CompletionContext): Prepared | null {
    let ready = prepared.get(ctx)
    if (ready !== undefined) return ready
    ready = null
    const { c, request } = ctx
    const decision = decideCaching({ request, headers: c.req.raw.headers, settings: options.settings(ctx.model) })
    const keyId = scopeKeyId(options, ctx)
    if (decision.cacheable && !(options.scope === 'key' && keyId === undefined)) {
      let generation: Promise<string>
      try {
        generation = options.generations.token(options.kv(c), request.model, keyId, waitUntilOf(c))
      } catch (error) {
        // A binding that throws is this read's failure, met by the stage.
        generation = Promise.reject(error)
      }
      // A token minted with a `sub` reads and writes its end user's entries only; a purge of the key covers them.
      const subject = c.get('principal')?.subject
      const scope = keyId === undefined ? 'shared' : subject ? `key:${keyId}:sub:${subject}` : `key:${keyId}`
      // Awaited by the stage; a stage ahead of it that refuses the request leaves it unawaited.
      generation.catch(() => undefined)
      // The key and the lookup run once, when first asked for: by this stage, or before it by the quota
      // stage, whose token limit refuses a call only if it is not a hit (a hit costs no tokens). A request
      // refused for anything else is never looked up.
      let looked: ReturnType<Prepared['lookup']> | undefined
      const lookup = () =>
        (looked ??= generation.then(async (generation) => {
          const plan = { key: await cacheKey({ request, scope, generation }), ttlSeconds: decision.ttlSeconds }
          return { plan, hit: decision.lookup ? await freshHit(run, ctx, plan, decision) : undefined }
        }))
      ctx.withoutUpstream = () => lookup().then((found) => found.hit !== undefined, () => false)
      ready = { generation, lookup }
    }
    prepared.set(ctx, ready)
    return ready
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

  async function cache(ctx: CompletionContext, next: CompletionHandler): Promise<Response> {
    const cacheable = prepare(ctx)
    if (!cacheable) return withCacheHeaders(await next(ctx), 'BYPASS')
    try {
      await cacheable.generation
    } catch (error) {
      // Without the purge generation a lookup could serve a purged answer: serve this one uncached.
      run.log(ctx, { message: 'cache generation read failed', cause: String(error) })
      return withCacheHeaders(await next(ctx), 'BYPASS')
    }
    // A body the key cannot be made of (nested too deep) is refused here.
    const { plan, hit } = await cacheable.lookup()
    if (hit) {
      ctx.settle({ ok: true, usage: hit.entry.answer.usage, cached: true })
      return hit.response
    }
    return coalesceOrLead(run, ctx, next, plan)
  }
  return cache
}
