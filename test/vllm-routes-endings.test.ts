/**
 * How streams of vLLM's other routes end, at the edges an independent review found: a long last event
 * that begins on a tail block boundary, an upstream that holds its connection open after the last event,
 * a native job's text cut mid-event (keep-alives and error events must fall between events), a revocation
 * of such a stream, and Anthropic-shaped errors on every /v1/messages failure path. Each case but the
 * controls failed before its fix.
 */
import { createParser } from 'eventsource-parser'
import type { EventSourceMessage } from 'eventsource-parser'
import { describe, expect, it } from 'vitest'
import type { GatewayOptions } from '../src/index.ts'
import { createRunpodEmulator } from '../src/testing/index.ts'
import { pipeOpenAIStream } from '../src/streaming/openai-pipe.ts'
import { DIALECTS } from '../src/streaming/dialects.ts'
import { revocableStream } from '../src/auth/stream-revocation.ts'
import { GatewayError } from '../src/errors/index.ts'
import type { RelayOutcome } from '../src/streaming/openai-relay.ts'
import type { Usage } from '../src/streaming/openai-chunks.ts'
import { authed, harness, RUNPOD_KEY, scriptedUpstream } from './helpers.ts'

const SERVED = 'org/Served-Model-8B'
const MODELS: GatewayOptions['models'] = {
  openai: { endpoints: [{ endpointId: 'epopenai' }], mode: 'openai', servedModelName: SERVED, maxTokensCap: 1000, defaultMaxTokens: 64 },
  native: { endpoints: [{ endpointId: 'epnative' }], mode: 'native', servedModelName: SERVED },
  held: { endpoints: [{ endpointId: 'epheld' }], mode: 'openai', servedModelName: SERVED, resilience: { timeouts: { idleMs: 300, totalMs: 20_000 } } },
}
const encoder = new TextEncoder()

const usage = { input_tokens: 5, output_tokens: 7, total_tokens: 12 }
const event = (type: string, data: Record<string, unknown>, eol = '\n') => `event: ${type}${eol}data: ${JSON.stringify({ type, ...data })}${eol}${eol}`
const created = event('response.created', { response: { id: 'resp_1', object: 'response', status: 'in_progress', output: [], usage: null }, sequence_number: 0 })
const delta = (text: string, n: number, eol = '\n') => event('response.output_text.delta', { item_id: 'msg_1', output_index: 0, content_index: 0, delta: text, sequence_number: n }, eol)
const completed = (text: string, n: number, eol = '\n') =>
  event('response.completed', { response: { id: 'resp_1', object: 'response', status: 'completed', output: [{ type: 'message', content: [{ type: 'output_text', text }] }], usage }, sequence_number: n }, eol)

/** All events of an SSE text, as a spec-following client (the OpenAI / Anthropic SDKs) reads them. */
function eventsOf(text: string): EventSourceMessage[] {
  const events: EventSourceMessage[] = []
  createParser({ onEvent: (e) => events.push(e) }).feed(text)
  return events
}

/** Every event's data must be JSON, as the SDKs parse it (a corrupted event throws in the SDK). */
function assertEveryEventIsJson(text: string): void {
  for (const e of eventsOf(text)) {
    if (e.data === '[DONE]') continue
    expect(() => JSON.parse(e.data), `event ${e.event} has data ${JSON.stringify(e.data.slice(0, 120))}`).not.toThrow()
  }
}

/** Pipes `chunks` (a JavaScript stream, as an in-process upstream's) through pipeOpenAIStream in `dialect`. */
async function pipe(chunks: string[], dialect = DIALECTS.responses) {
  const queue = chunks.map((c) => encoder.encode(c))
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      const next = queue.shift()
      if (next === undefined) controller.close()
      else controller.enqueue(next)
    },
  })
  let end: RelayOutcome | undefined
  let seen: Usage | undefined
  const stream = pipeOpenAIStream({ body, abortUpstream: () => undefined, dialect, onEnd: (o) => (end = o), onUsage: (u) => (seen = u) })
  const text = await new Response(stream).text()
  await expect.poll(() => end, { timeout: 2_000 }).toBeDefined()
  return { text, end: end!, usage: seen }
}

