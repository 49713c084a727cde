/**
 * Rate-limit response fields: the IETF `RateLimit-Policy` / `RateLimit` fields
 * (draft-ietf-httpapi-ratelimit-headers) and OpenAI's `x-ratelimit-*` headers, which SDKs and
 * dashboards already read. Sent on every answer of a key with a policy, and with `Retry-After` on a 429.
 */
import { limitStates } from './limits.ts'
import type { LimitName, LimitState, QuotaUsage } from './limits.ts'
import type { QuotaPolicy } from './policy.ts'

export function rateLimitHeaders(policy: QuotaPolicy, usage: QuotaUsage, now: number): Record<string, string> {
  return limitHeaders(limitStates(policy, usage, now))
}

/** Seconds until the refused limit frees up; at least 1 (stream slots free as streams end). */
export function retryAfterSeconds(policy: QuotaPolicy, usage: QuotaUsage, exceeded: LimitName, now: number): number {
  return retryAfterOf(limitStates(policy, usage, now).find((s) => s.name === exceeded))
}

/** OpenAI reports one limit per kind: the one with the least left (the minute one on a tie). */
function tightest(states: LimitState[], minute: LimitName, day: LimitName): LimitState | undefined {
  const m = states.find((s) => s.name === minute)
  const d = states.find((s) => s.name === day)
  if (!m || !d) return m ?? d
  return d.remaining < m.remaining ? d : m
}

function setOpenAITrio(headers: Record<string, string>, kind: 'requests' | 'tokens', state: LimitState | undefined): void {
  if (!state) return
  headers[`x-ratelimit-limit-${kind}`] = String(state.limit)
  headers[`x-ratelimit-remaining-${kind}`] = String(state.remaining)
  headers[`x-ratelimit-reset-${kind}`] = openAIDuration(state.resetSeconds)
}

/** `retryAfterSeconds` of a limit's state, already worked out. */
export function retryAfterOf(state: LimitState | undefined): number {
  return Math.max(1, state?.resetSeconds ?? 1)
}

/** OpenAI's duration style: `45s`, `6m0s`, `3h2m1s`. */
export function openAIDuration(seconds: number): string {
  const h = Math.floor(seconds / 3600)
  const m = Math.floor((seconds % 3600) / 60)
  const s = seconds % 60
  if (h > 0) return `${h}h${m}m${s}s`
  if (m > 0) return `${m}m${s}s`
  return `${s}s`
}

/** The fields for these limits (`rateLimitHeaders` of a policy's; the quota stage's merge of a token's and its key's). */
export function limitHeaders(states: LimitState[]): Record<string, string> {
  const headers: Record<string, string> = {}
  const windowed = states.filter((s) => s.windowSeconds > 0)
  if (windowed.length > 0) {
    headers['ratelimit-policy'] = windowed.map((s) => `"${s.name}";q=${s.limit};w=${s.windowSeconds}`).join(', ')
    headers['ratelimit'] = windowed.map((s) => `"${s.name}";r=${s.remaining};t=${s.resetSeconds}`).join(', ')
  }
  setOpenAITrio(headers, 'requests', tightest(states, 'rpm', 'rpd'))
  setOpenAITrio(headers, 'tokens', tightest(states, 'tpm', 'tpd'))
  return headers
}
