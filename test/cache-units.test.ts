/**
 * The cache's pure parts: Cache-Control parsing, the decision, the canonical key, and what an answer
 * capture accepts and refuses.
 */
import { describe, expect, it } from 'vitest'
import { captureJsonAnswer, createAnswerCapture, renderJson, renderStream } from '../src/cache/answer.ts'
import { cacheKey, stableJson } from '../src/cache/key.ts'
import { decideCaching, parseCacheControl } from '../src/cache/policy.ts'
import type { NormalizedRequest } from '../src/normalize/types.ts'

const request = (sampling: Partial<NormalizedRequest['sampling']> = {}, extra: Partial<NormalizedRequest> = {}): NormalizedRequest => ({
  kind: 'chat',
  model: 'm',
  stream: false,
  includeUsage: false,
  messages: [{ role: 'user', content: 'hi' }],
  sampling: { max_tokens: 16, ...sampling },
  ...extra,
})
const settings = { enabled: true, nonDeterministic: false, ttlSeconds: 300 }

describe('Cache-Control', () => {
  it('reads no-store, no-cache and the smallest max-age, in any case and spacing', () => {
    expect(parseCacheControl('No-Store')).toMatchObject({ noStore: true })
    expect(parseCacheControl(' no-cache , max-age=30, max-age="10"')).toEqual({ noStore: false, noCache: true, maxAge: 10 })
    expect(parseCacheControl('max-age=-1, max-age=abc')).toEqual({ noStore: false, noCache: false, maxAge: undefined })
    expect(parseCacheControl(null)).toEqual({ noStore: false, noCache: false, maxAge: undefined })
  })

  it('decides from the request, its headers and the model', () => {
    const headers = (init: Record<string, string> = {}) => new Headers(init)
    expect(decideCaching({ request: request({ temperature: 0 }), headers: headers(), settings })).toEqual({ cacheable: true, lookup: true, maxAgeSeconds: undefined, ttlSeconds: 300 })
    expect(decideCaching({ request: request({ seed: 1, temperature: 1 }), headers: headers(), settings }).cacheable).toBe(true)
    expect(decideCaching({ request: request({ temperature: 0.5 }), headers: headers(), settings }).cacheable).toBe(false)
    expect(decideCaching({ request: request(), headers: headers({ 'x-podgate-cache': 'ON' }), settings }).cacheable).toBe(true)
    expect(decideCaching({ request: request(), headers: headers(), settings: { ...settings, nonDeterministic: true } }).cacheable).toBe(true)
    expect(decideCaching({ request: request({ temperature: 0 }), headers: headers({ 'cache-control': 'no-store' }), settings }).cacheable).toBe(false)
    expect(decideCaching({ request: request({ temperature: 0 }), headers: headers({ 'x-podgate-cache': 'on', 'cache-control': 'no-store' }), settings }).cacheable).toBe(false)
    expect(decideCaching({ request: request({ temperature: 0 }), headers: headers({ 'cache-control': 'no-cache' }), settings })).toMatchObject({ lookup: false })
    expect(decideCaching({ request: request({ temperature: 0 }), headers: headers(), settings: { ...settings, enabled: false } }).cacheable).toBe(false)
  })
})

describe('the canonical key', () => {
  it('ignores key order, stream, stream_options and user; not scope, generation or sampling', async () => {
    expect(stableJson({ b: 1, a: { d: [1, { f: 2, e: undefined }], c: null } })).toBe('{"a":{"c":null,"d":[1,{"f":2}]},"b":1}')
    const base = await cacheKey({ request: request({ temperature: 0, top_p: 0.5 }), scope: 'key:a', generation: '0.0.0' })
    const same = await cacheKey({ request: request({ top_p: 0.5, temperature: 0 }, { stream: true, includeUsage: true, user: 'u' }), scope: 'key:a', generation: '0.0.0' })
    expect(same.hash).toBe(base.hash)
    expect(base.kvKey).toBe(`cache:key:a:m:${base.hash}`)
    for (const other of [
      { request: request({ temperature: 0, top_p: 0.5 }), scope: 'key:b', generation: '0.0.0' },
      { request: request({ temperature: 0, top_p: 0.5 }), scope: 'key:a', generation: '1.0.0' },
      { request: request({ temperature: 0, top_p: 0.6 }), scope: 'key:a', generation: '0.0.0' },
      { request: request({ temperature: 0, top_p: 0.5 }, { kind: 'completion', messages: undefined, prompt: 'hi' }), scope: 'key:a', generation: '0.0.0' },
    ]) {
      expect((await cacheKey(other)).hash).not.toBe(base.hash)
    }
  })
})

describe('answer capture', () => {
  const chunk = (choice: Record<string, unknown>) => ({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, logprobs: null, finish_reason: null, ...choice }] })

  it('keeps deltas, finish and plain extras, and renders both forms', () => {
    const capture = createAnswerCapture('chat')
    capture.accept(chunk({ delta: { role: 'assistant', content: '' } }))
    capture.accept(chunk({ delta: { content: 'Hel' } }))
    capture.accept(chunk({ delta: { content: 'lo ✓' }, finish_reason: 'stop', stop_reason: null }))
    expect(capture.accept({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 } })).toBe('usage')
    const answer = capture.result({ prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 })!
    expect(answer.choices).toEqual([{ deltas: ['Hel', 'lo ✓'], finishReason: 'stop', finishAlone: false, endExtra: { stop_reason: null } }])
    const meta = { id: 'x', created: 2, model: 'm' }
    expect(renderJson(answer, meta)).toMatchObject({ object: 'chat.completion', choices: [{ message: { role: 'assistant', content: 'Hello ✓' }, finish_reason: 'stop', stop_reason: null }] })
    const sse = renderStream(answer, meta, false)
    expect(sse.split('\n\n').filter(Boolean)).toHaveLength(4)
    expect(sse).not.toContain('usage')
    expect(sse.endsWith('data: [DONE]\n\n')).toBe(true)
  })

  it('refuses tool calls, logprobs and error events', () => {
    for (const bad of [chunk({ delta: { tool_calls: [{ id: 't' }] } }), chunk({ delta: { content: 'a' }, logprobs: { content: [] } }), { error: { message: 'x' } }]) {
      const capture = createAnswerCapture('chat')
      capture.accept(chunk({ delta: { content: 'ok' }, finish_reason: 'stop' }))
      capture.accept(bad)
      expect(capture.result(undefined)).toBeUndefined()
    }
    expect(captureJsonAnswer('chat', { choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [{ id: 't' }] }, finish_reason: 'tool_calls' }] })).toBeUndefined()
    expect(captureJsonAnswer('chat', { choices: [{ index: 0, message: { role: 'assistant', content: 'a', tool_calls: [] }, finish_reason: 'stop' }] })).toMatchObject({ choices: [{ deltas: ['a'], messageExtra: { tool_calls: [] } }] })
  })
})
