import { describe, expect, it } from 'vitest'
import { createNativeStreamDecoder } from './native-decoder.ts'
import type { NativeDecoderOptions, UsageMeta } from './native-decoder.ts'
import type { CompletionChunk, Usage } from './openai-chunks.ts'
import { classicItems, contentOf, cutEvery, cutRandom, PIECES, PROMPT_TOKENS, TEXT, vllmEvents, vllmStream } from './__fixtures__/vllm.ts'
import { failure } from './__fixtures__/failure.ts'

const ALIAS = 'llama-8b'
const ID = 'chatcmpl-podgate1'
const CREATED = 1_800_000_000

function decode(items: unknown[], options: Partial<NativeDecoderOptions> = {}) {
  const chunks: CompletionChunk[] = []
  const usages: [Usage, UsageMeta][] = []
  const decoder = createNativeStreamDecoder({
    kind: 'chat',
    model: ALIAS,
    id: ID,
    created: CREATED,
    maxTokens: 100,
    onChunk: (chunk) => chunks.push(structuredClone(chunk)),
    onUsage: (usage, meta) => usages.push([usage, meta]),
    ...options,
  })
  for (const item of items) decoder.push(item)
  decoder.finish()
  return { chunks, usages, content: contentOf(chunks), finishReasons: finishReasonsOf(chunks) }
}

function finishReasonsOf(chunks: CompletionChunk[]): (string | null)[] {
  const reasons: (string | null)[] = []
  for (const chunk of chunks) for (const choice of chunk.choices) if (choice.finish_reason) reasons[choice.index] = choice.finish_reason
  return reasons
}

const FULL_USAGE: Usage = { prompt_tokens: PROMPT_TOKENS, completion_tokens: PIECES.length, total_tokens: PROMPT_TOKENS + PIECES.length }

describe('classic token items', () => {
  it('synthesizes role, content and finish chunks in the OpenAI wire shape', () => {
    const { chunks, usages, content, finishReasons } = decode(classicItems())
    expect(content).toEqual([TEXT])
    expect(finishReasons).toEqual(['stop'])
    expect(chunks[0]).toEqual({
      id: ID,
      object: 'chat.completion.chunk',
      created: CREATED,
      model: ALIAS,
      choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }],
    })
    // Growth batches 1, 3, 9: one content chunk per item, tokens joined.
    expect(chunks.slice(1, -1).map((chunk) => contentOf([chunk])[0])).toEqual(['Hel', 'lo, wör', 'ld ✓ 🎉! Ça va?'])
    expect(chunks.at(-1)).toEqual({
      id: ID,
      object: 'chat.completion.chunk',
      created: CREATED,
      model: ALIAS,
      choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }],
    })
    expect(usages).toEqual([[FULL_USAGE, { estimated: false }]])
  })

  it('writes text_completion chunks for completion requests, with no role chunk', () => {
    const { chunks, content, finishReasons } = decode(classicItems(), { kind: 'completion', id: 'cmpl-1' })
    expect(content).toEqual([TEXT])
    expect(finishReasons).toEqual(['stop'])
    expect(chunks[0]).toEqual({ id: 'cmpl-1', object: 'text_completion', created: CREATED, model: ALIAS, choices: [{ index: 0, text: 'Hel', logprobs: null, finish_reason: null }] })
    expect(chunks.at(-1)?.choices).toEqual([{ index: 0, text: '', logprobs: null, finish_reason: 'stop' }])
  })

  it('infers length when usage.output reached max_tokens', () => {
    expect(decode(classicItems(), { maxTokens: PIECES.length }).finishReasons).toEqual(['length'])
    expect(decode(classicItems(), { maxTokens: PIECES.length + 1 }).finishReasons).toEqual(['stop'])
  })

  it('keeps n > 1 choices apart and judges each by its own steps', () => {
    const short = ['A', 'b', 'c']
    // The worker keeps sending empty deltas for a choice that stopped while the other runs.
    const padded = [...short, ...Array<string>(PIECES.length - short.length).fill('')]
    const { chunks, content, finishReasons, usages } = decode(classicItems([PIECES, padded]), { maxTokens: PIECES.length })
    expect(content).toEqual([TEXT, 'Abc'])
    expect(finishReasons).toEqual(['length', 'stop'])
    expect(chunks.slice(0, 2).map((chunk) => chunk.choices[0])).toEqual([
      { index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null },
      { index: 1, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null },
    ])
    // usage.output is the total across choices.
    expect(usages[0]?.[0]).toEqual({ prompt_tokens: PROMPT_TOKENS, completion_tokens: 2 * PIECES.length, total_tokens: PROMPT_TOKENS + 2 * PIECES.length })
    // No empty content chunks for the stopped choice.
    const contentChunks = chunks.filter((chunk) => {
      const choice = chunk.choices[0]
      return choice && 'delta' in choice && choice.delta.role === undefined && choice.finish_reason === null
    })
    expect(contentChunks.map((chunk) => contentOf([chunk]).join(''))).toEqual(['Hel', 'A', 'lo, wör', 'bc', 'ld ✓ 🎉! Ça va?'])
  })

  it('estimates usage when items carry none', () => {
    const items = classicItems().map((item) => ({ choices: (item as { choices: unknown }).choices }))
    expect(decode(items).usages).toEqual([[{ prompt_tokens: 0, completion_tokens: PIECES.length, total_tokens: PIECES.length }, { estimated: true }]])
  })
})

