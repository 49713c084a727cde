import { describe, expect, it } from 'vitest'
import { createOpenAIRelay, rewriteChunkText, jsonStringContent } from './openai-relay.ts'
import type { OpenAIRelayOptions } from './openai-relay.ts'
import { countedUsage } from './openai-chunks.ts'
import type { Usage } from './openai-chunks.ts'
import {
  bodyOf,
  bytesOf,
  contentOf,
  cutRandom,
  PIECES,
  PROMPT_TOKENS,
  readText,
  sseData,
  TEXT,
  UPSTREAM_MODEL,
  vllmEvents,
  vllmStream,
} from './__fixtures__/vllm.ts'
import { streamControl } from './stream-control.ts'
import { GatewayError } from '../errors/index.ts'
import type { RelayOutcome } from './openai-relay.ts'

const ALIAS = 'llama-8b'
const USAGE: Usage = { prompt_tokens: PROMPT_TOKENS, completion_tokens: PIECES.length, total_tokens: PROMPT_TOKENS + PIECES.length }

async function relay(chunks: Uint8Array[], options: Partial<OpenAIRelayOptions> = {}, failWith?: Error) {
  const usages: Usage[] = []
  const body = bodyOf(chunks, failWith)
  const text = await readText(
    createOpenAIRelay({
      source: body.getReader(),
      model: ALIAS,
      includeUsage: false,
      onUsage: (usage) => usages.push(usage),
      ...options,
    }),
  )
  return { text, usages, data: sseData(text) }
}

/** vLLM's stream as the relay should write it: model renamed, nothing else touched. */
function expected(options: { includeUsage: boolean; eol?: string }): string {
  return vllmEvents({ eol: options.eol })
    .filter((event) => options.includeUsage || !event.includes('"choices":[]'))
    .map((event) => event.replaceAll(`"model":"${UPSTREAM_MODEL}"`, `"model":"${ALIAS}"`).replaceAll('\r\n', '\n'))
    .join('')
}

