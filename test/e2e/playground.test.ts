/**
 * The playground page in headless Chromium against podgate under `wrangler dev --env dev` (the dev
 * config turns the page on): load models, chat with streamed output, and read usage, rate-limit and
 * cache status off the response; mint a token when the gateway offers `POST /v1/tokens`. Saves a
 * screenshot to test-results/playground.png.
 */
import { mkdirSync, readFileSync } from 'node:fs'
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { launchBrowser } from '../../scripts/lib/browser.ts'
import { startPodgate } from '../../scripts/lib/podgate-server.ts'
import type { PodgateServer } from '../../scripts/lib/podgate-server.ts'


let server: PodgateServer
let browser: Browser

beforeAll(async () => {
  ;[server, browser] = await Promise.all([startPodgate({ startTimeoutMs: 150_000 }), launchBrowser({ timeoutMs: 150_000 })])
  // Generous: wrangler dev and Chromium start slowly when the e2e files run side by side on two cores.
}, 180_000)
afterAll(async () => {
  await browser?.close()
  await server?.close()
})

async function openPlayground(): Promise<Page> {
  const page = await browser.newPage({ viewport: { width: 960, height: 900 } })
  const errors: string[] = []
  page.on('pageerror', (e) => errors.push(e.message))
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()) })
  const res = await page.goto(`${server.url}/playground`)
  expect(res?.status()).toBe(200)
  ;(page as Page & { errors: string[] }).errors = errors
  return page
}

