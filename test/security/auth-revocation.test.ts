/**
 * M2 + L8: revocation wins every race, and ends streams that are already open.
 *
 * KV has no compare-and-swap: a PATCH or rotate that read the key before a revoke writes it back
 * afterwards. The revocation tombstone (`revoked:<id>`), which every read checks and no other write
 * touches, keeps the key revoked whatever order the writes land in.
 */
import { describe, expect, it } from 'vitest'
import { env } from 'cloudflare:workers'
import { ADMIN_TOKEN, authed, chatBody, harness, readSSE, RUNPOD_KEY } from '../helpers.ts'

const admin = (method: string, body?: unknown): RequestInit => ({
  method,
  headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
  body: body === undefined ? undefined : JSON.stringify(body),
})

/** Reads an open stream to its end (its first chunk already read) and expects the credential's error event, no `[DONE]`. */
async function expectEndedByCredential(reader: ReadableStreamDefaultReader<Uint8Array>, first: Uint8Array): Promise<void> {
  const chunks: Uint8Array[] = [first]
  for (let next = await reader.read(); !next.done; next = await reader.read()) chunks.push(next.value)
  const events = await readSSE(new Response(new Blob(chunks)))
  expect(events.at(-1)).toEqual({ error: { message: 'This stream ended: its credential was revoked, rotated or expired while it was open.', type: 'authentication_error', param: null, code: 'invalid_api_key' } })
  expect(events).not.toContain('[DONE]')
}

describe('M2 revocation wins every race', () => {
  it('auth-revocation: a revoke among 20 concurrent PATCH and rotate writers leaves the key, its rotations and its tokens refused', async () => {
    const h = harness({ keyCacheTtlMs: 0 })
    for (let round = 0; round < 3; round++) {
      const { id, key } = await h.createKey({ name: `race${round}` })
      const minted = await h.fetch('/v1/tokens', authed(key, JSON.stringify({})))
      expect(minted.status).toBe(201)
      const { token } = (await minted.json()) as { token: string }

      const writers = Array.from({ length: 20 }, (_, i) => {
        if (i === 10) return h.fetch(`/admin/keys/${id}`, admin('DELETE'))
        if (i % 2 === 0) return h.fetch(`/admin/keys/${id}`, admin('PATCH', { metadata: { writer: String(i) } }))
        return h.fetch(`/admin/keys/${id}/rotate`, admin('POST'))
      })
      const answers = await Promise.all(writers)
      expect(answers[10]!.status).toBe(200)
      const rotatedKeys: string[] = []
      for (const res of answers) {
        const body = (await res.json()) as { key?: string }
        if (res.ok && body.key) rotatedKeys.push(body.key)
      }

      const record = (await (await h.fetch(`/admin/keys/${id}`, admin('GET'))).json()) as { revokedAt: number | null }
      expect(record.revokedAt).not.toBeNull()
      for (const credential of [key, token, ...rotatedKeys]) {
        const res = await h.fetch('/v1/models', authed(credential))
        expect(res.status).toBe(401)
      }
      // And no later write brings it back.
      expect((await h.fetch(`/admin/keys/${id}`, admin('PATCH', { name: 'again' }))).status).toBe(400)
      expect((await h.fetch(`/admin/keys/${id}/rotate`, admin('POST'))).status).toBe(400)
    }
  })
})

