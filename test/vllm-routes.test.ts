/**
 * vLLM's other routes (`/v1/responses`, `/v1/messages`, `/v1/messages/count_tokens`, `/v1/rerank`,
 * `/v1/score`, `/v1/classify`, `/v1/pooling`, `/v1/tokenize`, `/v1/detokenize`, `/v2/rerank` and `/v2/embed`): podgate forwards their
 * bodies unchanged but for `model` and the output cap, on both upstream modes, counts them against
 * quotas, answers errors in the route's own shape, and ends a cut stream with an error event of the
 * stream's own dialect.
 */
import { describe, expect, it } from 'vitest'
import type { GatewayOptions } from '../src/index.ts'
import { createRunpodEmulator } from '../src/testing/index.ts'
import { pythonStr } from '../src/testing/emulator/python-str.ts'
import { authed, harness, RUNPOD_KEY, scriptedUpstream } from './helpers.ts'

const SERVED = 'org/Served-Model-8B'
const MODELS: GatewayOptions['models'] = {
  openai: { endpoints: [{ endpointId: 'epopenai' }], mode: 'openai', servedModelName: SERVED, maxTokensCap: 1000, defaultMaxTokens: 64 },
  native: { endpoints: [{ endpointId: 'epnative' }], mode: 'native', servedModelName: SERVED },
  'chat-only': { endpoints: [{ endpointId: 'epchat' }], kinds: ['chat'] },
}
const QUOTA_CLOCK = { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) }

interface Call {
  op: string
  body: Record<string, unknown> | undefined
}

/** What each route's vLLM answers (JSON), by the path after `/v1` (or `/` for the routes outside it). */
const ANSWERS: Record<string, Record<string, unknown>> = {
  '/responses': { id: 'resp_1', object: 'response', model: SERVED, status: 'completed', output: [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Hi', annotations: [] }] }], usage: { input_tokens: 5, input_tokens_details: { cached_tokens: 0 }, output_tokens: 7, output_tokens_details: { reasoning_tokens: 2 }, total_tokens: 12 } },
  '/messages': { id: 'msg_1', type: 'message', role: 'assistant', model: SERVED, content: [{ type: 'text', text: 'Hi' }], stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 4, output_tokens: 3 } },
  '/messages/count_tokens': { input_tokens: 4 },
  '/rerank': { id: 'rerank-1', model: SERVED, usage: { total_tokens: 9 }, results: [{ index: 1, document: { text: 'b' }, relevance_score: 0.9 }] },
  '/v2/rerank': { id: 'rerank-2', model: SERVED, usage: { total_tokens: 9 }, results: [{ index: 1, document: { text: 'b' }, relevance_score: 0.9 }] },
  '/v2/embed': { id: 'embd-1', embeddings: { float: [[0.25, -0.5]] }, texts: ['a'], meta: { api_version: { version: '2' }, billed_units: { input_tokens: 7, image_tokens: 4 } } },
  '/score': { id: 'score-1', object: 'list', created: 1, model: SERVED, data: [{ index: 0, object: 'score', score: 0.5 }], usage: { prompt_tokens: 6, total_tokens: 6, completion_tokens: 0 } },
  '/tokenize': { count: 2, max_model_len: 8192, tokens: [1, 2], token_strs: null },
  '/detokenize': { prompt: 'Hi there' },
  '/classify': { id: 'classify-1', object: 'list', created: 1, model: SERVED, data: [{ index: 0, label: 'positive', probs: [0.8, 0.2], num_classes: 2 }], usage: { prompt_tokens: 3, total_tokens: 3, completion_tokens: 0 } },
  '/chat/completions': { id: 'chatcmpl-1', object: 'chat.completion', created: 1, model: SERVED, choices: [{ index: 0, message: { role: 'assistant', content: 'A dot' }, finish_reason: 'stop' }], usage: { prompt_tokens: 1030, completion_tokens: 3, total_tokens: 1033 } },
  '/pooling': { id: 'pool-1', object: 'list', created: 1, model: SERVED, data: [{ index: 0, object: 'pooling', data: [0.25] }], usage: { prompt_tokens: 3, total_tokens: 3, completion_tokens: 0 } },
}

/** Records a fake upstream's call in `calls` (its path after the endpoint, and the JSON body it carried), and returns that path. */
async function recordCall(calls: Call[], input: RequestInfo | URL, init?: RequestInit): Promise<string> {
  const request = new Request(input, init)
  const op = new URL(request.url).pathname.split('/').slice(3).join('/')
  const text = request.method === 'POST' ? await request.text() : ''
  calls.push({ op, body: text ? (JSON.parse(text) as Record<string, unknown>) : undefined })
  return op
}

/** A gateway whose upstream records each call and answers as vLLM (or worker-vllm's job API) would. */
function setup(options: { refuse?: Response } = {}) {
  const calls: Call[] = []
  const fetchFake = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const op = await recordCall(calls, input, init)
    if (options.refuse) return options.refuse.clone()
    if (op.startsWith('openai/v1/')) return Response.json(ANSWERS[op.slice('openai/v1'.length)] ?? {})
    if (op === 'run') return Response.json({ id: 'job1', status: 'IN_QUEUE' })
    if (op.startsWith('status-sync/')) {
      const route = (calls.find((c) => c.op === 'run')!.body!.input as { openai_route: string }).openai_route
      return Response.json({ id: 'job1', status: 'COMPLETED', output: [ANSWERS[route.replace(/^\/v1/, '')]] })
    }
    return new Response('not found', { status: 404 })
  }
  const h = harness({ models: MODELS, fetch: fetchFake as typeof fetch, quota: QUOTA_CLOCK }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
  return { h, calls }
}

/** A Cohere route's body naming a model the key may not use is a 400, one with no key a 401: neither reaches the upstream. */
async function expectRefusedBeforeUpstream({ h, calls }: ReturnType<typeof setup>, key: string, path: string, body: Record<string, unknown>) {
  calls.length = 0
  const chatOnly = await h.fetch(path, authed(key, JSON.stringify({ ...body, model: 'chat-only' })))
  expect(chatOnly.status).toBe(400)
  expect(await chatOnly.json()).toMatchObject({ error: { param: 'model', type: 'invalid_request_error' } })
  const keyless = await h.fetch(path, { method: 'POST', body: JSON.stringify(body) })
  expect(keyless.status).toBe(401)
  expect(await keyless.json()).toMatchObject({ error: { type: 'authentication_error' } })
  expect(calls).toHaveLength(0)
}

async function usageOf(h: ReturnType<typeof setup>['h'], key: string) {
  await h.settle()
  const report = (await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number; requests: number } } }
  return report.windows.minute
}

