/**
 * The least gateway of scripts/bench/least-gateway/plain.js on the stack podgate is built with: a Hono
 * app whose one route checks the key in a middleware (a Map lookup) and validates the chat body with
 * podgate's own zod/mini schema (`chatCompletionRequestSchema`), then forwards it and answers with the
 * upstream's JSON read whole (its usage), or a stream as plain.js's `first` shape does (the first chunk
 * awaited, the rest teed, the copy read to its end). What it adds over the plain shapes is what Hono and
 * the schema cost by themselves; what podgate adds over it is podgate's own features (`npm run bench:latency`).
 */
import { Hono } from 'hono'
import { chatCompletionRequestSchema } from '../../../src/normalize/schemas.ts'

interface Env {
  UPSTREAM: string
  PODGATE_KV: KVNamespace
}

const KEYS = new Map([['bench', { models: ['bench'] }]])

const app = new Hono<{ Bindings: Env; Variables: { models: string[] } }>()
app.use('/v1/*', async (c, next) => {
  const key = KEYS.get((c.req.header('authorization') ?? '').slice('Bearer '.length))
  if (!key) return c.json({ error: { message: 'unknown key' } }, 401)
  c.set('models', key.models)
  await next()
})
app.post('/v1/chat/completions', async (c) => {
  const parsed = chatCompletionRequestSchema.safeParse(await c.req.json())
  if (!parsed.success || !c.var.models.includes(parsed.data.model)) return c.json({ error: { message: 'bad request' } }, 400)
  const res = await fetch(`${c.env.UPSTREAM}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(parsed.data) })
  if (parsed.data.stream && res.body) return afterFirstChunk(c.executionCtx, res, res.body)
  const answer = await res.json()
  return c.json(answer as object, res.status as 200)
})

/** A stream answered once its first chunk came, the rest teed: the caller's branch piped after it, the copy read to its end. */
async function afterFirstChunk(ctx: { waitUntil(promise: Promise<unknown>): void }, res: Response, body: ReadableStream<Uint8Array>): Promise<Response> {
  const reader = body.getReader()
  const first = await reader.read()
  reader.releaseLock()
  const [caller, copy] = body.tee()
  ctx.waitUntil((async () => {
    const rest = copy.getReader()
    while (!(await rest.read()).done);
  })())
  const { readable, writable } = new IdentityTransformStream()
  if (!first.done) {
    const writer = writable.getWriter()
    writer.write(first.value).catch(() => undefined)
    writer.releaseLock()
  }
  ctx.waitUntil(caller.pipeTo(writable))
  return new Response(readable, { status: res.status, headers: res.headers })
}

/**
 * `/featured/v1/chat/completions`: the same, plus the least form of each feature podgate's bench rows
 * run with (a lower bound for them, none of podgate's code): a request id; the key found by its SHA-256
 * in an in-isolate Map (podgate's key-cache hit); a per-key request and token count per minute and day,
 * checked against the limits and published to KV at most once a second from `waitUntil` (as podgate's KV
 * store does, with the others' counts listed in the background once a second), settled from the answer's
 * usage; the eight rate-limit fields and `vary: Origin`; a timeout on the upstream call; a stream in the
 * least shape that ends a cut answer with an error event, keeps memory flat and learns the usage
 * (`leastStream`). For attribution, `?skip=` (a list of `sha`: the raw key looked up instead;
 * `uuid`: no request id; `headers`: no rate-limit fields) and `?publish=0` (no KV) leave a feature out.
 */
const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'))
async function sha256Hex(text: string): Promise<string> {
  let hex = ''
  for (const b of new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text)))) hex += HEX[b]
  return hex
}
const HASHED = new Map<string, { id: string; models: string[] }>()
const COUNTS = new Map<string, { minute: number; day: number; requests: number; tokens: number; dayRequests: number; dayTokens: number }>()
let publishedAt = 0
const featured = new Hono<{ Bindings: Env; Variables: { keyId: string; models: string[] } }>()
featured.use('*', async (c, next) => {
  const skip = c.req.query('skip') ?? ''
  const id = skip.includes('uuid') ? 'x' : crypto.randomUUID()
  const presented = (c.req.header('authorization') ?? '').slice('Bearer '.length)
  if (HASHED.size === 0) {
    const record = { id: 'k1', models: ['bench'] }
    HASHED.set(await sha256Hex('bench'), record).set('bench', record)
  }
  const key = HASHED.get(skip.includes('sha') ? presented : await sha256Hex(presented))
  if (!key) return c.json({ error: { message: 'unknown key' } }, 401)
  c.set('keyId', key.id)
  c.set('models', key.models)
  await next()
  c.res.headers.set('x-request-id', id)
  c.res.headers.append('vary', 'Origin')
})
featured.post('/v1/chat/completions', async (c) => {
  const parsed = chatCompletionRequestSchema.safeParse(await c.req.json())
  if (!parsed.success || !c.var.models.includes(parsed.data.model)) return c.json({ error: { message: 'bad request' } }, 400)
  const now = Date.now()
  const minute = Math.floor(now / 60_000)
  const day = Math.floor(now / 86_400_000)
  let counts = COUNTS.get(c.var.keyId)
  if (!counts || counts.day !== day) COUNTS.set(c.var.keyId, (counts = { minute, day, requests: 0, tokens: 0, dayRequests: 0, dayTokens: 0 }))
  if (counts.minute !== minute) Object.assign(counts, { minute, requests: 0, tokens: 0 })
  const reserve = 512 + (parsed.data.max_tokens ?? 256)
  if (counts.requests >= 1_000_000 || counts.dayTokens + reserve > 1_000_000_000) return c.json({ error: { message: 'rate limited' } }, 429)
  counts.requests++
  counts.dayRequests++
  counts.dayTokens += reserve
  if (now - publishedAt >= 1000 && c.req.query('publish') !== '0') {
    publishedAt = now
    const kv = c.env.PODGATE_KV
    c.executionCtx.waitUntil(Promise.all([
      kv.put(`quota:${c.var.keyId}:s:s`, '', { metadata: { m: minute, r: counts.requests, t: counts.tokens, d: day, dr: counts.dayRequests, dt: counts.dayTokens }, expirationTtl: 86_460 }),
      kv.list({ prefix: `quota:${c.var.keyId}:` }),
    ]))
  }
  const res = await fetch(`${c.env.UPSTREAM}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(parsed.data), signal: AbortSignal.timeout(600_000) })
  const settle = (used: number) => {
    counts.tokens += used
    counts.dayTokens += used - reserve
  }
  let response: Response
  if (parsed.data.stream && res.body) response = await leastStream(c.executionCtx, res, res.body, (used) => settle(used ?? reserve))
  else {
    const answer = (await res.json()) as { usage?: { total_tokens?: number } }
    settle(answer.usage?.total_tokens ?? reserve)
    response = c.json(answer as object, res.status as 200)
  }
  const left = 1_000_000 - counts.requests
  if (c.req.query('skip')?.includes('headers')) return response
  const headers = response.headers
  headers.set('ratelimit-policy', '"rpm";q=1000000;w=60, "tpd";q=1000000000;w=86400')
  headers.set('ratelimit', `"rpm";r=${left};t=${60 - (Math.floor(now / 1000) % 60)}, "tpd";r=${1_000_000_000 - counts.dayTokens};t=${86_400 - (Math.floor(now / 1000) % 86_400)}`)
  headers.set('x-ratelimit-limit-requests', '1000000')
  headers.set('x-ratelimit-remaining-requests', String(left))
  headers.set('x-ratelimit-reset-requests', `${60 - (Math.floor(now / 1000) % 60)}s`)
  headers.set('x-ratelimit-limit-tokens', '1000000000')
  headers.set('x-ratelimit-remaining-tokens', String(1_000_000_000 - counts.dayTokens))
  headers.set('x-ratelimit-reset-tokens', '1h0m0s')
  return response
})
app.route('/featured', featured)

