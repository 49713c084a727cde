/**
 * The deployable Worker end to end: wrangler.toml [env.dev] config, miniflare KV, and a real HTTP
 * Runpod emulator on loopback (started by global-setup.ts). Nothing here is stubbed in-process.
 */
import { exports } from 'cloudflare:workers'
import { env } from 'cloudflare:test'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { MODEL_NAMES } from './helpers.ts'
import { openApiHandler, playgroundHandler } from '../src/index.ts'
import { createPodgateWorker } from '../src/worker.ts'
import type { PodgateWorkerEnv } from '../src/worker.ts'

const worker = (exports as unknown as { default: Fetcher }).default
const workerFetch = ((input: RequestInfo | URL, init?: RequestInit) => worker.fetch(new Request(input, init))) as typeof fetch

async function newKey(): Promise<string> {
  const res = await worker.fetch('http://podgate/admin/keys', {
    method: 'POST',
    headers: { authorization: `Bearer ${env.PODGATE_ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'worker-test' }),
  })
  expect(res.status).toBe(201)
  return ((await res.json()) as { key: string }).key
}

describe('the podgate Worker over a real HTTP upstream', () => {
  it.each(MODEL_NAMES)('%s: an admin-created key chats, streamed and not, with identical text', async (model) => {
    const openai = new OpenAI({ apiKey: await newKey(), baseURL: 'http://podgate/v1', fetch: workerFetch, maxRetries: 0 })
    const messages = [{ role: 'user' as const, content: `hello over http ${model}` }]
    const full = await openai.chat.completions.create({ model, messages, max_tokens: 48 })
    const text = full.choices[0]?.message.content
    expect(text).toBeTruthy()
    let streamed = ''
    for await (const chunk of await openai.chat.completions.create({ model, messages, max_tokens: 48, stream: true })) {
      streamed += chunk.choices[0]?.delta.content ?? ''
    }
    expect(streamed).toBe(text)
  })

  it('keeps the Runpod key out of every response', async () => {
    const key = await newKey()
    const bodies = await Promise.all([
      worker.fetch('http://podgate/v1/models', { headers: { authorization: `Bearer ${key}` } }).then((r) => r.text()),
      worker.fetch('http://podgate/v1/chat/completions', { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: JSON.stringify({ model: 'chat-openai', messages: [{ role: 'user', content: 'x [[emulator:fault=http,status=401]]' }] }) }).then((r) => r.text()),
      worker.fetch('http://podgate/v1/chat/completions', { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: JSON.stringify({ model: 'chat-current', messages: [{ role: 'user', content: 'x [[emulator:fault=job_failed]]' }] }) }).then((r) => r.text()),
    ])
    for (const body of bodies) {
      expect(body).not.toContain(env.RUNPOD_API_KEY)
      expect(body).not.toContain(env.PODGATE_ADMIN_TOKEN)
    }
  })
})

describe('createPodgateWorker', () => {
  const ctx = { waitUntil: () => undefined, passThroughOnException: () => undefined } as unknown as ExecutionContext
  // Found in the held-connection review: the Worker started, an admin created keys, and then every call
  // that a quota counted (every control call included) was a 500.
  it("quota.store 'strict' with no PODGATE_QUOTA binding refuses to start, naming the binding", () => {
    const handler = createPodgateWorker()
    const unbound = { ...env, PODGATE_QUOTA: undefined, PODGATE_PLAYGROUND: undefined, PODGATE_QUOTA_CONFIG: '{"store":"strict"}' } as unknown as PodgateWorkerEnv
    expect(() => handler.fetch!(new Request('http://podgate/v1/models') as Parameters<NonNullable<typeof handler.fetch>>[0], unbound, ctx)).toThrow(/PODGATE_QUOTA/)
  })

  // wrangler.toml may give a var as a TOML boolean (`PODGATE_PLAYGROUND = true`): it reaches the Worker as a boolean.
  it.each([['"true"', 'true'], ['a TOML boolean', true]])('PODGATE_PLAYGROUND = %s serves the playground', async (_, value) => {
    const handler = createPodgateWorker({ extras: { openapi: openApiHandler, playground: playgroundHandler } })
    const res = await handler.fetch!(new Request('http://podgate/playground') as Parameters<NonNullable<typeof handler.fetch>>[0], { ...env, PODGATE_PLAYGROUND: value } as unknown as PodgateWorkerEnv, ctx)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toContain('text/html')
  })
})