describe('L8 revocation ends open streams', () => {
  // Without include_usage the rewriting relay serves the stream; with it, over a real HTTP upstream (a body
  // the runtime produced), the native pipe (openai-pipe.ts).
  it.each([
    ['rewriting relay', {}, {}],
    ['native pipe', { stream_options: { include_usage: true } }, { runpod: { apiKey: RUNPOD_KEY, baseUrl: env.RUNPOD_BASE_URL }, fetch: undefined }],
  ])('auth-revocation: an open stream (%s) of a key revoked mid-answer ends with an error event', async (_, extra, upstream) => {
    const h = harness({ keyCacheTtlMs: 0, ...upstream })
    const { id, key } = await h.createKey({ name: 'streaming' })
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'hold [[emulator:fault=stall,after=3]]', { stream: true, max_tokens: 50, ...extra })))
    expect(res.status).toBe(200)
    const reader = res.body!.getReader()
    const first = await reader.read()
    expect(first.done).toBe(false)
    expect((await h.fetch(`/admin/keys/${id}`, admin('DELETE'))).status).toBe(200)
    await expectEndedByCredential(reader, first.value!)
  })

  // The error event says "revoked, rotated or expired": a rotation (a new generation) and an expiry end a stream too.
  it.each<[string, (id: string) => [string, RequestInit]]>([
    ['rotated', (id) => [`/admin/keys/${id}/rotate`, admin('POST')]],
    // A moment from now (the admin API takes only a future expiry), then past.
    ['expired', (id) => [`/admin/keys/${id}`, admin('PATCH', { expiresAt: Date.now() + 100 })]],
  ])('auth-revocation: an open stream of a key that is then %s ends with the error event', async (_what, change) => {
    const h = harness({ keyCacheTtlMs: 0 })
    const { id, key } = await h.createKey({ name: 'streaming' })
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'hold [[emulator:fault=stall,after=3]]', { stream: true, max_tokens: 50 })))
    expect(res.status).toBe(200)
    const reader = res.body!.getReader()
    const first = await reader.read()
    expect(first.done).toBe(false)
    expect((await h.fetch(...change(id))).status).toBe(200)
    await expectEndedByCredential(reader, first.value!)
  })

  it('auth-revocation: with the default keyCacheTtlMs (10 s), an open stream in the isolate that revoked ends within about a second', async () => {
    const h = harness()
    const { id, key } = await h.createKey({ name: 'streaming' })
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'hold [[emulator:fault=stall,after=3]]', { stream: true, max_tokens: 50 })))
    const reader = res.body!.getReader()
    expect((await reader.read()).done).toBe(false)
    expect((await h.fetch(`/admin/keys/${id}`, admin('DELETE'))).status).toBe(200)
    const revoked = Date.now()
    while (!(await reader.read()).done);
    // One stream check (1 s) after the revoke, not one key-cache lifetime (10 s).
    expect(Date.now() - revoked).toBeLessThan(5_000)
  })

  it('auth-revocation: an open stream answered to a token ends with an error event once the token expires', async () => {
    const h = harness()
    const { key } = await h.createKey()
    // 2 s: time for the stream to start; `exp` is whole seconds, rounded up, so the token lives 2 to 3 s.
    const minted = (await (await h.fetch('/v1/tokens', authed(key, JSON.stringify({ ttlSeconds: 2 })))).json()) as { token: string; expiresAt: number }
    const res = await h.fetch('/v1/chat/completions', authed(minted.token, chatBody('chat-openai', 'hold [[emulator:fault=stall,after=3]]', { stream: true, max_tokens: 50 })))
    expect(res.status).toBe(200)
    // The stream stalls after 3 tokens: only the token's expiry (plus one 1 s check) can end it.
    const events = await readSSE(res)
    expect(Date.now()).toBeGreaterThanOrEqual(minted.expiresAt)
    expect(Date.now() - minted.expiresAt).toBeLessThan(3_000)
    expect(events.at(-1)).toMatchObject({ error: { code: 'invalid_api_key' } })
    expect(events).not.toContain('[DONE]')
  })

  it('auth-revocation: an open /v2 job event stream of a revoked key ends with event: error', async () => {
    const h = harness({ keyCacheTtlMs: 0 })
    const { id, key } = await h.createKey({ name: 'job streaming' })
    const input = { input: { messages: [{ role: 'user', content: 'hold [[emulator:fault=stall,after=2]]' }], sampling_params: { max_tokens: 20 }, stream: true } }
    const run = await h.fetch('/v2/chat-current/run', { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(input) })
    const job = (await run.json()) as { id: string }
    const res = await h.fetch(`/v2/chat-current/stream/${job.id}`, { headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream' } })
    expect(res.status).toBe(200)
    const reader = res.body!.getReader()
    const decoder = new TextDecoder()
    let text = ''
    while (!text.includes('event: output')) {
      const next = await reader.read()
      if (next.done) break
      text += decoder.decode(next.value, { stream: true })
    }
    expect((await h.fetch(`/admin/keys/${id}`, admin('DELETE'))).status).toBe(200)
    for (;;) {
      const next = await reader.read()
      if (next.done) break
      text += decoder.decode(next.value, { stream: true })
    }
    expect(text.trimEnd().split('\n\n').at(-1)).toBe('event: error\ndata: {"error":"This stream ended: its credential was revoked, rotated or expired while it was open.","code":"invalid_api_key"}')
    await h.settle()
    // The job is cancelled upstream, as on a caller's disconnect.
    expect(h.emulator.calls.some((c) => c.op === 'cancel')).toBe(true)
  })
})
