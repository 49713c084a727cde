/**
 * L7 + browser detection: a credential the `credential` hook supplies from a cookie session is ambient
 * (the browser attaches the cookie to forged cross-site requests too), so a state-changing call using it
 * must come from the same origin, by `Origin` or `Sec-Fetch-Site`. And a browser is recognised by Fetch
 * Metadata as well as by `Origin`, so a secret key cannot slip through on a request that omits `Origin`.
 */
import { describe, expect, it } from 'vitest'
import { callComposed as call, loginComposed } from '../composed-app.ts'
import { authed, chatBody, harness } from '../helpers.ts'

async function login(user: string): Promise<string> {
  const { status, cookie } = await loginComposed(user)
  expect(status).toBe(200)
  return cookie
}

const chat = (headers: Record<string, string>) => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify({ model: 'chat-current', messages: [{ role: 'user', content: 'hi [[emulator:tokens=2]]' }], max_tokens: 8 }),
})

describe('L7 cookie sessions refuse cross-site state changes', () => {
  it('auth-csrf: a signed-in cross-site POST is refused by Origin or Sec-Fetch-Site; a same-origin one works', async () => {
    const cookie = await login('csrf-victim')
    const crossSite: Record<string, string>[] = [{ origin: 'https://evil.example' }, { 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'no-cors' }, { 'sec-fetch-site': 'same-site', 'sec-fetch-mode': 'cors' }]
    for (const headers of crossSite) {
      const res = await call('/ai/v1/chat/completions', chat(headers), cookie)
      expect(res.status, JSON.stringify(headers)).toBe(403)
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('permission_denied')
    }
    const job = await call('/ai/v2/chat-current/run', { ...chat({ origin: 'https://evil.example' }), body: JSON.stringify({ input: { prompt: 'x' } }) }, cookie)
    expect(job.status).toBe(403)

    const sameOrigin: Record<string, string>[] = [{ origin: 'https://app.example' }, { 'sec-fetch-site': 'same-origin', 'sec-fetch-mode': 'cors' }, {}]
    for (const headers of sameOrigin) {
      const res = await call('/ai/v1/chat/completions', chat(headers), cookie)
      expect(res.status, JSON.stringify(headers)).toBe(200)
      await res.text()
    }
    // Reads are not state changes: a cross-site GET still gets its (CORS-unreadable) answer.
    expect((await call('/ai/v1/models', { headers: { origin: 'https://evil.example' } }, cookie)).status).toBe(200)
  })
})

describe('browser detection uses Fetch Metadata', () => {
  it('auth-csrf: a secret key on a browser request without Origin (Sec-Fetch-Site) is refused unless the page origin is listed', async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'server' })
    const browserGet = { ...authed(key), headers: { authorization: `Bearer ${key}`, 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'cors' } }
    expect((await h.fetch('/v1/models', browserGet)).status).toBe(401)
    const sameOrigin = { ...authed(key), headers: { authorization: `Bearer ${key}`, 'sec-fetch-site': 'same-origin', 'sec-fetch-mode': 'cors' } }
    expect((await h.fetch('/v1/models', sameOrigin)).status).toBe(401)
    expect((await h.fetch('/v1/models', authed(key))).status).toBe(200)
    // Node's fetch sends Sec-Fetch-Mode from servers: it alone does not make a browser.
    expect((await h.fetch('/v1/models', { headers: { authorization: `Bearer ${key}`, 'sec-fetch-mode': 'cors' } })).status).toBe(200)

    const { key: listed } = await h.createKey({ name: 'playground', origins: ['http://podgate'] })
    const page = { method: 'GET', headers: { authorization: `Bearer ${listed}`, 'sec-fetch-site': 'same-origin', 'sec-fetch-mode': 'cors' } }
    expect((await h.fetch('/v1/models', page)).status).toBe(200)
    const res = await h.fetch('/v1/chat/completions', { method: 'POST', headers: { ...page.headers, 'content-type': 'application/json' }, body: chatBody('chat-openai', 'hi') })
    expect(res.status).toBe(200)
  })
})
