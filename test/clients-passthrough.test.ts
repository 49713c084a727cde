/**
 * Issue 13 through real clients: what people do with a vLLM endpoint every day (tools, structured output,
 * reasoning, logprobs, prompt arrays, embeddings) works through podgate exactly as against the endpoint,
 * on every upstream shape, with the official `openai` client, the Vercel AI SDK and Runpod's own AI SDK
 * provider at Runpod's URL shape (`/v2/<model>/openai/v1`), and vLLM's Anthropic Messages API with Anthropic's own client.
 */
import { createOpenAICompatible } from '@ai-sdk/openai-compatible'
import Anthropic from '@anthropic-ai/sdk'
import { createRunpod } from '@runpod/ai-sdk-provider'
import { embedMany, generateText, jsonSchema, Output, stepCountIs, streamText, tool } from 'ai'
import OpenAI from 'openai'
import { zodResponseFormat } from 'openai/helpers/zod'
import { describe, expect, it } from 'vitest'
import * as z from 'zod'
import { MEDIA_PART_TOKENS } from '../src/testing/emulator/generate.ts'
import { EMBEDDING_MODELS, harness, MODEL_NAMES } from './helpers.ts'

const CHAT_MODELS = MODEL_NAMES

async function setup() {
  const h = harness()
  const { key } = await h.createKey()
  const openai = new OpenAI({ apiKey: key, baseURL: 'http://podgate/v1', fetch: h.clientFetch, maxRetries: 0 })
  const settings = { name: 'podgate', baseURL: 'http://podgate/v1', apiKey: key, includeUsage: true, fetch: h.clientFetch }
  const podgate = createOpenAICompatible(settings)
  return { h, key, openai, podgate, settings }
}

const weatherTool = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['c', 'f'] } },
      required: ['city', 'unit'],
      additionalProperties: false,
    },
  },
}

function expectWeatherArguments(json: string): void {
  const args = JSON.parse(json) as { city: unknown; unit: unknown }
  expect(typeof args.city).toBe('string')
  expect(['c', 'f']).toContain(args.unit)
}

describe('openai client: tools', () => {
  it.each(CHAT_MODELS)('%s: a JSON answer carries the tool call, with content null and finish_reason tool_calls', async (model) => {
    const { openai } = await setup()
    const res = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [weatherTool], max_tokens: 64 })
    const choice = res.choices[0]!
    expect(choice.finish_reason).toBe('tool_calls')
    expect(choice.message.content).toBeNull()
    const call = choice.message.tool_calls?.[0]
    expect(call?.type).toBe('function')
    if (call?.type !== 'function') throw new Error('no function call')
    expect(call.function.name).toBe('get_weather')
    expect(call.id).toMatch(/\S/)
    expectWeatherArguments(call.function.arguments)
  })

  it.each(CHAT_MODELS)('%s: streamed tool-call deltas reassemble into the same call, ending with tool_calls', async (model) => {
    const { openai } = await setup()
    const stream = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [weatherTool], max_tokens: 64, stream: true, stream_options: { include_usage: true } })
    let name = ''
    let args = ''
    let id = ''
    let fragments = 0
    let finish: string | null = null
    let usage: OpenAI.CompletionUsage | null | undefined
    for await (const chunk of stream) {
      usage ??= chunk.usage
      for (const choice of chunk.choices) {
        finish = choice.finish_reason ?? finish
        for (const delta of choice.delta.tool_calls ?? []) {
          expect(delta.index).toBe(0)
          if (delta.id) id = delta.id
          if (delta.function?.name) name += delta.function.name
          if (delta.function?.arguments) {
            args += delta.function.arguments
            fragments++
          }
        }
      }
    }
    expect(finish).toBe('tool_calls')
    expect(name).toBe('get_weather')
    expect(id).toMatch(/\S/)
    expect(fragments).toBeGreaterThan(1)
    expectWeatherArguments(args)
    expect(usage?.completion_tokens).toBeGreaterThan(0)
  })

  it('a named tool_choice calls that tool, and a tool message is answered with text', async () => {
    const { openai } = await setup()
    const other = { type: 'function' as const, function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string' } }, required: ['zone'] } } }
    const first = await openai.chat.completions.create({
      model: 'chat-openai',
      messages: [{ role: 'user', content: 'What time is it in Tokyo?' }],
      tools: [weatherTool, other],
      tool_choice: { type: 'function', function: { name: 'get_time' } },
    })
    const call = first.choices[0]!.message.tool_calls![0]!
    if (call.type !== 'function') throw new Error('no function call')
    expect(call.function.name).toBe('get_time')
    const second = await openai.chat.completions.create({
      model: 'chat-current',
      messages: [
        { role: 'user', content: 'What time is it in Tokyo?' },
        { role: 'assistant', content: null, tool_calls: [call] },
        { role: 'tool', tool_call_id: call.id, content: '{"time":"10:42"}' },
      ],
      tools: [weatherTool, other],
    })
    expect(second.choices[0]!.finish_reason).toMatch(/stop|length/)
    expect(second.choices[0]!.message.content).toMatch(/\S/)
  })
})

