/**
 * M4: control calls cost upstream calls (or a signature), so each counts against the key's
 * `controlPerMinute` (default 600; per key, per model or gateway-wide): status, status-sync, JSON
 * stream, cancel, health and POST /v1/tokens. Over it: 429 with the rate-limit fields and no upstream
 * call. A job's event stream is admitted once; its own polls are not control calls. A call refused for
 * its input (a malformed mint, an unknown model, purge-queue) counts nothing; a forged job id counts.
 */
import { describe, expect, it } from 'vitest'
import { authed, harness, MODELS } from '../helpers.ts'
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
  it('quota-control: status, status-sync, JSON stream, cancel, health and token minting each count; the next is a 429 with no upstream call', async () => {
    const h = harness({ quota: { now: () => START } })
    const { key } = await h.createKey({ name: 'poller', quota: { controlPerMinute: 6 } })
    const id = await startJob(h, key)
    const calls: [string, RequestInit][] = [
      [`/v2/chat-current/status/${id}`, call(key, 'GET')],
      [`/v2/chat-current/status-sync/${id}?wait=1000`, call(key, 'GET')],
      [`/v2/chat-current/stream/${id}`, call(key, 'GET')],
      [`/v2/chat-current/health`, call(key, 'GET')],
      [`/v2/chat-current/cancel/${id}`, call(key, 'POST')],
      ['/v1/tokens', call(key, 'POST')],
    ]
    for (const [index, [path, init]] of calls.entries()) {
      const res = await h.fetch(path, init)
      expect(res.status, path).not.toBe(429)
      expect(res.headers.get('ratelimit'), path).toBe(`"control";r=${5 - index};t=${res.headers.get('ratelimit')?.split('t=')[1]}`)
      expect(res.headers.get('ratelimit-policy')).toBe('"control";q=6;w=60')
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

  it('quota-control: a call refused for its input counts nothing; a forged job id counts', async () => {
    const h = harness({ quota: { now: () => START } })
    const { key } = await h.createKey({ name: 'careless', quota: { controlPerMinute: 2 }, models: ['chat-current'] })
    const refused: [string, RequestInit, number][] = [
      ['/v1/tokens', authed(key, '{"ttlSeconds":"soon"}'), 400],
      ['/v1/tokens', authed(key, '{not json'), 400],
      ['/v1/tokens', authed(key, '{"ttlSeconds":999999999}'), 400],
      ['/v1/tokens', authed(key, '{"models":["chat-classic"]}'), 403],
      ['/v2/no-such-model/health', call(key, 'GET'), 404],
      ['/v2/chat-classic/health', call(key, 'GET'), 403],
      ['/v2/chat-current/purge-queue', call(key, 'POST'), 403],
    ]
    for (const [path, init, status] of refused) expect((await h.fetch(path, init)).status, path).toBe(status)
    const { key: publishable } = await h.createKey({ name: 'browser', kind: 'publishable', origins: ['https://app.example'], quota: { controlPerMinute: 1 } })
    const fromPage = (init: RequestInit): RequestInit => ({ ...init, headers: { ...(init.headers as Record<string, string>), origin: 'https://app.example' } })
    expect((await h.fetch('/v1/tokens', fromPage(authed(publishable, '{}')))).status).toBe(403)
    expect((await h.fetch('/v2/chat-current/health', fromPage(authed(publishable)))).status).toBe(200)
    // The key's two control calls are still there: a forged job id uses one, a mint the other.
    expect((await h.fetch('/v2/chat-current/status/forged-job-id', call(key, 'GET'))).status).toBe(404)
    expect((await h.fetch('/v1/tokens', authed(key, '{}'))).status).toBe(201)
    expect((await h.fetch('/v2/chat-current/health', call(key, 'GET'))).status).toBe(429)
  })

  it('quota-control: a job event stream opened with a malformed Last-Event-ID is a 400 that counts nothing', async () => {
    const h = harness({ quota: { now: () => START } })
    const { key } = await h.createKey({ name: 'resumer', quota: { controlPerMinute: 1 } })
    const id = await startJob(h, key)
    const bad = await h.fetch(`/v2/chat-current/stream/${id}?detach=true`, { headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream', 'last-event-id': 'abc' } })
    expect(bad.status).toBe(400)
    expect(await bad.json()).toMatchObject({ code: 'invalid_request', error: expect.stringContaining('Last-Event-ID') })
    // The key's one control call is still there.
    expect((await h.fetch(`/v2/chat-current/status/${id}`, call(key, 'GET'))).status).toBe(200)
    expect((await h.fetch(`/v2/chat-current/status/${id}`, call(key, 'GET'))).status).toBe(429)
  })

  it.each([false, true])('quota-control: a token with a controlPerMinute of its own answers with the control fields of the tighter of its limit and its key\'s (strict: %s)', async (strict) => {
    const h = harness({ quota: { now: () => START } })
    const { key } = await h.createKey({ name: 'backend', quota: { controlPerMinute: 100, strict } })
    const minted = await h.fetch('/v1/tokens', authed(key, JSON.stringify({ quota: { controlPerMinute: 2, strict } })))
    const { token } = (await minted.json()) as { token: string }
    const first = await h.fetch('/v2/chat-current/health', call(token, 'GET'))
    expect(first.status).toBe(200)
    // The token has 1 of its 2 left, the key 98 of its 100: the page is told of the token's.
    expect(first.headers.get('ratelimit-policy')).toBe('"control";q=2;w=60')
    expect(first.headers.get('ratelimit')).toMatch(/^"control";r=1;t=\d+$/)
    const second = await h.fetch('/v2/chat-current/health', call(token, 'GET'))
    expect(second.headers.get('ratelimit')).toMatch(/^"control";r=0;t=\d+$/)
    expect((await h.fetch('/v2/chat-current/health', call(token, 'GET'))).status).toBe(429)
    // A sibling token without a control limit of its own reports its key's.
    const sibling = ((await (await h.fetch('/v1/tokens', authed(key, '{}'))).json()) as { token: string }).token
    const third = await h.fetch('/v2/chat-current/health', call(sibling, 'GET'))
    expect(third.headers.get('ratelimit-policy')).toBe('"control";q=100;w=60')
    expect(third.headers.get('ratelimit')).toMatch(/^"control";r=95;t=\d+$/)
  })

  it('quota-control: a mint whose token would be too long to use is a 400 that counts nothing; one just short of it works', async () => {
    // A gateway of many long aliases: a token naming all of them would pass 4096 characters, which `verify` refuses.
    const aliases = Array.from({ length: 40 }, (_, i) => `team-${String(i).padStart(2, '0')}-${'x'.repeat(90)}`)
    const models = { ...MODELS, ...Object.fromEntries(aliases.map((alias) => [alias, { endpoints: [{ endpointId: 'vllmopenai' }], mode: 'openai' as const }])) }
    const h = harness({ models, quota: { now: () => START } })
    const { key } = await h.createKey({ name: 'many models', quota: { controlPerMinute: 1 } })
    const tooLong = await h.fetch('/v1/tokens', authed(key, JSON.stringify({ models: aliases })))
    expect(tooLong.status).toBe(400)
    expect(await tooLong.json()).toMatchObject({ error: { code: 'invalid_request', param: 'models', message: expect.stringContaining('longer than 4096 characters') } })
    // The key's one control call is still there, and a token of 25 of the aliases is minted and used.
    const minted = await h.fetch('/v1/tokens', authed(key, JSON.stringify({ models: aliases.slice(0, 25) })))
    expect(minted.status).toBe(201)
    const { token } = (await minted.json()) as { token: string }
    expect(token.length).toBeGreaterThan(3000)
    const chat = await h.fetch('/v1/chat/completions', authed(token, JSON.stringify({ model: aliases[24], messages: [{ role: 'user', content: 'hi' }] })))
    expect(chat.status).toBe(200)
    expect((await h.fetch('/v1/tokens', authed(key, '{}'))).status).toBe(429)
  })

  it('quota-control: a control path called with a method it does not take is a 404 that counts nothing', async () => {
    const h = harness({ quota: { now: () => START } })
    const { key } = await h.createKey({ name: 'wrong verbs', quota: { controlPerMinute: 1 } })
    const id = await startJob(h, key)
    const wrong: [string, RequestInit][] = [
      [`/v2/chat-current/cancel/${id}`, call(key, 'GET')],
      ['/v2/chat-current/health', call(key, 'POST')],
      [`/v2/chat-current/status/${id}`, { ...call(key, 'POST'), method: 'PUT' }],
      [`/v2/chat-current/stream/${id}`, { ...call(key, 'POST'), method: 'DELETE' }],
    ]
    for (const [path, init] of wrong) {
      const res = await h.fetch(path, init)
      expect(res.status, `${init.method} ${path}`).toBe(404)
      expect(res.headers.get('ratelimit'), `${init.method} ${path}`).toBeNull()
    }
    // The key's one control call is still there.
    expect((await h.fetch(`/v2/chat-current/status/${id}`, call(key, 'GET'))).status).toBe(200)
    expect((await h.fetch(`/v2/chat-current/status/${id}`, call(key, 'GET'))).status).toBe(429)
  })

  it('quota-control: a key with no limits of its own is held to the gateway default; completions do not use it up', async () => {
    const h = harness({ quota: { defaults: { controlPerMinute: 2 }, now: () => START } })
    const { key } = await h.createKey({ name: 'default' })
    const id = await startJob(h, key)
    await startJob(h, key)
    expect((await h.fetch(`/v2/chat-current/status/${id}`, authed(key))).status).toBe(200)
    expect((await h.fetch(`/v2/chat-current/status/${id}`, authed(key))).status).toBe(200)
    expect((await h.fetch(`/v2/chat-current/status/${id}`, authed(key))).status).toBe(429)
  })

  it('quota-control: a job event stream refused by requestsPerMinute names that limit in its RateLimit fields; the control limit is listed after', async () => {
    const h = harness({ quota: { now: () => START } })
    const { key } = await h.createKey({ name: 'events', quota: { requestsPerMinute: 2 } })
    const id = await startJob(h, key)
    const open = () => h.fetch(`/v2/chat-current/stream/${id}?detach=true`, call(key, 'GET', 'text/event-stream'))
    const first = await open()
    expect(first.status).toBe(200)
    await first.text()
    expect(first.headers.get('ratelimit-policy')).toBe('"rpm";q=2;w=60, "control";q=600;w=60')
    const refused = await open()
    await refused.text()
    expect(refused.status).toBe(429)
    expect(refused.headers.get('ratelimit')).toMatch(/^"rpm";r=0;t=\d+, "control";r=598;t=\d+$/)
  })

  it('quota-control: opening a job event stream is a control call: a key over its limit cannot reopen one to poll upstream', async () => {
    const h = harness({ quota: { defaults: { controlPerMinute: 2 }, now: () => START } })
    const { key } = await h.createKey({ name: 'poller' })
    const id = await startJob(h, key)
    const open = () => h.fetch(`/v2/chat-current/stream/${id}?detach=true`, call(key, 'GET', 'text/event-stream'))
    const first = await open()
    expect(first.status).toBe(200)
    expect(await first.text()).toContain('event: done')
    expect((await h.fetch(`/v2/chat-current/status/${id}`, authed(key))).status).toBe(200)
    await h.settle()
    const before = h.emulator.calls.length
    for (let i = 0; i < 5; i++) {
      const res = await open()
      expect(res.status).toBe(429)
      expect(res.headers.get('ratelimit-policy')).toContain('"control"')
      await res.text()
    }
    await h.settle()
    expect(h.emulator.calls.length).toBe(before)
  })

  it('quota-control: a per-model controlPerMinute applies to that model', async () => {
    const h = harness({ models: { 'chat-current': { endpoints: [{ endpointId: 'vllmcurrent' }], mode: 'native', quota: { controlPerMinute: 1 } } }, quota: { now: () => START } })
    const { key } = await h.createKey({ name: 'model' })
    expect((await h.fetch('/v2/chat-current/health', authed(key))).status).toBe(200)
    expect((await h.fetch('/v2/chat-current/health', authed(key))).status).toBe(429)
  })
})
