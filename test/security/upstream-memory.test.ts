/**
 * Issue 15, M3 / item 6: memory per stream is bounded whatever the answer size. Measured by what the
 * isolate holds, counted exactly rather than read off a heap: for native streams, the upstream pages
 * podgate fetched that the caller has not yet received; for cache captures, the capture's own peak
 * (logged by the cache). Each test streams 50 MB.
 */
import { describe, expect, it } from 'vitest'
import { authed, chatBody, harness, MODELS, RUNPOD_KEY } from '../helpers.ts'

const PAGE_CHARS = 1_000_000
const PAGES = 50
const TOKEN = 'x'.repeat(PAGE_CHARS)

/** A native endpoint whose job streams PAGES 1 MB classic token items, `perPage` per poll, counting the items it served. */
function bigNativeUpstream(perPage = 1) {
  const state = { served: 0 }
  const fetch = async (input: RequestInfo | URL, init?: RequestInit) => {
    const request = new Request(input, init)
    const path = new URL(request.url).pathname
    if (path.endsWith('/run')) return Response.json({ id: 'big-1', status: 'IN_QUEUE' })
    if (path.includes('/cancel/')) return Response.json({ id: 'big-1', status: 'CANCELLED' })
    if (path.includes('/stream/')) {
      if (state.served >= PAGES) return Response.json({ id: 'big-1', status: 'COMPLETED', stream: [] })
      const stream = Array.from({ length: perPage }, () => ({ output: { choices: [{ tokens: [TOKEN] }] } }))
      state.served += perPage
      return Response.json({ id: 'big-1', status: state.served >= PAGES ? 'COMPLETED' : 'IN_PROGRESS', stream })
    }
    return Response.json({ id: 'big-1', status: 'COMPLETED', output: [] })
  }
  return { fetch, state }
}

/**
 * Reads a body to the end as a slow caller would (a pause after each read, so podgate could race ahead
 * if nothing held it back), calling `check` after every read with the bytes received so far.
 */
async function drain(body: ReadableStream<Uint8Array>, check: (received: number) => void): Promise<number> {
  const reader = body.getReader()
  let received = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) return received
    received += value.byteLength
    check(received)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

describe('M3: native streams read upstream only as fast as the caller reads', () => {
  it('upstream-M3-native-stream: 50 MB through the OpenAI surface from a native endpoint holds at most 2 unread pages', async () => {
    const upstream = bigNativeUpstream()
    // A budget that gives each of the 4096 tokens a poll: unpaced, this upstream serves a page a poll at once
    // (a real one hands a poll everything made since the last, so pacing costs it no throughput).
    const runpod = { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', maxPollsPerStream: 9_000 }
    const h = harness({ models: { big: { ...MODELS['chat-classic']!, resilience: { timeouts: { idleMs: 600_000, totalMs: 3_600_000, firstTokenMs: 60_000 } } } }, runpod, fetch: upstream.fetch })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('big', 'hi', { stream: true, max_tokens: 4096 })))
    expect(res.status).toBe(200)
    let peakUnread = 0
    const received = await drain(res.body!, (bytes) => {
      // Each page reaches the caller as one chunk of a little over PAGE_CHARS bytes.
      const delivered = Math.floor(bytes / PAGE_CHARS)
      peakUnread = Math.max(peakUnread, upstream.state.served - delivered)
    })
    expect(received).toBeGreaterThan(PAGES * PAGE_CHARS)
    expect(upstream.state.served).toBe(PAGES)
    expect(peakUnread).toBeLessThanOrEqual(2)
  })

  it('upstream-M3-job-events: 50 MB as a /v2 job event stream holds at most one poll of items unread', async () => {
    // Two items a poll: the job stream paces its polls (200 ms apart), and 25 polls are quicker than 50.
    const upstream = bigNativeUpstream(2)
    const h = harness({ models: { big: { ...MODELS['chat-classic']!, passthrough: true } }, fetch: upstream.fetch })
    const { key } = await h.createKey()
    const run = (await (await h.fetch('/v2/big/run', authed(key, JSON.stringify({ input: { anything: true } })))).json()) as { id: string }
    const res = await h.fetch(`/v2/big/stream/${run.id}`, { headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream' } })
    expect(res.status).toBe(200)
    let peakUnread = 0
    const received = await drain(res.body!, (bytes) => {
      peakUnread = Math.max(peakUnread, upstream.state.served - Math.floor(bytes / PAGE_CHARS))
    })
    expect(received).toBeGreaterThan(PAGES * PAGE_CHARS)
    expect(peakUnread).toBeLessThanOrEqual(2)
  })
})

/** An OpenAI-route endpoint streaming `megabytes` of content in 100 kB chunks, made as they are read. */
function bigOpenAIUpstream(megabytes: number) {
  const encoder = new TextEncoder()
  const piece = 'y'.repeat(100_000)
  const chunk = (choice: Record<string, unknown>) => `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [choice] })}\n\n`
  return async () => {
    let sent = 0
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent < megabytes * 10) {
          sent++
          controller.enqueue(encoder.encode(chunk({ index: 0, delta: { content: piece }, finish_reason: null })))
          return
        }
        controller.enqueue(encoder.encode(`${chunk({ index: 0, delta: {}, finish_reason: 'stop' })}data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":9,"total_tokens":10}}\n\ndata: [DONE]\n\n`))
        controller.close()
      },
    }, { highWaterMark: 0 })
    return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
  }
}

describe('M3: a cacheable stream\'s capture stops at the cache\'s size limit', () => {
  async function run(megabytes: number): Promise<{ received: number; peak: number; second: string | null }> {
    const h = harness({ models: { big: { endpoints: [{ endpointId: 'bigopenai' }], mode: 'openai' } }, fetch: bigOpenAIUpstream(megabytes) })
    const { key } = await h.createKey()
    const body = chatBody('big', 'same question', { stream: true, temperature: 0 })
    const res = await h.fetch('/v1/chat/completions', authed(key, body))
    expect(res.headers.get('x-podgate-cache')).toBe('MISS')
    const received = await drain(res.body!, () => undefined)
    await h.settle()
    const line = h.logs.map((l) => JSON.parse(l) as { message?: string; peak_buffered_chars?: number }).find((l) => l.message?.includes('over maxEntryBytes'))
    const again = await h.fetch('/v1/chat/completions', authed(key, body))
    await again.body?.cancel()
    return { received, peak: line?.peak_buffered_chars ?? Number.POSITIVE_INFINITY, second: again.headers.get('x-podgate-cache') }
  }

  it('upstream-M3-cache-capture: 5 MB and 50 MB answers hold the same bounded buffer, reach the caller whole and are not stored', async () => {
    const small = await run(5)
    const large = await run(50)
    expect(small.received).toBeGreaterThan(5_000_000)
    expect(large.received).toBeGreaterThan(50_000_000)
    // The default maxEntryBytes is 1 MiB; the buffer may pass it by one upstream event (100 kB) at most.
    for (const { peak } of [small, large]) expect(peak).toBeLessThanOrEqual(1024 * 1024 + 100_200)
    expect([small.second, large.second]).toEqual(['MISS', 'MISS'])
  })
})
