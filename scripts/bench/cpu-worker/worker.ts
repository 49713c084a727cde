/**
 * Bench-only Worker (run by `npm run bench` through `wrangler dev`, never deployed): loops podgate's
 * request path inside workerd so its CPU cost can be read from the workerd process.
 *
 * `GET /loop?target=gateway|least|relay|identity|upstream|log|noop&n=&stream=0|1&events=&cache=off|miss|hit` runs `n` chat
 * calls one after another through `createGateway(...).fetch` with the real ExecutionContext and reads
 * each body to the end; `target=upstream` runs the same loop against the in-process fake upstream
 * alone (`noop`: against nothing), so the runner can subtract what those and the loop itself cost;
 * `target=least` runs the least featured gateway's JSON call instead (`npm run bench:micro`);
 * `target=relay` pipes the fake upstream's stream through the SSE relay alone (no gateway around it),
 * and `target=identity` through an empty TransformStream (the cost of one stream hop in workerd): together
 * they split the per-event cost into the runtime's stream hop, the relay's own work, and the rest.
 * Every call authenticates with a key that carries a quota policy, so the quota stage counts it;
 * `cache=miss` makes each request cacheable and new (a lookup that misses, then a store),
 * `cache=hit` repeats one cacheable request, `cache=off` sends a request the cache skips.
 * `target=log` writes a failure's log line per call (as `onError` does for a 5xx: the gateway's logger,
 * scrubbing the secrets a deployment has and any podgate key, to a sink that drops it) beside the `noop` loop.
 */
import { createGateway } from '../../../src/index.ts'
import type { GatewayEnv } from '../../../src/index.ts'
import type { Hono } from 'hono'
import { chatBody, closingEvents, completionJson, contentEvent, parseScenario } from '../wire.ts'
import { createOpenAIRelay } from '../../../src/streaming/openai-relay.ts'
import { createLogger } from '../../../src/http/log.ts'
import { splitBody, pipeOpenAIStream } from '../../../src/streaming/openai-pipe.ts'
import { memoryCache, memoryKv } from './memory-stores.ts'
import leastGateway from '../least-gateway/hono.ts'

// The quota store's Durable Object class, bound by wrangler.toml [env.dev]; unused with the default KV store.
export { QuotaObject } from '../../../src/durable-objects.ts'

interface Env {
  PODGATE_KV: KVNamespace
}

const ADMIN_TOKEN = 'bench-admin-token-0123456789abcdef'
/** The logger `createGateway` builds, with a deployment's secrets: the Runpod key, the admin token, the signing secret. */
const benchLog = createLogger({ secrets: ['bench-runpod-key', ADMIN_TOKEN, 'bench-signing-secret-0123456789abcdef'], sink: () => {} })
const encoder = new TextEncoder()

/** The upstream, in process: answers at once, so only podgate's own work is left to measure. */
async function fakeUpstream(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
  const body = await new Request(input, init).text()
  if (!body.includes('"stream":true')) return new Response(completionJson('bench'), { headers: { 'content-type': 'application/json' } })
  const { events, bytes } = parseScenario(body)
  let i = 0
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (i < events) controller.enqueue(encoder.encode(contentEvent('bench', i++, bytes)))
      else {
        controller.enqueue(encoder.encode(closingEvents('bench', events)))
        controller.close()
      }
    },
  })
  return new Response(stream, { headers: { 'content-type': 'text/event-stream' } })
}

function piped(upstream: Response, target: string): Response {
  const body = target === 'relay'
    ? createOpenAIRelay({ source: upstream.body!.getReader(), model: 'bench', includeUsage: true })
    : upstream.body!.pipeThrough(new TransformStream<Uint8Array, Uint8Array>())
  return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
}

let httpGateway: Promise<{ app: Hono<GatewayEnv>; key: string }> | undefined

