/**
 * Credentials: secret keys, publishable keys and minted tokens; scopes, origins, expiry, tampering,
 * revocation, rotation, and the admin API that manages them.
 */
import { env } from 'cloudflare:test'
import { Hono } from 'hono'
import { describe, expect, it, vi } from 'vitest'
import { adminAuth } from '../src/admin/admin-auth.ts'
import { apiKeyAuth, bearerCredential } from '../src/auth/api-key-auth.ts'
import { generateKey, KeyStore } from '../src/auth/keys.ts'
import { TokenSigner } from '../src/auth/tokens.ts'
import { podgateCors } from '../src/cors/index.ts'
import { createErrorHandler } from '../src/http/respond.ts'
import type { GatewayEnv } from '../src/types.ts'
import { ADMIN_TOKEN, RUNPOD_KEY, authed, chatBody, harness, readSSE, streamedText } from './helpers.ts'
import type { Harness } from './helpers.ts'

const APP = 'https://app.example.com'
const EVIL = 'https://evil.example.net'

function admin(method: string, body?: unknown): RequestInit {
  return { method, headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) }
}

function withOrigin(init: RequestInit, origin: string): RequestInit {
  return { ...init, headers: { ...(init.headers as Record<string, string>), origin } }
}

async function mint(h: Harness, key: string, body: Record<string, unknown> = {}): Promise<{ token: string; id: string; expiresAt: number; models: string[] | null }> {
  const res = await h.fetch('/v1/tokens', authed(key, JSON.stringify(body)))
  if (res.status !== 201) throw new Error(`mint: ${res.status} ${await res.text()}`)
  return (await res.json()) as { token: string; id: string; expiresAt: number; models: string[] | null }
}

/** Asserts a 401 in OpenAI error JSON with a Bearer challenge; returns the message. */
async function expect401(res: Response): Promise<string> {
  expect(res.status).toBe(401)
  expect(res.headers.get('www-authenticate')).toMatch(/^Bearer realm="podgate"/)
  const body = (await res.json()) as { error: { type: string; code: string; message: string } }
  expect(body.error.type).toBe('authentication_error')
  return body.error.message
}

describe('secret keys', () => {
  it('work from servers (no Origin) and are refused from a browser origin they do not list', async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'server' })
    expect((await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai')))).status).toBe(200)
    const message = await expect401(await h.fetch('/v1/chat/completions', withOrigin(authed(key, chatBody('chat-openai')), APP)))
    expect(message).toMatch(/secret key was sent from the browser origin 'https:\/\/app\.example\.com'.*POST \/v1\/tokens/)
    expect(h.emulator.calls).toHaveLength(1)
  })

  it('work from an origin the key explicitly allows', async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'internal tool', origins: [APP] })
    expect((await h.fetch('/v1/models', withOrigin(authed(key), APP))).status).toBe(200)
    await expect401(await h.fetch('/v1/models', withOrigin(authed(key), EVIL)))
  })

  it("supplied by a host app's credential hook from server-side state skip the origin rule; carried ones do not", async () => {
    const setup = harness()
    const { key } = await setup.createKey({ name: 'user 42' })
    const sessions = new Map([['s42', key]])
    const h = harness({
      credential: (c) => {
        const session = /session=(\w+)/.exec(c.req.header('cookie') ?? '')?.[1]
        return session ? sessions.get(session) : bearerCredential(c)
      },
      // The page is served from APP; podgate answers at http://podgate in this harness.
      credentialOrigins: [APP],
    })
    // A same-origin page POSTs with its Origin and cookie: the key never left the server.
    const viaSession = await h.fetch('/v1/chat/completions', { method: 'POST', headers: { cookie: 'session=s42', origin: APP, 'content-type': 'application/json' }, body: chatBody('chat-openai') })
    expect(viaSession.status).toBe(200)
    await expect401(await h.fetch('/v1/models', withOrigin(authed(key), APP)))
  })

  // Found in the held-connection review: credentialOrigins was used as written, so an origin spelled with
  // a trailing slash, a default port or capitals never matched a browser's Origin (every session POST a
  // 403), and a path or a wildcard was taken without a word.
  it('credentialOrigins are canonical origins: spelled loosely they still match, and anything else refuses to start, naming the entry', async () => {
    const setup = harness()
    const { key } = await setup.createKey({ name: 'user 42' })
    const h = harness({ credential: (c) => (c.req.header('cookie') === 'session=s42' ? key : undefined), credentialOrigins: ['https://App.Example.com:443/'] })
    const res = await h.fetch('/v1/chat/completions', { method: 'POST', headers: { cookie: 'session=s42', origin: APP, 'content-type': 'application/json' }, body: chatBody('chat-openai') })
    expect(res.status).toBe(200)
    for (const bad of ['https://app.example.com/app', 'https://*.example.com', 'app.example.com']) {
      expect(() => harness({ credentialOrigins: [APP, bad] })).toThrow(`credentialOrigins: ${JSON.stringify(bad)} must be a browser origin`)
    }
  })

  // Found in the auth review: an Authorization header that carried no Bearer credential (a host app's or a
  // proxy's Basic auth in front of podgate) hid the x-api-key beside it: 401 "Missing API key".
  it('come from x-api-key when Authorization carries no Bearer credential; a Bearer one wins', async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'behind basic auth' })
    const basic = 'Basic dXNlcjpwYXNz'
    expect((await h.fetch('/v1/models', { headers: { authorization: basic, 'x-api-key': key } })).status).toBe(200)
    const anthropic = await h.fetch('/v1/messages', { method: 'POST', headers: { authorization: basic, 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'nope', max_tokens: 5, messages: [] }) })
    expect(anthropic.status).not.toBe(401)
    expect(await expect401(await h.fetch('/v1/models', { headers: { authorization: 'Bearer pg_sk_wrong', 'x-api-key': key } }))).toMatch(/Invalid API key/)
    expect((await h.fetch('/admin/keys', { headers: { authorization: basic, 'x-api-key': ADMIN_TOKEN } })).status).toBe(200)
  })

  // A key looked up is kept in the isolate's bounded cache, unknown ones too (a bad key sent again costs
  // no read). Random keys never come again: a flood of them must not push out the keys callers use.
  it('a flood of unknown keys does not push a good key out of the full lookup cache', async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'busy' })
    const reads: string[] = []
    // Its own namespace object, so its own cache (one per namespace per isolate).
    const kv = { get: (name: string, type: 'json') => (reads.push(name), env.PODGATE_KV.get(name, type)) } as unknown as KVNamespace
    const store = new KeyStore(kv, { cacheTtlMs: 60_000, cacheSize: 3 })
    expect(await store.lookup(key)).not.toBeNull()
    for (let i = 0; i < 5; i++) expect(await store.lookup(generateKey())).toBeNull()
    reads.length = 0
    expect(await store.lookup(key)).not.toBeNull()
    expect(reads).toEqual([])
  })

  it('stop working after expiresAt', async () => {
    const h = harness()
    const { id, key } = await h.createKey({ name: 'short', expiresAt: Date.now() + 60_000 })
    expect((await h.fetch('/v1/models', authed(key))).status).toBe(200)
    // Scope changes apply at once in the isolate that made them.
    expect((await h.fetch(`/admin/keys/${id}`, admin('PATCH', { expiresAt: Date.now() + 100 }))).status).toBe(200)
    await new Promise((r) => setTimeout(r, 120))
    expect(await expect401(await h.fetch('/v1/models', authed(key)))).toMatch(/expired/)
  })
})