describe('createOpenAIRelay', () => {
  it('relays a vLLM stream byte for byte apart from the model, keeping usage for podgate', async () => {
    const result = await relay([bytesOf(vllmStream())])
    expect(result.text).toBe(expected({ includeUsage: false }))
    expect(result.usages).toEqual([USAGE])
    expect(result.data.at(-1)).toBe('[DONE]')
  })

  it('keeps the usage chunk, renamed, when the caller asked for it', async () => {
    const result = await relay([bytesOf(vllmStream())], { includeUsage: true })
    expect(result.text).toBe(expected({ includeUsage: true }))
    expect(JSON.parse(result.data.at(-2) ?? '')).toEqual({
      id: 'chatcmpl-9f2c1e',
      object: 'chat.completion.chunk',
      created: 1_700_000_000,
      model: ALIAS,
      choices: [],
      usage: { prompt_tokens: PROMPT_TOKENS, total_tokens: USAGE.total_tokens, completion_tokens: USAGE.completion_tokens },
    })
    expect(result.usages).toEqual([USAGE])
  })

  it('gives the same output for bytes cut one at a time and at random, multibyte characters included', async () => {
    const bytes = bytesOf(vllmStream())
    const one = await relay(Array.from(bytes, (byte) => Uint8Array.of(byte)))
    expect(one.text).toBe(expected({ includeUsage: false }))
    for (const seed of [5, 6, 7]) {
      const random = await relay(cutRandom(bytes, seed, 9))
      expect(random.text).toBe(expected({ includeUsage: false }))
      expect(contentOf(random.data.slice(0, -1))).toEqual([TEXT])
    }
  })

  it('reads CRLF streams cut inside the CRLF pairs', async () => {
    const bytes = bytesOf(vllmStream({ eol: '\r\n' }))
    const result = await relay(cutRandom(bytes, 11, 3))
    expect(result.text).toBe(expected({ includeUsage: false, eol: '\r\n' }))
  })

  it('passes U+FFFD through', async () => {
    const result = await relay([bytesOf(vllmStream({ pieces: ['a\uFFFDb', '\uFFFD'] }))])
    expect(contentOf(result.data.slice(0, -1))).toEqual(['a\uFFFDb\uFFFD'])
  })

  it('renames models that need escaping, and passes a stream through when the name already matches', async () => {
    const odd = 'my "quoted" model\\ü'
    const result = await relay([bytesOf(vllmStream())], { model: odd })
    expect(result.data.slice(0, -1).map((data) => (JSON.parse(data) as { model: string }).model)).toEqual(
      Array(result.data.length - 1).fill(odd),
    )
    const same = await relay([bytesOf(vllmStream({ model: ALIAS }))])
    expect(same.text).toBe(expected({ includeUsage: false }))
  })

  it('ends a stream without [DONE] with an error event and no [DONE]', async () => {
    const result = await relay([bytesOf(vllmEvents({ done: false }).join(''))])
    const last = JSON.parse(result.data.at(-1) ?? '') as { error: { message: string; type: string; code: string } }
    expect(last.error).toMatchObject({ type: 'api_error', code: 'upstream_error' })
    expect(last.error.message).toMatch(/ended before the model finished/)
    expect(result.data).not.toContain('[DONE]')
    expect(contentOf(result.data.slice(0, -1))).toEqual([TEXT])
  })

  it('drops a half-written last event and ends with an error', async () => {
    const text = vllmStream()
    const cut = text.slice(0, text.indexOf('"content":" wör"') + 5)
    const result = await relay([bytesOf(cut)])
    expect(result.text.endsWith('\n\n')).toBe(true)
    expect(contentOf(result.data.slice(0, -1))).toEqual(['Hello,'])
    expect(result.data.at(-1)).toMatch(/^\{"error":/)
  })

  it('turns a vLLM error event into podgate error event, without the [DONE] vLLM sends after it', async () => {
    for (const event of [
      'data: {"error":{"message":"CUDA out of memory","type":"InternalServerError","code":500}}\n\n',
      'data: {"object":"error","message":"CUDA out of memory","type":"InternalServerError","param":null,"code":500}\n\n',
    ]) {
      const result = await relay([bytesOf(vllmEvents().slice(0, 3).join('') + event + 'data: [DONE]\n\n')])
      expect(result.data).toHaveLength(4)
      expect(JSON.parse(result.data[3] ?? '')).toEqual({
        error: { message: 'The model worker failed: CUDA out of memory', type: 'api_error', param: null, code: 'upstream_error' },
      })
    }
  })

  it('ends with an error event when the upstream body breaks mid-way, keeping what was relayed', async () => {
    const events = vllmEvents()
    const result = await relay([bytesOf(events.slice(0, 4).join('')), bytesOf(events[4]?.slice(0, 20) ?? '')], {}, new TypeError('network connection lost'))
    expect(contentOf(result.data.slice(0, -1))).toEqual(['Hello,'])
    expect(JSON.parse(result.data.at(-1) ?? '')).toMatchObject({ error: { code: 'upstream_error', message: expect.stringMatching(/connection broke/) } })
    expect(result.data).not.toContain('[DONE]')
  })

  it('ends with an error event on an event that is not JSON, and stops reading upstream', async () => {
    const body = bodyOf([bytesOf('data: {"id":"x",\n\n'), ...vllmEvents().map(bytesOf)])
    const data = sseData(await readText(createOpenAIRelay({ source: body.getReader(), model: ALIAS, includeUsage: false })))
    expect(data).toHaveLength(1)
    expect(data[0]).toMatch(/not JSON/)
    await new Promise((resolve) => setTimeout(resolve, 0))
    expect(body.cancelled()).toBeDefined()
  })

  it('cancels the upstream body when the caller goes away', async () => {
    const events = vllmEvents().map(bytesOf)
    const body = bodyOf(events)
    const reader = createOpenAIRelay({ source: body.getReader(), model: ALIAS, includeUsage: false }).getReader()
    await reader.read()
    await reader.cancel('client gone')
    await new Promise((resolve) => setTimeout(resolve, 0))
    expect(body.cancelled()).toBe('client gone')
  })

  it('applies backpressure instead of buffering the whole upstream', async () => {
    let pulled = 0
    const events = vllmEvents().map(bytesOf)
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        const next = events[pulled++]
        if (next) controller.enqueue(next)
        else controller.close()
      },
    })
    // Unbatched, so every read the caller makes maps to the upstream reads it caused.
    const reader = createOpenAIRelay({ source: body.getReader(), model: ALIAS, includeUsage: false, batchMs: 0 }).getReader()
    await reader.read()
    await new Promise((resolve) => setTimeout(resolve, 10))
    expect(pulled).toBeLessThan(8)
    let rest = 0
    while (!(await reader.read()).done) rest++
    expect(rest).toBeGreaterThan(5)
  })

  it('reads on only until its batch is sent when the caller stops reading', async () => {
    const event = vllmEvents().map(bytesOf)[1]!
    let pulled = 0
    let gated = true
    const gates: Array<() => void> = []
    // From the third chunk on, each waits for the test to let it through (then, all at once); 500 in all.
    const body = new ReadableStream<Uint8Array>(
      {
        async pull(controller) {
          if (++pulled > 500) return controller.close()
          if (gated && pulled > 2) await new Promise<void>((resolve) => gates.push(resolve))
          controller.enqueue(event)
        },
      },
      { highWaterMark: 0 },
    )
    const reader = createOpenAIRelay({ source: body.getReader(), model: ALIAS, includeUsage: false, batchMs: 30 }).getReader()
    await reader.read()
    // The second chunk is held for its window while the relay's next read waits: the batch timer answers.
    await reader.read()
    expect(pulled).toBe(3)
    // The caller reads nothing more. Every chunk is now at hand at once: the relay takes the one it had
    // asked for and stops, instead of reading the upstream on for a caller who is not asking.
    gated = false
    for (const open of gates) open()
    await new Promise((resolve) => setTimeout(resolve, 100))
    expect(pulled).toBe(3)
    await reader.cancel()
  })
})

