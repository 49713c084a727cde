/**
 * The native relay (src/streaming/openai-pipe.ts): when no byte of an OpenAI-route stream needs changing,
 * the caller gets exactly the upstream's bytes, piped by workerd; podgate still learns the usage, ends a
 * cut stream with its error event, times out, fails over before the first byte, and stops the upstream
 * when the caller leaves.
 *
 * Exact-byte cases use a scripted upstream (the harness's `fetch`); the timing and fault cases use the
 * real HTTP emulator from test/global-setup.ts.
 */
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import type { GatewayOptions } from '../src/index.ts'
import { createRunpodEmulator } from '../src/testing/index.ts'
import { bytesOf, cutRandom } from '../src/streaming/__fixtures__/vllm.ts'
import { pipeOpenAIStream, readTail, splitBody } from '../src/streaming/openai-pipe.ts'
import { streamControl } from '../src/streaming/stream-control.ts'
import type { RelayOutcome } from '../src/streaming/openai-relay.ts'
import { countedUsage } from '../src/streaming/openai-chunks.ts'
import type { Usage } from '../src/streaming/openai-chunks.ts'
import { env } from 'cloudflare:workers'
import { authed, chatBody, harness, readSSE, RUNPOD_KEY, scriptedUpstream as scripted, streamedText } from './helpers.ts'
import type { Upstream } from './helpers.ts'

/** vLLM's `--served-model-name` (aliases cannot hold a `/`, so a model whose alias is its served name has none). */
const SERVED = 'Served-Model-8B'
const MODELS: GatewayOptions['models'] = {
  // The alias is the served name: nothing to rename.
  [SERVED]: { endpoints: [{ endpointId: 'epsame' }], mode: 'openai' },
  renamed: { endpoints: [{ endpointId: 'eprenamed' }], mode: 'openai', servedModelName: SERVED },
  // The weights make the first pick (nearly) certain: the failing endpoint is tried first.
  twice: { endpoints: [{ endpointId: 'epone', weight: 1e6 }, { endpointId: 'eptwo', weight: 1e-6 }], mode: 'openai', resilience: { retries: { baseDelayMs: 0 } } },
}

const head = `"id":"chatcmpl-up","object":"chat.completion.chunk","created":1700000000,"model":"${SERVED}"`
const usage = { prompt_tokens: 12, completion_tokens: 9, total_tokens: 21 }
/**
 * Bytes the JavaScript relay would re-frame (a comment, `data:` without a space, CRLF line ends, an unknown
 * field): a caller that receives them unchanged got them through the native pipe.
 */
const UPSTREAM_SSE = [
  ': vLLM keep-alive\n\n',
  `data:{${head},"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\r\n\r\n`,
  `data: {${head},"choices":[{"index":0,"delta":{"content":"Hello ✓"},"logprobs":null,"finish_reason":null}],"future_field":[1]}\n\n`,
  `data: {${head},"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}\n\n`,
  `data: {${head},"choices":[],"usage":${JSON.stringify(usage)}}\n\n`,
  'data: [DONE]\n\n',
].join('')

const QUOTA_CLOCK = { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) }

async function setup(upstream: Upstream, overrides: Partial<GatewayOptions> = {}) {
  const h = harness({ models: MODELS, fetch: upstream.fetch, quota: QUOTA_CLOCK, ...overrides }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
  const { key } = await h.createKey({ name: 'pipe', quota: { tokensPerMinute: 100_000, strict: true } })
  const stream = (model: string, extra: Record<string, unknown> = {}) =>
    h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'Hi', { stream: true, max_tokens: 16, ...extra })))
  const minute = async () => {
    await h.settle()
    const report = (await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number; requests: number } } }
    return report.windows.minute
  }
  return { h, stream, minute }
}

const WITH_USAGE = { stream_options: { include_usage: true } }

/**
 * The test's KV, counting the cache's entry reads that have answered: a request that missed the cache
 * joins a call in flight right after its read, so a test waits for the reads (`looked(n)`), then one
 * task, rather than for a fixed time a loaded machine may not keep.
 */
function lookups() {
  let answered = 0
  const kv = env.PODGATE_KV
  const counted = new Proxy(kv, {
    get(target, name) {
      if (name === 'get') return (key: string, ...rest: unknown[]) => (kv.get as (...args: unknown[]) => Promise<unknown>)(key, ...rest).finally(() => void (key.startsWith('cache:') && answered++))
      const value = Reflect.get(target, name) as unknown
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
  const looked = async (n: number) => {
    await expect.poll(() => answered, { timeout: 10_000 }).toBeGreaterThanOrEqual(n)
    await new Promise((resolve) => setTimeout(resolve, 0))
  }
  return { kv: () => counted, looked }
}

/** An upstream holding its connection open meets the idle timeout, or the total one. */
const HELD_TIMEOUTS = [
  ['the idle timeout', { idleMs: 300, totalMs: 20_000 }],
  ['the total timeout', { idleMs: 20_000, totalMs: 600 }],
] as const

/** MODELS with these timeouts on the piped model and the renamed one (the rewriting relay). */
function withTimeouts(timeouts: { idleMs: number; totalMs: number }): typeof MODELS {
  const held = { resilience: { timeouts } }
  return { ...MODELS, [SERVED]: { ...MODELS[SERVED]!, ...held }, renamed: { ...MODELS.renamed!, ...held } }
}

describe('native relay: the caller gets the upstream bytes', () => {
  it('alias = served name and the caller asked for usage: byte for byte, usage settles the quota', async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 1_000_000 }), async (seed) => {
        const upstream = scripted(() => cutRandom(UPSTREAM_SSE, seed, 40))
        const { stream, minute } = await setup(upstream)
        const res = await stream(SERVED, WITH_USAGE)
        expect(res.status).toBe(200)
        expect(res.headers.get('content-type')).toContain('text/event-stream')
        expect(await res.text()).toBe(UPSTREAM_SSE)
        expect(await minute()).toMatchObject({ requests: 1, tokens: usage.total_tokens })
      }),
      { numRuns: 8 },
    )
  })

  it("streaming.usage 'always': a caller that did not ask gets the usage chunk, and the bytes unchanged", async () => {
    const { stream } = await setup(scripted(() => [UPSTREAM_SSE]), { streaming: { usage: 'always' } })
    expect(await (await stream(SERVED)).text()).toBe(UPSTREAM_SSE)
  })

  it('streaming.rewriteModel false: the served name stays, the bytes are unchanged', async () => {
    const { stream } = await setup(scripted(() => [UPSTREAM_SSE]), { streaming: { rewriteModel: false } })
    expect(await (await stream('renamed', WITH_USAGE)).text()).toBe(UPSTREAM_SSE)
  })

  it('by default a renamed model or a caller without include_usage goes through the rewriting relay', async () => {
    const { stream } = await setup(scripted(() => [UPSTREAM_SSE]))
    const renamed = await readSSE(await stream('renamed', WITH_USAGE))
    expect(renamed.slice(0, -1).map((e) => (e as { model: string }).model)).toEqual(['renamed', 'renamed', 'renamed', 'renamed'])
    const stripped = await readSSE(await stream(SERVED))
    expect(stripped.some((e) => typeof e === 'object' && e !== null && 'usage' in e)).toBe(false)
    expect(stripped.at(-1)).toBe('[DONE]')
  })
})

/** `promise`'s value, or a note that it did not settle within `ms`: a hang fails the assertion, not the test's timeout. */
function answered<T>(promise: Promise<T>, ms = 5_000): Promise<T | string> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const late = new Promise<string>((resolve) => (timer = setTimeout(() => resolve(`no answer within ${ms} ms`), ms)))
  return Promise.race([promise, late]).finally(() => clearTimeout(timer))
}

/** The upstream's bytes as a runtime-made stream: an IdentityTransformStream's readable side, written by JavaScript. */
function identityBody(text: string): ReadableStream<Uint8Array> {
  const { readable, writable } = new IdentityTransformStream()
  const writer = writable.getWriter()
  void writer.write(new TextEncoder().encode(text)).then(() => writer.close())
  return readable
}

