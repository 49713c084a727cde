/**
 * Pass-through through the whole gateway (issue 13): what callers send reaches the endpoint unchanged,
 * what the endpoint answers (tool calls, reasoning, logprobs, usage, unknown fields) reaches the caller
 * unchanged, on the OpenAI route and through native jobs of both worker-vllm generations.
 *
 * The upstream is a small scripted fake (the harness takes a `fetch`): it records each body and answers
 * what the test wrote, so the test states exactly the bytes vLLM / worker-vllm would send.
 */
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import type { GatewayOptions } from '../src/index.ts'
import { createRunpodEmulator } from '../src/testing/index.ts'
import { cutRandom } from '../src/streaming/__fixtures__/vllm.ts'
import { authed, harness, readSSE, RUNPOD_KEY } from './helpers.ts'
import { normalizeChatRequest, normalizeCompletionRequest } from '../src/normalize/index.ts'
import { estimateTokens } from '../src/quota/stage.ts'
import { modelSchema } from '../src/config/schema.ts'
import { env } from 'cloudflare:workers'

const SERVED = 'org/Served-Model-8B'

const MODELS: GatewayOptions['models'] = {
  openai: { endpoints: [{ endpointId: 'epopenai' }], mode: 'openai', servedModelName: SERVED },
  native: { endpoints: [{ endpointId: 'epnative' }], mode: 'native', servedModelName: SERVED },
  plainnative: { endpoints: [{ endpointId: 'epnative' }], mode: 'native' },
  twice: { endpoints: [{ endpointId: 'epone' }, { endpointId: 'eptwo' }], mode: 'openai', servedModelName: SERVED },
  // The weights make the first pick (nearly) certain: the failing endpoint is tried first.
  nativefirst: { endpoints: [{ endpointId: 'epmixa', mode: 'native', weight: 1e6 }, { endpointId: 'epmixb', mode: 'openai', weight: 1e-6 }], servedModelName: SERVED },
  openaifirst: { endpoints: [{ endpointId: 'epmixc', mode: 'openai', weight: 1e6 }, { endpointId: 'epmixd', mode: 'native', weight: 1e-6 }], servedModelName: SERVED },
}

interface Call {
  endpoint: string
  op: string
  body: Record<string, unknown> | undefined
  /** The body as it arrived, for what parsing would change (integers past 2^53). */
  text: string
}

/** What the fake answers: per OpenAI-route call a Response, per native job its status and items. */
interface Script {
  openai?: (call: Call) => Response | Promise<Response>
  job?: (call: Call) => { status: string; output?: unknown[]; error?: unknown }
}

function fakeUpstream(script: Script) {
  const calls: Call[] = []
  const jobs = new Map<string, ReturnType<NonNullable<Script['job']>>>()
  const streamed = new Set<string>()
  async function fetchFake(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
    const request = new Request(input, init)
    const url = new URL(request.url)
    const [, , endpoint = '', ...rest] = url.pathname.split('/')
    const op = rest.join('/')
    const text = request.method === 'POST' ? await request.text() : ''
    const call: Call = { endpoint, op, text, body: text ? (JSON.parse(text) as Record<string, unknown>) : undefined }
    calls.push(call)
    if (op.startsWith('openai/v1/')) return script.openai!(call)
    if (op === 'run' || op === 'runsync') {
      const result = script.job!(call)
      const id = `job${calls.length}`
      jobs.set(id, result)
      if (op === 'run') return Response.json({ id, status: 'IN_QUEUE' })
      return Response.json({ id, status: result.status, output: result.output, error: result.error })
    }
    const [verb, id = ''] = op.split('/')
    const job = jobs.get(id)
    // As Runpod does, a page hands out the items produced since the last one: all of them once, then none.
    if (verb === 'stream' && job) {
      const items = streamed.has(id) ? [] : (job.output ?? [])
      streamed.add(id)
      return Response.json({ id, status: job.status, stream: items.map((output) => ({ output })), error: job.error })
    }
    if ((verb === 'status' || verb === 'status-sync') && job) return Response.json({ id, status: job.status, output: job.output, error: job.error })
    if (verb === 'cancel') return Response.json({ id, status: 'CANCELLED' })
    return new Response('not found', { status: 404 })
  }
  return { calls, fetch: fetchFake as typeof fetch }
}

/** A fixed quota clock: a test that reads its minute's counters never straddles a minute boundary. */
const QUOTA_CLOCK = { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) }

function setup(script: Script, overrides: Partial<GatewayOptions> = {}) {
  const upstream = fakeUpstream(script)
  const h = harness({ models: MODELS, fetch: upstream.fetch, quota: QUOTA_CLOCK, ...overrides }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
  return { h, calls: upstream.calls }
}

const head = { id: 'chatcmpl-up', object: 'chat.completion.chunk', created: 1_700_000_000, model: SERVED }
const usage = { prompt_tokens: 12, completion_tokens: 9, total_tokens: 21, prompt_tokens_details: null }

/** A vLLM stream with reasoning (both names), a tool call in fragments, logprobs, stop_reason and a field no release has yet. */
const TOOL_STREAM = [
  { ...head, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }], prompt_token_ids: null },
  { ...head, choices: [{ index: 0, delta: { reasoning: 'Need ', reasoning_content: 'Need ' }, logprobs: null, finish_reason: null }] },
  { ...head, choices: [{ index: 0, delta: { reasoning: 'weather.', reasoning_content: 'weather.' }, logprobs: null, finish_reason: null }] },
  { ...head, choices: [{ index: 0, delta: { content: null, tool_calls: [{ id: 'chatcmpl-tool-abc', type: 'function', index: 0, function: { name: 'get_weather' } }] }, logprobs: null, finish_reason: null }] },
  { ...head, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '{"city": "Pa' } }] }, logprobs: { content: [{ token: '{"', logprob: -0.01, bytes: [123, 34], top_logprobs: [{ token: '{"', logprob: -0.01, bytes: [123, 34] }] }] }, finish_reason: null }] },
  { ...head, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: 'ris ✓"}' } }] }, logprobs: null, finish_reason: null, future_choice_field: 1 }], future_top_field: { a: [1] } },
  { ...head, choices: [{ index: 0, delta: { content: '' }, logprobs: null, finish_reason: 'tool_calls', stop_reason: null }] },
  { ...head, choices: [], usage },
]
const TOOL_SSE = `${TOOL_STREAM.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('')}data: [DONE]\n\n`
const CHAT_BODY = {
  model: 'openai',
  messages: [
    { role: 'system', content: 'Use tools.' },
    { role: 'user', content: [{ type: 'text', text: 'Weather?' }, { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'low' } }] },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
    { role: 'tool', tool_call_id: 'call_0', content: '{"temp": 3}' },
  ],
  tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }],
  tool_choice: 'auto',
  parallel_tool_calls: false,
  response_format: { type: 'json_schema', json_schema: { name: 'w', schema: { type: 'object' } } },
  logprobs: true,
  top_logprobs: 1,
  chat_template_kwargs: { enable_thinking: true },
  guided_json: { type: 'object' },
  max_tokens: 64,
}