describe('createOpenAIRelay batching', () => {
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

  /** Reads the relay to its end, noting each read's text and when it came (ms after the start). */
  async function reads(stream: ReadableStream<Uint8Array>) {
    const started = Date.now()
    const decoder = new TextDecoder()
    const reader = stream.getReader()
    const got: Array<{ text: string; at: number }> = []
    for (;;) {
      const next = await reader.read()
      if (next.done) return got
      got.push({ text: decoder.decode(next.value), at: Date.now() - started })
    }
  }

  /** An upstream that sends each group of chunks at once, `gapMs` after the previous group. */
  function groups(parts: Uint8Array[][], gapMs: number): ReadableStream<Uint8Array> {
    let index = 0
    return new ReadableStream<Uint8Array>({
      async start(controller) {
        for (const group of parts) {
          if (index++ > 0) await sleep(gapMs)
          for (const chunk of group) controller.enqueue(chunk)
        }
        controller.close()
      },
    })
  }

  it('sends the first output at once and a burst behind it as one write, whole and in order', async () => {
    const events = vllmEvents().map(bytesOf)
    const got = await reads(createOpenAIRelay({ source: bodyOf(events).getReader(), model: ALIAS, includeUsage: false, batchMs: 20 }))
    expect(got.map((read) => read.text).join('')).toBe(expected({ includeUsage: false }))
    expect(sseData(got[0]!.text)).toHaveLength(1)
    // Eleven tokens and [DONE]: the first alone, the rest in one or two writes (the last ends with [DONE]).
    expect(got.length).toBeLessThanOrEqual(3)
  })

  it('sends a chunk that comes after a quiet spell at once, without waiting for a window', async () => {
    const events = vllmEvents().map(bytesOf)
    const got = await reads(createOpenAIRelay({ source: groups(events.map((event) => [event]), 30).getReader(), model: ALIAS, includeUsage: false, batchMs: 10 }))
    expect(got.map((read) => read.text).join('')).toBe(expected({ includeUsage: false }))
    // One write per upstream event (the usage chunk is stripped, so [DONE] arrives alone too).
    expect(got.length).toBe(events.length - 1)
  })

  it('sends a held batch when its window ends, while the upstream is still silent', async () => {
    const [head, ...rest] = vllmEvents().map(bytesOf)
    // The first event (the role, no text yet), then two tokens at once, then a pause far longer than the window.
    const upstream = groups([[head!, rest[0]!, rest[1]!], rest.slice(2)], 400)
    const got = await reads(createOpenAIRelay({ source: upstream.getReader(), model: ALIAS, includeUsage: false, batchMs: 30 }))
    expect(got.map((read) => read.text).join('')).toBe(expected({ includeUsage: false }))
    expect(sseData(got[0]!.text)).toHaveLength(1)
    // The two tokens held behind it went out at the window's end, long before the upstream spoke again.
    expect(sseData(got[1]!.text)).toHaveLength(2)
    expect(contentOf(sseData(got[1]!.text).map((data) => JSON.parse(data)))).toEqual([PIECES[0]! + PIECES[1]!])
    expect(got[1]!.at).toBeLessThan(300)
    expect(got[2]!.at).toBeGreaterThanOrEqual(390)
  })

  it('sends a batch once it holds 16 KiB, however soon, so a fast upstream is never buffered whole', async () => {
    const piece = 'y'.repeat(5000)
    const event = (content: string) => bytesOf(`data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: ALIAS, choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`)
    const chunks = [...Array.from({ length: 40 }, () => event(piece)), bytesOf('data: [DONE]\n\n')]
    // An in-isolate upstream (every read resolves at once) and a 60 s window: only the size bound sends batches.
    const got = await reads(createOpenAIRelay({ source: bodyOf(chunks).getReader(), model: ALIAS, includeUsage: false, batchMs: 60_000 }))
    expect(got.map((read) => read.text).join('')).toBe(chunks.map((chunk) => new TextDecoder().decode(chunk)).join(''))
    for (const read of got) expect(read.text.length).toBeLessThan(16 * 1024 + 5200)
    expect(got.length).toBeGreaterThanOrEqual(10)
  })

  it('sends a held batch before the ending when the idle timeout, a revocation or the caller ends the stream', async () => {
    const [head, ...rest] = vllmEvents().map(bytesOf)
    // The role, two tokens at once, then silence: the two tokens are held for a 10 s window.
    const silent = () => {
      let cancelled: unknown
      const stream = new ReadableStream<Uint8Array>({
        start(controller) {
          for (const chunk of [head!, rest[0]!, rest[1]!]) controller.enqueue(chunk)
        },
        cancel(reason) {
          cancelled = reason ?? 'cancelled'
        },
      })
      return { stream, cancelled: () => cancelled }
    }
    const held = [PIECES[0]! + PIECES[1]!]
    const textOf = (data: string[]) => contentOf(data.filter((d) => !d.includes('"error"')).map((d) => JSON.parse(d)))

    // The idle timeout: the held tokens, then the timeout's error event.
    const idle = silent()
    const timedOut = await reads(createOpenAIRelay({ source: idle.stream.getReader(), model: ALIAS, includeUsage: false, batchMs: 10_000, idleMs: 40 }))
    const idleData = sseData(timedOut.map((read) => read.text).join(''))
    expect(textOf(idleData)).toEqual(held)
    expect(JSON.parse(idleData.at(-1)!).error.code).toBe('upstream_timeout')
    expect(idle.cancelled()).toBeDefined()

    // A revocation through the StreamControl: the held tokens, then its event.
    const revoked = silent()
    const outcomes: RelayOutcome[] = []
    const body = new Response(createOpenAIRelay({ source: revoked.stream.getReader(), model: ALIAS, includeUsage: false, batchMs: 10_000, onEnd: (end) => outcomes.push(end) })).body!
    const reader = body.getReader()
    await reader.read()
    setTimeout(() => streamControl(body)!.end('data: {"error":{"message":"revoked","code":"invalid_api_key"}}\n\n'), 20)
    let after = ''
    for (let next = await reader.read(); !next.done; next = await reader.read()) after += new TextDecoder().decode(next.value)
    const revokedData = sseData(after)
    expect(textOf(revokedData)).toEqual(held)
    expect(JSON.parse(revokedData.at(-1)!).error.message).toBe('revoked')
    expect(outcomes).toHaveLength(1)

    // The caller leaving: the held batch is dropped with it, and the upstream is cancelled with its reason.
    const left = silent()
    const gone = createOpenAIRelay({ source: left.stream.getReader(), model: ALIAS, includeUsage: false, batchMs: 10_000 }).getReader()
    await gone.read()
    const pending = gone.read()
    await new Promise((resolve) => setTimeout(resolve, 20))
    await gone.cancel('caller gone')
    expect((await pending).done).toBe(true)
    expect(left.cancelled()).toBe('caller gone')
  })

  it('sends [DONE] and an error event at once, with what was held before them', async () => {
    const events = vllmEvents().map(bytesOf)
    const cut = events.slice(0, 4)
    // A 10 s window: the endings must not wait for it.
    const got = await reads(createOpenAIRelay({ source: bodyOf(cut, new Error('reset')).getReader(), model: ALIAS, includeUsage: false, batchMs: 10_000 }))
    const data = sseData(got.map((read) => read.text).join(''))
    expect(data).toHaveLength(5)
    expect(JSON.parse(data[4]!).error.message).toMatch(/broke before the model finished/)
    expect(got.at(-1)!.at).toBeLessThan(1000)
    const whole = await reads(createOpenAIRelay({ source: bodyOf(events).getReader(), model: ALIAS, includeUsage: false, batchMs: 10_000 }))
    expect(whole.map((read) => read.text).join('')).toBe(expected({ includeUsage: false }))
    expect(whole.at(-1)!.at).toBeLessThan(1000)
  })
})