/** podgate whole (auth, quota, the cache stage, logging to nowhere) over the real HTTP bench upstream. */
async function gatewayOverHttp(url: URL, body: string, env: Env, ctx: ExecutionContext): Promise<Response> {
  httpGateway ??= benchGateway({ baseUrl: `${new URL(url.searchParams.get('upstream')!).origin}/v2` }, env, ctx)
  const { app, key } = await httpGateway
  return app.fetch(new Request('http://podgate.bench/v1/chat/completions', { method: 'POST', body, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' } }), env, ctx)
}

/** A gateway over `upstream` with the bench key (a quota policy that never refuses, so the quota stage counts). */
async function benchGateway(upstream: { baseUrl: string; fetch?: typeof fetch }, env: Env, ctx: ExecutionContext): Promise<{ app: Hono<GatewayEnv>; key: string }> {
  const app = createGateway({
    models: { bench: { endpoints: [{ endpointId: 'bench' }], mode: 'openai' } },
    runpod: { apiKey: 'bench-runpod-key', baseUrl: upstream.baseUrl },
    adminToken: ADMIN_TOKEN,
    ...(upstream.fetch ? { fetch: upstream.fetch } : {}),
    logSink: () => {},
    kv: () => kv,
    cache: { edgeCache: () => cache },
  })
  const res = await app.fetch(
    new Request('http://podgate.bench/admin/keys', {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'bench', quota: { requestsPerMinute: 1_000_000, tokensPerDay: 1_000_000_000 } }),
    }),
    env,
    ctx,
  )
  if (res.status !== 201) throw new Error(`creating the bench key failed: ${res.status} ${await res.text()}`)
  return { app, key: ((await res.json()) as { key: string }).key }
}

let gateway: Promise<{ app: Hono<GatewayEnv>; key: string }> | undefined
const kv = memoryKv()
const cache = memoryCache()
let seed = 0

async function setup(env: Env, ctx: ExecutionContext): Promise<{ app: Hono<GatewayEnv>; key: string }> {
  // https: runpod.baseUrl refuses plain http to a host that is not loopback (the fake fetch ignores the scheme).
  gateway ??= benchGateway({ baseUrl: 'https://upstream.bench/v2', fetch: fakeUpstream as typeof fetch }, env, ctx)
  return gateway
}

/**
 * `GET /hop?mode=&upstream=` relays a stream from the real HTTP upstream through one streaming shape,
 * so the runner can price each shape per event over real I/O: `floor` returns the fetch response as
 * is; `identity` pipes it through an empty TransformStream; `timer` wraps it in a pull-based
 * ReadableStream that races each read against a `setTimeout` (the shape of the upstream idle timeout in
 * src/upstream/openai-route.ts before the relay enforced it, modelled here); `relay` has the SSE relay
 * read it, as podgate's OpenAI-route streaming does (`relay-byob` through a BYOB reader: no cheaper, since a
 * read kept waiting gets one chunk each); `timer-relay` does both (the former shape, with the
 * per-chunk revocation wrapper). Candidate native shapes: `native-pipe` pipes the body into an
 * `IdentityTransformStream` natively and lets JavaScript write only after the end (where a tail event
 * would go); `tee-watch` returns one branch of a `tee` and has JavaScript read the other per chunk;
 * `js-writer` has JavaScript read each chunk and write it into an `IdentityTransformStream`. Their
 * combinations (`tee-pipe`, `pipe-tee`, `tee-pipe-drain`, `tee-pipe-idle`) show which of them stay
 * native together; `tee-gather` and `tee-deflate` read the copy in 16 KiB blocks (`readAtLeast`) through a
 * second identity stream or the deflate pair (the pipe's shape until 2026-11-23); `tee-tick` reads the copy once a
 * tick, whatever the branch holds (the pipe's shape now). `pipe` is podgate's native pipe (src/streaming/openai-pipe.ts),
 * `pipe-nofirst` the same without waiting for the first chunk before answering, `pipe-waituntil` the same
 * with a `waitUntil` pending, and `gateway` podgate whole over the same HTTP upstream (`gateway-nousage`: a
 * caller that did not ask for the usage chunk, which takes the relay). `floor-wait` answers
 * 5 ms after the upstream did, `floor-wait-early` sends the headers at once and the body 5 ms later: the
 * difference is what answering only after the first chunk costs the caller. `bytes=` sets the event size,
 * `gap=` the ms between events (default 0: as fast as the socket takes them).
 * `relay-nobatch` is the relay sending each chunk's output at once, as before it batched. Two negative
 * results: `js-coalesce` writes only when its last write was taken (JavaScript keeps up, so it still writes
 * once per chunk), and `js-nagle-read` reads at most once per `min` ms (a read returns at most one HTTP
 * chunk of a fetch body, however many wait: the rate collapses). `tee-watch` keeps its reader alive with
 * `waitUntil`: without it, workerd streams the native branch with no JavaScript and the reader stops early.
 */
/** The read and write counts of the last run of a shape that keeps them (`GET /hop?mode=stats`). */
let lastStats = ''

async function hop(url: URL, env: Env, ctx: ExecutionContext): Promise<Response> {
  const mode = url.searchParams.get('mode') ?? 'floor'
  if (mode === 'stats') return new Response(lastStats)
  const body = chatBody('bench', { events: Number(url.searchParams.get('events') ?? 2000), ...(url.searchParams.has('bytes') ? { bytes: Number(url.searchParams.get('bytes')) } : {}), first: 0, gap: Number(url.searchParams.get('gap') ?? 0) }, true)
  if (mode === 'gateway') return gatewayOverHttp(url, body, env, ctx)
  if (mode === 'gateway-nousage') {
    // The same call without `stream_options.include_usage`, as OpenAI's SDKs send it by default: podgate
    // strips the usage chunk it asked for, so the stream takes the JavaScript relay.
    const { stream_options: _, ...rest } = JSON.parse(body) as Record<string, unknown>
    return gatewayOverHttp(url, JSON.stringify(rest), env, ctx)
  }
  // `pipe-signal`: the upstream call carries an AbortSignal, as podgate's does (its timeouts and the caller's leaving abort it).
  const signal = mode === 'pipe-signal' ? AbortSignal.any([new AbortController().signal, new AbortController().signal]) : undefined
  const upstream = await fetch(url.searchParams.get('upstream')!, { method: 'POST', body, headers: { 'content-type': 'application/json' }, ...(signal ? { signal } : {}) })
  let stream = upstream.body!
  if (mode === 'identity') stream = stream.pipeThrough(new TransformStream<Uint8Array, Uint8Array>())
  if (mode === 'timer' || mode === 'timer-relay') stream = timerWrapped(stream)
  // `relay:N`: the relay batching its writes over N ms instead of its default.
  if (mode === 'relay' || mode === 'timer-relay') stream = createOpenAIRelay({ source: stream.getReader(), model: 'bench', includeUsage: true, ...(url.searchParams.has('min') ? { batchMs: Number(url.searchParams.get('min')) } : {}) })
  // `relay-nobatch`: the relay sending every chunk's output at once, as it did before it batched (2026-11-23).
  if (mode === 'relay-nobatch') stream = createOpenAIRelay({ source: stream.getReader(), model: 'bench', includeUsage: true, batchMs: 0 })
  if (mode === 'relay-byob') {
    const byob = stream.getReader({ mode: 'byob' })
    const size = Number(url.searchParams.get('min') ?? 32768)
    const source = {
      read: () => byob.read(new Uint8Array(size)),
      cancel: (reason?: unknown) => byob.cancel(reason),
      releaseLock: () => byob.releaseLock(),
    } as unknown as ReadableStreamDefaultReader<Uint8Array>
    stream = createOpenAIRelay({ source, model: 'bench', includeUsage: true })
  }
  if (mode === 'native-pipe') stream = withEnding(stream).readable
  if (mode === 'native-pipe-hwm') stream = withEnding(stream, undefined, 65536).readable
  if (mode === 'floor-wait') await new Promise((resolve) => setTimeout(resolve, 5))
  if (mode === 'floor-wait-early') {
    // Headers at once, the body after 5 ms.
    const { readable, writable } = new IdentityTransformStream()
    const body = stream
    void new Promise((resolve) => setTimeout(resolve, 5)).then(() => body.pipeTo(writable))
    stream = readable
  }
  if (mode === 'pipe-nofirst') {
    stream = pipeOpenAIStream({ body: stream, abortUpstream: () => undefined, totalDeadline: Date.now() + 600_000 })
  }
  if (mode === 'pipe' || mode === 'pipe-waituntil' || mode === 'pipe-signal') {
    // `pipe-waituntil`: the same, with a `waitUntil` pending until the end, as the quota stage's settle is.
    let ended!: () => void
    if (mode === 'pipe-waituntil') ctx.waitUntil(new Promise<void>((resolve) => (ended = resolve)))
    // The bench stream never times out or loses its caller: nothing to abort.
    // As podgate's OpenAI route does: split first, the first chunk read from the copy.
    const split = splitBody(stream)
    const reader = split.copy.getReader()
    const first = await reader.read()
    reader.releaseLock()
    stream = pipeOpenAIStream({ body: split, first: first.value, abortUpstream: () => undefined, totalDeadline: Date.now() + 600_000, onEnd: () => ended?.() })
  }
  if (mode === 'tee-pipe-idle') {
    const [out, watched] = stream.tee()
    const { readable, ended } = withEnding(out)
    // The watched branch is read only at the end (in the real thing: its tail).
    void ended.then(async () => {
      const reader = watched.getReader()
      for (;;) if ((await reader.read()).done) break
    })
    stream = readable
  }
  // `tee-pipe-idle` with one more of the native pipe's habits each: its pipeTo options, its first chunk.
  if (mode === 'tee-pipe-idle-signal' || mode === 'tee-pipe-idle-first') {
    const source = stream
    const { readable, writable } = new IdentityTransformStream()
    if (mode === 'tee-pipe-idle-first') {
      const reader = source.getReader()
      const first = await reader.read()
      reader.releaseLock()
      const writer = writable.getWriter()
      writer.write(first.value!).catch(() => undefined)
      writer.releaseLock()
    }
    const [out, watched] = source.tee()
    const stop = new AbortController()
    const ended = out.pipeTo(writable, { preventClose: true, preventAbort: true, ...(mode === 'tee-pipe-idle-signal' ? { signal: stop.signal } : {}) }).then(async () => {
      const writer = writable.getWriter()
      await writer.write(encoder.encode(': end\n\n'))
      await writer.close()
    })
    void ended.then(async () => {
      const reader = watched.getReader()
      for (;;) if ((await reader.read()).done) break
    })
    stream = readable
  }
  if (mode === 'tee-pipe-drain') {
    const every = 20
    const [out, watched] = stream.tee()
    const reader = watched.getReader()
    let done = false
    // Drains the watched branch now and then, not per chunk: one JS wake-up reads what queued meanwhile.
    const drain = async () => {
      for (;;) {
        const next = await Promise.race([reader.read(), new Promise<null>((r) => setTimeout(() => r(null), 0))])
        if (next === null) return
        if (next.done) return void (done = true)
      }
    }
    const timer = setInterval(() => void drain(), every)
    const { readable, ended } = withEnding(out, async () => {
      clearInterval(timer)
      while (!done) {
        const next = await reader.read()
        if (next.done) done = true
      }
    })
    ctx.waitUntil(ended)
    stream = readable
  }
  if (mode === 'tee-pipe') {
    const [out, watched] = stream.tee()
    const { readable, writable } = new IdentityTransformStream()
    void out.pipeTo(writable, { preventClose: true }).then(() => writable.close())
    const reader = watched.getReader()
    void (async () => {
      for (;;) if ((await reader.read()).done) break
    })()
    stream = readable
  }
  if (mode === 'pipe-tee') {
    const [out, watched] = withEnding(stream).readable.tee()
    const reader = watched.getReader()
    void (async () => {
      for (;;) if ((await reader.read()).done) break
    })()
    stream = out
  }
  if (mode === 'tee-gather' || mode === 'tee-deflate') {
    // The copy reaches JavaScript in blocks of at least 16 KiB (`readAtLeast` fills a buffer natively),
    // through a second identity stream (`tee-gather`) or the deflate pair (`tee-deflate`, the pipe's shape
    // without podgate's code). `readAtLeast` on the branch itself would hold the caller's branch back.
    const [out, teed] = stream.tee()
    let copy: ReadableStream<Uint8Array>
    if (mode === 'tee-gather') {
      const gather = new IdentityTransformStream()
      void teed.pipeTo(gather.writable)
      copy = gather.readable
    } else {
      const compressor = new CompressionStream('deflate-raw')
      void teed.pipeTo(compressor.writable)
      copy = compressor.readable.pipeThrough(new DecompressionStream('deflate-raw'))
    }
    const reader = copy.getReader({ mode: 'byob' }) as ReadableStreamBYOBReader & { readAtLeast(min: number, view: Uint8Array): Promise<ReadableStreamReadResult<Uint8Array>> }
    const drained = (async () => {
      let buffer = new ArrayBuffer(32768)
      for (;;) {
        const next = await reader.readAtLeast(Number(url.searchParams.get('min') ?? 16384), new Uint8Array(buffer))
        if (next.done) break
        buffer = next.value!.buffer as ArrayBuffer
      }
    })()
    stream = withEnding(out, () => drained).readable
  }
  if (mode === 'tee-tick' || mode === 'tee-tick-hwm') {
    // The copy read now and then, never per chunk: every `min` ms (default 50) one BYOB read takes
    // whatever the copy branch holds; no read is left pending between ticks, so a chunk wakes no JavaScript.
    const [out, copy] = stream.tee()
    const reader = copy.getReader({ mode: 'byob' })
    let buffer = new ArrayBuffer(65536)
    let reading: Promise<boolean> | undefined
    let bytes = 0
    const readOnce = () =>
      (reading ??= reader.read(new Uint8Array(buffer)).then((next) => {
        reading = undefined
        if (next.done) return true
        buffer = next.value!.buffer as ArrayBuffer
        bytes += next.value!.byteLength
        return false
      }))
    const timer = setInterval(() => void readOnce(), Number(url.searchParams.get('min') ?? 50))
    stream = withEnding(out, async () => {
      clearInterval(timer)
      while (!(await readOnce()));
      return bytes
    }, mode === 'tee-tick-hwm' ? 65536 : undefined).readable
  }
  if (mode === 'tee-native-tick') {
    // `tee-tick` with the caller's branch returned as is (no IdentityTransformStream after it): what the
    // caller's stream costs, which podgate needs to write an error event after a cut answer.
    const [out, copy] = stream.tee()
    ctx.waitUntil(readEvery(copy, Number(url.searchParams.get('min') ?? 50)))
    stream = out
  }
  if (mode === 'its-tee-tick') {
    // The caller's IdentityTransformStream before the tee instead of after it: the upstream piped into
    // it natively (JavaScript can still write after the end), its readable tee-d, one branch returned as
    // is, the other read every `min` ms (default 50).
    const { readable, writable } = new IdentityTransformStream()
    const [out, copy] = readable.tee()
    ctx.waitUntil(readEvery(copy, Number(url.searchParams.get('min') ?? 50)))
    ctx.waitUntil(stream.pipeTo(writable, { preventClose: true }).then(async () => {
      const writer = writable.getWriter()
      await writer.write(encoder.encode(': end\n\n'))
      await writer.close()
    }))
    stream = out
  }
  if (mode === 'tee-watch') {
    const [out, watched] = stream.tee()
    const reader = watched.getReader()
    ctx.waitUntil((async () => {
      let bytes = 0
      let reads = 0
      for (;;) {
        const next = await reader.read()
        if (next.done) break
        reads++
        bytes += next.value.byteLength
      }
      lastStats = `tee-watch reads=${reads} bytes=${bytes}`
    })())
    stream = out
  }
  if (mode === 'js-nagle-read') {
    // JavaScript reads at most once per `min` ms (default 1): a read that comes sooner waits for the
    // window's end, then one BYOB read takes all that arrived meanwhile and goes out as one write.
    const every = Number(url.searchParams.get('min') ?? 1)
    const reader = stream.getReader({ mode: 'byob' })
    stream = writtenByJs(ctx, async (writer) => {
      let reads = 0
      let lastRead = -Infinity
      for (;;) {
        const wait = lastRead + every - Date.now()
        if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait))
        const next = await reader.read(new Uint8Array(65536))
        lastRead = Date.now()
        if (next.done) break
        reads++
        void writer.write(next.value!)
      }
      lastStats = `js-nagle-read reads=${reads}`
    })
  }
  if (mode === 'js-coalesce') {
    // JavaScript reads each chunk at once, but writes only when its last write was taken: chunks that
    // arrive meanwhile go out as one write. A negative result: it keeps up, so it writes once per chunk.
    const reader = stream.getReader()
    stream = writtenByJs(ctx, async (writer) => {
      let pending: Uint8Array[] = []
      let writing: Promise<void> | undefined
      let writes = 0
      let reads = 0
      const send = (): void => {
        const chunk = concat(pending)
        pending = []
        writes++
        writing = writer.write(chunk).then(() => {
          writing = undefined
          if (pending.length > 0) send()
        })
      }
      for (;;) {
        const next = await reader.read()
        if (next.done) break
        reads++
        pending.push(next.value)
        if (writing === undefined) send()
        else if (pending.length > 256) await writing
      }
      while (writing !== undefined) await writing
      lastStats = `js-coalesce reads=${reads} writes=${writes}`
    })
  }
  if (mode === 'js-writer') {
    const reader = stream.getReader()
    stream = writtenByJs(ctx, async (writer) => {
      for (;;) {
        const next = await reader.read()
        if (next.done) break
        await writer.write(next.value)
      }
    })
  }
  return new Response(stream, { headers: { 'content-type': 'text/event-stream' } })
}