const SSE_TYPE = { 'content-type': 'text/event-stream' }
const sse = (text: string) => new Response(text, { headers: SSE_TYPE })
/** `text` as fetch answers it (test/global-setup.ts's replay server, `text/event-stream`): podgate may pipe it natively. */
const fetchedSse = (text: string) => fetch(env.TEST_REPLAY_URL!, { method: 'POST', body: JSON.stringify({ pieces: [text] }) })
/** The chunks a caller got, without the fields podgate writes itself (model always; id and created for native jobs). */
const relayed = (events: unknown[], drop: string[]) =>
  events.map((e) => (typeof e === 'object' && e !== null ? Object.fromEntries(Object.entries(e).filter(([k]) => !drop.includes(k))) : e))

describe('requests pass through', () => {
  it('property: the OpenAI route receives exactly the body sent, model rewritten, in JSON and streams', async () => {
    const { h, calls } = setup({ openai: (call) => (call.body?.stream ? sse(TOOL_SSE) : Response.json({ id: 'x', object: 'chat.completion', created: 1, model: SERVED, choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage })) })
    const { key } = await h.createKey()
    const reserved = new Set(['model', 'messages', 'stream', 'stream_options', 'max_tokens', 'max_completion_tokens', 'n', 'best_of', 'temperature', 'seed', 'user', '__proto__'])
    const extras = fc.dictionary(fc.string({ minLength: 1, maxLength: 10 }).filter((k) => !reserved.has(k)), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 5 })
    await fc.assert(
      fc.asyncProperty(extras, fc.boolean(), async (extra, stream) => {
        calls.length = 0
        const body = { ...CHAT_BODY, ...extra, ...(stream ? { stream: true } : {}) }
        const res = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify(body)))
        await res.text()
        expect(res.status).toBe(200)
        expect(calls).toHaveLength(1)
        const expected = { ...JSON.parse(JSON.stringify(body)), model: SERVED, ...(stream ? { stream_options: { include_usage: true } } : {}) }
        expect(calls[0]!.body).toEqual(expected)
      }),
      { numRuns: 40, seed: 21 },
    )
  })

  it('a native endpoint gets an openai_route job carrying the same body; plain requests keep the shorthand unless the model names a served model', async () => {
    const { h, calls } = setup({ job: () => ({ status: 'COMPLETED', output: [{ id: 'x', object: 'chat.completion', created: 1, model: SERVED, choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage }] }) })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...CHAT_BODY, model: 'native' })))
    expect(res.status).toBe(200)
    expect(calls[0]).toMatchObject({ op: 'run', body: { input: { openai_route: '/v1/chat/completions', openai_input: { ...CHAT_BODY, model: SERVED } } } })
    // The shorthand names no model: a model with a served name of its own (a LoRA adapter...) always names it.
    await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ model: 'native', messages: [{ role: 'user', content: 'hi' }], temperature: 0.5 })))
    expect(calls.filter((call) => call.op === 'run')[1]!.body).toMatchObject({ input: { openai_route: '/v1/chat/completions', openai_input: { model: SERVED, temperature: 0.5 } } })
    await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ model: 'plainnative', messages: [{ role: 'user', content: 'hi' }], temperature: 0.5 })))
    expect(calls.filter((call) => call.op === 'run')[2]!.body).toEqual({ input: { messages: [{ role: 'user', content: 'hi' }], sampling_params: { max_tokens: 512, temperature: 0.5 }, stream: false } })
  })
})

describe('integers past 2^53 keep their digits', () => {
  const completed = () => ({ status: 'COMPLETED', output: [{ id: 'x', object: 'chat.completion', created: 1, model: SERVED, choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage }] })
  const answer = () => Response.json(completed().output[0])
  // Written as text: JSON.stringify of a JavaScript number would round them before podgate saw them.
  const body = (model: string, seed: string) => `{"model":"${model}","messages":[{"role":"user","content":"hi"}],"seed":${seed},"vllm_xargs":{"id":12345678901234567890}}`

  it.each(['openai', 'native', 'plainnative'])('a 64-bit seed, and any other wide integer, reach the %s endpoint as the caller wrote them', async (model) => {
    const { h, calls } = setup({ openai: answer, job: completed })
    const { key } = await h.createKey()
    for (const seed of ['9007199254740993', '9223372036854775807', '-9223372036854775808']) {
      calls.length = 0
      const res = await h.fetch('/v1/chat/completions', authed(key, body(model, seed)))
      expect(res.status, await res.clone().text()).toBe(200)
      expect(calls[0]!.text).toContain(`"seed":${seed}`)
      if (model !== 'plainnative') expect(calls[0]!.text).toContain('"id":12345678901234567890')
    }
  })

  it('a seed past 64 bits is refused, as vLLM refuses it, with nothing sent upstream', async () => {
    const { h, calls } = setup({ openai: answer })
    const { key } = await h.createKey()
    for (const seed of ['9223372036854775808', '18446744073709551615', '-9223372036854775809']) {
      const res = await h.fetch('/v1/chat/completions', authed(key, body('openai', seed)))
      expect(res.status).toBe(400)
      expect(await res.json()).toMatchObject({ error: { param: 'seed', message: "'seed' must be a 64-bit integer" } })
    }
    expect(calls).toHaveLength(0)
  })
})