describe('createOpenAIRelay timeouts', () => {
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

  /** An upstream that sends `events` with `gapMs` between them, then stalls forever. */
  function paced(events: Uint8Array[], gapMs: number) {
    let index = 0
    let cancelled = false
    const stream = new ReadableStream<Uint8Array>(
      {
        async pull(controller) {
          const next = events[index++]
          if (!next) return new Promise<void>(() => {})
          if (index > 1) await sleep(gapMs)
          controller.enqueue(next)
        },
        cancel() {
          cancelled = true
        },
      },
      { highWaterMark: 0 },
    )
    return { stream, cancelled: () => cancelled }
  }

  async function run(upstream: ReturnType<typeof paced>, options: Partial<OpenAIRelayOptions>) {
    const outcomes: unknown[] = []
    const text = await readText(
      createOpenAIRelay({ source: upstream.stream.getReader(), model: ALIAS, includeUsage: false, onEnd: (end) => outcomes.push(end), ...options }),
    )
    return { data: sseData(text), outcomes }
  }

  it('relays the bytes read before it first, then the rest', async () => {
    const [head, ...rest] = vllmEvents().map(bytesOf)
    const result = await relay(rest, { first: head })
    expect(result.text).toBe(expected({ includeUsage: false }))
  })

  it('lets a stream longer than the idle window through when no single gap reaches it', async () => {
    const upstream = paced(vllmEvents().map(bytesOf), 15)
    const result = await run(upstream, { idleMs: 60 })
    expect(result.data.at(-1)).toBe('[DONE]')
    // The chunks relayed (all but [DONE]): the count that settles a stream with no usage.
    expect(result.outcomes).toEqual([{ ok: true, estimate: countedUsage(vllmEvents().length - 1) }])
  })

  it('ends a stalled stream with an upstream_timeout event, no [DONE], and cancels the upstream', async () => {
    const upstream = paced(vllmEvents().slice(0, 3).map(bytesOf), 0)
    const result = await run(upstream, { idleMs: 40 })
    expect(JSON.parse(result.data.at(-1) ?? '')).toMatchObject({ error: { code: 'upstream_timeout', message: expect.stringMatching(/stopped sending/) } })
    expect(result.data).not.toContain('[DONE]')
    expect(contentOf(result.data.slice(0, -1))).toEqual(['Hello'])
    expect(result.outcomes).toMatchObject([{ ok: false, started: true, error: { code: 'upstream_timeout' } }])
    expect(upstream.cancelled()).toBe(true)
  })

  it('ends a stream that outlives the total deadline, however steady', async () => {
    const events = vllmEvents()
    const upstream = paced([...events.slice(0, 3), ...Array<string>(50).fill(events[1] ?? '')].map(bytesOf), 10)
    const result = await run(upstream, { idleMs: 1_000, totalDeadline: Date.now() + 80 })
    expect(JSON.parse(result.data.at(-1) ?? '')).toMatchObject({ error: { code: 'upstream_timeout', message: expect.stringMatching(/longer than podgate allows/) } })
    expect(upstream.cancelled()).toBe(true)
  })

  it('ends a stream at the total deadline also when the caller reads slower than the model, or stops reading', async () => {
    // An upstream that always has the next chunk ready: no read of the relay ever waits for it.
    const ready = () => {
      const events = vllmEvents().map(bytesOf)
      const chunks = [events[0]!, ...Array<Uint8Array>(400).fill(events[1]!), ...events.slice(2)]
      let index = 0
      let cancelled = false
      const stream = new ReadableStream<Uint8Array>({
        pull(controller) {
          const next = chunks[index++]
          if (next) controller.enqueue(next)
          else controller.close()
        },
        cancel() {
          cancelled = true
        },
      })
      return { stream, cancelled: () => cancelled }
    }
    // A caller that takes 5 ms over each read: the answer would take ~2 s, the deadline is 100 ms.
    const slow = ready()
    const outcomes: unknown[] = []
    const reader = createOpenAIRelay({ source: slow.stream.getReader(), model: ALIAS, includeUsage: false, idleMs: 1_000, totalDeadline: Date.now() + 100, onEnd: (end) => outcomes.push(end) }).getReader()
    let text = ''
    const started = Date.now()
    for (let next = await reader.read(); !next.done; next = await reader.read()) {
      text += new TextDecoder().decode(next.value)
      await sleep(5)
    }
    expect(JSON.parse(sseData(text).at(-1) ?? '')).toMatchObject({ error: { code: 'upstream_timeout', message: expect.stringMatching(/longer than podgate allows/) } })
    expect(Date.now() - started).toBeLessThan(1_000)
    expect(slow.cancelled()).toBe(true)
    expect(outcomes).toMatchObject([{ ok: false, started: true, error: { code: 'upstream_timeout' } }])

    // A caller that read once and holds its connection without reading on: the upstream is let go at the deadline.
    const held = ready()
    const ends: unknown[] = []
    const still = createOpenAIRelay({ source: held.stream.getReader(), model: ALIAS, includeUsage: false, idleMs: 1_000, totalDeadline: Date.now() + 100, onEnd: (end) => ends.push(end) }).getReader()
    await still.read()
    await sleep(300)
    expect(held.cancelled()).toBe(true)
    expect(ends).toMatchObject([{ ok: false, error: { code: 'upstream_timeout' } }])
    await still.cancel()
  })

  it('does not count the time the caller takes to read as upstream idleness', async () => {
    const upstream = paced(vllmEvents().map(bytesOf), 0)
    const outcomes: unknown[] = []
    const reader = createOpenAIRelay({ source: upstream.stream.getReader(), model: ALIAS, includeUsage: false, idleMs: 30, onEnd: (end) => outcomes.push(end) }).getReader()
    let text = ''
    const decoder = new TextDecoder()
    for (;;) {
      const next = await reader.read()
      if (next.done) break
      text += decoder.decode(next.value, { stream: true })
      await sleep(45)
    }
    expect(sseData(text).at(-1)).toBe('[DONE]')
    expect(outcomes).toMatchObject([{ ok: true }])
  })

  it('reports the caller leaving and cancels the upstream with its reason', async () => {
    const body = bodyOf(vllmEvents().map(bytesOf))
    const outcomes: unknown[] = []
    const reader = createOpenAIRelay({ source: body.getReader(), model: ALIAS, includeUsage: false, idleMs: 1_000, onEnd: (end) => outcomes.push(end) }).getReader()
    await reader.read()
    await reader.cancel('client gone')
    expect(body.cancelled()).toBe('client gone')
    expect(outcomes).toMatchObject([{ ok: false, started: true, error: { code: 'upstream_error' } }])
  })
})