describe('openai client: structured output, reasoning, logprobs, prompt arrays', () => {
  const Event = z.object({ name: z.string(), date: z.string(), attendees: z.array(z.string()) })

  it.each(CHAT_MODELS)('%s: parse() with a zod response format gives a parsed object', async (model) => {
    const { openai } = await setup()
    const res = await openai.chat.completions.parse({ model, messages: [{ role: 'user', content: 'Alice and Bob meet on Friday.' }], response_format: zodResponseFormat(Event, 'event') })
    const parsed = res.choices[0]!.message.parsed
    expect(Event.safeParse(parsed).success).toBe(true)
  })

  it.each(CHAT_MODELS)('%s: an image part reaches the model, its prompt tokens counted in the usage and the key\'s quota', async (model) => {
    // The quota's clock is fixed mid-day: both calls fall in one window whenever the test runs.
    const h = harness({ quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } })
    const { key } = await h.createKey({ name: 'images', quota: { tokensPerDay: 1_000_000 } })
    const openai = new OpenAI({ apiKey: key, baseURL: 'http://podgate/v1', fetch: h.clientFetch, maxRetries: 0 })
    const text = { type: 'text' as const, text: 'What is in this picture?' }
    const plain = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: [text] }] })
    const pictured = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: [text, { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'low' } }] }] })
    expect(pictured.usage!.prompt_tokens - plain.usage!.prompt_tokens).toBe(MEDIA_PART_TOKENS)
    expect(pictured.choices[0]!.message.content).toBe(plain.choices[0]!.message.content)
    await h.settle()
    const usage = (await (await h.fetch('/v1/usage', { headers: { authorization: `Bearer ${key}` } })).json()) as { windows: { day: { tokens: number } } }
    expect(usage.windows.day.tokens).toBe(plain.usage!.total_tokens + pictured.usage!.total_tokens)
  })

  it.each(CHAT_MODELS)('%s: json_object output is JSON', async (model) => {
    const { openai } = await setup()
    const res = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'Answer in JSON' }], response_format: { type: 'json_object' } })
    expect(() => JSON.parse(res.choices[0]!.message.content ?? '')).not.toThrow()
  })

  it.each(CHAT_MODELS)('%s: chat_template_kwargs.enable_thinking streams reasoning before the answer', async (model) => {
    const { openai } = await setup()
    const body = { model, messages: [{ role: 'user' as const, content: 'Think first' }], max_tokens: 48, stream: true as const, chat_template_kwargs: { enable_thinking: true } }
    const stream = await openai.chat.completions.create(body)
    let reasoning = ''
    let content = ''
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as { content?: string | null; reasoning?: string; reasoning_content?: string } | undefined
      reasoning += delta?.reasoning ?? delta?.reasoning_content ?? ''
      content += delta?.content ?? ''
    }
    expect(reasoning).toMatch(/\S/)
    expect(content).toMatch(/\S/)
  })

  it.each(CHAT_MODELS)('%s: logprobs with top_logprobs come back per token, in JSON and in the stream', async (model) => {
    const { openai } = await setup()
    const json = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }], logprobs: true, top_logprobs: 2, max_tokens: 8 })
    const content = json.choices[0]!.logprobs?.content ?? []
    expect(content.length).toBeGreaterThan(0)
    for (const entry of content) {
      expect(typeof entry.token).toBe('string')
      expect(entry.logprob).toBeLessThanOrEqual(0)
      expect(entry.top_logprobs).toHaveLength(2)
    }
    const stream = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }], logprobs: true, top_logprobs: 2, max_tokens: 8, stream: true })
    let streamedTokens = 0
    for await (const chunk of stream) streamedTokens += chunk.choices[0]?.logprobs?.content?.length ?? 0
    expect(streamedTokens).toBeGreaterThan(0)
  })

  it('completions: a prompt array with n=2 answers every (prompt, choice) with its own index, in JSON and in the stream', async () => {
    const { openai } = await setup()
    const json = await openai.completions.create({ model: 'chat-openai', prompt: ['Once upon', 'In a galaxy'], n: 2, max_tokens: 8 })
    expect(json.choices.map((choice) => choice.index).sort()).toEqual([0, 1, 2, 3])
    const stream = await openai.completions.create({ model: 'chat-openai', prompt: ['Once upon', 'In a galaxy'], n: 2, max_tokens: 8, stream: true })
    const texts = new Map<number, string>()
    for await (const chunk of stream) for (const choice of chunk.choices) texts.set(choice.index, (texts.get(choice.index) ?? '') + choice.text)
    expect([...texts.keys()].sort()).toEqual([0, 1, 2, 3])
    for (const text of texts.values()) expect(text).toMatch(/\S/)
  })

  it('completions: token-id prompts are accepted', async () => {
    const { openai } = await setup()
    const res = await openai.completions.create({ model: 'chat-openai', prompt: [[1, 2, 3], [4, 5]], max_tokens: 4 })
    expect(res.choices).toHaveLength(2)
  })
})

