/**
 * H1: `POST /v2/{model}/retry/{id}` runs a job again on the GPU, so it is charged like a run: one
 * request plus a token reservation, and refused with 429 once the key's limit is reached.
 */
import { describe, expect, it } from 'vitest'
import { authed, harness } from '../helpers.ts'

function post(key: string, body: unknown = {}): RequestInit {
  return { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) }
}

const START = Date.UTC(2026, 0, 5, 12, 30, 10)

const failingJob = { input: { messages: [{ role: 'user', content: 'fail [[emulator:fault=job_failed]]' }], sampling_params: { max_tokens: 40 } } }

interface Usage {
  windows: { minute: { requests: number; tokens: number } }
}

describe('H1 retry is charged like a run', () => {
  it('quota-retry: a retry counts a request and reserves tokens, and is refused past requestsPerMinute', async () => {
    // A fixed clock: the counts must not roll over with a real minute mid-test.
    const h = harness({ quota: { now: () => START } })
    const { key } = await h.createKey({ name: 'retry', quota: { requestsPerMinute: 3 } })
    const run = await h.fetch('/v2/chat-current/run', post(key, failingJob))
    expect(run.status).toBe(200)
    const { id } = (await run.json()) as { id: string }
    await h.fetch(`/v2/chat-current/status-sync/${id}?wait=2000`, authed(key))
    await h.settle()
    const before = (await (await h.fetch('/v1/usage', authed(key))).json()) as Usage

    const retried = await h.fetch(`/v2/chat-current/retry/${id}`, post(key))
    expect(retried.status).toBe(200)
    expect(retried.headers.get('ratelimit-policy')).toBe('"rpm";q=3;w=60')
    await h.settle()
    const after = (await (await h.fetch('/v1/usage', authed(key))).json()) as Usage
    expect(after.windows.minute.requests).toBe(before.windows.minute.requests + 1)
    // The model's default max_tokens (512): podgate keeps no job input to estimate from.
    expect(after.windows.minute.tokens).toBe(before.windows.minute.tokens + 512)

    expect((await h.fetch(`/v2/chat-current/retry/${id}`, post(key))).status).toBe(200)
    const upstreamRetries = h.emulator.calls.filter((c) => c.op === 'retry').length
    const refused = await h.fetch(`/v2/chat-current/retry/${id}`, post(key))
    expect(refused.status).toBe(429)
    expect(refused.headers.get('retry-after')).toBeTruthy()
    expect(refused.headers.get('ratelimit')).toMatch(/"rpm";r=0/)
    await h.settle()
    expect(h.emulator.calls.filter((c) => c.op === 'retry').length).toBe(upstreamRetries)
  })
})