describe('SSE text items', () => {
  const expectSame = (result: ReturnType<typeof decode>) => {
    expect(result.content).toEqual([TEXT])
    expect(result.finishReasons).toEqual(['stop'])
    expect(result.usages).toEqual([[FULL_USAGE, { estimated: false }]])
    for (const chunk of result.chunks) {
      expect(chunk.model).toBe(ALIAS)
      // vLLM's own id (the caller's request_id, if sent) and created: only classic token items get podgate's.
      expect(chunk.id).toBe('chatcmpl-9f2c1e')
      expect(chunk.created).toBe(1_700_000_000)
      expect(chunk.choices.length).toBeGreaterThan(0)
    }
  }

  it('reads whole-SSE items (classic OpenAI passthrough), 1, 3, 9 events per item', () => {
    const events = vllmEvents()
    const items = [events.slice(0, 1), events.slice(1, 4), events.slice(4, 13), events.slice(13)].map((group) => group.join(''))
    const result = decode(items)
    expectSame(result)
    // Relayed as vLLM wrote them: extra fields stay, only model changes.
    const upstream = events.slice(0, -2).map((event) => JSON.parse(event.slice(6)) as CompletionChunk)
    expect(result.chunks).toEqual(upstream.map((chunk) => ({ ...chunk, model: ALIAS })))
  })

  it('reads SSE text cut one character at a time', () => {
    expectSame(decode(cutEvery(vllmStream(), 1)))
  })

  it('reads SSE text cut at random points, including inside CRLF pairs', () => {
    for (const seed of [1, 2, 3, 42, 1234]) {
      expectSame(decode(cutRandom(vllmStream(), seed)))
      expectSame(decode(cutRandom(vllmStream({ eol: '\r\n' }), seed, 5)))
    }
  })

  it('passes U+FFFD from multibyte characters the worker cut through untouched', () => {
    // The current worker decodes each byte chunk with errors="replace": a cut 🎉 becomes U+FFFD.
    const bytes = new TextEncoder().encode(vllmStream())
    const emoji = new TextEncoder().encode(' 🎉')
    const at = indexOfBytes(bytes, emoji) + 2
    const items = [bytes.slice(0, at), bytes.slice(at)].map((part) => new TextDecoder().decode(part))
    const result = decode(items)
    const replaced = items.join('').split('\uFFFD').length - 1
    expect(replaced).toBeGreaterThan(0)
    expect(result.content[0]).toBe(TEXT.replace('🎉', '\uFFFD'.repeat(replaced)))
  })

  it('reads text_completion streams', () => {
    const result = decode(cutRandom(vllmStream({ kind: 'completion' }), 7), { kind: 'completion', id: 'cmpl-x' })
    expect(result.content).toEqual([TEXT])
    expect(result.chunks.every((chunk) => chunk.object === 'text_completion' && chunk.id === 'cmpl-9f2c1e')).toBe(true)
  })

  it('reads n = 2 streams', () => {
    const result = decode(cutRandom(vllmStream({ choices: [PIECES, ['x', 'y']] }), 3))
    expect(result.content).toEqual([TEXT, 'xy'])
    expect(result.finishReasons).toEqual(['stop', 'stop'])
  })

  it('accepts a final [DONE] without its blank line once the job completed', () => {
    const text = vllmStream()
    expectSame(decode([text.slice(0, -2)]))
  })

  it('fails a stream that never sent [DONE]', () => {
    const events = vllmEvents({ done: false })
    const error = failure(() => decode(events))
    expect(error.code).toBe('upstream_error')
    expect(error.message).toMatch(/ended before the model finished/)
  })

  it('fails a stream cut mid-event', () => {
    const text = vllmStream()
    const error = failure(() => decode([text.slice(0, text.length / 2)]))
    expect(error.code).toBe('upstream_error')
  })

  it('fails a stream whose choices never finished, even with [DONE]', () => {
    const events = vllmEvents({ usage: false }).filter((event) => !event.includes('"finish_reason":"stop"'))
    expect(failure(() => decode(events)).message).toMatch(/ended before the model finished/)
  })

  it('estimates usage when no usage chunk came', () => {
    const { usages } = decode(vllmEvents({ usage: false }))
    expect(usages).toEqual([[{ prompt_tokens: 0, completion_tokens: PIECES.length, total_tokens: PIECES.length }, { estimated: true }]])
  })

  // Found in the quota review: only `content` deltas were counted, so a reasoning model's thinking and a
  // tool call's arguments, often most of an answer, cost the key's token quota nothing.
  it('counts reasoning and tool-call deltas as output when no usage chunk came', () => {
    const head = { id: 'chatcmpl-9f2c1e', object: 'chat.completion.chunk', created: 1_700_000_000, model: 'm' }
    const event = (delta: object, finish: string | null = null) => `data: ${JSON.stringify({ ...head, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`
    const deltas = [{ reasoning_content: 'Let' }, { reasoning_content: ' me' }, { reasoning: ' think' }, { content: 'Hi' }, { tool_calls: [{ index: 0, function: { arguments: '{}' } }] }]
    const { usages } = decode([event({ role: 'assistant', content: '' }), ...deltas.map((delta) => event(delta)), event({}, 'stop'), 'data: [DONE]\n\n'])
    expect(usages).toEqual([[{ prompt_tokens: 0, completion_tokens: deltas.length, total_tokens: deltas.length }, { estimated: true }]])
  })

  it('raises vLLM error events with their message, in both forms', () => {
    const events = vllmEvents().slice(0, 3)
    for (const event of [
      'data: {"error":{"message":"CUDA out of memory","type":"InternalServerError","code":500}}\n\n',
      'data: {"object":"error","message":"CUDA out of memory","type":"InternalServerError","param":null,"code":500}\n\n',
    ]) {
      const error = failure(() => decode([...events, event, 'data: [DONE]\n\n']))
      expect(error.code).toBe('upstream_error')
      expect(error.message).toBe('The model worker failed: CUDA out of memory')
    }
  })

  it('raises on an event that is not JSON, and keeps failing afterwards', () => {
    const chunks: unknown[] = []
    const decoder = createNativeStreamDecoder({ kind: 'chat', model: ALIAS, id: ID, created: CREATED, maxTokens: 9, onChunk: (c) => chunks.push(c) })
    const error = failure(() => decoder.push('data: {"id":\n\n'))
    expect(error.message).toMatch(/not JSON/)
    expect(failure(() => decoder.push('data: [DONE]\n\n'))).toBe(error)
    expect(failure(() => decoder.finish())).toBe(error)
  })

  it('refuses chunks of the other kind', () => {
    expect(failure(() => decode(vllmEvents({ kind: 'completion' }))).code).toBe('upstream_error')
  })
})