describe('answers come back whole', () => {
  it('OpenAI route: tool-call, reasoning, logprobs and unknown fields are relayed byte for byte, model renamed', async () => {
    const { h } = setup({ openai: () => sse(TOOL_SSE) })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...CHAT_BODY, stream: true, stream_options: { include_usage: true } })))
    const text = await res.text()
    expect(text).toBe(TOOL_SSE.replaceAll(`"model":"${SERVED}"`, '"model":"openai"'))
    // Without include_usage the usage chunk podgate asked for is stripped, and nothing else.
    const bare = await readSSE(await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...CHAT_BODY, stream: true }))))
    expect(relayed(bare, ['model'])).toEqual([...relayed(TOOL_STREAM.slice(0, -1), ['model']), '[DONE]'])
  })

  it.each([
    ['current worker-vllm (raw SSE cut anywhere)', cutRandom(TOOL_SSE, 5)],
    ['classic worker-vllm (whole-SSE string items)', [TOOL_SSE.split('\n\n').slice(0, 3).join('\n\n') + '\n\n', TOOL_SSE.split('\n\n').slice(3).join('\n\n')]],
    // engine.py v2.23.0 under RAW_OPENAI_OUTPUT=0: each item a list of the parsed chunks, no `[DONE]`.
    ['classic worker-vllm with RAW_OPENAI_OUTPUT=0 (lists of chunk objects)', [TOOL_STREAM.slice(0, 1), TOOL_STREAM.slice(1, 4), TOOL_STREAM.slice(4)]],
  ])('native job stream, %s: every chunk field reaches the caller', async (_name, items) => {
    const { h, calls } = setup({ job: () => ({ status: 'COMPLETED', output: items }) })
    const { key } = await h.createKey()
    const events = await readSSE(await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...CHAT_BODY, model: 'native', stream: true, stream_options: { include_usage: true } }))))
    expect(calls[0]).toMatchObject({ op: 'run', body: { input: { openai_route: '/v1/chat/completions', openai_input: { stream: true, stream_options: { include_usage: true } } } } })
    const chunks = TOOL_STREAM.slice(0, -1)
    expect(relayed(events.slice(0, chunks.length), ['model', 'id', 'created'])).toEqual(relayed(chunks, ['model', 'id', 'created']))
    expect(relayed([events.at(-2)], ['model', 'id', 'created'])).toEqual(relayed([TOOL_STREAM.at(-1)], ['model', 'id', 'created']))
    expect(events.at(-1)).toBe('[DONE]')
  })

  it.each(['openai', 'native'])('%s: completions with several prompts and n > 1 keep every index', async (model) => {
    const chunk = (index: number, text: string, finish: string | null) => ({ id: 'cmpl-1', object: 'text_completion', created: 1, model: SERVED, choices: [{ index, text, logprobs: { tokens: [text], token_logprobs: [-0.5] }, finish_reason: finish, stop_reason: null }] })
    const stream = [chunk(2, 'c', null), chunk(0, 'a', null), chunk(3, 'd', null), chunk(1, 'b', null), ...[0, 1, 2, 3].map((i) => chunk(i, '', 'length'))]
    const text = `${stream.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('')}data: ${JSON.stringify({ id: 'cmpl-1', object: 'text_completion', created: 1, model: SERVED, choices: [], usage })}\n\ndata: [DONE]\n\n`
    const { h, calls } = setup({ openai: () => sse(text), job: () => ({ status: 'COMPLETED', output: [text] }) })
    const { key } = await h.createKey()
    const body = { model, prompt: [[1, 2, 3], [4, 5]], n: 2, echo: true, logprobs: 1, stream: true }
    const events = await readSSE(await h.fetch('/v1/completions', authed(key, JSON.stringify(body))))
    const sent = model === 'openai' ? calls[0]!.body : (calls[0]!.body as { input: { openai_input: unknown } }).input.openai_input
    expect(sent).toEqual({ ...body, model: SERVED, max_tokens: 512, stream_options: { include_usage: true } })
    expect(relayed(events, ['model', 'id', 'created'])).toEqual([...relayed(stream, ['model', 'id', 'created']), '[DONE]'])
  })

  it("native job: vLLM's id (from the caller's request_id) and created reach the caller, in JSON and streams, as on the OpenAI route", async () => {
    const answer = { id: 'chatcmpl-trace-7', object: 'chat.completion', created: 1_700_000_000, model: SERVED, choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, logprobs: null, finish_reason: 'stop', stop_reason: null }], usage }
    const { h } = setup({ job: (call) => ({ status: 'COMPLETED', output: (call.body!.input as { openai_input: { stream?: boolean } }).openai_input.stream ? [TOOL_SSE.replaceAll('chatcmpl-up', 'chatcmpl-trace-7')] : [answer] }) })
    const { key } = await h.createKey()
    const body = { model: 'native', messages: [{ role: 'user', content: 'Hi' }], request_id: 'trace-7' }
    const json = (await (await h.fetch('/v1/chat/completions', authed(key, JSON.stringify(body)))).json()) as Record<string, unknown>
    expect(json).toMatchObject({ id: 'chatcmpl-trace-7', created: 1_700_000_000, model: 'native' })
    const events = await readSSE(await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }))))
    for (const event of events.slice(0, -1)) expect(event).toMatchObject({ id: 'chatcmpl-trace-7', created: 1_700_000_000 })
  })
})

describe('stream_options as vLLM reads them', () => {
  // vLLM's StreamOptions defaults `include_usage` to true: an object without it asks for usage, a null member does not.
  it.each([
    [{}, true],
    [{ continuous_usage_stats: true }, true],
    [{ include_usage: null }, false],
    [{ include_usage: false, continuous_usage_stats: true }, false],
  ])('stream_options %j: the usage chunk reaches the caller: %s', async (options, usageShown) => {
    const { h, calls } = setup({ openai: () => sse(TOOL_SSE) })
    const { key } = await h.createKey()
    const events = await readSSE(await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...CHAT_BODY, stream: true, stream_options: options }))))
    expect(calls[0]!.body!.stream_options).toEqual(usageShown ? { ...options, include_usage: true } : { include_usage: true })
    expect(events.some((e) => typeof e === 'object' && e !== null && 'usage' in e)).toBe(usageShown)
  })
})

describe("streaming.usage 'always'", () => {
  it('every stream ends with the usage chunk: relayed, native, a cache MISS, its HIT and a coalesced twin', async () => {
    const { h } = setup({ openai: () => sse(TOOL_SSE), job: () => ({ status: 'COMPLETED', output: [TOOL_SSE] }) }, { streaming: { usage: 'always' } })
    const { key } = await h.createKey()
    const usageOf = (events: unknown[]) => (events.at(-2) as { usage?: unknown }).usage
    const counts = { prompt_tokens: 12, completion_tokens: 9, total_tokens: 21 }
    for (const model of ['openai', 'native']) {
      for (const extra of [{}, { temperature: 0 }]) {
        const body = JSON.stringify({ ...CHAT_BODY, model, stream: true, ...extra })
        // Uncached, then (temperature 0) a MISS, then its HIT; a twin asked alongside joins the call.
        const [first, twin] = await Promise.all([h.fetch('/v1/chat/completions', authed(key, body)), h.fetch('/v1/chat/completions', authed(key, body))])
        for (const res of [first, twin]) {
          const events = await readSSE(res)
          expect(usageOf(events), `${model} ${res.headers.get('x-podgate-cache')}`).toMatchObject(counts)
          expect(events.at(-1)).toBe('[DONE]')
        }
        await h.settle()
        const again = await h.fetch('/v1/chat/completions', authed(key, body))
        expect(usageOf(await readSSE(again)), `${model} ${again.headers.get('x-podgate-cache')}`).toMatchObject(counts)
      }
    }
  })
})