describe('openai client: embeddings', () => {
  it.each(EMBEDDING_MODELS)('%s: base64 (the client default) and float give the same vectors, deterministically', async (model) => {
    const { openai } = await setup()
    const input = ['podgate', 'runpod edge']
    const base64 = await openai.embeddings.create({ model, input })
    const float = await openai.embeddings.create({ model, input, encoding_format: 'float' })
    expect(base64.data).toHaveLength(2)
    expect(base64.data.map((d) => d.index)).toEqual([0, 1])
    for (const [i, item] of float.data.entries()) {
      expect(item.embedding.length).toBeGreaterThan(0)
      const decoded = base64.data[i]!.embedding
      expect(decoded).toHaveLength(item.embedding.length)
      decoded.forEach((value, j) => expect(value).toBeCloseTo(item.embedding[j]!, 5))
    }
    expect(float.usage.prompt_tokens).toBeGreaterThan(0)
    const again = await openai.embeddings.create({ model, input: 'podgate', encoding_format: 'float' })
    expect(again.data[0]!.embedding).toEqual(float.data[0]!.embedding)
  })

  it.each(EMBEDDING_MODELS)('%s: dimensions shortens the vector', async (model) => {
    const { openai } = await setup()
    const res = await openai.embeddings.create({ model, input: 'short', dimensions: 8, encoding_format: 'float' })
    expect(res.data[0]!.embedding).toHaveLength(8)
  })
})