describe('vLLM routes: JSON answers, forwarded as written', () => {
  const responsesBody = {
    model: 'openai',
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'Weather in Paris?' }] }],
    instructions: 'Be brief.',
    tools: [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } }],
    reasoning: { effort: 'low' },
    text: { format: { type: 'json_schema', name: 'w', schema: { type: 'object' } } },
    a_field_vllm_adds_next_year: [1, { x: null }],
  }

  it('/v1/responses: the body reaches /openai/v1/responses unchanged but for model and the default output cap; the answer names the alias', async () => {
    const { h, calls } = setup()
    const { key } = await h.createKey({ name: 'routes', quota: { tokensPerMinute: 100_000 } })
    const res = await h.fetch('/v1/responses', authed(key, JSON.stringify(responsesBody)))
    const answer = (await res.json()) as Record<string, unknown>
    expect(res.status, JSON.stringify(answer)).toBe(200)
    expect(calls.map((c) => c.op)).toEqual(['openai/v1/responses'])
    expect(calls[0]!.body).toEqual({ ...responsesBody, model: SERVED, max_output_tokens: 64 })
    expect(answer).toEqual({ ...ANSWERS['/responses'], model: 'openai' })
    expect(await usageOf(h, key)).toEqual(expect.objectContaining({ requests: 1, tokens: 12 }))
  })

  it('/v1/messages: Anthropic SDKs authenticate with x-api-key; the caller\'s max_tokens is kept', async () => {
    const { h, calls } = setup()
    const { key } = await h.createKey()
    const body = { model: 'openai', max_tokens: 200, system: 'Be brief.', messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }], thinking: { type: 'enabled', budget_tokens: 100 } }
    const res = await h.fetch('/v1/messages', { method: 'POST', headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' }, body: JSON.stringify(body) })
    expect(res.status).toBe(200)
    expect(await res.json()).toEqual({ ...ANSWERS['/messages'], model: 'openai' })
    expect(calls[0]).toEqual({ op: 'openai/v1/messages', body: { ...body, model: SERVED } })
  })

  it.each(['messages/count_tokens', 'rerank', 'score'])('/v1/%s goes to the same route under /openai/v1', async (route) => {
    const { h, calls } = setup()
    const { key } = await h.createKey()
    const body = { model: 'openai', query: 'q', documents: ['a', 'b'], top_n: 1, messages: [{ role: 'user', content: 'Hi' }] }
    const res = await h.fetch(`/v1/${route}`, authed(key, JSON.stringify(body)))
    expect(res.status).toBe(200)
    const answer = ANSWERS[`/${route}`]!
    expect(await res.json()).toEqual('model' in answer ? { ...answer, model: 'openai' } : answer)
    expect(calls).toEqual([{ op: `openai/v1/${route}`, body: { ...body, model: SERVED } }])
  })

  it.each(['tokenize', 'detokenize', 'classify', 'pooling'])('/v1/%s, outside vLLM\'s /v1, goes as an openai_route job even to an OpenAI-mode endpoint', async (route) => {
    const { h, calls } = setup()
    const { key } = await h.createKey()
    const body = { model: 'openai', prompt: 'Hi there', tokens: [1, 2], input: ['good'], add_special_tokens: false }
    const res = await h.fetch(`/v1/${route}`, authed(key, JSON.stringify(body)))
    expect(res.status).toBe(200)
    const answer = ANSWERS[`/${route}`]!
    expect(await res.json()).toEqual('model' in answer ? { ...answer, model: 'openai' } : answer)
    expect(calls[0]).toEqual({ op: 'run', body: { input: { openai_route: `/${route}`, openai_input: { ...body, model: SERVED } } } })
    expect(calls[1]!.op).toMatch(/^status-sync\/job1/)
  })

  it('a native-mode model serves /v1/responses and /v1/rerank as openai_route jobs, usage counted', async () => {
    const { h, calls } = setup()
    const { key } = await h.createKey({ name: 'routes', quota: { tokensPerMinute: 100_000 } })
    const res = await h.fetch('/v1/responses', authed(key, JSON.stringify({ ...responsesBody, model: 'native' })))
    expect(res.status).toBe(200)
    expect(((await res.json()) as { model: string }).model).toBe('native')
    expect(calls[0]!.body).toMatchObject({ input: { openai_route: '/v1/responses', openai_input: { ...responsesBody, model: SERVED } } })
    expect(await usageOf(h, key)).toEqual(expect.objectContaining({ requests: 1, tokens: 12 }))
    calls.length = 0
    const rerank = await h.fetch('/v1/rerank', authed(key, JSON.stringify({ model: 'native', query: 'q', documents: ['a', 'b'] })))
    expect(rerank.status).toBe(200)
    expect(calls[0]!.body).toMatchObject({ input: { openai_route: '/v1/rerank' } })
    expect(await usageOf(h, key)).toEqual(expect.objectContaining({ requests: 2, tokens: 21 }))
  })

  it("/v2/rerank, Cohere's v2 API, goes as an openai_route job to vLLM's /v2/rerank with the model from the body, counted; its refusals are OpenAI's", async () => {
    const { h, calls } = setup()
    const { key } = await h.createKey({ name: 'routes', quota: { tokensPerMinute: 100_000 } })
    const body = { model: 'openai', query: 'q', documents: ['a', 'b'], top_n: 1, max_tokens_per_doc: 512 }
    const res = await h.fetch('/v2/rerank', authed(key, JSON.stringify(body)))
    expect(res.status).toBe(200)
    expect(await res.json()).toEqual({ ...ANSWERS['/v2/rerank'], model: 'openai' })
    expect(calls[0]).toEqual({ op: 'run', body: { input: { openai_route: '/v2/rerank', openai_input: { ...body, model: SERVED } } } })
    expect(await usageOf(h, key)).toEqual(expect.objectContaining({ requests: 1, tokens: 9 }))
    await expectRefusedBeforeUpstream({ h, calls }, key, '/v2/rerank', body)
  })

  it("/v2/embed, Cohere's v2 embed API (vLLM serves it since PR #37074), goes as an openai_route job with the model from the body; its refusals are OpenAI's", async () => {
    const { h, calls } = setup()
    const { key } = await h.createKey({ name: 'routes', quota: { tokensPerMinute: 100_000 } })
    const body = { model: 'openai', texts: ['a'], input_type: 'search_document', embedding_types: ['float'], output_dimension: 2, truncate: 'END', max_tokens: 512 }
    const res = await h.fetch('/v2/embed', authed(key, JSON.stringify(body)))
    expect(res.status, await res.clone().text()).toBe(200)
    expect(await res.json()).toEqual(ANSWERS['/v2/embed'])
    // Cohere's `max_tokens` is a truncation length here, not an output cap: forwarded as written.
    expect(calls[0]).toEqual({ op: 'run', body: { input: { openai_route: '/v2/embed', openai_input: { ...body, model: SERVED } } } })
    // vLLM reports the count as Cohere does, text and image tokens apart under meta.billed_units: charged 7 + 4.
    expect(await usageOf(h, key)).toEqual(expect.objectContaining({ requests: 1, tokens: 11 }))
    await expectRefusedBeforeUpstream({ h, calls }, key, '/v2/embed', body)
  })

  it('Runpod\'s URL shape serves them too: /v2/<model>/openai/v1/responses', async () => {
    const { h, calls } = setup()
    const { key } = await h.createKey()
    const res = await h.fetch('/v2/openai/openai/v1/responses', authed(key, JSON.stringify({ input: 'Hi' })))
    expect(res.status).toBe(200)
    expect(calls[0]).toEqual({ op: 'openai/v1/responses', body: { input: 'Hi', model: SERVED, max_output_tokens: 64 } })
  })
})

