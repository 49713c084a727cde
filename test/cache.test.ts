/**
 * The answer cache end to end, in workerd with miniflare's real Cache API and KV: hits, misses,
 * bypass, refresh, max-age, TTL, scopes, stream replay equality, cross-form replay, coalescing,
 * failed streams and purge.
 */
import { env } from 'cloudflare:test'
import { describe, expect, it } from 'vitest'
import { ADMIN_TOKEN, authed, chatBody, harness, MODEL_NAMES, MODELS, readSome, readSSE, RUNPOD_KEY, scriptedUpstream, streamedText } from './helpers.ts'
import { createRunpodEmulator } from '../src/testing/index.ts'
import type { GatewayOptions } from '../src/index.ts'

const JOB_OPS = new Set(['run', 'runsync', 'openai'])

async function setup(overrides: Partial<GatewayOptions> = {}) {
  let clock = 1_800_000_000_000
  const h = harness({ ...overrides, cache: { now: () => clock, ...overrides.cache } })
  const { id, key } = await h.createKey()
  const jobs = () => h.emulator.calls.filter((call) => JOB_OPS.has(call.op)).length
  const advance = (ms: number) => {
    clock += ms
  }
  const chat = async (body: string, headers: Record<string, string> = {}, apiKey = key) => {
    const init = authed(apiKey, body)
    const res = await h.fetch('/v1/chat/completions', { ...init, headers: { ...(init.headers as Record<string, string>), ...headers } })
    await h.settle()
    return res
  }
  return { h, id, key, jobs, advance, chat }
}

/** Chunks with their per-answer identity blanked, for comparing a replay with a live answer. */
function shape(events: unknown[]): unknown[] {
  return events.map((event) => (typeof event === 'object' && event !== null ? { ...event, id: 'x', created: 0 } : event))
}

const deterministic = (model: string, content = 'Tell me about caches', extra: Record<string, unknown> = {}) => chatBody(model, content, { temperature: 0, max_tokens: 24, ...extra })

/**
 * A gateway whose first OpenAI-route call upstream never answers, nor hears its abort (a hung connection,
 * or a request the runtime ended with no word), until `wake`; chat-openai's `timeouts.totalMs` is 300.
 */
