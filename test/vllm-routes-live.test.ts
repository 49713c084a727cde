/**
 * vLLM's other routes end to end: the gateway against the Runpod emulator over real HTTP (test/global-setup.ts),
 * on an OpenAI-mode endpoint and on native endpoints of both worker-vllm generations. What the scripted
 * cases in vllm-routes.test.ts check byte for byte, these check against an upstream that generates.
 */
import { env } from 'cloudflare:workers'
import { createParser } from 'eventsource-parser'
import { describe, expect, it } from 'vitest'
import { authed, harness, RUNPOD_KEY } from './helpers.ts'

/** `prefix` picks the emulator's endpoints: `routesold` ones are configured as an older vLLM (see below). */
const live = (prefix = 'routes') =>
  harness({
    models: {
      openai: { endpoints: [{ endpointId: `${prefix}openai` }], mode: 'openai' },
      current: { endpoints: [{ endpointId: `${prefix}current` }], mode: 'native' },
      classic: { endpoints: [{ endpointId: `${prefix}classic` }], mode: 'native' },
    },
    runpod: { apiKey: RUNPOD_KEY, baseUrl: env.RUNPOD_BASE_URL },
    fetch: undefined,
    quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) },
  })

/** Each SSE event of a body, with its name. */
function events(text: string): { event: string | undefined; data: string }[] {
  const out: { event: string | undefined; data: string }[] = []
  createParser({ onEvent: (e) => out.push({ event: e.event, data: e.data }) }).feed(text)
  return out
}

const MODELS = ['openai', 'current', 'classic'] as const

