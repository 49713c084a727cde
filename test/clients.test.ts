/**
 * Real client software against podgate in workerd: the Vercel AI SDK (`ai` + `@ai-sdk/openai-compatible`)
 * on every upstream shape, and the parts of the official `openai` client not covered by
 * openai-surface.test.ts / errors.test.ts (error fields, errors inside a stream, permission errors).
 */
import { createOpenAICompatible } from '@ai-sdk/openai-compatible'
import { APICallError, generateText, streamText } from 'ai'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { createRunpodEmulator } from '../src/testing/index.ts'
import { authed, harness, MODEL_NAMES, RUNPOD_KEY } from './helpers.ts'

async function setup(keyBody?: Record<string, unknown>, overrides: Parameters<typeof harness>[0] = {}) {
  const h = harness(overrides)
  const { key } = await h.createKey(keyBody)
  // The README's AI SDK snippet, with the test's in-process fetch.
  const podgate = createOpenAICompatible({ name: 'podgate', baseURL: 'http://podgate/v1', apiKey: key, includeUsage: true, fetch: h.clientFetch })
  const openai = new OpenAI({ apiKey: key, baseURL: 'http://podgate/v1', fetch: h.clientFetch, maxRetries: 0 })
  return { h, key, podgate, openai }
}

describe('Vercel AI SDK', () => {
  it.each(MODEL_NAMES)('%s: generateText and streamText give the same text and usage', async (model) => {
    // Cache off: the second, identical request must stream from upstream, not replay the first answer.
    const { podgate, h } = await setup(undefined, { cache: { enabled: false } })
    const prompt = 'Explain cold starts'
    const full = await generateText({ model: podgate(model), prompt, temperature: 0, maxOutputTokens: 48, maxRetries: 0 })
    expect(full.text.length).toBeGreaterThan(0)
    expect(full.finishReason).toMatch(/stop|length/)
    expect(full.usage.inputTokens).toBeGreaterThan(0)
    expect(full.usage.outputTokens).toBeGreaterThan(0)

    const streamed = streamText({ model: podgate(model), prompt, temperature: 0, maxOutputTokens: 48, maxRetries: 0 })
    const parts: string[] = []
    for await (const delta of streamed.textStream) parts.push(delta)
    expect(parts.length).toBeGreaterThan(1)
    expect(parts.join('')).toBe(full.text)
    expect(await streamed.finishReason).toBe(full.finishReason)
    const usage = await streamed.usage
    // A current worker's shorthand stream carries no usage (worker-vllm asks vLLM for none): podgate sends none, not a count of its own.
    const reported = model === 'chat-current' ? { inputTokens: undefined, outputTokens: undefined } : full.usage
    expect(usage.inputTokens).toBe(reported.inputTokens)
    expect(usage.outputTokens).toBe(reported.outputTokens)
    await h.settle()
    expect(h.emulator.activeJobs()).toEqual([])
  })

  it('with the cache on (the default), a repeated request replays the same text and usage through streamText', async () => {
    const { podgate, h } = await setup()
    const ask = { model: podgate('chat-classic'), prompt: 'Cache me', temperature: 0, maxOutputTokens: 32, maxRetries: 0 }
    const first = await generateText(ask)
    const replay = streamText(ask)
    let text = ''
    for await (const delta of replay.textStream) text += delta
    expect(text).toBe(first.text)
    expect((await replay.usage).outputTokens).toBe(first.usage.outputTokens)
    expect(h.emulator.calls.filter((call) => call.op === 'runsync' || call.op === 'run')).toHaveLength(1)
  })

  it('a system prompt and a multi-turn history reach the model', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const upstreamBodies: string[] = []
    const h = harness({
      fetch: async (input, init) => {
        const request = new Request(input, init)
        upstreamBodies.push(await request.clone().text())
        return emulator.fetch(request)
      },
    }, emulator)
    const { key } = await h.createKey()
    const podgate = createOpenAICompatible({ name: 'podgate', baseURL: 'http://podgate/v1', apiKey: key, fetch: h.clientFetch })
    const result = await generateText({
      model: podgate('chat-current'),
      system: 'You are terse.',
      messages: [
        { role: 'user', content: 'first' },
        { role: 'assistant', content: 'ok' },
        { role: 'user', content: 'second' },
      ],
      maxOutputTokens: 16,
      maxRetries: 0,
    })
    expect(result.text.length).toBeGreaterThan(0)
    const upstream = JSON.parse(upstreamBodies.filter((body) => body.includes('"input"')).at(-1) ?? '{}') as { input?: { messages?: { role: string; content: string }[] } }
    expect(upstream.input?.messages?.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'user'])
    expect(upstream.input?.messages?.[0]?.content).toBe('You are terse.')
  })

  it('podgate errors surface as APICallError with the status and OpenAI error body', async () => {
    const { podgate } = await setup({ name: 'one-model', models: ['chat-classic'] })
    const call = (model: string) => generateText({ model: podgate(model), prompt: 'x', maxRetries: 0 })
    const denied = await call('chat-openai').catch((e: unknown) => e)
    expect(APICallError.isInstance(denied)).toBe(true)
    expect((denied as APICallError).statusCode).toBe(403)
    expect((denied as APICallError).responseBody).toContain('permission_denied')
    const missing = await call('no-such-model').catch((e: unknown) => e)
    expect((missing as APICallError).statusCode).toBe(404)

    const badKey = createOpenAICompatible({ name: 'podgate', baseURL: 'http://podgate/v1', apiKey: 'pg_sk_wrong', fetch: (await setup()).h.clientFetch })
    const unauthorized = await generateText({ model: badKey('chat-openai'), prompt: 'x', maxRetries: 0 }).catch((e: unknown) => e)
    expect((unauthorized as APICallError).statusCode).toBe(401)
  })

  it('a stream that breaks upstream is an error in streamText, not a short answer', async () => {
    const { podgate } = await setup()
    const errors: unknown[] = []
    const result = streamText({
      model: podgate('chat-current'),
      prompt: 'x [[emulator:fault=mid_stream,after=3,tokens=20]]',
      maxRetries: 0,
      onError: ({ error }) => void errors.push(error),
    })
    let text = ''
    for await (const part of result.fullStream) if (part.type === 'text-delta') text += part.text
    expect(text.length).toBeGreaterThan(0)
    expect(errors.length).toBe(1)
    expect(JSON.stringify(errors[0])).toContain('upstream_error')
  })
})

