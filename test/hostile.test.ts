/**
 * Hostile input over every route: a corpus of known attacks and a bounded property test. Every bad
 * request gets a clear 4xx in the caller's format, never a 500, and changes nothing: no KV write, no
 * upstream call.
 */
import { env } from 'cloudflare:test'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { ADMIN_TOKEN, harness } from './helpers.ts'
import type { Harness } from './helpers.ts'

const COMPLETION_ROUTES = ['/v1/chat/completions', '/v1/completions']
const encoder = new TextEncoder()

async function kvSnapshot(): Promise<string> {
  const listed = await env.PODGATE_KV.list()
  // A refused control call (a forged job id) is still counted against controlPerMinute, so probing costs
  // quota (docs/security.md): those counters are the one change a refusal makes.
  const kept = listed.keys.filter((k) => !k.name.startsWith('quota:ctl:'))
  const values = await Promise.all(kept.map(async (k) => `${k.name}=${await env.PODGATE_KV.get(k.name)}`))
  return values.sort().join('\n')
}

interface Case {
  name: string
  method: string
  path: string
  headers?: Record<string, string>
  body?: BodyInit
}

/** Sends a hostile request and checks the contract: 4xx, a JSON error body, no upstream call, no KV change. */
async function expectRefused(h: Harness, c: Case): Promise<number> {
  const before = await kvSnapshot()
  h.emulator.reset()
  const res = await h.fetch(c.path, { method: c.method, headers: c.headers, body: c.body })
  const text = await res.text()
  await h.settle()
  expect.soft(res.status, `${c.name}: ${text.slice(0, 200)}`).toBeGreaterThanOrEqual(400)
  expect.soft(res.status, `${c.name}: ${text.slice(0, 200)}`).toBeLessThan(500)
  const body = JSON.parse(text) as { error?: unknown }
  expect.soft(body.error, c.name).toBeDefined()
  expect.soft(h.emulator.calls, c.name).toEqual([])
  expect.soft(await kvSnapshot(), c.name).toBe(before)
  for (const [name, value] of res.headers) {
    expect.soft(`${name}: ${value}`, c.name).not.toMatch(/injected|set-cookie/i)
  }
  return res.status
}

function deep(depth: number): string {
  return '['.repeat(depth) + ']'.repeat(depth)
}

const TRICKY_NAMES = [
  '../chat-openai',
  '..%2Fchat-openai',
  'chat-openai/../../admin',
  'chat-openai%0d%0aSet-Cookie:%20injected=1',
  'chat-openai\r\nX-Injected: 1',
  'chat-openai\u0000',
  '%2e%2e%2f',
  'vllmopenai',
  '/v2/vllmopenai/run',
  'http://127.0.0.1:8788/v2/x',
  'a'.repeat(10_000),
  '\u202echat-openai',
]

function corpus(key: string): Case[] {
  const json = { authorization: `Bearer ${key}`, 'content-type': 'application/json' }
  const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }
  const cases: Case[] = []
  for (const path of COMPLETION_ROUTES) {
    const valid = path.endsWith('chat/completions')
      ? { model: 'chat-openai', messages: [{ role: 'user', content: 'hi' }] }
      : { model: 'chat-openai', prompt: 'hi' }
    const bodies: [string, BodyInit][] = [
      ['empty', ''],
      ['not json', 'hello'],
      ['truncated', JSON.stringify(valid).slice(0, -3)],
      ['json array', '[]'],
      ['json null', 'null'],
      ['json string', '"x"'],
      ['stream_options without stream', JSON.stringify({ ...valid, stream_options: { include_usage: true } })],
      ['best_of below n', JSON.stringify({ ...valid, n: 2, best_of: 1 })],
      ['model a number', JSON.stringify({ ...valid, model: 7 })],
      ['model an object', JSON.stringify({ ...valid, model: { $ne: null } })],
      ['max_tokens a string', JSON.stringify({ ...valid, max_tokens: '10' })],
      ['max_tokens huge', JSON.stringify({ ...valid, max_tokens: 1e300 })],
      ['temperature NaN text', JSON.stringify(valid).replace('{', '{"temperature":NaN,')],
      ['n negative', JSON.stringify({ ...valid, n: -1 })],
      ['stream a string', JSON.stringify({ ...valid, stream: 'yes' })],
      ['deeply nested array', deep(100_000)],
      ['deeply nested field', JSON.stringify({ ...valid, user: null }).replace('null', deep(50_000))],
      // Forwarded as written, and walked for the cache key when the request is cacheable.
      ['deeply nested forwarded field, cacheable', JSON.stringify({ ...valid, temperature: 0, vllm_xargs: null }).replace('null', deep(20_000))],
      ['forwarded field nested past the bound, cacheable', JSON.stringify({ ...valid, seed: 1, vllm_xargs: null }).replace('null', deep(1_100))],
      ['huge body', JSON.stringify({ ...valid, padding: 'x'.repeat(11 * 1024 * 1024) })],
      ['invalid utf-8', new Uint8Array([...encoder.encode('{"model":"chat-openai","prompt":"'), 0xff, 0xfe, 0xc3, ...encoder.encode('"}')])],
      ['__proto__', '{"__proto__":{"admin":true},' + JSON.stringify(valid).slice(1)],
    ]
    if (path.endsWith('chat/completions')) {
      bodies.push(['messages empty', JSON.stringify({ ...valid, messages: [] })])
      bodies.push(['role not a string', JSON.stringify({ ...valid, messages: [{ role: 7, content: 'x' }] })])
      bodies.push(['content wrong type', JSON.stringify({ ...valid, messages: [{ role: 'user', content: 5 }] })])
    }
    for (const [name, body] of bodies) cases.push({ name: `${path} ${name}`, method: 'POST', path, headers: json, body })
    for (const model of TRICKY_NAMES) {
      cases.push({ name: `${path} model ${JSON.stringify(model.slice(0, 40))}`, method: 'POST', path, headers: json, body: JSON.stringify({ ...valid, model }) })
    }
    cases.push({ name: `${path} wrong content-type`, method: 'POST', path, headers: { ...json, 'content-type': 'text/plain' }, body: 'x' })
    cases.push({ name: `${path} no key`, method: 'POST', path, headers: { 'content-type': 'application/json' }, body: JSON.stringify(valid) })
    cases.push({ name: `${path} oversized key`, method: 'POST', path, headers: { ...json, authorization: `Bearer pg_sk_${'a'.repeat(64 * 1024)}` }, body: JSON.stringify(valid) })
    cases.push({ name: `${path} key with injected text`, method: 'POST', path, headers: { ...json, authorization: `Bearer ${key} X-Injected: 1` }, body: JSON.stringify(valid) })
  }
  cases.push({ name: 'models without key', method: 'GET', path: '/v1/models' })
  cases.push({ name: 'models oversized header', method: 'GET', path: '/v1/models', headers: { authorization: `Bearer ${'x'.repeat(100_000)}` } })
  for (const body of ['', 'nope', '[]', '{"name":5}', '{"name":"a","evil":1}', '{"name":"a","models":["../x"]}', deep(100_000)]) {
    cases.push({ name: `admin create ${body.slice(0, 20)}`, method: 'POST', path: '/admin/keys', headers: admin, body })
  }
  cases.push({ name: 'admin create without token', method: 'POST', path: '/admin/keys', headers: { 'content-type': 'application/json' }, body: '{"name":"a"}' })
  cases.push({ name: 'admin with a user key', method: 'POST', path: '/admin/keys', headers: { ...admin, authorization: `Bearer ${key}` }, body: '{"name":"a"}' })
  for (const id of ['..', '..%2F..%2Fkeyhash', '%2e%2e', 'x%0d%0aSet-Cookie:%20injected=1', 'keyhash:abc', 'a'.repeat(5_000), '%00']) {
    cases.push({ name: `admin get ${id.slice(0, 30)}`, method: 'GET', path: `/admin/keys/${id}`, headers: admin })
    cases.push({ name: `admin delete ${id.slice(0, 30)}`, method: 'DELETE', path: `/admin/keys/${id}`, headers: admin })
  }
  return cases
}

