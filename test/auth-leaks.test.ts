/**
 * No secret leaks: across many error paths and every credential kind, the Runpod key, the admin token,
 * the signing secret and every key secret or token appear in no response (headers or body) and no log
 * line. The only answers allowed to show a secret are the ones that hand it out: key creation, rotation
 * and token minting.
 */
import { env } from 'cloudflare:test'
import { describe, expect, it } from 'vitest'
import { ADMIN_TOKEN, RUNPOD_KEY, authed, chatBody, harness } from './helpers.ts'

const SIGNING_SECRET = 'signing-secret-never-leaks-0123456789abcdef'
const APP = 'https://app.example.com'

async function capture(res: Response): Promise<string> {
  return `${res.status} ${JSON.stringify([...res.headers])} ${await res.text()}`
}

describe('no secret leaks', () => {
  it('holds across credential errors, scope errors, bad input, upstream faults and admin errors', async () => {
    const h = harness({ signingSecret: SIGNING_SECRET })
    const admin = (method: string, body?: unknown): RequestInit => ({ method, headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) })
    const secret = await h.createKey({ name: 'server', models: ['chat-openai', 'chat-classic'] })
    const publishable = await h.createKey({ name: 'site', kind: 'publishable', origins: [APP] })
    const minted = (await (await h.fetch('/v1/tokens', authed(secret.key, JSON.stringify({ origin: APP, models: ['chat-openai'] })))).json()) as { token: string }
    const rotated = (await (await h.fetch(`/admin/keys/${secret.id}/rotate`, admin('POST'))).json()) as { key: string }
    const token = (await (await h.fetch('/v1/tokens', authed(rotated.key, '{}'))).json()) as { token: string }
    const secrets = [RUNPOD_KEY, ADMIN_TOKEN, SIGNING_SECRET, secret.key, rotated.key, publishable.key, minted.token, token.token]
    const withOrigin = (init: RequestInit, origin: string): RequestInit => ({ ...init, headers: { ...(init.headers as Record<string, string>), origin } })
    const tampered = `${token.token.slice(0, -3)}AAA`

    const calls: [string, RequestInit][] = [
      ['/v1/models', {}],
      ['/v1/models', authed('pg_sk_' + 'x'.repeat(32))],
      ['/v1/models', authed(`${RUNPOD_KEY}`)],
      ['/v1/models', authed(secret.key)],
      ['/v1/models', withOrigin(authed(rotated.key), APP)],
      ['/v1/models', authed(publishable.key)],
      ['/v1/models', withOrigin(authed(publishable.key), 'https://evil.example')],
      ['/v1/models', authed(minted.token)],
      ['/v1/models', withOrigin(authed(tampered), APP)],
      [`/v1/models?access_token=${token.token}`, { headers: { accept: 'text/event-stream' } }],
      [`/v1/models?access_token=${rotated.key}`, { headers: { accept: 'text/event-stream' } }],
      ['/v1/chat/completions', authed(token.token, chatBody('chat-current'))],
      ['/v1/chat/completions', authed(token.token, chatBody('nope'))],
      ['/v1/chat/completions', authed(token.token, '{not json')],
      ['/v1/chat/completions', authed(token.token, chatBody('chat-openai', '[[emulator:fault=http,status=500]]'))],
      ['/v1/chat/completions', authed(token.token, chatBody('chat-classic', '[[emulator:fault=job_failed]]'))],
      ['/v1/chat/completions', authed(token.token, chatBody('chat-openai', '[[emulator:fault=mid_stream,after=2]]', { stream: true }))],
      ['/v1/chat/completions', authed(token.token, chatBody('chat-classic', '[[emulator:fault=mid_stream,after=2]]', { stream: true }))],
      ['/v1/chat/completions', withOrigin(authed(publishable.key, chatBody('chat-openai', 'hello', { stream: true })), APP)],
      ['/v1/tokens', authed(token.token, '{}')],
      ['/v1/tokens', authed(rotated.key, JSON.stringify({ ttlSeconds: 999_999 }))],
      ['/v1/tokens', withOrigin(authed(publishable.key, '{}'), APP)],
      ['/v1/chat/completions', { method: 'OPTIONS', headers: { origin: APP, 'access-control-request-method': 'POST' } }],
      ['/admin/keys', authed(rotated.key)],
      ['/admin/keys', authed('wrong-admin-token-0123456789')],
      ['/admin/keys', admin('GET')],
      [`/admin/keys/${secret.id}`, admin('GET')],
      [`/admin/keys/${secret.id}`, admin('PATCH', { origins: ['bad origin'] })],
      [`/admin/keys/${secret.id}`, admin('PATCH', { metadata: { note: 'x' } })],
      ['/admin/keys', admin('POST', { name: 'x', kind: 'publishable' })],
      [`/admin/keys/${publishable.id}`, admin('DELETE')],
      ['/v1/models', withOrigin(authed(publishable.key), APP)],
    ]
    const seen: string[] = []
    for (const [path, init] of calls) seen.push(await capture(await h.fetch(path, init)))
    await h.settle()
    const statuses = seen.map((s) => Number(s.slice(0, 3)))
    // The paths above really are failures (this test would prove nothing over 200s).
    expect(statuses.filter((s) => s >= 400).length).toBeGreaterThanOrEqual(22)
    const everything = [...seen, ...h.logs].join('\n')
    for (const s of secrets) {
      expect(everything).not.toContain(s)
      // Nor the distinctive body of a key without its prefix.
      expect(everything).not.toContain(s.slice(8, 30))
    }
    expect(h.logs.length).toBeGreaterThan(0)
  })

  it.each(['text', 'json'] as const)('an upstream 400 (%s) that echoes the Authorization header never shows the Runpod key to the caller', async (shape) => {
    // A proxy, a firewall or a `url:` server whose error page quotes the request's headers.
    const echoing = async (input: RequestInfo | URL, init?: RequestInit) => {
      const auth = new Request(input, init).headers.get('authorization') ?? ''
      return shape === 'text'
        ? new Response(`Bad Request: unexpected header "authorization: ${auth}"`, { status: 400, headers: { 'content-type': 'text/plain' } })
        : Response.json({ error: { message: `invalid request headers: authorization=${auth}` } }, { status: 400 })
    }
    const h = harness({
      models: { 'm-openai': { endpoints: [{ endpointId: 'abc123' }], mode: 'openai' }, 'm-native': { endpoints: [{ endpointId: 'def456' }], mode: 'native' } },
      fetch: echoing,
    })
    const { key } = await h.createKey()
    const answers = [await h.fetch('/v1/chat/completions', authed(key, chatBody('m-openai'))), await h.fetch('/v2/m-native/run', authed(key, JSON.stringify({ input: { prompt: 'hi' } })))]
    for (const res of answers) {
      const body = await res.text()
      // Still the upstream's refusal, relayed as the caller's 400, with the key taken out.
      expect(res.status).toBe(400)
      expect(body).toContain('authorization')
      expect(body).toContain('[redacted]')
      expect(body).not.toContain(RUNPOD_KEY)
    }
  })

  /** A gateway whose KV, once `fail(text)` is called, throws an error with that text: the error handler logs its cause. */
  function failingKv(signingSecret: string) {
    let failure = ''
    const h = harness({
      signingSecret,
      kv: () => {
        if (failure) throw new Error(failure)
        return env.PODGATE_KV
      },
    })
    return { h, fail: (text: string) => void (failure = text) }
  }

  it('the logger scrubs any podgate credential and the signing secret even when code logs them', async () => {
    const { h, fail } = failingKv(SIGNING_SECRET)
    const { key } = await h.createKey()
    const { token } = (await (await h.fetch('/v1/tokens', authed(key, '{}'))).json()) as { token: string }
    // Make an unexpected error carry every secret.
    fail(`leak ${key} ${token} ${SIGNING_SECRET} ${RUNPOD_KEY} pg_pk_${'a'.repeat(32)}`)
    const res = await h.fetch('/v1/models', authed(token))
    expect(res.status).toBe(500)
    const text = (await res.text()) + h.logs.join('\n')
    for (const s of [key, token, SIGNING_SECRET, RUNPOD_KEY, 'a'.repeat(32)]) expect(text).not.toContain(s)
    expect(h.logs.join('\n')).toContain('pg_tk_[redacted]')
  })

  it('the logger scrubs a secret with quotes, backslashes or control characters, as JSON spells it in a line', async () => {
    // An operator picks the signing secret (and the admin token): any character can be in it. Lines are
    // JSON, which spells `"` as `\"`: the scrubber must look for that spelling too.
    const odd = 'sign"ing\\secret\tnever-leaks-0123456789'
    const { h, fail } = failingKv(odd)
    const { key } = await h.createKey()
    fail(`leak ${odd}`)
    const res = await h.fetch('/v1/models', authed(key))
    expect(res.status).toBe(500)
    const text = (await res.text()) + h.logs.join('\n')
    expect(h.logs.join('\n')).toContain('[redacted]')
    for (const spelling of [odd, JSON.stringify(odd).slice(1, -1), 'never-leaks-0123456789']) expect(text).not.toContain(spelling)
  })
})