/**
 * `source` piped natively into an `IdentityTransformStream` left open, which JavaScript ends with a comment
 * once the pipe is done and `before` has settled: the shape of podgate writing an ending event.
 */
/** Reads `copy` to its end, one BYOB read of all it holds every `ms`, into one reused buffer. */
async function readEvery(copy: ReadableStream<Uint8Array>, ms: number): Promise<void> {
  const reader = copy.getReader({ mode: 'byob' })
  let buffer = new ArrayBuffer(65536)
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, ms))
    const next = await reader.read(new Uint8Array(buffer))
    if (next.done) return
    buffer = next.value!.buffer as ArrayBuffer
  }
}

function withEnding(source: ReadableStream<Uint8Array>, before?: () => Promise<unknown>, highWaterMark?: number): { readable: ReadableStream<Uint8Array>; ended: Promise<void> } {
  const { readable, writable } = new IdentityTransformStream(highWaterMark === undefined ? undefined : { highWaterMark })
  const ended = source.pipeTo(writable, { preventClose: true }).then(async () => {
    await before?.()
    const writer = writable.getWriter()
    await writer.write(encoder.encode(': end\n\n'))
    await writer.close()
  })
  return { readable, ended }
}

/**
 * The readable side of an `IdentityTransformStream` that `write` fills from JavaScript; closed when
 * `write` is done, which `waitUntil` keeps alive (without it, a reader can stop when the response does).
 */