describe('hostile input', () => {
  it('every corpus request is a clear 4xx that changes nothing', async () => {
    const h = harness()
    const { key } = await h.createKey()
    const cases = corpus(key)
    expect(cases.length).toBeGreaterThanOrEqual(100)
    for (const c of cases) await expectRefused(h, c)
  }, 60_000)

  it('/v2 paths with tricks in model names and job ids are refused (when the native surface exists)', async () => {
    const h = harness()
    const { key } = await h.createKey()
    const hasV2 = h.app.routes.some((r) => r.path.startsWith('/v2'))
    const paths = ['/v2/../admin/keys/run', '/v2/chat-openai%2F..%2Fx/run', '/v2/chat-classic/status/..%2F..%2Fhealth', '/v2/chat-classic/status/x%0d%0aX-Injected:1', '/v2/chat-classic/cancel/' + 'a'.repeat(5_000), '/v2/%2e%2e/run', '/v2/nope/run']
    for (const path of paths) {
      const status = await expectRefused(h, { name: path, method: 'POST', path, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: '{"input":{"prompt":"x"}}' })
      if (!hasV2) expect(status).toBe(404)
    }
  })

  it('a request id sent by the caller is not echoed', async () => {
    const h = harness()
    const res = await h.fetch('/v1/models', { headers: { 'x-request-id': 'injected' } })
    expect(res.status).toBe(401)
    expect(res.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/)
  })

  it('property: any JSON body on the completion routes is answered below 500, and a refusal changes nothing', async () => {
    const h = harness()
    const { key } = await h.createKey()
    const model = fc.oneof(fc.constantFrom('chat-openai', 'chat-classic', 'chat-current', '../x', ''), fc.string(), fc.jsonValue())
    const message = fc.oneof(fc.record({ role: fc.constantFrom('user', 'system', 'assistant', 'tool', 'x'), content: fc.oneof(fc.string(), fc.jsonValue()) }), fc.jsonValue())
    const body = fc.oneof(
      fc.jsonValue(),
      fc.record({ model, messages: fc.array(message, { maxLength: 3 }) }, { requiredKeys: [] }),
      fc.record({ model, prompt: fc.oneof(fc.string(), fc.jsonValue()), max_tokens: fc.jsonValue(), temperature: fc.jsonValue(), stream: fc.jsonValue() }, { requiredKeys: [] }),
      fc.dictionary(fc.string(), fc.jsonValue(), { maxKeys: 5 }),
    )
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...COMPLETION_ROUTES), body, fc.boolean(), async (path, value, truncate) => {
        h.emulator.reset()
        const before = await kvSnapshot()
        let text = JSON.stringify(value) ?? 'null'
        if (truncate && text.length > 1) text = text.slice(0, Math.floor(text.length / 2))
        const res = await h.fetch(path, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: text })
        await res.text()
        await h.settle()
        expect(res.status).toBeLessThan(500)
        // A body that happens to be valid is answered (and may be cached); a refused one changes nothing.
        // podgate forwards what it does not read, so a refusal may be the endpoint's (vLLM's 4xx, relayed).
        if (res.status >= 400) expect(await kvSnapshot()).toBe(before)
      }),
      { numRuns: 200, seed: 7 },
    )
  }, 60_000)
})