describe('embeddings', () => {
  const list = (encoding: string) => ({ object: 'list', model: SERVED, data: [{ index: 0, object: 'embedding', embedding: encoding === 'base64' ? 'AACAPw==' : [0.5, -0.25] }, { index: 1, object: 'embedding', embedding: encoding === 'base64' ? 'AAAAQA==' : [1, 0] }], usage: { prompt_tokens: 4, total_tokens: 4, completion_tokens: 0 } })

  it.each(['openai', 'native'])('%s: input forms, encoding_format and dimensions pass through; the list comes back whole', async (model) => {
    const { h, calls } = setup({
      openai: (call) => Response.json(list(call.body!.encoding_format as string)),
      job: (call) => ({ status: 'COMPLETED', output: [list(((call.body!.input as { openai_input: { encoding_format: string } }).openai_input).encoding_format)] }),
    })
    const { key } = await h.createKey()
    for (const [input, encoding_format] of [['one', 'float'], [['a', 'b'], 'base64'], [[1, 2], 'float'], [[[1], [2, 3]], 'base64']] as const) {
      calls.length = 0
      const body = { model, input, encoding_format, dimensions: 2, truncate_prompt_tokens: 8 }
      const res = await h.fetch('/v1/embeddings', authed(key, JSON.stringify(body)))
      expect(res.status).toBe(200)
      expect(await res.json()).toEqual({ ...list(encoding_format), model })
      if (model === 'openai') expect(calls[0]).toMatchObject({ op: 'openai/v1/embeddings', body: { ...body, model: SERVED } })
      else expect(calls[0]).toMatchObject({ op: 'run', body: { input: { openai_route: '/v1/embeddings', openai_input: { ...body, model: SERVED } } } })
    }
    expect((await h.fetch('/v1/embeddings', authed(key, JSON.stringify({ model, input: 5 })))).status).toBe(400)
  })

  it('are cached by default (deterministic): the second call is a HIT with the same list', async () => {
    const { h, calls } = setup({ openai: () => Response.json(list('float')) })
    const { key } = await h.createKey()
    const body = JSON.stringify({ model: 'openai', input: 'same' })
    const first = await h.fetch('/v1/embeddings', authed(key, body))
    const firstJson = await first.json()
    await h.settle()
    const second = await h.fetch('/v1/embeddings', authed(key, body))
    expect(second.headers.get('x-podgate-cache')).toBe('HIT')
    expect(await second.json()).toEqual(firstJson)
    expect(calls).toHaveLength(1)
  })
})

describe("Runpod's URL shape /v2/<model>/openai/v1", () => {
  it('serves chat, completions, embeddings and models routed by the path; the body model may be the alias or the served name', async () => {
    const { h, calls } = setup({ openai: (call) => (call.op.endsWith('embeddings') ? Response.json(list0()) : Response.json({ id: 'x', object: 'chat.completion', created: 1, model: SERVED, choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage })) })
    const { key } = await h.createKey()
    for (const model of ['openai', SERVED, undefined]) {
      const res = await h.fetch('/v2/openai/openai/v1/chat/completions', authed(key, JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 })))
      expect(res.status).toBe(200)
      expect(((await res.json()) as { model: string }).model).toBe('openai')
      expect(calls.at(-1)).toMatchObject({ endpoint: 'epopenai', op: 'openai/v1/chat/completions', body: { model: SERVED } })
    }
    const wrong = await h.fetch('/v2/openai/openai/v1/chat/completions', authed(key, JSON.stringify({ model: 'native', messages: [{ role: 'user', content: 'hi' }] })))
    expect(wrong.status).toBe(400)
    const error = ((await wrong.json()) as { error: { message: string; param: string } }).error
    expect(error.param).toBe('model')
    expect(error.message).toContain("'openai'")
    expect(error.message).toContain(`'${SERVED}'`)
    expect((await h.fetch('/v2/openai/openai/v1/embeddings', authed(key, JSON.stringify({ model: SERVED, input: 'x' })))).status).toBe(200)
    expect(await (await h.fetch('/v2/openai/openai/v1/models', authed(key))).json()).toMatchObject({ data: [{ id: 'openai' }] })
    expect((await h.fetch('/v2/nope/openai/v1/chat/completions', authed(key, JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] })))).status).toBe(404)
    expect((await h.fetch('/v2/openai/openai/v1/chat/completions', { method: 'POST', body: '{}' })).status).toBe(401)
  })

  it("a null body model is the path's model, as vLLM reads its optional model (null: the default)", async () => {
    const { h, calls } = setup({ openai: () => Response.json({ id: 'x', object: 'chat.completion', created: 1, model: SERVED, choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage }) })
    const { key } = await h.createKey()
    const res = await h.fetch('/v2/openai/openai/v1/chat/completions', authed(key, JSON.stringify({ model: null, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 })))
    expect(res.status, await res.clone().text()).toBe(200)
    expect(calls.at(-1)).toMatchObject({ op: 'openai/v1/chat/completions', body: { model: SERVED } })
  })

  it('names the alias once when a model serves under its alias (no servedModelName)', async () => {
    const { h } = setup({})
    const { key } = await h.createKey()
    const res = await h.fetch('/v2/plainnative/openai/v1/chat/completions', authed(key, JSON.stringify({ model: 'other', messages: [{ role: 'user', content: 'hi' }] })))
    expect(res.status).toBe(400)
    const { message } = ((await res.json()) as { error: { message: string } }).error
    expect(message).toContain("send 'plainnative'.")
    expect(message).not.toContain(' or ')
  })

  it("answers models for a model the key may not use, or no such model, as the path's other routes do: 403, 404", async () => {
    const { h } = setup({})
    const { key } = await h.createKey({ name: 'scoped', models: ['openai'] })
    const chat = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] })
    for (const [model, status, code] of [['native', 403, 'permission_denied'], ['nope', 404, 'model_not_found']] as const) {
      const other = await h.fetch(`/v2/${model}/openai/v1/chat/completions`, authed(key, chat))
      const models = await h.fetch(`/v2/${model}/openai/v1/models`, authed(key))
      expect([models.status, other.status], model).toEqual([status, status])
      const error = ((await models.json()) as { error: { code: string; param: string } }).error
      expect(error, model).toMatchObject({ code, param: 'model' })
      expect(error).toEqual(((await other.json()) as { error: unknown }).error)
    }
    expect(await (await h.fetch('/v2/openai/openai/v1/models', authed(key))).json()).toEqual({ object: 'list', data: [{ id: 'openai', object: 'model', created: 0, owned_by: 'podgate' }] })
  })

  it("retrieves the path's model as its list shows it; the path refused as by its other routes, any other id 404", async () => {
    const { h } = setup({})
    const { key } = await h.createKey({ name: 'scoped', models: ['openai', 'plainnative'] })
    const list = (await (await h.fetch('/v2/openai/openai/v1/models', authed(key))).json()) as { data: unknown[] }
    const one = await h.fetch('/v2/openai/openai/v1/models/openai', authed(key))
    expect(one.status).toBe(200)
    expect(await one.json()).toEqual(list.data[0])
    for (const [path, status, code] of [
      ['/v2/native/openai/v1/models/native', 403, 'permission_denied'],
      ['/v2/nope/openai/v1/models/nope', 404, 'model_not_found'],
      ['/v2/openai/openai/v1/models/plainnative', 404, 'model_not_found'],
      [`/v2/openai/openai/v1/models/${SERVED}`, 404, 'model_not_found'],
    ] as const) {
      const res = await h.fetch(path, authed(key))
      expect(res.status, path).toBe(status)
      expect(((await res.json()) as { error: unknown }).error, path).toMatchObject({ code, param: 'model' })
    }
  })

  function list0() {
    return { object: 'list', model: SERVED, data: [{ index: 0, object: 'embedding', embedding: [1] }], usage: { prompt_tokens: 1, total_tokens: 1 } }
  }
})

