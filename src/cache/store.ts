/**
 * Where cache entries live: the Cache API (per location, fast) and KV (global), each optional. A KV
 * hit back-fills the Cache API. Writes are the caller's to run off the response path (`waitUntil`).
 *
 * Also owns the purge generations: the Cache API cannot be listed, so every key folds in a generation
 * per model and per scope, kept in KV and cached in the isolate; a purge writes a new generation and
 * both tiers miss from then on.
 */
import type { CachedAnswer } from './answer.ts'
import type { CacheKey } from './key.ts'

export interface CacheEntry {
  v: 1
  /** When the answer was stored, in ms (the cache's clock). */
  storedAt: number
  answer: CachedAnswer
}

/** The tiers one request may use; either may be missing. */
export interface CacheTiers {
  cache?: Cache
  kv?: KVNamespace
}

export interface CacheHit {
  entry: CacheEntry
  tier: 'cache' | 'kv'
}

/** KV refuses an `expirationTtl` under 60 s. */
const KV_MIN_TTL_SECONDS = 60

/**
 * One lookup: the Cache API first, KV only on a Cache API miss. A KV hit is copied into the Cache API
 * through `backfill` (give it `waitUntil`).
 */
export async function readEntry(tiers: CacheTiers, key: CacheKey, backfill: (work: Promise<unknown>) => void): Promise<CacheHit | undefined> {
  if (tiers.cache) {
    const cached = await tiers.cache.match(key.url)
    if (cached) {
      const entry = parseEntry(await cached.text())
      if (entry) return { entry, tier: 'cache' }
    }
  }
  if (tiers.kv) {
    const text = await tiers.kv.get(key.kvKey, 'text')
    const entry = text === null ? undefined : parseEntry(text)
    if (entry && text !== null) {
      if (tiers.cache) backfill(putCacheApi(tiers.cache, key, text, KV_MIN_TTL_SECONDS).catch(() => undefined))
      return { entry, tier: 'kv' }
    }
  }
  return undefined
}

export interface WriteEntryOptions {
  ttlSeconds: number
  /** Entries larger than this (bytes of JSON) are not stored. */
  maxEntryBytes: number
}

/** Stores an entry in every tier. Returns `false` when it is over the size bound. */
export async function writeEntry(tiers: CacheTiers, key: CacheKey, entry: CacheEntry, options: WriteEntryOptions): Promise<boolean> {
  const text = JSON.stringify(entry)
  if (!fitsInBytes(text, options.maxEntryBytes)) return false
  const writes: Promise<unknown>[] = []
  if (tiers.cache) writes.push(putCacheApi(tiers.cache, key, text, options.ttlSeconds))
  if (tiers.kv) writes.push(tiers.kv.put(key.kvKey, text, { expirationTtl: Math.max(KV_MIN_TTL_SECONDS, options.ttlSeconds) }))
  await Promise.all(writes)
  return true
}

/** Whether `text` is at most `maxBytes` of UTF-8, encoding it only when its length leaves that open. */
export function fitsInBytes(text: string, maxBytes: number): boolean {
  // A UTF-16 code unit takes one to three bytes of UTF-8 (a surrogate pair four for its two).
  if (text.length > maxBytes) return false
  return text.length * 3 <= maxBytes || new TextEncoder().encode(text).byteLength <= maxBytes
}

/** `<model gen>.<scope gen>.<scope+model gen>` from the records `token` reads, in its order. */
function tokenOf(model: string, [own, legacy, scope, scopeModel]: (Generations | undefined)[]): string {
  const modelGeneration = own?.own ?? legacy?.models?.[model] ?? 0
  return `${modelGeneration}.${scope?.own ?? 0}.${scopeModel?.own ?? scope?.models?.[model] ?? 0}`
}

function putCacheApi(cache: Cache, key: CacheKey, text: string, ttlSeconds: number): Promise<void> {
  const headers = { 'content-type': 'application/json', 'cache-control': `max-age=${Math.max(1, Math.floor(ttlSeconds))}` }
  return cache.put(key.url, new Response(text, { headers }))
}

function parseEntry(text: string): CacheEntry | undefined {
  try {
    const value = JSON.parse(text) as CacheEntry
    return value && value.v === 1 && typeof value.storedAt === 'number' && value.answer ? value : undefined
  } catch {
    return undefined
  }
}

/**
 * Earlier versions kept one record per scope, read, changed and written back by every purge:
 * `cachegen:*` (`{ models }`, purges by model) and `cachegen:key:<keyId>` (`{ all, models }`). They are
 * still read, never written, so purges recorded there keep their effect and the entries stored since
 * keep their keys; a new purge of the same target supersedes them.
 */
const LEGACY_MODEL_GENERATIONS = 'cachegen:*'

/**
 * One KV key per purge target, each holding that target's current generation, written blind: a purge
 * never reads, so purges racing (or a purge reading a stale KV copy) cannot undo one another.
 */
const modelGenerationKey = (model: string) => `cachegen:model:${model}`
const scopeGenerationKey = (keyId: string) => `cachegen:key:${keyId}`
const scopeModelGenerationKey = (keyId: string, model: string) => `cachegen:key:${keyId}:model:${model}`

function purgeTargetKey({ model, keyId }: { model?: string; keyId?: string }): string {
  if (keyId !== undefined) return model === undefined ? scopeGenerationKey(keyId) : scopeModelGenerationKey(keyId, model)
  if (model !== undefined) return modelGenerationKey(model)
  throw new Error('GenerationCache.bump: give a model, a keyId or both.')
}

/** A generation key's value as read: a generation, or (before per-target keys) a record of several. */
interface Generations {
  /** The target's own generation; for a legacy key record, its `all`. */
  own?: string
  /** Per model, from a legacy record only. */
  models?: Record<string, string>
}