describe('publishable keys', () => {
  it('are pg_pk_ keys that work only from their allowed origins', async () => {
    const h = harness()
    const created = await h.createKey({ name: 'site', kind: 'publishable', origins: ['https://App.Example.com:443/'], models: ['chat-openai'], quota: { requestsPerMinute: 10 } })
    expect(created.key).toMatch(/^pg_pk_[A-Za-z0-9]{32}$/)
    expect(created).toMatchObject({ kind: 'publishable', origins: [APP] })
    const ok = await h.fetch('/v1/chat/completions', withOrigin(authed(created.key, chatBody('chat-openai')), APP))
    expect(ok.status).toBe(200)
    expect(await expect401(await h.fetch('/v1/models', authed(created.key)))).toMatch(/carries no Origin/)
    expect(await expect401(await h.fetch('/v1/models', withOrigin(authed(created.key), EVIL)))).toMatch(/does not allow the origin/)
    // The refused Origin is echoed in the message only as 200 printable ASCII characters.
    const hostile = `https://${'a'.repeat(300)}.example`
    const echoed = await expect401(await h.fetch('/v1/models', withOrigin(authed(created.key), 'https://e\tvil.example')))
    expect(echoed).toContain("origin 'https://e?vil.example'")
    const long = await expect401(await h.fetch('/v1/models', withOrigin(authed(created.key), hostile)))
    expect(long).toContain(`'${hostile.slice(0, 200)}'`)
    expect(long).not.toContain('a'.repeat(201))
    const scoped = await h.fetch('/v1/chat/completions', withOrigin(authed(created.key, chatBody('chat-classic')), APP))
    expect(scoped.status).toBe(403)
    expect(((await scoped.json()) as { error: { type: string } }).error.type).toBe('permission_error')
  })

  it('keep their origins, and tokens theirs, in one canonical spelling, on create, update and mint', async () => {
    const h = harness()
    const created = await h.createKey({ name: 'site', kind: 'publishable', origins: [APP] })
    const patched = await h.fetch(`/admin/keys/${created.id}`, admin('PATCH', { origins: ['HTTPS://App.Example.COM:443/', 'http://localhost:8080'] }))
    expect(((await patched.json()) as { origins: string[] }).origins).toEqual([APP, 'http://localhost:8080'])
    const server = await h.createKey({ name: 'server' })
    const minted = await h.fetch('/v1/tokens', authed(server.key, JSON.stringify({ origin: 'https://App.Example.com:443/' })))
    const { token, origin } = (await minted.json()) as { token: string; origin: string }
    expect(origin).toBe(APP)
    expect((await h.fetch('/v1/models', withOrigin(authed(token), APP))).status).toBe(200)
  })

  it('need an origin and cannot mint tokens', async () => {
    const h = harness()
    const none = await h.fetch('/admin/keys', admin('POST', { name: 'site', kind: 'publishable' }))
    expect(none.status).toBe(400)
    expect(((await none.json()) as { error: { param: string } }).error.param).toBe('origins')
    const bad = await h.fetch('/admin/keys', admin('POST', { name: 'site', kind: 'publishable', origins: ['https://*.example.com'] }))
    expect(bad.status).toBe(400)
    const { key } = await h.createKey({ name: 'site', kind: 'publishable', origins: [APP] })
    const res = await h.fetch('/v1/tokens', withOrigin(authed(key, '{}'), APP))
    expect(res.status).toBe(403)
  })
})