describe('vLLM routes: a previous_response_id vLLM does not hold', () => {
  // vLLM answers an unknown `previous_response_id` (a response stored on another serverless worker, or
  // none: its store is off by default) with a 404 of type invalid_request_error, the caller's to fix; its
  // unknown model is a 404 NotFoundError, the operator's. Found in the surfaces review: podgate took the
  // first for the second, a 502 on the OpenAI route and, on a native endpoint, a worker failure tried on
  // every endpoint and counted against each one's breaker: any key could trip them with a made-up id.
  const notFound = { error: { message: "Response with id 'resp_gone' not found.", type: 'invalid_request_error', param: 'response_id', code: 404 } }
  const body = { model: 'native', input: 'Hi', previous_response_id: 'resp_gone' }

  it('on an OpenAI-mode endpoint: the caller\'s 404 with vLLM\'s message', async () => {
    const { h, calls } = setup({ refuse: Response.json(notFound, { status: 404 }) })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/responses', authed(key, JSON.stringify({ ...body, model: 'openai' })))
    expect(res.status).toBe(404)
    expect(await res.json()).toMatchObject({ error: { type: 'invalid_request_error', message: "Response with id 'resp_gone' not found." } })
    expect(calls).toHaveLength(1)
  })

  it('on native endpoints (current worker-vllm wraps the 404): the caller\'s 404, tried on one endpoint only', async () => {
    const runs: string[] = []
    const fetchFake = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
      const url = new URL(new Request(input, init).url)
      const [, , endpoint, op] = url.pathname.split('/')
      if (op === 'run') {
        runs.push(endpoint!)
        return Response.json({ id: `job-${endpoint}`, status: 'IN_QUEUE' })
      }
      // runpod-python ends the job at the worker's error item: its error is Python's str() of the item's.
      const error = pythonStr({ message: `vLLM returned HTTP 404: ${JSON.stringify(notFound)}`, type: 'worker_error', code: null })
      if (op === 'status-sync' || op === 'status') return Response.json({ id: `job-${endpoint}`, status: 'FAILED', error, workerId: 'w1' })
      if (op === 'stream') return Response.json({ status: 'FAILED', stream: [] })
      return Response.json({ id: `job-${endpoint}`, status: 'CANCELLED' })
    }
    const models: GatewayOptions['models'] = { native: { endpoints: [{ endpointId: 'epa' }, { endpointId: 'epb' }], mode: 'native', servedModelName: SERVED } }
    const h = harness({ models, fetch: fetchFake as typeof fetch, quota: QUOTA_CLOCK }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
    const { key } = await h.createKey()
    for (const stream of [false, true]) {
      runs.length = 0
      const res = await h.fetch('/v1/responses', authed(key, JSON.stringify({ ...body, stream })))
      expect(res.status, `stream: ${stream}`).toBe(404)
      expect(await res.json()).toMatchObject({ error: { type: 'invalid_request_error', message: "Response with id 'resp_gone' not found." } })
      expect(runs).toHaveLength(1)
    }
  })
})