/** A Responses stream whose `response.completed` event (longer than the 16 KiB tail) begins at byte `at`. */
function responsesWithLastEventAt(at: number, finalText: string, eol = '\n'): string[] {
  const head = [created]
  let length = created.length
  let n = 1
  // Whole 1000-byte-ish delta events, then one padding delta to land exactly on `at`.
  while (at - length > 2_000) {
    const piece = delta('y'.repeat(900), n++, eol)
    head.push(piece)
    length += piece.length
  }
  const base = delta('', n, eol).length
  head.push(delta('z'.repeat(at - length - base), n++, eol))
  const whole = head.join('')
  expect(whole.length).toBe(at)
  const text = whole + completed(finalText, n, eol)
  // Cut into 1000-byte chunks, as a network would.
  const chunks: string[] = []
  for (let i = 0; i < text.length; i += 1000) chunks.push(text.slice(i, i + 1000))
  return chunks
}

/** message_start as vLLM writes it: the prompt's count, no output yet. */
const MESSAGE_START = `event: message_start\ndata: ${JSON.stringify({ type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', model: SERVED, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 0 } } })}\n\n`

/** response.in_progress as vLLM writes it, right after response.created, before the model runs. */
const inProgress = event('response.in_progress', { response: { id: 'resp_1', object: 'response', status: 'in_progress', output: [], usage: null }, sequence_number: 1 })
/** A GenerationError in a Responses stream, as vLLM writes it (OpenAI's ResponseErrorEvent). */
const RESPONSES_ERROR = event('error', { code: 'internal_error', message: 'CUDA out of memory', param: null, sequence_number: 2 })
/** A `/v1/messages` stream (max_tokens 500) over an upstream that sends `pieces` (then holds its connection `holdMs`): what the caller read, and the tokens its key was charged. */
async function messagesStream(pieces: string[], holdMs?: number): Promise<{ text: string; tokens: number }> {
  const upstream = scriptedUpstream(() => pieces, holdMs === undefined ? {} : { holdMs })
  const h = harness({ models: MODELS, fetch: upstream.fetch, quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
  const { key } = await h.createKey({ name: 'messages', quota: { tokensPerMinute: 100_000 } })
  const res = await h.fetch('/v1/messages', { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'held', max_tokens: 500, messages: [{ role: 'user', content: 'Hi' }], stream: true }) })
  const text = await res.text()
  await h.settle()
  const report = (await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number } } }
  return { text, tokens: report.windows.minute.tokens }
}