describe('native relay: an answer a custom fetch built itself', () => {
  // Found while writing a test: workerd `tee`s a body it made in the isolate (a string, bytes, a Blob,
  // an IdentityTransformStream's readable) through its generic tee, whose branch refuses to be piped into
  // an IdentityTransformStream ("Inter-TransformStream ReadableStream.pipeTo() is not implemented"): the
  // error escapes as an uncaught one, the pipe neither ends nor fails, and the caller waited forever.
  const BODIES: Array<[string, () => BodyInit]> = [
    ['a string', () => UPSTREAM_SSE],
    ['a Uint8Array', () => new TextEncoder().encode(UPSTREAM_SSE)],
    ['a Blob', () => new Blob([UPSTREAM_SSE])],
    ["an IdentityTransformStream's readable side", () => identityBody(UPSTREAM_SSE)],
    // Controls: bodies that were piped before the fix.
    ["a JavaScript stream of type 'bytes'", () => new ReadableStream({ type: 'bytes', start: (controller: ReadableByteStreamController) => (controller.enqueue(new TextEncoder().encode(UPSTREAM_SSE)), controller.close()) })],
  ]

  it.each(BODIES)('%s: the caller gets the bytes unchanged and the usage settles the quota', async (_name, body) => {
    const built = (async () => new Response(body(), { headers: { 'content-type': 'text/event-stream' } })) as typeof fetch
    const { stream, minute } = await setup({ fetch: built, calls: [] })
    expect(await answered(stream(SERVED, WITH_USAGE).then((res) => res.text()))).toBe(UPSTREAM_SSE)
    expect(await minute()).toMatchObject({ requests: 1, tokens: usage.total_tokens })
  })

  it('a Responses stream (another dialect: always piped) from a string: the caller gets it whole, its usage settles the quota', async () => {
    const responses = [
      'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_1","object":"response","status":"in_progress","output":[],"usage":null},"sequence_number":0}\n\n',
      'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi","sequence_number":1}\n\n',
      'event: response.completed\ndata: {"type":"response.completed","response":{"id":"resp_1","object":"response","status":"completed","output":[],"usage":{"input_tokens":5,"output_tokens":7,"total_tokens":12}},"sequence_number":2}\n\n',
    ].join('')
    const built = (async () => new Response(responses, { headers: { 'content-type': 'text/event-stream' } })) as typeof fetch
    const { h } = await setup({ fetch: built, calls: [] })
    const { key } = await h.createKey({ name: 'responses', quota: { tokensPerMinute: 100_000 } })
    const res = h.fetch('/v1/responses', authed(key, JSON.stringify({ model: SERVED, input: 'Hi', stream: true })))
    expect(await answered(res.then((r) => r.text()))).toBe(responses)
    await h.settle()
    const report = (await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number } } }
    expect(report.windows.minute.tokens).toBe(12)
  })

  it("a fetch body a custom fetch wrapped in its own Response: the caller gets the bytes unchanged", async () => {
    const wrapped = (async (input: RequestInfo | URL, init?: RequestInit) => {
      const answer = await scripted(() => [UPSTREAM_SSE]).fetch(input, init)
      return new Response(answer.body, answer)
    }) as typeof fetch
    const { stream } = await setup({ fetch: wrapped, calls: [] })
    expect(await answered(stream(SERVED, WITH_USAGE).then((res) => res.text()))).toBe(UPSTREAM_SSE)
  })
})

