/**
 * workers/composed.ts: podgate mounted under /ai in a larger Hono app whose own session login feeds
 * podgate's key resolution through the `credential` hook. Runs the app in workerd with the test's
 * bindings (miniflare KV, the HTTP emulator from global-setup.ts as RUNPOD_BASE_URL).
 */
import { env } from 'cloudflare:test'
import { Hono } from 'hono'
import { HTTPException } from 'hono/http-exception'
import { requestId } from 'hono/request-id'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { adminAuth, apiKeyAuth, createGateway, GatewayError, KeyStore, podgateCors } from '../src/index.ts'
import { optionsFromEnv } from '../src/config/env.ts'
import type { PodgateWorkerEnv } from '../src/config/env.ts'
import type { GatewayVariables } from '../src/index.ts'
import { createRunpodEmulator } from '../src/testing/index.ts'
import { callComposed as call, loginComposed } from './composed-app.ts'
import { ADMIN_TOKEN, authed, chatBody, harness, MODELS, RUNPOD_KEY } from './helpers.ts'

async function login(user: string): Promise<string> {
  const { status, setCookie, cookie } = await loginComposed(user)
  expect(status).toBe(200)
  expect(setCookie).toMatch(/HttpOnly/)
  expect(setCookie).toMatch(/Secure/)
  expect(setCookie).not.toContain('pg_sk_')
  return cookie
}

const chat = (content: string, extra: Record<string, unknown> = {}) => ({
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'chat-current', messages: [{ role: 'user', content }], max_tokens: 24, ...extra }),
})