async function hungFirstCall() {
  const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
  let wake!: () => void
  const hung = new Promise<void>((resolve) => (wake = resolve))
  const upstream = { calls: 0 }
  const fetch = async (input: RequestInfo | URL, init?: RequestInit) => {
    const request = new Request(input, init)
    if (new URL(request.url).pathname.includes('/openai/') && upstream.calls++ === 0) await hung
    return emulator.fetch(request)
  }
  const resilience = { timeouts: { totalMs: 300 } }
  const h = harness({ models: { ...MODELS, 'chat-openai': { ...MODELS['chat-openai']!, resilience } }, runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', timeoutMs: 60_000 }, fetch }, emulator)
  const { key } = await h.createKey()
  return { h, key, wake, upstream }
}

/** Miniflare's KV, with a hook before `get` and `list` run. */
function kvHooked(hooks: { get?: (key: string) => void; put?: (key: string) => void; list?: () => Promise<void> }): KVNamespace {
  return new Proxy(env.PODGATE_KV, {
    get(target, name) {
      const value = Reflect.get(target, name) as unknown
      if (typeof value !== 'function') return value
      const original = (value as (...args: unknown[]) => Promise<unknown>).bind(target)
      if (name === 'get' && hooks.get) return (key: string, ...rest: unknown[]) => (hooks.get!(key), original(key, ...rest))
      if (name === 'put' && hooks.put) return (key: string, ...rest: unknown[]) => (hooks.put!(key), original(key, ...rest))
      if (name === 'list' && hooks.list) return async (...args: unknown[]) => (await hooks.list!(), original(...args))
      return original
    },
  })
}

describe('hits and misses', () => {
  it.each(MODEL_NAMES)('%s: the second identical request is a HIT with no upstream call', async (model) => {
    const { chat, jobs } = await setup()
    const first = await chat(deterministic(model))
    expect(first.headers.get('x-podgate-cache')).toBe('MISS')
    expect(first.headers.get('age')).toBe('0')
    const live = (await first.json()) as Record<string, unknown>
    const second = await chat(deterministic(model))
    expect(second.headers.get('x-podgate-cache')).toBe('HIT')
    const replay = (await second.json()) as Record<string, unknown>
    expect(jobs()).toBe(1)
    expect({ ...replay, id: 'x', created: 0 }).toEqual({ ...live, id: 'x', created: 0 })
    expect(replay.id).not.toBe(live.id)
  })

  it('a fixed seed is deterministic too; `stream`, `stream_options` and `user` are not part of the key', async () => {
    const { chat, jobs } = await setup()
    await chat(chatBody('chat-current', 'seeded', { seed: 3, user: 'alice' }))
    const res = await chat(chatBody('chat-current', 'seeded', { seed: 3, user: 'bob', stream: true, stream_options: { include_usage: true } }))
    expect(res.headers.get('x-podgate-cache')).toBe('HIT')
    expect(jobs()).toBe(1)
  })

  it('a different request is a different entry', async () => {
    const { chat, jobs } = await setup()
    await chat(deterministic('chat-current', 'one'))
    expect((await chat(deterministic('chat-current', 'two'))).headers.get('x-podgate-cache')).toBe('MISS')
    expect((await chat(deterministic('chat-current', 'one', { max_tokens: 25 }))).headers.get('x-podgate-cache')).toBe('MISS')
    expect(jobs()).toBe(3)
  })
})

describe('bypass, refresh and age', () => {
  it('a non-deterministic request bypasses the cache unless the caller or the model opts in', async () => {
    const { chat, jobs } = await setup({ models: { 'chat-current': { endpoints: [{ endpointId: 'vllmcurrent' }], mode: 'native' }, 'chat-any': { endpoints: [{ endpointId: 'vllmcurrent' }], mode: 'native', cache: { nonDeterministic: true } } } })
    const body = chatBody('chat-current', 'creative', { temperature: 0.9 })
    expect((await chat(body)).headers.get('x-podgate-cache')).toBe('BYPASS')
    const bypass = await chat(body)
    expect(bypass.headers.get('x-podgate-cache')).toBe('BYPASS')
    expect(bypass.headers.get('age')).toBeNull()
    expect(jobs()).toBe(2)
    expect((await chat(body, { 'x-podgate-cache': 'on' })).headers.get('x-podgate-cache')).toBe('MISS')
    expect((await chat(body, { 'x-podgate-cache': 'on' })).headers.get('x-podgate-cache')).toBe('HIT')
    const any = chatBody('chat-any', 'creative', { temperature: 0.9 })
    expect((await chat(any)).headers.get('x-podgate-cache')).toBe('MISS')
    expect((await chat(any)).headers.get('x-podgate-cache')).toBe('HIT')
    expect((await chat(any, { 'x-podgate-cache': 'off' })).headers.get('x-podgate-cache')).toBe('BYPASS')
    expect(jobs()).toBe(5)
  })

  it('Cache-Control: no-store neither reads nor writes', async () => {
    const { chat, jobs } = await setup()
    expect((await chat(deterministic('chat-openai'), { 'cache-control': 'no-store' })).headers.get('x-podgate-cache')).toBe('BYPASS')
    expect((await chat(deterministic('chat-openai'))).headers.get('x-podgate-cache')).toBe('MISS')
    expect((await chat(deterministic('chat-openai'), { 'cache-control': 'no-store' })).headers.get('x-podgate-cache')).toBe('BYPASS')
    expect(jobs()).toBe(3)
  })

  it('Cache-Control: no-cache skips the lookup and stores the fresh answer', async () => {
    const { chat, jobs, advance } = await setup()
    await chat(deterministic('chat-classic'))
    advance(100_000)
    const refreshed = await chat(deterministic('chat-classic'), { 'cache-control': 'no-cache' })
    expect(refreshed.headers.get('x-podgate-cache')).toBe('MISS')
    expect(jobs()).toBe(2)
    const hit = await chat(deterministic('chat-classic'))
    expect(hit.headers.get('x-podgate-cache')).toBe('HIT')
    expect(hit.headers.get('age')).toBe('0')
  })

  it('Cache-Control: max-age bounds the age accepted; Age says how old a hit is', async () => {
    const { chat, jobs, advance } = await setup()
    await chat(deterministic('chat-current'))
    advance(30_000)
    const hit = await chat(deterministic('chat-current'))
    expect(hit.headers.get('x-podgate-cache')).toBe('HIT')
    expect(hit.headers.get('age')).toBe('30')
    expect((await chat(deterministic('chat-current'), { 'cache-control': 'max-age=60' })).headers.get('x-podgate-cache')).toBe('HIT')
    expect((await chat(deterministic('chat-current'), { 'cache-control': 'max-age=10' })).headers.get('x-podgate-cache')).toBe('MISS')
    expect(jobs()).toBe(2)
    // The refresh was stored: it is young now.
    const fresh = await chat(deterministic('chat-current'), { 'cache-control': 'max-age=10' })
    expect(fresh.headers.get('x-podgate-cache')).toBe('HIT')
    expect(fresh.headers.get('age')).toBe('0')
  })

  it('entries expire after the model TTL (gateway default otherwise)', async () => {
    const { chat, jobs, advance } = await setup({
      models: { 'chat-current': { endpoints: [{ endpointId: 'vllmcurrent' }], mode: 'native', cache: { ttlSeconds: 60 } }, 'chat-classic': { endpoints: [{ endpointId: 'vllmclassic' }], mode: 'native' } },
      cache: { ttlSeconds: 120 },
    })
    await chat(deterministic('chat-current'))
    await chat(deterministic('chat-classic'))
    advance(59_000)
    expect((await chat(deterministic('chat-current'))).headers.get('x-podgate-cache')).toBe('HIT')
    advance(2_000)
    expect((await chat(deterministic('chat-current'))).headers.get('x-podgate-cache')).toBe('MISS')
    expect((await chat(deterministic('chat-classic'))).headers.get('x-podgate-cache')).toBe('HIT')
    advance(60_000)
    expect((await chat(deterministic('chat-classic'))).headers.get('x-podgate-cache')).toBe('MISS')
    expect(jobs()).toBe(4)
  })
})

describe('scopes and tiers', () => {
  it('entries never cross keys in the default per-key scope', async () => {
    const { h, chat, jobs } = await setup()
    const other = await h.createKey({ name: 'other' })
    await chat(deterministic('chat-current', 'scoped'))
    expect((await chat(deterministic('chat-current', 'scoped'), {}, other.key)).headers.get('x-podgate-cache')).toBe('MISS')
    expect((await chat(deterministic('chat-current', 'scoped'), {}, other.key)).headers.get('x-podgate-cache')).toBe('HIT')
    expect(jobs()).toBe(2)
  })

  it('the gateway scope shares entries between keys', async () => {
    const { h, chat, jobs } = await setup({ cache: { scope: 'gateway' } })
    const other = await h.createKey({ name: 'other' })
    const body = deterministic('chat-current', `shared ${crypto.randomUUID()}`)
    await chat(body)
    expect((await chat(body, {}, other.key)).headers.get('x-podgate-cache')).toBe('HIT')
    expect(jobs()).toBe(1)
  })

  it.each([
    ['KV only', { cacheApi: false }],
    ['Cache API only', { kv: false }],
  ])('%s still hits', async (_name, tiers) => {
    const { chat, jobs } = await setup({ cache: tiers })
    await chat(deterministic('chat-current', `tier ${crypto.randomUUID()}`))
    await chat(deterministic('chat-current', 'other'))
    expect((await chat(deterministic('chat-current', 'other'))).headers.get('x-podgate-cache')).toBe('HIT')
    expect(jobs()).toBe(2)
  })

  it('a KV hit back-fills the Cache API', async () => {
    let useCacheApi = false
    const real = await caches.open(`backfill-${crypto.randomUUID()}`)
    let found = 0
    const spy = {
      match: async (key: string) => {
        const res = await real.match(key)
        if (res) found++
        return res
      },
      put: (key: string, res: Response) => real.put(key, res),
    } as unknown as Cache
    const { chat, jobs } = await setup({ cache: { edgeCache: () => (useCacheApi ? spy : undefined) } })
    await chat(deterministic('chat-current'))
    useCacheApi = true
    expect((await chat(deterministic('chat-current'))).headers.get('x-podgate-cache')).toBe('HIT')
    expect(found).toBe(0)
    expect((await chat(deterministic('chat-current'))).headers.get('x-podgate-cache')).toBe('HIT')
    expect(found).toBe(1)
    expect(jobs()).toBe(1)
  })
})

describe('storage failures', () => {
  it('are logged through an async logSink too: each line is held by the request\'s waitUntil until written', async () => {
    const written: string[] = []
    const kv = kvHooked({
      get(key) {
        if (key.startsWith('cachegen:')) throw new Error('KV GET failed: 503 Service Unavailable')
      },
    })
    const { chat } = await setup({ kv: () => kv, logSink: async (line) => { await new Promise((resolve) => setTimeout(resolve, 100)); written.push(line) } })
    written.length = 0
    const res = await chat(deterministic('chat-openai', `async sink ${crypto.randomUUID()}`))
    expect(res.headers.get('x-podgate-cache')).toBe('BYPASS')
    expect(written.map((text) => (JSON.parse(text) as { message: string }).message)).toEqual(['cache generation read failed'])
  })

  it('are misses, never failed requests, each logged with its request id and model as failure lines are', async () => {
    const down = () => Promise.reject(new Error('Cache API down'))
    const broken = { match: down, put: down } as unknown as Cache
    const { h, chat } = await setup({ cache: { kv: false, edgeCache: () => broken } })
    const res = await chat(deterministic('chat-current', `broken ${crypto.randomUUID()}`))
    expect(res.status).toBe(200)
    expect(res.headers.get('x-podgate-cache')).toBe('MISS')
    const line = { level: 'warn', request_id: res.headers.get('x-request-id'), model: 'chat-current', cause: 'Error: Cache API down' }
    expect(h.logs.map((text) => JSON.parse(text) as unknown)).toEqual([
      { ...line, message: 'cache lookup failed' },
      { ...line, message: 'cache write failed' },
    ])
    // Without the purge generation the lookup is skipped: the answer is served uncached.
    const kv = kvHooked({
      get(key) {
        if (key.startsWith('cachegen:')) throw new Error('KV GET failed: 503 Service Unavailable')
      },
    })
    const cold = await setup({ kv: () => kv })
    const bypass = await cold.chat(deterministic('chat-openai', `no generation ${crypto.randomUUID()}`))
    expect(bypass.headers.get('x-podgate-cache')).toBe('BYPASS')
    expect(cold.h.logs.map((text) => JSON.parse(text) as unknown)).toEqual([
      { level: 'warn', request_id: bypass.headers.get('x-request-id'), model: 'chat-openai', message: 'cache generation read failed', cause: 'Error: KV GET failed: 503 Service Unavailable' },
    ])
  })

  it('an answer over maxEntryBytes is logged with its request id and model', async () => {
    const { h, key } = await setup({ cache: { maxEntryBytes: 1024 } })
    const res = await h.fetch('/v1/chat/completions', authed(key, deterministic('chat-current', `large ${crypto.randomUUID()} [[emulator:tokens=60]]`, { max_tokens: 100, stream: true })))
    expect(res.headers.get('x-podgate-cache')).toBe('MISS')
    await res.text()
    await h.settle()
    expect(h.logs.map((text) => JSON.parse(text) as unknown)).toEqual([
      expect.objectContaining({ level: 'info', request_id: res.headers.get('x-request-id'), model: 'chat-current', message: 'cache: answer over maxEntryBytes, not stored' }),
    ])
  })
})

describe('malformed entries', () => {
  it.each([['JSON', {}], ['stream', { stream: true }]])('an entry with a missing choice (stored by an older version) is a MISS for a %s request, then overwritten', async (_form, form) => {
    let written: string | undefined
    const kv = kvHooked({ put: (key) => void (key.startsWith('cache:') && (written = key)) })
    const { h, chat, jobs } = await setup({ kv: () => kv, cache: { cacheApi: false } })
    const content = `hole ${crypto.randomUUID()}`
    const body = (extra = {}) => deterministic('chat-openai', content, { n: 2, seed: 5, temperature: 0.7, ...extra })
    expect((await chat(body())).headers.get('x-podgate-cache')).toBe('MISS')
    const entry = JSON.parse((await env.PODGATE_KV.get(written!, 'text'))!) as { answer: { choices: unknown[] } }
    entry.answer.choices[0] = null
    await env.PODGATE_KV.put(written!, JSON.stringify(entry))
    const res = await chat(body(form))
    expect(res.status).toBe(200)
    expect(res.headers.get('x-podgate-cache')).toBe('MISS')
    await res.text()
    // Said to the operator, with the request it met.
    expect(h.logs.map((text) => JSON.parse(text) as Record<string, unknown>)).toContainEqual(expect.objectContaining({ level: 'warn', message: 'cache entry unreadable', request_id: res.headers.get('x-request-id') }))
    expect(jobs()).toBe(2)
    expect((await chat(body(form))).headers.get('x-podgate-cache')).toBe('HIT')
    expect(jobs()).toBe(2)
  })
})

describe('the cold path', () => {
  it('a new isolate reads the purge generation while the quota stage waits for its KV list', async () => {
    const order: string[] = []
    let generationAsked!: () => void
    const asked = new Promise<void>((resolve) => (generationAsked = resolve))
    const kv = kvHooked({
      get(key) {
        if (!key.startsWith('cachegen:') || order.includes('generation read')) return
        order.push('generation read')
        generationAsked()
      },
      // The quota's first list waits (up to a second) for the generation's read to begin.
      async list() {
        order.push('quota list')
        await Promise.race([asked, new Promise((resolve) => setTimeout(resolve, 1_000))])
        order.push('quota list answered')
      },
    })
    const h = harness({ kv: () => kv })
    const { key } = await h.createKey({ name: 'cold', quota: { requestsPerMinute: 100 } })
    const res = await h.fetch('/v1/chat/completions', authed(key, deterministic('chat-openai', `cold ${crypto.randomUUID()}`)))
    expect(res.status).toBe(200)
    expect(res.headers.get('x-podgate-cache')).toBe('MISS')
    await res.text()
    await h.settle()
    expect(order.indexOf('generation read')).toBeGreaterThanOrEqual(0)
    expect(order.indexOf('generation read')).toBeLessThan(order.indexOf('quota list answered'))
  })

  it('a request the quota refuses looks nothing up and stores nothing', async () => {
    const gets: string[] = []
    const puts: string[] = []
    const kv = kvHooked({ get: (key) => void gets.push(key), put: (key) => void puts.push(key) })
    // The gateway scope: another key would find an answer the refused request had stored. The quota's
    // clock is fixed mid-minute, so both requests fall in one window whenever the test runs.
    const { h, jobs } = await setup({ kv: () => kv, cache: { scope: 'gateway' }, quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } })
    const { key } = await h.createKey({ name: 'refused', quota: { requestsPerMinute: 1 } })
    const body = deterministic('chat-current', `refused ${crypto.randomUUID()}`)
    const first = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-current', 'spend the minute')))
    expect(first.status).toBe(200)
    await first.text()
    await h.settle()
    gets.length = 0
    puts.length = 0
    const refused = await h.fetch('/v1/chat/completions', authed(key, body))
    expect(refused.status).toBe(429)
    await h.settle()
    // The purge generation may have been read, but no answer was looked up or stored.
    expect(gets.filter((name) => name.startsWith('cache:'))).toEqual([])
    expect(puts.filter((name) => name.startsWith('cache:'))).toEqual([])
    const after = await h.createKey({ name: 'after' })
    const res = await h.fetch('/v1/chat/completions', authed(after.key, body))
    expect(res.headers.get('x-podgate-cache')).toBe('MISS')
    await res.text()
    await h.settle()
    expect(jobs()).toBe(2)
    // The hook sees the store an answered request makes.
    expect(puts.some((name) => name.startsWith('cache:'))).toBe(true)
  })
})

describe('the entry size bound', () => {
  const answerWith = (content: string) => ({
    id: 'chatcmpl-bound',
    object: 'chat.completion',
    created: 1_700_000_000,
    model: 'chat-openai',
    choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 5, completion_tokens: 7, total_tokens: 12 },
  })
  /**
   * Content that makes the answer exactly `bytes` of UTF-8, mostly two-byte characters, so its UTF-16
   * length alone cannot tell whether it fits.
   */
  const contentOf = (bytes: number) => {
    const room = bytes - new TextEncoder().encode(JSON.stringify(answerWith(''))).byteLength
    return 'é'.repeat(Math.floor(room / 2)) + 'a'.repeat(room % 2)
  }

  it.each([
    ['exactly maxEntryBytes is stored', 0, 'HIT'],
    ['one byte over passes through whole and is not stored', 1, 'MISS'],
  ])('a JSON answer of %s', async (_name, over, second) => {
    const maxEntryBytes = 2048
    const content = contentOf(maxEntryBytes + over)
    const upstream = (async () => Response.json(answerWith(content))) as typeof fetch
    const { chat } = await setup({ fetch: upstream, cache: { maxEntryBytes } })
    const body = deterministic('chat-openai', `bound ${over}`)
    const first = await chat(body)
    expect(first.headers.get('x-podgate-cache')).toBe('MISS')
    expect(await first.text()).toBe(JSON.stringify(answerWith(content)))
    expect((await chat(body)).headers.get('x-podgate-cache')).toBe(second)
  })
})