describe('openai client: what other files do not cover', () => {
  it('APIError carries podgate\'s code, type and param, and the request id header', async () => {
    const { openai } = await setup()
    const err = await openai.chat.completions.create({ model: 'chat-openai', messages: [{ role: 'user', content: 'x' }], temperature: -1 }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.BadRequestError)
    const apiError = err as InstanceType<typeof OpenAI.APIError>
    expect(apiError.status).toBe(400)
    expect(apiError.code).toBe('invalid_request')
    expect(apiError.type).toBe('invalid_request_error')
    expect(apiError.param).toBe('temperature')
    expect(apiError.headers?.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/)
  })

  it('a scope violation is PermissionDeniedError (403)', async () => {
    const { openai } = await setup({ name: 'scoped', models: ['chat-classic'] })
    await expect(openai.chat.completions.create({ model: 'chat-current', messages: [{ role: 'user', content: 'x' }] })).rejects.toBeInstanceOf(OpenAI.PermissionDeniedError)
  })

  it("models.retrieve answers the list's model object; 404 model_not_found and 403 as a call naming the model", async () => {
    const { h, key, openai } = await setup({ name: 'scoped', models: ['chat-classic'] })
    const [listed] = (await openai.models.list()).data
    expect(await openai.models.retrieve('chat-classic')).toEqual(listed)
    await expect(openai.models.retrieve('chat-current')).rejects.toBeInstanceOf(OpenAI.PermissionDeniedError)
    const missing = (await openai.models.retrieve('nope').catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError)
    expect([missing.code, missing.param]).toEqual(['model_not_found', 'model'])
    // An id with a slash, escaped (this SDK) or not (clients that send it raw): no such alias, not "no route".
    for (const path of ['/v1/models/meta-llama/Llama-3.1-8B', '/v1/models/meta-llama%2FLlama-3.1-8B']) {
      const res = await h.fetch(path, authed(key))
      expect(res.status, path).toBe(404)
      const { error } = (await res.json()) as { error: { code: string; param: string; message: string } }
      expect(error, path).toMatchObject({ code: 'model_not_found', param: 'model' })
      expect(error.message).toContain("'meta-llama/Llama-3.1-8B'")
    }
    // The list's auth and CORS.
    expect((await h.fetch('/v1/models/chat-classic')).status).toBe(401)
    const page = { headers: { authorization: `Bearer ${key}`, origin: 'https://app.example' } }
    const [one, all] = await Promise.all([h.fetch('/v1/models/chat-classic', page), h.fetch('/v1/models', page)])
    expect(one.headers.get('access-control-allow-origin')).toBe(all.headers.get('access-control-allow-origin'))
  })

  it('upstream failures are InternalServerError (502) and RateLimitError (429)', async () => {
    const { openai } = await setup()
    const failed = await openai.chat.completions.create({ model: 'chat-classic', messages: [{ role: 'user', content: 'x [[emulator:fault=job_failed]]' }] }).catch((e: unknown) => e)
    expect(failed).toBeInstanceOf(OpenAI.InternalServerError)
    expect((failed as InstanceType<typeof OpenAI.APIError>).status).toBe(502)
    const limited = await openai.chat.completions.create({ model: 'chat-openai', messages: [{ role: 'user', content: 'x [[emulator:fault=http,status=429]]' }] }).catch((e: unknown) => e)
    expect(limited).toBeInstanceOf(OpenAI.RateLimitError)
    expect((limited as InstanceType<typeof OpenAI.APIError>).code).toBe('upstream_rate_limited')
  })

  it('an error inside a stream is thrown by the async iterator after the text so far', async () => {
    const { openai } = await setup()
    const stream = await openai.chat.completions.create({ model: 'chat-openai', messages: [{ role: 'user', content: 'x [[emulator:fault=mid_stream,after=3,tokens=20]]' }], stream: true })
    let text = ''
    const err = await (async () => {
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? ''
    })().catch((e: unknown) => e)
    expect(text.length).toBeGreaterThan(0)
    expect(err).toBeInstanceOf(OpenAI.APIError)
    expect(String((err as Error).message)).toMatch(/upstream/i)
  })
})