/** How Python prints a dict of strings, numbers and None: `str()` of vLLM's (or the worker's) error object. */
function pythonRepr(value: Record<string, unknown>): string {
  const text = (v: string) => {
    const quote = v.includes("'") && !v.includes('"') ? '"' : "'"
    return quote + v.replaceAll('\\', '\\\\').replaceAll(quote, `\\${quote}`) + quote
  }
  const item = (v: unknown) => (v === null ? 'None' : typeof v === 'string' ? text(v) : String(v))
  return `{${Object.entries(value).map(([k, v]) => `'${k}': ${item(v)}`).join(', ')}}`
}

describe('upstream refusals', () => {
  const vllm400 = { error: { message: '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set', type: 'BadRequestError', param: null, code: 400 } }
  const wrapped = { error: { message: `vLLM returned HTTP 400: ${JSON.stringify(vllm400)}`, type: 'worker_error', code: null } }

  async function expectRelayed(res: Response) {
    expect(res.status).toBe(400)
    const body = (await res.json()) as { error: { message: string; type: string } }
    expect(body.error.message).toBe(vllm400.error.message)
    expect(body.error.type).toBe('invalid_request_error')
  }

  it('an OpenAI-route 4xx is relayed with its status and message, not retried on the other endpoint', async () => {
    const { h, calls } = setup({ openai: () => Response.json(vllm400, { status: 400 }) })
    const { key } = await h.createKey()
    for (const stream of [false, true]) {
      calls.length = 0
      await expectRelayed(await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...CHAT_BODY, model: 'twice', stream }))))
      expect(calls).toHaveLength(1)
    }
    const { h: h422 } = setup({ openai: () => Response.json({ object: 'error', message: 'bad field', type: 'BadRequestError', code: 422 }, { status: 422 }) })
    const res = await h422.fetch('/v1/chat/completions', authed((await h422.createKey()).key, JSON.stringify({ ...CHAT_BODY, model: 'openai' })))
    expect(res.status).toBe(422)
    expect(((await res.json()) as { error: { message: string } }).error.message).toBe('bad field')
  })

  // Runpod's OpenAI route answers a classic worker's error item with HTTP 200 and the item as the body
  // (runpod-workers/worker-vllm#57): its code is read as a native job's item is, not taken for a worker failure.
  it.each([
    ['nested', vllm400],
    ['flat (vLLM < 0.10.1)', { object: 'error', ...vllm400.error }],
  ])("an OpenAI-route JSON answer that is vLLM's refusal (%s) on a 200 is that 400, not retried on the other endpoint", async (_name, item) => {
    const { h, calls } = setup({ openai: () => Response.json(item) })
    const { key } = await h.createKey()
    await expectRelayed(await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...CHAT_BODY, model: 'twice' }))))
    expect(calls).toHaveLength(1)
  })

  it.each([
    ["current worker-vllm's wrapped refusal: a wrapped error item of a COMPLETED job", () => ({ status: 'COMPLETED', output: [wrapped] })],
    ["current worker-vllm's wrapped refusal: a FAILED job whose error is the wrapped refusal", () => ({ status: 'FAILED', error: JSON.stringify(wrapped.error) })],
    // runpod-python (>= 1.7.6) ends the job at the error item and reports str() of its error object.
    ["current worker-vllm's wrapped refusal: a FAILED job whose error is the wrapped error object's Python repr", () => ({ status: 'FAILED', error: pythonRepr(wrapped.error) })],
    // Classic worker-vllm yields vLLM's own error object, code 400 included.
    ['classic: its error item, then the job FAILED with the error object', () => ({ status: 'FAILED', output: [vllm400], error: JSON.stringify(vllm400.error) })],
    ['classic: a FAILED job whose error is the error object', () => ({ status: 'FAILED', error: JSON.stringify(vllm400.error) })],
    ["classic: a FAILED job whose error is the error object's Python repr (runpod-python's str())", () => ({ status: 'FAILED', error: pythonRepr(vllm400.error) })],
    ["classic: vLLM < 0.10.1's flat error item in a COMPLETED job", () => ({ status: 'COMPLETED', output: [{ object: 'error', ...vllm400.error }] })],
  ])("a native worker's refusal (%s) becomes vLLM's 400, JSON and stream", async (_name, job) => {
    const { h, calls } = setup({ job })
    const { key } = await h.createKey()
    for (const stream of [false, true]) {
      calls.length = 0
      await expectRelayed(await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...CHAT_BODY, model: 'native', stream }))))
      expect(calls.filter((c) => c.op === 'run' || c.op === 'runsync')).toHaveLength(1)
    }
  })

  it.each([413, 422])('a classic error item with code %i is that status too', async (code) => {
    const { h } = setup({ job: () => ({ status: 'FAILED', output: [{ error: { ...vllm400.error, code } }], error: JSON.stringify({ ...vllm400.error, code }) }) })
    const { key } = await h.createKey()
    for (const stream of [false, true]) {
      const res = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...CHAT_BODY, model: 'native', stream })))
      expect(res.status).toBe(code)
      expect(((await res.json()) as { error: { message: string } }).error.message).toBe(vllm400.error.message)
    }
  })

  it.each([
    ['code 404', { ...vllm400.error, code: 404 }],
    ['code 429', { ...vllm400.error, code: 429 }],
    ['code 500', { ...vllm400.error, code: 500 }],
    ['code null', { ...vllm400.error, code: null }],
    ["classic worker-vllm's own \"Invalid route\" (code 400)", { ...vllm400.error, message: 'Invalid route' }],
  ])('a classic error item with %s stays the worker\'s failure: 502, retried', async (_name, failure) => {
    const { h, calls } = setup({ job: () => ({ status: 'FAILED', output: [{ error: failure }], error: JSON.stringify(failure) }) })
    const { key } = await h.createKey()
    for (const stream of [false, true]) {
      calls.length = 0
      const res = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...CHAT_BODY, model: 'native', stream })))
      expect(res.status).toBe(502)
      await res.text()
      expect(calls.filter((c) => c.op === 'run' || c.op === 'runsync').length).toBeGreaterThan(1)
    }
  })

  // The emulator's workers refuse what vLLM refuses, as worker-vllm reports it through runpod-python.
  it.each(['chat-classic', 'chat-current'].flatMap((model) => [
    ['"auto" tool choice without --enable-auto-tool-choice', { messages: [{ role: 'user', content: 'x [[emulator:auto_tool_choice=0]]' }], tools: CHAT_BODY.tools }, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'],
    ['more top_logprobs than --max-logprobs', { messages: [{ role: 'user', content: 'x' }], logprobs: true, top_logprobs: 22 }, 'Requested sample logprobs of 22, which is greater than max allowed: 20'],
    ['a named tool_choice not in tools', { messages: [{ role: 'user', content: 'x' }], tools: CHAT_BODY.tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, undefined],
  ].map(([name, body, message]) => [model, name, body, message] as [string, string, Record<string, unknown>, string | undefined])))('%s (emulator), %s: 400 invalid_request with vLLM\'s message, one job, JSON and stream; refunded, no breaker count', async (model, _name, body, message) => {
    const h = harness({ quota: QUOTA_CLOCK })
    const { key } = await h.createKey({ name: 'q', quota: { tokensPerMinute: 100_000, strict: true } })
    for (let i = 0; i < 2; i++) {
      for (const stream of [false, true]) {
        h.emulator.calls.length = 0
        const res = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...body, model, max_tokens: 5, stream })))
        expect(res.status).toBe(400)
        const error = ((await res.json()) as { error: { message: string; code: string } }).error
        expect(error.code).toBe('invalid_request')
        if (message) expect(error.message).toBe(message)
        expect(h.emulator.calls.filter((c) => c.op === 'run' || c.op === 'runsync')).toHaveLength(1)
      }
    }
    await h.settle()
    const report = (await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number; requests: number } } }
    expect(report.windows.minute).toMatchObject({ requests: 4, tokens: 0 })
    // Four refusals in a row: a breaker counting them (3 failures) would now skip the only endpoint.
    expect((await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 })))).status).toBe(200)
  })

  it('a refusal refunds the reservation and does not trip the breaker', async () => {
    let refuse = true
    const { h, calls } = setup({ openai: () => (refuse ? Response.json(vllm400, { status: 400 }) : Response.json({ id: 'x', object: 'chat.completion', created: 1, model: SERVED, choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage })) })
    const { key } = await h.createKey({ name: 'q', quota: { tokensPerMinute: 100_000, strict: true } })
    for (let i = 0; i < 5; i++) await (await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...CHAT_BODY, model: 'openai' })))).text()
    await h.settle()
    const report = (await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number; requests: number } } }
    expect(report.windows.minute).toMatchObject({ requests: 5, tokens: 0 })
    refuse = false
    // Five refusals in a row: a breaker counting them (3 failures) would now skip the only endpoint.
    expect((await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...CHAT_BODY, model: 'openai' })))).status).toBe(200)
    expect(calls).toHaveLength(6)
  })
})