describe('tokens', () => {
  it('are minted by a secret key, scoped to a subset of its models, and stream', async () => {
    const h = harness()
    const { id, key } = await h.createKey({ name: 'backend', models: ['chat-openai', 'chat-classic'] })
    const minted = await mint(h, key, { models: ['chat-classic'], ttlSeconds: 120 })
    expect(minted.token).toMatch(/^pg_tk_[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/)
    expect(minted).toMatchObject({ object: 'token', keyId: id, models: ['chat-classic'], origin: null })
    // Whole seconds, rounded up: at least the ttl asked, less than a second more.
    expect(minted.expiresAt).toBeGreaterThan(Date.now() + 110_000)
    expect(minted.expiresAt).toBeLessThan(Date.now() + 121_000)
    const res = await h.fetch('/v1/chat/completions', withOrigin(authed(minted.token, chatBody('chat-classic', 'hi', { stream: true })), APP))
    expect(res.status).toBe(200)
    expect(streamedText(await readSSE(res)).length).toBeGreaterThan(0)
    const outside = await h.fetch('/v1/chat/completions', authed(minted.token, chatBody('chat-openai')))
    expect(outside.status).toBe(403)
    const models = (await (await h.fetch('/v1/models', authed(minted.token))).json()) as { data: { id: string }[] }
    expect(models.data.map((m) => m.id)).toEqual(['chat-classic'])
    expect((await h.fetch('/v1/models/chat-classic', authed(minted.token))).status).toBe(200)
    expect((await h.fetch('/v1/models/chat-openai', authed(minted.token))).status).toBe(403)
  })

  it('take every default from an absent or empty body; a malformed one is a 400 in OpenAI error JSON', async () => {
    const h = harness({ tokens: { defaultTtlSeconds: 120 } })
    const { id, key } = await h.createKey({ name: 'backend' })
    const headers = { authorization: `Bearer ${key}` }
    for (const init of [{ method: 'POST', headers }, { method: 'POST', headers, body: '' }, authed(key, '')]) {
      const res = await h.fetch('/v1/tokens', init)
      expect(res.status, JSON.stringify(init.body)).toBe(201)
      const minted = (await res.json()) as { keyId: string; models: null; origin: null; quota: null; sub: null; expiresAt: number; token: string }
      expect(minted).toMatchObject({ keyId: id, models: null, origin: null, quota: null, sub: null })
      expect(minted.expiresAt).toBeGreaterThan(Date.now() + 110_000)
      expect((await h.fetch('/v1/models', authed(minted.token))).status).toBe(200)
    }
    for (const [body, code] of [['{', 'invalid_json'], [' ', 'invalid_json'], ['null', 'invalid_request'], ['[]', 'invalid_request']]) {
      const res = await h.fetch('/v1/tokens', authed(key, body))
      expect(res.status, body).toBe(400)
      expect(((await res.json()) as { error: { code: string } }).error.code, body).toBe(code)
    }
  })

  it('cannot widen the key: models outside it, too long a TTL, a token or bad input minting are refused', async () => {
    const h = harness({ tokens: { maxTtlSeconds: 300 } })
    const { key } = await h.createKey({ name: 'backend', models: ['chat-openai'] })
    const wider = await h.fetch('/v1/tokens', authed(key, JSON.stringify({ models: ['chat-classic'] })))
    expect(wider.status).toBe(403)
    const unknown = await h.fetch('/v1/tokens', authed(key, JSON.stringify({ models: ['nope'] })))
    expect(unknown.status).toBe(404)
    const long = await h.fetch('/v1/tokens', authed(key, JSON.stringify({ ttlSeconds: 301 })))
    expect(long.status).toBe(400)
    expect(((await long.json()) as { error: { message: string } }).error.message).toMatch(/at most 300/)
    expect((await h.fetch('/v1/tokens', authed(key, JSON.stringify({ origin: 'not an origin' })))).status).toBe(400)
    expect((await h.fetch('/v1/tokens', authed(key, JSON.stringify({ extra: 1 })))).status).toBe(400)
    // JSON.parse reads 1e400 as Infinity, which the message called "expected a number, got a number".
    const huge = await h.fetch('/v1/tokens', authed(key, '{"ttlSeconds":1e400}'))
    expect(huge.status).toBe(400)
    expect(((await huge.json()) as { error: { message: string } }).error.message).toBe("Invalid type for 'ttlSeconds': expected a number, got Infinity")
    const token = await mint(h, key)
    expect(token.expiresAt).toBeLessThan(Date.now() + 301_000)
    expect((await h.fetch('/v1/tokens', authed(token.token, '{}'))).status).toBe(403)
  })

  it("never outlive their key: expiresAt is capped at the key's own expiry, to the whole second before it", async () => {
    const h = harness()
    const keyExpiresAt = Date.now() + 90_500
    const { key } = await h.createKey({ name: 'short-lived', expiresAt: keyExpiresAt })
    for (const body of [{}, { ttlSeconds: 3600 }]) {
      const minted = await mint(h, key, body)
      expect(minted.expiresAt).toBeLessThanOrEqual(keyExpiresAt)
      expect(minted.expiresAt).toBeGreaterThan(keyExpiresAt - 2000)
      expect((await h.fetch('/v1/models', authed(minted.token))).status).toBe(200)
    }
    // A token shorter-lived than its key keeps the lifetime it asked for.
    expect((await mint(h, key, { ttlSeconds: 30 })).expiresAt).toBeLessThan(Date.now() + 31_000)
  })

  it('are not minted from a key that expires before a token could live a second: 401, as an expired key gets', async () => {
    const h = harness()
    // A clock at 200 ms past a second, held still: a token's expiresAt is whole seconds.
    const now = (Math.floor(Date.now() / 1000) + 1) * 1000 + 200
    const clock = vi.spyOn(Date, 'now').mockReturnValue(now)
    try {
      // Capped at the key's expiry rounded down, the token would expire 200 ms ago, or live 800 ms.
      for (const left of [500, 1500]) {
        const { key } = await h.createKey({ name: 'expiring', expiresAt: now + left })
        expect(await expect401(await h.fetch('/v1/tokens', authed(key, '{}')))).toMatch(/expires at .*: extend its expiresAt/)
        expect((await h.fetch('/v1/models', authed(key))).status).toBe(200)
      }
      const { key } = await h.createKey({ name: 'expiring', expiresAt: now + 1800 })
      expect((await mint(h, key)).expiresAt).toBe(now + 1800)
    } finally {
      clock.mockRestore()
    }
  })

  it('live at least the ttlSeconds asked, whatever the millisecond they are minted at', async () => {
    const signer = new TokenSigner({ secret: RUNPOD_KEY })
    const input = { tokenId: 'tok_t', keyId: 'key_t', keyGeneration: 'g', ttlSeconds: 1, models: null, origin: null, quota: null }
    for (const ms of [0, 1, 500, 999]) {
      const now = 1_800_000_000_000 + ms
      const { token, claims } = await signer.mint(input, now)
      expect(claims.exp * 1000, `minted at +${ms} ms`).toBeGreaterThanOrEqual(now + 1000)
      expect(claims.exp * 1000).toBeLessThan(now + 2000)
      expect((await signer.verify(token, now + 999)).ok, `minted at +${ms} ms`).toBe(true)
    }
    // The key's expiry still caps it, rounded down to the second.
    expect((await signer.mint({ ...input, ttlSeconds: 60, keyExpiresAt: 1_800_000_030_700 }, 1_800_000_000_999)).claims.exp).toBe(1_800_000_030)
  })

  it('bound to an origin work only from it', async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'backend' })
    const { token } = await mint(h, key, { origin: APP })
    expect((await h.fetch('/v1/models', withOrigin(authed(token), APP))).status).toBe(200)
    expect(await expect401(await h.fetch('/v1/models', withOrigin(authed(token), EVIL)))).toMatch(/does not allow the origin/)
    expect(await expect401(await h.fetch('/v1/models', authed(token)))).toMatch(/carries no Origin/)
  })

  it('expired, tampered, foreign-signed and truncated tokens get 401', async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'backend' })
    const { token } = await mint(h, key)
    const [body, sig] = token.split('.') as [string, string]
    const claims = JSON.parse(atob(body.slice('pg_tk_'.length).replaceAll('-', '+').replaceAll('_', '/'))) as Record<string, unknown>
    const forged = 'pg_tk_' + btoa(JSON.stringify({ ...claims, models: null, exp: 9_999_999_999 })).replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '')
    const other = new TokenSigner({ secret: 'another-gateway-secret-0123456789abcdef' })
    const foreign = (await other.mint({ tokenId: 'tok_x', keyId: String(claims.kid), keyGeneration: String(claims.gen), ttlSeconds: 60, models: null, origin: null, quota: null })).token
    // The MAC's last character carries two spare bits: another spelling of the same bytes is refused too.
    const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
    const respelled = `${body}.${sig.slice(0, -1)}${B64[B64.indexOf(sig.at(-1)!) ^ 1]}`
    for (const bad of [`${forged}.${sig}`, `${body}.${sig.slice(0, -2)}AA`, body, foreign, 'pg_tk_', `${token}x`, respelled]) {
      expect(await expect401(await h.fetch('/v1/models', authed(bad)))).toMatch(/Invalid token/)
    }
    const signer = new TokenSigner({ secret: RUNPOD_KEY })
    const expired = (await signer.mint({ tokenId: 'tok_e', keyId: String(claims.kid), keyGeneration: String(claims.gen), ttlSeconds: 60, models: null, origin: null, quota: null }, Date.now() - 61_000)).token
    expect(await expect401(await h.fetch('/v1/models', authed(expired)))).toMatch(/expired at .*mint a new one/)
  })

  it('are signed with signingSecret when set, not with the Runpod key', async () => {
    const h = harness({ signingSecret: 'signing-secret-for-tests-0123456789abcdef' })
    const { key } = await h.createKey({ name: 'backend' })
    const { token } = await mint(h, key)
    expect((await h.fetch('/v1/models', authed(token))).status).toBe(200)
    const byRunpodKey = harness()
    expect((await byRunpodKey.fetch('/v1/models', authed(token))).status).toBe(401)
  })

  it('carry their own quota and id to the principal', async () => {
    const app = new Hono<GatewayEnv>()
    const h = harness()
    const { id, key } = await h.createKey({ name: 'backend', quota: { requestsPerDay: 100 } })
    const { token, id: tokenId } = await mint(h, key, { quota: { requestsPerMinute: 2 } })
    app.use(apiKeyAuth({ store: () => new KeyStore(env.PODGATE_KV, { cacheTtlMs: 0 }), tokens: new TokenSigner({ secret: RUNPOD_KEY }) }))
    app.get('/whoami', (c) => c.json(c.get('principal')))
    const principal = await (await app.request('/whoami', authed(token), env)).json()
    expect(principal).toMatchObject({ keyId: id, credential: 'token', tokenId, quota: { requestsPerDay: 100 }, tokenQuota: { requestsPerMinute: 2 } })
  })

  it('minted with a quota are held to it, counted apart from the key and from sibling tokens', async () => {
    // The quota's clock is fixed mid-minute: every request falls in one window whenever the test runs.
    const h = harness({ quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } })
    const { key } = await h.createKey({ name: 'backend', quota: { requestsPerMinute: 100 } })
    const { token } = await mint(h, key, { quota: { requestsPerMinute: 2 } })
    const sibling = (await mint(h, key, { quota: { requestsPerMinute: 2 } })).token
    for (let i = 0; i < 2; i++) expect((await h.fetch('/v1/chat/completions', authed(token, chatBody('chat-openai')))).status).toBe(200)
    const limited = await h.fetch('/v1/chat/completions', authed(token, chatBody('chat-openai')))
    expect(limited.status).toBe(429)
    expect(limited.headers.get('retry-after')).toMatch(/^\d+$/)
    expect((await h.fetch('/v1/chat/completions', authed(sibling, chatBody('chat-openai')))).status).toBe(200)
    expect((await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai')))).status).toBe(200)
    expect(h.emulator.calls).toHaveLength(4)
  })

  // Found in the quota review: a token's own counter was also held to the gateway's and the model's
  // default limits, which its key's own quota lifts, so a token that only narrowed one limit was refused
  // by a default its key is not held to.
  it('minted with a quota are held to it and to their key\'s, not to the defaults their key overrides', async () => {
    const h = harness({ quota: { defaults: { requestsPerMinute: 2 }, now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } })
    const { key } = await h.createKey({ name: 'backend', quota: { requestsPerMinute: 100 } })
    const { token } = await mint(h, key, { quota: { requestsPerDay: 50 } })
    for (let i = 0; i < 3; i++) expect((await h.fetch('/v1/chat/completions', authed(token, chatBody('chat-openai')))).status).toBe(200)
    await h.settle()
    const usage = (await (await h.fetch('/v1/usage', authed(token))).json()) as { policy: unknown; limits: unknown[] }
    expect(usage.policy).toEqual({ requestsPerDay: 50 })
    expect(usage.limits).toMatchObject([{ name: 'rpd', limit: 50, used: 3 }])
  })

  // Found in review: its own counter holding no completion limit (only a controlPerMinute), such a token
  // is held by its key's limits alone, yet /v1/usage answered for the token: no policy, no limits.
  it('minted with a quota that limits no completion see their key\'s limits on /v1/usage, the ones that hold them', async () => {
    const h = harness({ quota: { defaults: { requestsPerMinute: 2 }, now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } })
    const { key, id } = await h.createKey({ name: 'backend' })
    const { token } = await mint(h, key, { quota: { controlPerMinute: 30 } })
    for (let i = 0; i < 2; i++) expect((await h.fetch('/v1/chat/completions', authed(token, chatBody('chat-openai')))).status).toBe(200)
    expect((await h.fetch('/v1/chat/completions', authed(token, chatBody('chat-openai')))).status).toBe(429)
    await h.settle()
    const usage = (await (await h.fetch('/v1/usage', authed(token))).json()) as { key_id: string; policy: unknown; limits: unknown[] }
    expect(usage.key_id).toBe(id)
    expect(usage.policy).toEqual({ requestsPerMinute: 2 })
    expect(usage.limits).toMatchObject([{ name: 'rpm', limit: 2, used: 2 }])
  })

  // The defaults a key does not lift still hold its tokens, through the key's own count.
  it('minted with a quota are still held to the defaults their key does not lift', async () => {
    const h = harness({ quota: { defaults: { requestsPerMinute: 2 }, now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } })
    const { key } = await h.createKey({ name: 'backend', quota: { tokensPerDay: 1_000_000 } })
    const { token } = await mint(h, key, { quota: { requestsPerDay: 50 } })
    for (let i = 0; i < 2; i++) expect((await h.fetch('/v1/chat/completions', authed(token, chatBody('chat-openai')))).status).toBe(200)
    const limited = await h.fetch('/v1/chat/completions', authed(token, chatBody('chat-openai')))
    expect(limited.status).toBe(429)
    expect(((await limited.json()) as { error: { message: string } }).error.message).toContain('2 requests per minute for this key')
  })

  it('a token within its own quota refused by its key\'s: the 429 names the key\'s limit in its headers, not the token\'s', async () => {
    const h = harness({ quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } })
    const { key } = await h.createKey({ name: 'backend', quota: { requestsPerMinute: 1 } })
    const { token } = await mint(h, key, { quota: { requestsPerMinute: 10 } })
    expect((await h.fetch('/v1/chat/completions', authed(token, chatBody('chat-openai')))).status).toBe(200)
    const limited = await h.fetch('/v1/chat/completions', authed(token, chatBody('chat-openai')))
    expect(limited.status).toBe(429)
    expect(limited.headers.get('x-ratelimit-limit-requests')).toBe('1')
    expect(limited.headers.get('x-ratelimit-remaining-requests')).toBe('0')
    expect(((await limited.json()) as { error: { message: string } }).error.message).toContain('1 request')
  })

  it('with a quota of their own, answer with what is left of the tighter of theirs and their key\'s, limit by limit', async () => {
    const h = harness({ quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } })
    const { key } = await h.createKey({ name: 'backend', quota: { requestsPerMinute: 2, tokensPerDay: 1_000_000 } })
    const { token } = await mint(h, key, { quota: { requestsPerMinute: 10, tokensPerDay: 5_000 } })
    const ok = await h.fetch('/v1/chat/completions', authed(token, chatBody('chat-openai')))
    expect(ok.status).toBe(200)
    // The key allows one more request this minute (the token nine); the token fewer tokens today than the key.
    expect(ok.headers.get('x-ratelimit-limit-requests')).toBe('2')
    expect(ok.headers.get('x-ratelimit-remaining-requests')).toBe('1')
    expect(ok.headers.get('x-ratelimit-limit-tokens')).toBe('5000')
    expect(ok.headers.get('ratelimit-policy')).toBe('"rpm";q=2;w=60, "tpd";q=5000;w=86400')
    expect(ok.headers.get('ratelimit')).toMatch(/^"rpm";r=1;t=30, "tpd";r=\d+;t=\d+$/)
    expect((await h.fetch('/v1/chat/completions', authed(token, chatBody('chat-openai')))).headers.get('x-ratelimit-remaining-requests')).toBe('0')
    expect((await h.fetch('/v1/chat/completions', authed(token, chatBody('chat-openai')))).status).toBe(429)
  })

  it('stop working when the parent key is revoked, rotated or narrowed', async () => {
    const h = harness()
    const a = await h.createKey({ name: 'a' })
    const revokedToken = (await mint(h, a.key)).token
    expect((await h.fetch('/v1/models', authed(revokedToken))).status).toBe(200)
    await h.fetch(`/admin/keys/${a.id}`, admin('DELETE'))
    expect(await expect401(await h.fetch('/v1/models', authed(revokedToken)))).toMatch(/revoked, rotated or expired/)

    const b = await h.createKey({ name: 'b' })
    const rotatedToken = (await mint(h, b.key)).token
    expect((await h.fetch(`/admin/keys/${b.id}/rotate`, admin('POST'))).status).toBe(200)
    await expect401(await h.fetch('/v1/models', authed(rotatedToken)))

    const c = await h.createKey({ name: 'c' })
    const narrowedToken = (await mint(h, c.key, { models: ['chat-openai', 'chat-classic'] })).token
    await h.fetch(`/admin/keys/${c.id}`, admin('PATCH', { models: ['chat-classic'] }))
    expect((await h.fetch('/v1/chat/completions', authed(narrowedToken, chatBody('chat-openai')))).status).toBe(403)
    expect((await h.fetch('/v1/chat/completions', authed(narrowedToken, chatBody('chat-classic')))).status).toBe(200)
  })

  it('stop working when the parent key expires before them (its expiry moved up after they were minted)', async () => {
    const h = harness()
    const { id, key } = await h.createKey({ name: 'soon' })
    const token = (await mint(h, key, { ttlSeconds: 3_600 })).token
    expect((await h.fetch('/v1/models', authed(token))).status).toBe(200)
    expect((await h.fetch(`/admin/keys/${id}`, admin('PATCH', { expiresAt: Date.now() + 100 }))).status).toBe(200)
    await new Promise((r) => setTimeout(r, 120))
    expect(await expect401(await h.fetch('/v1/models', authed(token)))).toMatch(/revoked, rotated or expired/)
  })
})