describe('openai client retries against podgate\'s own 429s', () => {
  /** The SDK with its default retries, counting the calls that reach podgate; 'hung' when it is still waiting after 3 s. */
  async function retried(keyBody: Record<string, unknown>, prime: boolean) {
    const { h, key } = await setup(keyBody)
    let calls = 0
    const counting = ((input: RequestInfo | URL, init?: RequestInit) => (calls++, h.clientFetch(input, init))) as typeof fetch
    const openai = new OpenAI({ apiKey: key, baseURL: 'http://podgate/v1', fetch: counting })
    const ask = () => openai.chat.completions.create({ model: 'chat-openai', messages: [{ role: 'user', content: 'x' }], max_tokens: 16 })
    if (prime) await ask()
    calls = 0
    const outcome = await Promise.race([ask().catch((e: unknown) => e), new Promise((resolve) => setTimeout(resolve, 3000, 'hung'))])
    return { outcome, calls }
  }

  it('a request larger than the token limit can never pass: the SDK is told not to retry it (x-should-retry: false)', async () => {
    const { outcome, calls } = await retried({ name: 'small', quota: { tokensPerMinute: 5 } }, false)
    expect(outcome).toBeInstanceOf(OpenAI.RateLimitError)
    expect((outcome as InstanceType<typeof OpenAI.APIError>).headers?.get('x-should-retry')).toBe('false')
    expect(calls).toBe(1)
  })

  it('a day limit reached is not retried by the SDK (it ignores a Retry-After over 60 s and would retry at once)', async () => {
    const { outcome, calls } = await retried({ name: 'daily', quota: { requestsPerDay: 1 } }, true)
    expect(outcome).toBeInstanceOf(OpenAI.RateLimitError)
    expect(calls).toBe(1)
  })

  it('a minute limit reached keeps a Retry-After the SDK can wait for, within the minute', async () => {
    const { h, key } = await setup({ name: 'minute', quota: { requestsPerMinute: 1 } })
    const openai = new OpenAI({ apiKey: key, baseURL: 'http://podgate/v1', fetch: h.clientFetch, maxRetries: 0 })
    await openai.chat.completions.create({ model: 'chat-openai', messages: [{ role: 'user', content: 'x' }], max_tokens: 4 })
    const err = (await openai.chat.completions.create({ model: 'chat-openai', messages: [{ role: 'user', content: 'x' }] }).catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>
    const seconds = Number(err.headers?.get('retry-after'))
    expect(seconds).toBeGreaterThanOrEqual(1)
    expect(seconds).toBeLessThanOrEqual(60)
    expect(err.headers?.get('x-should-retry')).toBeNull()
  })
})

describe('openai client features over podgate', () => {
  it.each(MODEL_NAMES)('%s: an AbortController mid-stream ends the call and podgate stops the upstream job', async (model) => {
    const { h, openai } = await setup(undefined, { cache: { enabled: false } })
    const controller = new AbortController()
    const stream = await openai.chat.completions.create(
      { model, messages: [{ role: 'user', content: 'long [[emulator:tokens=400,delay=20]]' }], stream: true, max_tokens: 400 },
      { signal: controller.signal },
    )
    let chunks = 0
    // The SDK's iterator ends quietly on its own abort (or throws APIUserAbortError): either way, well short of 400 tokens.
    const err = await (async () => {
      for await (const _ of stream) if (++chunks === 3) controller.abort()
    })().catch((e: unknown) => e)
    if (err !== undefined) expect(err).toBeInstanceOf(OpenAI.APIUserAbortError)
    expect(chunks).toBeLessThan(20)
    await new Promise((resolve) => setTimeout(resolve, 200))
    await h.settle()
    expect(h.emulator.activeJobs()).toEqual([])
  })

  it.each(MODEL_NAMES)('%s: chat.completions.stream() accumulates a streamed tool call and the usage', async (model) => {
    const { openai } = await setup()
    const runner = openai.chat.completions.stream({
      model,
      messages: [{ role: 'user', content: 'weather in Paris' }],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }],
      tool_choice: 'required',
      stream_options: { include_usage: true },
    })
    const final = await runner.finalChatCompletion()
    const call = final.choices[0]?.message.tool_calls?.[0]
    expect(final.choices[0]?.finish_reason).toBe('tool_calls')
    expect(call?.type === 'function' && call.function.name).toBe('get_weather')
    expect(call?.type === 'function' && typeof (JSON.parse(call.function.arguments) as { city: unknown }).city).toBe('string')
    expect(final.usage?.completion_tokens).toBeGreaterThan(0)
  })
})