describe('openai-pipe tailBlocks: a long last event that begins on a 16 KiB block boundary', () => {
  // The tail drops whole 16 KiB blocks that end at or before the last event's start, then readTail (whole =
  // false) skips everything up to the FIRST blank line, assuming its first event was cut. When the kept
  // tail begins exactly at the last event (or one byte before it), that skip drops the whole
  // response.completed event: a complete answer is flagged as cut, gets an error event and no usage.
  it.each([32_768, 32_769, 49_152])('a whole Responses stream whose response.completed begins at byte %i settles as whole, with its usage', async (at) => {
    const chunks = responsesWithLastEventAt(at, 'x'.repeat(20_000))
    const { text, end, usage: seen } = await pipe(chunks)
    expect(end).toMatchObject({ ok: true })
    expect(seen).toEqual({ prompt_tokens: 5, completion_tokens: 7, total_tokens: 12 })
    expect(text).toBe(chunks.join(''))
  })

  // Found in the held-connection review: the last event was taken to begin after the second-to-last blank
  // line, so a keep-alive comment or a blank line after a response.completed longer than the tail moved it
  // there and the tail let go of the event's start: a whole answer was read as cut, with no usage.
  it.each([': keep-alive\n\n', '\n', '\r\n', ': a\n\n: b\n\n\n'])('a long response.completed followed by %j is whole, with its usage', async (after) => {
    const chunks = [...responsesWithLastEventAt(40_000, 'x'.repeat(40_000)), after]
    const { text, end, usage: seen } = await pipe(chunks)
    expect(end).toMatchObject({ ok: true })
    expect(seen).toEqual({ prompt_tokens: 5, completion_tokens: 7, total_tokens: 12 })
    expect(text).toBe(chunks.join(''))
  })

  it('control: the same stream with the last event 2 bytes later is whole', async () => {
    const { end } = await pipe(responsesWithLastEventAt(32_770, 'x'.repeat(20_000)))
    expect(end).toMatchObject({ ok: true })
  })

  it('end to end: /v1/responses relays a whole answer and appends no error event', async () => {
    const pieces = responsesWithLastEventAt(32_768, 'x'.repeat(20_000))
    const upstream = scriptedUpstream(() => pieces)
    const h = harness({ models: MODELS, fetch: upstream.fetch }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
    const { key } = await h.createKey()
    const text = await (await h.fetch('/v1/responses', authed(key, JSON.stringify({ model: 'openai', input: 'Hi', stream: true })))).text()
    expect(text.slice(pieces.join('').length)).toBe('')
  })
})

describe('openai-pipe: a Responses or Messages upstream that holds its connection open after its last event', () => {
  // Found in review: the Responses dialect had no check of its last bytes for its ending, so the idle
  // timeout cut an answer that was already whole, appended an error event after response.completed and
  // settled it as failed.
  it('past the idle timeout: a whole answer, nothing written after response.completed, usage from the answer', async () => {
    const pieces = [created, delta('Hel', 1), delta('lo', 2), completed('Hello', 3)]
    const upstream = scriptedUpstream(() => pieces, { holdMs: 3_000 })
    const h = harness({ models: MODELS, fetch: upstream.fetch, quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
    const { key } = await h.createKey({ name: 'held', quota: { tokensPerMinute: 100_000 } })
    const text = await (await h.fetch('/v1/responses', authed(key, JSON.stringify({ model: 'held', input: 'Hi', stream: true })))).text()
    expect(text).toBe(pieces.join(''))
    await h.settle()
    const report = (await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number } } }
    expect(report.windows.minute.tokens).toBe(12)
  })

  // Found in the held-connection review: a keep-alive comment or a blank line from a proxy after the last
  // event hid it from the pipe, so the timeout cut the whole answer and wrote podgate's error event after it.
  it('keep-alives after the last event of a held Responses or Messages stream: whole, nothing of podgate\'s after them, usage from the answer', async () => {
    const keepAlives = [': keep-alive\n\n', '\n']
    const responses = [created, delta('Hel', 1), delta('lo', 2), completed('Hello', 3), ...keepAlives]
    const upstream = scriptedUpstream(() => responses, { holdMs: 3_000 })
    const h = harness({ models: MODELS, fetch: upstream.fetch, quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
    const { key } = await h.createKey({ name: 'held', quota: { tokensPerMinute: 100_000 } })
    expect(await (await h.fetch('/v1/responses', authed(key, JSON.stringify({ model: 'held', input: 'Hi', stream: true })))).text()).toBe(responses.join(''))
    await h.settle()
    const report = (await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number } } }
    expect(report.windows.minute.tokens).toBe(12)
    const messages = [
      MESSAGE_START,
      'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}\n\n',
      'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":5,"output_tokens":7}}\n\n',
      'event: message_stop\ndata: {"type":"message_stop"}\n\n',
      ...keepAlives,
    ]
    expect(await messagesStream(messages, 3_000)).toEqual({ text: messages.join(''), tokens: 12 })
  })

  // Current vLLM (anthropic/serving.py) ends a Messages stream with `message_stop` and no `[DONE]`: the
  // same held connection cut that answer, appended `event: error` after message_stop (which the Anthropic
  // SDK throws on) and charged the reserved max_tokens instead of the usage it read.
  it('a Messages stream ending with message_stop and no [DONE], held past the idle timeout: whole, nothing after message_stop, usage from the answer', async () => {
    const pieces = [
      MESSAGE_START,
      'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
      'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}\n\n',
      'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
      'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":5,"output_tokens":7}}\n\n',
      'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    ]
    const { text, tokens } = await messagesStream(pieces, 3_000)
    expect(text).toBe(pieces.join(''))
    expect(tokens).toBe(12)
  })

  // Found in the accounting review: message_start's usage (the prompt's count, output_tokens 0) was taken
  // for the answer's, so a Messages stream cut after its output, before message_delta, was charged the prompt only.
  it('a Messages stream cut after some output, before message_delta, is charged message_start\'s prompt count and its events, not its reservation nor the prompt count alone', async () => {
    const pieces = [
      MESSAGE_START,
      'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
      'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}\n\n',
    ]
    const { text, tokens } = await messagesStream(pieces)
    expect(text).toContain('event: error')
    // Its 3 events (about a token each) and vLLM's prompt count from message_start (5, where podgate's
    // estimate is 3): vLLM sends no output count before message_delta.
    expect(tokens).toBe(8)
  })

  // vLLM's anthropic/serving.py writes message_start at the chat stream's first chunk (its role chunk,
  // before any token) and an error event when generation then fails: no output came, so, as an OpenAI
  // stream whose first event is an error, it counts the prompt (message_start's count), not the reserved max_tokens.
  it('a Messages stream whose message_start is followed by an error counts its prompt only', async () => {
    const pieces = [
      MESSAGE_START,
      'event: error\ndata: {"type":"error","error":{"type":"internal_error","message":"CUDA out of memory"}}\n\n',
    ]
    const { text, tokens } = await messagesStream(pieces)
    expect(text).toContain('CUDA out of memory')
    expect(tokens).toBe(5)
  })

  // vLLM's first Anthropic route (anthropic/serving_messages.py, the one that wrote `[DONE]`) put message_start's usage beside
  // `message`, not in it, and ended a failed stream with `data: [DONE]`: its prompt count was not read, and
  // a stream that failed before any output was charged podgate's estimate (3 here) instead of vLLM's count.
  it('an older vLLM\'s message_start (usage beside `message`) followed by an error counts vLLM\'s prompt count', async () => {
    const start = `event: message_start\ndata: ${JSON.stringify({ type: 'message_start', message: { id: 'msg_1', content: [], model: SERVED }, usage: { input_tokens: 40, output_tokens: 0 } })}\n\n`
    const error = 'event: error\ndata: {"type":"error","error":{"type":"internal_error","message":"CUDA out of memory"}}\n\ndata: [DONE]\n\n'
    const { text, tokens } = await messagesStream([start, error])
    expect(text).toContain('CUDA out of memory')
    expect(tokens).toBe(40)
  })

  // vLLM's responses/serving.py writes response.created and response.in_progress before it runs the model,
  // and a GenerationError as an `error` event: no output came, so the stream counts its prompt (the
  // estimate: no event holds vLLM's count), not the reserved max_output_tokens.
  it('a Responses stream whose response.created and response.in_progress are followed by an error counts its prompt only', async () => {
    const upstream = scriptedUpstream(() => [created, inProgress, RESPONSES_ERROR])
    const h = harness({ models: MODELS, fetch: upstream.fetch, quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
    const { key } = await h.createKey({ name: 'responses', quota: { tokensPerMinute: 100_000 } })
    const res = await h.fetch('/v1/responses', authed(key, JSON.stringify({ model: 'held', input: 'Hi', max_output_tokens: 500, stream: true })))
    expect(await res.text()).toContain('CUDA out of memory')
    await h.settle()
    const report = (await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number } } }
    expect(report.windows.minute.tokens).toBeLessThan(10)
  })
})

describe('native job streams of a dialect (current worker: SSE text cut anywhere)', () => {
  /** A job whose `/stream` pages hold `items` (one page each; `undefined` = an empty page), COMPLETED with the last. */
  function jobUpstream(items: unknown[]) {
    let page = 0
    const fetchFake = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
      const request = new Request(input, init)
      const op = new URL(request.url).pathname.split('/').slice(3).join('/')
      if (request.method === 'POST') await request.text()
      if (op === 'run') return Response.json({ id: 'job1', status: 'IN_QUEUE' })
      if (op.startsWith('stream/')) {
        const item = items[page++]
        return Response.json({ status: page >= items.length ? 'COMPLETED' : 'IN_PROGRESS', stream: item === undefined ? [] : [{ output: item }] })
      }
      if (op.startsWith('status/')) return Response.json({ id: 'job1', status: 'FAILED', error: 'worker died' })
      if (op.startsWith('cancel/')) return Response.json({ id: 'job1', status: 'CANCELLED' })
      return new Response('not found', { status: 404 })
    }
    return harness({ models: MODELS, fetch: fetchFake as typeof fetch, quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
  }
  const whole = [created, delta('Hel', 1), delta('lo', 2), completed('Hello', 3)].join('')
  const body = JSON.stringify({ model: 'native', input: 'Hi', stream: true })

  // streamRest emits `: keep-alive\n\n` after an empty page: harmless between whole OpenAI chunks, but a
  // current worker's item may end mid-line, and the keep-alive then lands inside that event's data line.
  it('an empty page after an item that ends mid-event writes no keep-alive inside the event', async () => {
    const h = jobUpstream([whole.slice(0, 37), undefined, whole.slice(37)])
    const { key } = await h.createKey()
    const text = await (await h.fetch('/v1/responses', authed(key, body))).text()
    assertEveryEventIsJson(text)
    expect(text.replaceAll(': keep-alive\n\n', '')).toBe(whole)
  })

  // drive() emits the dialect's error event right after the last bytes relayed; the pipe path writes
  // `\n\n` first for exactly this reason, the native path does not.
  it('a job that completes mid-event ends with an error event the SDK can read (its own event, valid JSON)', async () => {
    const h = jobUpstream([whole.slice(0, 100)])
    const { key } = await h.createKey()
    const text = await (await h.fetch('/v1/responses', authed(key, body))).text()
    const events = eventsOf(text)
    expect(events.at(-1)?.event).toBe('error')
    expect(JSON.parse(events.at(-1)!.data)).toMatchObject({ type: 'error', code: 'upstream_error' })
  })

  // As on the pipe (above): vLLM writes message_start at the role chunk, before any token; an error then
  // is a failure before output, which counts the prompt (message_start's count), not the reservation.
  it('a Messages job whose message_start is followed by an error counts its prompt only', async () => {
    const start = MESSAGE_START
    const h = jobUpstream([start, 'event: error\ndata: {"type":"error","error":{"type":"internal_error","message":"CUDA out of memory"}}\n\n'])
    const { key } = await h.createKey({ name: 'failed', quota: { tokensPerMinute: 100_000 } })
    const res = await h.fetch('/v1/messages', { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'native', max_tokens: 500, messages: [{ role: 'user', content: 'Hi' }], stream: true }) })
    expect(await res.text()).toContain('CUDA out of memory')
    await h.settle()
    const report = (await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number } } }
    expect(report.windows.minute.tokens).toBe(5)
  })

  it('a Responses job whose response.created and response.in_progress are followed by an error counts its prompt only', async () => {
    const h = jobUpstream([created + inProgress, RESPONSES_ERROR])
    const { key } = await h.createKey({ name: 'failed', quota: { tokensPerMinute: 100_000 } })
    const res = await h.fetch('/v1/responses', authed(key, JSON.stringify({ model: 'native', input: 'Hi', max_output_tokens: 500, stream: true })))
    expect(await res.text()).toContain('CUDA out of memory')
    await h.settle()
    const report = (await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number } } }
    expect(report.windows.minute.tokens).toBeLessThan(10)
  })

  it('a job that FAILS mid-event ends with an error event of its own', async () => {
    let pages = 0
    const fetchFake = async (input: RequestInfo | URL, init?: RequestInit) => {
      const request = new Request(input, init)
      const op = new URL(request.url).pathname.split('/').slice(3).join('/')
      if (request.method === 'POST') await request.text()
      if (op === 'run') return Response.json({ id: 'job1', status: 'IN_QUEUE' })
      if (op.startsWith('stream/')) {
        pages++
        return pages === 1 ? Response.json({ status: 'IN_PROGRESS', stream: [{ output: whole.slice(0, 100) }] }) : Response.json({ status: 'FAILED', stream: [] })
      }
      if (op.startsWith('status/')) return Response.json({ id: 'job1', status: 'FAILED', error: 'worker died' })
      return Response.json({})
    }
    const h = harness({ models: MODELS, fetch: fetchFake as typeof fetch }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
    const { key } = await h.createKey()
    const text = await (await h.fetch('/v1/responses', authed(key, body))).text()
    const events = eventsOf(text)
    expect(events.at(-1)?.event).toBe('error')
    expect(JSON.parse(events.at(-1)!.data)).toMatchObject({ type: 'error', message: expect.stringContaining('worker died') })
  })
})