describe('native relay: endings', () => {
  const cut = UPSTREAM_SSE.slice(0, UPSTREAM_SSE.indexOf('data: [DONE]'))

  it('a stream that closes before [DONE] gets podgate\'s error event after every upstream byte', async () => {
    const { stream } = await setup(scripted(() => cutRandom(cut, 7, 30)))
    const text = await (await stream(SERVED, WITH_USAGE)).text()
    expect(text.startsWith(cut)).toBe(true)
    const last = await readSSE(new Response(text.slice(cut.length)))
    expect(last).toEqual([{ error: expect.objectContaining({ code: 'upstream_error', message: 'The upstream stream ended before the model finished.' }) }])
  })

  it('a broken upstream connection ends with an error event, no [DONE]', async () => {
    const { stream } = await setup(scripted(() => [...cutRandom(cut, 3, 30).slice(0, 4), new Error('connection reset')]))
    const text = await (await stream(SERVED, WITH_USAGE)).text()
    // The fragment of the event the break cut comes first (a client cannot parse it), then podgate's event.
    expect(text.split('\n\n').at(-2)).toMatch(/^data: \{"error":\{"message":"The upstream connection broke before the model finished\./)
    expect(text).not.toContain('[DONE]')
  })

  it('a connection that breaks after the usage chunk still settles the quota from it, and ends with an error event', async () => {
    const beforeDone = UPSTREAM_SSE.slice(0, UPSTREAM_SSE.indexOf('data: [DONE]'))
    const { stream, minute } = await setup(scripted(() => [...cutRandom(beforeDone, 5, 60), new Error('connection reset')]))
    const text = await (await stream(SERVED, WITH_USAGE)).text()
    expect(text.startsWith(beforeDone)).toBe(true)
    expect(text).toMatch(/data: \{"error":\{"message":"The upstream connection broke before the model finished\./)
    expect(await minute()).toMatchObject({ requests: 1, tokens: usage.total_tokens })
  })

  it('a connection that breaks after [DONE] is a whole answer: nothing is written after [DONE]', async () => {
    const { stream, minute } = await setup(scripted(() => [...cutRandom(UPSTREAM_SSE, 9, 60), new Error('connection reset')]))
    expect(await (await stream(SERVED, WITH_USAGE)).text()).toBe(UPSTREAM_SSE)
    expect(await minute()).toMatchObject({ requests: 1, tokens: usage.total_tokens })
  })

  it.each(HELD_TIMEOUTS)('an upstream that keeps its connection open after [DONE] past %s: a whole answer, nothing written after [DONE]', async (_name, timeouts) => {
    const models = withTimeouts(timeouts)
    const { stream, minute } = await setup(scripted(() => [UPSTREAM_SSE], { holdMs: 5_000 }), { models })
    // The pipe, and the rewriting relay as a control. The pipe ends at the timeout, not when the upstream lets go.
    const started = Date.now()
    expect(await (await stream(SERVED, WITH_USAGE)).text()).toBe(UPSTREAM_SSE)
    expect(Date.now() - started).toBeLessThan(3_000)
    expect((await readSSE(await stream('renamed', WITH_USAGE))).at(-1)).toBe('[DONE]')
    expect(await minute()).toMatchObject({ requests: 2, tokens: 2 * usage.total_tokens })
  })

  // Found in the held-connection review: the pipe took an answer for whole only when the last bytes read
  // were `[DONE]`, so a proxy's keep-alive comment (or blank line) after it made the timeout cut a whole
  // answer: podgate's error event after [DONE], and the stream settled as failed.
  it.each(HELD_TIMEOUTS)('an upstream that sends keep-alives after [DONE] and holds its connection past %s: a whole answer, nothing of podgate\'s after it', async (_name, timeouts) => {
    const after = ': keep-alive\n\n\n'
    const { stream, minute } = await setup(scripted(() => [UPSTREAM_SSE, ': keep-alive\n\n', '\n'], { holdMs: 5_000 }), { models: withTimeouts(timeouts) })
    expect(await (await stream(SERVED, WITH_USAGE)).text()).toBe(UPSTREAM_SSE + after)
    expect((await readSSE(await stream('renamed', WITH_USAGE))).at(-1)).toBe('[DONE]')
    expect(await minute()).toMatchObject({ requests: 2, tokens: 2 * usage.total_tokens })
  })

  it('a JavaScript byte stream from a custom fetch that holds its connection after [DONE] and ignores the abort: the timeout still settles it as whole', async () => {
    // docs/passthrough.md: such a body is piped. Here it sends the whole answer, then neither closes nor errors.
    const held = (async () => {
      const body = new ReadableStream({ type: 'bytes', start: (controller: ReadableByteStreamController) => controller.enqueue(new TextEncoder().encode(UPSTREAM_SSE)) })
      return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
    }) as typeof fetch
    const models = { [SERVED]: { ...MODELS[SERVED]!, resilience: { timeouts: { idleMs: 300, totalMs: 600 } } } }
    const { h } = await setup({ fetch: held, calls: [] }, { models })
    const { key } = await h.createKey({ name: 'held', quota: { maxConcurrentStreams: 1, tokensPerMinute: 100_000, strict: true } })
    const open = () => h.fetch('/v1/chat/completions', authed(key, chatBody(SERVED, 'Hi', { stream: true, max_tokens: 16, ...WITH_USAGE })))
    const first = await open()
    const reader = first.body!.getReader()
    let text = ''
    while (!text.includes('data: [DONE]')) text += new TextDecoder().decode((await reader.read()).value)
    expect(text).toBe(UPSTREAM_SSE)
    // Past the idle (300 ms) and total (600 ms) timeouts: the stream settled as whole, from its usage
    // chunk, and its slot is free (workerd keeps this body's pipe until its read ends: the caller leaves).
    await new Promise((resolve) => setTimeout(resolve, 1_200))
    const usageNow = (await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number } } }
    expect(usageNow.windows.minute.tokens).toBe(usage.total_tokens)
    const second = await open()
    expect(second.status).toBe(200)
    await second.body?.cancel()
    await reader.cancel()
  })

  // The relay's twin is in quota-gateway.test.ts. A custom fetch that ignores its signal can answer after
  // the caller left, or go on after the caller stopped reading: such an upstream generates on until its
  // body is cancelled.
  it.each([
    ['before the custom fetch answered', true],
    ['mid-answer', false],
  ])('a piped stream from a custom fetch that ignores the abort, left by its caller %s, cancels the upstream body and settles', async (_when, before) => {
    const upstream = { cancelled: false, pulls: 0, called: () => {} }
    const abort = new AbortController()
    const event = `data: {${head},"choices":[{"index":0,"delta":{"content":"t"},"logprobs":null,"finish_reason":null}]}\n\n`
    const slow = (async () => {
      upstream.called()
      if (before) await new Promise((resolve) => abort.signal.addEventListener('abort', resolve))
      const body = new ReadableStream({
        type: 'bytes',
        async pull(controller: ReadableByteStreamController) {
          await new Promise((resolve) => setTimeout(resolve, 10))
          if (upstream.pulls++ >= 1_000) controller.close()
          else controller.enqueue(new TextEncoder().encode(event))
        },
        cancel() {
          upstream.cancelled = true
        },
      })
      return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
    }) as typeof fetch
    const { h } = await setup({ fetch: slow, calls: [] })
    const { key } = await h.createKey({ name: 'left', quota: { maxConcurrentStreams: 1, tokensPerMinute: 100_000, strict: true } })
    const upstreamCalled = new Promise<void>((resolve) => (upstream.called = resolve))
    const res = h.fetch('/v1/chat/completions', { ...authed(key, chatBody(SERVED, 'Hi', { stream: true, max_tokens: 2_000, ...WITH_USAGE })), signal: abort.signal })
    if (before) {
      await upstreamCalled
      abort.abort()
      await res.catch(() => undefined)
    } else {
      // The caller reads two chunks and leaves; the request's signal stays as it was.
      const reader = (await res).body!.getReader()
      await reader.read()
      await reader.read()
      await reader.cancel()
    }
    await expect.poll(() => upstream.cancelled, { timeout: 3_000 }).toBe(true)
    expect(upstream.pulls).toBeLessThan(200)
    await Promise.race([h.settle(), new Promise((resolve) => setTimeout(resolve, 2_000))])
    const report = (await (await h.fetch('/v1/usage', authed(key))).json()) as { streams: number; windows: { minute: { tokens: number } } }
    expect(report.streams).toBe(0)
    // What reached the upstream is charged (the prompt, and the few events relayed), not the 2,000 tokens reserved.
    expect(report.windows.minute.tokens).toBeLessThan(before ? 100 : 300)
  })

  // A coalesced leader whose caller left before the answer runs on for its twin (the shared signal is not
  // aborted then), and its piped answer goes to no one. When the twin leaves too, the shared signal
  // aborts after the pipe exists: the pipe must hear it (as the relay does), or nothing cancels the body.
  it('a coalesced piped leader whose caller left before a custom fetch that ignores the abort answered, and whose twin left after, cancels the upstream body and settles', async () => {
    let cancelled = false
    let pulls = 0
    let calls = 0
    let release = () => {}
    const released = new Promise<void>((resolve) => (release = resolve))
    const event = `data: {${head},"choices":[{"index":0,"delta":{"content":"t"},"logprobs":null,"finish_reason":null}]}\n\n`
    const slow = (async () => {
      calls++
      await released
      const body = new ReadableStream({
        type: 'bytes',
        async pull(controller: ReadableByteStreamController) {
          await new Promise((resolve) => setTimeout(resolve, 10))
          if (pulls++ >= 1_000) controller.close()
          else controller.enqueue(new TextEncoder().encode(event))
        },
        cancel() {
          cancelled = true
        },
      })
      return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
    }) as typeof fetch
    const { kv, looked } = lookups()
    const { h } = await setup({ fetch: slow, calls: [] }, { kv })
    const { key } = await h.createKey({ name: 'left', quota: { maxConcurrentStreams: 2, tokensPerMinute: 100_000, strict: true } })
    // temperature 0: cacheable, so the twin joins the first call.
    const body = chatBody(SERVED, 'Hi', { stream: true, max_tokens: 2_000, temperature: 0, ...WITH_USAGE })
    const leaderLeaves = new AbortController()
    const twinLeaves = new AbortController()
    const leader = h.fetch('/v1/chat/completions', { ...authed(key, body), signal: leaderLeaves.signal })
    await expect.poll(() => calls).toBe(1)
    const twin = h.fetch('/v1/chat/completions', { ...authed(key, body), signal: twinLeaves.signal })
    // The twin missed the cache after the leader did: it waits on the leader's call now.
    await looked(2)
    leaderLeaves.abort()
    release()
    const twinRes = await twin
    expect(twinRes.headers.get('x-podgate-cache')).toBe('COALESCED')
    // The leader's answer is never read nor cancelled: its caller is gone.
    expect((await leader).status).toBe(200)
    await new Promise((resolve) => setTimeout(resolve, 100))
    twinLeaves.abort()
    await twinRes.body!.cancel().catch(() => undefined)
    await expect.poll(() => cancelled, { timeout: 3_000 }).toBe(true)
    expect(pulls).toBeLessThan(200)
    expect(calls).toBe(1)
    await Promise.race([h.settle(), new Promise((resolve) => setTimeout(resolve, 2_000))])
    const report = (await (await h.fetch('/v1/usage', authed(key))).json()) as { streams: number; windows: { minute: { tokens: number } } }
    expect(report.streams).toBe(0)
    expect(report.windows.minute.tokens).toBeLessThan(300)
  })

  it("vLLM's own error event reaches the caller as vLLM wrote it, and the stream does not count as whole", async () => {
    const vllmError = 'data: {"error":{"message":"CUDA out of memory","type":"InternalServerError","param":null,"code":500}}\n\n'
    const sent = UPSTREAM_SSE.split('\n\n').slice(0, 3).join('\n\n') + '\n\n' + vllmError + 'data: [DONE]\n\n'
    const { stream } = await setup(scripted(() => [sent]))
    expect(await (await stream(SERVED, WITH_USAGE)).text()).toBe(sent)
    const outcome = await pipeOutcome([sent])
    expect(outcome.end).toMatchObject({ ok: false, started: true, error: { message: 'The model worker failed: CUDA out of memory' } })
  })

  // Found in the accounting review: any event, a vLLM error included, counted as output, so a stream
  // that failed before generating anything kept its whole reservation (prompt + max_tokens).
  it('a stream whose first event is a vLLM error is charged its prompt, not max_tokens, piped or rewritten', async () => {
    const vllmError = 'data: {"error":{"message":"CUDA out of memory","type":"InternalServerError","param":null,"code":500}}\n\n'
    const { stream, minute } = await setup(scripted(() => [vllmError, 'data: [DONE]\n\n']))
    for (const model of [SERVED, 'renamed']) {
      const text = await (await stream(model, { ...WITH_USAGE, max_tokens: 1_000 })).text()
      expect(text).toContain('CUDA out of memory')
    }
    // Two prompts of 'Hi': about a token each, reached the upstream.
    expect(await minute()).toMatchObject({ requests: 2, tokens: 2 })
  })

  it.each(HELD_TIMEOUTS)('a stream cut by %s after its usage chunk, before [DONE], is charged that usage, piped or rewritten', async (_name, timeouts) => {
    const models = withTimeouts(timeouts)
    const beforeDone = UPSTREAM_SSE.slice(0, UPSTREAM_SSE.indexOf('data: [DONE]'))
    const { stream, minute } = await setup(scripted(() => [beforeDone], { holdMs: 1_500 }), { models })
    for (const model of [SERVED, 'renamed']) {
      const text = await (await stream(model, { ...WITH_USAGE, max_tokens: 1_000 })).text()
      expect(text).toContain('upstream_timeout')
    }
    expect(await minute()).toMatchObject({ requests: 2, tokens: 2 * usage.total_tokens })
  })

  it('an endpoint whose stream breaks before the first byte is failed over', async () => {
    const upstream = scripted((endpoint) => (endpoint === 'epone' ? [new Error('reset before any byte')] : [UPSTREAM_SSE]))
    const { stream } = await setup(upstream)
    expect(await (await stream('twice', WITH_USAGE)).text()).toBe(UPSTREAM_SSE)
    expect(upstream.calls).toEqual(['epone', 'eptwo'])
  })
})

describe('native relay over a real HTTP upstream (the emulator)', () => {
  const live = (extra: Partial<GatewayOptions> = {}) =>
    harness({
      ...extra,
      models: {
        'chat-openai': { endpoints: [{ endpointId: 'vllmopenai' }], mode: 'openai' },
        'chat-short': { endpoints: [{ endpointId: 'vllmopenai' }], mode: 'openai', servedModelName: 'chat-short', resilience: { timeouts: { totalMs: 1_500 } } },
        'chat-idle': { endpoints: [{ endpointId: 'vllmopenai' }], mode: 'openai', servedModelName: 'chat-idle', resilience: { timeouts: { idleMs: 300, totalMs: 20_000 } } },
      },
      runpod: { apiKey: RUNPOD_KEY, baseUrl: env.RUNPOD_BASE_URL },
      fetch: undefined,
      keyCacheTtlMs: 0,
    })

  /** The emulator's OpenAI-route calls so far, oldest first (`streamCancelled`: the caller of that call left). */
  const openaiCalls = async () => {
    const calls = (await (await fetch(`${env.RUNPOD_BASE_URL.replace(/\/v2$/, '')}/__emulator/calls`)).json()) as Array<{ op: string; streamCancelled?: true }>
    return calls.filter((call) => call.op === 'openai')
  }

  /** A first caller and an identical second one (its twin) streaming `prompt`, and the emulator's call count before them. */
  const leaderAndTwin = async (prompt: string, maxTokens: number, extra: Partial<GatewayOptions> = {}, quota?: Record<string, unknown>) => {
    const h = live(extra)
    const { key } = await h.createKey({ name: 'live', ...(quota ? { quota } : {}) })
    const before = (await openaiCalls()).length
    const body = chatBody('chat-openai', prompt, { stream: true, max_tokens: maxTokens, temperature: 0, ...WITH_USAGE })
    const leader = await h.fetch('/v1/chat/completions', authed(key, body))
    const twin = await h.fetch('/v1/chat/completions', authed(key, body))
    return { h, key, body, before, leader, twin }
  }

  it('the same answer as the rewriting relay, with the usage the caller asked for', async () => {
    const h = live()
    const { key } = await h.createKey({ name: 'live' })
    const prompt = 'Tell me a story [[emulator:tokens=40]]'
    const piped = await readSSE(await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', prompt, { stream: true, max_tokens: 64, seed: 1, ...WITH_USAGE }))))
    const relayed = await readSSE(await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', prompt, { stream: true, max_tokens: 64, seed: 1 }))))
    const isUsage = (e: unknown) => typeof e === 'object' && e !== null && (e as { choices?: unknown[] }).choices?.length === 0
    const strip = (events: unknown[]) => events.filter((e) => !isUsage(e)).map((e) => (typeof e === 'object' && e !== null ? { ...e, id: '', created: 0 } : e))
    expect(strip(piped)).toEqual(strip(relayed))
    expect(piped.at(-2)).toMatchObject({ choices: [], usage: { completion_tokens: 40 } })
    expect(piped.at(-1)).toBe('[DONE]')
  })

  it('a stall mid-answer ends at the total timeout with its error event after the bytes relayed', async () => {
    const h = live()
    const { key } = await h.createKey({ name: 'live' })
    const events = await readSSE(await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-short', 'Hold [[emulator:fault=stall,after=3]]', { stream: true, max_tokens: 64, ...WITH_USAGE }))))
    expect(events.length).toBeGreaterThan(3)
    expect(events.at(-1)).toMatchObject({ error: { code: 'upstream_timeout', message: 'The answer took longer than podgate allows.' } })
    expect(events).not.toContain('[DONE]')
  })

  it('a stall mid-answer ends at the idle timeout, well before the total one, and stops the upstream', async () => {
    const h = live()
    const { key } = await h.createKey({ name: 'live' })
    const started = Date.now()
    const events = await readSSE(await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-idle', 'Hold [[emulator:fault=stall,after=3]]', { stream: true, max_tokens: 64, ...WITH_USAGE }))))
    // The idle clock runs from the copy's last read that brought bytes: at most a tick (≤ 1 s) late.
    expect(Date.now() - started).toBeLessThan(5_000)
    expect(events.length).toBeGreaterThan(3)
    expect(events.at(-1)).toMatchObject({ error: { code: 'upstream_timeout', message: 'The model stopped sending for too long.' } })
    expect(events).not.toContain('[DONE]')
    await expect.poll(async () => (await openaiCalls()).at(-1)?.streamCancelled, { timeout: 3_000 }).toBe(true)
  })

  it('a slow model keeps its stream past the idle timeout as long as each token comes within it', async () => {
    const h = live()
    const { key } = await h.createKey({ name: 'live' })
    // Tokens 200 ms apart, under the 300 ms idle timeout, for 2 s in all: the copy's ticks grow to 1 s meanwhile.
    const events = await readSSE(await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-idle', 'Slowly [[emulator:tokens=10,delay=200]]', { stream: true, max_tokens: 16, ...WITH_USAGE }))))
    expect(events.at(-1)).toBe('[DONE]')
    expect(streamedText(events).length).toBeGreaterThan(0)
  })

  it('tokens reach the caller as the model writes them, not at the end', async () => {
    const h = live()
    const { key } = await h.createKey({ name: 'live' })
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'Slowly [[emulator:tokens=5,delay=150]]', { stream: true, max_tokens: 16, ...WITH_USAGE })))
    const reader = res.body!.getReader()
    let reads = 0
    for (;;) {
      const next = await reader.read()
      if (next.done) break
      reads++
    }
    // One read per token step (150 ms apart) and the ending; a relay that held the body back would give 1 or 2.
    expect(reads).toBeGreaterThanOrEqual(5)
  })

  it('a caller who leaves mid-answer stops the upstream stream', async () => {
    const h = live()
    const { key } = await h.createKey({ name: 'live' })
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'Long [[emulator:tokens=400,delay=20]]', { stream: true, max_tokens: 500, ...WITH_USAGE })))
    const reader = res.body!.getReader()
    expect((await reader.read()).done).toBe(false)
    await reader.cancel()
    await expect.poll(async () => (await openaiCalls()).at(-1)?.streamCancelled, { timeout: 3_000 }).toBe(true)
  })

  it('a twin of a piped answer is answered at once, and gets the same call\'s answer when the first caller leaves mid-answer', async () => {
    const { h, key, body, before, leader, twin } = await leaderAndTwin('Long [[emulator:tokens=60,delay=15]]', 100, { logCalls: true }, { tokensPerMinute: 1_000_000, strict: true })
    // Answered at once: the first caller's first bytes are out.
    expect(twin.headers.get('x-podgate-cache')).toBe('COALESCED')
    const reader = leader.body!.getReader()
    expect((await reader.read()).done).toBe(false)
    await reader.cancel()
    const events = await readSSE(twin)
    expect(events.at(-1)).toBe('[DONE]')
    expect(events.at(-2)).toMatchObject({ choices: [], usage: { completion_tokens: 60 } })
    // One upstream call, read to its end for the twin: the first caller's leaving did not stop it.
    const calls = (await openaiCalls()).slice(before)
    expect(calls.map((call) => call.streamCancelled ?? false)).toEqual([false])
    // The call lines (logCalls): the first caller's key is charged the whole call, which ran on for the
    // twin (as when the relay reads it); the twin's answer was that call's, and cost it no tokens.
    await h.settle()
    const lines = h.logs.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.message === 'call')
    const led = lines.find((line) => line.request_id === leader.headers.get('x-request-id'))
    expect(led).toMatchObject({ status: 200, cache: 'MISS', completion_tokens: 60 })
    expect(lines.find((line) => line.request_id === twin.headers.get('x-request-id'))).toMatchObject({ status: 200, cache: 'COALESCED' })
    // Both callers use one key: it is charged the one call, not two.
    const usage = (await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number } } }
    expect(usage.windows.minute.tokens).toBe((led!.prompt_tokens as number) + 60)
    // The answer was whole: it was stored, and a third caller gets it from the cache.
    const third = await h.fetch('/v1/chat/completions', authed(key, body))
    expect(third.headers.get('x-podgate-cache')).toBe('HIT')
    expect((await readSSE(third)).at(-1)).toBe('[DONE]')
  })

  it('a call that runs on for a twin after its first caller left stops once the twin leaves too', async () => {
    const { before, leader, twin } = await leaderAndTwin('Long [[emulator:tokens=400,delay=20]]', 500)
    expect(twin.headers.get('x-podgate-cache')).toBe('COALESCED')
    const reader = leader.body!.getReader()
    expect((await reader.read()).done).toBe(false)
    await reader.cancel()
    const streams = async () => (await openaiCalls()).slice(before).map((call) => call.streamCancelled ?? false)
    // Generating for the twin (400 tokens take 8 s)...
    await new Promise((resolve) => setTimeout(resolve, 300))
    expect(await streams()).toEqual([false])
    // ...until no one is left to read it. The first caller left by its body alone (no request signal here).
    await twin.body!.cancel()
    await expect.poll(streams, { timeout: 3_000 }).toEqual([true])
  })

  // Found in review of the change above (a call running on for a twin after its first caller left mid-answer).
  describe('a call that runs on for a twin after its first caller left', () => {
    const leave = async (res: Response) => {
      const reader = res.body!.getReader()
      expect((await reader.read()).done).toBe(false)
      await reader.cancel()
    }
    const twins = async (model: string, prompt: string, extra: Partial<GatewayOptions> = {}, quota?: Record<string, unknown>) => {
      const h = live(extra)
      const { key } = await h.createKey({ name: 'live', ...(quota ? { quota } : {}) })
      const before = (await openaiCalls()).length
      const body = chatBody(model, prompt, { stream: true, max_tokens: 500, temperature: 0, ...WITH_USAGE })
      const leader = await h.fetch('/v1/chat/completions', authed(key, body))
      const twin = await h.fetch('/v1/chat/completions', authed(key, body))
      expect(twin.headers.get('x-podgate-cache')).toBe('COALESCED')
      return { h, key, before, leader, twin }
    }

    it('is still held to the model\'s total timeout: the twin gets its error at that time, from the one call', async () => {
      const { before, leader, twin } = await twins('chat-short', 'Long [[emulator:tokens=400,delay=20]]')
      const started = Date.now()
      await leave(leader)
      const events = await readSSE(twin)
      expect(events.at(-1)).toMatchObject({ error: { code: 'upstream_timeout' } })
      // totalMs is 1.5 s; the answer would take 8 s.
      expect(Date.now() - started).toBeLessThan(4_000)
      expect((await openaiCalls()).length - before).toBe(1)
    }, 30_000)

    it('stops once its answer turns out too large to share and no twin waits on it any more', async () => {
      const { before, leader, twin } = await twins('chat-openai', 'Long [[emulator:tokens=400,delay=20]]', { cache: { maxEntryBytes: 8_192 } })
      await leave(leader)
      // The twin asks on its own once the answer is too large to share: a second call.
      const reading = readSSE(twin)
      await expect.poll(async () => (await openaiCalls()).length - before, { timeout: 8_000 }).toBe(2)
      await expect.poll(async () => (await openaiCalls())[before]?.streamCancelled ?? false, { timeout: 3_000 }).toBe(true)
      expect((await reading).at(-1)).toBe('[DONE]')
    }, 30_000)

    it('frees its first caller\'s stream slot when only its body told it left (heard at the pipe\'s next write)', async () => {
      const { h, key, leader, twin } = await twins('chat-openai', 'Long [[emulator:tokens=400,delay=20]]', {}, { maxConcurrentStreams: 2 })
      await leave(leader)
      // The first caller's slot and the twin's were taken; the first is free again (the harness has no request signal).
      await new Promise((resolve) => setTimeout(resolve, 300))
      const other = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'Other [[emulator:tokens=3]]', { stream: true, max_tokens: 8, ...WITH_USAGE })))
      expect(other.status).toBe(200)
      await other.body?.cancel()
      await twin.body!.cancel()
    }, 30_000)

    // Found in a second review: a model slower than the joiners' silence window made them ask
    // again while the call still ran. They now hear the first caller's request beat while it runs.
    it('is not taken for ended while the model is slow: its twin makes no call of its own', async () => {
      const h = live()
      const { key } = await h.createKey({ name: 'live' })
      const before = (await openaiCalls()).length
      const body = chatBody('chat-openai', 'Slow [[emulator:tokens=3,delay=7000]]', { stream: true, max_tokens: 10, temperature: 0, ...WITH_USAGE })
      const gone = new AbortController()
      const leader = await h.fetch('/v1/chat/completions', { ...authed(key, body), signal: gone.signal })
      const twin = await h.fetch('/v1/chat/completions', authed(key, body))
      expect(twin.headers.get('x-podgate-cache')).toBe('COALESCED')
      expect(leader.status).toBe(200)
      // The twin waits, reading (its heartbeats), as a client does.
      const reader = twin.body!.getReader()
      const reading = (async () => {
        while (!(await reader.read().catch(() => ({ done: true }))).done);
      })()
      gone.abort()
      // Past the 5 s window, before the model's next token (7 s after its first).
      await new Promise((resolve) => setTimeout(resolve, 6_500))
      const calls = (await openaiCalls()).slice(before)
      await reader.cancel()
      await reading
      expect(calls.map((call) => call.streamCancelled ?? false)).toEqual([false])
    }, 30_000)

    it('reads on at once for the twin when its first caller left by its request\'s signal alone, its body never cancelled', async () => {
      const h = live()
      const { key } = await h.createKey({ name: 'live' })
      const body = chatBody('chat-openai', 'Long [[emulator:tokens=60,delay=15]]', { stream: true, max_tokens: 100, temperature: 0, ...WITH_USAGE })
      const gone = new AbortController()
      const leader = await h.fetch('/v1/chat/completions', { ...authed(key, body), signal: gone.signal })
      const twin = await h.fetch('/v1/chat/completions', authed(key, body))
      expect(twin.headers.get('x-podgate-cache')).toBe('COALESCED')
      expect((await leader.body!.getReader().read()).done).toBe(false)
      const started = Date.now()
      gone.abort()
      const events = await readSSE(twin)
      expect(events.at(-1)).toBe('[DONE]')
      // 60 tokens 15 ms apart, not one chunk a tick held back by a body no one reads.
      expect(Date.now() - started).toBeLessThan(5_000)
    }, 60_000)
  })

  // Found in review: the first caller left before the upstream answered while its twin waited, so the call
  // ran on for the twin and its piped answer went to no one. Its unread body held the pipe's copy to a
  // chunk a tick, and the twin, waiting for the whole answer, got it at about an event a second.
  it('a twin of a piped answer whose first caller left before the upstream answered gets that answer at once', async () => {
    const leaderLeft = new AbortController()
    let calls = 0
    const delayed = harness({
      models: { 'chat-openai': { endpoints: [{ endpointId: 'vllmopenai' }], mode: 'openai' } },
      runpod: { apiKey: RUNPOD_KEY, baseUrl: env.RUNPOD_BASE_URL },
      keyCacheTtlMs: 0,
      // The first call reaches the upstream only once its caller left: the answer comes after.
      fetch: async (input, init) => {
        if (calls++ === 0) await new Promise((resolve) => leaderLeft.signal.addEventListener('abort', resolve))
        return fetch(input, init)
      },
    })
    const { key } = await delayed.createKey({ name: 'live' })
    const body = chatBody('chat-openai', 'Long [[emulator:tokens=30,delay=15]]', { stream: true, max_tokens: 64, temperature: 0, ...WITH_USAGE })
    const leader = delayed.fetch('/v1/chat/completions', { ...authed(key, body), signal: leaderLeft.signal })
    await expect.poll(() => calls).toBe(1)
    // The twin joins the first call (it answers once that call's first bytes are out), then the first caller leaves.
    const joined = delayed.fetch('/v1/chat/completions', authed(key, body))
    await new Promise((resolve) => setTimeout(resolve, 100))
    leaderLeft.abort()
    await leader.catch(() => undefined)
    const started = Date.now()
    const twin = await joined
    expect(twin.headers.get('x-podgate-cache')).toBe('COALESCED')
    const events = await readSSE(twin)
    expect(events.at(-1)).toBe('[DONE]')
    expect(events.at(-2)).toMatchObject({ choices: [], usage: { completion_tokens: 30 } })
    // 30 tokens 15 ms apart: well under a second, not one a second; and from the first call, the one upstream call.
    expect(Date.now() - started).toBeLessThan(5_000)
    expect(calls).toBe(1)
  }, 20_000)

  it('a twin of a piped answer whose upstream breaks gets the same error, from one upstream call', async () => {
    const { before, leader, twin } = await leaderAndTwin('Break [[emulator:fault=mid_stream,after=20,delay=20]]', 64)
    expect(twin.headers.get('x-podgate-cache')).toBe('COALESCED')
    const [first, second] = await Promise.all([readSSE(leader), readSSE(twin)])
    expect(first.at(-1)).toMatchObject({ error: { code: 'upstream_error' } })
    expect(second.at(-1)).toMatchObject({ error: { code: 'upstream_error' } })
    expect((await openaiCalls()).length - before).toBe(1)
  })

  it('a twin that leaves before the first caller does makes no upstream call of its own', async () => {
    const { before, leader, twin } = await leaderAndTwin('Long [[emulator:tokens=200,delay=10]]', 300)
    // The twin is reading (waiting on the first call) when it leaves.
    const twinReader = twin.body!.getReader()
    const waiting = twinReader.read()
    await new Promise((resolve) => setTimeout(resolve, 50))
    await twinReader.cancel()
    await waiting
    const reader = leader.body!.getReader()
    expect((await reader.read()).done).toBe(false)
    await reader.cancel()
    await expect.poll(async () => (await openaiCalls()).at(-1)?.streamCancelled, { timeout: 3_000 }).toBe(true)
    await new Promise((resolve) => setTimeout(resolve, 1_500))
    expect((await openaiCalls()).length - before).toBe(1)
  })

  // Found in the fairness review: vLLM sends usage only at the end, so a stream cut before it kept its
  // whole reservation (prompt + max_tokens) however few tokens it produced.
  it.each([
    ['breaks', 'fault=mid_stream'],
    ['stalls past the idle timeout', 'fault=stall'],
  ])('a stream that %s after N tokens is charged about its prompt + N, not max_tokens, piped or rewritten', async (_name, fault) => {
    const h = harness({
      models: { chat: { endpoints: [{ endpointId: 'vllmopenai' }], mode: 'openai', resilience: { timeouts: { idleMs: 300, totalMs: 20_000 } } } },
      runpod: { apiKey: RUNPOD_KEY, baseUrl: env.RUNPOD_BASE_URL },
      fetch: undefined,
      quota: QUOTA_CLOCK,
    })
    const { key } = await h.createKey({ name: 'cut', quota: { tokensPerMinute: 1_000_000, strict: true } })
    const minuteTokens = async () => {
      await h.settle()
      return ((await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number } } }).windows.minute.tokens
    }
    // 400 events of ~170 bytes: the piped copy's tail (16 to 32 KiB) holds only the last of them.
    const prompt = `Go [[emulator:${fault},after=400,tokens=1000,delay=0]]`
    const promptTokens = Math.ceil(prompt.length / 4)
    let charged = 0
    // With include_usage the bytes are piped natively; without it the relay strips the usage chunk.
    for (const extra of [WITH_USAGE, {}]) {
      const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat', prompt, { stream: true, max_tokens: 4_000, ...extra })))
      const events = await readSSE(res)
      expect(events.at(-1)).toMatchObject({ error: {} })
      const tokens = (await minuteTokens()) - charged
      charged += tokens
      // Each event is about a token: 400 of them (and the role chunk), within a few percent.
      expect(tokens).toBeGreaterThan(promptTokens + 380)
      expect(tokens).toBeLessThan(promptTokens + 420)
    }
  })

  it('a worker failure mid-stream ends with podgate\'s error event, no [DONE]', async () => {
    const h = live()
    const { key } = await h.createKey({ name: 'live' })
    const events = await readSSE(await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'Go [[emulator:fault=mid_stream,after=5]]', { stream: true, max_tokens: 64, ...WITH_USAGE }))))
    expect(events.length).toBeGreaterThanOrEqual(2)
    expect(events.at(-1)).toMatchObject({ error: { code: 'upstream_error' } })
    expect(events).not.toContain('[DONE]')
  })
})

