/**
 * `KvQuotaStore`: quotas in Workers KV, designed around KV's limits (about one write per second per
 * key, eventual consistency, 60 s minimum TTL).
 *
 * Each store instance (one per isolate) is a *shard*: it counts its own admissions exactly in memory and
 * publishes its cumulative counts of the current minute and day as the metadata of one KV key per
 * quota key, at most once per `flushIntervalMs` (written from `waitUntil`, never on the response path). A key's total is its own
 * counts plus the other shards' metadata from one `list({ prefix })`, reused for `flushIntervalMs` F.
 * A view between F and 2F old is still used while a new list runs in the background, so a key with a
 * request at least every F never waits on KV; an older view (or none) is awaited. So there is at most
 * one KV list per key per interval in the background (a failed one is retried F after it began) and no
 * KV key is written more often than once per interval. A view's age counts from when its list began.
 * One flush runs at a time: one that falls due while the last one's writes are out waits for them, so
 * a KV key never has two writes in flight, and the last to land holds the newest count.
 * Storage schema (docs/storage.md):
 *   `quota:<keyId>:s:<shard>`  metadata `{ m, r, t, d, dr, dt }` (minute, its requests and tokens; day,
 *                              its requests and tokens), TTL: the day's end + 60 s
 * One key for both windows halves the writes (KV bills a write as ten reads) and keeps a key's list to
 * one entry per shard. Earlier versions wrote `quota:<keyId>:m:<minute>:<shard>` and
 * `quota:<keyId>:d:<day>:<shard>` (metadata `{ r, t }`); the list still reads them, so the counts of
 * isolates that ran an earlier version count until their keys expire, the day's end at the latest.
 *
 * Accuracy: a shard sees the others' counts at most `3 * flushIntervalMs + KV propagation` late (F
 * before they publish, up to 2F of view age), so a window can overshoot its limit by what the other
 * shards admitted in that time (docs/quotas.md "Accuracy").
 * Concurrent streams are counted per isolate only; use the strict store for an exact stream limit.
 *
 * Memory: at most `maxKeys` keys' counters stay in the isolate. Only a key whose counts are all
 * published (nothing dirty, no write in flight, no open stream) is evicted, so eviction never loses a
 * count; past the bound, new keys wait for the next flush to make room (memory exceeds `maxKeys` by at
 * most the new keys of one flush interval, or of one round of KV writes when KV is slower). A key that
 * comes back after an eviction reads its own published counts with `get` (this shard is their only
 * writer), not from `list`, which can lag by KV's propagation delay and would start the key again from
 * zero.
 */
import { addCounts, applyDelta, DAY_MS, exceededLimit, usageAt, windowsAt } from './limits.ts'
import type { Counts, QuotaUsage } from './limits.ts'
import type { QuotaStore, ReserveInput, ReserveResult, SettleInput } from './store.ts'

/** The window counts a shard's key holds: `s` (both windows), or an older version's one window (`m:<index>`, `d:<index>`). */
function windowCounts(kind: string, { m, r, t, d, dr, dt }: ShardMetadata): Array<[string, Counts]> {
  if (kind !== 's') return [[kind, { requests: r, tokens: t }]]
  return [[`m:${m}`, { requests: r, tokens: t }], [`d:${d}`, { requests: dr ?? 0, tokens: dt ?? 0 }]]
}

/** A flush whose writes are still out this long after it began is given up on (see `flush`). */
const STALLED_FLUSH_MS = 60_000

export interface KvQuotaStoreOptions {
  /** Least time between two writes of this shard's keys, and how long a listed total is trusted, in ms. Default 1000. */
  flushIntervalMs?: number
  /** Clock that paces flushes and list refreshes. Default `Date.now`. */
  now?: () => number
  /** This shard's id (one per isolate). Default: random. */
  shard?: string
  /** Most keys whose counters an isolate keeps in memory. Default 10000. */
  maxKeys?: number
  /** Waits before a paced flush. Default: `setTimeout`. Tests pass one driven by their clock. */
  sleep?: (ms: number) => Promise<void>
  /** Told once per flush whose writes KV refused (they are retried with the next): for the operator's log. Default: nothing. */
  onWriteError?: (error: unknown) => unknown
}

/** One shard's counts: its newest minute (`m`: requests `r`, tokens `t`) and day (`d`: `dr`, `dt`). Earlier versions wrote `{ r, t }` per window. */
interface ShardMetadata {
  m?: number
  r: number
  t: number
  d?: number
  dr?: number
  dt?: number
}