describe('the playground in Chromium', () => {
  it('loads models, streams a chat answer and shows usage, rate-limit and cache status', async () => {
    // podgate refuses a secret key from a browser unless the key lists the page's origin.
    const { key } = await server.createKey({ name: 'playground', origins: [server.url], quota: { requestsPerMinute: 30, tokensPerMinute: 20_000 } })
    const page = await openPlayground()
    await page.fill('#key', key)
    await page.click('#load')
    await expect.poll(() => page.locator('#model option').allTextContents()).toEqual(['chat-openai', 'chat-classic', 'chat-current', 'embed-openai'])
    // The OpenAI route's stream carries vLLM's usage; a native current worker's shorthand stream reports none (docs/passthrough.md).
    await page.selectOption('#model', 'chat-openai')

    // Count DOM updates of the answer while it streams: a buffered answer would update once.
    await page.evaluate(() => {
      const w = window as unknown as { updates: number }
      w.updates = 0
      new MutationObserver(() => w.updates++).observe(document.getElementById('messages')!, { subtree: true, childList: true, characterData: true })
    })
    const prompt = 'Tell me about GPUs [[emulator:delay=15,tokens=40]]'
    await page.fill('#prompt', prompt)
    const answered = page.waitForResponse((r) => r.url().endsWith('/v1/chat/completions'))
    await page.click('#send')
    const response = await answered
    await expect.poll(() => page.textContent('#status'), { timeout: 15_000 }).toBe('Done.')

    const answer = (await page.locator('.msg.assistant').textContent()) ?? ''
    expect(answer.length).toBeGreaterThan(0)
    expect(await page.evaluate(() => (window as unknown as { updates: number }).updates)).toBeGreaterThan(5)
    const direct = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'chat-openai', messages: [{ role: 'user', content: prompt }], max_tokens: 128 }),
    })
    const full = (await direct.json()) as { choices: { message: { content: string } }[]; usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number } }
    expect(answer).toBe(full.choices[0]?.message.content)
    expect(await page.textContent('.msg.user')).toBe(prompt)
    const { prompt_tokens, completion_tokens, total_tokens } = full.usage
    expect(await page.textContent('#usage')).toBe(`prompt ${prompt_tokens} + completion ${completion_tokens} = ${total_tokens} tokens`)

    // What the page shows is what the response headers said, whichever of them this gateway sends.
    const headers = await response.allHeaders()
    expect(await page.textContent('#request-id')).toBe(headers['x-request-id'])
    expect(await page.textContent('#cache')).toBe(headers['x-podgate-cache'] ?? 'no cache header')
    // The key has a quota, so the answer carries its remaining share.
    expect(headers['x-ratelimit-remaining-requests']).toBeDefined()
    expect(await page.textContent('#ratelimit')).toBe(
      `remaining-requests: ${headers['x-ratelimit-remaining-requests']} | remaining-tokens: ${headers['x-ratelimit-remaining-tokens']} | ratelimit: ${headers['ratelimit']}`,
    )

    mkdirSync('test-results', { recursive: true })
    await page.screenshot({ path: 'test-results/playground.png', fullPage: true })
    expect((page as Page & { errors: string[] }).errors).toEqual([])
    await page.close()
  })

  it('mints a short-lived token from a dev key, and chats with the token alone', async () => {
    const { key } = await server.createKey({ name: 'playground-mint', origins: [server.url], models: ['chat-classic'] })
    const page = await openPlayground()
    expect(await page.textContent('#origin')).toBe(server.url)
    await page.fill('#key', key)
    // An empty TTL asks for none: the gateway's default, which never passes its maximum.
    const asked = page.waitForRequest((r) => r.url().endsWith('/v1/tokens'))
    const first = page.waitForResponse((r) => r.url().endsWith('/v1/tokens'))
    await page.click('#mint')
    expect((await asked).postData()).toBe('{}')
    expect((await first).status()).toBe(201)
    // The page puts the token in the key field once it has read the answer: wait for that before
    // putting the key back, or the page's write lands after ours and the second mint sends a token.
    await expect.poll(() => page.inputValue('#key')).toMatch(/^pg_tk_/)
    await page.fill('#key', key)
    await page.fill('#ttl', '120')
    const minted = page.waitForResponse((r) => r.url().endsWith('/v1/tokens'))
    await page.click('#mint')
    expect((await minted).status()).toBe(201)
    // The first mint above left the same status text: wait for this mint's token in the key field first.
    await expect.poll(() => page.inputValue('#key')).toMatch(/^pg_tk_/)
    const token = await page.inputValue('#key')
    expect(token).toMatch(/^pg_tk_/)
    await expect.poll(() => page.textContent('#token-status')).toMatch(/^Using a short-lived token \S+, expires /)
    const expires = Date.parse(/expires (\S+)\.$/.exec((await page.textContent('#token-status')) ?? '')?.[1] ?? '')
    expect(expires - Date.now()).toBeGreaterThan(100_000)
    // The 120 s asked, from the next whole second: a token lives at least its ttl.
    expect(expires - Date.now()).toBeLessThanOrEqual(121_000)

    // The token alone (the key is gone from the page) loads the key's models and chats.
    await page.click('#load')
    await expect.poll(() => page.locator('#model option').allTextContents()).toEqual(['chat-classic'])
    await page.fill('#prompt', 'hello with a token')
    await page.click('#send')
    await expect.poll(() => page.textContent('#status'), { timeout: 15_000 }).toBe('Done.')
    expect(((await page.locator('.msg.assistant').textContent()) ?? '').length).toBeGreaterThan(0)

    // The token carries the key's scope: another model is refused.
    const outside = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'chat-current', messages: [{ role: 'user', content: 'x' }] }),
    })
    expect(outside.status).toBe(403)
    await page.close()
  })

  it('a secret key that does not list the page\'s origin is refused, and the page says why', async () => {
    const { key } = await server.createKey({ name: 'server-only' })
    const page = await openPlayground()
    await page.fill('#key', key)
    await page.click('#mint')
    await expect.poll(() => page.textContent('#token-status')).toMatch(/^Mint failed: 401 invalid_api_key: A secret key was sent from the browser origin/)
    expect(await page.getAttribute('#token-status', 'data-kind')).toBe('error')
    await page.close()
  })

  it('shows podgate\'s error for a bad key instead of failing silently', async () => {
    const page = await openPlayground()
    await page.fill('#key', 'pg_sk_not_a_real_key_000000000000000')
    await page.click('#load')
    await expect.poll(() => page.textContent('#status')).toMatch(/^Models: 401 invalid_api_key/)
    expect(await page.getAttribute('#status', 'data-kind')).toBe('error')
    await page.close()
  })

  // The page dropped a refused prompt from the conversation it sends, but left it on screen (and cleared the
  // prompt box): the next message went without it while the page showed it as said.
  it('a refused message leaves the conversation shown as it is sent, and its prompt in the box to send again', async () => {
    const { key } = await server.createKey({ name: 'one-per-minute', origins: [server.url], quota: { requestsPerMinute: 1 } })
    const page = await openPlayground()
    await page.fill('#key', key)
    await page.click('#load')
    await expect.poll(() => page.locator('#model option').count()).toBeGreaterThan(0)
    await page.fill('#prompt', 'first [[emulator:tokens=3]]')
    await page.click('#send')
    await expect.poll(() => page.textContent('#status')).toBe('Done.')
    await page.fill('#prompt', 'second')
    await page.click('#send')
    await expect.poll(() => page.textContent('#status')).toMatch(/^429 rate_limited/)
    expect(await page.locator('#messages .msg.user').allTextContents()).toEqual(['first [[emulator:tokens=3]]'])
    expect(await page.locator('#messages .msg').count()).toBe(2)
    expect(await page.inputValue('#prompt')).toBe('second')
    await page.close()
  })

  // A network error (fetch threw, or the stream broke before any text) left the unanswered prompt in the
  // conversation the page sends, and on screen: the next message went out as two user turns in a row.
  it('a message with no answer (a network error, a stream that broke or failed before any text) leaves the conversation and goes back in the box; an answer cut short stays as shown', async () => {
    const { key } = await server.createKey({ name: 'network-errors', origins: [server.url] })
    const page = await openPlayground()
    await page.fill('#key', key)
    await page.click('#load')
    await expect.poll(() => page.locator('#model option').count()).toBeGreaterThan(0)
    await page.selectOption('#model', 'chat-openai')
    const shown = () => page.locator('#messages .msg').allTextContents()

    // fetch throws.
    await page.route('**/v1/chat/completions', (route) => route.abort('internetdisconnected'), { times: 1 })
    await page.fill('#prompt', 'lost')
    await page.click('#send')
    await expect.poll(() => page.textContent('#status')).toMatch(/^Network error/)
    expect(await shown()).toEqual([])
    expect(await page.inputValue('#prompt')).toBe('lost')

    // The stream breaks before any text, then (the next send) after some.
    await page.evaluate(() => {
      const real = window.fetch
      let calls = 0
      window.fetch = async (...args: Parameters<typeof fetch>) => {
        const text = ['', 'data: {"choices":[{"index":0,"delta":{"content":"half an"}}]}\n\n'][calls++]
        if (text === undefined) return real(...args)
        return new Response(new ReadableStream({
          start(controller) {
            if (text) controller.enqueue(new TextEncoder().encode(text))
            setTimeout(() => controller.error(new TypeError('network error')), 50)
          },
        }), { headers: { 'content-type': 'text/event-stream' } })
      }
    })
    await page.click('#send')
    await expect.poll(() => page.textContent('#status')).toBe('Network error: network error')
    expect(await shown()).toEqual([])
    expect(await page.inputValue('#prompt')).toBe('lost')
    await page.fill('#prompt', 'cut')
    await page.click('#send')
    await expect.poll(() => page.textContent('#status')).toBe('Network error: network error')
    expect(await shown()).toEqual(['cut', 'half an'])
    expect(await page.inputValue('#prompt')).toBe('')

    // podgate's in-band error event before any text.
    const failing = 'fails [[emulator:fault=error_event,after=0]]'
    await page.fill('#prompt', failing)
    await page.click('#send')
    await expect.poll(() => page.textContent('#status')).toMatch(/^Stream failed: /)
    expect(await shown()).toEqual(['cut', 'half an'])
    expect(await page.inputValue('#prompt')).toBe(failing)

    // What is sent next is what is shown.
    await page.fill('#prompt', 'next [[emulator:tokens=3]]')
    const sent = page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'))
    await page.click('#send')
    expect((JSON.parse((await sent).postData() ?? '{}') as { messages: unknown }).messages).toEqual([
      { role: 'user', content: 'cut' },
      { role: 'assistant', content: 'half an' },
      { role: 'user', content: 'next [[emulator:tokens=3]]' },
    ])
    await expect.poll(() => page.textContent('#status')).toBe('Done.')
    await page.close()
  })

  it('the dev Worker also serves /openapi.json (README: curl .../openapi.json); production config leaves the playground off', async () => {
    const res = await fetch(`${server.url}/openapi.json`)
    expect(res.status).toBe(200)
    const doc = (await res.json()) as { openapi: string; paths: Record<string, unknown> }
    expect(doc.openapi).toBe('3.1.0')
    expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(['/v1/chat/completions', '/playground']))
    const toml = readFileSync('wrangler.toml', 'utf8')
    const production = toml.slice(0, toml.indexOf('[env.dev]'))
    expect(production).not.toMatch(/PODGATE_PLAYGROUND/)
    expect(toml.slice(toml.indexOf('[env.dev.vars]'))).toMatch(/^PODGATE_PLAYGROUND = "true"$/m)
  })
})