describe('Vercel AI SDK', () => {
  it.each(CHAT_MODELS)('%s: a 2-step generateText tool loop calls the tool and answers from its result', async (model) => {
    const { podgate } = await setup()
    const calls: unknown[] = []
    const result = await generateText({
      model: podgate(model),
      prompt: 'What is the weather in Paris?',
      tools: {
        get_weather: tool({
          description: 'Current weather in a city',
          inputSchema: z.object({ city: z.string() }),
          execute: async (input) => {
            calls.push(input)
            return { city: input.city, temperature: 21 }
          },
        }),
      },
      stopWhen: stepCountIs(2),
      maxRetries: 0,
    })
    expect(calls).toHaveLength(1)
    expect(result.steps).toHaveLength(2)
    expect(result.steps[0]!.finishReason).toBe('tool-calls')
    expect(result.text).toMatch(/\S/)
  })

  it.each(CHAT_MODELS)('%s: streamText with tools streams the tool call', async (model) => {
    const { podgate } = await setup()
    const result = streamText({
      model: podgate(model),
      prompt: 'What is the weather in Paris?',
      tools: { get_weather: tool({ inputSchema: jsonSchema<{ city: string }>(weatherTool.function.parameters as never) }) },
      maxRetries: 0,
    })
    const toolCalls = await result.toolCalls
    expect(toolCalls).toHaveLength(1)
    expect(toolCalls[0]!.toolName).toBe('get_weather')
    expect(typeof (toolCalls[0]!.input as { city: unknown }).city).toBe('string')
    expect(await result.finishReason).toBe('tool-calls')
  })

  it.each(CHAT_MODELS)('%s: Output.object gives an object that matches the schema', async (model) => {
    const { settings } = await setup()
    const schema = z.object({ title: z.string(), tags: z.array(z.string()), year: z.number().int() })
    // With structured outputs on, the AI SDK sends response_format json_schema (vLLM supports it).
    const podgateStructured = createOpenAICompatible({ ...settings, supportsStructuredOutputs: true })
    const result = await generateText({ model: podgateStructured(model), prompt: 'A film', output: Output.object({ schema }), maxRetries: 0 })
    expect(schema.safeParse(result.output).success).toBe(true)
  })

  it.each(EMBEDDING_MODELS)('%s: embedMany through the AI SDK', async (model) => {
    const { podgate } = await setup()
    const result = await embedMany({ model: podgate.embeddingModel(model), values: ['a', 'b', 'c'], maxRetries: 0 })
    expect(result.embeddings).toHaveLength(3)
    expect(result.embeddings[0]!.length).toBeGreaterThan(0)
  })
})

describe("Runpod's URL shape: /v2/<model>/openai/v1", () => {
  it.each(CHAT_MODELS)("%s: @runpod/ai-sdk-provider generates and streams", async (model) => {
    const { h, key } = await setup()
    const runpod = createRunpod({ apiKey: key, baseURL: `http://podgate/v2/${model}/openai/v1`, fetch: h.clientFetch })
    const full = await generateText({ model: runpod(model), prompt: 'Hello', temperature: 0, maxOutputTokens: 24, maxRetries: 0 })
    expect(full.text).toMatch(/\S/)
    const streamed = streamText({ model: runpod(model), prompt: 'Hello', temperature: 0, maxOutputTokens: 24, maxRetries: 0 })
    let text = ''
    for await (const delta of streamed.textStream) text += delta
    expect(text).toBe(full.text)
    expect((await streamed.usage).outputTokens).toBe(full.usage.outputTokens)
  })

  it('the openai client at /v2/<model>/openai/v1: models, chat, completions and embeddings', async () => {
    const { h, key } = await setup()
    const at = (model: string) => new OpenAI({ apiKey: key, baseURL: `http://podgate/v2/${model}/openai/v1`, fetch: h.clientFetch, maxRetries: 0 })
    const models = await at('chat-openai').models.list()
    expect(models.data.map((m) => m.id)).toContain('chat-openai')
    const chat = await at('chat-classic').chat.completions.create({ model: 'chat-classic', messages: [{ role: 'user', content: 'Hi' }], tools: [weatherTool] })
    expect(chat.choices[0]!.finish_reason).toBe('tool_calls')
    const completion = await at('chat-current').completions.create({ model: 'chat-current', prompt: 'Once', max_tokens: 4 })
    expect(completion.choices[0]!.text).toMatch(/\S/)
    const embedding = await at(EMBEDDING_MODELS[0]!).embeddings.create({ model: EMBEDDING_MODELS[0]!, input: 'x' })
    expect(embedding.data[0]!.embedding.length).toBeGreaterThan(0)
  })

  it('a body model that is neither the alias nor its served name is a 400 naming both', async () => {
    const { h, key } = await setup()
    const res = await h.fetch('/v2/chat-openai/openai/v1/chat/completions', {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'chat-classic', messages: [{ role: 'user', content: 'Hi' }] }),
    })
    expect(res.status).toBe(400)
    const { error } = (await res.json()) as { error: { message: string; param: string } }
    expect(error.param).toBe('model')
    expect(error.message).toContain('chat-classic')
    expect(error.message).toContain('chat-openai')
  })
})