function parseGenerations(text: string | null): Generations {
  if (!text) return {}
  // Generations are random hex; only a legacy record is JSON.
  if (!text.startsWith('{')) return { own: text }
  try {
    const legacy = JSON.parse(text) as { all?: string; models?: Record<string, string> }
    return { own: legacy.all, models: legacy.models }
  } catch {
    return {}
  }
}

export interface GenerationCacheOptions {
  /**
   * How long the isolate trusts a generation it read, in ms. For another `ttlMs` after that, a request
   * still uses it while a read from `waitUntil` refreshes it, so a purge reaches other isolates within
   * 2 × `ttlMs` on top of KV's propagation.
   */
  ttlMs: number
  now: () => number
}

/** Most generation keys the isolate keeps; past it the map starts over. */
const MAX_CACHED_RECORDS = 10_000

export class GenerationCache {
  /** `triedAt`: when a background read of a stale value began; one that failed is not retried within `ttlMs`. */
  readonly #records = new Map<string, { record: Generations; until: number; triedAt?: number }>()
  /** Reads in flight, one per KV key: concurrent requests share it. */
  readonly #reading = new Map<string, Promise<Generations>>()
  /**
   * The purges made in this isolate, numbered, with the generation each wrote: a read that began before
   * one returns that generation instead of what it read, which may predate the purge's write.
   */
  readonly #bumps = new Map<string, { seq: number; record: Generations }>()
  #bumpSeq = 0
  readonly #options: GenerationCacheOptions

  constructor(options: GenerationCacheOptions) {
    this.#options = options
  }

  /** Trusted for `ttlMs` from `since`: a read's record is as old as the read's start. */
  #remember(name: string, record: Generations, since = this.#options.now()): void {
    if (this.#records.size >= MAX_CACHED_RECORDS) this.#records.clear()
    this.#records.set(name, { record, until: since + this.#options.ttlMs })
  }

  /**
   * Starts a new generation: for `model` everywhere, for a key's whole scope, or for one model in a
   * key's scope. This isolate sees it at once; others within twice their `ttlMs` plus KV's propagation.
   */
  async bump(kv: KVNamespace, target: { model?: string; keyId?: string }): Promise<void> {
    const name = purgeTargetKey(target)
    // Random, not a counter: it must differ from every generation before it without reading them.
    const generation = crypto.randomUUID().slice(0, 8)
    // A whole key's purge keeps the earlier record's JSON form, which an earlier version still running
    // beside this one (a gradual deployment) reads as its `all`, and can still write over.
    await kv.put(name, target.keyId !== undefined && target.model === undefined ? JSON.stringify({ all: generation }) : generation)
    const record: Generations = { own: generation }
    if (this.#bumps.size >= MAX_CACHED_RECORDS) this.#bumps.clear()
    this.#bumps.set(name, { seq: ++this.#bumpSeq, record })
    this.#remember(name, record)
  }

  async #read(kv: KVNamespace, name: string, background?: (promise: Promise<unknown>) => void): Promise<Generations> {
    const cached = this.#records.get(name)
    const now = this.#options.now()
    if (cached && cached.until > now) return cached.record
    const inBackground = cached !== undefined && background !== undefined && cached.until + this.#options.ttlMs > now
    let reading = this.#reading.get(name)
    if (!reading) {
      if (inBackground) {
        if (cached.triedAt !== undefined && now - cached.triedAt < this.#options.ttlMs) return cached.record
        cached.triedAt = now
      }
      reading = this.#fetch(kv, name).finally(() => this.#reading.delete(name))
      this.#reading.set(name, reading)
      // The read is this request's I/O and other requests may await it: keep the request alive until it
      // settles, even if its caller leaves, or it could be cancelled with the request and never settle.
      background?.(reading.catch(() => undefined))
    }
    // A failed background read leaves the record as it was.
    if (inBackground) return cached.record
    return reading
  }

  /**
   * The generation folded into cache keys for `model` in a key's scope (or the shared scope when
   * `keyId` is undefined): `<model>.<scope>.<scope+model>`, `0` where never purged. The KV keys that
   * apply (two, four in a key's scope, one of them the legacy record every request shares) are read in
   * parallel, each cached in the isolate for `ttlMs`; with `background` (a request's `waitUntil`), a
   * value stale by less than another `ttlMs` is used while it is read again from there, so a busy
   * isolate does not wait on KV for it.
   */
  token(kv: KVNamespace, model: string, keyId: string | undefined, background?: (promise: Promise<unknown>) => void): Promise<string> {
    const names = keyId === undefined ? [modelGenerationKey(model), LEGACY_MODEL_GENERATIONS] : [modelGenerationKey(model), LEGACY_MODEL_GENERATIONS, scopeGenerationKey(keyId), scopeModelGenerationKey(keyId, model)]
    // Every record young enough (the busy isolate's case): no read, no await per record.
    const now = this.#options.now()
    const known = names.map((name) => this.#records.get(name))
    if (known.every((entry) => entry !== undefined && entry.until > now)) return Promise.resolve(tokenOf(model, known.map((entry) => entry!.record)))
    return Promise.all(names.map((name) => this.#read(kv, name, background))).then((records) => tokenOf(model, records))
  }

  async #fetch(kv: KVNamespace, name: string): Promise<Generations> {
    const started = this.#options.now()
    const seq = this.#bumpSeq
    const record = parseGenerations(await kv.get(name, 'text'))
    // A purge in this isolate while the read was out wins: the read may predate its write.
    const bump = this.#bumps.get(name)
    if (bump && bump.seq > seq) return bump.record
    this.#remember(name, record, started)
    return record
  }
}