describe('failover across modes', () => {
  const answer = { id: 'x', object: 'chat.completion', created: 1, model: SERVED, choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage }
  const resilience = { retries: { attempts: 1, baseDelayMs: 0, maxDelayMs: 0, budgetMs: 10_000 } }

  it.each([
    ['nativefirst', 'a native endpoint that fails', 'an openai one'],
    ['openaifirst', 'an openai endpoint that fails', 'a native one'],
  ])('%s: %s hands the request to %s, JSON and stream, settled once', async (model) => {
    const models = Object.fromEntries(Object.entries(MODELS).map(([alias, m]) => [alias, { ...m, resilience }]))
    const { h, calls } = setup({
      openai: (call) => (call.endpoint === 'epmixc' ? new Response('down', { status: 503 }) : call.body?.stream ? sse(TOOL_SSE) : Response.json(answer)),
      // These models name a served model, so their native jobs are openai_route jobs: the stream flag is in openai_input.
      job: (call) => (call.endpoint === 'epmixa' ? { status: 'FAILED', error: 'CUDA out of memory' } : { status: 'COMPLETED', output: (call.body?.input as { openai_input?: { stream?: boolean } } | undefined)?.openai_input?.stream ? [TOOL_SSE] : [answer] }),
    }, { models })
    const { key } = await h.createKey({ name: 'q', quota: { tokensPerMinute: 100_000, strict: true } })
    for (const stream of [false, true]) {
      calls.length = 0
      const res = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], stream })))
      expect(res.status, await res.clone().text()).toBe(200)
      await res.text()
      expect(new Set(calls.filter((c) => c.op !== 'cancel' && !c.op.startsWith('stream/')).map((c) => c.endpoint)).size).toBe(2)
    }
    await h.settle()
    const report = (await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number } } }
    expect(report.windows.minute.tokens).toBe(2 * usage.total_tokens)
  })
})

describe("a classic worker's dead engine, stamped 400", () => {
  // engine.py stamps every failed generation 400; vLLM's words for a dead engine or GPU make it the worker's
  // failure in every form it reaches podgate, not only the repr runpod-python's str() writes as the job's error.
  const dead = { error: { message: 'EngineCore encountered an issue. See stack trace (above) for the root cause.', type: 'BadRequestError', param: null, code: 400 } }
  const answer = { id: 'x', object: 'chat.completion', created: 1, model: SERVED, choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage }
  // A COMPLETED job ran to its end, billed: it is not run again (docs/failure-behaviour.md), but its 502 is the worker's.
  it.each([
    ['a FAILED job whose error is the error object as JSON: failed over', { status: 'FAILED', error: JSON.stringify(dead.error) }, 200],
    ['a COMPLETED job holding the error item (runpod-python before 1.7.6): the worker\'s 502', { status: 'COMPLETED', output: [dead] }, 502],
  ])('%s, JSON and stream', async (_name, job, status) => {
    const resilience = { retries: { attempts: 1, baseDelayMs: 0, maxDelayMs: 0, budgetMs: 10_000 } }
    const models = Object.fromEntries(Object.entries(MODELS).map(([alias, m]) => [alias, { ...m, resilience }]))
    const { h } = setup({ openai: (call) => (call.body?.stream ? sse(TOOL_SSE) : Response.json(answer)), job: () => job }, { models })
    const { key } = await h.createKey()
    for (const stream of [false, true]) {
      const res = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ model: 'nativefirst', messages: [{ role: 'user', content: 'hi' }], stream })))
      expect(res.status, await res.clone().text()).toBe(status)
      await res.text()
    }
  })

  it("a refusal that quotes the caller's input stays the caller's 400, whatever words the input holds", async () => {
    // Found in the day's review: any key could send a field vLLM refuses with its value quoted (pydantic's
    // input_value) holding an engine's words, and have a caller's 400 failed over to every endpoint and
    // counted against each one's breaker. Quoted text is the caller's, never the engine's.
    for (const input of ["'CUDA out of memory'", `"it's CUDA"`, "'a\\'b EngineCore encountered'"]) {
      const refused = { message: `1 validation error for ChatCompletionRequest\nresponse_format.type\n  Input should be 'text', 'json_object' or 'json_schema' [type=literal_error, input_value=${input}, input_type=str]`, type: 'BadRequestError', param: null, code: 400 }
      const { h, calls } = setup({ openai: () => Response.json(answer), job: () => ({ status: 'FAILED', error: JSON.stringify(refused) }) })
      const { key } = await h.createKey()
      const res = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ model: 'nativefirst', messages: [{ role: 'user', content: 'hi' }] })))
      expect(res.status, input).toBe(400)
      expect(calls.filter((c) => c.op === 'run' || c.op === 'openai/v1/chat/completions')).toHaveLength(1)
    }
  })
})