describe('Anthropic client: /v1/messages', () => {
  const anthropic = (h: Awaited<ReturnType<typeof setup>>['h'], key: string) => new Anthropic({ apiKey: key, baseURL: 'http://podgate', fetch: h.clientFetch, maxRetries: 0 })
  const params = (model: string): Anthropic.MessageCreateParamsNonStreaming => ({
    model,
    max_tokens: 24,
    system: [{ type: 'text', text: 'Be brief.' }],
    stop_sequences: ['\n\n\n'],
    metadata: { user_id: 'u1' },
    messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }, { type: 'text', text: 'Hello' }] }],
  })

  it.each(CHAT_MODELS)('%s: create and stream answer the same message (system blocks, an image, stop_sequences, metadata sent); the stream\'s usage is the JSON one', async (model) => {
    const { h, key } = await setup()
    const client = anthropic(h, key)
    const full = await client.messages.create(params(model))
    expect(full.model).toBe(model)
    expect(full.content[0]!.type).toBe('text')
    expect(full.stop_reason).toMatch(/^(end_turn|max_tokens)$/)
    // The image counts as a media part upstream (the emulator's 1,024 tokens, as vLLM counts its own).
    expect(full.usage.input_tokens).toBeGreaterThan(MEDIA_PART_TOKENS)
    const final = await client.messages.stream(params(model)).finalMessage()
    expect(final.content).toEqual(full.content)
    expect(final.stop_reason).toBe(full.stop_reason)
    expect(final.usage).toMatchObject({ input_tokens: full.usage.input_tokens, output_tokens: full.usage.output_tokens })
  })

  it.each(['chat-openai', 'chat-current'])('%s: countTokens counts what create reports as its input', async (model) => {
    const { h, key } = await setup()
    const client = anthropic(h, key)
    const { max_tokens: _, stop_sequences: __, metadata: ___, ...count } = params(model)
    const counted = await client.messages.countTokens(count)
    const created = await client.messages.create(params(model))
    expect(counted.input_tokens).toBe(created.usage.input_tokens)
  })

  it("podgate's refusals are the SDK's typed errors", async () => {
    const { h, key } = await setup()
    const client = anthropic(h, key)
    await expect(client.messages.create({ ...params('chat-openai'), model: 'nope' })).rejects.toBeInstanceOf(Anthropic.NotFoundError)
    await expect(client.messages.create({ ...params('chat-openai'), max_tokens: 20_000 })).rejects.toBeInstanceOf(Anthropic.BadRequestError)
    await expect(anthropic(h, 'pg_wrong').messages.create(params('chat-openai'))).rejects.toBeInstanceOf(Anthropic.AuthenticationError)
  })

  // Anthropic's SDK reads the request's id from `request-id` (OpenAI's from `x-request-id`): the id podgate's log lines carry.
  it('the SDK reads the request id of an answer and of an error', async () => {
    const { h, key } = await setup()
    const client = anthropic(h, key)
    const { data, response } = await client.messages.create(params('chat-openai')).withResponse()
    // Set by the SDK's response middleware, non-enumerable and not in this SDK version's types.
    const requestId = (data as { _request_id?: string | null })._request_id
    expect(requestId).toBe(response.headers.get('x-request-id'))
    expect(requestId).toMatch(/^[0-9a-f-]{36}$/)
    const refused = await client.messages.create({ ...params('chat-openai'), model: 'nope' }).catch((error: unknown) => error)
    expect((refused as InstanceType<typeof Anthropic.NotFoundError>).requestID).toMatch(/^[0-9a-f-]{36}$/)
  })
})

