/**
 * Test helpers for quota stores: a fake clock whose timers the test advances, and a KV namespace
 * wrapper that records every operation (with the fake time of each write).
 */

export interface FakeClock {
  now: () => number
  sleep: (ms: number) => Promise<void>
  /** Background work started by stores; `advance` waits for what can finish at the new time. */
  background: (promise: Promise<unknown>) => void
  advance(ms: number): Promise<void>
}

export function fakeClock(start: number): FakeClock {
  let time = start
  const timers: { at: number; resolve: () => void }[] = []
  const pending = new Set<Promise<unknown>>()
  const clock: FakeClock = {
    now: () => time,
    sleep: (ms) => new Promise<void>((resolve) => timers.push({ at: time + ms, resolve })),
    background(promise) {
      const tracked = promise.finally(() => pending.delete(tracked))
      pending.add(tracked)
    },
    async advance(ms) {
      time += ms
      for (const timer of timers.filter((t) => t.at <= time)) {
        timers.splice(timers.indexOf(timer), 1)
        timer.resolve()
      }
      // Quiescent when every unfinished background task waits on a timer that has not fired.
      for (let spins = 0; pending.size > timers.length && spins < 1000; spins++) await new Promise((r) => setTimeout(r, 1))
    },
  }
  return clock
}

export interface KvStats {
  puts: Map<string, number[]>
  lists: number
  gets: number
}

export function recordingKv(kv: KVNamespace, now: () => number): { kv: KVNamespace; stats: KvStats } {
  const stats: KvStats = { puts: new Map(), lists: 0, gets: 0 }
  const wrapped = new Proxy(kv, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property)
      if (typeof value !== 'function') return value
      return (...args: unknown[]) => {
        if (property === 'put') {
          const name = String(args[0])
          stats.puts.set(name, [...(stats.puts.get(name) ?? []), now()])
        } else if (property === 'list') stats.lists++
        else if (property === 'get' || property === 'getWithMetadata') stats.gets++
        return (value as (...a: unknown[]) => unknown).apply(target, args)
      }
    },
  })
  return { kv: wrapped, stats }
}