describe('vLLM routes: a `stream` field on a route that does not stream', () => {
  // worker-vllm v2.24+ (handler.py) relays vLLM's answer as text chunks whenever the job's body has
  // `stream: true`, whatever the route: vLLM ignores the field on these routes and answers JSON, which the
  // worker then yields as strings. Found in the surfaces review: podgate forwarded the field and refused
  // the job's output as "something other than one JSON answer" (a 502) where vLLM itself answers 200.
  it.each(['tokenize', 'embeddings', 'messages/count_tokens'])('/v1/%s with stream: true on a current worker answers vLLM\'s JSON', async (route) => {
    const calls: Call[] = []
    const answers: Record<string, Record<string, unknown>> = { tokenize: ANSWERS['/tokenize']!, embeddings: { object: 'list', data: [{ index: 0, object: 'embedding', embedding: [0.5] }], model: SERVED, usage: { prompt_tokens: 2, total_tokens: 2 } }, 'messages/count_tokens': ANSWERS['/messages/count_tokens']! }
    const fetchFake = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
      const op = await recordCall(calls, input, init)
      if (op === 'run') return Response.json({ id: 'job1', status: 'IN_QUEUE' })
      if (op.startsWith('status-sync/')) {
        const input = calls.find((c) => c.op === 'run')!.body!.input as { openai_input: { stream?: unknown } }
        const json = JSON.stringify(answers[route])
        // `resp.content.iter_any()` under `stream: true`: the JSON text, in pieces, as the job's output.
        return Response.json({ id: 'job1', status: 'COMPLETED', output: input.openai_input.stream === true ? [json.slice(0, 7), json.slice(7)] : [JSON.parse(json)] })
      }
      return new Response('not found', { status: 404 })
    }
    const h = harness({ models: MODELS, fetch: fetchFake as typeof fetch, quota: QUOTA_CLOCK }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
    const { key } = await h.createKey()
    const body = { model: 'native', prompt: 'Hi', input: 'Hi', messages: [{ role: 'user', content: 'Hi' }], stream: true }
    const res = await h.fetch(`/v1/${route}`, authed(key, JSON.stringify(body)))
    expect(res.status, await res.clone().text()).toBe(200)
    expect(await res.json()).toEqual('model' in answers[route]! ? { ...answers[route], model: 'native' } : answers[route])
  })
})

