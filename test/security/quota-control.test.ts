/**
 * M4: control calls cost upstream calls (or a signature), so each counts against the key's
 * `controlPerMinute` (default 600; per key, per model or gateway-wide): status, status-sync, JSON
 * stream, cancel, health, purge-queue and POST /v1/tokens. Over it: 429 with the rate-limit fields and
 * no upstream call. A job's event stream is admitted once; its own polls are not control calls.
 */
import { describe, expect, it } from 'vitest'
import { authed, harness } from '../helpers.ts'
import type { Harness } from '../helpers.ts'

/** A fixed clock (10 s into a UTC minute): counts must not roll over with a real minute mid-test. */
const START = Date.UTC(2026, 0, 5, 12, 30, 10)

function call(key: string, method: 'GET' | 'POST', accept?: string): RequestInit {
  return {
    method,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...(accept ? { accept } : {}) },
    body: method === 'POST' ? '{}' : undefined,
  }
}

async function startJob(h: Harness, key: string): Promise<string> {
  const input = { input: { messages: [{ role: 'user', content: 'hi [[emulator:tokens=3]]' }], sampling_params: { max_tokens: 10 }, stream: true } }
  const res = await h.fetch('/v2/chat-current/run', { ...call(key, 'POST'), body: JSON.stringify(input) })
  expect(res.status).toBe(200)
  return ((await res.json()) as { id: string }).id
}

describe('M4 control calls count against controlPerMinute', () => {
  it('quota-control: status, status-sync, JSON stream, cancel, health, purge-queue and token minting each count; the next is a 429 with no upstream call', async () => {
    const h = harness({ quota: { now: () => START } })
    const { key } = await h.createKey({ name: 'poller', quota: { controlPerMinute: 7 } })
    const id = await startJob(h, key)
    const calls: [string, RequestInit][] = [
      [`/v2/chat-current/status/${id}`, call(key, 'GET')],
      [`/v2/chat-current/status-sync/${id}?wait=1000`, call(key, 'GET')],
      [`/v2/chat-current/stream/${id}`, call(key, 'GET')],
      [`/v2/chat-current/health`, call(key, 'GET')],
      [`/v2/chat-current/cancel/${id}`, call(key, 'POST')],
      [`/v2/chat-current/purge-queue`, call(key, 'POST')],
      ['/v1/tokens', call(key, 'POST')],
    ]
    for (const [index, [path, init]] of calls.entries()) {
      const res = await h.fetch(path, init)
      expect(res.status, path).not.toBe(429)
      expect(res.headers.get('ratelimit'), path).toBe(`"control";r=${6 - index};t=${res.headers.get('ratelimit')?.split('t=')[1]}`)
      expect(res.headers.get('ratelimit-policy')).toBe('"control";q=7;w=60')
      await res.text()
    }
    await h.settle()
    const upstream = h.emulator.calls.length
    for (const [path, init] of calls) {
      const refused = await h.fetch(path, init)
      expect(refused.status, path).toBe(429)
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
      expect(refused.headers.get('ratelimit')).toMatch(/^"control";r=0;t=\d+$/)
      const body = (await refused.json()) as { code?: string; error?: { code: string } }
      expect(body.code ?? body.error?.code).toBe('rate_limited')
    }
    await h.settle()
    expect(h.emulator.calls.length).toBe(upstream)
  })

  it('quota-control: a key with no limits of its own is held to the gateway default; completions do not use it up', async () => {
    const h = harness({ quota: { defaults: { controlPerMinute: 2 }, now: () => START } })
    const { key } = await h.createKey({ name: 'default' })
    const id = await startJob(h, key)
    await startJob(h, key)
    expect((await h.fetch(`/v2/chat-current/status/${id}`, authed(key))).status).toBe(200)
    expect((await h.fetch(`/v2/chat-current/status/${id}`, authed(key))).status).toBe(200)
    expect((await h.fetch(`/v2/chat-current/status/${id}`, authed(key))).status).toBe(429)
    // The job's event stream is not a control call: it is admitted and polls upstream itself.
    const events = await h.fetch(`/v2/chat-current/stream/${id}`, call(key, 'GET', 'text/event-stream'))
    expect(events.status).toBe(200)
    const text = await events.text()
    expect(text, text).toContain('event: done')
  })

  it('quota-control: a per-model controlPerMinute applies to that model', async () => {
    const h = harness({ models: { 'chat-current': { endpoints: [{ endpointId: 'vllmcurrent' }], mode: 'native', quota: { controlPerMinute: 1 } } }, quota: { now: () => START } })
    const { key } = await h.createKey({ name: 'model' })
    expect((await h.fetch('/v2/chat-current/health', authed(key))).status).toBe(200)
    expect((await h.fetch('/v2/chat-current/health', authed(key))).status).toBe(429)
  })
})
