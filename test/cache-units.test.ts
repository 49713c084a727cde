/**
 * The cache's pure parts: Cache-Control parsing, the decision, the canonical key, and what an answer
 * capture accepts and refuses.
 */
import { describe, expect, it } from 'vitest'
import { captureJsonAnswer, createAnswerCapture, renderJson, renderStream } from '../src/cache/answer.ts'
import { cacheKey, stableJson } from '../src/cache/key.ts'
import { Flight } from '../src/cache/flight.ts'
import { coalesceOrLead } from '../src/cache/coalesce.ts'
import type { CacheRun, Plan } from '../src/cache/run.ts'
import { GatewayError } from '../src/errors/index.ts'
import { createCompletionContext } from '../src/pipeline/index.ts'
import type { CompletionHandler } from '../src/pipeline/index.ts'
import type { ResolvedModel } from '../src/routing/models.ts'
import type { Context } from 'hono'
import type { GatewayEnv } from '../src/types.ts'
import { GenerationCache } from '../src/cache/store.ts'
import { readJsonBody } from '../src/http/body.ts'
import { decideCaching, parseCacheControl } from '../src/cache/policy.ts'
import type { NormalizedRequest } from '../src/normalize/types.ts'

const request = (sampling: Partial<NormalizedRequest['sampling']> = {}, extra: Partial<NormalizedRequest> = {}): NormalizedRequest => ({
  kind: 'chat',
  model: 'm',
  stream: false,
  includeUsage: false,
  body: { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 16, ...sampling },
  shorthand: true,
  messages: [{ role: 'user', content: 'hi' }],
  sampling: { max_tokens: 16, ...sampling },
  estimate: { promptTokens: 1, sequences: 1 },
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
    const framed = request({ top_p: 0.5, temperature: 0 })
    framed.body = { ...framed.body, stream: true, stream_options: { include_usage: true }, user: 'u' }
    const same = await cacheKey({ request: framed, scope: 'key:a', generation: '0.0.0' })
    expect(same.hash).toBe(base.hash)
    expect(base.kvKey).toBe(`cache:key:a:m:${base.hash}`)
    for (const other of [
      { request: request({ temperature: 0, top_p: 0.5 }), scope: 'key:b', generation: '0.0.0' },
      { request: request({ temperature: 0, top_p: 0.5 }), scope: 'key:a', generation: '1.0.0' },
      { request: request({ temperature: 0, top_p: 0.6 }), scope: 'key:a', generation: '0.0.0' },
      { request: request({ temperature: 0, top_p: 0.5 }, { kind: 'completion' }), scope: 'key:a', generation: '0.0.0' },
    ]) {
      expect((await cacheKey(other)).hash).not.toBe(base.hash)
    }
  })

  it('is the same key a deploy before wrote: lowercase hex SHA-256, so a new version still hits stored answers', async () => {
    const key = await cacheKey({ request: request({ temperature: 0 }), scope: 'key:a', generation: '0.0.0' })
    expect(key.hash).toBe('afa67965ed320ddc4a511a5b51cb6da0613a95d73b8ed8e02b53e1e3ba57e649')
    expect(key.url).toBe(`https://podgate-cache.invalid/key%3Aa/m/${key.hash}`)
  })

  it('a body whose two forms differ (prompt logprobs, token ids) keys its stream apart from its JSON form', async () => {
    const hash = async (stream: boolean, body: Record<string, unknown>) => {
      const framed = request({ temperature: 0, ...body })
      framed.stream = stream
      return (await cacheKey({ request: framed, scope: 'key:a', generation: '0' })).hash
    }
    for (const body of [{ prompt_logprobs: 1 }, { return_token_ids: true }]) expect(await hash(true, body)).not.toBe(await hash(false, body))
    // Otherwise one entry serves both forms.
    expect(await hash(true, { return_token_ids: false })).toBe(await hash(false, { return_token_ids: false }))
    expect(await hash(true, { logprobs: true })).toBe(await hash(false, { logprobs: true }))
  })

  it('a stream that asks for usage on every chunk has keys of its own; every other form keeps the plain key', async () => {
    const hash = async (stream: boolean, includeUsage: boolean, options?: Record<string, unknown>) => {
      const framed = request({ temperature: 0 })
      framed.stream = stream
      framed.includeUsage = includeUsage
      if (options) framed.body = { ...framed.body, stream: stream, stream_options: options }
      return (await cacheKey({ request: framed, scope: 'key:a', generation: '0' })).hash
    }
    const plain = await hash(false, false)
    expect(await hash(true, false)).toBe(plain)
    expect(await hash(true, true, { include_usage: true })).toBe(plain)
    expect(await hash(true, true, { include_usage: true, continuous_usage_stats: false })).toBe(plain)
    expect(await hash(true, true, { include_usage: true, continuous_usage_stats: null })).toBe(plain)
    const continuous = await hash(true, true, { include_usage: true, continuous_usage_stats: true })
    expect(continuous).not.toBe(plain)
  })

  it('every forwarded field is in the key: tools, formats, logprobs, template kwargs, parts, unknown fields', async () => {
    const base = request({ temperature: 0 })
    const key = (body: Record<string, unknown>) => cacheKey({ request: { ...base, body: { ...base.body, ...body } }, scope: 'key:a', generation: '0' }).then((k) => k.hash)
    const plain = await key({})
    const variants = [
      { tools: [{ type: 'function', function: { name: 'f' } }] }, { tool_choice: 'required' }, { response_format: { type: 'json_object' } },
      { logprobs: true }, { top_logprobs: 1 }, { chat_template_kwargs: { enable_thinking: true } }, { some_future_field: 1 },
      { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'a' } }] }] }, { guided_json: {} }, { n: 2 },
    ]
    const hashes = await Promise.all(variants.map(key))
    expect(new Set([plain, ...hashes]).size).toBe(variants.length + 1)
    expect(await key({ stream: false, user: 'x' })).toBe(plain)
  })

  it('an integer past 2^53, kept as the caller wrote it, keys as its digits: never as an object that spells them', async () => {
    const base = request({ temperature: 0 })
    const key = async (text: string) => {
      const body = (await readJsonBody(new Request('http://podgate/', { method: 'POST', body: text }), 1 << 20, true)) as Record<string, unknown>
      return (await cacheKey({ request: { ...base, body: { ...base.body, ...body } }, scope: 'key:a', generation: '0' })).hash
    }
    // Two different requests upstream: the first sends the integer, the second an object.
    expect(await key('{"vllm_xargs":{"id":12345678901234567890}}')).not.toBe(await key('{"vllm_xargs":{"id":{"rawJSON":"12345678901234567890"}}}'))
    expect(await key('{"seed":9007199254740993}')).not.toBe(await key('{"seed":9007199254740992}'))
  })
})

