/**
 * One behavioural suite, run against both quota stores (KV and the strict Durable Object), then the
 * KV store's own guarantees: its write rate per KV key, its KV reads per request, and its documented
 * overshoot bound with several isolates (simulated as several store instances over one namespace).
 */
import { env, runInDurableObject } from 'cloudflare:test'
import { describe, expect, it } from 'vitest'
import { KvQuotaStore } from '../src/quota/kv-store.ts'
import { StrictQuotaStore } from '../src/quota/strict-store.ts'
import type { QuotaPolicy } from '../src/quota/policy.ts'
import type { QuotaStore, ReserveResult } from '../src/quota/store.ts'
import { fakeClock, recordingKv } from './quota-sim.ts'
import type { FakeClock } from './quota-sim.ts'

/** 10 s into a UTC day, so minute and day windows are easy to cross on purpose. */
const START = Date.UTC(2026, 0, 5, 0, 0, 10)

interface StoreKind {
  name: string
  /** Store instances standing for isolates that share one key; KV is exact only within one isolate. */
  isolates: number
  make(clock: FakeClock): QuotaStore
}

const KINDS: StoreKind[] = [
  { name: 'kv', isolates: 1, make: (clock) => new KvQuotaStore(env.PODGATE_KV, { now: clock.now, sleep: clock.sleep }) },
  { name: 'strict', isolates: 3, make: () => new StrictQuotaStore(env.PODGATE_QUOTA) },
]

const newKeyId = () => `key_${crypto.randomUUID().replaceAll('-', '').slice(0, 16)}`

/** What a shard published for a key: its newest minute `m` (requests `r`, tokens `t`) and day `d` (`dr`, `dt`). */
async function published(keyId: string, shard: string) {
  return (await env.PODGATE_KV.getWithMetadata<{ m: number; r: number; t: number; d: number; dr: number; dt: number }>(`quota:${keyId}:s:${shard}`)).metadata
}

function admitted(results: ReserveResult[]): number {
  return results.filter((r) => r.ok).length
}

type KvMethod = (...args: never[]) => Promise<unknown>

/** Miniflare's KV with some methods wrapped: `wrap[name](original, ...args)` runs instead of `name`. */
function kvWith(wrap: Partial<Record<'list' | 'getWithMetadata' | 'put', (original: KvMethod, ...args: never[]) => Promise<unknown>>>): KVNamespace {
  return new Proxy(env.PODGATE_KV, {
    get(target, name) {
      const value = Reflect.get(target, name) as unknown
      if (typeof value !== 'function') return value
      const original = (value as KvMethod).bind(target)
      const wrapper = wrap[name as keyof typeof wrap]
      return wrapper ? (...args: never[]) => wrapper(original, ...args) : original
    },
  })
}

