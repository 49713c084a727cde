/**
 * Requests vLLM (and worker-vllm's native input) accepts that podgate used to refuse with a 400 before
 * anything went upstream (an independent review, runpod-api.md §2 and §5). Each must now reach the
 * endpoint unchanged; the end-to-end cases also check the answer against the emulator.
 */
import { describe, expect, it } from 'vitest'
import type { GatewayOptions } from '../src/index.ts'
import { createRunpodEmulator } from '../src/testing/index.ts'
import { authed, harness, RUNPOD_KEY } from './helpers.ts'

const SERVED = 'org/Served-Model-8B'
const MODELS: GatewayOptions['models'] = {
  openai: { endpoints: [{ endpointId: 'epopenai' }], mode: 'openai', servedModelName: SERVED },
  native: { endpoints: [{ endpointId: 'epnative' }], mode: 'native', servedModelName: SERVED },
}
interface Call {
  op: string
  body: Record<string, unknown> | undefined
}

/** A gateway whose upstream records each call and answers as vLLM would. */
function setup() {
  const calls: Call[] = []
  const completion = { id: 'cmpl-1', object: 'text_completion', created: 1, model: SERVED, choices: [{ index: 0, text: 'Hello world', logprobs: null, finish_reason: 'length', prompt_logprobs: null }], usage: { prompt_tokens: 2, completion_tokens: 0, total_tokens: 2 } }
  const chat = { id: 'c', object: 'chat.completion', created: 1, model: SERVED, choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage: { prompt_tokens: 2, completion_tokens: 1, total_tokens: 3 } }
  const embeddings = { object: 'list', model: SERVED, data: [{ index: 0, object: 'embedding', embedding: [0.5] }], usage: { prompt_tokens: 2, total_tokens: 2 } }
  const fetchFake = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const request = new Request(input, init)
    const op = new URL(request.url).pathname.split('/').slice(3).join('/')
    const text = request.method === 'POST' ? await request.text() : ''
    calls.push({ op, body: text ? (JSON.parse(text) as Record<string, unknown>) : undefined })
    if (op === 'openai/v1/completions') return Response.json(completion)
    if (op === 'openai/v1/chat/completions') return Response.json(chat)
    if (op === 'openai/v1/embeddings') return Response.json(embeddings)
    if (op === 'run') return Response.json({ id: 'job1', status: 'IN_QUEUE' })
    return new Response('not found', { status: 404 })
  }
  const h = harness({ models: MODELS, fetch: fetchFake as typeof fetch }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
  return { h, calls }
}

async function send(path: string, body: Record<string, unknown>) {
  const { h, calls } = setup()
  const { key } = await h.createKey()
  const res = await h.fetch(path, authed(key, JSON.stringify(body)))
  return { res, text: await res.text(), calls }
}

async function expectForwarded(path: string, body: Record<string, unknown>) {
  const { res, text, calls } = await send(path, body)
  expect(res.status, text).toBe(200)
  expect(calls).toHaveLength(1)
  const { model: _sent, ...rest } = calls[0]!.body!
  const { model: _asked, ...asked } = body
  // Everything but `model` (the served name) arrives as sent; podgate may add `max_tokens` and `stream_options`.
  expect(rest).toMatchObject(asked)
  return calls[0]!
}