describe('cache', () => {
  /** What an OpenAI client reassembles from a stream: per choice, the message (strings joined, tool calls by index) and finish_reason. */
  function reassemble(events: unknown[]) {
    const message: Record<string, unknown> = {}
    let finish: unknown = null
    for (const event of events) {
      if (typeof event !== 'object' || event === null) continue
      for (const choice of (event as { choices: { delta: Record<string, unknown>; finish_reason: unknown }[] }).choices) {
        for (const [k, v] of Object.entries(choice.delta)) {
          if (k === 'tool_calls') {
            const calls = (message.tool_calls ??= []) as { id?: string; function: { name: string; arguments: string } }[]
            for (const c of v as { index: number; id?: string; function: { name?: string; arguments?: string } }[]) {
              const at = (calls[c.index] ??= { function: { name: '', arguments: '' } })
              at.id ??= c.id
              at.function.name += c.function.name ?? ''
              at.function.arguments += c.function.arguments ?? ''
            }
          } else if (typeof v === 'string') message[k] = ((message[k] as string | undefined) ?? '') + v
        }
        if (choice.finish_reason) finish = choice.finish_reason
      }
    }
    return { message, finish }
  }

  it('a streamed tool-call answer is cached and replays as the same SSE answer and as the matching JSON', async () => {
    const { h, calls } = setup({ openai: () => sse(TOOL_SSE) })
    const { key } = await h.createKey()
    const body = { ...CHAT_BODY, temperature: 0, stream: true }
    const live = await readSSE(await h.fetch('/v1/chat/completions', authed(key, JSON.stringify(body))))
    await h.settle()
    const hit = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify(body)))
    expect(hit.headers.get('x-podgate-cache')).toBe('HIT')
    const replayed = await readSSE(hit)
    expect(reassemble(replayed)).toEqual(reassemble(live))
    expect(relayed(replayed, ['id', 'created'])).toEqual(relayed(live, ['id', 'created']))
    const json = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...body, stream: false })))
    expect(json.headers.get('x-podgate-cache')).toBe('HIT')
    const choice = ((await json.json()) as { choices: { message: Record<string, unknown>; finish_reason: string; logprobs: unknown }[] }).choices[0]!
    expect(choice.finish_reason).toBe('tool_calls')
    // No text beside the tool call: `content` is null, as in vLLM's (and OpenAI's) JSON, not the stream's "".
    expect(choice.message).toMatchObject({ content: null, reasoning: 'Need weather.', reasoning_content: 'Need weather.', tool_calls: [{ id: 'chatcmpl-tool-abc', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris ✓"}' } }] })
    expect(choice.logprobs).toEqual({ content: [TOOL_STREAM[4]!.choices[0]!.logprobs!.content[0]] })
    // A different tool list is another question.
    await (await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...body, tools: [] })))).text()
    expect(calls).toHaveLength(2)
  })

  it('a streamed answer to a named tool choice replays as JSON with content "", as vLLM answers that choice', async () => {
    const { h } = setup({ openai: () => sse(TOOL_SSE) })
    const { key } = await h.createKey()
    const body = { ...CHAT_BODY, tool_choice: { type: 'function', function: { name: 'get_weather' } }, temperature: 0, stream: true }
    await readSSE(await h.fetch('/v1/chat/completions', authed(key, JSON.stringify(body))))
    await h.settle()
    const json = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...body, stream: false })))
    expect(json.headers.get('x-podgate-cache')).toBe('HIT')
    const { choices } = (await json.json()) as { choices: { message: Record<string, unknown> }[] }
    expect(choices[0]!.message).toMatchObject({ content: '', tool_calls: [{ id: 'chatcmpl-tool-abc' }] })
  })
})

