/**
 * Runpod's per-endpoint rate limits (shared/runpod-api.md §1): requests per 10 s and requests at once, per
 * op; past either, HTTP 429 with an opaque body. Off unless an endpoint sets `rateLimitScale` (1: Runpod's
 * numbers; 0.01: a hundredth of them, at least one, so a test or `npm run dev` can reach them).
 */
import type { EmulatorOp } from './types.ts'

/** Requests per 10 s and at once, per endpoint. `status-sync` (undocumented) is held to `status`'s numbers, in a bucket of its own. */
export const RUNPOD_RATE_LIMITS: Partial<Record<EmulatorOp, { perTenSeconds: number; atOnce: number }>> = {
  runsync: { perTenSeconds: 2000, atOnce: 400 },
  run: { perTenSeconds: 1000, atOnce: 200 },
  status: { perTenSeconds: 2000, atOnce: 400 },
  'status-sync': { perTenSeconds: 2000, atOnce: 400 },
  stream: { perTenSeconds: 2000, atOnce: 400 },
  cancel: { perTenSeconds: 100, atOnce: 20 },
  openai: { perTenSeconds: 2000, atOnce: 400 },
}

const WINDOW_MS = 10_000

interface Bucket {
  /** When each request of the last 10 s arrived, oldest first. */
  arrivals: number[]
  /** Requests whose handler has not answered yet (a long poll counts while it waits). */
  inFlight: number
}

export class RateLimits {
  #buckets = new Map<string, Bucket>()

  /**
   * Admits one request of `op` at `now` under `scale`, or returns false (answer 429). An admitted
   * request must call the returned `done` when its handler answered.
   */
  admit(endpointId: string, op: EmulatorOp, scale: number, now: number): (() => void) | false {
    const limits = RUNPOD_RATE_LIMITS[op]
    if (!limits || !(scale > 0)) return () => {}
    const key = `${endpointId} ${op}`
    let bucket = this.#buckets.get(key)
    if (!bucket) this.#buckets.set(key, (bucket = { arrivals: [], inFlight: 0 }))
    let expired = 0
    while (expired < bucket.arrivals.length && bucket.arrivals[expired]! <= now - WINDOW_MS) expired++
    if (expired > 0) bucket.arrivals.splice(0, expired)
    const perWindow = Math.max(1, Math.floor(limits.perTenSeconds * scale))
    const atOnce = Math.max(1, Math.floor(limits.atOnce * scale))
    if (bucket.arrivals.length >= perWindow || bucket.inFlight >= atOnce) return false
    bucket.arrivals.push(now)
    bucket.inFlight++
    const held = bucket
    let released = false
    return () => {
      if (released) return
      released = true
      held.inFlight--
    }
  }

  reset(): void {
    this.#buckets.clear()
  }
}