describe.each(KINDS)('QuotaStore behaviour: $name', (kind) => {
  function setup(policy: QuotaPolicy) {
    const clock = fakeClock(START)
    const store = kind.make(clock)
    const keyId = newKeyId()
    const reserve = (options: { tokens?: number; stream?: boolean } = {}) =>
      store.reserve({ keyId, policy, cost: { tokens: options.tokens ?? 0, stream: options.stream ?? false }, now: clock.now(), background: clock.background })
    const usage = () => store.usage({ keyId, now: clock.now() })
    return { clock, store, keyId, reserve, usage }
  }

  it('admits exactly the quota under a concurrent burst', async () => {
    const policy = { requestsPerMinute: 7 }
    const clock = fakeClock(START)
    const stores = Array.from({ length: kind.isolates }, () => kind.make(clock))
    const keyId = newKeyId()
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) => stores[i % stores.length]!.reserve({ keyId, policy, cost: { tokens: 0, stream: false }, now: clock.now(), background: clock.background })),
    )
    expect(admitted(results)).toBe(7)
    expect(results.filter((r) => !r.ok).every((r) => !r.ok && r.exceeded === 'rpm')).toBe(true)
  })

  it('a refusal changes nothing', async () => {
    const { reserve, usage } = setup({ requestsPerMinute: 2, tokensPerMinute: 100 })
    expect((await reserve({ tokens: 60 })).ok).toBe(true)
    const before = await usage()
    const refused = await reserve({ tokens: 60 })
    expect(refused).toMatchObject({ ok: false, exceeded: 'tpm' })
    expect(await usage()).toEqual(before)
    expect((await reserve({ tokens: 40 })).ok).toBe(true)
  })

  it('rolls minute windows over while the day window keeps counting', async () => {
    const { clock, reserve, usage } = setup({ requestsPerMinute: 2, requestsPerDay: 3 })
    expect(admitted([await reserve(), await reserve(), await reserve()])).toBe(2)
    await clock.advance(60_000)
    expect((await reserve()).ok).toBe(true)
    expect(await reserve()).toMatchObject({ ok: false, exceeded: 'rpd' })
    expect(await usage()).toMatchObject({ minuteCounts: { requests: 1 }, dayCounts: { requests: 3 } })
    await clock.advance(86_400_000)
    expect((await reserve()).ok).toBe(true)
  })

  it('settles tokens from real usage: the difference is refunded or charged', async () => {
    const { reserve, usage, store } = setup({ tokensPerMinute: 1000 })
    const first = await reserve({ tokens: 600 })
    if (!first.ok) throw new Error('first reservation refused')
    expect(await reserve({ tokens: 600 })).toMatchObject({ ok: false, exceeded: 'tpm' })
    await store.settle({ reservation: first.reservation, tokens: 100 })
    expect((await usage()).minuteCounts).toEqual({ requests: 1, tokens: 100 })
    expect((await reserve({ tokens: 600 })).ok).toBe(true)
    expect((await usage()).minuteCounts).toEqual({ requests: 2, tokens: 700 })
  })

  it('a refund (settle at 0) gives every reserved token back but keeps the request', async () => {
    const { reserve, usage, store } = setup({ tokensPerDay: 500 })
    const result = await reserve({ tokens: 400 })
    if (!result.ok) throw new Error('refused')
    await store.settle({ reservation: result.reservation, tokens: 0 })
    expect((await usage()).dayCounts).toEqual({ requests: 1, tokens: 0 })
  })

  it("a job's correction is made once: a repeat, at once or later (from another instance too), changes nothing", async () => {
    const { clock, reserve, usage, store } = setup({ tokensPerMinute: 1000 })
    const stores = [store, ...Array.from({ length: kind.isolates - 1 }, () => kind.make(clock))]
    const correct = async (job: string, tokens: number) => {
      const result = await reserve({ tokens: 300 })
      if (!result.ok) throw new Error('refused')
      await Promise.all(stores.map((s) => s.settle({ reservation: result.reservation, tokens, job, background: clock.background })))
      for (const s of stores) await s.settle({ reservation: result.reservation, tokens, job, background: clock.background })
      await clock.advance(0)
    }
    await correct('job-1', 100)
    expect((await usage()).minuteCounts).toEqual({ requests: 1, tokens: 100 })
    // Another job is corrected, once too.
    await correct('job-2', 50)
    expect((await usage()).minuteCounts).toEqual({ requests: 2, tokens: 150 })
  })

  it('a settle after its minute rolled over corrects the day, not the new minute', async () => {
    const { clock, reserve, usage, store } = setup({ tokensPerMinute: 1000, tokensPerDay: 5000 })
    const result = await reserve({ tokens: 300 })
    if (!result.ok) throw new Error('refused')
    await clock.advance(60_000)
    await store.settle({ reservation: result.reservation, tokens: 50 })
    expect(await usage()).toMatchObject({ minuteCounts: { tokens: 0 }, dayCounts: { tokens: 50 } })
  })

  it('holds concurrent streams to the limit and frees a slot on settle', async () => {
    const { reserve, usage, store } = setup({ maxConcurrentStreams: 2 })
    const a = await reserve({ stream: true })
    expect((await reserve({ stream: true })).ok).toBe(true)
    expect(await reserve({ stream: true })).toMatchObject({ ok: false, exceeded: 'streams' })
    expect((await reserve({ stream: false })).ok).toBe(true)
    if (!a.ok) throw new Error('refused')
    await store.settle({ reservation: a.reservation, tokens: 0 })
    expect((await usage()).streams).toBe(1)
    expect((await reserve({ stream: true })).ok).toBe(true)
  })
})