describe('stream replay', () => {
  it.each(MODEL_NAMES)('%s chat: a replayed stream has the live text, chunks and usage', async (model) => {
    const { chat, jobs } = await setup()
    for (const includeUsage of [true, false]) {
      const body = deterministic(model, `stream ${includeUsage}`, { stream: true, ...(includeUsage ? { stream_options: { include_usage: true } } : {}) })
      const live = await chat(body)
      expect(live.headers.get('x-podgate-cache')).toBe('MISS')
      const liveEvents = await readSSE(live)
      const hit = await chat(body)
      expect(hit.headers.get('x-podgate-cache')).toBe('HIT')
      expect(hit.headers.get('content-type')).toBe(live.headers.get('content-type'))
      const replayEvents = await readSSE(hit)
      expect(streamedText(replayEvents)).toBe(streamedText(liveEvents))
      expect(shape(replayEvents)).toEqual(shape(liveEvents))
      expect(replayEvents.at(-1)).toBe('[DONE]')
    }
    expect(jobs()).toBe(2)
  })

  it.each(MODEL_NAMES)('%s completions: a replayed stream equals the live one', async (model) => {
    const { h, jobs } = await setup()
    const { key } = await h.createKey()
    const body = JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true } })
    const live = await readSSE(await h.fetch('/v1/completions', authed(key, body)))
    await h.settle()
    const res = await h.fetch('/v1/completions', authed(key, body))
    expect(res.headers.get('x-podgate-cache')).toBe('HIT')
    expect(shape(await readSSE(res))).toEqual(shape(live))
    expect(jobs()).toBe(1)
  })

  it.each(MODEL_NAMES)('%s: several choices replay with their own text, interleaved as the live stream was', async (model) => {
    const { chat, jobs } = await setup()
    // Not temperature 0: vLLM refuses greedy sampling with n > 1; the seed makes it cacheable.
    const body = deterministic(model, 'two choices', { n: 2, seed: 5, temperature: 0.7, stream: true, stream_options: { include_usage: true } })
    const live = await readSSE(await chat(body))
    const replay = await readSSE(await chat(body))
    for (const index of [0, 1]) expect(streamedText(replay, index)).toBe(streamedText(live, index))
    // Live chunks of several choices interleave; a replay is the live stream chunk for chunk, in its order.
    const indexes = (events: unknown[]) => events.flatMap((e) => (e as { choices?: { index: number }[] }).choices?.map((c) => c.index) ?? [])
    expect(new Set(indexes(live).slice(0, 4)).size).toBe(2)
    expect(shape(replay)).toEqual(shape(live))
    // A current worker's shorthand stream has no usage chunk (worker-vllm asks vLLM for none), and its replay none either.
    const usageChunks = (events: unknown[]) => shape(events).filter((e) => typeof e === 'object' && e !== null && 'usage' in e)
    expect(usageChunks(replay)).toEqual(usageChunks(live))
    expect(usageChunks(replay).length).toBe(model === 'chat-current' ? 0 : 1)
    expect(replay.at(-1)).toBe('[DONE]')
    expect(jobs()).toBe(1)
  })

  it.each(MODEL_NAMES)('%s: one entry serves both forms (JSON -> stream, stream -> JSON)', async (model) => {
    const { chat, jobs } = await setup()
    const jsonFirst = deterministic(model, 'json first')
    const full = (await (await chat(jsonFirst)).json()) as { choices: { message: { content: string }; finish_reason: string }[]; usage: unknown }
    const asStream = await chat(deterministic(model, 'json first', { stream: true, stream_options: { include_usage: true } }))
    expect(asStream.headers.get('x-podgate-cache')).toBe('HIT')
    const events = await readSSE(asStream)
    expect(streamedText(events)).toBe(full.choices[0]?.message.content)
    // vLLM's JSON usage writes `prompt_tokens_details: null`; a live usage chunk has no null member.
    const { prompt_tokens_details: _details, ...usage } = full.usage as Record<string, unknown>
    expect(JSON.stringify((events.at(-2) as { usage: unknown }).usage)).toBe(JSON.stringify(usage))
    expect((events.at(-3) as { choices: { finish_reason: string }[] }).choices[0]?.finish_reason).toBe(full.choices[0]?.finish_reason)
    expect((events[0] as { choices: { delta: unknown }[] }).choices[0]?.delta).toEqual({ role: 'assistant', content: '' })

    const streamFirst = deterministic(model, 'stream first', { stream: true })
    const live = await readSSE(await chat(streamFirst))
    const asJson = await chat(deterministic(model, 'stream first'))
    expect(asJson.headers.get('x-podgate-cache')).toBe('HIT')
    const body = (await asJson.json()) as { object: string; model: string; choices: { message: { role: string; content: string }; finish_reason: string }[]; usage: { completion_tokens: number } | null }
    expect(body.object).toBe('chat.completion')
    expect(body.model).toBe(model)
    expect(body.choices[0]?.message).toMatchObject({ role: 'assistant', content: streamedText(live) })
    expect(body.choices[0]?.finish_reason).toBe((live.at(-2) as { choices: { finish_reason: string }[] }).choices[0]?.finish_reason)
    // A current worker's shorthand stream reported no usage: the entry has none to show (podgate shows no count of its own).
    if (model === 'chat-current') expect(body.usage).toBeNull()
    else expect(body.usage?.completion_tokens).toBeGreaterThan(0)
    expect(jobs()).toBe(2)
  })

  it.each(MODEL_NAMES)('%s: a JSON HIT from a streamed entry, and a JSON joiner of a stream, have the live JSON message (refusal: null, tool_calls: [])', async (model) => {
    const { h, key, chat } = await setup()
    const content = 'shape [[emulator:delay=10]]'
    const live = (await (await chat(deterministic(model, content), { 'cache-control': 'no-store' })).json()) as { choices: { message: Record<string, unknown> }[] }
    // vLLM's JSON message has `refusal`, `annotations`, `audio` and `function_call`, null, in every version podgate
    // fronts; the reasoning keys' names vary by version, so a stream that carried none cannot say which to write.
    const { reasoning: _r, reasoning_content: _rc, ...own } = live.choices[0]!.message
    const [leader, joiner] = await Promise.all([h.fetch('/v1/chat/completions', authed(key, deterministic(model, content, { stream: true }))), h.fetch('/v1/chat/completions', authed(key, deterministic(model, content)))])
    expect(joiner.headers.get('x-podgate-cache')).toBe('COALESCED')
    await leader.text()
    await h.settle()
    const hit = await chat(deterministic(model, content))
    expect(hit.headers.get('x-podgate-cache')).toBe('HIT')
    for (const res of [joiner, hit]) {
      const message = ((await res.json()) as { choices: { message: Record<string, unknown> }[] }).choices[0]!.message
      expect(message).toEqual(own)
      expect(Object.keys(message)).toEqual(Object.keys(own))
    }
  })

  it.each(MODEL_NAMES)('%s: a stream HIT from a JSON entry, and a stream joiner of a JSON call, carry no delta field a live stream leaves out', async (model) => {
    const { h, key, chat } = await setup()
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }]
    for (const extra of [{}, { tools }]) {
      const content = `delta fields ${extra.tools ? 'tools' : 'text'} [[emulator:delay=10]]`
      const stream = deterministic(model, content, { stream: true, ...extra })
      const live = await readSSE(await h.fetch('/v1/chat/completions', { ...authed(key, stream), headers: { authorization: `Bearer ${key}`, 'cache-control': 'no-store' } }))
      await h.settle()
      const [leader, joiner] = await Promise.all([h.fetch('/v1/chat/completions', authed(key, deterministic(model, content, extra))), h.fetch('/v1/chat/completions', authed(key, stream))])
      expect(joiner.headers.get('x-podgate-cache')).toBe('COALESCED')
      await leader.text()
      await h.settle()
      const hit = await chat(stream)
      expect(hit.headers.get('x-podgate-cache')).toBe('HIT')
      // vLLM writes a delta's set fields only: never `refusal`, `audio`, `function_call` or the reasoning keys as null, nor `tool_calls: []`.
      const deltaFields = (events: unknown[]) => new Set(events.flatMap((e) => (e as { choices?: { delta: Record<string, unknown> }[] }).choices ?? []).flatMap((c) => Object.entries(c.delta).map(([name, value]) => `${name}=${value === null ? 'null' : Array.isArray(value) ? (value.length ? 'list' : '[]') : typeof value}`)))
      const own = deltaFields(live)
      for (const res of [joiner, hit]) expect([...deltaFields(await readSSE(res))].filter((field) => !own.has(field))).toEqual([])
    }
  })

  it('a stream that did not ask for continuous_usage_stats gets no usage on every chunk: an entry recorded with it is not its entry', async () => {
    const h = harness()
    const { key } = await h.createKey()
    const base = { temperature: 0, max_tokens: 12, stream: true }
    const content = 'continuous usage [[emulator:tokens=6]]'
    // Someone asks with continuous usage: stored, with usage on every chunk.
    const first = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', content, { ...base, stream_options: { include_usage: true, continuous_usage_stats: true } })))
    expect(first.headers.get('x-podgate-cache')).toBe('MISS')
    await first.text()
    await h.settle()
    for (const extra of [{}, { stream_options: { include_usage: true } }, { stream_options: { include_usage: true, continuous_usage_stats: false } }]) {
      const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', content, { ...base, ...extra })))
      const events = await readSSE(res)
      // As live: no chunk with choices carries usage.
      expect(events.filter((e) => (e as { choices?: unknown[] }).choices?.length && (e as { usage?: unknown }).usage !== undefined)).toEqual([])
      await h.settle()
    }
  })

  it('a stream that asks for continuous_usage_stats gets usage on every chunk, as live, whatever other entries hold', async () => {
    const { chat, jobs } = await setup()
    const continuous = { stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } }
    const usageOf = (events: unknown[]) => events.map((e) => (e as { usage?: unknown }).usage)
    // A JSON entry cannot give it: the caller's own call does.
    await (await chat(deterministic('chat-openai', 'per chunk'))).text()
    const asked = await chat(deterministic('chat-openai', 'per chunk', continuous))
    expect(asked.headers.get('x-podgate-cache')).toBe('MISS')
    const live = await readSSE(asked)
    expect(usageOf(live.slice(0, -1)).every((usage) => usage !== undefined)).toBe(true)
    // That answer is stored: the same question replays it, per-chunk usage included.
    const hit = await chat(deterministic('chat-openai', 'per chunk', continuous))
    expect(hit.headers.get('x-podgate-cache')).toBe('HIT')
    const replayed = await readSSE(hit)
    expect(usageOf(replayed)).toEqual(usageOf(live))
    // Only include_usage: the JSON entry, with the usage chunk alone.
    const final = await chat(deterministic('chat-openai', 'per chunk', { stream: true, stream_options: { include_usage: true } }))
    expect(final.headers.get('x-podgate-cache')).toBe('HIT')
    expect(usageOf(await readSSE(final)).filter((usage) => usage !== undefined)).toHaveLength(1)
    expect(jobs()).toBe(2)
  })

  it('a streamed request vLLM refuses (prompt_logprobs with stream) is not answered 200 from a JSON entry', async () => {
    const h = harness()
    const { key } = await h.createKey()
    const json = chatBody('chat-openai', 'prompt logprobs', { temperature: 0, max_tokens: 8, prompt_logprobs: 1 })
    const streamed = chatBody('chat-openai', 'prompt logprobs', { temperature: 0, max_tokens: 8, prompt_logprobs: 1, stream: true })
    // Live, the streamed form is a 400 (vLLM: "`prompt_logprobs` are not available when `stream=True`.").
    const live = await h.fetch('/v1/chat/completions', { ...authed(key, streamed), headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'cache-control': 'no-store' } })
    expect(live.status).toBe(400)
    await live.text()
    const first = await h.fetch('/v1/chat/completions', authed(key, json))
    expect(first.status).toBe(200)
    await first.text()
    await h.settle()
    const res = await h.fetch('/v1/chat/completions', authed(key, streamed))
    await h.settle()
    // Asked upstream, which refuses it as live. (An error podgate relays carries no x-podgate-cache header.)
    expect({ status: res.status, cache: res.headers.get('x-podgate-cache') }).toEqual({ status: 400, cache: null })
    expect(await res.text()).toContain('`prompt_logprobs` are not available when `stream=True`.')
    // The JSON form still shares its entry.
    const again = await h.fetch('/v1/chat/completions', authed(key, json))
    expect(again.headers.get('x-podgate-cache')).toBe('HIT')
    await again.text()
  })

  it('failed, partial and cancelled streams are never stored', async () => {
    const { h, chat, jobs, key } = await setup()
    const broken = deterministic('chat-current', 'break [[emulator:fault=mid_stream,after=3]]', { stream: true })
    const events = await readSSE(await chat(broken))
    expect(events.at(-1)).not.toBe('[DONE]')
    expect((await chat(broken)).headers.get('x-podgate-cache')).toBe('MISS')
    const brokenOpenAI = deterministic('chat-openai', 'break [[emulator:fault=mid_stream,after=3]]', { stream: true })
    await readSSE(await chat(brokenOpenAI))
    expect((await chat(brokenOpenAI)).headers.get('x-podgate-cache')).toBe('MISS')
    expect(jobs()).toBe(4)

    const slow = deterministic('chat-current', 'slow [[emulator:delay=20,tokens=20]]', { stream: true })
    const res = await h.fetch('/v1/chat/completions', authed(key, slow))
    const reader = res.body!.getReader()
    await reader.read()
    await reader.cancel()
    await h.settle()
    expect((await chat(slow)).headers.get('x-podgate-cache')).toBe('MISS')
  })

  it.each(['abort', 'error'])('an answer vLLM ended with finish_reason %s (cut short) is never stored: piped, relayed or JSON', async (reason) => {
    const chunk = (delta: unknown, finish: string | null) => `data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1700000000,"model":"Served-8B","choices":[{"index":0,"delta":${JSON.stringify(delta)},"logprobs":null,"finish_reason":${JSON.stringify(finish)}}]}\n\n`
    const usage = { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 }
    const sse = [chunk({ role: 'assistant', content: '' }, null), chunk({ content: 'Hel' }, null), chunk({ content: '' }, reason), `data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1700000000,"model":"Served-8B","choices":[],"usage":${JSON.stringify(usage)}}\n\n`, 'data: [DONE]\n\n']
    const json = { id: 'chatcmpl-up', object: 'chat.completion', created: 1700000000, model: 'Served-8B', choices: [{ index: 0, message: { role: 'assistant', content: 'Hel' }, logprobs: null, finish_reason: reason }], usage }
    const scripted = scriptedUpstream(() => sse)
    let calls = 0
    const fetch = async (input: RequestInfo | URL, init?: RequestInit) => {
      calls++
      const request = new Request(input, init)
      if (((await request.clone().json()) as { stream?: boolean }).stream) return scripted.fetch(request)
      return new Response(JSON.stringify(json), { headers: { 'content-type': 'application/json' } })
    }
    // The alias is the served name: a stream asking for usage is piped natively; `renamed`'s is relayed.
    const models = { 'Served-8B': { endpoints: [{ endpointId: 'epsame' }], mode: 'openai' as const }, renamed: { endpoints: [{ endpointId: 'eprenamed' }], mode: 'openai' as const, servedModelName: 'Served-8B' } }
    const h = harness({ models, fetch })
    const { key } = await h.createKey()
    for (const [model, stream] of [['Served-8B', true], ['renamed', true], ['renamed', false]] as const) {
      const body = chatBody(model, 'Hi', { temperature: 0, max_tokens: 16, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) })
      // Asked twice: each goes upstream, the first answer was not kept.
      for (let i = 0; i < 2; i++) {
        const res = await h.fetch('/v1/chat/completions', authed(key, body))
        expect(res.headers.get('x-podgate-cache')).toBe('MISS')
        await res.text()
        await h.settle()
      }
    }
    expect(calls).toBe(6)
  })
})