describe('access_token in the URL', () => {
  function sseApp(queryToken: boolean) {
    const app = new Hono<GatewayEnv>()
    app.onError(createErrorHandler(async () => {}))
    app.use(apiKeyAuth({ store: () => new KeyStore(env.PODGATE_KV, { cacheTtlMs: 0 }), tokens: new TokenSigner({ secret: RUNPOD_KEY }), queryToken }))
    app.get('/events', (c) => c.text(`data: ${c.get('principal').credential}\n\n`, 200, { 'content-type': 'text/event-stream' }))
    app.post('/events', (c) => c.text('posted'))
    return app
  }
  const sse = { accept: 'text/event-stream' }

  it('is accepted only for tokens, on GET event-stream requests, where the route opts in', async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'backend' })
    const { token } = await mint(h, key)
    const open = sseApp(true)
    const ok = await open.request(`/events?access_token=${token}`, { headers: sse }, env)
    expect(ok.status).toBe(200)
    expect(await ok.text()).toBe('data: token\n\n')
    expect(await expect401(await open.request(`/events?access_token=${key}`, { headers: sse }, env))).toMatch(/keys never belong in a URL/)
    expect(await expect401(await open.request(`/events?access_token=${token}`, {}, env))).toMatch(/only on GET event-stream/)
    expect(await expect401(await open.request(`/events?access_token=${token}`, { method: 'POST', headers: sse }, env))).toMatch(/only on GET event-stream/)
    expect(await expect401(await sseApp(false).request(`/events?access_token=${token}`, { headers: sse }, env))).toMatch(/only on GET event-stream/)
    expect(await expect401(await h.fetch(`/v1/models?access_token=${token}`, { headers: sse }))).toMatch(/only on GET event-stream/)
  })
})

