/**
 * The emulator speaks vLLM (shared/runpod-api.md §5) with no GPU: tool calls whose arguments validate
 * against the tool's schema, guided output, reasoning, logprobs, usage chunks, completions prompt
 * lists, embeddings, `openai_route` jobs on both worker generations, and the "no auto tool choice"
 * 400. Driven directly with the official `openai` client, the AI SDK and raw /runsync + /stream.
 */
import { createOpenAICompatible } from '@ai-sdk/openai-compatible'
import { generateText, Output, stepCountIs, streamText, tool } from 'ai'
import { createParser } from 'eventsource-parser'
import OpenAI from 'openai'
import { zodResponseFormat } from 'openai/helpers/zod'
import { describe, expect, it } from 'vitest'
import * as z from 'zod'
import { createRunpodEmulator, regexInstance, schemaInstance } from '../src/testing/index.ts'
import type { EmulatorOptions } from '../src/testing/index.ts'

type Json = Record<string, any>

const BASE = 'http://emulator.test'

const Address = z.object({ street: z.string(), zip: z.string().regex(/^\d{5}$/) })
/** Covers the generator's keywords: nesting, arrays, enums, nullable, integers with bounds, $ref reuse. */
const WeatherArgs = z.object({
  city: z.string().min(3),
  unit: z.enum(['celsius', 'fahrenheit']),
  days: z.number().int().min(1).max(7),
  ratio: z.number().gt(0).lt(1),
  detailed: z.boolean(),
  note: z.string().nullable(),
  tags: z.array(z.string()).min(1).max(3),
  kind: z.literal('forecast'),
  home: Address,
  work: Address.optional(),
  when: z.union([z.string().datetime(), z.number()]),
})
const weatherTool = {
  type: 'function' as const,
  function: { name: 'get_weather', description: 'Weather', parameters: z.toJSONSchema(WeatherArgs, { reused: 'ref' }) as Json },
}
const timeTool = { type: 'function' as const, function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string' } }, required: ['zone'] } } }

function setup(options: EmulatorOptions = {}) {
  const emulator = createRunpodEmulator(options)
  const fetchEmulator = ((input: RequestInfo | URL, init?: RequestInit) => emulator.fetch(new Request(input, init))) as typeof fetch
  const client = (endpoint = 'vllmopenai') =>
    new OpenAI({ apiKey: 'rp', baseURL: `${BASE}/v2/${endpoint}/openai/v1`, fetch: fetchEmulator, maxRetries: 0 })
  const post = (path: string, body: unknown) =>
    emulator.fetch(new Request(`${BASE}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }))
  /** Runs a job to its end with /runsync. */
  const runsync = async (endpoint: string, input: Json) => (await (await post(`/v2/${endpoint}/runsync`, { input })).json()) as Json
  /** Runs a job with /run and collects every /stream item. */
  const streamJob = async (endpoint: string, input: Json) => {
    const { id } = (await (await post(`/v2/${endpoint}/run`, { input })).json()) as { id: string }
    const items: unknown[] = []
    for (let i = 0; i < 100; i++) {
      const page = (await (await emulator.fetch(new Request(`${BASE}/v2/${endpoint}/stream/${id}`))).json()) as Json
      items.push(...page.stream.map((s: Json) => s.output))
      if (['COMPLETED', 'FAILED'].includes(page.status)) return { items, status: page.status as string }
    }
    throw new Error('job did not end')
  }
  return { emulator, client, post, runsync, streamJob, fetchEmulator }
}

/** The JSON payloads of an SSE text (without [DONE]). */
function ssePayloads(text: string): Json[] {
  const out: Json[] = []
  const parser = createParser({ onEvent: (e) => e.data !== '[DONE]' && out.push(JSON.parse(e.data)) })
  parser.feed(text)
  return out
}

const user = (content: string) => [{ role: 'user' as const, content }]

describe('tool calls', () => {
  it('non-stream: calls the first tool with arguments that validate against its schema ($ref, enum, nullable, nested)', async () => {
    const { client } = setup()
    const res = await client().chat.completions.create({ model: 'm', messages: user('Weather in Paris?'), tools: [weatherTool, timeTool] })
    const choice = res.choices[0]!
    expect(choice.finish_reason).toBe('tool_calls')
    expect(choice.message.content).toBeNull()
    const call = choice.message.tool_calls![0]! as Json
    expect(call.id).toMatch(/^chatcmpl-tool-[0-9a-f]{32}$/)
    expect(call.type).toBe('function')
    expect(call.function.name).toBe('get_weather')
    const args = WeatherArgs.parse(JSON.parse(call.function.arguments))
    expect(args.kind).toBe('forecast')
    expect(res.usage!.prompt_tokens).toBeGreaterThan(10) // tool definitions are part of the prompt
  })

  it('stream: a name delta (id, type, no arguments), then argument fragments, for auto; required sends the first arguments with the name, then "name": null; "tool_calls" for both', async () => {
    const { client } = setup()
    for (const tool_choice of [undefined, 'auto', 'required'] as const) {
      const stream = await client().chat.completions.create({
        model: 'm', messages: user('Weather?'), tools: [weatherTool], stream: true, ...(tool_choice ? { tool_choice } : {}),
      })
      const deltas: Json[] = []
      let finish: string | null = null
      for await (const chunk of stream) {
        const c = chunk.choices[0]!
        if (c.delta.tool_calls) deltas.push(c.delta as Json)
        finish = c.finish_reason ?? finish
      }
      expect(finish).toBe('tool_calls')
      const [first, ...rest] = deltas
      const required = tool_choice === 'required'
      // vLLM's required path (no tool parser) writes the name with the first arguments, then `"name": null`.
      expect(first).toEqual(required
        ? { tool_calls: [{ id: expect.stringMatching(/^chatcmpl-tool-/), type: 'function', index: 0, function: { name: 'get_weather', arguments: expect.any(String) } }] }
        : { content: null, tool_calls: [{ id: expect.stringMatching(/^chatcmpl-tool-/), type: 'function', index: 0, function: { name: 'get_weather' } }] })
      expect(rest.length).toBeGreaterThan(1)
      for (const d of rest) expect(d).toEqual({ tool_calls: [{ index: 0, function: { ...(required ? { name: null } : {}), arguments: expect.any(String) } }] })
      WeatherArgs.parse(JSON.parse(deltas.map((d) => d.tool_calls[0].function.arguments ?? '').join('')))
    }
  })

  it('a named tool_choice calls that tool and finishes with "stop"; "none" answers text', async () => {
    const { client } = setup()
    const named = await client().chat.completions.create({
      model: 'm', messages: user('Time?'), tools: [weatherTool, timeTool], tool_choice: { type: 'function', function: { name: 'get_time' } },
    })
    expect(named.choices[0]!.finish_reason).toBe('stop')
    const call = named.choices[0]!.message.tool_calls![0]! as Json
    expect(call.function.name).toBe('get_time')
    expect(typeof JSON.parse(call.function.arguments).zone).toBe('string')
    // vLLM's JSON message of a named or `required` choice has `content: ""` (only a parsed auto call has null).
    expect(named.choices[0]!.message.content).toBe('')
    const required = await client().chat.completions.create({ model: 'm', messages: user('Time?'), tools: [weatherTool], tool_choice: 'required' })
    expect(required.choices[0]!.message.content).toBe('')

    const none = await client().chat.completions.create({ model: 'm', messages: user('Hi'), tools: [weatherTool], tool_choice: 'none' })
    expect(none.choices[0]!.message.tool_calls).toEqual([])
    expect(none.choices[0]!.message.content!.length).toBeGreaterThan(0)
    const unknown = await client().chat.completions.create({ model: 'm', messages: user('Hi'), tools: [weatherTool], tool_choice: { type: 'function', function: { name: 'nope' } } }).catch((e: unknown) => e)
    expect(unknown).toBeInstanceOf(OpenAI.BadRequestError)
  })

  it('answers a tool result with text that mentions it', async () => {
    const { client } = setup()
    const res = await client().chat.completions.create({
      model: 'm',
      tools: [weatherTool],
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: 'sunny, 21 degrees' },
      ],
    })
    expect(res.choices[0]!.finish_reason).toBe('stop')
    expect(res.choices[0]!.message.content).toContain('sunny, 21 degrees')
  })

  it('the AI SDK runs a 2-step tool loop and a streamed tool call against the emulator', async () => {
    const { fetchEmulator } = setup()
    const provider = createOpenAICompatible({ name: 'emu', baseURL: `${BASE}/v2/vllmopenai/openai/v1`, fetch: fetchEmulator, includeUsage: true })
    const weather = tool({
      description: 'Weather',
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => `rainy in ${city}`,
    })
    const result = await generateText({ model: provider('m'), prompt: 'Weather?', tools: { weather }, stopWhen: stepCountIs(2), maxRetries: 0 })
    expect(result.steps).toHaveLength(2)
    expect(result.steps[0]!.toolCalls[0]!.toolName).toBe('weather')
    expect(result.text).toContain('rainy in')

    const streamed = streamText({ model: provider('m'), prompt: 'Weather?', tools: { weather }, maxRetries: 0 })
    const calls = await streamed.toolCalls
    expect(calls[0]!.toolName).toBe('weather')
    expect(typeof (calls[0]!.input as { city: string }).city).toBe('string')
    expect(await streamed.finishReason).toBe('tool-calls')
  })

  it('served without tool support: "auto" (or absent) tool_choice is vLLM\'s 400; a named choice still works', async () => {
    const { client, emulator, runsync, post } = setup({ endpoints: { vllmopenai: { enableAutoToolChoice: false } } })
    const res = await post('/v2/vllmopenai/openai/v1/chat/completions', { messages: user('Hi'), tools: [weatherTool] })
    expect(res.status).toBe(400)
    expect(await res.json()).toEqual({
      error: { message: '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set', type: 'BadRequestError', param: null, code: 400 },
    })
    const named = await client().chat.completions.create({ model: 'm', messages: user('Hi'), tools: [weatherTool], tool_choice: { type: 'function', function: { name: 'get_weather' } } })
    expect(named.choices[0]!.message.tool_calls).toHaveLength(1)

    // Per request, through a gateway: the directive; on the current worker the refusal is a FAILED job.
    const job = await runsync('vllmcurrent', { openai_route: '/v1/chat/completions', openai_input: { messages: user('Hi [[emulator:auto_tool_choice=0]]'), tools: [weatherTool] } })
    expect(job.status).toBe('FAILED')
    const item = job.output?.[0] ?? null
    expect(item).toBeNull() // FAILED jobs report `error`, their items go to /stream
    // The worker's error item `{"error":{"message":…,"type":"worker_error","code":null}}` ends the job, and
    // runpod-python reports str() of its error object: a Python dict's repr (backslashes doubled).
    const vllmBody = JSON.stringify({ error: { message: '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set', type: 'BadRequestError', param: null, code: 400 } })
    expect(job.error).toBe(`{'message': 'vLLM returned HTTP 400: ${vllmBody.replaceAll('\\', '\\\\')}', 'type': 'worker_error', 'code': None}`)
    const { emulator: e2, streamJob } = setup()
    const streamed = await streamJob('vllmcurrent', { openai_route: '/v1/chat/completions', openai_input: { messages: user('Hi [[emulator:auto_tool_choice=0]]'), tools: [weatherTool], stream: true } })
    expect(streamed.status).toBe('FAILED')
    expect(streamed.items).toEqual([]) // the error item is not streamed
    expect(emulator.activeJobs()).toEqual([])
    expect(e2.activeJobs()).toEqual([])
  })
})

describe('schema instances', () => {
  it('validate against assorted zod schemas (tuples, records, bounds, unions, defaults, $ref reuse)', () => {
    const Point = z.object({ x: z.number(), y: z.number() })
    const schemas: z.ZodType[] = [
      z.object({ a: z.tuple([z.string(), z.number().int(), z.boolean()]) }),
      z.object({ r: z.record(z.string(), z.number()) }),
      z.object({ n: z.number().min(0).lt(0.1), i: z.number().int().gt(3).lte(4), m: z.number().int().multipleOf(5).min(1) }),
      z.object({ s: z.string().min(30).max(40), short: z.string().max(2), code: z.string().regex(/^[A-Z]{3}-\d{2}$/) }),
      z.discriminatedUnion('kind', [z.object({ kind: z.literal('a'), v: z.string() }), z.object({ kind: z.literal('b') })]),
      z.object({ from: Point, to: Point, path: z.array(Point).min(3) }),
      z.object({ opt: z.string().optional(), def: z.number().default(3), n: z.null(), u: z.uuid(), d: z.iso.date() }),
      z.array(z.enum(['x', 'y'])).max(1),
    ]
    for (const schema of schemas) {
      for (const reused of ['inline', 'ref'] as const) {
        const instance = schemaInstance(z.toJSONSchema(schema, { reused, io: 'input' }), { words: ['alpha', 'beta'] })
        expect(() => schema.parse(instance), JSON.stringify(instance)).not.toThrow()
      }
    }
    expect(regexInstance('^[a-f0-9]{8}(x|y)?\\.json$')).toMatch(/^[a-f0-9]{8}(x|y)?\.json$/)
    // zod's `.int()` alone bounds by ±(2^53 - 1): an answer shows a plain number, not the bound.
    expect(schemaInstance(z.toJSONSchema(z.object({ year: z.number().int() })), { words: [] })).toEqual({ year: 42 })
  })
})

describe('structured output', () => {
  const Person = z.object({ name: z.string(), age: z.number().int().min(0), emails: z.array(z.string().email()), nickname: z.string().nullable() })

  it('openai parse() with a zod json_schema response format', async () => {
    const { client } = setup()
    const res = await client().chat.completions.parse({ model: 'm', messages: user('Who?'), response_format: zodResponseFormat(Person, 'person') })
    expect(Person.parse(res.choices[0]!.message.parsed)).toEqual(res.choices[0]!.message.parsed)
  })

  it('json_object, structured_outputs {json, choice, regex} and legacy guided_* on chat and completions, streamed or not', async () => {
    const { post } = setup()
    const schema = z.toJSONSchema(Person)
    const cases: Array<[Json, (text: string) => void]> = [
      [{ response_format: { type: 'json_object' } }, (t) => expect(typeof JSON.parse(t)).toBe('object')],
      [{ structured_outputs: { json: schema } }, (t) => Person.parse(JSON.parse(t))],
      [{ structured_outputs: { json: JSON.stringify(schema) } }, (t) => Person.parse(JSON.parse(t))],
      [{ structured_outputs: { choice: ['yes', 'no'] } }, (t) => expect(t).toBe('yes')],
      [{ structured_outputs: { regex: '^(ab|cd)-\\d{3}[a-z]+$' } }, (t) => expect(t).toMatch(/^(ab|cd)-\d{3}[a-z]+$/)],
      [{ guided_json: schema }, (t) => Person.parse(JSON.parse(t))],
      [{ guided_choice: ['left', 'right'] }, (t) => expect(t).toBe('left')],
    ]
    for (const [fields, check] of cases) {
      for (const stream of [false, true]) {
        const chat = await post('/v2/vllmopenai/openai/v1/chat/completions', { messages: user('Go'), stream, ...fields })
        const completion = await post('/v2/vllmopenai/openai/v1/completions', { prompt: 'Go', stream, ...fields })
        if (stream) {
          check(ssePayloads(await chat.text()).map((p) => p.choices[0]?.delta?.content ?? '').join(''))
          check(ssePayloads(await completion.text()).map((p) => p.choices[0]?.text ?? '').join(''))
        } else {
          check(((await chat.json()) as Json).choices[0].message.content)
          check(((await completion.json()) as Json).choices[0].text)
        }
      }
    }
  })

  it('the AI SDK Output.object works', async () => {
    const { fetchEmulator } = setup()
    const provider = createOpenAICompatible({ name: 'emu', baseURL: `${BASE}/v2/vllmopenai/openai/v1`, fetch: fetchEmulator, supportsStructuredOutputs: true })
    const result = await generateText({ model: provider('m'), prompt: 'Who?', output: Output.object({ schema: Person }), maxRetries: 0 })
    expect(Person.parse(result.output)).toEqual(result.output)
  })
})

describe('reasoning', () => {
  it('enable_thinking streams reasoning deltas under both keys before the content; non-stream has both fields', async () => {
    const { post } = setup()
    const body = { messages: user('Think'), chat_template_kwargs: { enable_thinking: true } }
    const payloads = ssePayloads(await (await post('/v2/vllmopenai/openai/v1/chat/completions', { ...body, stream: true })).text())
    const deltas = payloads.map((p) => p.choices[0].delta)
    const reasoning = deltas.filter((d) => 'reasoning' in d)
    expect(reasoning.length).toBeGreaterThan(0)
    for (const d of reasoning) expect(d.reasoning_content).toBe(d.reasoning)
    const firstContent = deltas.findIndex((d) => typeof d.content === 'string' && d.content !== '')
    expect(firstContent).toBeGreaterThan(deltas.lastIndexOf(reasoning.at(-1)))

    const json = (await (await post('/v2/vllmopenai/openai/v1/chat/completions', body)).json()) as Json
    const message = json.choices[0].message
    expect(message.reasoning).toBe(reasoning.map((d) => d.reasoning).join(''))
    expect(message.reasoning_content).toBe(message.reasoning)
    expect(message.content).toBe(deltas.map((d) => d.content ?? '').join(''))
    const plain = (await (await post('/v2/vllmopenai/openai/v1/chat/completions', { messages: user('Think') })).json()) as Json
    expect(plain.choices[0].message.reasoning).toBeNull()
    const hidden = (await (await post('/v2/vllmopenai/openai/v1/chat/completions', { ...body, include_reasoning: false })).json()) as Json
    expect(hidden.choices[0].message.reasoning).toBeNull()
  })

  it('reasoningFields picks the key per endpoint', async () => {
    const { post } = setup({ endpoints: { newvllm: { reasoningFields: ['reasoning'] } } })
    const payloads = ssePayloads(await (await post('/v2/newvllm/openai/v1/chat/completions', { messages: user('Think'), stream: true, chat_template_kwargs: { enable_thinking: true } })).text())
    const deltas = payloads.map((p) => p.choices[0].delta)
    expect(deltas.some((d) => 'reasoning' in d)).toBe(true)
    expect(deltas.some((d) => 'reasoning_content' in d)).toBe(false)
  })
})

describe('logprobs', () => {
  it('chat: per chunk content entries with top_logprobs; the same in the JSON body', async () => {
    const { post } = setup()
    const body = { messages: user('Hi'), logprobs: true, top_logprobs: 3 }
    const payloads = ssePayloads(await (await post('/v2/vllmopenai/openai/v1/chat/completions', { ...body, stream: true })).text())
    const entries = payloads.filter((p) => p.choices[0].logprobs).map((p) => p.choices[0].logprobs.content)
    expect(entries.length).toBeGreaterThan(0)
    for (const [entry] of entries) {
      expect(entry).toMatchObject({ token: expect.any(String), logprob: expect.any(Number), bytes: expect.any(Array) })
      expect(entry.top_logprobs).toHaveLength(3)
      expect(entry.top_logprobs[0].token).toBe(entry.token)
      expect(new TextDecoder().decode(new Uint8Array(entry.bytes))).toBe(entry.token)
    }
    const json = (await (await post('/v2/vllmopenai/openai/v1/chat/completions', body)).json()) as Json
    expect(json.choices[0].logprobs.content).toEqual(entries.map(([e]) => e))
  })

  it('completions: logprobs int gives tokens, token_logprobs, top_logprobs, text_offset; prompt_logprobs when asked', async () => {
    const { client } = setup()
    const res = (await client().completions.create({ model: 'm', prompt: 'one two three', logprobs: 2, prompt_logprobs: 1 } as any)) as Json
    const choice = res.choices[0]
    const lp = choice.logprobs
    expect(lp.tokens.join('')).toBe(choice.text)
    expect(lp.token_logprobs).toHaveLength(lp.tokens.length)
    expect(Object.keys(lp.top_logprobs[0])).toHaveLength(2)
    expect(lp.text_offset[0]).toBe(0)
    expect(lp.text_offset[1]).toBe(lp.tokens[0].length)
    expect(choice.prompt_logprobs).toHaveLength(res.usage.prompt_tokens)
    expect(choice.prompt_logprobs[0]).toBeNull()
    // Keyed by token id; the prompt's own token has rank 1, plus `prompt_logprobs` alternatives.
    const ranked = Object.values(choice.prompt_logprobs[1] as Record<string, Json>)
    expect(ranked).toHaveLength(2)
    expect(ranked.find((r) => r.rank === 1)).toMatchObject({ logprob: expect.any(Number), decoded_token: 'two' })
    // logprobs 0: vLLM still returns the sampled token's logprob, and its top_logprobs entry holds that token.
    const sampledOnly = (await client().completions.create({ model: 'm', prompt: 'one two three', logprobs: 0 })).choices[0]!.logprobs!
    expect(sampledOnly.top_logprobs![0]).toEqual({ [sampledOnly.tokens![0]!]: sampledOnly.token_logprobs![0] })
  })

  it('refuses more than MAX_LOGPROBS (20) and prompt_logprobs in a stream, like vLLM', async () => {
    const { post } = setup()
    const tooMany = await post('/v2/vllmopenai/openai/v1/chat/completions', { messages: user('Hi'), logprobs: true, top_logprobs: 21 })
    expect(tooMany.status).toBe(400)
    expect(((await tooMany.json()) as Json).error.message).toBe('Requested sample logprobs of 21, which is greater than max allowed: 20')
    const streamed = await post('/v2/vllmopenai/openai/v1/chat/completions', { messages: user('Hi'), stream: true, prompt_logprobs: 1 })
    expect(streamed.status).toBe(400)
  })
})

describe('usage and completions', () => {
  it('include_usage adds a usage chunk; continuous_usage_stats puts usage on every chunk', async () => {
    const { post } = setup()
    const final = ssePayloads(await (await post('/v2/vllmopenai/openai/v1/chat/completions', { messages: user('Hi'), stream: true, stream_options: { include_usage: true } })).text())
    expect(final.filter((p) => p.usage)).toHaveLength(1)
    expect(final.at(-1)).toMatchObject({ choices: [], usage: { prompt_tokens: expect.any(Number) } })
    const every = ssePayloads(await (await post('/v2/vllmopenai/openai/v1/chat/completions', { messages: user('Hi'), stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } })).text())
    expect(every.every((p) => p.usage)).toBe(true)
    const counts = every.slice(0, -1).map((p) => p.usage.completion_tokens)
    expect(counts).toEqual([...counts].sort((a, b) => a - b))
    expect(every.at(-2)!.usage).toEqual(every.at(-1)!.usage)
    // Completions with a prompt list: each chunk counts its own prompt (vLLM's num_prompt_tokens[prompt_idx]); the final chunk sums them.
    const listed = ssePayloads(await (await post('/v2/vllmopenai/openai/v1/completions', { prompt: ['a b', 'c d e'], max_tokens: 3, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true } })).text())
    const promptOf = (index: number) => new Set(listed.filter((p) => p.choices[0]?.index === index).map((p) => p.usage.prompt_tokens))
    expect([...promptOf(0)]).toEqual([2])
    expect([...promptOf(1)]).toEqual([3])
    expect(listed.at(-1)!.usage.prompt_tokens).toBe(5)
  })

  it('prompt string[] / int[] / int[][] with n > 1: choices keep their index, streamed or not; echo prepends the prompt', async () => {
    const { client, post } = setup()
    const list = await client().completions.create({ model: 'm', prompt: ['a b', 'c d'], n: 2 })
    expect(list.choices.map((c) => c.index)).toEqual([0, 1, 2, 3])
    const ids = await client().completions.create({ model: 'm', prompt: [1, 2, 3] })
    expect(ids.usage!.prompt_tokens).toBe(3)
    const idLists = await client().completions.create({ model: 'm', prompt: [[1, 2], [3, 4, 5]] })
    expect(idLists.choices).toHaveLength(2)
    expect(idLists.usage!.prompt_tokens).toBe(5)

    const payloads = ssePayloads(await (await post('/v2/vllmopenai/openai/v1/completions', { prompt: ['a b', 'c d'], n: 2, stream: true })).text())
    for (const index of [0, 1, 2, 3]) {
      expect(payloads.filter((p) => p.choices[0].index === index).map((p) => p.choices[0].text).join('')).toBe(list.choices[index]!.text)
    }
    const embeds = (await (await post('/v2/vllmopenai/openai/v1/completions', { prompt_embeds: ['AAAA', 'BBBB'] })).json()) as Json
    expect(embeds.choices.map((c: Json) => c.index)).toEqual([0, 1])
    const echoed = await client().completions.create({ model: 'm', prompt: 'say this', echo: true })
    expect(echoed.choices[0]!.text.startsWith('say this')).toBe(true)
  })

  it('completions without max_tokens stop at vLLM\'s default of 16 (null: no cap); chat has no default; the shorthand takes the route\'s default on the current worker, 100 on the classic one', async () => {
    const { client, post, runsync } = setup()
    const long = '[[emulator:tokens=120]] Once'
    const tokensOf = (job: Json) => job.output[0].usage.completion_tokens ?? job.output[0].usage.output
    const text = await client().completions.create({ model: 'm', prompt: long })
    expect(text.usage!.completion_tokens).toBe(16)
    expect(text.choices[0]!.finish_reason).toBe('length')
    const streamed = ssePayloads(await (await post('/v2/vllmopenai/openai/v1/completions', { prompt: long, stream: true })).text())
    expect(streamed.at(-1)!.choices[0].finish_reason).toBe('length')
    expect(streamed).toHaveLength(16)
    const uncapped = (await (await post('/v2/vllmopenai/openai/v1/completions', { prompt: long, max_tokens: null })).json()) as Json
    expect(uncapped.usage.completion_tokens).toBe(120)
    const chat = await client().chat.completions.create({ model: 'm', messages: user(long) })
    expect(chat.usage!.completion_tokens).toBe(120)
    expect(tokensOf(await runsync('vllmcurrent', { openai_route: '/v1/completions', openai_input: { prompt: long } }))).toBe(16)
    // worker-vllm >= v2.24 posts {...sampling_params, stream} to vLLM's completions (prompt) or chat (messages) route.
    expect(tokensOf(await runsync('vllmcurrent', { prompt: long }))).toBe(16)
    expect(tokensOf(await runsync('vllmcurrent', { messages: user(long) }))).toBe(120)
    expect(tokensOf(await runsync('vllmclassic', { prompt: long }))).toBe(100)
    expect(tokensOf(await runsync('vllmclassic', { messages: user(long) }))).toBe(100)
    expect((await runsync('vllmcurrent', { prompt: long, sampling_params: { min_tokens: 20 } })).error).toContain('min_tokens must be less than or equal to max_tokens=16, got 20.')
  })
})

describe('embeddings', () => {
  const decode = (b64: string) => {
    const bytes = Uint8Array.from(atob(b64), (ch) => ch.charCodeAt(0))
    return Array.from({ length: bytes.length / 4 }, (_, i) => new DataView(bytes.buffer).getFloat32(i * 4, true))
  }

  it('float and base64 (little-endian float32) give the same deterministic unit vectors; dimensions; token inputs', async () => {
    const { post, client } = setup()
    const float = (await (await post('/v2/vllmopenai/openai/v1/embeddings', { input: ['hello', 'world'], encoding_format: 'float' })).json()) as Json
    expect(float.object).toBe('list')
    expect(float.data.map((d: Json) => d.index)).toEqual([0, 1])
    expect(float.data[0].embedding).toHaveLength(384)
    expect(Math.hypot(...float.data[0].embedding)).toBeCloseTo(1, 5)
    expect(float.usage).toEqual({ prompt_tokens: 2, total_tokens: 2, completion_tokens: 0, prompt_tokens_details: null })
    const b64 = (await (await post('/v2/vllmopenai/openai/v1/embeddings', { input: ['hello', 'world'], encoding_format: 'base64' })).json()) as Json
    expect(decode(b64.data[0].embedding)).toEqual(float.data[0].embedding)
    expect(decode(b64.data[1].embedding)).toEqual(float.data[1].embedding)

    // The openai client asks for base64 and decodes it itself.
    const viaClient = await client().embeddings.create({ model: 'm', input: 'hello' })
    expect(viaClient.data[0]!.embedding).toEqual(float.data[0].embedding)
    const small = await client().embeddings.create({ model: 'm', input: 'hello', dimensions: 8, encoding_format: 'float' })
    expect(small.data[0]!.embedding).toHaveLength(8)
    expect(Math.hypot(...small.data[0]!.embedding)).toBeCloseTo(1, 5)
    const tokens = await client().embeddings.create({ model: 'm', input: [[1, 2, 3], [4]], encoding_format: 'float' })
    expect(tokens.data).toHaveLength(2)
    expect(tokens.usage.prompt_tokens).toBe(4)
  })

  it('openai_route /v1/embeddings: the JSON once on the current worker, 400 "Invalid route" on the classic one', async () => {
    const { runsync, post } = setup()
    const current = await runsync('vllmcurrent', { openai_route: '/v1/embeddings', openai_input: { input: 'hello', encoding_format: 'float' } })
    expect(current.status).toBe('COMPLETED')
    const direct = (await (await post('/v2/vllmopenai/openai/v1/embeddings', { input: 'hello' })).json()) as Json
    expect(current.output).toHaveLength(1)
    expect(current.output[0].data[0].embedding).toEqual(direct.data[0].embedding)

    const { streamJob } = setup()
    const classic = await streamJob('vllmclassic', { openai_route: '/v1/embeddings', openai_input: { input: 'hello' } })
    expect(classic.status).toBe('FAILED')
    expect(classic.items).toEqual([])
    expect((await setup().runsync('vllmclassic', { openai_route: '/v1/embeddings', openai_input: { input: 'hello' } })).error).toBe("{'message': 'Invalid route', 'type': 'BadRequestError', 'param': None, 'code': 400}")
  })
})

describe('openai_route jobs and request recording', () => {
  const input = { openai_route: '/v1/chat/completions', openai_input: { messages: user('Weather?'), tools: [weatherTool], stream: true, logprobs: true } }

  it('current worker: verbatim vLLM SSE cut at byte boundaries across items; classic: whole-SSE string items', async () => {
    const { streamJob, post } = setup()
    const direct = await (await post('/v2/vllmopenai/openai/v1/chat/completions', input.openai_input)).text()
    const current = await streamJob('vllmcurrent', input)
    expect(current.status).toBe('COMPLETED')
    expect(current.items.every((i) => typeof i === 'string')).toBe(true)
    const text = (current.items as string[]).join('')
    const strip = (payloads: Json[]) => payloads.map(({ id: _id, created: _c, ...rest }) => JSON.stringify(rest).replace(/chatcmpl-tool-[0-9a-f]+/g, 'ID'))
    expect(strip(ssePayloads(text))).toEqual(strip(ssePayloads(direct)))
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true)

    const classic = await streamJob('vllmclassic', input)
    expect(classic.status).toBe('COMPLETED')
    for (const item of classic.items as string[]) expect(item).toMatch(/^(data: [^\n]+\n\n)+$/)
    expect(strip(ssePayloads((classic.items as string[]).join('')))).toEqual(strip(ssePayloads(direct)))
  })

  it('non-streamed openai_route answers the OpenAI JSON once; classic refuses routes it does not serve', async () => {
    const { runsync } = setup()
    const job = await runsync('vllmcurrent', { openai_route: '/v1/chat/completions', openai_input: { messages: user('Hi'), response_format: { type: 'json_object' } } })
    expect(job.output).toHaveLength(1)
    expect(job.output[0].object).toBe('chat.completion')
    expect(typeof JSON.parse(job.output[0].choices[0].message.content)).toBe('object')
    const classic = await runsync('vllmclassic', { openai_route: '/v1/responses', openai_input: {} })
    expect(classic.status).toBe('FAILED')
  })

  it('classic native input: a sampling param current vLLM\'s SamplingParams lacks fails the job (worker-vllm <= v2.23 builds SamplingParams(**sampling_params)); the current worker posts it to vLLM, which ignores it', async () => {
    const { runsync } = setup()
    for (const extra of [{ best_of: 2 }, { use_beam_search: true }, { length_penalty: 0.8 }, { early_stopping: true }, { truncate_prompt_tokens: 8 }, { some_future_param: 1 }]) {
      const input = { messages: user('Hi'), sampling_params: { max_tokens: 4, ...extra } }
      const classic = await runsync('vllmclassic', input)
      expect(classic.status).toBe('FAILED')
      expect(classic.error).toBe(`Unexpected keyword argument '${Object.keys(extra)[0]}'`)
      expect((await runsync('vllmcurrent', input)).status).toBe('COMPLETED')
    }
    expect((await runsync('vllmclassic', { messages: user('Hi'), sampling_params: { max_tokens: 4, n: 2, seed: 1, logprobs: 1, logit_bias: { 5: 1 } } })).status).toBe('COMPLETED')
  })

  it('SamplingParams\' cross-field checks: greedy sampling with n > 1, min_tokens past max_tokens; the classic worker fails the job with the text, vLLM answers 400', async () => {
    const { runsync, client } = setup()
    const cases = [
      [{ temperature: 0, n: 2, max_tokens: 4 }, 'n must be 1 when using greedy sampling, got 2.'],
      [{ min_tokens: 9, max_tokens: 4 }, 'min_tokens must be less than or equal to max_tokens=4, got 9.'],
    ] as const
    for (const [params, message] of cases) {
      const classic = await runsync('vllmclassic', { messages: user('Hi'), sampling_params: params })
      expect(classic).toMatchObject({ status: 'FAILED', error: message })
      const current = await runsync('vllmcurrent', { prompt: 'Once', sampling_params: params })
      expect(current.status).toBe('FAILED')
      expect(current.error).toContain(`vLLM returned HTTP 400: `)
      expect(current.error).toContain(message)
      await expect(client().chat.completions.create({ model: 'm', messages: user('Hi'), ...params })).rejects.toMatchObject({ status: 400, message: expect.stringContaining(message) })
    }
    expect((await runsync('vllmclassic', { messages: user('Hi'), sampling_params: { min_tokens: 101 } })).error).toBe('min_tokens must be less than or equal to max_tokens=100, got 101.')
  })

  it('current worker: routes a job as handler.py does (openai_input alone is chat, a bare openai_route a GET, route + body + method any call); a route or method vLLM lacks is FastAPI\'s 404 / 405', async () => {
    const { runsync } = setup()
    const chat = await runsync('vllmcurrent', { openai_input: { messages: user('Hi') } })
    expect(chat).toMatchObject({ status: 'COMPLETED', output: [{ object: 'chat.completion' }] })
    const generic = await runsync('vllmcurrent', { route: '/v1/completions', body: { prompt: 'Once', max_tokens: 3 } })
    expect(generic).toMatchObject({ status: 'COMPLETED', output: [{ object: 'text_completion', usage: { completion_tokens: 3 } }] })
    expect((await runsync('vllmcurrent', { route: '/v1/models' })).output[0].object).toBe('list')
    // An empty openai_input is falsy in Python: the route is fetched with GET.
    expect((await runsync('vllmcurrent', { openai_route: '/v1/models', openai_input: {} })).output[0].object).toBe('list')
    const wrongMethod = await runsync('vllmcurrent', { openai_route: '/v1/chat/completions' })
    expect(wrongMethod).toMatchObject({ status: 'FAILED', error: `{'message': 'vLLM returned HTTP 405: {"detail":"Method Not Allowed"}', 'type': 'worker_error', 'code': None}` })
    expect((await runsync('vllmcurrent', { openai_route: '/v1/models', openai_input: { x: 1 } })).error).toContain('vLLM returned HTTP 405: {"detail":"Method Not Allowed"}')
    const missing = await runsync('vllmcurrent', { openai_route: '/v1/nothing', openai_input: { x: 1 } })
    expect(missing.error).toBe(`{'message': 'vLLM returned HTTP 404: {"detail":"Not Found"}', 'type': 'worker_error', 'code': None}`)
    const empty = await runsync('vllmcurrent', { sampling_params: { max_tokens: 3 } })
    expect(empty.error).toBe("{'message': 'Job input must contain one of: openai_input (+openai_route), route (+body), or prompt/messages.', 'type': 'worker_error', 'code': None}")
  })

  it('n and max_tokens: SamplingParams\' lower bounds in its words, and no upper bound on n', async () => {
    const { runsync, client } = setup()
    const many = await client().chat.completions.create({ model: 'm', messages: user('Hi'), n: 65, max_tokens: 2 })
    expect(many.choices).toHaveLength(65)
    for (const [params, message] of [[{ n: 0 }, 'n must be at least 1, got 0.'], [{ max_tokens: 0 }, 'max_tokens must be at least 1, got 0.']] as const) {
      await expect(client().chat.completions.create({ model: 'm', messages: user('Hi'), ...params })).rejects.toMatchObject({ status: 400, message: expect.stringContaining(message) })
      expect(await runsync('vllmclassic', { messages: user('Hi'), sampling_params: params })).toMatchObject({ status: 'FAILED', error: message })
      expect((await runsync('vllmcurrent', { prompt: 'Once', sampling_params: params })).error).toContain(`vLLM returned HTTP 400: {"error":{"message":"${message}"`)
    }
  })

  it('stream_options without stream: true is vLLM\'s 400 on chat and completions; an empty one is served', async () => {
    const { post, runsync } = setup()
    const message = 'Stream options can only be defined when `stream=True`.'
    for (const [route, body] of [['chat/completions', { messages: user('Hi') }], ['completions', { prompt: 'Once' }]] as const) {
      const refused = await post(`/v2/vllmopenai/openai/v1/${route}`, { ...body, stream_options: { include_usage: true } })
      expect(refused.status).toBe(400)
      expect(await refused.json()).toEqual({ error: { message, type: 'BadRequestError', param: null, code: 400 } })
      expect((await post(`/v2/vllmopenai/openai/v1/${route}`, { ...body, stream: false, stream_options: {} })).status).toBe(200)
    }
    const job = await runsync('vllmcurrent', { openai_route: '/v1/chat/completions', openai_input: { messages: user('Hi'), stream_options: { include_usage: true } } })
    expect(job.error).toContain(`vLLM returned HTTP 400: {"error":{"message":"${message}"`)
  })

  it('completions refuse what vLLM\'s completions route does not serve: suffix, an empty prompt, echo with prompt_embeds', async () => {
    const { post } = setup()
    for (const [body, message] of [
      [{ prompt: 'def f(', suffix: 'return x' }, 'suffix is not currently supported'],
      [{ prompt: '' }, 'Either prompt or prompt_embeds must be provided and non-empty.'],
      [{ prompt_embeds: 'AAAA', echo: true }, 'Echo is unsupported with prompt embeds.'],
    ] as const) {
      const res = await post('/v2/vllmopenai/openai/v1/completions', body)
      expect(res.status).toBe(400)
      expect(((await res.json()) as Json).error.message).toBe(message)
    }
  })

  it('chat: continue_final_message with add_generation_prompt both sent true is vLLM\'s 400; either alone is served', async () => {
    const { post } = setup()
    const messages = [...user('Hi'), { role: 'assistant', content: 'Hello' }]
    const both = await post('/v2/vllmopenai/openai/v1/chat/completions', { messages, continue_final_message: true, add_generation_prompt: true })
    expect(both.status).toBe(400)
    expect(((await both.json()) as Json).error.message).toBe('Cannot set both `continue_final_message` and `add_generation_prompt` to True.')
    // The validator reads the body as sent: add_generation_prompt's default (true) does not count.
    expect((await post('/v2/vllmopenai/openai/v1/chat/completions', { messages, continue_final_message: true })).status).toBe(200)
  })

  it('/v1/messages jobs: the current worker wraps vLLM\'s refusal in Anthropic\'s shape; the classic worker\'s engine.py words its own', async () => {
    const { runsync } = setup({ endpoints: { namedclassic: { servedModelName: 'served' } } })
    const tools = [{ name: 'get_time', input_schema: { type: 'object' } }]
    const message = (content: string) => ({ model: 'm', max_tokens: 8, messages: user(content), tools })
    const current = await runsync('vllmcurrent', { openai_route: '/v1/messages', openai_input: message('Hi [[emulator:auto_tool_choice=0]]') })
    expect(current.error).toContain('vLLM returned HTTP 400: {"type":"error","error":{"type":"invalid_request_error","message":')
    expect(current.error).toContain('tool choice requires --enable-auto-tool-choice')
    // worker-vllm <= v2.23: a body AnthropicMessagesRequest refuses is "Invalid request format"; an ErrorResponse
    // from vLLM is read with getattr(response, "type"/"message", default), which ErrorResponse lacks.
    expect((await runsync('vllmclassic', { openai_route: '/v1/messages', openai_input: { model: 'm', messages: [] } })).error).toBe("{'type': 'invalid_request_error', 'message': 'Invalid request format'}")
    for (const [endpoint, content] of [['vllmclassic', 'Hi [[emulator:auto_tool_choice=0]]'], ['namedclassic', 'Hi']] as const) {
      expect((await runsync(endpoint, { openai_route: '/v1/messages', openai_input: message(content) })).error).toBe("{'type': 'internal_error', 'message': 'Unknown error'}")
    }
    // Its Responses handler answers a body ResponsesRequest refuses with its own 400 text.
    expect((await runsync('vllmclassic', { openai_route: '/v1/responses', openai_input: { model: 'm' } })).error).toBe("{'message': 'Invalid request format', 'type': 'BadRequestError', 'param': None, 'code': 400}")
  })

  it('a stop string that ends the answer is its stop_reason (null when the answer ends by itself), streamed or not', async () => {
    const { client, post } = setup()
    const plain = await client().chat.completions.create({ model: 'm', messages: user('Tell me'), max_tokens: 50 })
    expect((plain.choices[0] as Json).stop_reason).toBeNull()
    for (const [route, body] of [['chat/completions', { messages: user('Tell me') }], ['completions', { prompt: 'Tell me' }]] as const) {
      const first = (await (await post(`/v2/vllmopenai/openai/v1/${route}`, { ...body, max_tokens: 50 })).json()) as Json
      const word = (first.choices[0].message?.content ?? first.choices[0].text).split(' ')[3]
      const json = (await (await post(`/v2/vllmopenai/openai/v1/${route}`, { ...body, max_tokens: 50, stop: ['no such text', word] })).json()) as Json
      expect(json.choices[0]).toMatchObject({ finish_reason: 'stop', stop_reason: word })
      const streamed = ssePayloads(await (await post(`/v2/vllmopenai/openai/v1/${route}`, { ...body, max_tokens: 50, stop: word, stream: true })).text())
      expect(streamed.at(-1)!.choices[0]).toMatchObject({ finish_reason: 'stop', stop_reason: word })
    }
  })

  it('unknown fields are accepted; the last request body of each endpoint is recorded exactly', async () => {
    const { client, emulator, post } = setup()
    const body = { model: 'm', messages: user('Hi'), some_future_field: { nested: [1, 'x'] }, top_k: 5, vllm_xargs: { a: 1 } }
    const res = await post('/v2/vllmopenai/openai/v1/chat/completions', body)
    expect(res.status).toBe(200)
    expect(emulator.lastRequest('vllmopenai')).toMatchObject({ op: 'openai', path: '/v2/vllmopenai/openai/v1/chat/completions', body })
    await client('vllmcurrent').models.list()
    await post('/v2/vllmcurrent/run', { input: { openai_route: '/v1/completions', openai_input: { prompt: 'x', unknown: true } } })
    expect(emulator.lastRequest('vllmcurrent')?.body).toEqual({ input: { openai_route: '/v1/completions', openai_input: { prompt: 'x', unknown: true } } })
    const viaControl = (await (await emulator.fetch(new Request(`${BASE}/__emulator/last-request/vllmopenai`))).json()) as Json
    expect(viaControl.body).toEqual(body)
  })
})