describe('coalescing', () => {
  it.each(MODEL_NAMES)('%s: a stream asking for usage on every chunk shares a call only with streams asking the same', async (model) => {
    const { h, key, jobs } = await setup()
    const content = 'continuous burst [[emulator:delay=20,tokens=6]]'
    const continuous = { stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } }
    const forms = [{ stream: true }, continuous, { stream: true, stream_options: { include_usage: true } }, continuous]
    const responses = await Promise.all(forms.map((extra) => h.fetch('/v1/chat/completions', authed(key, deterministic(model, content, extra)))))
    expect(responses.map((r) => r.headers.get('x-podgate-cache'))).toEqual(['MISS', 'MISS', 'COALESCED', 'COALESCED'])
    const perChunk = await Promise.all(responses.map(async (res) => (await readSSE(res)).filter((e) => (e as { choices?: unknown[] }).choices?.length).map((e) => (e as { usage?: unknown }).usage !== undefined)))
    // As live: usage on every chunk of the streams that asked, on none of the others.
    expect(perChunk.map((chunks) => (chunks.every(Boolean) ? 'every' : chunks.some(Boolean) ? 'some' : 'none'))).toEqual(['none', 'every', 'none', 'every'])
    expect(jobs()).toBe(2)
  })

  it.each(MODEL_NAMES)('%s: N concurrent identical requests make one upstream job and get the same answer', async (model) => {
    const { h, key, jobs } = await setup()
    const content = 'burst [[emulator:delay=20,tokens=8]]'
    const forms = [
      { stream: true, stream_options: { include_usage: true } },
      { stream: true },
      {},
      { stream: true, stream_options: { include_usage: true } },
      {},
    ]
    const responses = await Promise.all(forms.map((extra) => h.fetch('/v1/chat/completions', authed(key, deterministic(model, content, extra)))))
    const statuses = responses.map((r) => r.headers.get('x-podgate-cache'))
    expect(statuses[0]).toBe('MISS')
    expect(statuses.slice(1)).toEqual(['COALESCED', 'COALESCED', 'COALESCED', 'COALESCED'])
    const texts: string[] = []
    const usages: unknown[] = []
    for (const [i, res] of responses.entries()) {
      if (forms[i]!.stream) {
        const events = await readSSE(res)
        expect(events.at(-1)).toBe('[DONE]')
        texts.push(streamedText(events))
        const usage = (events.at(-2) as { usage?: unknown }).usage
        if (forms[i]!.stream_options) usages.push(usage)
        else expect(usage).toBeUndefined()
      } else {
        const body = (await res.json()) as { choices: { message: { content: string } }[]; usage: unknown }
        texts.push(body.choices[0]!.message.content)
        usages.push(body.usage)
      }
    }
    await h.settle()
    expect(new Set(texts).size).toBe(1)
    expect(texts[0]!.length).toBeGreaterThan(0)
    // The leader's stream of a current worker reports no usage (worker-vllm asks vLLM for none): no one is shown any.
    const shown = new Set(usages.map((u) => (u == null ? null : JSON.stringify(Object.entries(u as object).sort()))))
    expect(shown.size).toBe(1)
    expect(shown.has(null)).toBe(model === 'chat-current')
    expect(jobs()).toBe(1)
    // And the answer was stored once complete.
    const after = await h.fetch('/v1/chat/completions', authed(key, deterministic(model, content)))
    expect(after.headers.get('x-podgate-cache')).toBe('HIT')
  })

  it('joiners of a failed call get its error; a call whose first caller left runs on for its joiners', async () => {
    const { h, key, jobs } = await setup()
    const failing = deterministic('chat-current', 'fails [[emulator:fault=http,status=503]]')
    const failed = await Promise.all([0, 1, 2].map(() => h.fetch('/v1/chat/completions', authed(key, failing))))
    await h.settle()
    const statuses = failed.map((r) => r.status)
    expect(statuses[0]).toBeGreaterThanOrEqual(500)
    expect(new Set(statuses).size).toBe(1)
    const jobsPerCall = jobs()
    // One caller's worth of upstream attempts (retries included), not three.
    await h.fetch('/v1/chat/completions', authed(key, failing))
    await h.settle()
    expect(jobs()).toBe(2 * jobsPerCall)

    const abort = new AbortController()
    const body = deterministic('chat-current', 'leader leaves [[emulator:cold=100]]')
    const leader = h.fetch('/v1/chat/completions', { ...authed(key, body), signal: abort.signal }).catch((error: unknown) => error)
    await new Promise((r) => setTimeout(r, 10))
    const joiner = h.fetch('/v1/chat/completions', authed(key, body))
    await new Promise((r) => setTimeout(r, 10))
    const before = jobs()
    abort.abort()
    await leader
    const res = await joiner
    expect(res.status).toBe(200)
    // The first caller's leaving did not end the call its joiner waits for: one job answered both.
    expect(res.headers.get('x-podgate-cache')).toBe('COALESCED')
    expect(((await res.json()) as { choices: unknown[] }).choices.length).toBe(1)
    await h.settle()
    expect(jobs()).toBe(before)
  })
  it.each<[string, string, { stream?: boolean }, { stream?: boolean }, string]>([
    ['JSON', 'a JSON', {}, {}, 'cold=150,fault=http,status=503'],
    ['JSON', 'a streaming', {}, { stream: true }, 'cold=150,fault=http,status=503'],
    ['streamed', 'a JSON', { stream: true }, {}, 'delay=20,tokens=20,fault=mid_stream,after=8'],
  ])('a %s call that runs on for %s joiner after its first caller left, and then fails, gives that joiner its error: it asks nothing on its own', async (_l, _j, leaderForm, joinerForm, directive) => {
    const { h, key, jobs } = await setup()
    const failing = deterministic('chat-current', `fails once its caller left [[emulator:${directive}]]`, leaderForm)
    // One caller's worth of upstream attempts (the dispatcher's retries included).
    const alone = await h.fetch('/v1/chat/completions', authed(key, failing))
    await alone.text()
    await h.settle()
    const perCall = jobs()
    const leaving = new AbortController()
    const leader = h.fetch('/v1/chat/completions', { ...authed(key, failing), signal: leaving.signal }).catch((error: unknown) => error)
    await new Promise((r) => setTimeout(r, 10))
    const { stream: _stream, ...question } = JSON.parse(failing) as Record<string, unknown>
    const joinerBody = JSON.stringify({ ...question, ...joinerForm })
    const joiner = h.fetch('/v1/chat/completions', authed(key, joinerBody))
    await new Promise((r) => setTimeout(r, 10))
    leaving.abort()
    await leader
    const res = await joiner
    const text = await res.text()
    await h.settle()
    expect(res.headers.get('x-podgate-cache')).toBe(joinerForm.stream ? 'COALESCED' : null)
    if (joinerForm.stream) expect(text).toContain('"error"')
    else expect(res.status).toBeGreaterThanOrEqual(500)
    // The shared call failed for the joiner as it would have for its first caller: no second call.
    expect(jobs()).toBe(2 * perCall)
  })

  // A caller who leaves ends its own part, not the others': its signal fires and its body is cancelled
  // (as workerd does on a disconnect), and the shared call runs on for the joiner still reading it.
  it.each(MODEL_NAMES)('%s: a streaming joiner following live reads to the end after the first caller left', async (model) => {
    const { h, key, jobs } = await setup()
    const body = deterministic(model, 'the first caller leaves [[emulator:delay=15,tokens=12]]', { stream: true })
    const leaving = new AbortController()
    const leader = await h.fetch('/v1/chat/completions', { ...authed(key, body), signal: leaving.signal })
    expect(leader.headers.get('x-podgate-cache')).toBe('MISS')
    const joiner = await h.fetch('/v1/chat/completions', authed(key, body))
    expect(joiner.headers.get('x-podgate-cache')).toBe('COALESCED')
    const led = await readSome(leader, 1)
    leaving.abort()
    await led.cancel()
    const events = await readSSE(joiner)
    expect(events.filter((e) => typeof e === 'object' && e !== null && 'error' in e)).toEqual([])
    expect(events.at(-1)).toBe('[DONE]')
    await h.settle()
    expect(jobs()).toBe(1)
    // Whole, so it was stored: the next caller gets the same answer from the cache.
    const after = await h.fetch('/v1/chat/completions', authed(key, body))
    expect(after.headers.get('x-podgate-cache')).toBe('HIT')
    expect(streamedText(await readSSE(after))).toBe(streamedText(events))
  })

  it('a call every caller left is stopped upstream: the first caller, then its joiner', async () => {
    const { h, key } = await setup()
    const body = deterministic('chat-current', 'everyone leaves [[emulator:delay=20,tokens=40]]', { stream: true })
    const leaving = [new AbortController(), new AbortController()]
    const leader = await h.fetch('/v1/chat/completions', { ...authed(key, body), signal: leaving[0]!.signal })
    const joiner = await h.fetch('/v1/chat/completions', { ...authed(key, body), signal: leaving[1]!.signal })
    expect(joiner.headers.get('x-podgate-cache')).toBe('COALESCED')
    const readers = [await readSome(leader, 1), await readSome(joiner, 1)]
    leaving[0]!.abort()
    await readers[0]!.cancel()
    await new Promise((r) => setTimeout(r, 50))
    expect(h.emulator.calls.some((call) => call.op === 'cancel')).toBe(false)
    leaving[1]!.abort()
    await readers[1]!.cancel()
    await h.settle()
    expect(h.emulator.calls.filter((call) => call.op === 'cancel')).toHaveLength(1)
  })

  // A custom `fetch` may ignore its signal: the stopped call answers anyway, and its relay, created with
  // the signal aborted, cuts it (openai-relay.ts). A caller who came after the stop must not follow it.
  it('a caller who comes after a call every caller left was stopped asks on its own, not the stopped call', async () => {
    let release = () => {}
    const released = new Promise<void>((resolve) => (release = resolve))
    let called = () => {}
    const upstreamCalled = new Promise<void>((resolve) => (called = resolve))
    const { h, key } = await setup({
      fetch: async (input, init) => {
        const request = new Request(input, init)
        if (new URL(request.url).pathname.includes('/openai/')) {
          called()
          await released
        }
        return h.emulator.fetch(new Request(request, { signal: null }))
      },
    })
    const body = deterministic('chat-openai', 'stopped [[emulator:delay=5,tokens=12]]', { stream: true })
    const leaving = new AbortController()
    const first = h.fetch('/v1/chat/completions', { ...authed(key, body), signal: leaving.signal }).catch((error: unknown) => error)
    await upstreamCalled
    leaving.abort()
    await new Promise((r) => setTimeout(r, 20))
    const later = h.fetch('/v1/chat/completions', authed(key, body))
    await new Promise((r) => setTimeout(r, 20))
    release()
    await first
    const events = await readSSE(await later)
    expect(events.filter((e) => typeof e === 'object' && e !== null && 'error' in e)).toEqual([])
    expect(events.at(-1)).toBe('[DONE]')
    await h.settle()
  })

  // Cloudflare ends a request 30 s after its caller left, its call with it: nothing more comes, and its
  // code never runs again (never takes its flight out of the map). An upstream call that hangs, deaf to
  // its abort, stands for that here (a native `/run` cannot: podgate stops waiting for it at firstTokenMs).
  it('a flight gone silent is let go: its waiting joiner asks upstream on its own, not the dead flight again', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    let wake!: () => void
    const hung = new Promise<void>((resolve) => (wake = resolve))
    let runs = 0
    const fetch = async (input: RequestInfo | URL, init?: RequestInit) => {
      const request = new Request(input, init)
      if (new URL(request.url).pathname.endsWith('/chat/completions') && runs++ === 0) await hung
      return emulator.fetch(request)
    }
    const resilience = { timeouts: { firstTokenMs: 200, idleMs: 200 } }
    const h = harness({ models: { ...MODELS, 'chat-openai': { ...MODELS['chat-openai']!, resilience } }, runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', timeoutMs: 60_000 }, fetch }, emulator)
    const { key } = await h.createKey()
    const body = deterministic('chat-openai', 'a leader that is gone [[emulator:delay=5,tokens=4]]', { stream: true })
    const leaving = new AbortController()
    const leader = h.fetch('/v1/chat/completions', { ...authed(key, body), signal: leaving.signal }).catch((error: unknown) => error)
    await new Promise((r) => setTimeout(r, 20))
    const joiner = h.fetch('/v1/chat/completions', authed(key, body))
    await new Promise((r) => setTimeout(r, 20))
    // The leader's request beats while it runs once its caller left (Flight.leaderLeft); here it never
    // will, as when the runtime ended it: its timers are never set.
    const setInterval = globalThis.setInterval
    globalThis.setInterval = (() => 0) as unknown as typeof globalThis.setInterval
    try {
      leaving.abort()
    } finally {
      globalThis.setInterval = setInterval
    }
    // Not heard from for 5 s: the joiner, which got nothing, asks upstream on its own.
    const own = await joiner
    expect(own.status).toBe(200)
    expect((await readSSE(own)).at(-1)).toBe('[DONE]')
    // Nor does a later twin meet the dead flight.
    const later = await h.fetch('/v1/chat/completions', authed(key, body))
    expect(later.status).toBe(200)
    expect((await readSSE(later)).at(-1)).toBe('[DONE]')
    wake()
    await leader
    await h.settle()
  }, 20_000)

  it.each<[string, { stream?: boolean }]>([['JSON', {}], ['streaming', { stream: true }]])('a %s joiner waits at most timeouts.totalMs + 5 s in all for a call that does not end, then asks on its own', async (_form, form) => {
    const { h, key, wake, upstream } = await hungFirstCall()
    const body = deterministic('chat-openai', 'a call that hangs', form)
    const leader = h.fetch('/v1/chat/completions', authed(key, body)).catch((error: unknown) => error)
    await new Promise((r) => setTimeout(r, 50))
    const started = Date.now()
    const joiner = await h.fetch('/v1/chat/completions', authed(key, body))
    expect(joiner.status).toBe(200)
    expect(await joiner.text()).toMatch(form.stream ? /data: \[DONE\]\n\n$/ : /"choices"/)
    const waited = Date.now() - started
    wake()
    await leader
    await h.settle()
    expect(upstream.calls).toBe(2)
    expect(waited).toBeGreaterThan(5_000)
    expect(waited).toBeLessThan(7_000)
  }, 30_000)

  it('a call still open past the time it had (its request was ended with no word, its caller there) is not joined', async () => {
    const { h, key, wake, upstream } = await hungFirstCall()
    const body = deterministic('chat-openai', 'a call whose request is gone')
    const leader = h.fetch('/v1/chat/completions', authed(key, body)).catch((error: unknown) => error)
    // Past timeouts.totalMs and the 5 s a call's ending may take.
    await new Promise((r) => setTimeout(r, 5_500))
    const started = Date.now()
    const twin = await h.fetch('/v1/chat/completions', authed(key, body))
    expect(twin.headers.get('x-podgate-cache')).toBe('MISS')
    expect(twin.status).toBe(200)
    await twin.text()
    expect(Date.now() - started).toBeLessThan(2_000)
    expect(upstream.calls).toBe(2)
    wake()
    await leader
    await h.settle()
  }, 30_000)

  it('a reader slower than the model, past maxEntryBytes, is not taken for a silent upstream once the first caller left', async () => {
    const resilience = { timeouts: { firstTokenMs: 300, idleMs: 300 } }
    const { h, key } = await setup({ cache: { maxEntryBytes: 1024 }, models: { ...MODELS, 'chat-current': { ...MODELS['chat-current']!, resilience } } })
    const body = deterministic('chat-current', 'long answer, slow joiner [[emulator:delay=5,tokens=60]]', { max_tokens: 100, stream: true })
    const leaving = new AbortController()
    const leader = await h.fetch('/v1/chat/completions', { ...authed(key, body), signal: leaving.signal })
    const joiner = await h.fetch('/v1/chat/completions', authed(key, body))
    expect(joiner.headers.get('x-podgate-cache')).toBe('COALESCED')
    const led = await readSome(leader, 1)
    leaving.abort()
    await led.cancel()
    // The joiner reads nothing for longer than the flight's 5 s window and the call's own timeouts: the
    // upstream reads wait for it, and the leader's request, which runs them, beats meanwhile.
    await new Promise((r) => setTimeout(r, 5_800))
    const events = await readSSE(joiner)
    expect(events.filter((e) => typeof e === 'object' && e !== null && 'error' in e)).toEqual([])
    expect(events.at(-1)).toBe('[DONE]')
    await h.settle()
  }, 20_000)

  it('a JSON joiner of a relayed stream asks again as soon as the answer is over maxEntryBytes, not after the stream ends', async () => {
    const { h, key, jobs } = await setup({ cache: { maxEntryBytes: 1024 } })
    // Native endpoint: podgate reads the leader's stream itself (not piped).
    const content = 'long answer [[emulator:delay=25,tokens=60]]'
    const leader = await h.fetch('/v1/chat/completions', authed(key, deterministic('chat-current', content, { max_tokens: 100, stream: true })))
    expect(leader.headers.get('x-podgate-cache')).toBe('MISS')
    const follower = await h.fetch('/v1/chat/completions', authed(key, deterministic('chat-current', content, { max_tokens: 100, stream: true })))
    expect(follower.headers.get('x-podgate-cache')).toBe('COALESCED')
    const joiner = h.fetch('/v1/chat/completions', authed(key, deterministic('chat-current', content, { max_tokens: 100 })))
    const [led, followed] = await Promise.all([readSSE(leader), readSSE(follower)])
    // The answer passed 1024 bytes after a few of its 60 tokens: by the leader's end the JSON joiner's
    // own call had started (docs/caching.md "Coalescing").
    const jobsWhenLeaderEnded = jobs()
    // The streaming joiner was following live: it read on to the end of the shared call.
    expect(followed.at(-1)).toBe('[DONE]')
    expect(streamedText(followed)).toBe(streamedText(led))
    const res = await joiner
    expect(res.status).toBe(200)
    expect(res.headers.get('x-podgate-cache')).toBe('MISS')
    await res.text()
    await h.settle()
    expect(jobsWhenLeaderEnded).toBe(2)
    expect(jobs()).toBe(2)
  })
})

