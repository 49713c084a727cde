/**
 * CORS: preflights answered without a credential, the real request deciding by the credential's origin
 * policy, `Vary: Origin`, no credentials mode, and the headers a page may read.
 */
import { env } from 'cloudflare:test'
import { Hono } from 'hono'
import { cors } from 'hono/cors'
import { describe, expect, it } from 'vitest'
import { EXPOSED_HEADERS, podgateCors } from '../src/cors/index.ts'
import { ADMIN_TOKEN, authed, chatBody, harness } from './helpers.ts'

const APP = 'https://app.example.com'

function fromPage(init: RequestInit, origin = APP): RequestInit {
  return { ...init, headers: { ...(init.headers as Record<string, string>), origin } }
}

describe('CORS', () => {
  it('answers a preflight for an API route with the Origin reflected, the needed methods and headers, and no credentials', async () => {
    const h = harness({ cors: { maxAgeSeconds: 120 } })
    const res = await h.fetch('/v1/chat/completions', {
      method: 'OPTIONS',
      headers: { origin: APP, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type, x-stainless-os' },
    })
    expect(res.status).toBe(204)
    expect(res.headers.get('access-control-allow-origin')).toBe(APP)
    expect(res.headers.get('access-control-allow-methods')).toContain('POST')
    expect(res.headers.get('access-control-allow-headers')).toBe('authorization, content-type, x-stainless-os')
    expect(res.headers.get('access-control-max-age')).toBe('120')
    expect(res.headers.get('vary')).toMatch(/Origin/)
    expect(res.headers.has('access-control-allow-credentials')).toBe(false)
    expect(h.emulator.calls).toHaveLength(0)
  })

  // A preflight's requested headers are echoed back; a page (or a hostile script) asking for a huge list
  // must not make podgate echo kilobytes: past 2,048 characters it gets the default list instead.
  it("echoes a preflight's requested headers up to 2,048 characters, else the default list", async () => {
    const h = harness()
    const preflight = (requested: string) => h.fetch('/v1/chat/completions', { method: 'OPTIONS', headers: { origin: APP, 'access-control-request-method': 'POST', 'access-control-request-headers': requested } })
    const fits = `authorization, ${'x'.repeat(2048 - 'authorization, '.length)}`
    expect((await preflight(fits)).headers.get('access-control-allow-headers')).toBe(fits)
    const allowed = (await preflight(`${fits}y`)).headers.get('access-control-allow-headers')!
    expect(allowed).not.toContain('xxxx')
    expect(allowed).toMatch(/authorization/i)
    expect(allowed).toMatch(/content-type/i)
  })

  it('a successful call from a page carries ACAO, Vary and the exposed headers, never Allow-Credentials', async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'site', kind: 'publishable', origins: [APP] })
    const res = await h.fetch('/v1/chat/completions', fromPage(authed(key, chatBody('chat-openai', 'hi', { stream: true }))))
    expect(res.status).toBe(200)
    expect(res.headers.get('access-control-allow-origin')).toBe(APP)
    expect(res.headers.get('vary')).toMatch(/Origin/)
    const exposed = res.headers.get('access-control-expose-headers')!.split(', ')
    for (const name of ['x-request-id', 'ratelimit', 'ratelimit-policy', 'retry-after', 'x-should-retry', 'x-ratelimit-remaining-requests', 'x-podgate-cache', 'age']) expect(exposed).toContain(name)
    expect(exposed).toEqual([...EXPOSED_HEADERS])
    expect(res.headers.has('access-control-allow-credentials')).toBe(false)
    await res.text()
  })

  it('a refusal stays readable by the page: a secret key from a browser gets 401 JSON with CORS headers', async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'server' })
    const res = await h.fetch('/v1/chat/completions', fromPage(authed(key, chatBody('chat-openai'))))
    expect(res.status).toBe(401)
    expect(res.headers.get('access-control-allow-origin')).toBe(APP)
    expect(res.headers.get('www-authenticate')).toContain('Bearer')
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/Secret keys belong on servers/)
    expect(h.emulator.calls).toHaveLength(0)
  })

  it('server calls get Vary: Origin but no ACAO; the admin API gets no CORS at all', async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'server' })
    const res = await h.fetch('/v1/models', authed(key))
    expect(res.headers.get('vary')).toMatch(/Origin/)
    expect(res.headers.has('access-control-allow-origin')).toBe(false)
    const preflight = await h.fetch('/admin/keys', { method: 'OPTIONS', headers: { origin: APP, 'access-control-request-method': 'POST' } })
    expect(preflight.headers.has('access-control-allow-origin')).toBe(false)
    const adminCall = await h.fetch('/admin/keys', fromPage(authed(ADMIN_TOKEN)))
    expect(adminCall.headers.has('access-control-allow-origin')).toBe(false)
  })

  it('adds Origin to a Vary that lists it already (any case) only once, keeping the other names', async () => {
    const h = harness()
    // A secret key that allows the page's origin: good from a server and from that page.
    const { key } = await h.createKey({ name: 'internal tool', origins: [APP] })
    // A host app whose middleware sets Vary before podgate answers (Hono copies it onto podgate's answer).
    const host = new Hono()
    host.use('*', async (c, next) => {
      c.header('Vary', 'Accept-Encoding, origin')
      await next()
    })
    host.route('/', h.app)
    // podgateCors guarding an app's own routes, with Hono's cors after it, or a handler that sets Vary itself.
    const own = new Hono()
    own.use('/api/*', podgateCors(), cors({ origin: (origin) => origin }))
    own.get('/api/x', (c) => c.text('x'))
    own.use('/x', podgateCors())
    own.get('/x', (c) => c.text('x', 200, { vary: 'ORIGIN' }))
    const calls: [Hono, string, string | undefined, string][] = [
      [host, '/v1/models', APP, 'Accept-Encoding, origin'],
      [host, '/v1/models', undefined, 'Accept-Encoding, origin'],
      [own, '/api/x', APP, 'Origin'],
      [own, '/api/x', undefined, 'Origin'],
      [own, '/x', APP, 'ORIGIN'],
    ]
    for (const [app, path, origin, vary] of calls) {
      const res = await app.request(path, { headers: { authorization: `Bearer ${key}`, ...(origin ? { origin } : {}) } }, env)
      expect(res.status, `${path} ${origin}`).toBe(200)
      expect(res.headers.get('vary'), `${path} ${origin}`).toBe(vary)
    }
    // A Vary that names a header merely containing the word still gets Origin.
    const other = new Hono()
    other.use('/x', podgateCors())
    other.get('/x', (c) => c.text('x', 200, { vary: 'X-Origin-Hint' }))
    expect((await other.request('/x', { headers: { origin: APP } })).headers.get('vary')).toBe('X-Origin-Hint, Origin')
  })

  it('preflights the /v2 surface the same way', async () => {
    const h = harness()
    const res = await h.fetch('/v2/chat-classic/run', { method: 'OPTIONS', headers: { origin: APP, 'access-control-request-method': 'POST' } })
    expect(res.status).toBe(204)
    expect(res.headers.get('access-control-allow-origin')).toBe(APP)
  })
})