describe('valid vLLM requests reach the endpoint', () => {
  it('completions: echo with max_tokens 0 scores the prompt', async () => {
    const call = await expectForwarded('/v1/completions', { model: 'openai', prompt: 'Hello world', echo: true, max_tokens: 0, logprobs: 1 })
    expect(call.body!.max_tokens).toBe(0)
  })

  it('completions: max_tokens 0 without echo is still a 400 naming max_tokens, and nothing goes upstream', async () => {
    const { res, text, calls } = await send('/v1/completions', { model: 'openai', prompt: 'Hello world', max_tokens: 0 })
    expect(res.status).toBe(400)
    expect(JSON.parse(text)).toMatchObject({ error: { param: 'max_tokens', message: expect.stringContaining("'echo': true") } })
    expect(calls).toHaveLength(0)
  })

  it('completions: prompt_embeds without prompt', async () => {
    await expectForwarded('/v1/completions', { model: 'openai', prompt_embeds: 'UEsDBAAACAgAAAAAAAAAAAAAAAAAAAAAAAAQABIAYXJjaGl2ZS9kYXRhLnBrbEZCDgBaWlpaWlpaWlpaWlpaWoACY3RvcmNo', max_tokens: 8 })
  })

  it('completions: prompt null beside prompt_embeds, and embeddings: input null beside messages', async () => {
    await expectForwarded('/v1/completions', { model: 'openai', prompt: null, prompt_embeds: 'UEsDBAAACAgAAAAA', max_tokens: 8 })
    await expectForwarded('/v1/embeddings', { model: 'openai', input: null, messages: [{ role: 'user', content: 'embed me' }] })
  })

  it('native /run: max_tokens 0 is a 400 that does not point at echo, which native input refuses', async () => {
    const { h, calls } = setup()
    const { key } = await h.createKey()
    const res = await h.fetch('/v2/native/run', authed(key, JSON.stringify({ input: { prompt: 'Once upon', sampling_params: { max_tokens: 0 } } })))
    expect(res.status).toBe(400)
    const body = (await res.json()) as { error: string }
    expect(body.error).toContain("'max_tokens' must be at least 1, got 0")
    expect(body.error).not.toContain('echo')
    expect(calls).toHaveLength(0)
  })

  it('chat on a native endpoint: worker-vllm\'s beam-search params go as an openai_route job (current vLLM\'s SamplingParams has none of them)', async () => {
    const { h, calls } = setup()
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ model: 'native', messages: [{ role: 'user', content: 'hi' }], use_beam_search: true, max_tokens: 8 })))
    await res.text()
    expect(calls[0]).toMatchObject({ op: 'run', body: { input: { openai_route: '/v1/chat/completions', openai_input: { use_beam_search: true } } } })
  })

  it('completions: neither prompt nor prompt_embeds is a 400 naming prompt', async () => {
    const { res, text, calls } = await send('/v1/completions', { model: 'openai', max_tokens: 8 })
    expect(res.status).toBe(400)
    expect(JSON.parse(text)).toMatchObject({ error: { param: 'prompt', message: "Missing required parameter: 'prompt'" } })
    expect(calls).toHaveLength(0)
  })

  it('embeddings: chat-style messages instead of input', async () => {
    await expectForwarded('/v1/embeddings', { model: 'openai', messages: [{ role: 'user', content: [{ type: 'text', text: 'embed me' }, { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } }] }], encoding_format: 'float' })
  })

  it('embeddings: neither input nor messages is a 400 naming input', async () => {
    const { res, text, calls } = await send('/v1/embeddings', { model: 'openai', encoding_format: 'float' })
    expect(res.status).toBe(400)
    expect(JSON.parse(text)).toMatchObject({ error: { param: 'input', message: "Missing required parameter: 'input'" } })
    expect(calls).toHaveLength(0)
  })

  it('embeddings: 2048 inputs in one request (OpenAI\'s own maximum)', async () => {
    await expectForwarded('/v1/embeddings', { model: 'openai', input: Array.from({ length: 2048 }, (_, i) => `doc ${i}`) })
  })

  it('an array over podgate\'s item bound is refused for its size, not for its item type', async () => {
    const { res, text, calls } = await send('/v1/embeddings', { model: 'openai', input: Array.from({ length: 10_001 }, () => 'a') })
    expect(res.status).toBe(400)
    const { error } = JSON.parse(text) as { error: { message: string; param: string } }
    expect(error.param).toBe('input')
    expect(error.message).toContain('10000')
    expect(error.message).not.toContain('expected a number')
    expect(calls).toHaveLength(0)
  })

  it('a long-context prompt: text past a million characters, within the body limit (vLLM bounds it by the model\'s context)', async () => {
    const long = 'word '.repeat(300_000)
    await expectForwarded('/v1/chat/completions', { model: 'openai', messages: [{ role: 'user', content: long }] })
    await expectForwarded('/v1/chat/completions', { model: 'openai', messages: [{ role: 'user', content: [{ type: 'text', text: long }] }, { role: 'user', content: long }] })
    await expectForwarded('/v1/completions', { model: 'openai', prompt: long })
    await expectForwarded('/v1/embeddings', { model: 'openai', input: [long, long] })
  })

  it('chat: temperature above 2', async () => {
    await expectForwarded('/v1/chat/completions', { model: 'openai', messages: [{ role: 'user', content: 'hi' }], temperature: 2.5, min_p: 0.1 })
  })

  it('chat: a plain-string content part', async () => {
    await expectForwarded('/v1/chat/completions', { model: 'openai', messages: [{ role: 'user', content: ['Describe this'] }] })
  })

  it('chat: a part with no type', async () => {
    await expectForwarded('/v1/chat/completions', { model: 'openai', messages: [{ role: 'user', content: [{ type: 'text', text: 'What is this?' }, { image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } }] }] })
  })

  it('chat: a part with text: null', async () => {
    await expectForwarded('/v1/chat/completions', { model: 'openai', messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }, { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' }, text: null }] }] })
  })

  it.each([
    ['truncate_prompt_tokens', { truncate_prompt_tokens: 256 }],
    ['use_beam_search', { use_beam_search: false }],
    ['early_stopping', { early_stopping: 'never' }],
  ])('native /run: worker-vllm sampling param %s', async (_name, extra) => {
    const { h, calls } = setup()
    const { key } = await h.createKey()
    const res = await h.fetch('/v2/native/run', authed(key, JSON.stringify({ input: { messages: [{ role: 'user', content: 'hi' }], sampling_params: { max_tokens: 16, ...extra } } })))
    expect(res.status, await res.text()).toBe(200)
    expect(calls[0]).toMatchObject({ op: 'run', body: { input: { sampling_params: extra } } })
  })

  it('native /run: repetition_penalty 2.5 and 20 stop strings (vLLM bounds neither)', async () => {
    const { h, calls } = setup()
    const { key } = await h.createKey()
    const stop = Array.from({ length: 20 }, (_, i) => `<${i}>`)
    const res = await h.fetch('/v2/native/run', authed(key, JSON.stringify({ input: { prompt: 'Once upon', sampling_params: { max_tokens: 16, repetition_penalty: 2.5, stop } } })))
    expect(res.status, await res.text()).toBe(200)
    expect(calls[0]).toMatchObject({ op: 'run', body: { input: { sampling_params: { repetition_penalty: 2.5, stop } } } })
  })

  it('native /run: a sampling value out of vLLM\'s bounds names that value, not the messages', async () => {
    const { h, calls } = setup()
    const { key } = await h.createKey()
    const res = await h.fetch('/v2/native/run', authed(key, JSON.stringify({ input: { prompt: 'Once upon', sampling_params: { max_tokens: 16, presence_penalty: 3 } } })))
    expect(res.status).toBe(400)
    const body = (await res.json()) as { error: string }
    expect(body.error).toContain("'input.sampling_params.presence_penalty'")
    expect(body.error).not.toContain('messages')
    expect(calls).toHaveLength(0)
  })
})

