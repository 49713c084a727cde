/**
 * An independent security review (browser credentials, quotas, admin): a token's own control limit, a
 * control call refused for its input, a quota the gateway cannot enforce, and a purge of no key. Each
 * case failed before its fix.
 */
import { env } from 'cloudflare:test'
import { describe, expect, it } from 'vitest'
import { ADMIN_TOKEN, chatBody, harness } from '../helpers.ts'
import type { Harness } from '../helpers.ts'

/** A fixed clock (10 s into a UTC minute): counts must not roll over with a real minute mid-test. */
const START = Date.UTC(2026, 0, 5, 12, 30, 10)
const headers = (credential: string) => ({ authorization: `Bearer ${credential}`, 'content-type': 'application/json' })
const admin = headers(ADMIN_TOKEN)

async function startJob(h: Harness, credential: string): Promise<string> {
  const input = { input: { messages: [{ role: 'user', content: 'hi [[emulator:tokens=3]]' }], sampling_params: { max_tokens: 10 } } }
  const res = await h.fetch('/v2/chat-current/run', { method: 'POST', headers: headers(credential), body: JSON.stringify(input) })
  expect(res.status).toBe(200)
  return ((await res.json()) as { id: string }).id
}

async function mint(h: Harness, key: string, body: unknown): Promise<string> {
  const res = await h.fetch('/v1/tokens', { method: 'POST', headers: headers(key), body: JSON.stringify(body) })
  expect(res.status).toBe(201)
  return ((await res.json()) as { token: string }).token
}

async function statuses(h: Harness, path: string, credential: string, times: number): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < times; i++) {
    const res = await h.fetch(path, { headers: headers(credential) })
    out.push(res.status)
    await res.text()
  }
  return out
}

describe('control calls of tokens', () => {
  it("a token minted with its own controlPerMinute is held to it, and cannot use up its siblings' share of the key's", async () => {
    const h = harness({ quota: { now: () => START } })
    const { key } = await h.createKey({ name: 'backend', quota: { controlPerMinute: 6 } })
    const mallory = await mint(h, key, { quota: { controlPerMinute: 2 } })
    const alice = await mint(h, key, { quota: { controlPerMinute: 2 } })
    const [aliceJob, malloryJob] = [await startJob(h, alice), await startJob(h, mallory)]
    const mal = await statuses(h, `/v2/chat-current/status/${malloryJob}`, mallory, 6)
    const refused = await h.fetch(`/v2/chat-current/status/${malloryJob}`, { headers: headers(mallory) })
    expect(((await refused.json()) as { error: string }).error).toContain('this token may make 2 control calls')
    const aliceFirst = await h.fetch(`/v2/chat-current/status/${aliceJob}`, { headers: headers(alice) })
    await h.settle()
    expect({ mal, alice: aliceFirst.status }).toEqual({ mal: [200, 200, 429, 429, 429, 429], alice: 200 })
  })

  it('a status-sync refused for a malformed ?wait= counts nothing against controlPerMinute', async () => {
    const h = harness({ quota: { now: () => START } })
    const { key } = await h.createKey({ name: 'poller', quota: { controlPerMinute: 3 } })
    const id = await startJob(h, key)
    expect(await statuses(h, `/v2/chat-current/status-sync/${id}?wait=soon`, key, 3)).toEqual([400, 400, 400])
    await h.settle()
    expect(await statuses(h, `/v2/chat-current/status/${id}`, key, 1)).toEqual([200])
  })
})

describe('quotas the gateway cannot enforce', () => {
  it('a strict token quota with no Durable Object bound is a 400 at the mint, not a 500 on every use', async () => {
    const h = harness({ quota: { now: () => START, objects: () => undefined } })
    const { key } = await h.createKey({ name: 'backend' })
    const res = await h.fetch('/v1/tokens', { method: 'POST', headers: headers(key), body: JSON.stringify({ quota: { strict: true, requestsPerMinute: 5 } }) })
    expect(res.status).toBe(400)
    expect(((await res.json()) as { error: { param: string } }).error.param).toBe('quota.strict')
    // Without `strict` the same quota is fine.
    const token = await mint(h, key, { quota: { requestsPerMinute: 5 } })
    const use = await h.fetch('/v1/chat/completions', { method: 'POST', headers: headers(token), body: chatBody('chat-openai') })
    expect(use.status).toBe(200)
  })

  it('a strict key quota with no Durable Object bound is a 400 at create and update, and writes nothing', async () => {
    const h = harness({ quota: { now: () => START, objects: () => undefined } })
    const before = (await env.PODGATE_KV.list({ prefix: 'key:' })).keys.length
    const created = await h.fetch('/admin/keys', { method: 'POST', headers: admin, body: JSON.stringify({ name: 'x', quota: { strict: true, requestsPerMinute: 5 } }) })
    expect(created.status).toBe(400)
    expect((await env.PODGATE_KV.list({ prefix: 'key:' })).keys.length).toBe(before)
    const { id } = await h.createKey({ name: 'y' })
    const updated = await h.fetch(`/admin/keys/${id}`, { method: 'PATCH', headers: admin, body: JSON.stringify({ quota: { strict: true } }) })
    expect(updated.status).toBe(400)
  })

  // Found in the held-connection review: only a quota that said `strict: true` was checked, so with
  // `quota.store: 'strict'` and no Durable Object a key with any quota was created (201), then every call
  // it made was a 500. Such a gateway now refuses every call, as the Worker refuses to start.
  it("with quota.store 'strict' and no Durable Object bound, no key is created: every call is refused", async () => {
    const h = harness({ quota: { now: () => START, store: 'strict', objects: () => undefined } })
    const before = (await env.PODGATE_KV.list({ prefix: 'key:' })).keys.length
    const created = await h.fetch('/admin/keys', { method: 'POST', headers: admin, body: JSON.stringify({ name: 'x', quota: { requestsPerMinute: 5, strict: false } }) })
    expect(created.status).toBe(500)
    expect((await env.PODGATE_KV.list({ prefix: 'key:' })).keys.length).toBe(before)
  })
})

describe('cache purge', () => {
  it('purging the cache of no key is a 404 and writes nothing; a real key id purges', async () => {
    const h = harness()
    const res = await h.fetch('/admin/cache/purge', { method: 'POST', headers: admin, body: JSON.stringify({ keyId: 'key_typo0000000000' }) })
    await h.settle()
    const written = await env.PODGATE_KV.list({ prefix: 'cachegen:key:key_typo' })
    expect({ status: res.status, written: written.keys.length }).toEqual({ status: 404, written: 0 })
    const { id } = await h.createKey({ name: 'real' })
    const ok = await h.fetch('/admin/cache/purge', { method: 'POST', headers: admin, body: JSON.stringify({ keyId: id }) })
    expect(ok.status).toBe(200)
  })
})
