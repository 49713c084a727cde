/**
 * Quota arithmetic shared by every store: window indices, the admission decision, and the per-limit
 * view (limit, remaining, reset) that headers and the usage API report. Pure functions only, so the
 * KV store and the Durable Object decide identically.
 */
import type { QuotaPolicy } from './policy.ts'

export const MINUTE_MS = 60_000
export const DAY_MS = 86_400_000

/** A key's counts in one window. */
export interface Counts {
  requests: number
  tokens: number
}

/** What a store knows about a key at one instant: the current windows and open streams. */
export interface QuotaUsage {
  /** `floor(now / 60 s)`: the minute window these counts belong to. */
  minute: number
  minuteCounts: Counts
  /** `floor(now / 1 day)`: the UTC day these counts belong to. */
  day: number
  dayCounts: Counts
  streams: number
}

/** What one request costs at admission. */
export interface QuotaCost {
  tokens: number
  stream: boolean
  /** Longest the stream may last (twice its call's `timeouts.totalMs`, a coalesced twin's wait and own call, and a margin): a strict store's slot lease. Default `STREAM_LEASE_MS`. */
  leaseMs?: number
}

export type LimitName = 'rpm' | 'rpd' | 'tpm' | 'tpd' | 'streams'

export interface LimitState {
  name: LimitName
  limit: number
  used: number
  remaining: number
  /** Seconds until the window resets (streams: 0, they free up as they end). */
  resetSeconds: number
  /** Window length in seconds (streams: 0). */
  windowSeconds: number
}

/** Adds `delta` to the counts of the windows a reservation was made in, when they are still current. */
export function applyDelta(usage: QuotaUsage, at: { minute: number; day: number }, delta: Counts): void {
  if (usage.minute === at.minute) addCounts(usage.minuteCounts, delta)
  if (usage.day === at.day) addCounts(usage.dayCounts, delta)
}

export function windowsAt(now: number): { minute: number; day: number } {
  return { minute: Math.floor(now / MINUTE_MS), day: Math.floor(now / DAY_MS) }
}

/** The usage at `now`: what each of `sources` counts for the windows current then (ids `m:<minute>`, `d:<day>`). */
export function usageAt(now: number, ...sources: ((window: string) => Counts | undefined)[]): QuotaUsage {
  const { minute, day } = windowsAt(now)
  const usage = { minute, minuteCounts: { requests: 0, tokens: 0 }, day, dayCounts: { requests: 0, tokens: 0 }, streams: 0 }
  for (const counts of sources) {
    const m = counts(`m:${minute}`)
    if (m) addCounts(usage.minuteCounts, m)
    const d = counts(`d:${day}`)
    if (d) addCounts(usage.dayCounts, d)
  }
  return usage
}

/** Every configured limit with what is left of it at `now`. */
export function limitStates(policy: QuotaPolicy, usage: QuotaUsage, now: number): LimitState[] {
  const states: LimitState[] = []
  const minuteReset = Math.max(0, Math.ceil(((usage.minute + 1) * MINUTE_MS - now) / 1000))
  const dayReset = Math.max(0, Math.ceil(((usage.day + 1) * DAY_MS - now) / 1000))
  const add = (name: LimitName, limit: number | undefined, used: number, resetSeconds: number, windowSeconds: number) => {
    if (limit !== undefined) states.push({ name, limit, used, remaining: Math.max(0, limit - used), resetSeconds, windowSeconds })
  }
  add('rpm', policy.requestsPerMinute, usage.minuteCounts.requests, minuteReset, 60)
  add('rpd', policy.requestsPerDay, usage.dayCounts.requests, dayReset, 86_400)
  add('tpm', policy.tokensPerMinute, usage.minuteCounts.tokens, minuteReset, 60)
  add('tpd', policy.tokensPerDay, usage.dayCounts.tokens, dayReset, 86_400)
  add('streams', policy.maxConcurrentStreams, usage.streams, 0, 0)
  return states
}

/**
 * The first limit `cost` would break, or null when the request fits every limit. The day limits come
 * first: a call past a minute and a day limit is refused until the day resets, which `Retry-After` says;
 * only a cost larger than the whole minute limit, which no wait lets in, is named before the day's tokens.
 */
export function exceededLimit(policy: QuotaPolicy, usage: QuotaUsage, cost: QuotaCost): LimitName | null {
  if (policy.requestsPerDay !== undefined && usage.dayCounts.requests + 1 > policy.requestsPerDay) return 'rpd'
  // Larger than the whole minute limit, a call never fits: its 429 says so, not to wait for the day.
  if (cost.tokens > (policy.tokensPerMinute ?? Infinity)) return 'tpm'
  // A call that costs no tokens (a cache hit, a passthrough job) is not held to the token limits, even past them.
  if (cost.tokens > 0 && policy.tokensPerDay !== undefined && usage.dayCounts.tokens + cost.tokens > policy.tokensPerDay) return 'tpd'
  if (policy.requestsPerMinute !== undefined && usage.minuteCounts.requests + 1 > policy.requestsPerMinute) return 'rpm'
  if (cost.tokens > 0 && policy.tokensPerMinute !== undefined && usage.minuteCounts.tokens + cost.tokens > policy.tokensPerMinute) return 'tpm'
  if (cost.stream && policy.maxConcurrentStreams !== undefined && usage.streams + 1 > policy.maxConcurrentStreams) return 'streams'
  return null
}

export function addCounts(target: Counts, delta: Counts): void {
  target.requests += delta.requests
  target.tokens += delta.tokens
}