describe('vLLM routes: an image reserves what it does on chat', () => {
  // 100,000 base64 characters (a 75 KB image): 25,000 tokens as text, more than the key's whole minute.
  const data = 'A'.repeat(100_000)
  const bodies: Record<string, Record<string, unknown>> = {
    messages: { model: 'openai', max_tokens: 64, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data } }, { type: 'text', text: 'What is this?' }] }] },
    responses: { model: 'openai', input: [{ role: 'user', content: [{ type: 'input_image', image_url: `data:image/png;base64,${data}` }, { type: 'input_text', text: 'What is this?' }] }] },
    'chat/completions': { model: 'openai', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${data}` } }, { type: 'text', text: 'What is this?' }] }] },
  }

  it.each(Object.keys(bodies))('/v1/%s with a base64 image is admitted under a 20,000 tokens-a-minute key, as chat is (1,024 tokens a media part)', async (route) => {
    const { h, calls } = setup()
    const { key } = await h.createKey({ name: 'images', quota: { tokensPerMinute: 20_000 } })
    const res = await h.fetch(`/v1/${route}`, authed(key, JSON.stringify(bodies[route])))
    expect(res.status, await res.clone().text()).toBe(200)
    expect(calls).toHaveLength(1)
  })
})

describe('vLLM routes: counting tokens costs a request, no tokens', () => {
  // 40,000 characters: 10,000 tokens as text, more than the key's whole minute.
  const text = 'word '.repeat(8_000)
  const bodies: Record<string, Record<string, unknown>> = {
    'messages/count_tokens': { model: 'openai', messages: [{ role: 'user', content: text }] },
    tokenize: { model: 'openai', prompt: text },
    detokenize: { model: 'openai', tokens: Array.from({ length: 12_000 }, (_, i) => i) },
  }

  it.each(Object.keys(bodies))('/v1/%s of a body larger than a 5,000 tokens-a-minute key\'s limit is admitted and charged no tokens (only the tokenizer runs)', async (route) => {
    const { h, calls } = setup()
    const { key } = await h.createKey({ name: 'counting', quota: { tokensPerMinute: 5_000 } })
    const res = await h.fetch(`/v1/${route}`, authed(key, JSON.stringify(bodies[route])))
    expect(res.status, await res.clone().text()).toBe(200)
    expect(calls.length).toBeGreaterThan(0)
    expect(await usageOf(h, key)).toEqual(expect.objectContaining({ requests: 1, tokens: 0 }))
  })

  it('a route that runs the model (/v1/score) still reserves its input', async () => {
    const { h, calls } = setup()
    const { key } = await h.createKey({ name: 'counting', quota: { tokensPerMinute: 5_000 } })
    const res = await h.fetch('/v1/score', authed(key, JSON.stringify({ model: 'openai', text_1: text, text_2: 'b' })))
    expect(res.status).toBe(429)
    expect(calls).toHaveLength(0)
  })
})

describe('vLLM routes: refusals, in the route\'s shape, with nothing sent upstream', () => {
  it('an output cap over the model\'s maxTokensCap, or not an integer, is a 400 naming the field', async () => {
    const { h, calls } = setup()
    const { key } = await h.createKey()
    const over = await h.fetch('/v1/responses', authed(key, JSON.stringify({ model: 'openai', input: 'Hi', max_output_tokens: 1001 })))
    expect(over.status).toBe(400)
    expect(await over.json()).toMatchObject({ error: { type: 'invalid_request_error', param: 'max_output_tokens', message: expect.stringContaining('at most 1000') } })
    const bad = await h.fetch('/v1/responses', authed(key, JSON.stringify({ model: 'openai', input: 'Hi', max_output_tokens: 'many' })))
    expect(bad.status).toBe(400)
    const stream = await h.fetch('/v1/responses', authed(key, JSON.stringify({ model: 'openai', input: 'Hi', stream: 'yes' })))
    expect(await stream.json()).toMatchObject({ error: { param: 'stream' } })
    expect(calls).toHaveLength(0)
  })

  it('/v1/messages answers errors in Anthropic\'s shape: a bad max_tokens, an unknown model, a missing key', async () => {
    const { h, calls } = setup()
    const { key } = await h.createKey()
    const send = (body: Record<string, unknown>, headers: Record<string, string> = { 'x-api-key': key }) =>
      h.fetch('/v1/messages', { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify(body) })
    const capped = await send({ model: 'openai', max_tokens: 5000, messages: [{ role: 'user', content: 'Hi' }] })
    expect(capped.status).toBe(400)
    expect(await capped.json()).toEqual({ type: 'error', error: { type: 'invalid_request_error', message: expect.stringContaining("'max_tokens' must be at most 1000") } })
    const unknown = await send({ model: 'nope', max_tokens: 5, messages: [] })
    expect(unknown.status).toBe(404)
    // Anthropic's type for a 404, where OpenAI's is invalid_request_error.
    expect(await unknown.json()).toMatchObject({ type: 'error', error: { type: 'not_found_error' } })
    const big = await h.fetch('/v1/messages', { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'openai', max_tokens: 5, messages: [{ role: 'user', content: 'x'.repeat(11 << 20) }] }) })
    expect(big.status).toBe(413)
    expect(await big.json()).toMatchObject({ type: 'error', error: { type: 'request_too_large' } })
    const anonymous = await send({ model: 'openai', max_tokens: 5, messages: [] }, {})
    expect(anonymous.status).toBe(401)
    expect(await anonymous.json()).toMatchObject({ type: 'error', error: { type: 'authentication_error' } })
    expect(calls).toHaveLength(0)
  })

  it("a path under /v1/messages podgate does not serve (Anthropic's batches, a trailing slash) is a 404 in Anthropic's shape", async () => {
    const { h, calls } = setup()
    const { key } = await h.createKey()
    for (const path of ['/v1/messages/batches', '/v1/messages/', '/v2/openai/openai/v1/messages/batches']) {
      const res = await h.fetch(path, { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: '{"requests":[]}' })
      expect(res.status).toBe(404)
      expect(await res.json()).toEqual({ type: 'error', error: { type: 'not_found_error', message: expect.stringContaining('No route for POST') } })
    }
    expect(calls).toHaveLength(0)
  })

  it('a model configured for chat only refuses the pooling routes, pointing at the routes it serves', async () => {
    const { h, calls } = setup()
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/rerank', authed(key, JSON.stringify({ model: 'chat-only', query: 'q', documents: ['a'] })))
    expect(res.status).toBe(400)
    expect(await res.json()).toMatchObject({ error: { param: 'model', message: expect.stringContaining('/v1/chat/completions') } })
    expect(calls).toHaveLength(0)
  })

  it("vLLM's own refusal comes back with its status and message; a vLLM 400 on /v1/messages in Anthropic's shape", async () => {
    const refuse = Response.json({ error: { message: 'Responses API does not support this', type: 'BadRequestError', param: null, code: 400 } }, { status: 400 })
    const { h } = setup({ refuse })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/responses', authed(key, JSON.stringify({ model: 'openai', input: 'Hi' })))
    expect(res.status).toBe(400)
    expect(await res.json()).toMatchObject({ error: { message: 'Responses API does not support this' } })
    const messages = await h.fetch('/v1/messages', authed(key, JSON.stringify({ model: 'openai', max_tokens: 5, messages: [] })))
    expect(messages.status).toBe(400)
    expect(await messages.json()).toEqual({ type: 'error', error: { type: 'invalid_request_error', message: 'Responses API does not support this' } })
  })
})

const usage = { input_tokens: 5, input_tokens_details: { cached_tokens: 0 }, output_tokens: 7, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 12 }
function responsesStream(text: string): string[] {
  const response = (status: string, output: unknown[], withUsage: boolean) => ({ id: 'resp_1', object: 'response', created_at: 1, model: SERVED, status, output, ...(withUsage ? { usage } : { usage: null }) })
  const event = (type: string, data: Record<string, unknown>, n: number) => `event: ${type}\ndata: ${JSON.stringify({ ...data, sequence_number: n, type })}\n\n`
  const message = { id: 'msg_1', type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text, annotations: [] }] }
  return [
    event('response.created', { response: response('in_progress', [], false) }, 0),
    event('response.output_text.delta', { item_id: 'msg_1', output_index: 0, content_index: 0, delta: text.slice(0, 3) }, 1),
    event('response.output_text.delta', { item_id: 'msg_1', output_index: 0, content_index: 0, delta: text.slice(3) }, 2),
    event('response.completed', { response: response('completed', [message], true) }, 3),
  ]
}
const messagesStream = [
  `event: message_start\ndata: ${JSON.stringify({ type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', model: SERVED, content: [], usage: { input_tokens: 4, output_tokens: 0 } } })}\n\n`,
  `event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n`,
  `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi ✓"}}\n\n`,
  `event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n`,
  `event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":4,"output_tokens":3}}\n\n`,
  `event: message_stop\ndata: {"type":"message_stop"}\n\n`,
  'data: [DONE]\n\n',
]

async function streamSetup(pieces: Array<string | Error>) {
  const upstream = scriptedUpstream(() => pieces)
  const h = harness({ models: MODELS, fetch: upstream.fetch, quota: QUOTA_CLOCK }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
  const { key } = await h.createKey({ name: 'routes', quota: { tokensPerMinute: 100_000 } })
  return { h, key }
}

describe('vLLM routes: streams, piped natively, ended in their own dialect', () => {
  it('a Responses stream reaches the caller byte for byte, with no [DONE] added; its usage settles the quota', async () => {
    const pieces = responsesStream('Hello there')
    const { h, key } = await streamSetup(pieces)
    const res = await h.fetch('/v1/responses', authed(key, JSON.stringify({ model: 'openai', input: 'Hi', stream: true })))
    expect(res.headers.get('content-type')).toContain('text/event-stream')
    expect(await res.text()).toBe(pieces.join(''))
    expect(await usageOf(h, key)).toEqual(expect.objectContaining({ requests: 1, tokens: 12 }))
  })

  it('a Responses stream whose last event is longer than the tail (it repeats a long answer) still ends whole', async () => {
    const pieces = responsesStream('x'.repeat(100_000))
    const { h, key } = await streamSetup(pieces)
    const res = await h.fetch('/v1/responses', authed(key, JSON.stringify({ model: 'openai', input: 'Hi', stream: true })))
    const got = await res.text()
    expect(got.slice(pieces.join('').length)).toBe('')
    expect(got).toBe(pieces.join(''))
    expect(await usageOf(h, key)).toEqual(expect.objectContaining({ tokens: 12 }))
  })

  it('a Responses stream cut before response.completed ends with an `event: error` the OpenAI SDK reads', async () => {
    const pieces = responsesStream('Hello there').slice(0, 3)
    const { h, key } = await streamSetup(pieces)
    const text = await (await h.fetch('/v1/responses', authed(key, JSON.stringify({ model: 'openai', input: 'Hi', stream: true })))).text()
    expect(text.startsWith(pieces.join(''))).toBe(true)
    const last = text.slice(pieces.join('').length).trim()
    expect(last).toMatch(/^event: error\ndata: /)
    expect(JSON.parse(last.split('data: ')[1]!)).toMatchObject({ type: 'error', code: 'upstream_error', message: expect.stringContaining('ended before the model finished') })
  })

  it('an Anthropic Messages stream reaches the caller byte for byte; input and output tokens settle the quota', async () => {
    const { h, key } = await streamSetup(messagesStream)
    const res = await h.fetch('/v1/messages', authed(key, JSON.stringify({ model: 'openai', max_tokens: 16, messages: [{ role: 'user', content: 'Hi' }], stream: true })))
    expect(await res.text()).toBe(messagesStream.join(''))
    expect(await usageOf(h, key)).toEqual(expect.objectContaining({ requests: 1, tokens: 7 }))
  })

  it('a Messages stream whose connection breaks mid-answer ends with Anthropic\'s error event', async () => {
    const pieces = [...messagesStream.slice(0, 3), new Error('reset')]
    const { h, key } = await streamSetup(pieces)
    const text = await (await h.fetch('/v1/messages', authed(key, JSON.stringify({ model: 'openai', max_tokens: 16, messages: [{ role: 'user', content: 'Hi' }], stream: true })))).text()
    const sent = messagesStream.slice(0, 3).join('')
    expect(text.startsWith(sent)).toBe(true)
    const last = text.slice(sent.length).trim()
    expect(last).toMatch(/^event: error\ndata: /)
    expect(JSON.parse(last.split('data: ')[1]!)).toEqual({ type: 'error', error: { type: 'api_error', message: expect.stringContaining('broke') } })
  })
})

/** An upstream whose stream body is a JavaScript stream (an in-process upstream), which podgate pipes too. */
function jsStreamUpstream(pieces: string[]) {
  const encoder = new TextEncoder()
  const fetchFake = async () => {
    const queue = [...pieces]
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        const next = queue.shift()
        if (next === undefined) controller.close()
        else controller.enqueue(encoder.encode(next))
      },
    })
    return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
  }
  return harness({ models: MODELS, fetch: fetchFake as typeof fetch }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
}

describe('vLLM routes: streams from an in-process upstream (a JavaScript stream)', () => {
  it('relays every event of a Responses stream and a Messages stream with its name and data', async () => {
    const pieces = responsesStream('Hello there')
    const h = jsStreamUpstream(pieces)
    const { key } = await h.createKey()
    const text = await (await h.fetch('/v1/responses', authed(key, JSON.stringify({ model: 'openai', input: 'Hi', stream: true })))).text()
    expect(text).toBe(pieces.join(''))
    const m = jsStreamUpstream(messagesStream)
    const { key: mkey } = await m.createKey()
    expect(await (await m.fetch('/v1/messages', authed(mkey, JSON.stringify({ model: 'openai', max_tokens: 9, messages: [], stream: true })))).text()).toBe(messagesStream.join(''))
  })

  it('a cut stream ends with the dialect\'s error event', async () => {
    const h = jsStreamUpstream(messagesStream.slice(0, 4))
    const { key } = await h.createKey()
    const text = await (await h.fetch('/v1/messages', authed(key, JSON.stringify({ model: 'openai', max_tokens: 9, messages: [], stream: true })))).text()
    expect(text.startsWith(messagesStream.slice(0, 4).join(''))).toBe(true)
    expect(text.trim().split('\n\n').at(-1)).toMatch(/^event: error\ndata: \{"type":"error","error":\{"type":"api_error"/)
  })
})

describe('vLLM routes: native job streams', () => {
  /** A job whose `/stream` pages hold `items` (one page each), COMPLETED with the last. */
  function jobUpstream(items: unknown[]) {
    const calls: Call[] = []
    let page = 0
    const fetchFake = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
      const op = await recordCall(calls, input, init)
      if (op === 'run') return Response.json({ id: 'job1', status: 'IN_QUEUE' })
      if (op.startsWith('stream/')) {
        const item = items[page++]
        return Response.json({ status: page >= items.length ? 'COMPLETED' : 'IN_PROGRESS', stream: item === undefined ? [] : [{ output: item }] })
      }
      if (op.startsWith('cancel/')) return Response.json({ id: 'job1', status: 'CANCELLED' })
      return new Response('not found', { status: 404 })
    }
    const h = harness({ models: MODELS, fetch: fetchFake as typeof fetch, quota: QUOTA_CLOCK }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
    return { h, calls }
  }

  it('a current worker\'s SSE text, cut anywhere, reaches the caller as the route\'s stream', async () => {
    const whole = responsesStream('Hello there').join('')
    const items = [whole.slice(0, 37), whole.slice(37, 200), whole.slice(200)]
    const { h, calls } = jobUpstream(items)
    const { key } = await h.createKey({ name: 'routes', quota: { tokensPerMinute: 100_000 } })
    const res = await h.fetch('/v1/responses', authed(key, JSON.stringify({ model: 'native', input: 'Hi', stream: true })))
    expect(await res.text()).toBe(whole)
    expect(calls[0]!.body).toMatchObject({ input: { openai_route: '/v1/responses', openai_input: { stream: true, model: SERVED } } })
    expect(await usageOf(h, key)).toEqual(expect.objectContaining({ tokens: 12 }))
  })

  it('a classic worker\'s whole events, one an item, and a job that completes without message_stop ends with the error event', async () => {
    const { h } = jobUpstream(messagesStream)
    const { key } = await h.createKey()
    const body = JSON.stringify({ model: 'native', max_tokens: 9, messages: [{ role: 'user', content: 'Hi' }], stream: true })
    expect(await (await h.fetch('/v1/messages', authed(key, body))).text()).toBe(messagesStream.join(''))
    const cut = jobUpstream(messagesStream.slice(0, 3))
    const { key: cutKey } = await cut.h.createKey()
    const text = await (await cut.h.fetch('/v1/messages', authed(cutKey, body))).text()
    expect(text.startsWith(messagesStream.slice(0, 3).join(''))).toBe(true)
    expect(text.trim().split('\n\n').at(-1)).toMatch(/^event: error\ndata: \{"type":"error","error":\{"type":"api_error","message":"The upstream stream ended before the model finished\."/)
  })
})
