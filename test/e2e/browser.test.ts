/**
 * A real browser: a page on one origin calls podgate on another, in headless Chromium (from
 * `@sparticuz/chromium`, driven by playwright-core). The page streams with `fetch` using a token its backend minted
 * and using a publishable key, follows a native job with `EventSource` and `?access_token=`, and sees a
 * secret key refused. Every cross-origin call goes through the browser's real CORS checks (preflights
 * included): a missing or wrong CORS header makes the page's fetch throw.
 */
import { createServer } from 'node:http'
import type { Server } from 'node:http'
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { launchBrowser } from '../../scripts/lib/browser.ts'
import { startPodgate } from '../../scripts/lib/podgate-server.ts'
import type { PodgateServer } from '../../scripts/lib/podgate-server.ts'

let server: PodgateServer
let site: Server
let siteOrigin: string
let browser: Browser
let page: Page

beforeAll(async () => {
  server = await startPodgate()
  site = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' })
    res.end('<!doctype html><title>podgate browser test</title><p>app page</p>')
  })
  await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve))
  const address = site.address()
  siteOrigin = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`
  browser = await launchBrowser()
  page = await browser.newPage()
  await page.goto(`${siteOrigin}/`)
})

afterAll(async () => {
  await browser?.close()
  await new Promise((resolve) => (site ? site.close(resolve) : resolve(undefined)))
  await server?.close()
})

/** The app's backend: mints a token for the page with its secret key (never sent to the page). */
async function mintForPage(secretKey: string, body: Record<string, unknown>): Promise<string> {
  const res = await fetch(`${server.url}/v1/tokens`, { method: 'POST', headers: { authorization: `Bearer ${secretKey}`, 'content-type': 'application/json' }, body: JSON.stringify(body) })
  if (res.status !== 201) throw new Error(`mint: ${res.status} ${await res.text()}`)
  return ((await res.json()) as { token: string }).token
}

interface StreamResult {
  status: number
  text: string
  reads: number
  done: boolean
  exposedRequestId: string | null
  error?: string
}

/** In the page: a streaming chat completion read chunk by chunk, as a front end does. */
function streamFromPage(args: { podgate: string; credential: string; model: string }): Promise<StreamResult> {
  return page.evaluate(async ({ podgate, credential, model }) => {
    try {
      const res = await fetch(`${podgate}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${credential}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Hello from a browser' }], stream: true, max_tokens: 24 }),
      })
      if (!res.ok || !res.body) return { status: res.status, text: await res.text(), reads: 0, done: false, exposedRequestId: res.headers.get('x-request-id') }
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader()
      let raw = ''
      let reads = 0
      for (;;) {
        const { value, done } = await reader.read()
        if (done) break
        reads++
        raw += value
      }
      let text = ''
      for (const line of raw.split('\n')) {
        if (!line.startsWith('data: ') || line === 'data: [DONE]') continue
        text += (JSON.parse(line.slice(6)) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? ''
      }
      return { status: res.status, text, reads, done: raw.includes('data: [DONE]'), exposedRequestId: res.headers.get('x-request-id') }
    } catch (error) {
      return { status: 0, text: '', reads: 0, done: false, exposedRequestId: null, error: String(error) }
    }
  }, args)
}

describe('podgate from a web page on another origin', () => {
  it('streams with fetch and a token the backend minted for this origin', async () => {
    const { key } = await server.createKey({ name: 'app backend' })
    const token = await mintForPage(key, { origin: siteOrigin, models: ['chat-openai'], ttlSeconds: 300 })
    const result = await streamFromPage({ podgate: server.url, credential: token, model: 'chat-openai' })
    expect(result.error).toBeUndefined()
    expect(result.status).toBe(200)
    expect(result.done).toBe(true)
    expect(result.text.length).toBeGreaterThan(0)
    expect(result.reads).toBeGreaterThan(0)
    // Only readable because podgate exposes it.
    expect(result.exposedRequestId).toMatch(/^[0-9a-f-]{36}$/)
    const outside = await streamFromPage({ podgate: server.url, credential: token, model: 'chat-classic' })
    expect(outside.status).toBe(403)
  })

  it('streams with fetch and a publishable key that allows this origin', async () => {
    const { key } = await server.createKey({ name: 'static site', kind: 'publishable', origins: [siteOrigin], quota: { requestsPerMinute: 20 } })
    const result = await streamFromPage({ podgate: server.url, credential: key, model: 'chat-current' })
    expect(result.error).toBeUndefined()
    expect(result.status).toBe(200)
    expect(result.done).toBe(true)
    expect(result.text.length).toBeGreaterThan(0)
  })

  it('refuses a secret key used from the page, with a 401 the page can read', async () => {
    const { key } = await server.createKey({ name: 'server only' })
    const result = await streamFromPage({ podgate: server.url, credential: key, model: 'chat-openai' })
    expect(result.status).toBe(401)
    expect(result.text).toMatch(/Secret keys belong on servers/)
    const otherOrigin = await server.createKey({ name: 'elsewhere', kind: 'publishable', origins: ['https://elsewhere.example'] })
    expect((await streamFromPage({ podgate: server.url, credential: otherOrigin.key, model: 'chat-openai' })).status).toBe(401)
    const elsewhereToken = await mintForPage(key, { origin: 'https://elsewhere.example' })
    expect((await streamFromPage({ podgate: server.url, credential: elsewhereToken, model: 'chat-openai' })).status).toBe(401)
  })

  it('follows a native job with EventSource, the token in ?access_token=', async () => {
    const { key } = await server.createKey({ name: 'app backend' })
    const token = await mintForPage(key, { origin: siteOrigin, models: ['chat-classic'] })
    const result = await page.evaluate(
      async ({ podgate, token }) => {
        const run = await fetch(`${podgate}/v2/chat-classic/run`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ input: { messages: [{ role: 'user', content: 'Hello EventSource' }], sampling_params: { max_tokens: 16 } } }),
        })
        const job = (await run.json()) as { id: string }
        return new Promise<{ runStatus: number; outputs: number; text: string; done: boolean; error?: string }>((resolve) => {
          const source = new EventSource(`${podgate}/v2/chat-classic/stream/${encodeURIComponent(job.id)}?access_token=${encodeURIComponent(token)}`)
          let outputs = 0
          let text = ''
          const finish = (done: boolean, error?: string) => {
            source.close()
            resolve({ runStatus: run.status, outputs, text, done, ...(error ? { error } : {}) })
          }
          source.addEventListener('output', (e) => {
            outputs++
            text += (JSON.parse((e as MessageEvent<string>).data) as { text?: string }).text ?? ''
          })
          source.addEventListener('done', () => finish(true))
          source.addEventListener('error', (e) => finish(false, (e as MessageEvent<string>).data ?? 'connection error'))
          setTimeout(() => finish(false, 'timeout'), 20_000)
        })
      },
      { podgate: server.url, token },
    )
    expect(result.error).toBeUndefined()
    expect(result.runStatus).toBe(200)
    expect(result.done).toBe(true)
    expect(result.outputs).toBeGreaterThan(0)
    expect(result.text.length).toBeGreaterThan(0)
  })
})