function writtenByJs(ctx: ExecutionContext, write: (writer: WritableStreamDefaultWriter<Uint8Array>) => Promise<void>): ReadableStream<Uint8Array> {
  const { readable, writable } = new IdentityTransformStream()
  const writer = writable.getWriter()
  ctx.waitUntil(write(writer).then(() => writer.close()))
  return readable
}

function concat(parts: Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0]!
  const whole = new Uint8Array(parts.reduce((sum, part) => sum + part.byteLength, 0))
  let at = 0
  for (const part of parts) {
    whole.set(part, at)
    at += part.byteLength
  }
  return whole
}

function timerWrapped(body: ReadableStream<Uint8Array>): ReadableStream<Uint8Array> {
  const reader = body.getReader()
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        let timer: ReturnType<typeof setTimeout> | undefined
        const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('idle')), 30_000)))
        try {
          const next = await Promise.race([reader.read(), timeout])
          if (next.done) controller.close()
          else controller.enqueue(next.value)
        } finally {
          if (timer !== undefined) clearTimeout(timer)
        }
      },
      cancel: (reason) => reader.cancel(reason),
    },
    { highWaterMark: 0 },
  )
}

/**
 * The least featured gateway (scripts/bench/least-gateway/hono.ts, `/featured`) on the same in-process
 * upstream: its own CPU a call, beside podgate's (`target=least`). It fetches through the global `fetch`,
 * so that is the fake upstream for the length of its call (the loop runs one call at a time).
 */
