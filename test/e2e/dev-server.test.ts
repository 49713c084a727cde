/**
 * The README's path, for real: podgate under `wrangler dev` (workerd) with the HTTP emulator, an
 * admin-created key, and the official `openai` client over the network.
 */
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startPodgate } from '../../scripts/lib/podgate-server.ts'
import type { PodgateServer } from '../../scripts/lib/podgate-server.ts'

let server: PodgateServer

beforeAll(async () => {
  server = await startPodgate()
})
afterAll(async () => {
  await server?.close()
})

describe('podgate under wrangler dev', () => {
  it.each(['chat-openai', 'chat-classic', 'chat-current'])('%s streams over real HTTP and leaves no job running', async (model) => {
    const { key } = await server.createKey()
    const openai = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 })
    const messages = [{ role: 'user' as const, content: `e2e ${model}` }]
    const full = await openai.chat.completions.create({ model, messages, max_tokens: 32 })
    let streamed = ''
    for await (const chunk of await openai.chat.completions.create({ model, messages, max_tokens: 32, stream: true })) {
      streamed += chunk.choices[0]?.delta.content ?? ''
    }
    expect(streamed).toBe(full.choices[0]?.message.content)
    expect(server.emulator?.activeJobs()).toEqual([])
  })
})

describe('a caller who leaves, under wrangler dev', () => {
  // A real HTTP client disconnecting mid-answer, through the config `wrangler deploy` ships. (A caller who
  // leaves a JSON call before its answer is told to podgate by the request's signal, which Cloudflare fires
  // with wrangler.toml's `enable_request_signal`; workerd's local HTTP server notices no disconnect before
  // a response, so only streams can be checked here.)
  it.each(['chat-current', 'chat-classic'])('%s: a stream the caller leaves mid-answer has its job cancelled', async (model) => {
    const { key } = await server.createKey()
    const leave = new AbortController()
    const body = { model, stream: true, max_tokens: 128, messages: [{ role: 'user', content: `leave me [[emulator:tokens=128,delay=150]] ${model}` }] }
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: leave.signal,
    })
    expect(res.status).toBe(200)
    await res.body!.getReader().read()
    expect(server.emulator?.activeJobs().length).toBeGreaterThan(0)
    leave.abort()
    // The answer would take 128 × 150 ms ≈ 19 s: the job must be gone well before that.
    const until = Date.now() + 8000
    while ((server.emulator?.activeJobs().length ?? 0) > 0 && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 100))
    expect(server.emulator?.activeJobs()).toEqual([])
  })

  // Identical cacheable requests share one upstream call (docs/caching.md "Coalescing"): the first caller
  // disconnecting for real (workerd cancels its body) must not end the answer of the one still reading.
  it('a shared stream runs on for the caller still reading when the first caller leaves', async () => {
    const { key } = await server.createKey()
    const body = JSON.stringify({ model: 'chat-current', stream: true, temperature: 0, max_tokens: 40, messages: [{ role: 'user', content: `shared [[emulator:tokens=40,delay=50]] ${Date.now()}` }] })
    const post = (signal?: AbortSignal) => fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body, ...(signal ? { signal } : {}) })
    const leave = new AbortController()
    const first = await post(leave.signal)
    expect(first.headers.get('x-podgate-cache')).toBe('MISS')
    const second = await post()
    expect(second.headers.get('x-podgate-cache')).toBe('COALESCED')
    await first.body!.getReader().read()
    leave.abort()
    const text = await second.text()
    expect(text).not.toContain('"error"')
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true)
    expect(server.emulator?.activeJobs()).toEqual([])
  })
})

describe('startPodgate (the e2e tests, load run and benchmarks)', () => {
  it('leaves no local state behind when closed', { timeout: 90_000 }, async () => {
    const own = await startPodgate()
    const persisted = join('.wrangler', `e2e-${new URL(own.url).port}`)
    await own.createKey()
    expect(existsSync(persisted)).toBe(true)
    await own.close()
    expect(existsSync(persisted)).toBe(false)
  })
})