/**
 * An upstream whose stream is `pieces`, as `scripted`'s, that holds the pieces from `holdFrom` on until
 * `release()`: a second caller can arrive while the first one's answer is in flight.
 */
function held(pieces: string[], holdFrom: number) {
  const upstream = scripted(() => [...pieces])
  let release!: () => void
  const gate = new Promise<void>((resolve) => (release = resolve))
  const fetchHeld = (async (input: RequestInfo | URL, init?: RequestInit) => {
    const response = await upstream.fetch(input, init)
    const reader = response.body!.getReader()
    let sent = 0
    const body = new ReadableStream({
      type: 'bytes',
      async pull(controller) {
        if (sent++ === holdFrom) await gate
        const next = await reader.read()
        if (next.done) controller.close()
        else controller.enqueue(next.value)
      },
    })
    return new Response(body, response)
  }) as typeof fetch
  return { upstream: { fetch: fetchHeld, calls: upstream.calls }, release }
}

describe('native relay and the answer cache', () => {
  // temperature 0: deterministic, so the cache looks it up and stores it.
  const cacheable = { temperature: 0, ...WITH_USAGE }
  const events = (text: string) => readSSE(new Response(text))
  const shape = (list: unknown[]) => list.map((e) => (typeof e === 'object' && e !== null ? { ...e, id: 'x', created: 0 } : e))

  it('a cacheable stream is piped byte for byte, stored from the copy, and replayed with the same events', async () => {
    const upstream = scripted(() => cutRandom(UPSTREAM_SSE, 5, 30))
    const { h, stream } = await setup(upstream)
    const live = await stream(SERVED, cacheable)
    expect(live.headers.get('x-podgate-cache')).toBe('MISS')
    const text = await live.text()
    // Byte for byte: the comment, the CRLF and `data:` without a space would not survive the relay.
    expect(text).toBe(UPSTREAM_SSE)
    await h.settle()
    const hit = await stream(SERVED, cacheable)
    expect(hit.headers.get('x-podgate-cache')).toBe('HIT')
    const replayed = await readSSE(hit)
    // The replay is podgate's rendering of the answer: the same events, without the upstream's comment.
    expect(shape(replayed)).toEqual(shape(await events(text)))
    expect(upstream.calls).toHaveLength(1)
  })

  it('a piped stream with SSE lines the parser only warns about (an unknown field, a bad retry) is still stored', async () => {
    // Legal SSE that every other reader of the stream ignores: the recording must not give up on it.
    const noisy = `x-proxy: hop\nretry: soon\n\n${UPSTREAM_SSE}`
    const upstream = scripted(() => [noisy])
    const { h, stream } = await setup(upstream)
    const live = await stream(SERVED, cacheable)
    expect(await live.text()).toBe(noisy)
    await h.settle()
    const hit = await stream(SERVED, cacheable)
    expect(hit.headers.get('x-podgate-cache')).toBe('HIT')
    expect(upstream.calls).toHaveLength(1)
  })

  it("a piped answer's usage replays whole: vLLM's prompt_tokens_details too", async () => {
    const detailed = { ...usage, prompt_tokens_details: { cached_tokens: 8 } }
    const upstream = scripted(() => [UPSTREAM_SSE.replace(JSON.stringify(usage), JSON.stringify(detailed))])
    const { h, stream } = await setup(upstream)
    const live = await readSSE(await stream(SERVED, cacheable))
    expect(live.at(-2)).toMatchObject({ usage: detailed })
    await h.settle()
    const hit = await stream(SERVED, cacheable)
    expect(hit.headers.get('x-podgate-cache')).toBe('HIT')
    expect((await readSSE(hit)).at(-2)).toMatchObject({ choices: [], usage: detailed })
    expect(upstream.calls).toHaveLength(1)
  })

  it('a twin that arrives while a piped answer is in flight gets it whole when it ends, from one upstream call', async () => {
    const pieces = UPSTREAM_SSE.split(/(?<=\n\n)/)
    const { upstream, release } = held(pieces, 2)
    const { kv, looked } = lookups()
    const { h, stream } = await setup(upstream, { kv })
    const leader = await stream(SERVED, cacheable)
    expect(leader.headers.get('x-podgate-cache')).toBe('MISS')
    const leaderText = leader.text()
    const twinSansUsage = stream(SERVED, { temperature: 0 })
    const twin = stream(SERVED, cacheable)
    // The twins missed the cache after the leader did: they wait on the flight now; let the answer finish.
    await looked(3)
    release()
    expect(await leaderText).toBe(UPSTREAM_SSE)
    const [a, b] = await Promise.all([twin, twinSansUsage])
    expect(a.headers.get('x-podgate-cache')).toBe('COALESCED')
    expect(b.headers.get('x-podgate-cache')).toBe('COALESCED')
    const withUsage = await readSSE(a)
    expect(shape(withUsage)).toEqual(shape(await events(UPSTREAM_SSE)))
    const sansUsage = await readSSE(b)
    expect(streamedText(sansUsage)).toBe('Hello ✓')
    expect(sansUsage.some((e) => (e as { choices?: unknown[] }).choices?.length === 0)).toBe(false)
    expect(sansUsage.at(-1)).toBe('[DONE]')
    expect(upstream.calls).toHaveLength(1)
  })

  it("a twin gets the piped answer when the upstream's part ends, however slowly the first caller reads", async () => {
    const { upstream, release } = held(UPSTREAM_SSE.split(/(?<=\n\n)/), 2)
    const { stream } = await setup(upstream)
    const leader = await stream(SERVED, cacheable)
    const twin = await stream(SERVED, cacheable)
    expect(twin.headers.get('x-podgate-cache')).toBe('COALESCED')
    // The first caller reads nothing yet; its twin is answered once the upstream's answer is whole.
    release()
    expect(shape(await readSSE(twin))).toEqual(shape(await events(UPSTREAM_SSE)))
    expect(await leader.text()).toBe(UPSTREAM_SSE)
    expect(upstream.calls).toHaveLength(1)
  })

  it('a piped answer over maxEntryBytes reaches the caller whole and is not stored', async () => {
    const long = `data: {${head},"choices":[{"index":0,"delta":{"content":"${'x'.repeat(200)}"},"logprobs":null,"finish_reason":null}]}\n\n`.repeat(10) + UPSTREAM_SSE
    const upstream = scripted(() => cutRandom(long, 9, 500))
    const { h, stream } = await setup(upstream, { cache: { maxEntryBytes: 1024 } })
    expect(await (await stream(SERVED, cacheable)).text()).toBe(long)
    await h.settle()
    const again = await stream(SERVED, cacheable)
    expect(again.headers.get('x-podgate-cache')).toBe('MISS')
    expect(await again.text()).toBe(long)
    expect(upstream.calls).toHaveLength(2)
  })

  it('a twin of a piped answer over maxEntryBytes gets the answer from a call of its own', async () => {
    const long = `data: {${head},"choices":[{"index":0,"delta":{"content":"${'y'.repeat(200)}"},"logprobs":null,"finish_reason":null}]}\n\n`.repeat(10) + UPSTREAM_SSE
    const { upstream, release } = held(long.split(/(?<=\n\n)/), 2)
    const { stream } = await setup(upstream, { cache: { maxEntryBytes: 1024 } })
    const leader = await stream(SERVED, cacheable)
    const twin = await stream(SERVED, cacheable)
    expect(twin.headers.get('x-podgate-cache')).toBe('COALESCED')
    release()
    expect(await leader.text()).toBe(long)
    // The twin's own call: the upstream's bytes, relayed after the comments it may have had while waiting.
    expect((await twin.text()).replace(/^(: keep-alive\n\n)+/, '')).toBe(long)
    expect(upstream.calls).toHaveLength(2)
  })

  it('a twin waiting on a first chunk already over maxEntryBytes gets the whole answer from its own call', async () => {
    const big = `data: {${head},"choices":[{"index":0,"delta":{"content":"${'z'.repeat(1500)}"},"logprobs":null,"finish_reason":null}]}\n\n`
    const answer = big + UPSTREAM_SSE
    const { upstream, release } = held(answer.split(/(?<=\n\n)/), 0)
    const { stream } = await setup(upstream, { cache: { maxEntryBytes: 1024 } })
    // The first call waits for its first chunk; its twin joins meanwhile, as a live follower would.
    const leader = stream(SERVED, cacheable)
    await new Promise((resolve) => setTimeout(resolve, 20))
    const twin = stream(SERVED, cacheable)
    await new Promise((resolve) => setTimeout(resolve, 20))
    release()
    expect(await (await leader).text()).toBe(answer)
    expect((await (await twin).text()).replace(/^(: keep-alive\n\n)+/, '')).toBe(answer)
    expect(upstream.calls).toHaveLength(2)
  })

  it('a piped event that grows past maxEntryBytes is given up on as it comes, not held whole: its waiting twin asks on its own at once', async () => {
    // One event of 200 KB whose end the upstream holds back: podgate's copy of a piped stream reads it as
    // it comes, and must not keep it whole (an upstream's event has no other bound there).
    const start = `data: {${head},"choices":[{"index":0,"delta":{"content":"${'w'.repeat(200_000)}`
    const rest = `"},"logprobs":null,"finish_reason":null}]}\n\n${UPSTREAM_SSE}`
    // The first call's body waits for its twin to join, then sends the event's start and holds its end.
    const { upstream, release } = held([start, rest], 1)
    let joined!: () => void
    const twinJoined = new Promise<void>((resolve) => (joined = resolve))
    const gated = { calls: upstream.calls, fetch: (async (input: RequestInfo | URL, init?: RequestInit) => {
      const response = await upstream.fetch(input, init)
      if (upstream.calls.length > 1) return response
      const reader = response.body!.getReader()
      return new Response(new ReadableStream({ type: 'bytes', async pull(controller) {
        await twinJoined
        const next = await reader.read()
        if (next.done) controller.close()
        else controller.enqueue(next.value)
      } }), response)
    }) as typeof fetch }
    const { kv, looked } = lookups()
    const { stream } = await setup(gated, { cache: { maxEntryBytes: 1024 }, kv })
    const leader = stream(SERVED, cacheable)
    await looked(1)
    const twin = stream(SERVED, cacheable)
    await looked(2)
    joined()
    const leaderText = (await leader).text()
    const twinText = twin.then((res) => res.text())
    // The leader's event is still open upstream; the twin learnt the answer is too large to share.
    for (let i = 0; i < 100 && upstream.calls.length < 2; i++) await new Promise((resolve) => setTimeout(resolve, 20))
    expect(upstream.calls).toHaveLength(2)
    release()
    expect(await leaderText).toBe(start + rest)
    expect((await twinText).replace(/^(: keep-alive\n\n)+/, '')).toBe(start + rest)
  })

  it('a piped answer cut before [DONE] is not stored', async () => {
    const cut = UPSTREAM_SSE.slice(0, UPSTREAM_SSE.lastIndexOf('data: [DONE]'))
    const upstream = scripted(() => [cut])
    const { h, stream } = await setup(upstream)
    const first = await (await stream(SERVED, cacheable)).text()
    expect(first.startsWith(cut)).toBe(true)
    expect(first).toContain('"code":"upstream_error"')
    await h.settle()
    expect((await stream(SERVED, cacheable)).headers.get('x-podgate-cache')).toBe('MISS')
    expect(upstream.calls).toHaveLength(2)
  })
})