describe('a stream missing a choice', () => {
  // An upstream that skipped a choice (n: 2, only index 1 came): its answer reaches its caller as it is,
  // but it is no answer the cache can replay, so it is not stored (a HIT of it would fail).
  const GAPPED = [
    { ...head, choices: [{ index: 1, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] },
    { ...head, choices: [{ index: 1, delta: { content: 'Only one.' }, logprobs: null, finish_reason: 'stop', stop_reason: null }] },
    { ...head, choices: [], usage },
  ]
  const GAPPED_SSE = `${GAPPED.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('')}data: [DONE]\n\n`

  it.each([true, false])('is not stored: the next identical call goes upstream (stream %s)', async (stream) => {
    const json = { id: 'x', object: 'chat.completion', created: 1, model: SERVED, choices: [0, 1].map((index) => ({ index, message: { role: 'assistant', content: 'Both.' }, finish_reason: 'stop' })), usage }
    const { h, calls } = setup({ openai: (call) => (call.body?.stream ? sse(GAPPED_SSE) : Response.json(json)) })
    const { key } = await h.createKey()
    const body = JSON.stringify({ model: 'openai', messages: [{ role: 'user', content: 'two' }], n: 2, seed: 1, stream: true })
    const live = await h.fetch('/v1/chat/completions', authed(key, body))
    expect(live.status).toBe(200)
    await live.text()
    await h.settle()
    const again = await h.fetch('/v1/chat/completions', authed(key, stream ? body : JSON.stringify({ ...JSON.parse(body), stream: false })))
    await again.text()
    expect(again.status).toBe(200)
    expect(again.headers.get('x-podgate-cache')).toBe('MISS')
    expect(calls.filter((c) => c.op.startsWith('openai/'))).toHaveLength(2)
  })
})

describe('the cache shows the model name a live answer shows', () => {
  const JSON_ANSWER = { id: 'x', object: 'chat.completion', created: 1, model: SERVED, choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage }
  const modelsOf = (events: unknown[]) => new Set(events.flatMap((e) => (typeof e === 'object' && e !== null ? [(e as { model: unknown }).model] : [])))

  it.each([
    ['openai', true, {}],
    ['openai', true, { stream_options: { include_usage: true } }],
    ['openai', false, {}],
    ['openai', false, { stream_options: { include_usage: true } }],
    ['native', true, {}],
    ['native', false, { stream_options: { include_usage: true } }],
  ])('%s, rewriteModel %s, %j: a stream\'s MISS, coalesced twin and HIT name the same model; JSON names the alias', async (model, rewriteModel, extra) => {
    const { h, calls } = setup({ openai: (call) => (call.body?.stream ? fetchedSse(TOOL_SSE) : Response.json(JSON_ANSWER)), job: (call) => ({ status: 'COMPLETED', output: (call.body?.input as { openai_input: { stream?: boolean } }).openai_input.stream ? [TOOL_SSE] : [JSON_ANSWER] }) }, { streaming: { rewriteModel } })
    const { key } = await h.createKey()
    const name = rewriteModel ? model : SERVED
    const body = JSON.stringify({ ...CHAT_BODY, model, temperature: 0, stream: true, ...extra })
    // The twin asks for usage: when the first call's stream had it stripped, the twin's usage chunk is the cache's own.
    const twin = JSON.stringify({ ...CHAT_BODY, model, temperature: 0, stream: true, stream_options: { include_usage: true } })
    const answers = await Promise.all([h.fetch('/v1/chat/completions', authed(key, body)), h.fetch('/v1/chat/completions', authed(key, twin))])
    expect(answers.map((res) => res.headers.get('x-podgate-cache'))).toEqual(['MISS', 'COALESCED'])
    const read = await Promise.all(answers.map(readSSE))
    expect((read[1]!.at(-2) as { usage?: unknown }).usage).toMatchObject({ total_tokens: 21 })
    answers.forEach((res, at) => expect(modelsOf(read[at]!), res.headers.get('x-podgate-cache')!).toEqual(new Set([name])))
    await h.settle()
    const hit = await h.fetch('/v1/chat/completions', authed(key, body))
    expect(hit.headers.get('x-podgate-cache')).toBe('HIT')
    expect(modelsOf(await readSSE(hit))).toEqual(new Set([name]))
    // JSON answers always carry the alias (docs/passthrough.md), live or from the cache.
    const json = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...CHAT_BODY, model, temperature: 0 })))
    expect(json.headers.get('x-podgate-cache')).toBe('HIT')
    expect(((await json.json()) as { model: unknown }).model).toBe(model)
    // An answer recorded from JSON, replayed as a stream.
    const question = { ...CHAT_BODY, model, temperature: 0, messages: [{ role: 'user', content: 'Recorded as JSON.' }] }
    const live = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify(question)))
    expect(((await live.json()) as { model: unknown }).model).toBe(model)
    await h.settle()
    const replayed = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...question, stream: true, ...extra })))
    expect(replayed.headers.get('x-podgate-cache')).toBe('HIT')
    expect(modelsOf(await readSSE(replayed))).toEqual(new Set([name]))
    expect(calls.filter((c) => c.op === 'run' || c.op.startsWith('openai/'))).toHaveLength(2)
  })
})

describe('cached usage', () => {
  // vLLM with --enable-prompt-tokens-details reports the prefix-cache hits of the prompt.
  const detailed = { prompt_tokens: 12, total_tokens: 21, completion_tokens: 9, prompt_tokens_details: { cached_tokens: 8 } }
  const DETAILED_SSE = TOOL_SSE.replace(JSON.stringify(usage), JSON.stringify(detailed))
  const withUsage = { stream_options: { include_usage: true } }

  it.each([
    ['openai', 'the recording stream asked for usage', withUsage],
    ['openai', 'the recording stream did not ask for usage (stripped from it)', {}],
    ['native', 'the recording stream asked for usage', withUsage],
    ['native', 'the recording stream did not ask for usage', {}],
  ])('%s, %s: a HIT of a streamed answer replays vLLM\'s whole usage, as SSE and as JSON', async (model, _name, recording) => {
    const { h, calls } = setup({ openai: () => sse(DETAILED_SSE), job: () => ({ status: 'COMPLETED', output: [DETAILED_SSE] }) })
    const { key } = await h.createKey()
    const body = { ...CHAT_BODY, model, temperature: 0, stream: true }
    await (await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...body, ...recording })))).text()
    await h.settle()
    const hit = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...body, ...withUsage })))
    expect(hit.headers.get('x-podgate-cache')).toBe('HIT')
    expect((await readSSE(hit)).at(-2)).toMatchObject({ choices: [], usage: detailed })
    const json = await h.fetch('/v1/chat/completions', authed(key, JSON.stringify({ ...body, stream: false })))
    expect(json.headers.get('x-podgate-cache')).toBe('HIT')
    expect(((await json.json()) as { usage: unknown }).usage).toEqual(detailed)
    expect(calls.filter((c) => c.op === 'run' || c.op.startsWith('openai/'))).toHaveLength(1)
  })
})

describe('quota reservation', () => {
  const model = modelSchema.parse({ endpoints: [{ endpointId: 'abc' }], maxChoices: 8 })
  const base = { model: 'm', messages: [{ role: 'user', content: 'x'.repeat(400) }], max_tokens: 100 }

  it('counts tool definitions, response schemas, images, n and best_of', () => {
    const plain = estimateTokens(normalizeChatRequest(base, model, 'm'))
    expect(plain).toBe(100 + 100)
    const tools = [{ type: 'function', function: { name: 'f', description: 'd'.repeat(800), parameters: { type: 'object' } } }]
    expect(estimateTokens(normalizeChatRequest({ ...base, tools }, model, 'm'))).toBe(plain + Math.ceil(JSON.stringify(tools).length / 4))
    const response_format = { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', description: 'e'.repeat(400) } } }
    expect(estimateTokens(normalizeChatRequest({ ...base, response_format }, model, 'm'))).toBe(plain + Math.ceil(JSON.stringify(response_format).length / 4))
    const image = { role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${'A'.repeat(200_000)}` } }, { type: 'image_url', image_url: { url: 'https://x/y.png' } }] }
    expect(estimateTokens(normalizeChatRequest({ ...base, messages: [...base.messages, image] }, model, 'm'))).toBe(plain + 2 * 1024)
    expect(estimateTokens(normalizeChatRequest({ ...base, n: 2 }, model, 'm'))).toBe(100 + 200)
    expect(estimateTokens(normalizeChatRequest({ ...base, n: 2, best_of: 5 }, model, 'm'))).toBe(100 + 500)
    expect(estimateTokens(normalizeCompletionRequest({ model: 'm', prompt: ['abcd', 'efgh', 'ijkl'], max_tokens: 10, best_of: 2 }, model, 'm'))).toBe(3 + 3 * 2 * 10)
  })
})
