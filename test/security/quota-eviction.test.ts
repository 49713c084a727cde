/**
 * M1: the KV quota store keeps at most `maxKeys` keys' counters in an isolate. Flooding it with more
 * distinct callers than that must not reset a victim's count: eviction only drops counters already
 * published, and a key that comes back reads its own published counts, not KV's lagging `list`.
 */
import { env } from 'cloudflare:test'
import { describe, expect, it } from 'vitest'
import { KvQuotaStore } from '../../src/quota/kv-store.ts'
import { fakeClock } from '../quota-sim.ts'

const START = Date.UTC(2026, 0, 5, 12, 30, 10)

/**
 * Workers KV as it behaves in production: `list` is eventually consistent (here it lags 60 s, KV's
 * documented propagation bound), while a key read back in the location that wrote it is current.
 */
function laggingListKv(now: () => number): KVNamespace {
  const written = new Map<string, number>()
  return new Proxy(env.PODGATE_KV, {
    get(target, property) {
      const value = Reflect.get(target, property)
      if (property === 'put') {
        return (name: string, ...rest: unknown[]) => {
          written.set(name, now())
          return (value as (...a: unknown[]) => Promise<void>).apply(target, [name, ...rest])
        }
      }
      if (property === 'list') {
        return async (options: KVNamespaceListOptions) => {
          const page = await target.list(options)
          return { ...page, keys: page.keys.filter((k) => now() - (written.get(k.name) ?? -Infinity) >= 60_000) }
        }
      }
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
}

describe('M1 KV quota counters under eviction pressure', () => {
  it('quota-eviction: a victim keeps its count when more distinct callers than maxKeys flood the isolate', async () => {
    const clock = fakeClock(START)
    const maxKeys = 8
    const store = new KvQuotaStore(laggingListKv(clock.now), { now: clock.now, sleep: clock.sleep, maxKeys })
    const policy = { requestsPerMinute: 3 }
    const victim = `key_victim${crypto.randomUUID().slice(0, 6)}`
    const reserve = (keyId: string) => store.reserve({ keyId, policy, cost: { tokens: 0, stream: false }, now: clock.now(), background: clock.background })

    for (let i = 0; i < 3; i++) expect((await reserve(victim)).ok).toBe(true)
    expect((await reserve(victim)).ok).toBe(false)
    await clock.advance(1000)

    // Four times the capacity, each caller published before the next wave, so every one is evictable.
    for (let wave = 0; wave < 4; wave++) {
      for (let i = 0; i < maxKeys; i++) expect((await reserve(`tok_flood${wave}x${i}x${victim}`)).ok).toBe(true)
      await clock.advance(1000)
    }

    const again = await reserve(victim)
    expect(again.ok).toBe(false)
    expect(again.usage.minuteCounts.requests).toBe(3)
  })

  it('quota-eviction: counters whose write is still in flight are not evicted', async () => {
    const clock = fakeClock(START)
    const lagging = laggingListKv(clock.now)
    const held: (() => void)[] = []
    // KV answers this shard's writes late: they are in flight while the flood arrives.
    const slowWrites = new Proxy(lagging, {
      get(target, property) {
        const value = Reflect.get(target, property)
        if (property !== 'put') return typeof value === 'function' ? value.bind(target) : value
        return (...args: unknown[]) => new Promise<void>((resolve) => held.push(() => resolve((value as (...a: unknown[]) => Promise<void>).apply(target, args))))
      },
    })
    const store = new KvQuotaStore(slowWrites, { now: clock.now, sleep: clock.sleep, maxKeys: 2 })
    const policy = { requestsPerMinute: 2 }
    const reserve = (keyId: string) => store.reserve({ keyId, policy, cost: { tokens: 0, stream: false }, now: clock.now(), background: clock.background })
    const victim = `key_inflight${crypto.randomUUID().slice(0, 6)}`
    expect((await reserve(victim)).ok).toBe(true)
    expect((await reserve(victim)).ok).toBe(true)
    void store.flush()
    expect(held.length).toBeGreaterThan(0)
    for (let i = 0; i < 10; i++) await reserve(`tok_burst${i}x${victim}`)
    expect((await reserve(victim)).ok).toBe(false)
    for (const release of held.splice(0)) release()
  })
})