/** Runs the pipe alone over `pieces` and reads its body to the end: what it reported, and the bytes. */
async function pipeOutcome(pieces: string[]) {
  const queue = [...pieces]
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      const next = queue.shift()
      if (next === undefined) controller.close()
      else controller.enqueue(bytesOf(next))
    },
  })
  let end: RelayOutcome | undefined
  let seen: Usage | undefined
  // The first chunk is read by the caller of the pipe (the route waits for it before answering), from the copy.
  const split = splitBody(body)
  const reader = split.copy.getReader()
  const first = await reader.read()
  expect(first.done).toBe(false)
  reader.releaseLock()
  // Nothing to stop: the body ends by itself.
  const stream = pipeOpenAIStream({ body: split, first: first.value, abortUpstream: () => undefined, onEnd: (outcome) => (end = outcome), onUsage: (u) => (seen = u) })
  const text = await new Response(stream).text()
  await expect.poll(() => end, { timeout: 1_000 }).toBeDefined()
  return { text, end: end!, usage: seen }
}

/** An emulator stream handed to the pipe as openai-route.ts does: a runtime fetch body, its first chunk read. */
async function pipedFromEmulator(prompt: string, extra: { idleMs?: number } = {}) {
  const upstream = new AbortController()
  const res = await fetch(`${env.RUNPOD_BASE_URL}/vllmopenai/openai/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: prompt }], stream: true, stream_options: { include_usage: true }, max_tokens: 64 }),
    signal: upstream.signal,
  })
  const split = splitBody(res.body!)
  const reader = split.copy.getReader()
  const first = await reader.read()
  reader.releaseLock()
  const seen: { end?: RelayOutcome; usage?: Usage; copyEnd?: unknown } = {}
  const stream = pipeOpenAIStream({
    body: split,
    first: first.value,
    abortUpstream: (reason) => upstream.abort(reason),
    ...extra,
    onEnd: (outcome) => (seen.end = outcome),
    onUsage: (u) => (seen.usage = u),
    onCopyEnd: (end) => (seen.copyEnd = end),
  })
  return { stream, seen }
}

describe('pipeOpenAIStream', () => {
  // Its last resort, for a step that fails unexpectedly, aborted the caller's body through the stream,
  // which the ending's writer held locked by then: the abort failed, and the caller's body never ended.
  it('a step that throws after the ending began (here onEnd) still ends the caller\'s body, with an error', async () => {
    const body = new ReadableStream<Uint8Array>({ start: (controller) => (controller.enqueue(bytesOf(UPSTREAM_SSE)), controller.close()) })
    const stream = pipeOpenAIStream({
      body,
      abortUpstream: () => undefined,
      onEnd: () => {
        throw new Error('a recorder broke')
      },
    })
    const ending = new Response(stream).text().then(
      () => 'closed',
      (error: unknown) => `errored: ${String(error)}`,
    )
    expect(await answered(ending)).toMatch(/^errored: .*The upstream connection broke/)
  })

  it('an upstream held open after bytes that only look like [DONE] settles as it would closed: not whole', async () => {
    // The last event's data is `{"x":1}\n[DONE]` (two data lines): it ends like a [DONE] event, but is none.
    const text = 'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n' + 'data: {"x":1}\ndata: [DONE]\n\n'
    const outcomeOf = async (hold: boolean) => {
      let sent = false
      const body = new ReadableStream({
        type: 'bytes',
        async pull(controller: ReadableByteStreamController) {
          if (sent) return hold ? new Promise<void>(() => undefined) : controller.close()
          sent = true
          controller.enqueue(new TextEncoder().encode(text))
        },
      })
      let end: RelayOutcome | undefined
      const stream = pipeOpenAIStream({ body, abortUpstream: () => undefined, idleMs: 150, onEnd: (outcome) => (end = outcome) })
      const reader = stream.getReader()
      void (async () => {
        while (!(await reader.read()).done);
      })().catch(() => undefined)
      await expect.poll(() => end, { timeout: 2_000 }).toBeDefined()
      await reader.cancel().catch(() => undefined)
      return end!
    }
    expect(await outcomeOf(false)).toMatchObject({ ok: false })
    expect(await outcomeOf(true)).toMatchObject({ ok: false })
  })

  // Found in review: with the caller not reading, nothing but the copy's ticks pulls the upstream, so
  // its end could still be unread when the revocation (or the total timeout) landed, and a whole
  // answer was cut and settled as failed.
  it('a revocation after the upstream sent its whole answer, to a caller still reading, does not cut it', async () => {
    const { stream, seen } = await pipedFromEmulator('Hi [[emulator:tokens=3,delay=5]]')
    await new Promise((resolve) => setTimeout(resolve, 110))
    streamControl(stream)!.end('data: {"error":{"code":"invalid_api_key"}}\n\n')
    const text = await new Response(stream).text()
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true)
    expect(seen.end).toMatchObject({ ok: true })
    expect(seen.usage).toBeDefined()
    await expect.poll(() => seen.copyEnd).toMatchObject({ done: true })
  })

  it('a stall is cut within idleMs and one tick of the last byte, never before idleMs', async () => {
    // Tokens 250 ms apart (the copy's tick grows to its longest, here idleMs), then a stall.
    const { stream, seen } = await pipedFromEmulator('Hold [[emulator:tokens=40,delay=250,fault=stall,after=10]]', { idleMs: 300 })
    const reader = stream.getReader()
    const decoder = new TextDecoder()
    let lastData = 0
    let cutAt = 0
    for (;;) {
      const next = await reader.read()
      if (next.done) break
      if (decoder.decode(next.value).includes('upstream_timeout')) cutAt = Date.now()
      else lastData = Date.now()
    }
    expect(seen.end).toMatchObject({ ok: false, error: { code: 'upstream_timeout' } })
    expect(cutAt - lastData).toBeGreaterThanOrEqual(300)
    expect(cutAt - lastData).toBeLessThanOrEqual(300 + 300 + 150)
  }, 20_000)

  it('reports ok with the usage for a whole stream, a failure for a cut one, and the same bytes', async () => {
    const whole = await pipeOutcome(cutRandom(UPSTREAM_SSE, 11, 50))
    // Its 5 events (the comment is none), the count that settles a stream with no usage.
    expect(whole).toEqual({ text: UPSTREAM_SSE, end: { ok: true, estimate: countedUsage(5) }, usage })
    const cut = await pipeOutcome([UPSTREAM_SSE.slice(0, 300)])
    expect(cut.end).toMatchObject({ ok: false, started: true, error: { message: 'The upstream stream ended before the model finished.' } })
    expect(cut.usage).toBeUndefined()
  })

  it('a caller who leaves before the first chunk is read still settles the stream, and stops the upstream', async () => {
    let pulls = 0
    let cancelled = false
    const body: ReadableStream<Uint8Array> = new ReadableStream({
      type: 'bytes',
      pull(controller) {
        if (pulls++ > 3) controller.close()
        else controller.enqueue(bytesOf('data: {"choices":[]}\n\n'))
      },
      cancel() {
        cancelled = true
      },
    })
    const split = splitBody(body)
    const reader = split.copy.getReader()
    const first = await reader.read()
    reader.releaseLock()
    let end: RelayOutcome | undefined
    const stream = pipeOpenAIStream({ body: split, first: first.value, abortUpstream: (reason) => split.cancel(reason), onEnd: (outcome) => (end = outcome) })
    await new Promise((resolve) => setTimeout(resolve, 50))
    await stream.cancel()
    await expect.poll(() => end, { timeout: 2_000 }).toMatchObject({ ok: false })
    expect(cancelled || pulls > 4).toBe(true)
  })

  it('a long answer, read back in many blocks into reused buffers, keeps its exact ending', async () => {
    const tokens = Array.from({ length: 6000 }, (_, i) => `data: {"choices":[{"index":0,"delta":{"content":"t${(i * 7919) % 10007}"}}]}\n\n`).join('')
    const long = tokens + UPSTREAM_SSE
    const whole = await pipeOutcome(cutRandom(long, 3, 3000))
    expect(whole.text === long).toBe(true)
    expect(whole.end).toMatchObject({ ok: true })
    // Its 6005 events, estimated from the tail's density: within a few percent (its last events are longer).
    expect(Math.abs((whole.end as { estimate: Usage }).estimate.total_tokens - 6005)).toBeLessThan(6005 * 0.03)
    expect(whole.usage).toEqual(usage)
    // Cut after the usage chunk, before [DONE]: the usage still settles, and the stream counts as cut.
    const cut = await pipeOutcome(cutRandom(long.slice(0, long.lastIndexOf('data: [DONE]')), 4, 3000))
    expect(cut.end).toMatchObject({ ok: false, error: { message: 'The upstream stream ended before the model finished.' } })
    expect(cut.usage).toEqual(usage)
    expect(cut.text.endsWith('"code":"upstream_error"}}\n\n') || cut.text.includes('ended before the model finished')).toBe(true)
  })
})

describe('readTail', () => {
  it('finds [DONE], the usage and an error event however the tail was cut, and only whole events', () => {
    const text = 'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'.repeat(400) + UPSTREAM_SSE
    for (const seed of [1, 2, 3, 4, 5]) {
      const chunks = cutRandom(bytesOf(text), seed, 700)
      // Keep whole trailing chunks worth at least 16 KiB, as the relay does.
      let bytes = 0
      let from = chunks.length
      while (from > 0 && bytes < 16 * 1024) bytes += chunks[--from]!.byteLength
      const end = readTail(chunks.slice(from), from === 0, undefined, bytesOf(text).byteLength)
      expect(end).toMatchObject({ done: true, usage, output: true })
      // The answer's 405 events, estimated at the tail's density (its events are alike in size).
      expect(Math.abs(end.estimate!.completion_tokens - 405)).toBeLessThanOrEqual(5)
    }
    expect(readTail([bytesOf(UPSTREAM_SSE.slice(0, -14))], true)).toEqual({ done: false, usage, output: true, estimate: countedUsage(4) })
    const failed = readTail([bytesOf('data: {"object":"error","message":"boom"}\n\ndata: [DONE]\n\n')], true)
    expect(failed.done).toBe(true)
    expect(failed.error?.message).toBe('The model worker failed: boom')
    // An error before any other event: the answer never started.
    expect(failed.output).toBe(false)
  })

  it('reads an error or a usage however the JSON is spaced, and takes a chunk that only talks about them for content', () => {
    const spaced = readTail([bytesOf('data: {"error": {"message": "engine died", "code": null}}\n\ndata: [DONE]\n\n')], true)
    expect(spaced.error?.message).toBe('The model worker failed: engine died')
    const legacy = readTail([bytesOf('data: {"object": "error", "message": "boom"}\n\n')], true)
    expect(legacy).toMatchObject({ done: false, error: { message: 'The model worker failed: boom' } })
    const talk = 'data: {"choices":[{"index":0,"delta":{"content":"the \\"error\\" and \\"usage\\" fields"}}]}\n\n'
    const counted = `data: {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21}}\n\n`
    expect(readTail([bytesOf(talk + counted + talk + 'data: [DONE]\n\n')], true)).toEqual({ done: true, usage, output: true, estimate: countedUsage(4) })
  })
})
