/**
 * The emulator's other vLLM routes (responses, messages, count_tokens, rerank, score, classify,
 * pooling, tokenize, detokenize): their JSON, their SSE event sequences, the same bytes through
 * current and classic `openai_route` jobs, directives and faults, and the refusals in each dialect.
 */
import { createParser } from 'eventsource-parser'
import { describe, expect, it } from 'vitest'
import { createRunpodEmulator } from './index.ts'
import { MEDIA_PART_TOKENS } from './generate.ts'
import type { EmulatorOptions } from './types.ts'

type Json = Record<string, any>

const BASE = 'http://emulator.test'

function setup(options: EmulatorOptions = {}) {
  const emulator = createRunpodEmulator(options)
  const post = (path: string, body: unknown) =>
    emulator.fetch(new Request(`${BASE}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }))
  const openai = async (endpoint: string, route: string, body: unknown) => {
    const res = await post(`/v2/${endpoint}/openai${route}`, body)
    return { status: res.status, json: (await res.json()) as Json }
  }
  const runsync = async (endpoint: string, input: Json) => (await (await post(`/v2/${endpoint}/runsync`, { input })).json()) as Json
  /** Runs a job with /run and collects every /stream item until it ends. */
  const streamJob = async (endpoint: string, input: Json) => {
    const { id } = (await (await post(`/v2/${endpoint}/run`, { input })).json()) as { id: string }
    const items: unknown[] = []
    for (let i = 0; i < 200; i++) {
      const page = (await (await emulator.fetch(new Request(`${BASE}/v2/${endpoint}/stream/${id}`))).json()) as Json
      items.push(...page.stream.map((s: Json) => s.output))
      if (['COMPLETED', 'FAILED'].includes(page.status)) return { id, items, status: page.status as string }
    }
    throw new Error('job did not end')
  }
  return { emulator, post, openai, runsync, streamJob }
}

/** Every SSE event of a text: its name (undefined when unnamed) and data. */
function sseEvents(text: string): Array<{ event: string | undefined; data: string }> {
  const out: Array<{ event: string | undefined; data: string }> = []
  const parser = createParser({ onEvent: (e) => out.push({ event: e.event, data: e.data }) })
  parser.feed(text)
  return out
}

/** Reads a body until it ends or errors: the text received, and whether it errored. */
async function readAll(res: Response): Promise<{ text: string; errored: boolean }> {
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader()
  let text = ''
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) return { text, errored: false }
      text += value
    }
  } catch {
    return { text, errored: true }
  }
}

/** Ids and timestamps differ between an HTTP answer and a job's; everything else must match. */
function normalize(text: string): string {
  return text
    .replace(/resp_[0-9a-f]{32}/g, 'RESP')
    .replace(/msg_[0-9a-f]{32}/g, 'MSG')
    .replace(/chatcmpl-(tool-)?[\w-]+/g, 'CHATCMPL')
    .replace(/rs_[0-9a-f]{32}/g, 'RS')
    .replace(/"created(_at)?":\d+/g, '"created":0')
}

const RESPONSES_STREAM = [
  'response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
  // ...one response.output_text.delta per token...
  'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed',
]
const MESSAGES_STREAM = ['message_start', 'content_block_start', /* deltas */ 'content_block_stop', 'message_delta', 'message_stop']

const conversation = [{ role: 'user', content: 'Tell me about the river.' }]
const chatBody = { model: 'm', messages: [{ role: 'system', content: 'Be brief.' }, ...conversation] }
const responsesBody = { model: 'm', instructions: 'Be brief.', input: [{ role: 'user', content: [{ type: 'input_text', text: 'Tell me about the river.' }] }], temperature: 0.2, tools: [] }
const messagesBody = { model: 'm', max_tokens: 200, system: [{ type: 'text', text: 'Be brief.' }], messages: conversation }

describe('/v1/responses', () => {
  it('answers the chat route\'s text and token counts as a response object', async () => {
    const { openai } = setup()
    const chat = (await openai('ep', '/v1/chat/completions', chatBody)).json
    const { status, json } = await openai('ep', '/v1/responses', responsesBody)
    expect(status).toBe(200)
    expect(json).toMatchObject({ object: 'response', model: 'm', status: 'completed', incomplete_details: null })
    expect(json.id).toMatch(/^resp_[0-9a-f]{32}$/)
    expect(json.output).toEqual([{ id: expect.stringMatching(/^msg_[0-9a-f]{32}$/), type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: chat.choices[0].message.content, annotations: [] }] }])
    const { prompt_tokens: input, completion_tokens: output } = chat.usage
    expect(json.usage).toEqual({ input_tokens: input, input_tokens_details: { cached_tokens: 0 }, output_tokens: output, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: input + output })
  })

  it('is incomplete when max_output_tokens cuts it', async () => {
    const { openai } = setup()
    const { json } = await openai('ep', '/v1/responses', { input: 'Hi', max_output_tokens: 1 })
    expect(json).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, usage: { output_tokens: 1 } })
  })

  it('streams named events with sequence numbers, one delta per token, ending with response.completed and no [DONE]', async () => {
    const { post, openai } = setup()
    const res = await post('/v2/ep/openai/v1/responses', { ...responsesBody, stream: true })
    expect(res.headers.get('content-type')).toContain('text/event-stream')
    const text = await res.text()
    expect(text).not.toContain('[DONE]')
    const events = sseEvents(text)
    const payloads = events.map((e) => JSON.parse(e.data) as Json)
    payloads.forEach((p, i) => {
      expect(p.type).toBe(events[i]!.event)
      expect(p.sequence_number).toBe(i)
    })
    const names = events.map((e) => e.event).filter((n) => n !== 'response.output_text.delta')
    expect(names).toEqual(RESPONSES_STREAM)
    const final = payloads.at(-1)!.response as Json
    const deltas = payloads.filter((p) => p.type === 'response.output_text.delta')
    expect(deltas).toHaveLength(final.usage.output_tokens)
    expect(deltas[0]).toEqual({ type: 'response.output_text.delta', item_id: final.output[0].id, output_index: 0, content_index: 0, delta: expect.any(String), sequence_number: 4 })
    expect(deltas.map((d) => d.delta).join('')).toBe(final.output[0].content[0].text)
    const { json } = await openai('ep', '/v1/responses', responsesBody)
    expect(normalize(JSON.stringify(final))).toBe(normalize(JSON.stringify(json)))
  })

  it('with reasoning asked for, answers a reasoning item before the message, in JSON and streamed, each item opened on its first delta', async () => {
    const { post, openai } = setup()
    const thinking = { ...responsesBody, reasoning: { effort: 'low' } }
    const chat = (await openai('ep', '/v1/chat/completions', { ...chatBody, chat_template_kwargs: { enable_thinking: true } })).json
    const { json } = await openai('ep', '/v1/responses', thinking)
    expect(json.output).toEqual([
      { id: expect.stringMatching(/^rs_[0-9a-f]{32}$/), type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text: chat.choices[0].message.reasoning }], encrypted_content: null, status: null },
      { id: expect.stringMatching(/^msg_[0-9a-f]{32}$/), type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: chat.choices[0].message.content, annotations: [] }] },
    ])
    const reasoningTokens = chat.usage.completion_tokens - (await openai('ep', '/v1/responses', responsesBody)).json.usage.output_tokens
    expect(reasoningTokens).toBeGreaterThan(0)
    // The reasoning counts in output_tokens; vLLM's simple Responses path leaves reasoning_tokens at 0.
    expect(json.usage).toMatchObject({ output_tokens: chat.usage.completion_tokens, output_tokens_details: { reasoning_tokens: 0 } })

    const payloads = sseEvents(await (await post('/v2/ep/openai/v1/responses', { ...thinking, stream: true })).text()).map((e) => JSON.parse(e.data) as Json)
    const [reasoning, message] = (payloads.at(-1)!.response as Json).output as [Json, Json]
    const names = payloads.map((p) => p.type as string).filter((n) => !n.endsWith('_text.delta'))
    expect(names).toEqual([
      'response.created', 'response.in_progress',
      'response.output_item.added', 'response.content_part.added', 'response.reasoning_text.done', 'response.content_part.done', 'response.output_item.done',
      ...RESPONSES_STREAM.slice(2),
    ])
    const reasoningAt = { item_id: reasoning.id, output_index: 0, content_index: 0 }
    expect(payloads[2]).toMatchObject({ output_index: 0, item: { id: reasoning.id, type: 'reasoning', summary: [], status: 'in_progress' } })
    expect(payloads[3]).toMatchObject({ ...reasoningAt, part: { type: 'reasoning_text', text: '' } })
    const thoughts = payloads.filter((p) => p.type === 'response.reasoning_text.delta')
    expect(thoughts).toHaveLength(reasoningTokens)
    expect(thoughts[0]).toMatchObject(reasoningAt)
    expect(thoughts.map((p) => p.delta).join('')).toBe(reasoning.content[0].text)
    expect(payloads.find((p) => p.type === 'response.output_item.done')).toMatchObject({ output_index: 0, item: { ...reasoning, status: 'completed' } })
    const text = payloads.filter((p) => p.type === 'response.output_text.delta')
    expect(text[0]).toMatchObject({ item_id: message.id, output_index: 1, content_index: 0 })
    expect(text.map((p) => p.delta).join('')).toBe(message.content[0].text)
    expect(normalize(JSON.stringify(payloads.at(-1)!.response))).toBe(normalize(JSON.stringify(json)))
    // The chat route's switch turns it off again.
    expect((await openai('ep', '/v1/responses', { ...thinking, chat_template_kwargs: { enable_thinking: false } })).json.output.map((i: Json) => i.type)).toEqual(['message'])
    expect((await openai('ep', '/v1/responses', { ...responsesBody, reasoning: { effort: 'none' } })).json.output.map((i: Json) => i.type)).toEqual(['message'])
  })

  it('a cut stream ends with response.incomplete', async () => {
    const { post } = setup()
    const events = sseEvents(await (await post('/v2/ep/openai/v1/responses', { input: 'Hi', max_output_tokens: 2, stream: true })).text())
    expect(events.at(-1)!.event).toBe('response.incomplete')
    expect(JSON.parse(events.at(-1)!.data).response).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } })
  })

  it('a mid_stream directive errors the body after N deltas, before response.completed', async () => {
    const { post } = setup()
    const body = { input: 'Hi [[emulator:fault=mid_stream,after=3,tokens=10]]', stream: true }
    const { text, errored } = await readAll(await post('/v2/ep/openai/v1/responses', body))
    expect(errored).toBe(true)
    const names = sseEvents(text).map((e) => e.event)
    expect(names.filter((n) => n === 'response.output_text.delta')).toHaveLength(3)
    expect(names).not.toContain('response.completed')
    expect(names).not.toContain('response.output_text.done')
  })

  it('honours the cold start and http fault directives found in the input', async () => {
    const { openai } = setup()
    const started = Date.now()
    expect((await openai('ep', '/v1/responses', { input: 'Hi [[emulator:cold=60]]' })).status).toBe(200)
    expect(Date.now() - started).toBeGreaterThanOrEqual(50)
    const res = await setup().post('/v2/ep/openai/v1/responses', { input: [{ role: 'user', content: 'Hi [[emulator:fault=http,status=503]]' }] })
    expect(res.status).toBe(503)
  })

  it('refuses bad input with vLLM\'s 400 and a foreign model with 404', async () => {
    const { openai } = setup({ endpoints: { named: { servedModelName: 'org/m' } } })
    expect(await openai('ep', '/v1/responses', { model: 'm' })).toEqual({ status: 400, json: { error: { message: expect.stringContaining('input'), type: 'BadRequestError', param: null, code: 400 } } })
    expect(await openai('named', '/v1/responses', { model: 'other', input: 'Hi' })).toEqual({ status: 404, json: { error: { message: 'The model `other` does not exist.', type: 'NotFoundError', param: null, code: 404 } } })
    expect((await openai('named', '/v1/responses', { model: 'org/m', input: 'Hi' })).json.model).toBe('org/m')
  })
})

describe('/v1/messages', () => {
  it('answers the chat route\'s text and token counts as an Anthropic message', async () => {
    const { openai } = setup()
    const chat = (await openai('ep', '/v1/chat/completions', chatBody)).json
    const { status, json } = await openai('ep', '/v1/messages', messagesBody)
    expect(status).toBe(200)
    // vLLM's converter keeps the chat completion's id and drops None fields (`stop_sequence`).
    expect(json).toEqual({
      id: expect.stringMatching(/^chatcmpl-[0-9a-f]{32}$/),
      type: 'message',
      role: 'assistant',
      content: [{ type: 'text', text: chat.choices[0].message.content }],
      model: 'm',
      stop_reason: 'end_turn',
      usage: { input_tokens: chat.usage.prompt_tokens, output_tokens: chat.usage.completion_tokens },
    })
    expect((await openai('ep', '/v1/messages', { ...messagesBody, max_tokens: 1 })).json.stop_reason).toBe('max_tokens')
  })

  it('streams Anthropic\'s events, one content_block_delta per token, ending with message_stop and no [DONE]', async () => {
    const { post } = setup()
    const text = await (await post('/v2/ep/openai/v1/messages', { ...messagesBody, stream: true })).text()
    // Current vLLM's anthropic/serving.py turns chat's [DONE] into message_stop and writes nothing after it.
    expect(text.endsWith('event: message_stop\ndata: {"type":"message_stop"}\n\n')).toBe(true)
    expect(text).not.toContain('[DONE]')
    const named = sseEvents(text)
    expect(named.map((e) => e.event).filter((n) => n !== 'content_block_delta')).toEqual(MESSAGES_STREAM)
    const payloads = named.map((e) => JSON.parse(e.data) as Json)
    payloads.forEach((p, i) => expect(p.type).toBe(named[i]!.event))
    const { json } = await setup().openai('ep', '/v1/messages', messagesBody)
    // exclude_unset: message_start's message has no `type` or `role` (their defaults were never set).
    expect(payloads[0]).toEqual({ type: 'message_start', message: { id: payloads[0]!.message.id, content: [], model: 'm', stop_reason: null, stop_sequence: null, usage: { input_tokens: json.usage.input_tokens, output_tokens: 0 } } })
    expect(payloads[0]!.message.id).toMatch(/^chatcmpl-[0-9a-f]{32}$/)
    expect(payloads[1]).toEqual({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } })
    const deltas = payloads.filter((p) => p.type === 'content_block_delta')
    expect(deltas).toHaveLength(json.usage.output_tokens)
    expect(deltas.map((d) => d.delta.text).join('')).toBe(json.content[0].text)
    expect(deltas[0]).toEqual({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: expect.any(String) } })
    expect(payloads.find((p) => p.type === 'message_delta')).toEqual({ type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: json.usage })
  })

  it('with messagesDone (older vLLM), writes data: [DONE] after message_stop and message_start\'s usage beside its message, over HTTP and in jobs', async () => {
    const { post, streamJob } = setup({ defaults: { messagesDone: true } })
    const direct = await (await post('/v2/ep/openai/v1/messages', { ...messagesBody, stream: true })).text()
    expect(direct.endsWith('event: message_stop\ndata: {"type":"message_stop"}\n\ndata: [DONE]\n\n')).toBe(true)
    // anthropic/serving_messages.py: AnthropicStreamEvent(type, message=AnthropicMessagesResponse(id, content, model), usage=...).
    const start = JSON.parse(sseEvents(direct)[0]!.data) as Json
    expect(start).toEqual({ type: 'message_start', message: { id: start.message.id, content: [], model: 'm' }, usage: { input_tokens: expect.any(Number), output_tokens: 0 } })
    for (const endpoint of ['vllmcurrent', 'vllmclassic']) {
      const job = await streamJob(endpoint, { openai_route: '/v1/messages', openai_input: { ...messagesBody, stream: true } })
      expect(normalize((job.items as string[]).join(''))).toBe(normalize(direct))
    }
  })

  it('answers errors in Anthropic\'s shape', async () => {
    const { openai } = setup({ endpoints: { named: { servedModelName: 'org/m' } } })
    const { max_tokens: _, ...noMax } = messagesBody
    expect(await openai('ep', '/v1/messages', noMax)).toEqual({ status: 400, json: { type: 'error', error: { type: 'invalid_request_error', message: expect.stringContaining('max_tokens') } } })
    expect(await openai('named', '/v1/messages', messagesBody)).toEqual({ status: 404, json: { type: 'error', error: { type: 'not_found_error', message: 'The model `m` does not exist.' } } })
    expect(await openai('ep', '/v1/messages/count_tokens', { messages: [] })).toEqual({ status: 400, json: { type: 'error', error: { type: 'invalid_request_error', message: expect.stringContaining('model') } } })
  })

  it('count_tokens counts what /v1/messages reports as input_tokens', async () => {
    const { openai } = setup()
    const { max_tokens: _, ...body } = messagesBody
    const counted = await openai('ep', '/v1/messages/count_tokens', body)
    const input = (await openai('ep', '/v1/messages', messagesBody)).json.usage.input_tokens
    expect(counted).toEqual({ status: 200, json: { input_tokens: input, context_management: { original_input_tokens: input } } })
  })
})

describe('the non-generating routes', () => {
  it('/v1/rerank: deterministic scores in (0, 1), sorted, cut to top_n; /v1/score gives the same pair scores', async () => {
    const { openai } = setup()
    const documents = ['rivers flow', 'stones sit', 'clouds drift', 'light bends']
    const { status, json } = await openai('ep', '/v1/rerank', { model: 'm', query: 'water', documents, top_n: 3 })
    expect(status).toBe(200)
    expect(json).toMatchObject({ id: expect.stringMatching(/^rerank-[0-9a-f]{32}$/), model: 'm', usage: { prompt_tokens: 12, total_tokens: 12 } })
    expect(json.results).toHaveLength(3)
    const scores = json.results.map((r: Json) => r.relevance_score)
    expect([...scores].sort((a, b) => b - a)).toEqual(scores)
    for (const r of json.results) {
      expect(r.document).toEqual({ text: documents[r.index] })
      expect(r.relevance_score).toBeGreaterThan(0)
      expect(r.relevance_score).toBeLessThan(1)
    }
    expect((await openai('ep', '/v1/rerank', { query: 'water', documents, top_n: 3 })).json.results).toEqual(json.results)
    const score = await openai('ep', '/v1/score', { model: 'm', text_1: 'water', text_2: documents })
    expect(score.json).toMatchObject({ id: expect.stringMatching(/^score-/), object: 'list', created: expect.any(Number), model: 'm', usage: { prompt_tokens: 12, total_tokens: 12, completion_tokens: 0 } })
    for (const r of json.results) expect(score.json.data[r.index]).toEqual({ index: r.index, object: 'score', score: r.relevance_score })
    expect((await openai('ep', '/v1/score', { text_1: ['a', 'b'], text_2: ['c', 'd', 'e'] })).status).toBe(400)
    expect(await openai('ep', '/v1/rerank', { documents })).toEqual({ status: 400, json: { error: { message: expect.stringContaining('query'), type: 'BadRequestError', param: null, code: 400 } } })
  })

  it('/classify, /pooling (the embedding vector), /tokenize (the chat prompt count), /detokenize', async () => {
    const { openai } = setup({ defaults: { embeddingDimensions: 16 } })
    const classify = (await openai('ep', '/classify', { model: 'm', input: ['good', 'bad day'] })).json
    expect(classify).toMatchObject({ id: expect.stringMatching(/^classify-/), object: 'list', model: 'm', usage: { prompt_tokens: 3, total_tokens: 3, completion_tokens: 0 } })
    for (const d of classify.data) {
      expect(d).toEqual({ index: d.index, label: d.probs[0] >= 0.5 ? 'positive' : 'negative', probs: [expect.any(Number), expect.any(Number)], num_classes: 2 })
      expect(d.probs[0] + d.probs[1]).toBeCloseTo(1, 9)
    }
    const pooling = (await openai('ep', '/pooling', { input: 'hello there' })).json
    const embedding = (await openai('ep', '/v1/embeddings', { input: 'hello there' })).json
    expect(pooling).toMatchObject({ id: expect.stringMatching(/^pool-/), object: 'list', usage: { prompt_tokens: 2 } })
    expect(pooling.data).toEqual([{ index: 0, object: 'pooling', data: embedding.data[0].embedding }])

    const tokens = (await openai('ep', '/tokenize', { model: 'm', prompt: 'Hi there friend' })).json
    expect(tokens).toEqual({ count: 3, max_model_len: 8192, tokens: [expect.any(Number), expect.any(Number), expect.any(Number)], token_strs: null })
    const chat = (await openai('ep', '/v1/chat/completions', chatBody)).json
    expect((await openai('ep', '/tokenize', { messages: chatBody.messages })).json.count).toBe(chat.usage.prompt_tokens)
    expect((await openai('ep', '/tokenize', { model: 'm' })).status).toBe(400)
    const text = (await openai('ep', '/detokenize', { tokens: tokens.tokens })).json
    expect(text).toEqual({ prompt: expect.any(String) })
    expect((await openai('ep', '/detokenize', { tokens: tokens.tokens })).json).toEqual(text)
    expect((await openai('ep', '/detokenize', { tokens: 'x' })).status).toBe(400)
  })

  it('a foreign model is vLLM\'s 404, in Anthropic\'s shape on count_tokens, over HTTP and in a job', async () => {
    const { openai, runsync } = setup({ defaults: { servedModelName: 'org/m' } })
    expect(await openai('ep', '/v1/rerank', { model: 'x', query: 'q', documents: [] })).toEqual({ status: 404, json: { error: { message: 'The model `x` does not exist.', type: 'NotFoundError', param: null, code: 404 } } })
    expect(await openai('ep', '/v1/messages/count_tokens', { model: 'x', messages: [] })).toEqual({ status: 404, json: { type: 'error', error: { type: 'not_found_error', message: 'The model `x` does not exist.' } } })
    const job = await runsync('vllmcurrent', { openai_route: '/classify', openai_input: { model: 'x', input: 'a' } })
    expect(job).toMatchObject({ status: 'FAILED', error: expect.stringContaining('vLLM returned HTTP 404: {"error":{"message":"The model `x` does not exist."') })
    expect((await openai('ep', '/classify', { model: 'org/m', input: 'a' })).json.model).toBe('org/m')
  })

  it('records the calls as openai ops with their bodies', async () => {
    const { emulator, openai } = setup()
    await openai('epcalls', '/classify', { input: 'x' })
    expect(emulator.calls.at(-1)).toMatchObject({ op: 'openai', path: '/v2/epcalls/openai/classify', status: 200, endpointId: 'epcalls' })
    expect(emulator.lastRequest('epcalls')).toMatchObject({ op: 'openai', path: '/v2/epcalls/openai/classify', body: { input: 'x' } })
  })
})

describe('/v1/messages: tools and thinking, as vLLM converts them to and from chat', () => {
  const weather = { name: 'get_weather', description: 'The weather in a city', input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }
  const withTools = { ...messagesBody, tools: [weather] }
  const chatTools = { ...chatBody, tools: [{ type: 'function', function: { name: weather.name, parameters: weather.input_schema } }] }
  const toolUse = { type: 'tool_use', id: expect.stringMatching(/^chatcmpl-tool-[0-9a-f]{32}$/), name: 'get_weather', input: { city: expect.any(String) } }

  it('answers a tool call as a tool_use block with the arguments chat gives, and stop_reason tool_use', async () => {
    const { openai } = setup()
    const chat = (await openai('ep', '/v1/chat/completions', chatTools)).json
    const { status, json } = await openai('ep', '/v1/messages', withTools)
    expect(status).toBe(200)
    expect(json.content).toEqual([toolUse])
    expect(json.content[0].input).toEqual(JSON.parse(chat.choices[0].message.tool_calls[0].function.arguments))
    expect(json.stop_reason).toBe('tool_use')
    // The tool's definition counts as prompt, as on chat; count_tokens agrees.
    expect(json.usage.input_tokens).toBe(chat.usage.prompt_tokens)
    const { max_tokens: _, ...countBody } = withTools
    expect((await openai('ep', '/v1/messages/count_tokens', countBody)).json.input_tokens).toBe(json.usage.input_tokens)
  })

  it('maps tool_choice: tool forces the named call (end_turn, as vLLM finishes a named call), none answers in text, any needs tools', async () => {
    const { openai } = setup()
    const second = { name: 'get_time', input_schema: { type: 'object', properties: { zone: { type: 'string' } } } }
    const named = (await openai('ep', '/v1/messages', { ...withTools, tools: [weather, second], tool_choice: { type: 'tool', name: 'get_time' } })).json
    expect(named.content).toEqual([{ ...toolUse, name: 'get_time', input: expect.any(Object) }])
    expect(named.stop_reason).toBe('end_turn')
    const none = (await openai('ep', '/v1/messages', { ...withTools, tool_choice: { type: 'none' } })).json
    expect(none.content).toEqual([{ type: 'text', text: expect.any(String) }])
    expect(await openai('ep', '/v1/messages', { ...messagesBody, tool_choice: { type: 'any' } })).toEqual({
      status: 400,
      json: { type: 'error', error: { type: 'invalid_request_error', message: 'When using `tool_choice`, `tools` must be set.' } },
    })
    const refused = await openai('ep', '/v1/messages', { ...withTools, tool_choice: { type: 'tool', name: 'nope' } })
    expect(refused.json.error.message).toBe("Tool 'nope' has not been passed in `tools`.")
    // "auto" (the default with tools) needs --enable-auto-tool-choice, as on chat.
    const strict = setup({ endpoints: { strict: { enableAutoToolChoice: false } } })
    expect((await strict.openai('strict', '/v1/messages', withTools)).status).toBe(400)
  })

  it('answers a tool_result in text: the result becomes a tool message, as vLLM converts it', async () => {
    const { openai } = setup()
    const first = (await openai('ep', '/v1/messages', withTools)).json
    const followUp = {
      ...withTools,
      messages: [
        ...conversation,
        { role: 'assistant', content: first.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: first.content[0].id, content: [{ type: 'text', text: '21 degrees' }] }] },
      ],
    }
    const { json } = await openai('ep', '/v1/messages', followUp)
    expect(json.content).toEqual([{ type: 'text', text: expect.stringMatching(/^The tool returned: 21 degrees\./) }])
    expect(json.stop_reason).toBe('end_turn')
  })

  it('streams a tool call as a tool_use block of input_json_delta fragments that join into the JSON answer\'s input', async () => {
    const { post, openai } = setup()
    const { json } = await openai('ep', '/v1/messages', withTools)
    const events = sseEvents(await (await post('/v2/ep/openai/v1/messages', { ...withTools, stream: true })).text())
    expect(events.at(-1)!.event).toBe('message_stop')
    const payloads = events.map((e) => JSON.parse(e.data) as Json)
    expect(payloads.map((p) => p.type).filter((t) => t !== 'content_block_delta')).toEqual(MESSAGES_STREAM)
    expect(payloads[1]).toEqual({ type: 'content_block_start', index: 0, content_block: { ...toolUse, input: {} } })
    const fragments = payloads.filter((p) => p.type === 'content_block_delta')
    expect(fragments.length).toBeGreaterThan(1)
    for (const f of fragments) expect(f).toEqual({ type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: expect.any(String) } })
    expect(JSON.parse(fragments.map((f) => f.delta.partial_json).join(''))).toEqual(json.content[0].input)
    expect(payloads.find((p) => p.type === 'message_delta')).toEqual({ type: 'message_delta', delta: { stop_reason: 'tool_use' }, usage: json.usage })
  })

  it('answers with a signed thinking block before the text when chat_template_kwargs enables thinking, JSON and streamed', async () => {
    const { post, openai } = setup()
    const thinking = { ...messagesBody, chat_template_kwargs: { enable_thinking: true } }
    const chat = (await openai('ep', '/v1/chat/completions', { ...chatBody, chat_template_kwargs: { enable_thinking: true } })).json
    const { json } = await openai('ep', '/v1/messages', thinking)
    expect(json.content).toEqual([
      { type: 'thinking', thinking: chat.choices[0].message.reasoning, signature: expect.stringMatching(/^[0-9a-f]{32}$/) },
      { type: 'text', text: chat.choices[0].message.content },
    ])
    const payloads = sseEvents(await (await post('/v2/ep/openai/v1/messages', { ...thinking, stream: true })).text()).map((e) => JSON.parse(e.data) as Json)
    expect(payloads.map((p) => (p.type === 'content_block_delta' ? `delta:${p.index}:${p.delta.type}` : p.type)).filter((t, i, all) => t !== all[i - 1])).toEqual([
      'message_start',
      'content_block_start', 'delta:0:thinking_delta', 'delta:0:signature_delta', 'content_block_stop',
      'content_block_start', 'delta:1:text_delta', 'content_block_stop',
      'message_delta', 'message_stop',
    ])
    const deltas = (type: string) => payloads.filter((p) => p.delta?.type === type)
    expect(deltas('thinking_delta').map((p) => p.delta.thinking).join('')).toBe(json.content[0].thinking)
    expect(deltas('text_delta').map((p) => p.delta.text).join('')).toBe(json.content[1].text)
    expect(deltas('signature_delta')[0]!.delta.signature).toMatch(/^[0-9a-f]{32}$/)
  })

  it('gives the same tool call through an openai_route job on a current worker', async () => {
    const { openai, runsync } = setup()
    const { json } = await openai('ep', '/v1/messages', withTools)
    const job = await runsync('vllmcurrent', { openai_route: '/v1/messages', openai_input: withTools })
    expect(job.status).toBe('COMPLETED')
    const answer = job.output[0]
    expect(answer.content).toEqual([{ ...toolUse, input: json.content[0].input }])
    expect(answer.stop_reason).toBe('tool_use')
  })
})

describe('/v1/responses: function tools, as vLLM plans them from chat', () => {
  const weather = { type: 'function', name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }
  const withTools = { ...responsesBody, tools: [weather] }
  const chatTools = { ...chatBody, tools: [{ type: 'function', function: { name: weather.name, parameters: weather.parameters } }] }
  const callItem = { type: 'function_call', id: expect.stringMatching(/^fc_[0-9a-f]{32}$/), call_id: expect.stringMatching(/^call_[0-9a-f]{32}$/), name: 'get_weather', arguments: expect.any(String), status: 'completed' }

  it('answers a function_call item with the arguments chat gives', async () => {
    const { openai } = setup()
    const chat = (await openai('ep', '/v1/chat/completions', chatTools)).json
    const { status, json } = await openai('ep', '/v1/responses', withTools)
    expect(status).toBe(200)
    expect(json.status).toBe('completed')
    expect(json.output).toEqual([callItem])
    expect(JSON.parse(json.output[0].arguments)).toEqual(JSON.parse(chat.choices[0].message.tool_calls[0].function.arguments))
    expect(json.usage.input_tokens).toBe(chat.usage.prompt_tokens)
  })

  it('streams the call as output_item.added, function_call_arguments deltas that join into its arguments, .done and output_item.done', async () => {
    const { post, openai } = setup()
    const { json } = await openai('ep', '/v1/responses', withTools)
    const payloads = sseEvents(await (await post('/v2/ep/openai/v1/responses', { ...withTools, stream: true })).text()).map((e) => JSON.parse(e.data) as Json)
    expect(payloads.map((p) => p.type).filter((t) => t !== 'response.function_call_arguments.delta')).toEqual([
      'response.created', 'response.in_progress', 'response.output_item.added', 'response.function_call_arguments.done', 'response.output_item.done', 'response.completed',
    ])
    payloads.forEach((p, i) => expect(p.sequence_number).toBe(i))
    expect(payloads[2]!.item).toEqual({ ...callItem, arguments: '', status: 'in_progress' })
    const deltas = payloads.filter((p) => p.type === 'response.function_call_arguments.delta')
    expect(deltas.length).toBeGreaterThan(1)
    for (const d of deltas) expect(d).toMatchObject({ output_index: 0, item_id: payloads[2]!.item.id })
    const args = deltas.map((d) => d.delta).join('')
    expect(JSON.parse(args)).toEqual(JSON.parse(json.output[0].arguments))
    expect(payloads.at(-2)!.item).toEqual({ ...callItem, id: payloads[2]!.item.id, arguments: args })
    expect(payloads.at(-1)!.response.output).toEqual([payloads.at(-2)!.item])
  })

  it('with reasoning, the reasoning item comes first (output index 0) and the call after it, in JSON and streamed', async () => {
    const { post, openai } = setup()
    const thinking = { ...withTools, reasoning: { effort: 'medium' } }
    const { json } = await openai('ep', '/v1/responses', thinking)
    expect(json.output).toEqual([expect.objectContaining({ type: 'reasoning', status: null }), callItem])
    expect(json.usage.output_tokens).toBeGreaterThan((await openai('ep', '/v1/responses', withTools)).json.usage.output_tokens)
    const payloads = sseEvents(await (await post('/v2/ep/openai/v1/responses', { ...thinking, stream: true })).text()).map((e) => JSON.parse(e.data) as Json)
    expect(payloads.map((p) => p.type).filter((t) => !t.endsWith('.delta'))).toEqual([
      'response.created', 'response.in_progress',
      'response.output_item.added', 'response.content_part.added', 'response.reasoning_text.done', 'response.content_part.done', 'response.output_item.done',
      'response.output_item.added', 'response.function_call_arguments.done', 'response.output_item.done', 'response.completed',
    ])
    payloads.forEach((p, i) => expect(p.sequence_number).toBe(i))
    const added = payloads.filter((p) => p.type === 'response.output_item.added')
    expect(added.map((p) => [p.output_index, p.item.type])).toEqual([[0, 'reasoning'], [1, 'function_call']])
    for (const d of payloads.filter((p) => p.type === 'response.function_call_arguments.delta')) expect(d.output_index).toBe(1)
    const final = payloads.at(-1)!.response as Json
    expect(final.output.map((item: Json) => item.type)).toEqual(['reasoning', 'function_call'])
    expect(normalize(JSON.stringify(final)).replace(/(fc|call)_[0-9a-f]{32}/g, '$1')).toBe(normalize(JSON.stringify(json)).replace(/(fc|call)_[0-9a-f]{32}/g, '$1'))
  })

  it('answers a function_call_output in text; tool_choice none answers in text; refuses a choice its tools cannot meet', async () => {
    const { openai } = setup()
    const first = (await openai('ep', '/v1/responses', withTools)).json
    const followUp = { ...withTools, input: [...withTools.input, first.output[0], { type: 'function_call_output', call_id: first.output[0].call_id, output: '21 degrees' }] }
    const { json } = await openai('ep', '/v1/responses', followUp)
    expect(json.output).toEqual([expect.objectContaining({ type: 'message', content: [expect.objectContaining({ text: expect.stringMatching(/^The tool returned: 21 degrees\./) })] })])
    expect((await openai('ep', '/v1/responses', { ...withTools, tool_choice: 'none' })).json.output[0].type).toBe('message')
    const refused = await openai('ep', '/v1/responses', { ...responsesBody, tool_choice: 'required' })
    expect(refused.status).toBe(400)
    expect(JSON.stringify(refused.json)).toContain('When using `tool_choice`, `tools` must be set.')
  })
})

describe('media parts: each counts MEDIA_PART_TOKENS prompt tokens on every route, and the answer is the text\'s', () => {
  const image = 'data:image/png;base64,iVBORw0KGgo='
  it('chat, Responses, Messages, count_tokens and tokenize agree on an image\'s tokens', async () => {
    const { openai } = setup()
    const text = { type: 'text', text: 'Tell me about the river.' }
    const chatWith = (parts: Json[]) => ({ model: 'm', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: parts }] })
    const plain = (await openai('ep', '/v1/chat/completions', chatWith([text]))).json
    const pictured = (await openai('ep', '/v1/chat/completions', chatWith([text, { type: 'image_url', image_url: { url: image } }, { type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }]))).json
    expect(pictured.usage.prompt_tokens - plain.usage.prompt_tokens).toBe(2 * MEDIA_PART_TOKENS)
    expect(pictured.choices[0].message.content).toBe(plain.choices[0].message.content)
    // A string part is text, and vLLM types a media part without `type` by its key.
    const untyped = (await openai('ep', '/v1/chat/completions', chatWith(['Tell me about the river.', { image_url: { url: image } }] as unknown as Json[]))).json
    expect(untyped.usage.prompt_tokens - plain.usage.prompt_tokens).toBe(MEDIA_PART_TOKENS)
    expect(untyped.choices[0].message.content).toBe(plain.choices[0].message.content)
    // ...but not a text part without `type`, and it takes no part type it does not know, in vLLM's words.
    expect(await openai('ep', '/v1/chat/completions', chatWith([{ text: 'Tell me about the river.' }]))).toEqual({
      status: 400,
      json: { error: { message: "Missing 'type' field in multimodal part.", type: 'BadRequestError', param: null, code: 400 } },
    })
    const file = await openai('ep', '/v1/chat/completions', chatWith([text, { type: 'file', file: { file_data: 'JVBERi0=' } }]))
    expect(file.status).toBe(400)
    expect(file.json.error.message).toBe("Unsupported chat content part type: 'file'. Supported types: audio_embeds, audio_url, image_embeds, image_pil, image_url, input_audio, input_image, input_text, output_text, prompt_embeds, refusal, text, thinking, tool_reference, video_url.")
    const tokenized = (await openai('ep', '/tokenize', chatWith([text, { type: 'image_url', image_url: { url: image } }]))).json
    expect(tokenized.count).toBe(plain.usage.prompt_tokens + MEDIA_PART_TOKENS)

    const responses = (input: Json[]) => openai('ep', '/v1/responses', { model: 'm', instructions: 'Be brief.', input: [{ role: 'user', content: input }] })
    const rText = { type: 'input_text', text: 'Tell me about the river.' }
    const rPlain = (await responses([rText])).json
    const rPictured = (await responses([rText, { type: 'input_image', image_url: image }])).json
    expect(rPictured.usage.input_tokens - rPlain.usage.input_tokens).toBe(MEDIA_PART_TOKENS)

    const messages = (content: Json[]) => ({ model: 'm', max_tokens: 50, system: 'Be brief.', messages: [{ role: 'user', content }] })
    const mText = { type: 'text', text: 'Tell me about the river.' }
    const mImage = { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }
    const mPlain = (await openai('ep', '/v1/messages', messages([mText]))).json
    const mPictured = (await openai('ep', '/v1/messages', messages([mImage, mText]))).json
    expect(mPictured.usage.input_tokens - mPlain.usage.input_tokens).toBe(MEDIA_PART_TOKENS)
    expect((await openai('ep', '/v1/messages/count_tokens', messages([mImage, mText]))).json.input_tokens).toBe(mPictured.usage.input_tokens)
  })
})

describe('openai_route jobs', () => {
  for (const [route, body] of [['/v1/responses', responsesBody], ['/v1/messages', messagesBody]] as const) {
    it(`${route}: a current worker streams the HTTP route's SSE bytes cut across items`, async () => {
      const { post, streamJob } = setup()
      const direct = await (await post(`/v2/ep/openai${route}`, { ...body, stream: true })).text()
      const job = await streamJob('vllmcurrent', { openai_route: route, openai_input: { ...body, stream: true } })
      expect(job.status).toBe('COMPLETED')
      expect(job.items.length).toBeGreaterThan(1)
      expect(job.items.every((i) => typeof i === 'string')).toBe(true)
      expect(normalize((job.items as string[]).join(''))).toBe(normalize(direct))
    })

    it(`${route}: a classic worker yields one whole event per item`, async () => {
      const { post, streamJob } = setup()
      const direct = await (await post(`/v2/ep/openai${route}`, { ...body, stream: true })).text()
      const job = await streamJob('vllmclassic', { openai_route: route, openai_input: { ...body, stream: true } })
      expect(job.status).toBe('COMPLETED')
      expect(job.items.length).toBe(sseEvents(direct).length)
      for (const item of job.items) expect(item).toMatch(/^(event: [\w.]+\n)?data: .*\n\n$/)
      expect(normalize((job.items as string[]).join(''))).toBe(normalize(direct))
      if (route === '/v1/messages') expect(job.items.at(-1)).toBe('event: message_stop\ndata: {"type":"message_stop"}\n\n')
    })

    it(`${route}: non-stream, the JSON answer once, through /runsync, /status and /status-sync, on both generations`, async () => {
      const { openai, runsync, streamJob, emulator } = setup()
      const { json } = await openai('ep', route, body)
      for (const endpoint of ['vllmcurrent', 'vllmclassic']) {
        const sync = await runsync(endpoint, { openai_route: route, openai_input: body })
        expect(sync.status).toBe('COMPLETED')
        expect(sync.output).toHaveLength(1)
        expect(sync.output[0].id).toMatch(route === '/v1/messages' ? /^chatcmpl-/ : /^resp_[0-9a-f]{32}$/)
        expect(normalize(JSON.stringify(sync.output[0]))).toBe(normalize(JSON.stringify(json)))
        const job = await streamJob(endpoint, { openai_route: route, openai_input: body })
        for (const op of ['status', 'status-sync']) {
          const view = (await (await emulator.fetch(new Request(`${BASE}/v2/${endpoint}/${op}/${job.id}`))).json()) as Json
          expect(normalize(JSON.stringify(view.output))).toBe(normalize(JSON.stringify([json])))
        }
      }
    })
  }

  it('the utility routes answer on the current worker; the classic one says "Invalid route"', async () => {
    const { openai, runsync, streamJob } = setup()
    const direct = (await openai('ep', '/tokenize', { prompt: 'Hi there' })).json
    expect(await runsync('vllmcurrent', { openai_route: '/tokenize', openai_input: { prompt: 'Hi there' } })).toMatchObject({ status: 'COMPLETED', output: [direct] })
    const rerank = await runsync('vllmcurrent', { openai_route: '/v1/rerank', openai_input: { query: 'q', documents: ['a', 'b'] } })
    expect(rerank.output[0].results).toHaveLength(2)
    expect(rerank.output[0].id).toMatch(/^rerank-[0-9a-f]{32}$/)
    const embed = await runsync('vllmcurrent', { openai_route: '/v2/embed', openai_input: { texts: ['a b'], images: ['data:image/png;base64,AA=='] } })
    expect(embed.output[0]).toMatchObject({ embeddings: { float: [expect.any(Array), expect.any(Array)] }, meta: { billed_units: { input_tokens: 2, image_tokens: MEDIA_PART_TOKENS } } })
    expect((await runsync('vllmcurrent', { openai_route: '/v2/embed', openai_input: {} })).status).toBe('FAILED')
    const named = await runsync('vllmcurrent', { openai_route: '/pooling', openai_input: { model: 'm', input: 'x' } })
    expect(named.output[0].model).toBe((await openai('ep', '/pooling', { model: 'm', input: 'x' })).json.model)
    const classic = await streamJob('vllmclassic', { openai_route: '/tokenize', openai_input: { prompt: 'Hi there' } })
    expect(classic.status).toBe('FAILED')
    // runpod-python keeps the error item out of the stream and reports str() of its error: a dict's repr.
    expect(classic.items).toEqual([])
    expect((await runsync('vllmclassic', { openai_route: '/tokenize', openai_input: { prompt: 'Hi there' } })).error).toBe("{'message': 'Invalid route', 'type': 'BadRequestError', 'param': None, 'code': 400}")
  })

  it('the current worker wraps vLLM\'s refusal, in the route\'s dialect, into its worker_error item', async () => {
    const { runsync } = setup()
    const responses = await runsync('vllmcurrent', { openai_route: '/v1/responses', openai_input: { model: 'm' } })
    expect(responses.status).toBe('FAILED')
    expect(responses.output).toBeUndefined()
    const messages = await runsync('vllmcurrent', { openai_route: '/v1/messages', openai_input: { model: 'm', messages: [] } })
    // The job's error is runpod-python's str() of the worker's error object: its Python repr.
    expect(messages.error).toMatch(/^\{'message': 'vLLM returned HTTP 400: \{"type":"error","error":\{"type":"invalid_request_error","message":"max_tokens: .*', 'type': 'worker_error', 'code': None\}$/)
    expect(responses.error).toMatch(/^\{'message': 'vLLM returned HTTP 400: \{"error":\{"message":"input: .*","type":"BadRequestError","param":null,"code":400\}\}', 'type': 'worker_error', 'code': None\}$/)
  })

  it('a mid_stream directive fails a responses job after N deltas, without response.completed', async () => {
    const { streamJob } = setup()
    const input = { openai_route: '/v1/responses', openai_input: { input: 'Hi [[emulator:fault=mid_stream,after=2,tokens=8]]', stream: true } }
    const job = await streamJob('vllmcurrent', input)
    expect(job.status).toBe('FAILED')
    const strings = job.items.filter((i): i is string => typeof i === 'string')
    expect(strings).toEqual(job.items)
    const names = sseEvents(strings.join('')).map((e) => e.event)
    expect(names.filter((n) => n === 'response.output_text.delta')).toHaveLength(2)
    expect(names).not.toContain('response.completed')
  })
})

