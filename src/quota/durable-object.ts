/**
 * `QuotaObject`: the Durable Object behind strict quotas. It lives in its own module, published as
 * `podgate/durable-objects`, because it imports `cloudflare:workers`, which exists only inside
 * Workers: the main entry point stays importable on Node (tests, tools) while a Worker re-exports
 * this class from its main module.
 *
 * The object keeps its state in memory and persists it to its own (SQLite-backed) storage before it
 * answers; the decision runs without awaiting anything, so no two requests interleave within it.
 * Stream slots are leases that expire when their stream can no longer be running (the reservation's
 * `leaseMs`), so an isolate that dies mid-stream cannot hold a slot forever.
 */
import { DurableObject } from 'cloudflare:workers'
import { addCounts, applyDelta, exceededLimit, usageAt, windowsAt } from './limits.ts'
import type { Counts, QuotaCost, QuotaUsage } from './limits.ts'
import type { QuotaPolicy } from './policy.ts'

/** Longest a stream slot stays taken without a settle, when its reservation names no `leaseMs` (an older version's). */
export const STREAM_LEASE_MS = 30 * 60_000

interface ObjectState {
  /** Counts per window id (`m:<minute>`, `d:<day>`): the current ones, and a past one a late call counted in until the next call drops it. */
  windows: Record<string, Counts>
  /** Open stream leases: id -> expiry (epoch ms). */
  leases: Record<string, number>
}

type ObjectReserveResult = { ok: true; usage: QuotaUsage; lease?: string } | { ok: false; exceeded: NonNullable<ReturnType<typeof exceededLimit>>; usage: QuotaUsage }

export class QuotaObject extends DurableObject<unknown> {
  #state: ObjectState = { windows: {}, leases: {} }

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env)
    void ctx.blockConcurrencyWhile(async () => {
      this.#state = (await ctx.storage.get<ObjectState>('state')) ?? this.#state
    })
  }

  /** The counts of the windows current at `now`; drops windows before them and expired leases. */
  #usageAt(now: number): QuotaUsage {
    const { minute, day } = windowsAt(now)
    // Only past windows go: `now` is read before the call, so one stamped just before a rollover can
    // arrive after calls of the new window, whose counts it must not drop.
    for (const id of Object.keys(this.#state.windows)) {
      if (+id.slice(2) < (id[0] === 'm' ? minute : day)) delete this.#state.windows[id]
    }
    const usage = usageAt(now, (id) => this.#state.windows[id])
    for (const [lease, expires] of Object.entries(this.#state.leases)) {
      if (expires <= now) delete this.#state.leases[lease]
      else usage.streams++
    }
    return usage
  }

  /** Charges `delta` to the given windows if they are still kept (a settle after rollover changes nothing current). */
  #add(at: { minute: number; day: number }, delta: Counts): void {
    for (const id of [`m:${at.minute}`, `d:${at.day}`]) {
      const counts = this.#state.windows[id]
      if (counts) addCounts(counts, delta)
      else if (delta.requests > 0) this.#state.windows[id] = { ...delta }
    }
  }

  usage(input: { now: number }): QuotaUsage {
    return this.#usageAt(input.now)
  }

  async reserve(input: { policy: QuotaPolicy; cost: QuotaCost; now: number }): Promise<ObjectReserveResult> {
    const usage = this.#usageAt(input.now)
    const exceeded = exceededLimit(input.policy, usage, input.cost)
    if (exceeded) return { ok: false, exceeded, usage }
    const delta = { requests: 1, tokens: input.cost.tokens }
    this.#add(usage, delta)
    applyDelta(usage, usage, delta)
    let lease: string | undefined
    if (input.cost.stream) {
      lease = crypto.randomUUID()
      this.#state.leases[lease] = input.now + (input.cost.leaseMs ?? STREAM_LEASE_MS)
      usage.streams++
    }
    await this.ctx.storage.put('state', this.#state)
    return { ok: true, usage, lease }
  }

  /** `requests`: -1 takes back a request that never went upstream (absent in calls from older versions: 0). */
  async settle(input: { minute: number; day: number; tokens: number; requests?: number; lease?: string; job?: string }): Promise<void> {
    if (input.lease !== undefined) delete this.#state.leases[input.lease]
    if (input.job) {
      // A job is corrected once: a key of its own (`j<day>:<job>`) marks it, and a correction drops earlier
      // days' marks (their windows are gone). The input gate holds other calls while these await.
      const storage = this.ctx.storage
      const key = `j${input.day}:${input.job}`
      if (await storage.get(key)) return
      storage.put(key, 1)
      storage.delete([...(await storage.list({ prefix: 'j', end: 'j' + input.day, limit: 128 })).keys()])
    }
    const requests = input.requests ?? 0
    if (input.tokens !== 0 || requests !== 0) this.#add(input, { requests, tokens: input.tokens })
    await this.ctx.storage.put('state', this.#state)
  }
}
