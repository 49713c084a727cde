/**
 * The OpenAI-compatible surface through the official `openai` client and raw HTTP, against every
 * upstream shape: the OpenAI route, native classic worker-vllm, native current worker-vllm.
 */
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { authed, chatBody, EMBEDDING_MODELS, harness, MODEL_NAMES, readSSE, streamedText } from './helpers.ts'

async function client() {
  const h = harness()
  const { key } = await h.createKey()
  const openai = new OpenAI({ apiKey: key, baseURL: 'http://podgate/v1', fetch: h.clientFetch, maxRetries: 0 })
  return { h, key, openai }
}

describe('chat completions through the openai client', () => {
  it.each(MODEL_NAMES)('%s: streamed text equals non-streamed text', async (model) => {
    const { openai } = await client()
    const messages = [{ role: 'user' as const, content: 'Tell me about GPUs' }]
    const full = await openai.chat.completions.create({ model, messages, temperature: 0, max_tokens: 64 })
    expect(full.object).toBe('chat.completion')
    expect(full.model).toBe(model)
    const text = full.choices[0]?.message.content ?? ''
    expect(text.length).toBeGreaterThan(0)
    expect(full.usage?.completion_tokens).toBeGreaterThan(0)
    expect(full.usage?.prompt_tokens).toBeGreaterThan(0)

    const stream = await openai.chat.completions.create({ model, messages, temperature: 0, max_tokens: 64, stream: true, stream_options: { include_usage: true } })
    let streamed = ''
    let usage: OpenAI.CompletionUsage | undefined | null
    let finish: string | null | undefined
    for await (const chunk of stream) {
      expect(chunk.object).toBe('chat.completion.chunk')
      expect(chunk.model).toBe(model)
      streamed += chunk.choices[0]?.delta.content ?? ''
      finish ??= chunk.choices[0]?.finish_reason
      if (chunk.usage) usage = chunk.usage
    }
    expect(streamed).toBe(text)
    expect(finish).toBe(full.choices[0]?.finish_reason)
    // vLLM's JSON usage writes its unset members as null (`prompt_tokens_details`); its stream's leaves them out.
    const { prompt_tokens, completion_tokens, total_tokens } = full.usage!
    expect(usage).toEqual({ prompt_tokens, completion_tokens, total_tokens })
  })

  it('every upstream mode gives the same answer for the same request', async () => {
    const { openai } = await client()
    const texts = await Promise.all(
      MODEL_NAMES.map(async (model) => {
        const r = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'same question' }], seed: 7, max_tokens: 40 })
        return r.choices[0]?.message.content
      }),
    )
    expect(new Set(texts).size).toBe(1)
  })

  it.each(MODEL_NAMES)('%s: completions with a raw prompt, streamed and not', async (model) => {
    const { openai } = await client()
    const full = await openai.completions.create({ model, prompt: 'Once upon a time', max_tokens: 30 })
    expect(full.object).toBe('text_completion')
    const text = full.choices[0]?.text ?? ''
    expect(text.length).toBeGreaterThan(0)
    const stream = await openai.completions.create({ model, prompt: 'Once upon a time', max_tokens: 30, stream: true })
    let streamed = ''
    for await (const chunk of stream) streamed += chunk.choices[0]?.text ?? ''
    expect(streamed).toBe(text)
  })

  it.each(MODEL_NAMES)('%s: max_tokens caps the answer with finish_reason length', async (model) => {
    const { openai } = await client()
    const r = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'long [[emulator:tokens=50]]' }], max_tokens: 5 })
    expect(r.choices[0]?.finish_reason).toBe('length')
    expect(r.usage?.completion_tokens).toBe(5)
  })

  it('n > 1 returns one choice per index', async () => {
    const { openai } = await client()
    for (const model of MODEL_NAMES) {
      const r = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'two please' }], n: 2, max_tokens: 20 })
      expect(r.choices.map((c) => c.index)).toEqual([0, 1])
    }
  })
})

describe('streams on the wire', () => {
  it.each(MODEL_NAMES)('%s: SSE headers, [DONE] last, usage only when asked', async (model) => {
    const { h, key } = await client()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'hi', { stream: true })))
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/)
    expect(res.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/)
    const events = await readSSE(res)
    expect(events.at(-1)).toBe('[DONE]')
    expect(events.some((e) => typeof e === 'object' && e !== null && 'usage' in e && (e as { usage: unknown }).usage)).toBe(false)
    const first = events[0] as { choices: { delta: { role?: string } }[] }
    expect(first.choices[0]?.delta.role).toBe('assistant')

    const withUsage = await readSSE(await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'hi', { stream: true, stream_options: { include_usage: true } }))))
    expect(withUsage.at(-1)).toBe('[DONE]')
    const usageChunk = withUsage.at(-2) as { choices: unknown[]; usage?: { total_tokens: number } }
    if (model === 'chat-current') {
      // The native shorthand reaches vLLM with no stream_options (worker-vllm >= v2.24): no usage, and podgate sends no count of its own.
      expect(withUsage.some((e) => typeof e === 'object' && e !== null && 'usage' in e)).toBe(false)
    } else {
      expect(usageChunk.choices).toEqual([])
      expect(usageChunk.usage?.total_tokens).toBeGreaterThan(0)
    }
    expect(streamedText(withUsage)).toBe(streamedText(events))
  })

  it('continuous_usage_stats puts usage on every chunk unless include_usage is false or null, as vLLM does (its include_usage defaults to true)', async () => {
    const { h, key } = await client()
    const hasUsage = (e: unknown) => typeof e === 'object' && e !== null && 'usage' in e && Boolean((e as { usage: unknown }).usage)
    for (const include_usage of [false, null]) {
      const off = await readSSE(await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'hi', { stream: true, stream_options: { include_usage, continuous_usage_stats: true } }))))
      expect(off.at(-1)).toBe('[DONE]')
      expect(off.some(hasUsage)).toBe(false)
    }
    const alone = await readSSE(await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'hi', { stream: true, stream_options: { continuous_usage_stats: true } }))))
    expect(alone.slice(0, -1).every(hasUsage)).toBe(true)
    const both = await readSSE(await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'hi', { stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } }))))
    expect(both.slice(0, -1).every(hasUsage)).toBe(true)
  })
})

describe('models list', () => {
  it('lists only the models the key may use', async () => {
    const h = harness()
    const all = await h.createKey()
    const one = await h.createKey({ name: 'scoped', models: ['chat-classic'] })
    const openaiAll = new OpenAI({ apiKey: all.key, baseURL: 'http://podgate/v1', fetch: h.clientFetch })
    const openaiOne = new OpenAI({ apiKey: one.key, baseURL: 'http://podgate/v1', fetch: h.clientFetch })
    expect((await openaiAll.models.list()).data.map((m) => m.id).sort()).toEqual([...MODEL_NAMES, ...EMBEDDING_MODELS].sort())
    expect((await openaiOne.models.list()).data.map((m) => m.id)).toEqual(['chat-classic'])
    const denied = await h.fetch('/v1/chat/completions', authed(one.key, chatBody('chat-openai')))
    expect(denied.status).toBe(403)
    expect(((await denied.json()) as { error: { code: string } }).error.code).toBe('permission_denied')
  })
})