describe('rewriteChunkText', () => {
  const chunk = JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'up', choices: [{ index: 0, delta: { content: 'hi' } }] })
  const model = jsonStringContent(ALIAS)

  it('rewrites the model of the plain vLLM shape, and keeps its id', () => {
    expect(JSON.parse(rewriteChunkText(chunk, model) ?? '')).toMatchObject({ id: 'chatcmpl-1', model: ALIAS, choices: [{ index: 0 }] })
    const same = chunk.replace('"up"', `"${ALIAS}"`)
    expect(rewriteChunkText(same, model)).toBe(same)
  })

  it.each([
    ['usage chunk', '{"id":"c","object":"chat.completion.chunk","created":1,"model":"up","choices":[],"usage":{}}'],
    ['error', '{"error":{"message":"x","model":"up"}}'],
    ['object error', '{"object":"error","message":"boom","model":"up","choices":[{}]}'.replace(',"choices":[{}]', '')],
    ['model inside a string', '{"id":"a\\"model\\":\\"x","model":"up","choices":[{}]}'],
    ['model key in nested object', '{"meta":{"model":"up"},"choices":[{}]}'],
    ['model after choices', '{"id":"c","choices":[{"index":0}],"model":"up"}'],
    ['escaped model value', '{"id":"c","model":"u\\"p","choices":[{}]}'],
    ['multi-line data', '{"id":"c",\n"model":"up","choices":[{}]}'],
    ['not an object', '[{"model":"up","choices":[{}]}]'],
  ])('leaves %s to the parser', (_, data) => {
    expect(rewriteChunkText(data, model)).toBeUndefined()
  })

  it('can be ended from outside through its StreamControl, kept as Response.body, with the event last and no [DONE]', async () => {
    let cancelled = false
    const source = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(bytesOf(vllmEvents().slice(0, 2).join('')))
      },
      cancel() {
        cancelled = true
      },
    })
    const outcomes: RelayOutcome[] = []
    let closes = 0
    const stream = createOpenAIRelay({ source: source.getReader(), model: ALIAS, includeUsage: false, onEnd: (end) => outcomes.push(end) })
    // The revocation check finds the relay's control through the Response it was returned in.
    const body = new Response(stream).body!
    const control = streamControl(body)
    expect(control).toBeDefined()
    control!.onClose(() => closes++)
    const reader = body.getReader()
    const first = await reader.read()
    expect(first.done).toBe(false)
    control!.end('data: {"error":{"message":"revoked","code":"invalid_api_key"}}\n\n')
    let rest = ''
    const decoder = new TextDecoder()
    for (;;) {
      const next = await reader.read()
      if (next.done) break
      rest += decoder.decode(next.value, { stream: true })
    }
    expect(sseData(rest).at(-1)).toBe('{"error":{"message":"revoked","code":"invalid_api_key"}}')
    expect(rest).not.toContain('[DONE]')
    expect(cancelled).toBe(true)
    expect(closes).toBe(1)
    expect(outcomes).toHaveLength(1)
    expect(outcomes[0]).toMatchObject({ ok: false, started: true })
    expect((outcomes[0] as { error: GatewayError }).error.code).toBe('invalid_api_key')
  })
})