describe('vLLM routes against the emulator', () => {
  it.each(MODELS)('%s: /v1/responses answers JSON and a stream that ends with its last response event (incomplete at max_output_tokens), the same text both ways', async (model) => {
    const h = live()
    const { key } = await h.createKey({ name: 'routes', quota: { tokensPerMinute: 1_000_000 } })
    const body = { model, input: [{ role: 'user', content: [{ type: 'input_text', text: 'Tell me about the edge' }] }], instructions: 'Be brief.', max_output_tokens: 12 }
    const json = await h.fetch('/v1/responses', authed(key, JSON.stringify(body)))
    const answer = (await json.json()) as { model: string; status: string; output: { content: { text: string }[] }[]; usage: { input_tokens: number; output_tokens: number } }
    expect(json.status, JSON.stringify(answer)).toBe(200)
    expect(answer.model).toBe(model)
    const stream = await h.fetch('/v1/responses', authed(key, JSON.stringify({ ...body, stream: true })))
    expect(stream.headers.get('content-type')).toContain('text/event-stream')
    const streamed = events(await stream.text())
    expect(streamed.at(-1)!.event).toBe(answer.status === 'completed' ? 'response.completed' : 'response.incomplete')
    expect(streamed.some((e) => e.data === '[DONE]')).toBe(false)
    const text = streamed.filter((e) => e.event === 'response.output_text.delta').map((e) => (JSON.parse(e.data) as { delta: string }).delta).join('')
    expect(text).toBe(answer.output[0]!.content[0]!.text)
    await h.settle()
    const usage = (await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number; requests: number } } }
    const perCall = answer.usage.input_tokens + answer.usage.output_tokens
    expect(usage.windows.minute).toMatchObject({ requests: 2, tokens: 2 * perCall })
  })

  it.each(['openai', 'current'] as const)('%s: /v1/responses with reasoning: the reasoning item and its reasoning_text events reach the caller unchanged, its tokens counted', async (model) => {
    const h = live()
    const { key } = await h.createKey({ name: 'routes', quota: { tokensPerMinute: 1_000_000 } })
    const body = { model, input: 'Why is the sky blue?', reasoning: { effort: 'low' }, max_output_tokens: 500 }
    const json = await h.fetch('/v1/responses', authed(key, JSON.stringify(body)))
    const answer = (await json.json()) as { status: string; output: { type: string; content: { type: string; text: string }[] }[]; usage: { input_tokens: number; output_tokens: number; output_tokens_details: { reasoning_tokens: number } } }
    expect(json.status, JSON.stringify(answer)).toBe(200)
    expect(answer.status).toBe('completed')
    expect(answer.output.map((item) => item.type)).toEqual(['reasoning', 'message'])
    expect(answer.output[0]!.content[0]!.text).not.toBe('')
    const streamed = events(await (await h.fetch('/v1/responses', authed(key, JSON.stringify({ ...body, stream: true })))).text())
    const thought = streamed.filter((e) => e.event === 'response.reasoning_text.delta').map((e) => (JSON.parse(e.data) as { delta: string }).delta).join('')
    expect(thought).toBe(answer.output[0]!.content[0]!.text)
    expect(streamed.at(-1)!.event).toBe('response.completed')
    await h.settle()
    const usage = (await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number } } }
    expect(usage.windows.minute.tokens).toBe(2 * (answer.usage.input_tokens + answer.usage.output_tokens))
  })

  // Current vLLM ends a Messages stream with message_stop; older vLLM wrote `data: [DONE]` after it
  // (the emulator's `messagesDone`). The caller gets the upstream's ending either way.
  it.each(MODELS.flatMap((model) => [[model, 'current'], [model, 'older']] as const))('%s, %s vLLM: /v1/messages answers JSON and an Anthropic stream that ends with message_stop', async (model, vllm) => {
    const older = vllm === 'older'
    if (older) {
      for (const kind of MODELS) {
        const res = await fetch(`${env.RUNPOD_BASE_URL.replace(/\/v2$/, '')}/__emulator/configure`, { method: 'POST', body: JSON.stringify({ endpointId: `routesold${kind}`, behaviour: { messagesDone: true } }) })
        expect(res.status).toBe(200)
      }
    }
    const h = live(older ? 'routesold' : 'routes')
    const { key } = await h.createKey({ name: 'routes' })
    const body = { model, max_tokens: 10, system: 'Be brief.', messages: [{ role: 'user', content: 'Hello there' }] }
    const send = (extra: Record<string, unknown>) => h.fetch('/v1/messages', { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify({ ...body, ...extra }) })
    const json = await send({})
    const answer = (await json.json()) as { type: string; content: { text: string }[] }
    expect(json.status, JSON.stringify(answer)).toBe(200)
    expect(answer.type).toBe('message')
    const streamed = events(await (await send({ stream: true })).text())
    const names = streamed.map((e) => e.event ?? e.data)
    expect(names[0]).toBe('message_start')
    expect(names.slice(-2)).toEqual(older ? ['message_stop', '[DONE]'] : ['message_delta', 'message_stop'])
    const text = streamed.filter((e) => e.event === 'content_block_delta').map((e) => (JSON.parse(e.data) as { delta: { text: string } }).delta.text).join('')
    expect(text).toBe(answer.content[0]!.text)
  })

  it.each(MODELS)('%s: a /v1/messages tool call streams through as a tool_use block whose input_json fragments join into the JSON answer\'s input', async (model) => {
    const h = live()
    const { key } = await h.createKey({ name: 'routes' })
    const tool = { name: 'get_weather', input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }
    const body = { model, max_tokens: 64, messages: [{ role: 'user', content: 'Weather in Lisbon?' }], tools: [tool] }
    const send = (extra: Record<string, unknown>) => h.fetch('/v1/messages', { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify({ ...body, ...extra }) })
    const json = await send({})
    const answer = (await json.json()) as { content: { type: string; name: string; input: unknown }[]; stop_reason: string }
    expect(json.status, JSON.stringify(answer)).toBe(200)
    expect(answer.content).toEqual([{ type: 'tool_use', id: expect.any(String), name: 'get_weather', input: { city: expect.any(String) } }])
    expect(answer.stop_reason).toBe('tool_use')
    const streamed = events(await (await send({ stream: true })).text()).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data) as { type: string; content_block?: { type: string }; delta?: { type: string; partial_json?: string; stop_reason?: string } })
    expect(streamed.find((e) => e.type === 'content_block_start')?.content_block).toMatchObject({ type: 'tool_use', name: 'get_weather' })
    const fragments = streamed.filter((e) => e.delta?.type === 'input_json_delta').map((e) => e.delta!.partial_json).join('')
    expect(JSON.parse(fragments)).toEqual(answer.content[0]!.input)
    expect(streamed.find((e) => e.type === 'message_delta')?.delta?.stop_reason).toBe('tool_use')
    expect(streamed.at(-1)?.type).toBe('message_stop')
  })

  it.each(MODELS)('%s: a /v1/responses function call streams through, its argument deltas joining into the JSON answer\'s arguments', async (model) => {
    const h = live()
    const { key } = await h.createKey({ name: 'routes' })
    const tool = { type: 'function', name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }
    const body = { model, input: 'Weather in Lisbon?', tools: [tool] }
    const json = await h.fetch('/v1/responses', authed(key, JSON.stringify(body)))
    const answer = (await json.json()) as { output: { type: string; name: string; arguments: string }[] }
    expect(json.status, JSON.stringify(answer)).toBe(200)
    expect(answer.output).toMatchObject([{ type: 'function_call', name: 'get_weather', status: 'completed' }])
    const streamed = events(await (await h.fetch('/v1/responses', authed(key, JSON.stringify({ ...body, stream: true })))).text())
    const args = streamed.filter((e) => e.event === 'response.function_call_arguments.delta').map((e) => (JSON.parse(e.data) as { delta: string }).delta).join('')
    expect(JSON.parse(args)).toEqual(JSON.parse(answer.output[0]!.arguments))
    expect(streamed.at(-1)!.event).toBe('response.completed')
  })

  it('a stream the emulator cuts mid-answer ends with the dialect\'s error event', async () => {
    const h = live()
    const { key } = await h.createKey({ name: 'routes' })
    const input = 'Go on [[emulator:fault=mid_stream,after=3,tokens=12]]'
    const responses = events(await (await h.fetch('/v1/responses', authed(key, JSON.stringify({ model: 'openai', input, stream: true })))).text())
    expect(responses.at(-1)).toMatchObject({ event: 'error' })
    expect(JSON.parse(responses.at(-1)!.data)).toMatchObject({ type: 'error', code: 'upstream_error' })
    expect(responses.some((e) => e.event === 'response.completed')).toBe(false)
    const messages = events(await (await h.fetch('/v1/messages', authed(key, JSON.stringify({ model: 'current', max_tokens: 12, messages: [{ role: 'user', content: input }], stream: true })))).text())
    expect(messages.at(-1)).toMatchObject({ event: 'error' })
    expect(JSON.parse(messages.at(-1)!.data)).toMatchObject({ type: 'error', error: { type: 'api_error' } })
  })

  it.each(['openai', 'current'] as const)('%s: the utility routes answer as vLLM does', async (model) => {
    const h = live()
    const { key } = await h.createKey({ name: 'routes' })
    const call = async (route: string, body: Record<string, unknown>) => {
      const res = await h.fetch(`/v1/${route}`, authed(key, JSON.stringify({ model, ...body })))
      const json = (await res.json()) as Record<string, unknown>
      expect(res.status, `${route}: ${JSON.stringify(json)}`).toBe(200)
      return json
    }
    const rerank = (await call('rerank', { query: 'edge', documents: ['gpu', 'edge network', 'cat'], top_n: 2 })) as { results: unknown[]; model: string }
    expect(rerank.results).toHaveLength(2)
    expect(rerank.model).toBe(model)
    expect(((await call('score', { text_1: 'a', text_2: ['b', 'c'] })) as { data: unknown[] }).data).toHaveLength(2)
    expect(((await call('classify', { input: ['good', 'bad'] })) as { data: unknown[] }).data).toHaveLength(2)
    expect(((await call('pooling', { input: 'edge' })) as { data: unknown[] }).data).toHaveLength(1)
    const tokens = (await call('tokenize', { prompt: 'Hello edge' })) as { count: number; tokens: number[] }
    expect(tokens.tokens).toHaveLength(tokens.count)
    expect(typeof ((await call('detokenize', { tokens: tokens.tokens })) as { prompt: string }).prompt).toBe('string')
    expect(typeof ((await call('messages/count_tokens', { messages: [{ role: 'user', content: 'Hi' }] })) as { input_tokens: number }).input_tokens).toBe('number')
    // Cohere's v2 API at podgate's /v2/rerank: the same ranking as /v1/rerank.
    const v2 = await h.fetch('/v2/rerank', authed(key, JSON.stringify({ model, query: 'edge', documents: ['gpu', 'edge network', 'cat'], top_n: 2 })))
    const v2Answer = (await v2.json()) as { results: unknown[]; model: string }
    expect(v2.status, JSON.stringify(v2Answer)).toBe(200)
    expect(v2Answer).toMatchObject({ model, results: rerank.results })
    // /v2/embed, Cohere's v2 embed: vectors by type, the count under meta.billed_units as vLLM writes it.
    const embed = await h.fetch('/v2/embed', authed(key, JSON.stringify({ model, texts: ['edge network', 'gpu'], embedding_types: ['float', 'base64'], output_dimension: 8 })))
    const embedAnswer = (await embed.json()) as { embeddings: { float: number[][]; base64: string[] } }
    expect(embed.status, JSON.stringify(embedAnswer)).toBe(200)
    expect(embedAnswer).toMatchObject({ texts: ['edge network', 'gpu'], meta: { billed_units: { input_tokens: 3, image_tokens: 0 } }, response_type: 'embeddings_by_type' })
    expect(embedAnswer.embeddings.float.map((v) => v.length)).toEqual([8, 8])
    expect(embedAnswer.embeddings.base64).toHaveLength(2)
  })

  it('a classic worker refuses the routes it does not serve, and podgate says so', async () => {
    const h = live()
    const { key } = await h.createKey({ name: 'routes' })
    const res = await h.fetch('/v1/tokenize', authed(key, JSON.stringify({ model: 'classic', prompt: 'Hi' })))
    const body = (await res.json()) as { error: { message: string } }
    expect(res.status).toBeGreaterThanOrEqual(400)
    expect(body.error.message).toContain('Invalid route')
    // /v2/rerank too, in OpenAI's error shape (not the native surface's).
    const v2 = await h.fetch('/v2/rerank', authed(key, JSON.stringify({ model: 'classic', query: 'q', documents: ['a'] })))
    expect(v2.status).toBeGreaterThanOrEqual(400)
    expect(((await v2.json()) as { error: { message: string } }).error.message).toContain('Invalid route')
  })
})