interface KeyState {
  /** This shard's cumulative counts per window id (`m:<minute>`, `d:<day>`). */
  own: Map<string, Counts>
  /** Window ids whose counts changed since the last flush. */
  dirty: Set<string>
  /** The other shards' counts per window id, as of `listedAt`. */
  others: Map<string, Counts>
  listedAt: number
  /** When the last list began, whether or not it succeeded: a failed one is not retried in the background within F. */
  triedAt: number
  listing: Promise<void> | null
  streams: number
  /** Set when this shard evicted counters before: the first refresh reads its own published counts back. */
  restore: boolean
}

export const QUOTA_KEY_PREFIX = 'quota:'
const TTL_MARGIN_SECONDS = 60

/**
 * @example
 * const store = new KvQuotaStore(env.PODGATE_KV) // one per isolate: it is this isolate's shard
 * const result = await store.reserve({ keyId, policy: { requestsPerMinute: 60 }, cost: { tokens: 512, stream: false }, now: Date.now(), background: (p) => ctx.waitUntil(p) })
 * if (result.ok) await store.settle({ reservation: result.reservation, tokens: 230 })
 */
export class KvQuotaStore implements QuotaStore {
  readonly kind = 'kv'
  declare readonly shard: string
  readonly #kv: KVNamespace
  readonly #interval: number
  readonly #now: () => number
  readonly #maxKeys: number
  readonly #sleep: (ms: number) => Promise<void>
  readonly #onWriteError: ((error: unknown) => unknown) | undefined
  readonly #keys = new Map<string, KeyState>()
  #lastFlush = -Infinity
  #flushScheduled = false
  /** The flush whose writes are out, and the one that starts once they have all landed or failed. */
  #flushing: Promise<void> | null = null
  #nextFlush: Promise<void> | null = null
  /**
   * The keys whose writes are out (one flush's: flushes run one at a time), with the windows each write
   * published. Such a key is not evicted until its write lands.
   */
  #out = new Map<KeyState, string[]>()
  /** Whether any key's counters were evicted: new keys may then have published counts of this shard. */
  #evicted = false
  /** The markers of the jobs this isolate corrected (forgotten past 10,000). */
  #jobs = new Set<string>()

  constructor(kv: KVNamespace, options: KvQuotaStoreOptions = {}) {
    this.#kv = kv
    this.#interval = options.flushIntervalMs ?? 1000
    this.#now = options.now ?? Date.now
    this.#maxKeys = options.maxKeys ?? 10_000
    this.#sleep = options.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)))
    this.#onWriteError = options.onWriteError
    this.shard = options.shard ?? crypto.randomUUID().replaceAll('-', '').slice(0, 16)
  }