describe('the middleware on its own', () => {
  it('refuses with its own status in OpenAI error JSON in a Hono app with no onError of podgate\'s, CORS headers included', async () => {
    const app = new Hono<GatewayEnv>()
    app.use('/api/*', podgateCors(), apiKeyAuth({ store: () => new KeyStore(env.PODGATE_KV, { cacheTtlMs: 0 }) }))
    app.get('/api/hello', (c) => c.json({ key: c.get('principal').keyId }))
    app.use('/ops/*', adminAuth({ token: ADMIN_TOKEN }))
    app.get('/ops/status', (c) => c.text('ok'))
    app.use('/closed/*', adminAuth({ token: undefined }))
    app.get('/closed/status', (c) => c.text('ok'))
    const h = harness()
    const { id, key } = await h.createKey({ name: 'server' })

    expect(await (await app.request('/api/hello', authed(key), env)).json()).toEqual({ key: id })
    expect(await expect401(await app.request('/api/hello', {}, env))).toMatch(/Missing API key/)
    expect(await expect401(await app.request('/api/hello', authed('pg_sk_unknown'), env))).toMatch(/Invalid API key/)
    const fromPage = await app.request('/api/hello', withOrigin(authed(key), APP), env)
    expect(fromPage.headers.get('access-control-allow-origin')).toBe(APP)
    expect(await expect401(fromPage)).toMatch(/Secret keys belong on servers/)
    const wrongAdmin = await app.request('/ops/status', authed('not-the-token'), env)
    expect(wrongAdmin.status).toBe(401)
    expect(wrongAdmin.headers.get('www-authenticate')).toBe('Bearer realm="podgate-admin"')
    expect(((await wrongAdmin.json()) as { error: { code: string } }).error.code).toBe('invalid_api_key')
    expect(await (await app.request('/ops/status', authed(ADMIN_TOKEN), env)).text()).toBe('ok')
    expect((await app.request('/closed/status', authed(ADMIN_TOKEN), env)).status).toBe(404)
  })
})

