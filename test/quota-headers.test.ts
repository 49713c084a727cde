/**
 * Rate-limit fields as pure functions: which limit OpenAI's trio reports, and the duration style.
 */
import { describe, expect, it } from 'vitest'
import { openAIDuration, rateLimitHeaders, retryAfterSeconds } from '../src/quota/headers.ts'
import { usageAt } from '../src/quota/limits.ts'

const NOW = Date.UTC(2026, 0, 5, 23, 54, 0)

describe('rate-limit headers', () => {
  it('reports the tighter of the minute and day limits in the OpenAI trio', () => {
    const usage = usageAt(NOW)
    usage.minuteCounts.requests = 1
    usage.dayCounts.requests = 98
    const headers = rateLimitHeaders({ requestsPerMinute: 10, requestsPerDay: 100 }, usage, NOW)
    expect(headers['x-ratelimit-limit-requests']).toBe('100')
    expect(headers['x-ratelimit-remaining-requests']).toBe('2')
    expect(headers['x-ratelimit-reset-requests']).toBe('6m0s')
    expect(headers['ratelimit']).toBe('"rpm";r=9;t=60, "rpd";r=2;t=360')
    expect(headers['x-ratelimit-limit-tokens']).toBeUndefined()
  })

  it('never reports negative remaining, and Retry-After is at least 1', () => {
    const usage = usageAt(NOW)
    usage.minuteCounts.tokens = 5000
    expect(rateLimitHeaders({ tokensPerMinute: 1000 }, usage, NOW)['x-ratelimit-remaining-tokens']).toBe('0')
    expect(retryAfterSeconds({ maxConcurrentStreams: 1 }, usage, 'streams', NOW)).toBe(1)
    expect(retryAfterSeconds({ tokensPerMinute: 1000 }, usage, 'tpm', NOW + 59_500)).toBe(1)
  })

  it('writes durations the way OpenAI does', () => {
    expect(openAIDuration(0)).toBe('0s')
    expect(openAIDuration(59)).toBe('59s')
    expect(openAIDuration(60)).toBe('1m0s')
    expect(openAIDuration(3_723)).toBe('1h2m3s')
  })
})