describe('KvQuotaStore across isolates', () => {
  const FLUSH = 1000
  /** Lets the store's promises and miniflare's KV run on (the fake clock stands still). */
  const ticks = async () => {
    for (let i = 0; i < 20; i++) await new Promise((resolve) => setTimeout(resolve, 1))
  }

  function isolates(n: number) {
    const clock = fakeClock(START)
    const { kv, stats } = recordingKv(env.PODGATE_KV, clock.now)
    const stores = Array.from({ length: n }, (_, i) => new KvQuotaStore(kv, { now: clock.now, sleep: clock.sleep, flushIntervalMs: FLUSH, shard: `iso${i}` }))
    return { clock, stats, stores }
  }

  /**
   * Steady traffic: each of N isolates gets one request every 100 ms (r = 10/s) for a whole minute.
   * docs/quotas.md bound: admitted <= limit + (N - 1) * r * (3 * flushInterval + propagation); miniflare's
   * KV propagates at once, so here the bound is limit + (N - 1) * 10 * 3.
   */
  it("a job corrected on one isolate is not corrected again on another once its marker is in KV", async () => {
    const { clock, stores } = isolates(2)
    const keyId = newKeyId()
    const result = await stores[0]!.reserve({ keyId, policy: { tokensPerMinute: 1000 }, cost: { tokens: 300, stream: false }, now: clock.now(), background: clock.background })
    if (!result.ok) throw new Error('refused')
    for (const store of stores) {
      await store.settle({ reservation: result.reservation, tokens: 100, job: 'job-1', background: clock.background })
      await clock.advance(FLUSH)
      await ticks()
    }
    expect(await published(keyId, 'iso0')).toMatchObject({ r: 1, t: 100 })
    // The second isolate found the marker: it counted nothing, so it published nothing.
    expect(await published(keyId, 'iso1')).toBeNull()
    expect(await env.PODGATE_KV.get(`jobsettled:${keyId}:job-1`)).toBe('1')
  })

  it.each([1, 2, 4])('stays within the documented overshoot bound with %i isolate(s)', async (n) => {
    const limit = 50
    const policy = { requestsPerMinute: limit }
    const { clock, stats, stores } = isolates(n)
    const keyId = newKeyId()
    let total = 0
    for (let step = 0; step < 500; step++) {
      const results = await Promise.all(stores.map((s) => s.reserve({ keyId, policy, cost: { tokens: 0, stream: false }, now: clock.now(), background: clock.background })))
      total += admitted(results)
      await clock.advance(100)
    }
    const bound = limit + (n - 1) * 10 * ((3 * FLUSH) / 1000)
    expect(total).toBeGreaterThanOrEqual(limit)
    expect(total).toBeLessThanOrEqual(bound)
    if (n === 1) expect(total).toBe(limit)

    // Hot path: no KV get ever, and at most one list per isolate per flush interval.
    expect(stats.gets).toBe(0)
    expect(stats.lists).toBeLessThanOrEqual(n * (50_000 / FLUSH + 1))
    // No KV key is written twice within a flush interval, and each shard writes one key for both windows.
    for (const times of stats.puts.values()) {
      for (let i = 1; i < times.length; i++) expect(times[i]! - times[i - 1]!).toBeGreaterThanOrEqual(FLUSH)
    }
    expect(stats.puts.size).toBe(n)
  })

  it('a busy key never waits on a list: a view younger than 2 intervals is used while the next list runs', async () => {
    const clock = fakeClock(START)
    let hold: Promise<void> | undefined
    let release = () => {}
    let lists = 0
    // A KV whose list waits until the test releases it, as a slow KV list would.
    const kv = kvWith({
      async list(original, ...args) {
        lists++
        if (hold) await hold
        return original(...args)
      },
    })
    const [mine, other] = [0, 1].map((i) => new KvQuotaStore(kv, { now: clock.now, sleep: clock.sleep, flushIntervalMs: FLUSH, shard: `iso${i}` }))
    const keyId = newKeyId()
    const policy = { requestsPerMinute: 100 }
    const reserve = (store: KvQuotaStore) => store.reserve({ keyId, policy, cost: { tokens: 0, stream: false }, now: clock.now(), background: clock.background })
    // The first request has no view at all: it waits for its list.
    expect((await reserve(mine!)).ok).toBe(true)
    expect(lists).toBe(1)
    // The other isolate admits 5 and publishes them.
    for (let i = 0; i < 5; i++) await reserve(other!)
    await clock.advance(FLUSH)
    await other!.flush()

    // 1.5 intervals on, the view is stale but young: this request is answered while its list hangs.
    const listed = lists
    hold = new Promise<void>((resolve) => (release = resolve))
    await clock.advance(FLUSH / 2)
    let answered = false
    const during = reserve(mine!).then((result) => {
      answered = true
      return result
    })
    for (let i = 0; i < 20 && !answered; i++) await new Promise((resolve) => setTimeout(resolve, 1))
    expect(answered).toBe(true)
    expect(lists).toBe(listed + 1)
    // It counted with the old view (the other shard's 5 not seen yet), and a second request shares the list.
    expect((await during).usage.minuteCounts.requests).toBe(2)
    await reserve(mine!)
    expect(lists).toBe(listed + 1)
    release()
    hold = undefined
    await clock.advance(0)
    // Once the list is in, the next request sees the other shard's counts.
    expect((await reserve(mine!)).usage.minuteCounts.requests).toBe(4 + 5)

    // A view older than 2 intervals is not trusted: the request waits for the list.
    await clock.advance(2 * FLUSH)
    hold = new Promise<void>((resolve) => (release = resolve))
    answered = false
    const late = reserve(mine!).then(() => (answered = true))
    for (let i = 0; i < 20; i++) await new Promise((resolve) => setTimeout(resolve, 1))
    expect(answered).toBe(false)
    release()
    await late
    expect(answered).toBe(true)
  })

  it('a key with a request at least every interval never waits on a list, however the requests fall', async () => {
    const clock = fakeClock(START)
    let hold: Promise<void> | undefined
    const kv = kvWith({
      async list(original, ...args) {
        if (hold) await hold
        return original(...args)
      },
    })
    const store = new KvQuotaStore(kv, { now: clock.now, sleep: clock.sleep, flushIntervalMs: FLUSH, shard: 'iso0' })
    const keyId = newKeyId()
    const reserve = () => store.reserve({ keyId, policy: { requestsPerMinute: 1000 }, cost: { tokens: 0, stream: false }, now: clock.now(), background: clock.background })
    await reserve()
    // Gaps just under the interval, with every list slow: none of these requests waits for one.
    for (const gap of [0.9, 0.99, 0.5, 0.95, 0.99, 0.3, 0.99]) {
      await clock.advance(gap * FLUSH)
      let release = () => {}
      hold = new Promise<void>((resolve) => (release = resolve))
      let answered = false
      const during = reserve().then(() => (answered = true))
      for (let i = 0; i < 10 && !answered; i++) await new Promise((resolve) => setTimeout(resolve, 1))
      expect(answered).toBe(true)
      hold = undefined
      release()
      await during
      await clock.advance(0)
    }
  })

  it('a background list that fails is not retried by every request, but one interval after it began', async () => {
    const clock = fakeClock(START)
    let lists = 0
    let failing = false
    const kv = kvWith({
      async list(original, ...args) {
        lists++
        if (failing) throw new Error('KV list failed')
        return original(...args)
      },
    })
    const store = new KvQuotaStore(kv, { now: clock.now, sleep: clock.sleep, flushIntervalMs: FLUSH, shard: 'iso0' })
    const keyId = newKeyId()
    const reserve = () => store.reserve({ keyId, policy: { requestsPerMinute: 1000 }, cost: { tokens: 0, stream: false }, now: clock.now(), background: clock.background })
    await reserve()
    expect(lists).toBe(1)
    failing = true
    await clock.advance(1.1 * FLUSH)
    // The view is stale but young: answered, while its list fails in the background.
    expect((await reserve()).ok).toBe(true)
    await clock.advance(0)
    expect(lists).toBe(2)
    // Requests in the next interval do not try again.
    for (let i = 0; i < 5; i++) {
      await clock.advance(0.15 * FLUSH)
      expect((await reserve()).ok).toBe(true)
    }
    expect(lists).toBe(2)
    // Past 2F the view is too old to use: the request waits for a list, and sees KV's failure.
    await clock.advance(0.2 * FLUSH)
    await expect(reserve()).rejects.toThrow('KV list failed')
    expect(lists).toBe(3)
    failing = false
    expect((await reserve()).ok).toBe(true)
    expect(lists).toBe(4)
  })

  it('a restore that fails changes nothing and is tried again before any count is published', async () => {
    const clock = fakeClock(START)
    let failGets = 0
    const kv = kvWith({
      async getWithMetadata(original, ...args) {
        if (failGets > 0) {
          failGets--
          throw new Error('KV get failed')
        }
        return original(...args)
      },
    })
    // One key's counters fit in the isolate: a second key evicts the first once it is published.
    const store = new KvQuotaStore(kv, { now: clock.now, sleep: clock.sleep, flushIntervalMs: FLUSH, shard: 'r', maxKeys: 1 })
    const [a, b] = [newKeyId(), newKeyId()]
    const reserve = (keyId: string) => store.reserve({ keyId, policy: { requestsPerMinute: 100 }, cost: { tokens: 10, stream: false }, now: clock.now(), background: clock.background })
    let last: ReserveResult | undefined
    for (let i = 0; i < 5; i++) last = await reserve(a)
    await store.flush()
    await reserve(b)
    // Key a comes back while KV's read fails.
    failGets = 1
    await expect(reserve(a)).rejects.toThrow('KV get failed')
    if (!last?.ok) throw new Error('the last reservation was refused')
    // A settle of a reservation made before the eviction: it must restore first, not publish over the counts.
    await store.settle({ reservation: last.reservation, tokens: 0, background: clock.background })
    await store.flush()
    // Both windows once: the failed read was not applied, nor the one after it twice.
    expect(await published(a!, 'r')).toEqual({ m: last.reservation.minute, r: 5, t: 40, d: last.reservation.day, dr: 5, dt: 40 })
  })

  it('a simultaneous burst overshoots at most (N - 1) x limit, and stops once counters are published', async () => {
    const limit = 20
    const policy = { requestsPerMinute: limit }
    const { clock, stores } = isolates(4)
    const keyId = newKeyId()
    const reserveAll = () => Promise.all(stores.flatMap((s) => Array.from({ length: 30 }, () => s.reserve({ keyId, policy, cost: { tokens: 0, stream: false }, now: clock.now(), background: clock.background }))))
    const burst = admitted(await reserveAll())
    expect(burst).toBeLessThanOrEqual(4 * limit)
    await clock.advance(FLUSH)
    await clock.advance(FLUSH)
    expect(admitted(await reserveAll())).toBe(0)
    const totals = await Promise.all(stores.map((s) => s.usage({ keyId, now: clock.now() })))
    expect(totals.every((u) => u.minuteCounts.requests === burst)).toBe(true)
  })

  it("writes one key a shard for both windows, with a TTL that outlives the day", async () => {
    const clock = fakeClock(START)
    const puts: { name: string; ttl: number | undefined }[] = []
    const kv = kvWith({
      put(original, ...args) {
        const [name, , options] = args as unknown as [string, string, KVNamespacePutOptions | undefined]
        puts.push({ name, ttl: options?.expirationTtl })
        return original(...args)
      },
    })
    const store = new KvQuotaStore(kv, { now: clock.now, sleep: clock.sleep })
    await store.reserve({ keyId: newKeyId(), policy: { requestsPerMinute: 5 }, cost: { tokens: 0, stream: false }, now: clock.now(), background: clock.background })
    await clock.advance(0)
    expect(puts).toHaveLength(1)
    expect(puts[0]!.name).toMatch(/^quota:key_\w+:s:\w+$/)
    expect(puts[0]!.ttl).toBe(86_400 - 10 + 60)
  })

  /**
   * A flush's puts can outlast the interval (a slow KV, or one that refuses late): the next flush must
   * not put the same KV keys meanwhile, or the older, lower count can land last and stay published,
   * so the other isolates under-count the key. The count changes by a reservation or by a settle.
   */
  it.each([
    { change: 'reserve', first: 'lands' },
    { change: 'settle', first: 'lands' },
    { change: 'reserve', first: 'fails' },
  ] as const)('one write per KV key in flight, and the newest count lands last (count changed by $change, first write $first late)', async ({ change, first }) => {
    const clock = fakeClock(START)
    // KV holds this shard's first put (the first flush's) until the test lets it land, or fail; every
    // later put lands at once.
    const held: { name: string; release: () => void }[] = []
    const inFlight = new Map<string, number>()
    let mostInFlight = 0
    let outstanding = 0
    const kv = kvWith({
      async put(original, ...args) {
        const name = (args as unknown as [string])[0]
        inFlight.set(name, (inFlight.get(name) ?? 0) + 1)
        mostInFlight = Math.max(mostInFlight, inFlight.get(name)!)
        outstanding++
        try {
          if (held.length < 1) {
            await new Promise<void>((release) => held.push({ name, release }))
            if (first === 'fails') throw new Error('KV put failed: 429 Too Many Requests')
          }
          return await original(...args)
        } finally {
          inFlight.set(name, inFlight.get(name)! - 1)
          outstanding--
        }
      },
    })
    const errors: unknown[] = []
    const [mine, other] = ['iso0', 'iso1'].map((shard) => new KvQuotaStore(kv, { now: clock.now, sleep: clock.sleep, flushIntervalMs: FLUSH, shard, onWriteError: (error) => errors.push(error) }))
    const keyId = newKeyId()
    const policy = { requestsPerMinute: 4 }
    // Scheduled flushes are not tracked by the clock: its `advance` would wait on the held puts.
    const reserve = (store: KvQuotaStore, tokens: number) => store.reserve({ keyId, policy, cost: { tokens, stream: false }, now: clock.now(), background: () => undefined })

    const admission = await reserve(mine!, 10)
    if (!admission.ok) throw new Error('refused')
    await ticks()
    expect(held.map((h) => h.name)).toEqual([`quota:${keyId}:s:iso0`])

    // Half an interval on, the count grows while the first flush's put is still out.
    await clock.advance(FLUSH / 2)
    if (change === 'reserve') {
      expect((await reserve(mine!, 10)).ok).toBe(true)
      expect((await reserve(mine!, 10)).ok).toBe(true)
    } else {
      await mine!.settle({ reservation: admission.reservation, tokens: 50, background: () => undefined })
    }
    const newest = change === 'reserve' ? { r: 3, t: 30 } : { r: 1, t: 50 }
    // The next flush is due, and still the first one's put is out.
    await clock.advance(FLUSH / 2)
    await ticks()
    for (const h of held) h.release()
    for (let i = 0; i < 200 && outstanding > 0; i++) await ticks()
    await mine!.flush()

    expect(mostInFlight).toBe(1)
    expect(await published(keyId, 'iso0')).toEqual({ m: admission.reservation.minute, ...newest, d: admission.reservation.day, dr: newest.r, dt: newest.t })
    expect(errors).toHaveLength(first === 'fails' ? 1 : 0)
    // The other isolate sees this one's whole count: it admits only what is left of the limit.
    expect((await other!.usage({ keyId, now: clock.now() })).minuteCounts).toEqual({ requests: newest.r, tokens: newest.t })
    const left = policy.requestsPerMinute - newest.r
    expect(admitted(await Promise.all(Array.from({ length: 4 }, () => reserve(other!, 0))))).toBe(left)
  })

  it('a flush whose writes never end holds the next ones back for a minute at most, then is given up on', async () => {
    const clock = fakeClock(START)
    // The first flush's put never answers (its request was cancelled); every later put lands.
    const stuck: ((error: Error) => void)[] = []
    const names: string[] = []
    const kv = kvWith({
      put(original, ...args) {
        names.push((args as unknown as [string])[0])
        if (stuck.length < 1) return new Promise((_, fail) => stuck.push(fail))
        return original(...args)
      },
    })
    const store = new KvQuotaStore(kv, { now: clock.now, sleep: clock.sleep, flushIntervalMs: FLUSH, shard: 'iso0' })
    const keyId = newKeyId()
    const reserve = async () => {
      const result = await store.reserve({ keyId, policy: { requestsPerDay: 100 }, cost: { tokens: 0, stream: false }, now: clock.now(), background: () => undefined })
      await ticks()
      if (!result.ok) throw new Error('refused')
      return result.reservation
    }
    const { day } = await reserve()
    expect(stuck).toHaveLength(1)
    // Within the minute, the flushes due wait for the stuck one: nothing more is written.
    for (const step of [FLUSH, 10 * FLUSH, 40 * FLUSH]) {
      await clock.advance(step)
      await reserve()
      await clock.advance(FLUSH)
      await ticks()
    }
    expect(names).toHaveLength(1)
    // A minute after it began, the next flush no longer waits for it.
    await clock.advance(10 * FLUSH)
    await reserve()
    expect(await published(keyId, 'iso0')).toMatchObject({ d: day, dr: 5, dt: 0 })
    // Should the stuck writes end after all, the flush that waited on them does not start too.
    const written = names.length
    for (const fail of stuck) fail(new Error('The request was cancelled'))
    await ticks()
    expect(names).toHaveLength(written)
  })

  it('a key whose write was given up on is written again by the next flush, though it had no call since', async () => {
    const clock = fakeClock(START)
    // The first put (key a's) never answers; every later put lands.
    let stuck = 0
    const kv = kvWith({
      put(original, ...args) {
        if (stuck++ === 0) return new Promise(() => undefined)
        return original(...args)
      },
    })
    const store = new KvQuotaStore(kv, { now: clock.now, sleep: clock.sleep, flushIntervalMs: FLUSH, shard: 'iso0', maxKeys: 1 })
    const [a, b] = [newKeyId(), newKeyId()]
    const reserve = async (keyId: string) => {
      const result = await store.reserve({ keyId, policy: { requestsPerDay: 100 }, cost: { tokens: 7, stream: false }, now: clock.now(), background: () => undefined })
      await ticks()
      if (!result.ok) throw new Error('refused')
      return result.reservation
    }
    const { day } = await reserve(a)
    // A minute on, only key b is called: its flush gives up on a's write, and writes a's count too.
    await clock.advance(61 * FLUSH)
    await reserve(b)
    await clock.advance(FLUSH)
    await ticks()
    expect(await published(a, 'iso0')).toMatchObject({ d: day, dr: 1, dt: 7 })
    // Nor does the lost write keep a's counters in memory for good: once published, they may be evicted.
    await reserve(newKeyId())
    await clock.advance(FLUSH)
    await ticks()
    expect((await store.usage({ keyId: a, now: clock.now() })).dayCounts).toEqual({ requests: 1, tokens: 7 })
  })

  it("counts what other shards published, an older version's per-window keys too, each in its own window only", async () => {
    const clock = fakeClock(START + 30_000)
    const { minute, day } = { minute: Math.floor(clock.now() / 60_000), day: Math.floor(clock.now() / 86_400_000) }
    const keyId = newKeyId()
    const put = (name: string, metadata: object) => env.PODGATE_KV.put(`quota:${keyId}:${name}`, '', { metadata, expirationTtl: 600 })
    // An isolate of an earlier version (one key per window), and one of this version last minute.
    await put(`m:${minute}:old0`, { r: 3, t: 30 })
    await put(`m:${minute - 1}:old0`, { r: 9, t: 90 })
    await put(`d:${day}:old0`, { r: 12, t: 120 })
    await put('s:new0', { m: minute - 1, r: 4, t: 40, d: day, dr: 4, dt: 40 })
    const store = new KvQuotaStore(env.PODGATE_KV, { now: clock.now, sleep: clock.sleep, flushIntervalMs: FLUSH, shard: 'iso0' })
    const policy = { requestsPerMinute: 5, requestsPerDay: 100 }
    const reserve = () => store.reserve({ keyId, policy, cost: { tokens: 0, stream: false }, now: clock.now(), background: clock.background })
    expect((await store.usage({ keyId, now: clock.now() })).minuteCounts).toEqual({ requests: 3, tokens: 30 })
    expect((await store.usage({ keyId, now: clock.now() })).dayCounts).toEqual({ requests: 16, tokens: 160 })
    expect(admitted(await Promise.all(Array.from({ length: 5 }, reserve)))).toBe(2)
  })
})