describe('purge', () => {
  async function purge(h: Awaited<ReturnType<typeof setup>>['h'], body: unknown) {
    return h.fetch('/admin/cache/purge', { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify(body) })
  }

  it('purges by model, by key scope, or by both, in both tiers', async () => {
    const { h, chat, id, jobs } = await setup()
    const body = deterministic('chat-current', 'purge me')
    const other = deterministic('chat-classic', 'purge me')
    await chat(body)
    await chat(other)
    expect((await chat(body)).headers.get('x-podgate-cache')).toBe('HIT')

    const res = await purge(h, { model: 'chat-current' })
    expect(res.status).toBe(200)
    expect(await res.json()).toMatchObject({ purged: { model: 'chat-current', keyId: null }, maxDelaySeconds: 70 })
    expect((await chat(body)).headers.get('x-podgate-cache')).toBe('MISS')
    expect((await chat(other)).headers.get('x-podgate-cache')).toBe('HIT')

    expect((await purge(h, { keyId: id })).status).toBe(200)
    await h.settle()
    expect((await chat(body)).headers.get('x-podgate-cache')).toBe('MISS')
    expect((await chat(other)).headers.get('x-podgate-cache')).toBe('MISS')

    expect((await purge(h, { keyId: id, model: 'chat-classic' })).status).toBe(200)
    expect((await chat(body)).headers.get('x-podgate-cache')).toBe('HIT')
    expect((await chat(other)).headers.get('x-podgate-cache')).toBe('MISS')
    expect(jobs()).toBe(6)
  })

  it.each([['key', (id: string) => ({ keyId: id })], ['gateway', () => ({})]] as const)('a purge of a model in the %s scope deletes only its KV entries, not those of an alias it begins (`<model>:v2`)', async (scope, target) => {
    const written: string[] = []
    const kv = kvHooked({ put: (key) => void (key.startsWith('cache:') && written.push(key)) })
    const { h, chat, id } = await setup({ kv: () => kv, cache: { scope, cacheApi: false }, models: { ...MODELS, 'chat-current:v2': MODELS['chat-current']! } })
    const content = `purge one ${crypto.randomUUID()}`
    await chat(deterministic('chat-current', content))
    await chat(deterministic('chat-current:v2', content))
    const prefix = `cache:${scope === 'key' ? `key:${id}` : 'shared'}:chat-current:`
    const names = async () => {
      const kept = await Promise.all(written.map(async (name) => ((await env.PODGATE_KV.get(name)) === null ? [] : [name.slice(prefix.length).replace(/[0-9a-f]{64}$/, '<hash>')])))
      return kept.flat().sort()
    }
    expect(await names()).toEqual(['<hash>', 'v2:<hash>'])
    expect((await purge(h, { model: 'chat-current', ...target(id) })).status).toBe(200)
    await h.settle()
    expect(await names()).toEqual(['v2:<hash>'])
    expect((await chat(deterministic('chat-current:v2', content))).headers.get('x-podgate-cache')).toBe('HIT')
  })

  it('refuses bad purges with a 4xx and needs the admin token', async () => {
    const { h } = await setup()
    expect((await purge(h, {})).status).toBe(400)
    expect((await purge(h, { model: 'nope' })).status).toBe(400)
    expect((await purge(h, { models: 'x' })).status).toBe(400)
    const anon = await h.fetch('/admin/cache/purge', { method: 'POST', body: '{"model":"chat-current"}' })
    expect(anon.status).toBe(401)
  })
})