describe('error and unknown items', () => {
  it.each([
    [{ error: 'CUDA out of memory' }],
    [{ error: { message: 'CUDA out of memory', type: 'worker_error', code: null } }],
  ])('raises worker error item %j', (item) => {
    const error = failure(() => decode([...classicItems().slice(0, 1), item]))
    expect(error.code).toBe('upstream_error')
    expect(error.status).toBe(502)
    expect(error.message).toBe('The model worker failed: CUDA out of memory')
  })

  it('raises an error item that follows SSE text', () => {
    const error = failure(() => decode([vllmEvents()[0], { error: { message: 'boom', type: 'worker_error' } }]))
    expect(error.message).toBe('The model worker failed: boom')
  })

  it('strips a traceback in time linear in the message: a long run of spaces is no quadratic search', () => {
    // `\s*Traceback…` was tried from every space of a run: 100k spaces took seconds of the Worker's CPU.
    const started = performance.now()
    const error = failure(() => decode([{ error: `boom${' '.repeat(100_000)}!` }]))
    expect(performance.now() - started).toBeLessThan(500)
    expect(error.message).toMatch(/^The model worker failed: boom {296}…$/)
    expect(failure(() => decode([{ error: 'boom \ntraceback: Traceback (most recent call last):\n  File "/src/handler.py"' }])).message).toBe('The model worker failed: boom')
  })

  it.each([[42], [null], [[1, 2]], [{ choices: [{ text: 'hi' }] }], [{ output: 'hi' }], [{ choices: [{ tokens: [1] }] }]])(
    'never drops unknown item %j',
    (item) => {
      const error = failure(() => decode([item]))
      expect(error.code).toBe('upstream_error')
    },
  )

  it('refuses mixed shapes and empty jobs', () => {
    expect(failure(() => decode([vllmEvents()[0], ...classicItems()])).code).toBe('upstream_error')
    expect(failure(() => decode([])).message).toMatch(/without any output/)
  })
})

describe('one generation, three wire forms', () => {
  it('yields the same content, finish and usage from classic, whole-SSE and split-SSE items', () => {
    const classic = decode(classicItems())
    const whole = decode(vllmEvents())
    const split = decode(cutRandom(vllmStream(), 99, 4))
    for (const result of [whole, split]) {
      expect(result.content).toEqual(classic.content)
      expect(result.finishReasons).toEqual(classic.finishReasons)
      expect(result.usages).toEqual(classic.usages)
      // Same framing too: a role chunk first, a finish chunk last.
      expect(result.chunks[0]?.choices[0]).toMatchObject({ index: 0, delta: { role: 'assistant', content: '' } })
      expect(result.chunks.at(-1)?.choices[0]?.finish_reason).toBe('stop')
    }
  })
})

function indexOfBytes(haystack: Uint8Array, needle: Uint8Array): number {
  outer: for (let i = 0; i + needle.length <= haystack.length; i++) {
    for (let j = 0; j < needle.length; j++) if (haystack[i + j] !== needle[j]) continue outer
    return i
  }
  return -1
}