describe('StrictQuotaStore stream leases', () => {
  // A stream slot is a lease, so an isolate that dies mid-stream cannot hold it forever; but a live
  // stream may last as long as its call's `timeouts.totalMs` (up to an hour), and a lease that ran out
  // first let a key open more streams than `maxConcurrentStreams`.
  it('holds a slot for the lease the reservation asks for, then lets it expire', async () => {
    const store = new StrictQuotaStore(env.PODGATE_QUOTA)
    const keyId = newKeyId()
    const policy = { maxConcurrentStreams: 1 }
    const reserve = (now: number) => store.reserve({ keyId, policy, cost: { tokens: 0, stream: true, leaseMs: 61 * 60_000 }, now })
    expect((await reserve(START)).ok).toBe(true)
    expect(await reserve(START + 50 * 60_000)).toMatchObject({ ok: false, exceeded: 'streams' })
    expect((await reserve(START + 62 * 60_000)).ok).toBe(true)
  })
})

describe('StrictQuotaStore job corrections', () => {
  // The object wrote its whole state on every reserve and settle, and that state listed the day's corrected
  // jobs (up to 10,000): a busy key rewrote a growing value on each quota call, all day.
  it('keeps each corrected job under a key of its own: the state an ordinary call writes does not grow, and a later day drops earlier marks', async () => {
    const store = new StrictQuotaStore(env.PODGATE_QUOTA)
    const keyId = newKeyId()
    const policy = { tokensPerDay: 1e6 }
    const stored = () => runInDurableObject(env.PODGATE_QUOTA.get(env.PODGATE_QUOTA.idFromName(keyId)), async (_, state) => ({ state: JSON.stringify(await state.storage.get('state')).replace(/\d+/g, '0'), jobs: [...(await state.storage.list({ prefix: 'j' })).keys()] }))
    const correct = async (now: number, job: string) => {
      const result = await store.reserve({ keyId, policy, cost: { tokens: 300, stream: false }, now })
      if (!result.ok) throw new Error('refused')
      await Promise.all([1, 2].map(() => store.settle({ reservation: result.reservation, tokens: 100, job })))
    }
    await correct(START, 'job-first')
    const before = await stored()
    for (let i = 0; i < 20; i++) await correct(START, `job-${'x'.repeat(100)}-${i}`)
    await correct(START, 'job-first')
    const after = await stored()
    expect(after.state).toBe(before.state) // its shape: numbers aside
    expect(after.jobs).toHaveLength(21)
    expect(await store.usage({ keyId, now: START })).toMatchObject({ dayCounts: { requests: 22, tokens: 21 * 100 + 300 } })
    // The next day's first correction drops the day before's marks.
    await correct(START + 86_400_000, 'job-next')
    expect((await stored()).jobs).toEqual([`j${Math.floor(START / 86_400_000) + 1}:job-next`])
  })
})