  async settle(input: SettleInput): Promise<void> {
    const { reservation } = input
    const state = this.#state(reservation.keyId)
    // Counters evicted meanwhile come back first, so this correction is not published over them.
    if (state.restore) await this.#refresh(reservation.keyId, state)
    if (reservation.stream) state.streams = Math.max(0, state.streams - 1)
    const tokens = input.tokens - reservation.tokens
    const requests = input.release ? -1 : 0
    if (tokens === 0 && requests === 0) return
    const job = input.job && `jobsettled:${reservation.keyId}:${input.job}`
    if (job) {
      // This isolate's corrections exactly; another's once KV shows its marker (docs/quotas.md).
      if (this.#jobs.has(job)) return
      if (this.#jobs.add(job).size > 1e4) this.#jobs.clear()
      if (await this.#kv.get(job)) return
      input.background?.(this.#kv.put(job, '1', { expirationTtl: 90_000 }))
    }
    this.#add(state, reservation, { requests, tokens })
    this.#scheduleFlush(input.background)
  }

  async usage(input: { keyId: string; now: number }): Promise<QuotaUsage> {
    const state = this.#state(input.keyId)
    await this.#refresh(input.keyId, state)
    return this.#usageOf(state, input.now)
  }

  /**
   * Writes every changed shard counter: now, or once the flush whose writes are out has ended. Two puts
   * of one KV key in flight can land out of order and leave the older, lower count published, so one
   * flush runs at a time and the calls made meanwhile share the one that follows. The store calls it
   * itself, paced; tests call it to publish.
   */
  flush(): Promise<void> {
    if (this.#flushing && this.#now() - this.#lastFlush >= STALLED_FLUSH_MS) {
      // Writes out this long will not end (the request they ran in was cancelled, or KV never answered):
      // waiting on them would stop this shard publishing, and evicting, for good. Their keys are written
      // again by the flush that starts now, whether or not they were called since.
      this.#flushing = this.#nextFlush = null
      for (const [state, changed] of this.#out) for (const id of changed) state.dirty.add(id)
      this.#out.clear()
    }
    if (this.#nextFlush) return this.#nextFlush
    if (!this.#flushing) return this.#startFlush()
    const next: Promise<void> = this.#flushing.then(() => {
      if (this.#nextFlush !== next) return // given up on while it waited: a later flush wrote instead
      this.#nextFlush = null
      return this.#startFlush()
    })
    this.#nextFlush = next
    return next
  }

  /**
   * Brings the others' counts up to date: nothing while the view is younger than F; a list in the
   * background while it is younger than 2F (given `background`, i.e. on a request's path); else a list
   * awaited. A key new to this isolate (evicted and restored, or never seen) has no view: it waits.
   * Concurrent requests in this isolate share one list.
   */
  async #refresh(keyId: string, state: KeyState, background?: ReserveInput['background']): Promise<void> {
    const now = this.#now()
    const age = now - state.listedAt
    if (age < this.#interval) return
    const inBackground = background !== undefined && age < 2 * this.#interval
    let listing = state.listing
    if (!listing) {
      // A background list that failed is tried again F after it began, not by every request meanwhile.
      if (inBackground && now - state.triedAt < this.#interval) return
      state.triedAt = now
      listing = state.listing = this.#list(keyId, state).finally(() => (state.listing = null))
      // The list is this request's I/O and other requests may await it: keep the request alive until it
      // settles, even if its caller leaves, or it could be cancelled with the request and never settle.
      background?.(listing.catch(() => undefined))
    }
    // A failed background list leaves the view as it was.
    if (inBackground) return
    await listing
  }

  #startFlush(): Promise<void> {
    const run = this.#write()
    // The next flush waits for the writes, whether or not the operator's `onWriteError` threw.
    const flushing: Promise<void> = run
      .catch(() => undefined)
      .then(() => {
        if (this.#flushing === flushing) this.#flushing = null
      })
    this.#flushing = flushing
    return run
  }

  async #write(): Promise<void> {
    const now = this.#now()
    this.#lastFlush = now
    const writes: Promise<void>[] = []
    let failure: unknown
    const out = (this.#out = new Map())
    for (const [keyId, state] of this.#keys) {
      if (!state.dirty.size) continue
      const changed = [...state.dirty]
      state.dirty.clear()
      // The newest minute and day this shard counted in: an older one's late correction no longer counts.
      let minute = -1
      let day = -1
      for (const id of state.own.keys()) {
        const index = Number(id.slice(2))
        if (id[0] === 'm') minute = Math.max(minute, index)
        else day = Math.max(day, index)
      }
      const m = state.own.get(`m:${minute}`)
      const d = state.own.get(`d:${day}`)
      const metadata: ShardMetadata = { m: minute, r: m?.requests ?? 0, t: m?.tokens ?? 0, d: day, dr: d?.requests ?? 0, dt: d?.tokens ?? 0 }
      const expirationTtl = Math.max(TTL_MARGIN_SECONDS, Math.ceil(((day + 1) * DAY_MS - now) / 1000) + TTL_MARGIN_SECONDS)
      out.set(state, changed)
      writes.push(
        this.#kv.put(shardKey(keyId, this.shard), '', { metadata, expirationTtl }).then(
          () => void out.delete(state),
          (error: unknown) => {
            failure = error
            // A failed write (e.g. KV's own rate limit) is retried with the next flush, unless given up on already.
            if (out.delete(state)) for (const id of changed) state.dirty.add(id)
          },
        ),
      )
    }
    await Promise.all(writes)
    // Unpublished counts hold the key's other isolates to their own share only: the operator must know.
    if (failure !== undefined) await this.#onWriteError?.(failure)
  }

  #scheduleFlush(background: ReserveInput['background']): void {
    if (this.#flushScheduled) return
    this.#flushScheduled = true
    const wait = Math.max(0, this.#lastFlush + this.#interval - this.#now())
    const run = (wait > 0 ? this.#sleep(wait) : Promise.resolve()).then(() => {
      // Cleared when due, not when its writes begin: a run held behind a stalled flush must not keep later
      // requests from scheduling the one that gives up on it.
      this.#flushScheduled = false
      return this.flush()
    })
    if (background) background(run)
    else void run.catch(() => undefined)
  }

  async #list(keyId: string, state: KeyState): Promise<void> {
    const started = this.#now()
    if (state.restore) {
      await this.#restoreOwn(keyId, state)
      // Only once restored: a failed restore is tried again by the next list, before any count is published.
      state.restore = false
    }
    const prefix = `${QUOTA_KEY_PREFIX}${keyId}:`
    const others = new Map<string, Counts>()
    let cursor: string | undefined
    do {
      const page = await this.#kv.list<ShardMetadata>({ prefix, cursor })
      for (const key of page.keys) {
        // `s:<shard>` after the prefix, or an older version's `<m|d>:<index>:<shard>`.
        const rest = key.name.slice(prefix.length)
        const cut = rest.lastIndexOf(':')
        if (cut < 0 || !key.metadata) continue
        const own = rest.slice(cut + 1) === this.shard
        for (const [id, counts] of windowCounts(rest.slice(0, cut), key.metadata)) {
          // Our own published counts: memory is ahead of them, unless the key's state was evicted.
          if (own) {
            if (!state.own.has(id)) state.own.set(id, counts)
            continue
          }
          const sum = others.get(id)
          if (sum) addCounts(sum, counts)
          else others.set(id, counts)
        }
      }
      cursor = page.list_complete ? undefined : page.cursor
    } while (cursor)
    state.others = others
    // The view is as old as the list's start: what other shards published after it began is not in it.
    state.listedAt = started
  }

  /**
   * Reads back what this shard published for the key's current windows before it evicted the key. Both
   * reads land before either is applied, so a failed restore changes nothing and can be tried again.
   */
  async #restoreOwn(keyId: string, state: KeyState): Promise<void> {
    const { minute, day } = windowsAt(this.#now())
    const { metadata } = await this.#kv.getWithMetadata<ShardMetadata>(shardKey(keyId, this.shard))
    if (!metadata) return
    for (const [id, published] of windowCounts('s', metadata)) {
      if (id !== `m:${minute}` && id !== `d:${day}`) continue
      const counts = state.own.get(id)
      // Requests admitted meanwhile in this isolate are added on top of what was published.
      if (counts) addCounts(counts, published)
      else state.own.set(id, published)
    }
  }

  #usageOf(state: KeyState, now: number): QuotaUsage {
    const usage = usageAt(now, (id) => state.own.get(id), (id) => state.others.get(id))
    usage.streams = state.streams
    this.#prune(state, `m:${usage.minute}`, `d:${usage.day}`)
    return usage
  }

  #add(state: KeyState, at: { minute: number; day: number }, delta: Counts): void {
    for (const id of [`m:${at.minute}`, `d:${at.day}`]) {
      const counts = state.own.get(id)
      if (counts) addCounts(counts, delta)
      else state.own.set(id, { ...delta })
      state.dirty.add(id)
    }
  }

  /** Past windows no longer count; their counters go once published. */
  #prune(state: KeyState, minute: string, day: string): void {
    for (const id of state.own.keys()) {
      if (id !== minute && id !== day && !state.dirty.has(id)) state.own.delete(id)
    }
  }

  #state(keyId: string): KeyState {
    let state = this.#keys.get(keyId)
    if (state) return state
    if (this.#keys.size >= this.#maxKeys) this.#evictIdle()
    state = { own: new Map(), dirty: new Set(), others: new Map(), listedAt: -Infinity, triedAt: -Infinity, listing: null, streams: 0, restore: this.#evicted }
    this.#keys.set(keyId, state)
    return state
  }

  /** Drops the oldest key whose counts are all published; none such: keeps them all (the next flush makes room). */
  #evictIdle(): void {
    for (const [keyId, state] of this.#keys) {
      if (state.dirty.size === 0 && !this.#out.has(state) && state.streams === 0 && !state.listing && !state.restore) {
        this.#keys.delete(keyId)
        this.#evicted = true
        return
      }
    }
  }

  async reserve(input: ReserveInput): Promise<ReserveResult> {
    const state = this.#state(input.keyId)
    await this.#refresh(input.keyId, state, input.background)
    const usage = this.#usageOf(state, input.now)
    const exceeded = exceededLimit(input.policy, usage, input.cost)
    if (exceeded) return { ok: false, exceeded, usage }
    const delta = { requests: 1, tokens: input.cost.tokens }
    this.#add(state, usage, delta)
    applyDelta(usage, usage, delta)
    if (input.cost.stream) {
      state.streams++
      usage.streams++
    }
    this.#scheduleFlush(input.background)
    return { ok: true, reservation: { keyId: input.keyId, minute: usage.minute, day: usage.day, tokens: input.cost.tokens, stream: input.cost.stream }, usage }
  }
}

function shardKey(keyId: string, shard: string): string {
  return `${QUOTA_KEY_PREFIX}${keyId}:s:${shard}`
}