describe('chat and completions JSON bodies', () => {
  it('carry the top-level null fields vLLM\'s model_dump() writes, in its order', async () => {
    const { openai } = setup()
    const chat = (await openai('vllmcurrent', '/v1/chat/completions', chatBody)).json
    expect(Object.keys(chat)).toEqual([
      'id', 'object', 'created', 'model', 'choices', 'service_tier', 'system_fingerprint', 'usage', 'prompt_logprobs', 'prompt_token_ids', 'kv_transfer_params',
    ])
    expect(chat).toMatchObject({ service_tier: null, system_fingerprint: null, prompt_token_ids: null, kv_transfer_params: null })
    const text = (await openai('vllmcurrent', '/v1/completions', { model: 'm', prompt: 'Once upon a time' })).json
    expect(Object.keys(text)).toEqual(['id', 'object', 'created', 'model', 'choices', 'service_tier', 'system_fingerprint', 'usage', 'kv_transfer_params'])
    expect(text).toMatchObject({ service_tier: null, system_fingerprint: null, kv_transfer_params: null })
  })
})

describe('chat tool-call streams', () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }]
  const toolDeltas = async (toolChoice: unknown) => {
    const { post } = setup()
    const body = { ...chatBody, tools, tool_choice: toolChoice }
    const json = (await (await post('/v2/vllmcurrent/openai/v1/chat/completions', body)).json()) as Json
    const text = await (await post('/v2/vllmcurrent/openai/v1/chat/completions', { ...body, stream: true })).text()
    const chunks = sseEvents(text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data) as Json)
    const deltas = chunks.map((c) => c.choices[0]).filter((c: Json) => c.delta.tool_calls).map((c: Json) => c.delta as Json)
    return { json, deltas, finishes: chunks.map((c) => c.choices[0].finish_reason).filter((f) => f !== null) }
  }

  it('a named tool_choice streams as vLLM\'s named path: name and the first arguments in one delta, no content key, then arguments', async () => {
    const { json, deltas, finishes } = await toolDeltas({ type: 'function', function: { name: 'get_weather' } })
    const [first, ...rest] = deltas
    expect(Object.keys(first!)).toEqual(['tool_calls'])
    expect(first!.tool_calls[0]).toMatchObject({ type: 'function', index: 0, function: { name: 'get_weather' } })
    expect(first!.tool_calls[0].id).toMatch(/^chatcmpl-tool-[0-9a-f]{32}$/)
    expect(first!.tool_calls[0].function.arguments).not.toBe('')
    for (const delta of rest) expect(delta).toEqual({ tool_calls: [{ index: 0, function: { arguments: expect.any(String) } }] })
    const joined = deltas.map((d) => d.tool_calls[0].function.arguments).join('')
    expect(joined).toBe(json.choices[0].message.tool_calls[0].function.arguments)
    expect(finishes).toEqual(['stop'])
  })

  it('a named tool_choice indexes each choice\'s fragments by the choice\'s index, as vLLM\'s named path does', async () => {
    const { post } = setup()
    const body = { ...chatBody, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } }, n: 2, stream: true }
    const text = await (await post('/v2/vllmcurrent/openai/v1/chat/completions', body)).text()
    const choices = sseEvents(text).filter((e) => e.data !== '[DONE]').flatMap((e) => (JSON.parse(e.data) as Json).choices as Json[])
    for (const choice of choices.filter((c) => c.delta.tool_calls)) expect(choice.delta.tool_calls[0].index).toBe(choice.index)
    expect(choices.filter((c) => c.index === 1 && c.delta.tool_calls).length).toBeGreaterThan(1)
  })

  it('a required tool_choice streams as vLLM\'s required path: name and the first arguments in one delta, then fragments with "name": null', async () => {
    const { json, deltas, finishes } = await toolDeltas('required')
    const [first, ...rest] = deltas
    expect(Object.keys(first!)).toEqual(['tool_calls'])
    expect(first!.tool_calls[0]).toMatchObject({ type: 'function', index: 0, function: { name: 'get_weather' } })
    expect(first!.tool_calls[0].function.arguments).not.toBe('')
    for (const delta of rest) expect(delta).toEqual({ tool_calls: [{ index: 0, function: { name: null, arguments: expect.any(String) } }] })
    const joined = deltas.map((d) => d.tool_calls[0].function.arguments).join('')
    expect(joined).toBe(json.choices[0].message.tool_calls[0].function.arguments)
    expect(finishes).toEqual(['tool_calls'])
  })

  it('an auto tool_choice streams as the hermes parser does: the name alone first, with content null', async () => {
    const { deltas, finishes } = await toolDeltas('auto')
    expect(deltas[0]).toEqual({ content: null, tool_calls: [{ id: expect.stringMatching(/^chatcmpl-tool-/), type: 'function', index: 0, function: { name: 'get_weather' } }] })
    expect(finishes).toEqual(['tool_calls'])
  })
})