async function leastCall(init: { method: string; headers: Record<string, string>; body: string }, env: Env, ctx: ExecutionContext): Promise<Response> {
  const real = globalThis.fetch
  globalThis.fetch = fakeUpstream as typeof fetch
  try {
    const request = new Request('http://least.bench/featured/v1/chat/completions', { ...init, headers: { ...init.headers, authorization: 'Bearer bench' } })
    return await leastGateway.fetch(request, { ...env, PODGATE_KV: kv, UPSTREAM: 'http://upstream.bench/v2/bench/openai' }, ctx)
  } finally {
    globalThis.fetch = real
  }
}

/** A 5xx's line as `logFailure` writes it (src/http/log.ts): a fresh request id each call, the upstream's status as its cause. */
function failureLine(i: number) {
  return {
    level: 'error',
    request_id: `6f1c2a9e-0b7d-4c3e-9a41-${String(i).padStart(12, '0')}`,
    status: 502,
    path: 'POST /v1/chat/completions',
    model: 'bench',
    code: 'upstream_error',
    message: 'The upstream answered with an error (HTTP 500). Try again shortly.',
    cause: 'POST /v2/bench/openai/v1/chat/completions answered 500',
  }
}

export default {
  async fetch(request, env, ctx) {
    const url = new URL(request.url)
    if (url.pathname === '/hop') return hop(url, env, ctx)
    if (url.pathname !== '/loop') return new Response('ok')
    const { app, key } = await setup(env, ctx)
    const n = Number(url.searchParams.get('n') ?? 1)
    const stream = url.searchParams.get('stream') === '1'
    const events = Number(url.searchParams.get('events') ?? 100)
    const target = url.searchParams.get('target') ?? 'gateway'
    const cacheMode = url.searchParams.get('cache') ?? 'off'
    const started = Date.now()
    let status = 0
    let bytes = 0
    let cacheStatus: string | null = null
    let quotaPolicy: string | null = null
    for (let i = 0; i < n; i++) {
      const extra = cacheMode === 'miss' ? { seed: ++seed } : cacheMode === 'hit' ? { seed: 0 } : {}
      const body = chatBody('bench', { events, first: 0, gap: 0 }, stream, extra)
      // As an HTTP client sends it: with the body's length (podgate reads a declared length in one call).
      const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': String(encoder.encode(body).byteLength) }
      const init = { method: 'POST', headers, body }
      const res =
        target === 'noop'
          ? new Response(body)
          : target === 'log'
            ? (await benchLog(failureLine(i)), new Response(body))
          : target === 'upstream'
            ? await fakeUpstream('http://upstream.bench/v2/bench/openai/v1/chat/completions', init)
            : target === 'relay' || target === 'identity'
              ? piped(await fakeUpstream('http://upstream.bench/v2/bench/openai/v1/chat/completions', init), target)
              : target === 'least'
                ? await leastCall(init, env, ctx)
                : await app.fetch(new Request('http://podgate.bench/v1/chat/completions', init), env, ctx)
      status = res.status
      cacheStatus = res.headers.get('x-podgate-cache')
      quotaPolicy = res.headers.get('ratelimit-policy')
      bytes += (await res.arrayBuffer()).byteLength
    }
    // Date.now() is reported so the runner can tell whether workerd's clock moves during pure CPU work.
    // The last response's cache and quota headers show which stages ran.
    return Response.json({ n, status, bytes, cacheStatus, quotaPolicy, clockMs: Date.now() - started })
  },
} satisfies ExportedHandler<Env>