describe('revocableStream on a body without a StreamControl (the native job stream)', () => {
  // controlledStream.end enqueues the error event with no blank line before it: after a dialect stream's
  // half-sent event (a current worker's item cut mid-line) the SDK reads one corrupted event instead.
  it('ends a stream that stopped mid-event with an error event of its own', async () => {
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(encoder.encode(created + 'event: response.output_text.delta\ndata: {"type":"response.output_t'))
      },
    })
    const errorEvent = DIALECTS.responses.errorEvent(new GatewayError('invalid_api_key', 'revoked'))
    const stream = revocableStream(body, { stillValid: async () => false, intervalMs: 10, errorEvent })
    const text = await new Response(stream).text()
    const events = eventsOf(text)
    expect(events.at(-1)?.event).toBe('error')
    expect(JSON.parse(events.at(-1)!.data)).toMatchObject({ type: 'error', code: 'invalid_api_key' })
  })
})

describe('Anthropic-shaped errors on /v1/messages failure paths', () => {
  const anthropic = { type: 'error', error: { type: expect.any(String), message: expect.any(String) } }
  it('413, bad JSON, a rate limit, an upstream 5xx, all in Anthropic\'s shape', async () => {
    let status = 500
    const fetchFake = (async () => new Response('boom', { status })) as typeof fetch
    const h = harness({ models: MODELS, fetch: fetchFake, maxBodyBytes: 1024, quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
    const { key } = await h.createKey({ name: 'limited', quota: { requestsPerMinute: 2 } })
    const send = (body: string) => h.fetch('/v1/messages', { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body })
    const big = await send(JSON.stringify({ model: 'openai', max_tokens: 5, messages: [{ role: 'user', content: 'x'.repeat(5_000) }] }))
    expect(big.status).toBe(413)
    expect(await big.json()).toEqual(anthropic)
    const bad = await send('{"model":')
    expect(bad.status).toBe(400)
    expect(await bad.json()).toEqual(anthropic)
    const upstream = await send(JSON.stringify({ model: 'openai', max_tokens: 5, messages: [] }))
    expect(upstream.status).toBeGreaterThanOrEqual(500)
    expect(await upstream.json()).toEqual(anthropic)
    status = 500
    await send(JSON.stringify({ model: 'openai', max_tokens: 5, messages: [] }))
    const limited = await send(JSON.stringify({ model: 'openai', max_tokens: 5, messages: [] }))
    expect(limited.status).toBe(429)
    expect(await limited.json()).toEqual({ type: 'error', error: { type: 'rate_limit_error', message: expect.any(String) } })
    const counted = await h.fetch('/v2/openai/openai/v1/messages/count_tokens', { method: 'POST', headers: { 'x-api-key': 'pg_sk_nope', 'content-type': 'application/json' }, body: '{}' })
    expect(counted.status).toBe(401)
    expect(await counted.json()).toEqual({ type: 'error', error: { type: 'authentication_error', message: expect.any(String) } })
  })

  // worker-vllm <= v2.23 words a body AnthropicMessagesRequest refuses as its own error, with no status
  // code: `{'type': 'invalid_request_error', 'message': 'Invalid request format'}`. It is the caller's to fix.
  it("a classic worker's refusal of a Messages body is the caller's 400, not a 502 tried on other endpoints", async () => {
    const h = harness()
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/messages', { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'chat-classic', max_tokens: 5, messages: [{ role: 'system', content: 'Hi' }] }) })
    expect(res.status).toBe(400)
    expect(await res.json()).toEqual({ type: 'error', error: { type: 'invalid_request_error', message: expect.stringContaining('Invalid request format') } })
    expect(h.emulator.calls.filter((c) => c.op === 'run' || c.op === 'runsync')).toHaveLength(1)
  })

  it('a chat stream through the pipe is byte-for-byte as before, [DONE] kept (OpenAI dialect)', async () => {
    const pieces = ['data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}]}\r\n\r\n', 'data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}\n\n', 'data: [DONE]\n\n']
    const upstream = scriptedUpstream(() => pieces)
    const h = harness({ models: { m: { endpoints: [{ endpointId: 'ep' }], mode: 'openai' } }, fetch: upstream.fetch }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'Hi' }], stream: true, stream_options: { include_usage: true } })))
    expect(await res.text()).toBe(pieces.join(''))
  })
})