// Anthropic's SDK sends `anthropic-version` on every call: `models.list()` and `models.retrieve()` get its shapes.
describe('Anthropic client: /v1/models', () => {
  const anthropic = (h: Awaited<ReturnType<typeof setup>>['h'], key: string) => new Anthropic({ apiKey: key, baseURL: 'http://podgate', fetch: h.clientFetch, maxRetries: 0 })

  it('models.list pages through the models the key may use, models.retrieve answers one as listed', async () => {
    const { h } = await setup()
    const { key } = await h.createKey({ name: 'some', models: ['chat-openai', 'chat-current'] })
    const client = anthropic(h, key)
    const listed: Anthropic.ModelInfo[] = []
    for await (const model of client.models.list()) listed.push(model)
    expect(listed).toEqual([
      { type: 'model', id: 'chat-openai', display_name: 'chat-openai', created_at: '1970-01-01T00:00:00.000Z' },
      { type: 'model', id: 'chat-current', display_name: 'chat-current', created_at: '1970-01-01T00:00:00.000Z' },
    ])
    const page = await client.models.list()
    expect(page).toMatchObject({ has_more: false, first_id: 'chat-openai', last_id: 'chat-current' })
    expect(await client.models.retrieve('chat-current')).toEqual(listed[1])
    // The same key without Anthropic's header: OpenAI's shape, as before.
    expect(await (await h.fetch('/v1/models/chat-current', { headers: { authorization: `Bearer ${key}` } })).json()).toEqual({ id: 'chat-current', object: 'model', created: 0, owned_by: 'podgate' })
  })

  it("an unknown id, a model the key may not use and a wrong key are refused in Anthropic's shape, as the SDK's typed errors", async () => {
    const { h } = await setup()
    const { key } = await h.createKey({ name: 'some', models: ['chat-openai'] })
    const client = anthropic(h, key)
    const unknown = await client.models.retrieve('nope').catch((error: unknown) => error)
    expect(unknown).toBeInstanceOf(Anthropic.NotFoundError)
    expect((unknown as InstanceType<typeof Anthropic.NotFoundError>).error).toEqual({ type: 'error', error: { type: 'not_found_error', message: expect.stringContaining("'nope'") } })
    const forbidden = await client.models.retrieve('chat-classic').catch((error: unknown) => error)
    expect(forbidden).toBeInstanceOf(Anthropic.PermissionDeniedError)
    expect((forbidden as InstanceType<typeof Anthropic.PermissionDeniedError>).error).toMatchObject({ type: 'error', error: { type: 'permission_error' } })
    const wrong = await anthropic(h, 'pg_wrong').models.list().catch((error: unknown) => error)
    expect(wrong).toBeInstanceOf(Anthropic.AuthenticationError)
    expect((wrong as InstanceType<typeof Anthropic.AuthenticationError>).error).toMatchObject({ type: 'error', error: { type: 'authentication_error' } })
  })
})