describe('StrictQuotaStore across locations', () => {
  // A reservation's `now` is read in the calling isolate before its Durable Object call, which can take
  // a far location 100 ms or more: at a window boundary one stamped in the window before arrives after
  // those of the new window.
  it('a reservation stamped just before a window rolled over, arriving late, does not wipe the new window', async () => {
    const store = new StrictQuotaStore(env.PODGATE_QUOTA)
    const keyId = newKeyId()
    const policy = { requestsPerMinute: 2, requestsPerDay: 100 }
    const next = Date.UTC(2026, 0, 5, 0, 1, 0, 20)
    const reserve = (now: number) => store.reserve({ keyId, policy, cost: { tokens: 0, stream: false }, now })
    expect(admitted([await reserve(next), await reserve(next)])).toBe(2)
    // Stamped 50 ms before the minute ended, counted in that minute.
    expect((await reserve(next - 70)).ok).toBe(true)
    expect(await reserve(next + 10)).toMatchObject({ ok: false, exceeded: 'rpm' })
    expect(await store.usage({ keyId, now: next + 10 })).toMatchObject({ minuteCounts: { requests: 2 }, dayCounts: { requests: 3 } })
  })
})

describe('KvQuotaStore onWriteError', () => {
  it('a flush (what the request\'s waitUntil holds) waits for an async onWriteError: its log line is not lost', async () => {
    const clock = fakeClock(Date.UTC(2026, 0, 1))
    const kv = new Proxy(env.PODGATE_KV, {
      get: (target, prop) => (prop === 'put' ? () => Promise.reject(new Error('KV put failed: 429')) : (Reflect.get(target, prop, target) as (...args: unknown[]) => unknown).bind(target)),
    })
    let logged = false
    const store = new KvQuotaStore(kv, {
      now: clock.now,
      sleep: clock.sleep,
      onWriteError: async () => {
        await new Promise((resolve) => setTimeout(resolve, 50))
        logged = true
      },
    })
    const result = await store.reserve({ keyId: 'k_onwriteerror', policy: { requestsPerMinute: 4 }, cost: { tokens: 1, stream: false }, now: clock.now(), background: () => undefined })
    expect(result.ok).toBe(true)
    await store.flush()
    expect(logged).toBe(true)
  })
})