describe('admin API: scopes, rotation, revocation', () => {
  it('creates with every field, lists without secrets, patches scopes, rejects bad patches', async () => {
    const h = harness()
    const expiresAt = Date.now() + 86_400_000
    const created = await h.createKey({ name: 'full', models: ['chat-openai'], origins: [APP], metadata: { team: 'web' }, quota: { requestsPerMinute: 5 }, expiresAt })
    expect(created).toMatchObject({ kind: 'secret', models: ['chat-openai'], origins: [APP], metadata: { team: 'web' }, quota: { requestsPerMinute: 5 }, expiresAt, revokedAt: null })
    const patched = await h.fetch(`/admin/keys/${created.id}`, admin('PATCH', { name: 'renamed', models: null, origins: [], metadata: { team: 'api' } }))
    expect(patched.status).toBe(200)
    const view = (await patched.json()) as Record<string, unknown>
    expect(view).toMatchObject({ id: created.id, name: 'renamed', models: null, origins: [], metadata: { team: 'api' }, quota: { requestsPerMinute: 5 }, expiresAt })
    expect(view).not.toHaveProperty('hash')
    expect(view).not.toHaveProperty('key')
    const before = JSON.stringify((await env.PODGATE_KV.list()).keys)
    for (const bad of [{ kind: 'publishable' }, { models: ['nope'] }, { expiresAt: 1 }, { origins: ['ftp://x'] }, { name: '' }]) {
      expect((await h.fetch(`/admin/keys/${created.id}`, admin('PATCH', bad))).status).toBe(400)
    }
    expect((await h.fetch('/admin/keys/key_AAAAAAAAAAAAAAAA', admin('PATCH', { name: 'x' }))).status).toBe(404)
    expect(JSON.stringify((await env.PODGATE_KV.list()).keys)).toBe(before)
    const got = (await (await h.fetch(`/admin/keys/${created.id}`, admin('GET'))).json()) as Record<string, unknown>
    expect(got.name).toBe('renamed')
  })

  it('rotates: a new secret for the same id, the old one refused at once in this isolate', async () => {
    const h = harness()
    const { id, key } = await h.createKey({ name: 'rotating', models: ['chat-openai'] })
    expect((await h.fetch('/v1/models', authed(key))).status).toBe(200)
    const res = await h.fetch(`/admin/keys/${id}/rotate`, admin('POST'))
    expect(res.status).toBe(200)
    const rotated = (await res.json()) as { id: string; key: string; models: string[] }
    expect(rotated).toMatchObject({ id, models: ['chat-openai'] })
    expect(rotated.key).toMatch(/^pg_sk_/)
    expect(rotated.key).not.toBe(key)
    expect(await expect401(await h.fetch('/v1/models', authed(key)))).toMatch(/rotation/)
    expect((await h.fetch('/v1/models', authed(rotated.key))).status).toBe(200)
    const raw = JSON.stringify(await Promise.all((await env.PODGATE_KV.list()).keys.map((k) => env.PODGATE_KV.get(k.name))))
    expect(raw).not.toContain(rotated.key)
    expect(raw).not.toContain(key)
    await h.fetch(`/admin/keys/${id}`, admin('DELETE'))
    expect((await h.fetch(`/admin/keys/${id}/rotate`, admin('POST'))).status).toBe(400)
    expect((await h.fetch(`/admin/keys/${id}`, admin('PATCH', { name: 'x' }))).status).toBe(400)
  })

  it('revocation bound: another isolate refuses a revoked key once its cached lookup (keyCacheTtlMs) expires, and never later', async () => {
    const ttl = 200
    const writer = harness()
    // The key cache belongs to a KV binding in an isolate; a binding object of its own stands for another isolate.
    const kv = env.PODGATE_KV
    const isolateKv = { get: kv.get.bind(kv), put: kv.put.bind(kv), delete: kv.delete.bind(kv), list: kv.list.bind(kv), getWithMetadata: kv.getWithMetadata.bind(kv) } as KVNamespace
    const reader = harness({ keyCacheTtlMs: ttl, kv: () => isolateKv })
    const { id, key } = await writer.createKey()
    const { token } = await mint(writer, key)
    expect((await reader.fetch('/v1/models', authed(key))).status).toBe(200)
    expect((await reader.fetch('/v1/models', authed(token))).status).toBe(200)
    const revokedAt = Date.now()
    // Simulate the revoking isolate being another one: write the revoked record straight to KV.
    const record = JSON.parse((await env.PODGATE_KV.get(`key:${id}`))!) as { hash: string }
    const revoked = JSON.stringify({ ...record, revokedAt })
    await env.PODGATE_KV.put(`key:${id}`, revoked)
    await env.PODGATE_KV.put(`keyhash:${record.hash}`, revoked)
    // Within the TTL the reader still serves from its cache (the bound is real); past it, it must refuse.
    expect((await reader.fetch('/v1/models', authed(key))).status).toBe(200)
    await new Promise((r) => setTimeout(r, ttl + 20))
    expect((await reader.fetch('/v1/models', authed(key))).status).toBe(401)
    expect((await reader.fetch('/v1/models', authed(token))).status).toBe(401)
    expect(Date.now() - revokedAt).toBeLessThan(ttl + 1000)
  })
})