describe('answer capture', () => {
  const chunk = (choice: Record<string, unknown>) => ({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, logprobs: null, finish_reason: null, ...choice }] })

  const usage = { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 }
  const meta = { id: 'x', created: 2, model: 'm' }

  /** What a client (openai SDK style) reassembles from SSE text: the JSON answer's choices. */
  function reassemble(sse: string): Record<string, unknown>[] {
    const choices: Record<string, unknown>[] = []
    for (const line of sse.split('\n\n')) {
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue
      const event = JSON.parse(line.slice(6)) as { choices: Record<string, unknown>[] }
      for (const { index, delta, ...rest } of event.choices as { index: number; delta: Record<string, unknown> }[]) {
        const choice = (choices[index] ??= { message: { role: 'assistant', content: '' } }) as Record<string, unknown>
        const message = choice.message as Record<string, unknown>
        for (const [k, v] of Object.entries(delta)) {
          if (k === 'tool_calls') {
            const calls = ((message.tool_calls ??= []) as Record<string, unknown>[])
            for (const call of v as { index: number; id?: string; type?: string; function: { name?: string; arguments?: string } }[]) {
              const at = (calls[call.index] ??= { id: call.id, type: call.type, function: { name: '', arguments: '' } }) as { function: { name: string; arguments: string } }
              at.function.name += call.function.name ?? ''
              at.function.arguments += call.function.arguments ?? ''
            }
          } else if (typeof v === 'string' && k !== 'role') message[k] = ((message[k] as string | undefined) ?? '') + v
        }
        for (const [k, v] of Object.entries(rest)) {
          if (k === 'logprobs' && v) choice.logprobs = [...((choice.logprobs as unknown[] | undefined) ?? []), ...(v as { content: unknown[] }).content]
          else if (v !== null && v !== undefined) choice[k] = v
        }
      }
    }
    return choices
  }

  it('keeps whole chunks: tool calls, reasoning, logprobs and unknown fields replay as the live stream did', () => {
    const live = [
      chunk({ delta: { role: 'assistant', content: '' } }),
      chunk({ delta: { reasoning: 'think', reasoning_content: 'think' } }),
      chunk({ delta: { content: null, tool_calls: [{ id: 'chatcmpl-tool-1', type: 'function', index: 0, function: { name: 'get_weather' } }] } }),
      chunk({ delta: { tool_calls: [{ index: 0, function: { arguments: '{"city": "Pa' } }] }, logprobs: { content: [{ token: 'a', logprob: -1, bytes: [97], top_logprobs: [] }] } }),
      chunk({ delta: { tool_calls: [{ index: 0, function: { arguments: 'ris"}' } }] }, future_field: { x: 1 } }),
      chunk({ delta: {}, finish_reason: 'tool_calls', stop_reason: null }),
    ]
    const capture = createAnswerCapture('chat')
    for (const event of live) expect(capture.accept(event)).toBe('chunk')
    const answer = capture.result(usage)!
    const liveText = live.map((e) => `data: ${JSON.stringify({ ...e, id: 'x', created: 2 })}\n\n`).join('')
    const replay = renderStream(answer, meta, false)
    expect(reassemble(replay)).toEqual(reassemble(liveText))
    const json = renderJson(answer, { ...meta, autoTools: true }) as { choices: { message: Record<string, unknown>; finish_reason: string; logprobs: unknown }[] }
    // Tool calls the model chose and no text: `content` is null, as vLLM's JSON has it (the stream sent "").
    // A named or `required` tool choice keeps "", as vLLM's JSON has it then.
    expect((renderJson(answer, meta) as typeof json).choices[0]!.message.content).toBe('')
    expect(json.choices[0]!.message).toEqual({
      role: 'assistant', content: null, refusal: null, annotations: null, audio: null, function_call: null, reasoning: 'think', reasoning_content: 'think',
      tool_calls: [{ id: 'chatcmpl-tool-1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }],
    })
    expect(json.choices[0]!.finish_reason).toBe('tool_calls')
    expect(json.choices[0]!.logprobs).toEqual({ content: [{ token: 'a', logprob: -1, bytes: [97], top_logprobs: [] }] })
  })

  it('a JSON answer with tool calls and reasoning replays as JSON unchanged and as SSE that reassembles to it', () => {
    const message = { role: 'assistant', content: null, reasoning: 'hmm', tool_calls: [{ id: 't1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }] }
    const body = { id: 'c', object: 'chat.completion', created: 1, model: 'm', choices: [{ index: 0, message, logprobs: null, finish_reason: 'tool_calls', stop_reason: null }], usage, prompt_logprobs: null }
    const answer = captureJsonAnswer('chat', body)!
    expect(renderJson(answer, meta)).toEqual({ ...body, ...meta })
    const [choice] = reassemble(renderStream(answer, meta, true))
    expect(choice).toEqual({ message: { role: 'assistant', content: '', reasoning: 'hmm', tool_calls: [{ id: 't1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }] }, finish_reason: 'tool_calls' })
    expect(renderStream(answer, meta, true)).toContain('"usage":')
  })

  it('an answer replays its top-level fields in the form it was recorded in, where vLLM put them', () => {
    // Streamed: prompt_token_ids on each choice's first chunk (and, for a stream that asked, usage on every chunk).
    const capture = createAnswerCapture('chat')
    const step = (index: number, choice: Record<string, unknown>, top: Record<string, unknown>) => capture.accept({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index, logprobs: null, finish_reason: null, ...choice }], ...top })
    step(0, { delta: { role: 'assistant', content: '' } }, { prompt_token_ids: [1, 2], usage: { prompt_tokens: 2, completion_tokens: 0, total_tokens: 2 } })
    step(1, { delta: { role: 'assistant', content: '' } }, { prompt_token_ids: [1, 2], usage: { prompt_tokens: 2, completion_tokens: 0, total_tokens: 2 } })
    step(0, { delta: { content: 'a' }, finish_reason: 'stop' }, { usage: { prompt_tokens: 2, completion_tokens: 1, total_tokens: 3 } })
    step(1, { delta: { content: 'b' }, finish_reason: 'stop' }, { usage: { prompt_tokens: 2, completion_tokens: 1, total_tokens: 3 } })
    const events = (sse: string) => sse.split('\n\n').filter((line) => line.startsWith('data: {')).map((line) => JSON.parse(line.slice(6)) as Record<string, unknown>)
    const streamed = events(renderStream(capture.result(usage)!, meta, true))
    // In the order they came: the choices' chunks interleaved, the usage on every chunk counting up.
    expect(streamed.map((e) => (e.choices as { index: number }[])[0]?.index)).toEqual([0, 1, 0, 1, undefined])
    expect(streamed.map((e) => e.prompt_token_ids)).toEqual([[1, 2], [1, 2], undefined, undefined, undefined])
    expect(streamed.map((e) => (e.usage as { completion_tokens: number }).completion_tokens)).toEqual([0, 0, 1, 1, 2])
    // JSON: at the top level of the body, the JSON-only ones included.
    const body = { id: 'c', object: 'chat.completion', created: 1, model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: 'x' }, logprobs: null, finish_reason: 'stop' }], usage, prompt_logprobs: [null, { 5: { logprob: -1 } }], kv_transfer_params: { remote: 1 }, prompt_token_ids: [1, 2] }
    expect(renderJson(captureJsonAnswer('chat', body)!, meta)).toMatchObject({ usage, prompt_logprobs: body.prompt_logprobs, kv_transfer_params: { remote: 1 }, prompt_token_ids: [1, 2] })
  })

  it('completions keep each choice\'s index and logprobs; embeddings are kept whole', () => {
    const capture = createAnswerCapture('completion')
    const text = (index: number, t: string, finish: string | null) => ({ id: 'c1', object: 'text_completion', created: 1, model: 'm', choices: [{ index, text: t, logprobs: { tokens: [t], token_logprobs: [-1] }, finish_reason: finish }] })
    for (const event of [text(1, 'b', null), text(0, 'a', null), text(0, 'A', 'stop'), text(1, 'B', 'length')]) capture.accept(event)
    const json = renderJson(capture.result(usage)!, meta) as { choices: Record<string, unknown>[] }
    expect(json.choices).toEqual([
      { index: 0, text: 'aA', logprobs: { tokens: ['a', 'A'], token_logprobs: [-1, -1] }, finish_reason: 'stop' },
      { index: 1, text: 'bB', logprobs: { tokens: ['b', 'B'], token_logprobs: [-1, -1] }, finish_reason: 'length' },
    ])
    const list = { object: 'list', data: [{ index: 0, object: 'embedding', embedding: 'AAAA' }], model: 'served', usage: { prompt_tokens: 1, total_tokens: 1 } }
    expect(renderJson(captureJsonAnswer('embedding', list)!, meta)).toEqual({ ...list, model: 'm' })
  })

  it('a completion recorded as JSON replays as chunks that hold what a live chunk holds: no prompt_logprobs', () => {
    const choice = { index: 0, text: 'hi', logprobs: null, finish_reason: 'stop', stop_reason: null, prompt_logprobs: null }
    const answer = captureJsonAnswer('completion', { id: 'c', object: 'text_completion', created: 1, model: 'm', choices: [choice], usage })!
    const chunks = renderStream(answer, meta, false).split('\n\n').filter((line) => line.startsWith('data: {')).map((line) => JSON.parse(line.slice(6)) as { choices: unknown[] })
    const { prompt_logprobs: _prompt, ...live } = choice
    expect(chunks.map((c) => c.choices)).toEqual([[live]])
  })

  it('refuses error events and error bodies', () => {
    const capture = createAnswerCapture('chat')
    capture.accept(chunk({ delta: { content: 'ok' }, finish_reason: 'stop' }))
    expect(capture.accept({ error: { message: 'x' } })).toBe('error')
    expect(capture.result(undefined)).toBeUndefined()
    expect(captureJsonAnswer('chat', { error: { message: 'x' } })).toBeUndefined()
  })
})

describe('GenerationCache', () => {
  /** A KV of generation records whose reads wait while `hold` is set, counting them. */
  function slowKv() {
    const values = new Map<string, string>()
    const state = { gets: 0, hold: undefined as Promise<void> | undefined }
    const kv = {
      async get(name: string) {
        state.gets++
        const value = values.get(name) ?? null
        // Reads started while `hold` is set wait for it, with the value as it was when they started.
        const hold = state.hold
        if (hold) await hold
        return value
      },
      async put(name: string, value: string) {
        values.set(name, value)
      },
    } as unknown as KVNamespace
    return { kv, values, state }
  }

  function held(state: { hold: Promise<void> | undefined }): () => void {
    let release!: () => void
    state.hold = new Promise<void>((resolve) => (release = resolve))
    return () => {
      state.hold = undefined
      release()
    }
  }

  it('trusts a generation for ttlMs, then uses it for as long again while a background read refreshes it', async () => {
    let now = 1_000_000
    const { kv, values, state } = slowKv()
    const generations = new GenerationCache({ ttlMs: 5000, now: () => now })
    const background: Promise<unknown>[] = []
    const token = () => generations.token(kv, 'm', undefined, (promise) => background.push(promise))
    // Two KV keys in the shared scope: the model's generation and the legacy record.
    expect(await token()).toBe('0.0.0')
    expect(state.gets).toBe(2)
    // Even the reads this request waited for are kept alive by its waitUntil: other requests may share them.
    expect(background.length).toBe(2)
    now += 4000
    expect(await token()).toBe('0.0.0')
    expect(state.gets).toBe(2)

    // Another isolate purged model m; 6 s on, this isolate answers at once with what it has, and reads again.
    values.set('cachegen:model:m', 'abc')
    now += 2000
    const release = held(state)
    expect(await token()).toBe('0.0.0')
    expect(await token()).toBe('0.0.0')
    // One read of each key for both requests, run from the first one's waitUntil.
    expect(state.gets).toBe(4)
    expect(background.length).toBe(4)
    release()
    await Promise.all(background)
    expect(await token()).toBe('abc.0.0')

    // Stale by more than another ttlMs: the request waits for the read.
    values.set('cachegen:model:m', 'def')
    now += 10_001
    expect(await token()).toBe('def.0.0')
  })

  it('does not retry a failed background read on every request, but one ttlMs after it began', async () => {
    let now = 1_000_000
    let gets = 0
    let failing = false
    const kv = {
      async get() {
        gets++
        if (failing) throw new Error('KV get failed')
        return null
      },
    } as unknown as KVNamespace
    const generations = new GenerationCache({ ttlMs: 5000, now: () => now })
    const background: Promise<unknown>[] = []
    const token = () => generations.token(kv, 'm', undefined, (promise) => background.push(promise))
    expect(await token()).toBe('0.0.0')
    expect(gets).toBe(2)
    failing = true
    now += 5500
    expect(await token()).toBe('0.0.0')
    await Promise.all(background)
    expect(gets).toBe(4)
    for (let i = 0; i < 4; i++) {
      now += 1000
      expect(await token()).toBe('0.0.0')
    }
    expect(gets).toBe(4)
    // Past 2 × ttlMs the record is not used: the request waits for a read, and sees KV's failure.
    now += 1000
    await expect(token()).rejects.toThrow('KV get failed')
    expect(gets).toBe(6)
  })

  it('keeps a purge over a read that began before it even when the generation cache starts over meanwhile', async () => {
    let now = 1_000_000
    const { kv, state } = slowKv()
    const generations = new GenerationCache({ ttlMs: 5000, now: () => now })
    const background: Promise<unknown>[] = []
    await generations.token(kv, 'warm', undefined)
    const release = held(state)
    // A cold read of model m's generation, held; meanwhile this isolate purges m.
    const cold = generations.token(kv, 'm', undefined, (promise) => background.push(promise))
    state.hold = undefined
    await generations.bump(kv, { model: 'm' })
    // 10,000 other models' generations: the isolate's generation cache starts over.
    for (let i = 0; i < 10_000; i++) await generations.token(kv, `m${i}`, undefined)
    release()
    const purged = await cold
    expect(purged).toMatch(/^[0-9a-f]{8}\.0\.0$/)
  })

  it('a purge never reads: two isolates purging through a stale KV copy do not undo each other', async () => {
    const values = new Map<string, string>()
    const fresh = { get: async (name: string) => values.get(name) ?? null } as unknown as KVNamespace
    // A location whose copy predates every purge: its reads see nothing, its writes land.
    const stale = { get: async () => null, put: async (name: string, value: string) => void values.set(name, value) } as unknown as KVNamespace
    const now = () => 1_000_000
    await new GenerationCache({ ttlMs: 5000, now }).bump(stale, { model: 'a' })
    await new GenerationCache({ ttlMs: 5000, now }).bump(stale, { model: 'b' })
    await new GenerationCache({ ttlMs: 5000, now }).bump(stale, { keyId: 'key_1' })
    await new GenerationCache({ ttlMs: 5000, now }).bump(stale, { keyId: 'key_1', model: 'a' })
    const reader = new GenerationCache({ ttlMs: 5000, now })
    const [a, b] = [await reader.token(fresh, 'a', 'key_1'), await reader.token(fresh, 'b', 'key_1')]
    expect(a).toMatch(/^[0-9a-f]{8}\.[0-9a-f]{8}\.[0-9a-f]{8}$/)
    expect(b).toMatch(/^[0-9a-f]{8}\.[0-9a-f]{8}\.0$/)
    expect(a.split('.')[1]).toBe(b.split('.')[1])
  })

  it('reads the generation records of earlier versions until a purge of the same target supersedes them', async () => {
    const { kv, values } = slowKv()
    values.set('cachegen:*', JSON.stringify({ models: { a: 'g1' } }))
    values.set('cachegen:key:key_1', JSON.stringify({ all: 'k1', models: { a: 'ka' } }))
    const now = () => 1_000_000
    const token = (model: string, keyId?: string) => new GenerationCache({ ttlMs: 5000, now }).token(kv, model, keyId)
    // The same generations as before the upgrade: entries stored since keep their keys.
    expect([await token('a'), await token('a', 'key_1'), await token('b', 'key_1')]).toEqual(['g1.0.0', 'g1.k1.ka', '0.k1.0'])
    await new GenerationCache({ ttlMs: 5000, now }).bump(kv, { model: 'a' })
    expect(await token('a')).toMatch(/^[0-9a-f]{8}\.0\.0$/)
    await new GenerationCache({ ttlMs: 5000, now }).bump(kv, { keyId: 'key_1' })
    const purged = await token('b', 'key_1')
    expect(purged).toMatch(/^0\.[0-9a-f]{8}\.0$/)
    // Written in the earlier record's form, which an earlier version still running reads as `all`.
    expect(JSON.parse(values.get('cachegen:key:key_1')!)).toEqual({ all: purged.split('.')[1] })
  })

  it('keeps a purge made in this isolate over a read that began before it', async () => {
    let now = 1_000_000
    const { kv, state } = slowKv()
    const generations = new GenerationCache({ ttlMs: 5000, now: () => now })
    const background: Promise<unknown>[] = []
    const token = () => generations.token(kv, 'm', undefined, (promise) => background.push(promise))
    expect(await token()).toBe('0.0.0')
    now += 6000
    const release = held(state)
    expect(await token()).toBe('0.0.0')
    expect(background.length).toBe(4)
    // The read above is still out, holding the record from before the purge; the purge's own reads are not held.
    state.hold = undefined
    await generations.bump(kv, { model: 'm' })
    const purged = await token()
    expect(purged).toMatch(/^[0-9a-f]{8}\.0\.0$/)
    release()
    await Promise.all(background)
    expect(await token()).toBe(purged)
  })
})

describe('Flight', () => {
  it('a flight followed live that stays silent past staleMs fails for its readers, who may ask on their own', async () => {
    const flight = new Flight(true, 30)
    flight.push({ data: '{}', usage: false, error: false })
    await flight.changed(5)
    expect(flight.state).toBe('open')
    await new Promise((r) => setTimeout(r, 40))
    await flight.changed(5)
    expect(flight.state).toBe('failed')
    expect(flight.error?.code).toBe('upstream_timeout')
    expect(flight.abandoned).toBe(true)
  })

  it('an event keeps a flight followed live open; so does its leader\'s beat, for any flight, however long the model is silent', async () => {
    const live = new Flight(true, 30)
    // leaderLeft: the leader's request beats while it runs (here 30 ms of silence allowed, a beat every 6 ms).
    const [streamed, piped, json] = [new Flight(true), new Flight(true), new Flight(false)]
    piped.stopStreaming()
    for (const flight of [streamed, piped, json]) flight.leaderLeft(30)
    for (let i = 0; i < 4; i++) {
      await new Promise((r) => setTimeout(r, 15))
      live.push({ comment: true })
      await Promise.all([live, streamed, piped, json].map((f) => f.changed(5)))
    }
    expect([live.state, streamed.state, piped.state, json.state]).toEqual(['open', 'open', 'open', 'open'])
    // The beat stops when the flight is over.
    json.succeed({ answer: undefined, usage: undefined, meta: undefined })
  })

  it('a flight whose leader left and that stops hearing from it fails, piped or JSON: its joiners ask on their own', async () => {
    // No beat: as when the runtime ended the leader's request (on Workers, 30 s after its caller left).
    const [piped, json] = [new Flight(true, 30), new Flight(false, 30)]
    piped.stopStreaming()
    await new Promise((r) => setTimeout(r, 40))
    await Promise.all([piped, json].map((f) => f.changed(5)))
    expect([piped.state, json.state]).toEqual(['failed', 'failed'])
    expect([piped.abandoned, json.abandoned]).toEqual([true, true])
    // A flight whose leader's caller is there (no staleMs) is never stale.
    const present = new Flight(false)
    await new Promise((r) => setTimeout(r, 40))
    await present.changed(5)
    expect(present.state).toBe('open')
  })

  it('a flight still open past the time its leader\'s call had (its request was ended with no word) fails: no one joins it', async () => {
    const [dead, young] = [new Flight(false, Infinity, Date.now() + 30), new Flight(true, Infinity, Date.now() + 60_000)]
    await new Promise((r) => setTimeout(r, 40))
    expect([dead.live(), young.live()]).toEqual([false, true])
    expect(dead.error?.code).toBe('upstream_timeout')
    expect(dead.abandoned).toBe(true)
  })
})

describe('coalescing', () => {
  // A twin whose first call was let go (its first caller's request ended with no word) joins the call
  // the next caller led meanwhile; that one let go too (its key revoked), the twin asks on its own: the
  // error of a call stopped for another caller's reasons is no answer to it.
  it('a twin let go by two calls in a row gets its own answer, not the second abandoned call\'s error', async () => {
    const run = { options: { coalesce: true }, flights: new Map(), log: () => {} } as unknown as CacheRun
    const plan = { key: { hash: 'h' }, ttlSeconds: 60 } as Plan
    const c = { req: { raw: new Request('http://podgate/v1/chat/completions') }, get: () => undefined } as unknown as Context<GatewayEnv>
    const model = { alias: 'm', config: { resilience: { timeouts: { totalMs: 60_000 } } } } as unknown as ResolvedModel
    const twin = createCompletionContext(c, request({ temperature: 0 }), model)
    let asked = 0
    const next: CompletionHandler = async (ctx) => {
      asked++
      ctx.settle({ ok: true })
      return new Response('{"id":"own"}', { headers: { 'content-type': 'application/json' } })
    }
    const [first, second] = [new Flight(false), new Flight(false)]
    run.flights.set('h', first)
    const answer = coalesceOrLead(run, twin, next, plan)
    expect(first.followers).toBe(1)
    // The next caller found the first call silent, let it go and leads its own.
    run.flights.set('h', second)
    first.fail(new GatewayError('upstream_timeout', 'The shared upstream call ended with the request that made it.'), true)
    while (second.followers === 0) await new Promise((r) => setTimeout(r, 1))
    second.fail(new GatewayError('invalid_api_key', 'This stream ended: its credential was revoked, rotated or expired while it was open.'), true)
    const res = await answer
    expect([res.status, await res.text(), asked]).toEqual([200, '{"id":"own"}', 1])
  })
})