describe('podgate mounted under /ai in a Hono app with session auth', () => {
  it('the app keeps its own routes and its own auth', async () => {
    expect((await call('/')).status).toBe(200)
    const me = await call('/me')
    expect(me.status).toBe(401)
    expect(await me.json()).toEqual({ error: 'not signed in' })
    const bad = await call('/login', { method: 'POST', body: JSON.stringify({ user: '../x' }) })
    expect(bad.status).toBe(400)
  })

  it('without a session or a key, /ai answers 401 in OpenAI format', async () => {
    const res = await call('/ai/v1/chat/completions', chat('hi'))
    expect(res.status).toBe(401)
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('missing_api_key')
  })

  it('a signed-in user chats through /ai with no podgate key in the browser', async () => {
    const cookie = await login('alice')
    expect(await (await call('/me', {}, cookie)).json()).toEqual({ user: 'alice' })
    const models = await call('/ai/v1/models', {}, cookie)
    expect(models.status).toBe(200)
    expect(((await models.json()) as { data: { id: string }[] }).data.map((m) => m.id)).toContain('chat-current')

    const res = await call('/ai/v1/chat/completions', chat('hello from alice'), cookie)
    expect(res.status).toBe(200)
    const body = (await res.json()) as { choices: { message: { content: string } }[] }
    expect(body.choices[0]?.message.content.length).toBeGreaterThan(0)
  })

  it('the openai client works through the session, streamed', async () => {
    const cookie = await login('bob')
    // A browser would send the cookie itself; the apiKey is a placeholder the session overrides.
    const openai = new OpenAI({
      apiKey: 'session',
      baseURL: 'https://app.example/ai/v1',
      maxRetries: 0,
      fetch: ((input: RequestInfo | URL, init?: RequestInit) => {
        const request = new Request(input, init)
        return call(new URL(request.url).pathname, { method: request.method, headers: request.headers, body: request.body, duplex: 'half' } as RequestInit, cookie)
      }) as typeof fetch,
    })
    let text = ''
    for await (const chunk of await openai.chat.completions.create({ model: 'chat-classic', messages: [{ role: 'user', content: 'stream to bob' }], max_tokens: 24, stream: true })) {
      text += chunk.choices[0]?.delta.content ?? ''
    }
    expect(text.length).toBeGreaterThan(0)
  })

  it('signing in again reuses the user\'s key; the key record names the user', async () => {
    await login('carol')
    const first = await env.PODGATE_KV.get('app:user-key:carol')
    await login('carol')
    expect(await env.PODGATE_KV.get('app:user-key:carol')).toBe(first)
    const list = await call('/ai/admin/keys', { headers: { authorization: `Bearer ${env.PODGATE_ADMIN_TOKEN}` } })
    const records = ((await list.json()) as { data: { name: string; metadata?: Record<string, string> }[] }).data
    expect(records.filter((r) => r.name === 'user:carol')).toHaveLength(1)
    expect(JSON.stringify(records)).not.toContain(first)
  })

  it('a tampered or expired-looking cookie is no session', async () => {
    const cookie = await login('dave')
    const [name, value] = cookie.split('=')
    const forged = `${name}=${decodeURIComponent(value!).replace('dave', 'erin')}`
    expect((await call('/me', {}, forged)).status).toBe(401)
    expect((await call('/ai/v1/models', {}, forged)).status).toBe(401)
  })

  it('revoking the user\'s podgate key ends their /ai access even with a valid session', async () => {
    const cookie = await login('frank')
    const key = (await env.PODGATE_KV.get('app:user-key:frank'))!
    const list = await call('/ai/admin/keys', { headers: { authorization: `Bearer ${env.PODGATE_ADMIN_TOKEN}` } })
    const record = ((await list.json()) as { data: { id: string; name: string }[] }).data.find((r) => r.name === 'user:frank')!
    const revoked = await call(`/ai/admin/keys/${record.id}`, { method: 'DELETE', headers: { authorization: `Bearer ${env.PODGATE_ADMIN_TOKEN}` } })
    expect(revoked.status).toBe(200)
    expect(key.startsWith('pg_sk_')).toBe(true)
    expect((await call('/ai/v1/models', {}, cookie)).status).toBe(401)
  })

  it('callers without a session can still use a bearer key, and /ai/openapi.json names the mount', async () => {
    const created = await call('/ai/admin/keys', {
      method: 'POST',
      headers: { authorization: `Bearer ${env.PODGATE_ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'server' }),
    })
    const { key } = (await created.json()) as { key: string }
    const res = await call('/ai/v1/models', { headers: { authorization: `Bearer ${key}` } })
    expect(res.status).toBe(200)
    const doc = (await (await call('/ai/openapi.json')).json()) as { servers: { url: string }[] }
    expect(doc.servers).toEqual([{ url: '/ai' }])
  })

  it('an unknown route under /ai answers in podgate\'s error format of its surface, not with the host app\'s 404', async () => {
    const cookie = await login('hank')
    const openai = await call('/ai/v1/audio/speech', chat('hi'), cookie)
    expect(openai.status).toBe(404)
    expect(await openai.json()).toMatchObject({ error: { type: 'not_found_error', code: 'not_found' } })
    const native = await call('/ai/v2/chat-classic/status', {}, cookie)
    expect(native.status).toBe(404)
    expect(await native.json()).toMatchObject({ error: { code: 'not_found' } })
    const adminRoute = await call('/ai/admin/nope', { headers: { authorization: `Bearer ${env.PODGATE_ADMIN_TOKEN}` } })
    expect(adminRoute.status).toBe(404)
    expect(await adminRoute.json()).toMatchObject({ error: { code: 'not_found' } })
    // The host's own paths keep the host's answers.
    expect(await (await call('/nope')).text()).toBe('404 Not Found')
  })

  it('signing out ends the session', async () => {
    const cookie = await login('gina')
    const out = await call('/logout', { method: 'POST' }, cookie)
    expect(out.headers.get('set-cookie')).toMatch(/Max-Age=0/)
  })
})

describe('a host app\'s own middleware before the gateway', () => {
  it('a middleware that read the body with Hono\'s c.req.json() (cached for later readers) leaves podgate a body to read', async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'host' })
    const app = new Hono()
    const seen: unknown[] = []
    app.use('/ai/*', async (c, next) => {
      if (c.req.method === 'POST') seen.push(((await c.req.json()) as { model?: unknown }).model)
      await next()
    })
    app.route('/ai', h.app)
    const res = await app.request('/ai/v1/chat/completions', authed(key, chatBody('chat-openai', 'read twice')), env)
    expect(res.status).toBe(200)
    expect(((await res.json()) as { choices: unknown[] }).choices).toHaveLength(1)
    expect(seen).toEqual(['chat-openai'])
  })

  it("a middleware that read c.req.raw itself leaves podgate no body: the host's bug, a 500 (not the caller's invalid_json); a clone leaves it whole", async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'host' })
    for (const [read, status] of [[(r: Request) => r.json(), 500], [(r: Request) => r.clone().json(), 200]] as const) {
      const app = new Hono()
      app.use('/ai/*', async (c, next) => {
        await read(c.req.raw)
        await next()
      })
      app.route('/ai', h.app)
      const res = await app.request('/ai/v1/chat/completions', authed(key, chatBody('chat-openai', 'raw read')), env)
      expect(res.status).toBe(status)
      if (status === 500) expect(await res.json()).toMatchObject({ error: { code: 'internal_error' } })
    }
  })

  it('a host app\'s request id (hono/request-id) is the one podgate answers and logs under', async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'host' })
    const app = new Hono()
    app.use(requestId())
    app.route('/ai', h.app)
    const res = await app.request('/ai/v1/chat/completions', authed(key, chatBody('chat-openai', '[[emulator:fault=http,status=500]]')), env)
    expect(res.status).toBe(502)
    await h.settle()
    const id = res.headers.get('x-request-id')
    expect(id).toMatch(/^[0-9a-f-]{36}$/)
    // The host's id, not a second one: the host's own log lines and podgate's find each other.
    const tagged = await app.request('/ai/v1/chat/completions', { ...authed(key, chatBody('chat-openai', '[[emulator:fault=http,status=500]]')), headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-request-id': 'host-trace-42' } }, env)
    expect(tagged.headers.get('x-request-id')).toBe('host-trace-42')
    await h.settle()
    expect(h.logs.some((line) => (JSON.parse(line) as { request_id?: string }).request_id === 'host-trace-42')).toBe(true)
    expect(((await tagged.json()) as { error: { message: string } }).error.message).toBeTruthy()
  })

  it('mounted under a path of the host\'s own that holds /v2 (/api/v2), each surface keeps its error format', async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'host' })
    const app = new Hono().basePath('/api/v2')
    app.route('/', h.app)
    const openai = await app.request('/api/v2/v1/chat/completions', authed(key, '{bad'), env)
    expect(openai.status).toBe(400)
    expect(await openai.json()).toMatchObject({ error: { type: 'invalid_request_error', code: 'invalid_json' } })
    const refused = await app.request('/api/v2/v1/models', authed('pg_sk_unknown'), env)
    expect(await refused.json()).toMatchObject({ error: { type: 'authentication_error', code: 'invalid_api_key' } })
    const runpodRoute = await app.request('/api/v2/v2/chat-classic/openai/v1/chat/completions', authed(key, '{bad'), env)
    expect(await runpodRoute.json()).toMatchObject({ error: { code: 'invalid_json' } })
    const native = await app.request('/api/v2/v2/chat-classic/run', authed(key, '{bad'), env)
    expect(native.status).toBe(400)
    expect(await native.json()).toEqual({ error: 'The request body is not valid JSON.', code: 'invalid_json' })
    expect(await (await app.request('/api/v2/v2/chat-classic/status/nope', authed(key), env)).json()).toMatchObject({ code: 'not_found' })
  })
})

describe('the middleware on its own, with the app\'s own binding names (docs/composition.md)', () => {
  it('apiKeyAuth, podgateCors and adminAuth guard the app\'s routes, and createGateway reads the same KV by another name', async () => {
    interface Env { APP_KV: KVNamespace; APP_QUOTA?: DurableObjectNamespace }
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const app = new Hono<{ Bindings: Env; Variables: GatewayVariables }>()
    // As a user writes them: each hook's `c` is typed with the app's bindings, no cast.
    app.use('/api/*', podgateCors(), apiKeyAuth({ store: (c) => new KeyStore(c.env.APP_KV, { cacheTtlMs: 0 }) }))
    app.get('/api/whoami', (c) => c.json({ key: c.get('principal').keyId, name: c.get('principal').name }))
    app.use('/ops/*', adminAuth({ token: ADMIN_TOKEN }))
    app.get('/ops/ping', (c) => c.text('pong'))
    app.route('/ai', createGateway({
      models: MODELS,
      runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2' },
      adminToken: ADMIN_TOKEN,
      kv: (c) => c.env.APP_KV,
      quota: { objects: (c) => c.env.APP_QUOTA },
      fetch: (input, init) => emulator.fetch(new Request(input, init)),
      logSink: () => {},
    }))
    const appEnv = { APP_KV: env.PODGATE_KV }
    const created = await app.request('/ai/admin/keys', { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'own-api' }) }, appEnv)
    expect(created.status).toBe(201)
    const { id, key } = (await created.json()) as { id: string; key: string }

    expect(await (await app.request('/api/whoami', authed(key), appEnv)).json()).toEqual({ key: id, name: 'own-api' })
    const anonymous = await app.request('/api/whoami', { headers: { origin: 'https://app.example.com' } }, appEnv)
    expect(anonymous.status).toBe(401)
    expect(anonymous.headers.get('access-control-allow-origin')).toBe('https://app.example.com')
    expect(await anonymous.json()).toMatchObject({ error: { code: 'missing_api_key', type: 'authentication_error' } })
    expect((await app.request('/ops/ping', authed('wrong'), appEnv)).status).toBe(401)
    expect(await (await app.request('/ops/ping', authed(ADMIN_TOKEN), appEnv)).text()).toBe('pong')
    const chat = await app.request('/ai/v1/chat/completions', authed(key, chatBody('chat-openai', 'own names')), appEnv)
    expect(chat.status).toBe(200)
  })

  it('an onError of the app\'s that answers getResponse() for GatewayError keeps the refusal\'s status; inside the mount podgate\'s own answers', async () => {
    const h = harness()
    const app = new Hono()
    app.onError((err, c) => (err instanceof HTTPException || err instanceof GatewayError ? err.getResponse() : c.text('Internal error', 500)))
    app.use('/api/*', apiKeyAuth({ store: () => new KeyStore(env.PODGATE_KV, { cacheTtlMs: 0 }) }))
    app.get('/api/hello', (c) => c.text('hi'))
    app.route('/ai', h.app)
    const refused = await app.request('/api/hello', {}, env)
    expect(refused.status).toBe(401)
    expect(refused.headers.get('www-authenticate')).toBe('Bearer realm="podgate"')
    expect(await refused.json()).toMatchObject({ error: { code: 'missing_api_key' } })
    const mounted = await app.request('/ai/v1/models', {}, env)
    expect(mounted.status).toBe(401)
    expect(await mounted.json()).toMatchObject({ error: { code: 'missing_api_key' } })
    // The instanceof-HTTPException idiom alone answers the app's 500, as docs/composition.md warns.
    const idiom = new Hono()
    idiom.onError((err, c) => (err instanceof HTTPException ? err.getResponse() : c.text('Internal error', 500)))
    idiom.use('/api/*', apiKeyAuth({ store: () => new KeyStore(env.PODGATE_KV, { cacheTtlMs: 0 }) }))
    idiom.get('/api/hello', (c) => c.text('hi'))
    expect((await idiom.request('/api/hello', {}, env)).status).toBe(500)
  })
})

describe('an app on optionsFromEnv whose quota Durable Object has another name', () => {
  // docs/quotas.md: it hands the binding over as PODGATE_QUOTA. Before, that passed the startup check but
  // the gateway still read c.env.PODGATE_QUOTA on each call: every strictly counted call was a 500.
  it('serves strictly counted calls with the binding it handed over', async () => {
    const real = env as unknown as PodgateWorkerEnv
    const appEnv = { ...real, MY_QUOTA: real.PODGATE_QUOTA, PODGATE_QUOTA: undefined } as unknown as PodgateWorkerEnv & { MY_QUOTA: PodgateWorkerEnv['PODGATE_QUOTA'] }
    const vars = {
      ...appEnv,
      PODGATE_MODELS: JSON.stringify({ chat: { endpoints: [{ endpointId: 'vllmcurrent' }] } }),
      PODGATE_QUOTA_CONFIG: '{"store":"strict","defaults":{"requestsPerMinute":50}}',
      PODGATE_ADMIN_TOKEN: ADMIN_TOKEN,
    }
    const app = createGateway(optionsFromEnv({ ...vars, PODGATE_QUOTA: appEnv.MY_QUOTA }))
    const made = await app.request('/admin/keys', { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'k' }) }, appEnv)
    expect(made.status).toBe(201)
    const { key } = (await made.json()) as { key: string }
    const chat = await app.request('/v1/chat/completions', authed(key, JSON.stringify({ model: 'chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 })), appEnv)
    expect(chat.status, await chat.clone().text()).toBe(200)
    expect(chat.headers.get('ratelimit-policy')).toContain('q=50')
  })
})