const TAIL_BYTES = 4096
const CUT_EVENT = new TextEncoder().encode('\n\ndata: {"error":{"message":"The upstream stream ended before the model finished.","type":"upstream_error"}}\n\n')

/**
 * The featured route's stream: the least shape that keeps podgate's promises for a stream (the CPU
 * Worker's `tee-tick`, with the wait for the first chunk). The body is teed before its first chunk, which
 * is read from the copy (so the caller's branch carries every byte natively); the caller's branch is piped
 * into an IdentityTransformStream left open (JavaScript can write after the upstream's last byte, also
 * after the upstream broke: `preventAbort`); the copy is read once every 50 ms, BYOB reads taking what it
 * holds until one leaves room in the buffer (one 64 KiB read a tick would drain at most ~1.3 MB/s: a
 * faster upstream's bytes would pile up in the copy until the end, and memory would grow with the
 * answer), its last bytes kept. At the end the tail tells the usage, settled into the counts, and
 * `[DONE]`: an answer cut before it ends with an error event, not silently.
 */
async function leastStream(ctx: { waitUntil(promise: Promise<unknown>): void }, res: Response, body: ReadableStream<Uint8Array>, settle: (used: number | undefined) => void): Promise<Response> {
  const [out, copy] = body.tee()
  const firstReader = copy.getReader()
  const first = await firstReader.read()
  firstReader.releaseLock()
  let tail = first.value ?? new Uint8Array(0)
  const reader = copy.getReader({ mode: 'byob' })
  let buffer = new ArrayBuffer(65536)
  let reading: Promise<boolean> | undefined
  /** Bytes the last read brought: fewer than the buffer holds means the copy is drained. */
  let last = 0
  const readOnce = () =>
    (reading ??= reader.read(new Uint8Array(buffer)).then(
      (next) => {
        reading = undefined
        if (next.done || !next.value) return true
        buffer = next.value.buffer as ArrayBuffer
        last = next.value.byteLength
        const kept = new Uint8Array(Math.min(TAIL_BYTES, tail.byteLength + next.value.byteLength))
        const fromRead = Math.min(kept.byteLength, next.value.byteLength)
        kept.set(tail.subarray(tail.byteLength - (kept.byteLength - fromRead)), 0)
        kept.set(next.value.subarray(next.value.byteLength - fromRead), kept.byteLength - fromRead)
        tail = kept
        return false
      },
      () => true,
    ))
  let draining: Promise<void> | undefined
  const drain = async () => {
    while (!(await readOnce()) && last === buffer.byteLength);
  }
  const timer = setInterval(() => void (draining ??= drain().finally(() => (draining = undefined))), 50)
  const { readable, writable } = new IdentityTransformStream()
  ctx.waitUntil(
    out.pipeTo(writable, { preventClose: true, preventAbort: true }).catch(() => undefined).then(async () => {
      clearInterval(timer)
      while (!(await readOnce()));
      const text = new TextDecoder().decode(tail)
      const usage = text.match(/"total_tokens":(\d+)/g)?.at(-1)
      settle(usage ? Number(usage.slice('"total_tokens":'.length)) : undefined)
      const writer = writable.getWriter()
      if (!text.includes('data: [DONE]')) await writer.write(CUT_EVENT).catch(() => undefined)
      await writer.close().catch(() => undefined)
    }),
  )
  return new Response(readable, { status: res.status, headers: res.headers })
}

export default app
// wrangler.toml's [env.dev] binds the strict quota store's Durable Object, which the bundle must export.
export { QuotaObject } from '../../../src/durable-objects.ts'