describe('against the emulator', () => {
  it('echo with max_tokens 0 answers the prompt alone', async () => {
    const h = harness()
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/completions', authed(key, JSON.stringify({ model: 'chat-openai', prompt: 'Score this sentence', echo: true, max_tokens: 0 })))
    expect(res.status).toBe(200)
    const body = (await res.json()) as { choices: Array<{ text: string; finish_reason: string }> }
    expect(body.choices[0]).toMatchObject({ text: 'Score this sentence', finish_reason: 'length' })
  })

  it.each(['chat-classic', 'chat-current'])('%s: best_of (legacy completions clients send best_of: 1) is answered, not a failed job', async (model) => {
    const h = harness()
    const { key } = await h.createKey()
    for (const [path, body] of [
      ['/v1/completions', { model, prompt: 'Once upon a time', best_of: 1, max_tokens: 8 }],
      ['/v1/chat/completions', { model, messages: [{ role: 'user', content: 'Hi' }], n: 1, best_of: 2, max_tokens: 8 }],
    ] as const) {
      const res = await h.fetch(path, authed(key, JSON.stringify(body)))
      expect(res.status, await res.clone().text()).toBe(200)
      const answer = (await res.json()) as { choices: unknown[] }
      expect(answer.choices).toHaveLength(1)
    }
  })

  it.each(['chat-classic', 'chat-current', 'chat-openai'])('%s: greedy sampling with n > 1, or min_tokens past max_tokens, is vLLM\'s 400, not a failed worker', async (model) => {
    const h = harness()
    const { key } = await h.createKey()
    for (const [params, message] of [
      [{ temperature: 0, n: 2, max_tokens: 8 }, 'n must be 1 when using greedy sampling, got 2.'],
      [{ min_tokens: 9, max_tokens: 8 }, 'min_tokens must be less than or equal to max_tokens=8, got 9.'],
    ] as const) {
      const res = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ model, messages: [{ role: 'user', content: 'Hi' }], ...params })))
      const text = await res.text()
      expect(res.status, text).toBe(400)
      expect(JSON.parse(text)).toMatchObject({ error: { type: 'invalid_request_error', message: expect.stringContaining(message) } })
    }
  })

  it.each(['chat-classic', 'chat-current'])('native /run on %s: greedy sampling with n > 1, or min_tokens past max_tokens, is a 400 before any upstream call', async (model) => {
    const h = harness()
    const { key } = await h.createKey()
    for (const params of [{ temperature: 0, n: 2 }, { min_tokens: 9, max_tokens: 8 }, { min_tokens: 600 }]) {
      const res = await h.fetch(`/v2/${model}/run`, authed(key, JSON.stringify({ input: { messages: [{ role: 'user', content: 'Hi' }], sampling_params: params } })))
      const text = await res.text()
      expect(res.status, text).toBe(400)
      expect(JSON.parse(text)).toEqual({ code: 'invalid_request', error: "Invalid request: vLLM takes 'n' 1 at temperature 0 (greedy sampling) and 'min_tokens' at most 'max_tokens'" })
    }
    expect(h.emulator.calls).toEqual([])
    // Beam search (worker-vllm's use_beam_search) is not greedy sampling: older vLLM ran it only at temperature 0.
    const beam = await h.fetch(`/v2/${model}/run`, authed(key, JSON.stringify({ input: { prompt: 'Hi', sampling_params: { use_beam_search: true, temperature: 0, n: 2 } } })))
    expect(beam.status, await beam.text()).toBe(200)
  })

  it.each(['embed-openai', 'embed-current'])('%s embeds chat messages, the same conversation to the same vector', async (model) => {
    const h = harness()
    const { key } = await h.createKey()
    const ask = () => h.fetch('/v1/embeddings', authed(key, JSON.stringify({ model, messages: [{ role: 'user', content: 'embed this conversation' }] })))
    const [a, b] = [await ask(), await ask()]
    expect(a.status).toBe(200)
    const first = (await a.json()) as { data: Array<{ embedding: number[] }>; usage: { prompt_tokens: number } }
    const second = (await b.json()) as typeof first
    expect(first.data).toHaveLength(1)
    expect(first.data[0]!.embedding.length).toBeGreaterThan(0)
    expect(second.data[0]!.embedding).toEqual(first.data[0]!.embedding)
    expect(first.usage.prompt_tokens).toBe(3)
  })
})
