/**
 * Quotas through the gateway: the pipeline stage (reserve, 429, headers, settle from real usage,
 * refunds), the usage API, policy layering, and the strict store's exactness under a burst.
 */
import { describe, expect, it } from 'vitest'
import { env, listDurableObjectIds } from 'cloudflare:test'
import { tokensToCharge } from '../src/quota/stage.ts'
import { GatewayError } from '../src/errors/index.ts'
import { ADMIN_TOKEN, MODEL_NAMES, MODELS, authed, chatBody, harness, readSSE, readSome, scriptedUpstream } from './helpers.ts'
import type { Harness } from './helpers.ts'
import type { QuotaObject } from '../src/quota/durable-object.ts'
import { recordingKv } from './quota-sim.ts'

/** 10 s into a UTC minute: a minute window resets in 50 s. */
const START = Date.UTC(2026, 0, 5, 12, 30, 10)

function clockedHarness(extra: Parameters<typeof harness>[0] = {}) {
  let now = START
  const h = harness({ ...extra, quota: { ...extra.quota, now: () => now } })
  return { h, advance: (ms: number) => void (now += ms) }
}

type QuotaStub = DurableObjectStub<QuotaObject>

/** The strict store's objects with some calls wrapped: `wrap[name](stub, input)` runs instead of `name`. */
function quotaObjectsWith(wrap: {
  reserve?: (stub: QuotaStub, input: Parameters<QuotaStub['reserve']>[0]) => ReturnType<QuotaStub['reserve']>
  settle?: (stub: QuotaStub, input: Parameters<QuotaStub['settle']>[0]) => ReturnType<QuotaStub['settle']>
}) {
  const objects = env.PODGATE_QUOTA
  return () => ({
    idFromName: (name: string) => objects.idFromName(name),
    get: (id: DurableObjectId) => {
      const stub = objects.get(id)
      return {
        reserve: (input: Parameters<QuotaStub['reserve']>[0]) => (wrap.reserve ? wrap.reserve(stub, input) : stub.reserve(input)),
        usage: (input: Parameters<QuotaStub['usage']>[0]) => stub.usage(input),
        settle: (input: Parameters<QuotaStub['settle']>[0]) => (wrap.settle ? wrap.settle(stub, input) : stub.settle(input)),
      }
    },
  }) as unknown as typeof objects
}

interface UsageReport {
  store: string | null
  limits: { name: string; limit: number; used: number; remaining: number; reset_seconds: number }[]
  windows: { minute: { requests: number; tokens: number }; day: { requests: number; tokens: number } } | null
  streams: number | null
}

async function usageOf(h: Harness, key: string): Promise<UsageReport> {
  const res = await h.fetch('/v1/usage', authed(key))
  expect(res.status).toBe(200)
  return (await res.json()) as UsageReport
}

/** The minute window of the key, once every settle has landed. */
async function minuteOf(h: Harness, key: string): Promise<{ requests: number; tokens: number }> {
  await h.settle()
  return (await usageOf(h, key)).windows!.minute
}

const chat = (h: Harness, key: string, content = 'Say hello [[emulator:tokens=7]]', extra: Record<string, unknown> = {}, model = 'chat-openai') =>
  h.fetch('/v1/chat/completions', authed(key, chatBody(model, content, { max_tokens: 100, ...extra })))

describe('quota stage', () => {
  it('answers 429 in OpenAI format past the limit, with rate-limit headers, and changes nothing else', async () => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'q', quota: { requestsPerMinute: 2 } })
    const first = await chat(h, key)
    expect(first.status).toBe(200)
    expect(first.headers.get('ratelimit-policy')).toBe('"rpm";q=2;w=60')
    expect(first.headers.get('ratelimit')).toBe('"rpm";r=1;t=50')
    expect(first.headers.get('x-ratelimit-limit-requests')).toBe('2')
    expect(first.headers.get('x-ratelimit-remaining-requests')).toBe('1')
    expect(first.headers.get('x-ratelimit-reset-requests')).toBe('50s')
    expect((await chat(h, key)).status).toBe(200)
    await h.settle()
    const calls = h.emulator.calls.length
    const before = await usageOf(h, key)

    const refused = await chat(h, key)
    expect(refused.status).toBe(429)
    expect(refused.headers.get('retry-after')).toBe('50')
    expect(refused.headers.get('ratelimit')).toBe('"rpm";r=0;t=50')
    expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0')
    const body = (await refused.json()) as { error: { type: string; code: string; message: string } }
    expect(body.error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limited' })
    expect(body.error.message).toContain('2 requests per minute')
    await h.settle()
    expect(h.emulator.calls.length).toBe(calls)
    expect(await usageOf(h, key)).toEqual(before)
  })

  it('a call refused for its input (before the quota, on every surface) counts nothing', async () => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'q', quota: { requestsPerMinute: 1, tokensPerMinute: 10_000, maxConcurrentStreams: 1 } })
    const refused = [
      await chat(h, key, 'hi', { max_tokens: -1, stream: true }),
      await chat(h, key, 'hi', {}, 'no-such-model'),
      await h.fetch('/v1/messages', authed(key, JSON.stringify({ model: 'chat-openai', max_tokens: 0, messages: [{ role: 'user', content: 'hi' }] }))),
      await h.fetch('/v1/embeddings', authed(key, JSON.stringify({ model: 'embed-openai' }))),
      await h.fetch('/v2/chat-current/run', authed(key, JSON.stringify({ input: { prompt: 'hi', sampling_params: { max_tokens: 0 } } }))),
      await h.fetch('/v2/chat-current/runsync?wait=soon', authed(key, JSON.stringify({ input: { prompt: 'hi' } }))),
    ]
    expect(refused.map((r) => r.status)).toEqual([400, 404, 400, 400, 400, 400])
    await h.settle()
    expect((await usageOf(h, key)).windows).toMatchObject({ minute: { requests: 0, tokens: 0 }, day: { requests: 0, tokens: 0 } })
    expect(h.emulator.calls).toHaveLength(0)
    expect((await chat(h, key)).status).toBe(200)
  })

  // The cache stage, after admission, refuses a body its key cannot be made of: as a refusal before the quota,
  // it counts nothing, so it shows no rate-limit fields (they counted the reservation it took back).
  it('a call the cache stage refuses for its input counts nothing and shows no rate-limit fields, as a normalization 400', async () => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'q', quota: { requestsPerMinute: 5, tokensPerMinute: 10_000 } })
    const nested = `${'['.repeat(1_100)}${']'.repeat(1_100)}`
    const refused = [
      await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'hi', { seed: 1, max_tokens: 10 }).replace('{', `{"vllm_xargs":${nested},`))),
      await chat(h, key, 'hi', { max_tokens: -1 }),
    ]
    expect(refused.map((r) => r.status)).toEqual([400, 400])
    expect(refused.map((r) => [...r.headers.keys()].filter((name) => name.includes('ratelimit')))).toEqual([[], []])
    await h.settle()
    expect((await usageOf(h, key)).windows).toMatchObject({ minute: { requests: 0, tokens: 0 } })
    expect((await chat(h, key)).headers.get('x-ratelimit-remaining-requests')).toBe('4')
  })

  it('an error after admission (a refusal the upstream sent) carries the rate-limit headers too: the request counted', async () => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'q', quota: { requestsPerMinute: 5 } })
    const refused = await chat(h, key, 'Say hello [[emulator:fault=http,status=400]]')
    expect(refused.status).toBe(400)
    expect(refused.headers.get('ratelimit')).toBe('"rpm";r=4;t=50')
    expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('4')
    // Each error has headers of its own: the next refusal says 3, not what the first one was given.
    const again = await chat(h, key, 'Say hello [[emulator:fault=http,status=400]]')
    expect(again.headers.get('x-ratelimit-remaining-requests')).toBe('3')
    await h.settle()
    expect((await usageOf(h, key)).windows?.minute.requests).toBe(2)
  })

  it('sends the tokens trio and both IETF items when tokens are limited too', async () => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'q', quota: { requestsPerDay: 100, tokensPerMinute: 10_000 } })
    const res = await chat(h, key, 'abcdefgh [[emulator:tokens=7]]')
    expect(res.status).toBe(200)
    expect(res.headers.get('ratelimit-policy')).toBe('"rpd";q=100;w=86400, "tpm";q=10000;w=60')
    expect(res.headers.get('x-ratelimit-reset-requests')).toBe('11h29m50s')
    expect(res.headers.get('x-ratelimit-limit-tokens')).toBe('10000')
    // Reserved: ceil(chars / 4) of the prompt + max_tokens.
    const reserved = Math.ceil('abcdefgh [[emulator:tokens=7]]'.length / 4) + 100
    expect(res.headers.get('x-ratelimit-remaining-tokens')).toBe(String(10_000 - reserved))
    await res.text()
  })

  it('refuses a request whose max_tokens alone exceeds the token limit, saying how to fix it', async () => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'q', quota: { tokensPerMinute: 50 } })
    const res = await chat(h, key)
    expect(res.status).toBe(429)
    expect(((await res.json()) as { error: { message: string } }).error.message).toContain('lower max_tokens')
    expect(h.emulator.calls).toHaveLength(0)
  })

  // Found in the quota review: the minute limit was checked first, so a key out of both its minute and its
  // day was told to come back in 50 s, and was refused again then, for the day.
  it.each([
    [{ requestsPerMinute: 1, requestsPerDay: 1 }, 'request per day'],
    [{ requestsPerMinute: 1, tokensPerDay: 200 }, 'tokens per day'],
  ])('a 429 past a minute and a day limit at once says to retry when the day resets (%o)', async (quota, names) => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'q', quota })
    expect((await chat(h, key)).status).toBe(200)
    await h.settle()
    const refused = await chat(h, key, 'Say hello', { max_tokens: 190 })
    expect(refused.status).toBe(429)
    // 12:30:10 UTC: the day resets in 11 h 29 min 50 s.
    expect(refused.headers.get('retry-after')).toBe('41390')
    expect(((await refused.json()) as { error: { message: string } }).error.message).toContain(names)
  })

  // Found in review: with the day limits checked first, a request that can never fit its minute token limit
  // but was also past the day's was told to retry when the day resets, and would be refused again then.
  it('a request larger than a whole minute token limit is told so, even when it is past a day limit too', async () => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'q', quota: { tokensPerMinute: 150, tokensPerDay: 300 } })
    expect((await chat(h, key)).status).toBe(200)
    await h.settle()
    const refused = await chat(h, key, 'Say hello', { max_tokens: 290 })
    expect(refused.status).toBe(429)
    expect(refused.headers.get('retry-after')).toBe('50')
    expect(((await refused.json()) as { error: { message: string } }).error.message).toContain("more than this key's 150 tokens per minute: lower max_tokens")
  })

  it('rolls the minute window over on the injected clock', async () => {
    const { h, advance } = clockedHarness()
    const { key } = await h.createKey({ name: 'q', quota: { requestsPerMinute: 1 } })
    expect((await chat(h, key)).status).toBe(200)
    expect((await chat(h, key)).status).toBe(429)
    advance(50_000)
    expect((await chat(h, key)).status).toBe(200)
  })

  it.each(['kv', 'strict'] as const)('admits exactly the quota under a burst of 20 concurrent requests (%s)', async (store) => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'burst', quota: { requestsPerMinute: 5, strict: store === 'strict' } })
    const statuses = await Promise.all(Array.from({ length: 20 }, () => chat(h, key).then(async (r) => (await r.text(), r.status))))
    expect(statuses.filter((s) => s === 200)).toHaveLength(5)
    expect(statuses.filter((s) => s === 429)).toHaveLength(15)
    expect(h.emulator.calls).toHaveLength(5)
    expect((await usageOf(h, key)).store).toBe(store)
  })

  it.each(MODEL_NAMES)('%s: settles tokens from the real usage, streamed (usage not asked for) or not', async (model) => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'q', quota: { tokensPerMinute: 5000, strict: true } })
    const full = await chat(h, key, 'Count [[emulator:tokens=7]]', {}, model)
    const usage = ((await full.json()) as { usage: { completion_tokens: number; total_tokens: number } }).usage
    await h.settle()
    expect((await usageOf(h, key)).windows?.minute.tokens).toBe(usage.total_tokens)

    const streamed = await chat(h, key, 'Count [[emulator:tokens=7]]', { stream: true }, model)
    expect(streamed.headers.get('content-type')).toContain('text/event-stream')
    expect(streamed.headers.get('x-ratelimit-limit-tokens')).toBe('5000')
    const events = await readSSE(streamed)
    expect(events.some((e) => typeof e === 'object' && e !== null && (e as { usage?: unknown }).usage)).toBe(false)
    await h.settle()
    // A current worker's shorthand stream reports no usage: its prompt estimate plus the tokens podgate counted.
    const streamedCost = model === 'chat-current' ? Math.ceil('Count [[emulator:tokens=7]]'.length / 4) + usage.completion_tokens : usage.total_tokens
    expect((await usageOf(h, key)).windows?.minute).toMatchObject({ requests: 2, tokens: usage.total_tokens + streamedCost })
  })

  // worker-vllm >= v2.24 posts the native shorthand to vLLM as `{...sampling_params, stream}`, with no
  // stream_options: vLLM sends no usage chunk. Classic token items carry usage of their own.
  it.each([
    ['chat-classic', true],
    ['chat-current', false],
  ])('%s: a shorthand stream that asks for usage gets the worker\'s own or none, never a count of podgate\'s; quota charges the usage, or the prompt estimate plus the tokens counted', async (model, reports) => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'q', quota: { tokensPerMinute: 5000, strict: true } })
    const content = 'Count to twelve [[emulator:tokens=12]]'
    const prompt = Math.ceil(content.length / 4)
    const ask = (extra: Record<string, unknown>) => chat(h, key, content, { temperature: 0, ...extra }, model)
    const usageIn = (events: unknown[]) => events.flatMap((e) => (typeof e === 'object' && e !== null && 'usage' in e ? [(e as { usage: { prompt_tokens: number; total_tokens: number } }).usage] : []))

    const res = await ask({ stream: true, stream_options: { include_usage: true } })
    expect(res.headers.get('x-podgate-cache')).toBe('MISS')
    const events = await readSSE(res)
    expect(events.at(-1)).toBe('[DONE]')
    const usage = usageIn(events)
    const minute = await minuteOf(h, key)
    if (reports) {
      expect(usage).toHaveLength(1)
      expect(usage[0]?.prompt_tokens).toBeGreaterThan(0)
      expect(minute.tokens).toBe(usage[0]?.total_tokens)
    } else {
      expect(usage).toEqual([])
      expect((events.at(-2) as { choices: { finish_reason: string | null }[] }).choices[0]?.finish_reason).toBe('stop')
      // Neither a prompt of 0 nor the whole reservation (prompt + max_tokens 100): the estimate plus the 12 tokens streamed.
      expect(minute.tokens).toBe(prompt + 12)
    }

    // The cache recorded the answer with the usage the worker reported, or none: a replay shows no count of its own either.
    const replay = await ask({ stream: true, stream_options: { include_usage: true } })
    expect(replay.headers.get('x-podgate-cache')).toBe('HIT')
    expect(usageIn(await readSSE(replay))).toEqual(usage)
    const json = await ask({})
    expect(json.headers.get('x-podgate-cache')).toBe('HIT')
    expect(((await json.json()) as { usage: unknown }).usage).toEqual(usage[0] ?? null)
    expect((await minuteOf(h, key)).tokens).toBe(minute.tokens)
  })

  it.each([
    ['job_failed on a native endpoint', 'chat-current', '[[emulator:fault=job_failed]]'],
    ['an upstream HTTP 500', 'chat-openai', '[[emulator:fault=http,status=500]]'],
    ['job_failed on the OpenAI route', 'chat-openai', '[[emulator:fault=job_failed]]'],
  ])('refunds every reserved token after %s', async (_name, model, directive) => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'q', quota: { tokensPerDay: 5000 } })
    const res = await chat(h, key, `fail ${directive}`, {}, model)
    expect(res.status).toBeGreaterThanOrEqual(500)
    await res.text()
    await h.settle()
    expect((await usageOf(h, key)).windows?.day).toMatchObject({ requests: 1, tokens: 0 })
  })

  it.each(['chat-current', 'chat-classic'])('%s: a native stream that breaks after output is charged what it produced, not its whole reservation', async (model) => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'q', quota: { tokensPerMinute: 5000, strict: true } })
    const content = 'Break [[emulator:tokens=20,fault=mid_stream,after=5]]'
    const events = await readSSE(await chat(h, key, content, { stream: true }, model))
    expect(events.at(-1)).not.toBe('[DONE]')
    const prompt = Math.ceil(content.length / 4)
    const { tokens } = await minuteOf(h, key)
    // A current worker's shorthand reports no usage: the prompt estimate plus the 5 tokens counted, as a
    // completed one is charged. Classic items report usage as they go: the last one counts.
    if (model === 'chat-current') expect(tokens).toBe(prompt + 5)
    else expect(tokens).toBeGreaterThan(5)
    expect(tokens).toBeLessThan(prompt + 100)
  })

  // Found in the fairness review: the OpenAI route's stream and a native job's Responses or Messages
  // stream report usage only at their end, so one cut short kept its whole reservation (prompt + max_tokens).
  it.each([
    ['the OpenAI route (the JavaScript relay)', 'chat-openai', '/v1/chat/completions'],
    ['a native Responses job', 'chat-current', '/v1/responses'],
    ['a native Messages job', 'chat-current', '/v1/messages'],
  ])('a stream on %s that breaks after 30 tokens is charged about its prompt + 30, not its whole reservation', async (_name, model, path) => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'q', quota: { tokensPerMinute: 50_000, strict: true } })
    const content = 'Break [[emulator:tokens=100,fault=mid_stream,after=30]]'
    const body = path === '/v1/responses' ? { input: content, max_output_tokens: 4_000 } : { messages: [{ role: 'user', content }], max_tokens: 4_000 }
    const res = await h.fetch(path, authed(key, JSON.stringify({ model, stream: true, ...body })))
    expect(res.status).toBe(200)
    expect(await res.text()).toMatch(/"(?:upstream_error|api_error)"/)
    const prompt = Math.ceil(content.length / 4)
    const { tokens } = await minuteOf(h, key)
    // 30 token events, and the few a dialect writes around them (a role chunk, response.created...).
    expect(tokens).toBeGreaterThanOrEqual(prompt + 30)
    expect(tokens).toBeLessThan(prompt + 40)
  })

  // Found in the token accounting review: with `continuous_usage_stats`, vLLM puts on every chunk the usage of
  // that chunk's choice only (cumulative per choice). A piped stream cut before its final usage chunk was
  // charged the last chunk's one-choice count: with n = 2, half of what the upstream generated.
  it('a piped n = 2 stream with continuous usage stats, cut before its usage chunk, is charged both choices\' output', async () => {
    const SERVED = 'Served-Model-8B'
    const head = `"id":"chatcmpl-up","object":"chat.completion.chunk","created":1700000000,"model":"${SERVED}"`
    const chunk = (index: number, delta: Record<string, unknown>, completion: number) =>
      `data: {${head},"choices":[{"index":${index},"delta":${JSON.stringify(delta)},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":12,"total_tokens":${12 + completion},"completion_tokens":${completion}}}\n\n`
    const pieces: Array<string | Error> = [chunk(0, { role: 'assistant', content: '' }, 0), chunk(1, { role: 'assistant', content: '' }, 0)]
    for (let i = 1; i <= 20; i++) pieces.push(chunk(0, { content: ' word' }, i), chunk(1, { content: ' word' }, i))
    pieces.push(new Error('connection reset'))
    const upstream = scriptedUpstream(() => pieces)
    const { h } = clockedHarness({ models: { [SERVED]: { endpoints: [{ endpointId: 'epsame' }], mode: 'openai' } }, fetch: upstream.fetch })
    const { key } = await h.createKey({ name: 'continuous', quota: { tokensPerMinute: 1_000_000, strict: true } })
    const body = chatBody(SERVED, 'Hi', { stream: true, n: 2, max_tokens: 1000, stream_options: { include_usage: true, continuous_usage_stats: true } })
    const res = await h.fetch('/v1/chat/completions', authed(key, body))
    expect(res.status).toBe(200)
    expect(await res.text()).toContain('upstream_error')
    const { tokens } = await minuteOf(h, key)
    // 40 tokens were generated (20 per choice): not 12 + 20, the last chunk's count of its own choice.
    expect(tokens).toBeGreaterThanOrEqual(40)
    expect(tokens).toBeLessThan(100)
  })

  // Found in the token accounting review: a Messages stream's `message_start` holds vLLM's count of the
  // prompt. A piped one cut before its end was charged podgate's prompt estimate instead.
  it('a piped Messages stream cut after its message_start is charged the prompt count it carried, not the estimate', async () => {
    const SERVED = 'Served-Model-8B'
    const event = (type: string, data: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`
    const pieces: Array<string | Error> = [
      event('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', content: [], model: SERVED, stop_reason: null, stop_sequence: null, usage: { input_tokens: 900, output_tokens: 0 } } }),
      event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
    ]
    for (let i = 0; i < 20; i++) pieces.push(event('content_block_delta', { index: 0, delta: { type: 'text_delta', text: ' word' } }))
    pieces.push(new Error('connection reset'))
    const upstream = scriptedUpstream(() => pieces)
    const { h } = clockedHarness({ models: { [SERVED]: { endpoints: [{ endpointId: 'epsame' }], mode: 'openai' } }, fetch: upstream.fetch })
    const { key } = await h.createKey({ name: 'messages', quota: { tokensPerMinute: 1_000_000, strict: true } })
    const res = await h.fetch('/v1/messages', authed(key, JSON.stringify({ model: SERVED, stream: true, max_tokens: 1000, messages: [{ role: 'user', content: 'Hi' }] })))
    expect(res.status).toBe(200)
    expect(await res.text()).toMatch(/"(?:upstream_error|api_error)"/)
    const { tokens } = await minuteOf(h, key)
    // 900 prompt tokens by vLLM's count (the estimate of 'Hi' is 1), and about the 22 events relayed.
    expect(tokens).toBeGreaterThanOrEqual(920)
    expect(tokens).toBeLessThan(950)
  })

  it('holds strict concurrent streams to the limit until a stream ends', async () => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'q', quota: { maxConcurrentStreams: 1, strict: true } })
    const open = await chat(h, key, 'slow [[emulator:tokens=6,delay=40]]', { stream: true }, 'chat-current')
    expect(open.status).toBe(200)
    const second = await chat(h, key, 'again', { stream: true })
    expect(second.status).toBe(429)
    expect(second.headers.get('retry-after')).toBe('1')
    expect((await chat(h, key, 'not a stream')).status).toBe(200)
    await open.text()
    await h.settle()
    const third = await chat(h, key, 'third', { stream: true })
    expect(third.status).toBe(200)
    await third.text()
  })

  it('a relayed stream whose caller left mid-answer (its request aborted), its body unread, frees its stream slot, charged what it relayed', async () => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'q', quota: { maxConcurrentStreams: 1, tokensPerMinute: 50_000, strict: true } })
    const abort = new AbortController()
    const content = 'slow [[emulator:tokens=400,delay=20]]'
    const res = await h.fetch('/v1/chat/completions', { ...authed(key, chatBody('chat-openai', content, { max_tokens: 1000, stream: true })), signal: abort.signal })
    await readSome(res, 200)
    abort.abort()
    await Promise.race([h.settle(), new Promise((resolve) => setTimeout(resolve, 2_000))])
    const report = await usageOf(h, key)
    expect(report.streams).toBe(0)
    expect(report.windows!.minute.tokens).toBeLessThan(Math.ceil(content.length / 4) + 100)
  })

  // Reachable with a custom `fetch` that ignores its signal: the upstream answered after the caller left,
  // so the relay is created with the signal already aborted (it fires no event then).
  it('a relayed stream whose caller left before the upstream answered settles, charged what it relayed, and cancels the upstream body', async () => {
    let cancelled = false
    let called = () => {}
    const abort = new AbortController()
    const { h } = clockedHarness({
      fetch: async (input, init) => {
        const request = new Request(input, init)
        called()
        await new Promise((resolve) => abort.signal.addEventListener('abort', resolve))
        // Answered by an upstream that never heard of the abort.
        const answer = await h.emulator.fetch(new Request(request, { signal: null }))
        const reader = answer.body!.getReader()
        const body = new ReadableStream<Uint8Array>({
          async pull(controller) {
            const next = await reader.read()
            if (next.done) controller.close()
            else controller.enqueue(next.value)
          },
          cancel(reason) {
            cancelled = true
            return reader.cancel(reason)
          },
        })
        return new Response(body, answer)
      },
    })
    const { key } = await h.createKey({ name: 'q', quota: { maxConcurrentStreams: 1, tokensPerMinute: 50_000, strict: true } })
    const content = 'slow [[emulator:tokens=400,delay=20]]'
    const upstreamCalled = new Promise<void>((resolve) => (called = resolve))
    const res = h.fetch('/v1/chat/completions', { ...authed(key, chatBody('chat-openai', content, { max_tokens: 1000, stream: true })), signal: abort.signal })
    await upstreamCalled
    abort.abort()
    expect((await res).status).toBe(200)
    await Promise.race([h.settle(), new Promise((resolve) => setTimeout(resolve, 2_000))])
    const report = await usageOf(h, key)
    expect(report.streams).toBe(0)
    expect(report.windows!.minute.tokens).toBeLessThan(Math.ceil(content.length / 4) + 100)
    expect(cancelled).toBe(true)
  })

  // A Durable Object call may fail now and then (the object reset, the connection lost): the slot a
  // leaving caller frees must not then stay taken for the lease's 30 minutes.
  it('a strict stream slot whose early release failed once is freed all the same', async () => {
    let failures = 0
    const { h } = clockedHarness({
      quota: { objects: quotaObjectsWith({ settle: (stub, input) => (failures++ === 0 ? Promise.reject(new Error('Durable Object reset')) : stub.settle(input)) }) },
    })
    const { key } = await h.createKey({ name: 'q', quota: { maxConcurrentStreams: 1, tokensPerMinute: 50_000, strict: true } })
    const abort = new AbortController()
    const res = await h.fetch('/v1/chat/completions', { ...authed(key, chatBody('chat-openai', 'slow [[emulator:tokens=400,delay=20]]', { max_tokens: 1000, stream: true })), signal: abort.signal })
    await readSome(res, 200)
    abort.abort()
    await Promise.race([h.settle(), new Promise((resolve) => setTimeout(resolve, 2_000))])
    expect(failures).toBeGreaterThan(1)
    expect((await usageOf(h, key)).streams).toBe(0)
  })

  // docs/failure-behaviour.md: a limit is not waived while its count cannot be read. A store that fails
  // at admission refuses the call (fail closed) with a logged 500, and nothing goes upstream.
  it('a strict store that fails at admission refuses the call with a logged 500 internal_error, and nothing goes upstream', async () => {
    const { h } = clockedHarness({ quota: { objects: quotaObjectsWith({ reserve: () => Promise.reject(new Error('Durable Object reset')) as never }) } })
    const { key } = await h.createKey({ name: 'q', quota: { requestsPerMinute: 10, strict: true } })
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai')))
    expect(res.status).toBe(500)
    expect(await res.json()).toMatchObject({ error: { code: 'internal_error' } })
    expect(h.emulator.calls).toEqual([])
    await h.settle()
    expect(h.logs.map((line) => JSON.parse(line) as unknown)).toContainEqual(expect.objectContaining({ level: 'error', status: 500, cause: expect.stringContaining('Durable Object reset') }))
  })

  // A strict stream slot is a lease: it must outlive the longest stream the model allows
  // (`timeouts.totalMs`, up to an hour, and a coalesced twin's wait), else a key opens more than
  // `maxConcurrentStreams` streams.
  it('a strict stream slot is leased for as long as the model lets a stream last', async () => {
    const leases: (number | undefined)[] = []
    const { h } = clockedHarness({
      models: { ...MODELS, long: { endpoints: [{ endpointId: 'vllmopenai' }], mode: 'openai', resilience: { timeouts: { totalMs: 45 * 60_000 } } } },
      quota: {
        objects: quotaObjectsWith({
          reserve: (stub, input) => {
            if (input.cost.stream) leases.push(input.cost.leaseMs)
            return stub.reserve(input)
          },
        }),
      },
    })
    const { key } = await h.createKey({ name: 'q', quota: { maxConcurrentStreams: 1, strict: true } })
    for (const model of ['long', 'chat-openai']) {
      const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'hi [[emulator:tokens=3]]', { stream: true })))
      expect(res.status).toBe(200)
      await res.text()
      await h.settle()
    }
    // A coalesced twin's stream outlives its own call: it waits on the leader's flight for as long as the
    // leader's call may take (`deadlineOf`: totalMs and 5 s), and when that answer turns out unshareable
    // (too large, its caller left) or late, it makes its own call, which may take totalMs more. Its slot,
    // reserved before the wait, must still be held then.
    const twinsLife = (totalMs: number) => totalMs + 5_000 + totalMs
    expect(leases).toHaveLength(2)
    expect(leases[0]).toBeGreaterThan(twinsLife(45 * 60_000))
    // The default totalMs (10 min): a dead isolate's slot comes back before the 30 minutes it used to hold.
    expect(leases[1]).toBeGreaterThan(twinsLife(10 * 60_000))
    expect(leases[1]).toBeLessThan(30 * 60_000)
  })

  it('tokensToCharge: cached answers charge nothing, failures what they produced', () => {
    expect(tokensToCharge({ ok: true, usage: { prompt_tokens: 5, completion_tokens: 5, total_tokens: 10 }, cached: true }, 90)).toBe(0)
    expect(tokensToCharge({ ok: true, usage: undefined }, 90)).toBe(90)
    // Usage podgate counted (none reported): the prompt estimate plus the output counted, not the reservation; reported usage wins.
    const estimate = { prompt_tokens: 0, completion_tokens: 12, total_tokens: 12 }
    expect(tokensToCharge({ ok: true, usage: undefined, estimate }, 90, 10)).toBe(22)
    expect(tokensToCharge({ ok: true, usage: { prompt_tokens: 5, completion_tokens: 5, total_tokens: 10 }, estimate }, 90, 10)).toBe(10)
    const error = new GatewayError('upstream_error', 'x')
    expect(tokensToCharge({ ok: false, error, producedOutput: true, usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 } }, 90)).toBe(8)
    expect(tokensToCharge({ ok: false, error, producedOutput: false }, 90)).toBe(0)
    // A cut answer whose output podgate counted (none reported) is charged as a completed one.
    expect(tokensToCharge({ ok: false, error, producedOutput: true, estimate }, 90, 10)).toBe(22)
    // A coalesced twin's end is not its own call: free, whatever reached its caller.
    expect(tokensToCharge({ ok: false, error, producedOutput: true, cached: true }, 90, 10)).toBe(0)
  })

  it('a cache HIT through the gateway counts the request, not its tokens', async () => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'cached', quota: { requestsPerMinute: 10, tokensPerMinute: 10_000 } })
    const first = await chat(h, key, 'cache me [[emulator:tokens=7]]', { temperature: 0 })
    expect(first.headers.get('x-podgate-cache')).toBe('MISS')
    const answer = (await first.json()) as { usage: { total_tokens: number } }
    await h.settle()
    const second = await chat(h, key, 'cache me [[emulator:tokens=7]]', { temperature: 0 })
    expect(second.headers.get('x-podgate-cache')).toBe('HIT')
    await second.text()
    await h.settle()
    const usage = await usageOf(h, key)
    expect(usage.windows?.minute).toMatchObject({ requests: 2, tokens: answer.usage.total_tokens })
  })

  // Found in the quota review: docs/quotas.md said a HIT's replay held its slot while read; it never did.
  it('a cache HIT stream needs a free stream slot to be admitted, but holds none while its replay is read', async () => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'slots', quota: { maxConcurrentStreams: 1 } })
    const stream = (content: string) => chat(h, key, content, { temperature: 0, stream: true })
    await (await stream('cache me [[emulator:tokens=50]]')).text()
    await h.settle()
    const replays = [await stream('cache me [[emulator:tokens=50]]'), await stream('cache me [[emulator:tokens=50]]')]
    expect(replays.map((r) => r.headers.get('x-podgate-cache'))).toEqual(['HIT', 'HIT'])
    // A live stream that stays open holds the one slot: a HIT waits for it too.
    const live = await stream('a new question [[emulator:tokens=50,fault=stall,after=2]]')
    expect(live.status).toBe(200)
    expect((await stream('cache me [[emulator:tokens=50]]')).status).toBe(429)
    await live.body!.cancel()
    await Promise.all(replays.map((r) => r.text()))
  })

  it.each(['tokensPerMinute', 'tokensPerDay'])('a cache HIT is answered to a key already past its token limit (%s, lowered), and a new question is not', async (limit) => {
    const { h } = clockedHarness({ keyCacheTtlMs: 0 })
    const { id, key } = await h.createKey({ name: 'over', quota: { [limit]: 10_000 } })
    const first = await chat(h, key, 'cache me [[emulator:tokens=150]]', { temperature: 0, max_tokens: 200 })
    expect(first.headers.get('x-podgate-cache')).toBe('MISS')
    await first.text()
    await h.settle()
    const patched = await h.fetch(`/admin/keys/${id}`, { method: 'PATCH', headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ quota: { [limit]: 100 } }) })
    expect(patched.status).toBe(200)
    const second = await chat(h, key, 'cache me [[emulator:tokens=150]]', { temperature: 0, max_tokens: 200 })
    expect(second.status, await second.clone().text()).toBe(200)
    expect(second.headers.get('x-podgate-cache')).toBe('HIT')
    const third = await chat(h, key, 'another question [[emulator:tokens=5]]', { temperature: 0, max_tokens: 20 })
    expect(third.status).toBe(429)
    await third.text()
  })

  it.each(['tokensPerMinute', 'tokensPerDay'])('a passthrough job, which costs no tokens, is not held to a token limit already past (%s)', async (limit) => {
    const models = { ...MODELS, 'raw-vllm': { endpoints: [{ endpointId: 'vllmclassic' }], mode: 'native' as const, passthrough: true } }
    const { h } = clockedHarness({ keyCacheTtlMs: 0, models })
    const { id, key } = await h.createKey({ name: 'raw', quota: { [limit]: 10_000 } })
    await (await chat(h, key, 'spend [[emulator:tokens=150]]', { max_tokens: 200 })).text()
    await h.settle()
    const patched = await h.fetch(`/admin/keys/${id}`, { method: 'PATCH', headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ quota: { [limit]: 100 } }) })
    expect(patched.status).toBe(200)
    const raw = await h.fetch('/v2/raw-vllm/run', authed(key, JSON.stringify({ input: { prompt: 'raw [[emulator:tokens=4]]' } })))
    expect(raw.status, await raw.clone().text()).toBe(200)
    await raw.text()
    const run = await h.fetch('/v2/chat-current/run', authed(key, JSON.stringify({ input: { prompt: 'hi', sampling_params: { max_tokens: 10 } } })))
    expect(run.status).toBe(429)
    await run.text()
  })

  it('a cache HIT is answered to a key whose token quota has no room for the call\'s reservation: it costs no tokens', async () => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'hit-tpm', quota: { requestsPerMinute: 10, tokensPerMinute: 300 } })
    // Reserves ~8 + 200 tokens and uses ~156: the second call's reservation no longer fits in 300.
    const first = await chat(h, key, 'cache me [[emulator:tokens=150]]', { temperature: 0, max_tokens: 200 })
    expect(first.headers.get('x-podgate-cache')).toBe('MISS')
    await first.text()
    await h.settle()
    const second = await chat(h, key, 'cache me [[emulator:tokens=150]]', { temperature: 0, max_tokens: 200 })
    expect(second.status, await second.clone().text()).toBe(200)
    expect(second.headers.get('x-podgate-cache')).toBe('HIT')
    // Its rate-limit headers count no reservation for it.
    const used = (await usageOf(h, key)).windows!.minute.tokens
    expect(Number(second.headers.get('x-ratelimit-remaining-tokens'))).toBe(300 - used)
    // A new question still needs room for its reservation.
    const third = await chat(h, key, 'new question [[emulator:tokens=5]]', { temperature: 0, max_tokens: 200 })
    expect(third.status).toBe(429)
    await third.text()
    await h.settle()
    expect((await usageOf(h, key)).windows?.minute).toMatchObject({ requests: 2, tokens: used })
  })
})

describe('coalesced twins', () => {
  // docs/caching.md "Quotas": a coalesced answer counts as a request, never against token quotas,
  // however the twin's stream ends.
  it('a COALESCED streaming twin that hangs up mid-stream is charged no tokens (it used no GPU time)', async () => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'twins', quota: { requestsPerMinute: 100, tokensPerMinute: 1_000_000 } })
    // Native endpoint: podgate reads the stream itself, so a streaming twin follows the leader live.
    const body = chatBody('chat-current', 'twin leaves [[emulator:delay=20,tokens=20]]', { temperature: 0, max_tokens: 2000, stream: true, stream_options: { include_usage: true } })
    const leader = await h.fetch('/v1/chat/completions', authed(key, body))
    expect(leader.headers.get('x-podgate-cache')).toBe('MISS')
    const twin = await h.fetch('/v1/chat/completions', authed(key, body))
    expect(twin.headers.get('x-podgate-cache')).toBe('COALESCED')
    const reader = await readSome(twin, 1)
    await reader.cancel()
    const events = await readSSE(leader)
    expect(events.at(-1)).toBe('[DONE]')
    // A current worker's shorthand stream carries no usage chunk (worker-vllm asks vLLM for none), and podgate sends none of its own.
    expect(events.some((e) => typeof e === 'object' && e !== null && 'usage' in e)).toBe(false)
    const minute = await minuteOf(h, key)
    expect(minute.requests).toBe(2)
    // Only the leader's call: its prompt estimate plus the 20 tokens podgate counted.
    expect(minute.tokens).toBe(Math.ceil('twin leaves [[emulator:delay=20,tokens=20]]'.length / 4) + 20)
  })

  it('when a shared stream breaks mid-way, each COALESCED twin is not charged its whole reservation', async () => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'twins-fail', quota: { requestsPerMinute: 100, tokensPerMinute: 1_000_000 } })
    const body = chatBody('chat-current', 'shared break [[emulator:delay=20,tokens=20,fault=mid_stream,after=5]]', { temperature: 0, max_tokens: 2000, stream: true })
    const leader = await h.fetch('/v1/chat/completions', authed(key, body))
    const twins = await Promise.all([0, 1, 2].map(() => h.fetch('/v1/chat/completions', authed(key, body))))
    expect(twins.map((t) => t.headers.get('x-podgate-cache'))).toEqual(['COALESCED', 'COALESCED', 'COALESCED'])
    await Promise.all([leader, ...twins].map((r) => r.text()))
    const minute = await minuteOf(h, key)
    expect(minute.requests).toBe(4)
    // One upstream call broke after 5 tokens. The leader is charged what it produced (docs/quotas.md), and
    // the three twins spent no GPU time: the key must not be charged 4 x (prompt + 2000).
    expect(minute.tokens).toBeLessThan(2 * 2000)
  })

  it('a call whose first caller left runs on for its twin: the first key is charged the call, the twin no tokens', async () => {
    // The gateway scope: two keys share one flight, so each key's minute shows only its own charge.
    const { h, first, second } = await leaderAndTwinKeys()
    const body = chatBody('chat-current', 'leader leaves [[emulator:cold=100,tokens=9]]', { temperature: 0, max_tokens: 2000 })
    const abort = new AbortController()
    const leader = h.fetch('/v1/chat/completions', { ...authed(first.key, body), signal: abort.signal }).catch((error: unknown) => error)
    await new Promise((r) => setTimeout(r, 10))
    const twin = h.fetch('/v1/chat/completions', authed(second.key, body))
    await new Promise((r) => setTimeout(r, 10))
    abort.abort()
    await leader
    const res = await twin
    expect(res.headers.get('x-podgate-cache')).toBe('COALESCED')
    const answer = (await res.json()) as { usage: { total_tokens: number } }
    await h.settle()
    expect(await minuteOf(h, first.key)).toMatchObject({ requests: 1, tokens: answer.usage.total_tokens })
    expect(await minuteOf(h, second.key)).toMatchObject({ requests: 1, tokens: 0 })
  })

  it('a COALESCED streaming twin of a natively piped leader that hangs up while waiting is charged no tokens', async () => {
    const SERVED = 'Served-Model-8B'
    const head = `"id":"chatcmpl-up","object":"chat.completion.chunk","created":1700000000,"model":"${SERVED}"`
    const usage = { prompt_tokens: 12, completion_tokens: 9, total_tokens: 21 }
    const pieces = [
      `data: {${head},"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n`,
      `data: {${head},"choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}\n\n`,
      `data: {${head},"choices":[],"usage":${JSON.stringify(usage)}}\n\n`,
      'data: [DONE]\n\n',
    ]
    // The upstream holds its connection 300 ms after [DONE]: the flight stays open while the twin joins.
    const upstream = scriptedUpstream(() => [...pieces], { holdMs: 300 })
    const h = harness({ models: { [SERVED]: { endpoints: [{ endpointId: 'epsame' }], mode: 'openai' } }, fetch: upstream.fetch, quota: { now: () => START } })
    const { key } = await h.createKey({ name: 'piped-twin', quota: { tokensPerMinute: 1_000_000 } })
    const body = chatBody(SERVED, 'Hi', { stream: true, temperature: 0, max_tokens: 2000, stream_options: { include_usage: true } })
    const leader = await h.fetch('/v1/chat/completions', authed(key, body))
    expect(leader.headers.get('x-podgate-cache')).toBe('MISS')
    const twin = await h.fetch('/v1/chat/completions', authed(key, body))
    expect(twin.headers.get('x-podgate-cache')).toBe('COALESCED')
    await twin.body!.cancel()
    await leader.text()
    const minute = await minuteOf(h, key)
    expect(upstream.calls.length).toBe(1)
    expect(minute.requests).toBe(2)
    expect(minute.tokens).toBe(usage.total_tokens)
  })

  // A caller who leaves is told by its request's signal; its body may never be read or cancelled (it left
  // before it was answered, or the runtime does not cancel it). A twin must not wait on that body.
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
  /** Waits for the waitUntil work, or at most 2 s: a settle that waits on a body no one reads never ends. */
  const settleWithin = (h: Harness) => Promise.race([h.settle(), sleep(2_000)])
  /** A call whose caller can leave (its request's signal aborts): its answer, or what it threw. */
  const leaveable = (h: Harness, key: string, body: string) => {
    const leaving = new AbortController()
    return { answer: h.fetch('/v1/chat/completions', { ...authed(key, body), signal: leaving.signal }).catch((error: unknown) => error), leave: () => leaving.abort() }
  }
  /** The gateway scope (two keys share one flight): the leader's key and the twin's, each with these limits besides its tokens. */
  async function leaderAndTwinKeys(extra: Parameters<typeof harness>[0] = {}, quotas: { leader?: object; twin?: object } = {}) {
    const { h } = clockedHarness({ ...extra, cache: { scope: 'gateway' } })
    const first = await h.createKey({ name: 'leader', quota: { tokensPerMinute: 1_000_000, ...quotas.leader } })
    const second = await h.createKey({ name: 'twin', quota: { tokensPerMinute: 1_000_000, ...quotas.twin } })
    return { h, first, second }
  }

  it.each(['relayed live', 'piped natively'])('a COALESCED streaming twin of a leader %s whose caller left while it waited (its request aborted, its body never read) frees its stream slot, charged no tokens', async (leaderStream) => {
    const piped = leaderStream === 'piped natively'
    // A piped leader: an OpenAI-route model whose upstream holds its connection 300 ms after [DONE]. A live
    // one: a native endpoint (podgate reads the stream itself) that cold-starts for 1 s.
    const SERVED = 'Served-Model-8B'
    const chunk = `{"id":"chatcmpl-up","object":"chat.completion.chunk","created":1700000000,"model":"${SERVED}","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":"stop"}]}`
    const upstream = scriptedUpstream(() => [`data: ${chunk}\n\n`, 'data: [DONE]\n\n'], { holdMs: 300 })
    const models = piped ? { models: { [SERVED]: { endpoints: [{ endpointId: 'epsame' }], mode: 'openai' as const } }, fetch: upstream.fetch } : {}
    // The gateway scope: two keys share one flight, and the twin's key may hold one stream.
    const { h, first, second } = await leaderAndTwinKeys(models, { twin: { maxConcurrentStreams: 1 } })
    const body = chatBody(piped ? SERVED : 'chat-current', 'twin waits [[emulator:cold=1000,delay=20,tokens=6]]', { temperature: 0, max_tokens: 2000, stream: true })
    const leader = h.fetch('/v1/chat/completions', authed(first.key, body))
    if (piped) await leader
    else await sleep(20)
    const abort = new AbortController()
    const twin = h.fetch('/v1/chat/completions', { ...authed(second.key, body), signal: abort.signal })
    await sleep(20)
    abort.abort()
    await sleep(200)
    // Let go of at once, not when the leader's first event (or its end) comes.
    expect((await usageOf(h, second.key)).streams).toBe(0)
    expect((await twin).headers.get('x-podgate-cache')).toBe('COALESCED')
    await (await leader).text()
    await settleWithin(h)
    expect((await usageOf(h, second.key)).windows!.minute).toMatchObject({ requests: 1, tokens: 0 })
    const again = await chat(h, second.key, 'a stream of its own', { stream: true }, piped ? SERVED : 'chat-current')
    expect(again.status).toBe(200)
    await again.text()
  })

  // docs/caching.md: a shared call runs on for its joiners after its first caller left, but that caller's
  // stream slot is its own: it is freed at once, so a reload or a retry is not refused meanwhile.
  it.each([false, true])('a first caller who leaves a call that runs on for a twin frees its stream slot at once (strict store: %s)', async (strict) => {
    const { h, first, second } = await leaderAndTwinKeys({}, { leader: { maxConcurrentStreams: 1, strict } })
    const body = chatBody('chat-current', `the first caller leaves (strict: ${strict}) [[emulator:delay=20,tokens=40]]`, { temperature: 0, max_tokens: 2000, stream: true })
    const leaving = new AbortController()
    const leader = await h.fetch('/v1/chat/completions', { ...authed(first.key, body), signal: leaving.signal })
    const twin = await h.fetch('/v1/chat/completions', authed(second.key, body))
    expect(twin.headers.get('x-podgate-cache')).toBe('COALESCED')
    const led = await readSome(leader, 1)
    leaving.abort()
    await led.cancel()
    await sleep(50)
    expect((await usageOf(h, first.key)).streams).toBe(0)
    const again = await chat(h, first.key, 'a stream of its own', { stream: true }, 'chat-current')
    expect(again.status).toBe(200)
    await again.text()
    expect((await readSSE(twin)).at(-1)).toBe('[DONE]')
    await settleWithin(h)
    expect((await usageOf(h, first.key)).streams).toBe(0)
    // The call ran on to its end: the first key is charged it whole (and its second stream).
    expect((await usageOf(h, first.key)).windows!.minute.requests).toBe(2)
  })

  // docs/caching.md: a joiner whose caller goes away lets go at once, also while it waits for the whole answer.
  it('a COALESCED JSON twin whose caller left while it waited lets go at once: its reservation is freed, and it never asks on its own', async () => {
    const { h, first, second } = await leaderAndTwinKeys({ logCalls: true })
    const body = chatBody('chat-current', 'json twin leaves [[emulator:cold=1000,tokens=6]]', { temperature: 0, max_tokens: 2000 })
    const leader = leaveable(h, first.key, body)
    await sleep(20)
    const twin = leaveable(h, second.key, body)
    await sleep(20)
    twin.leave()
    await sleep(200)
    // Its reservation (prompt + 2000) is not held until the leader's answer comes.
    expect((await usageOf(h, second.key)).windows!.minute.tokens).toBe(0)
    // The leader's caller leaves too: a twin that let go starts no call of its own for a caller who is gone.
    leader.leave()
    await Promise.all([leader.answer, twin.answer])
    await settleWithin(h)
    expect(h.emulator.calls.filter((c) => c.op === 'run')).toHaveLength(1)
    expect((await usageOf(h, second.key)).windows!.minute).toMatchObject({ requests: 1, tokens: 0 })
    // Its call line (logCalls) says it was coalesced, though no answer (and no header) reached it.
    const lines = h.logs.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.message === 'call')
    expect(lines.find((line) => line.key_id === second.id)).toMatchObject({ cache: 'COALESCED' })
  })

  // The leader's caller leaving before its first event hands its twins the call; a twin whose caller left
  // in the same instant must not be handed it (it would queue a job for no one, then cancel it, and pay its prompt).
  it('a COALESCED streaming twin still waiting for the first event, whose caller left as the leader\'s did, starts no call of its own', async () => {
    const { h, first, second } = await leaderAndTwinKeys({}, { twin: { maxConcurrentStreams: 1 } })
    const body = chatBody('chat-current', 'both leave first [[emulator:cold=300,delay=20,tokens=6]]', { temperature: 0, max_tokens: 2000, stream: true })
    const leader = leaveable(h, first.key, body)
    await sleep(20)
    const twin = leaveable(h, second.key, body)
    await sleep(20)
    leader.leave()
    twin.leave()
    await Promise.all([leader.answer, twin.answer])
    await settleWithin(h)
    expect(h.emulator.calls.filter((c) => c.op === 'run')).toHaveLength(1)
    expect(await usageOf(h, second.key)).toMatchObject({ streams: 0, windows: { minute: { requests: 1, tokens: 0 } } })
  })

  it('a COALESCED streaming twin whose caller left mid-answer, its body unread, lets go of the shared call: with the leader gone too, the upstream job is cancelled', async () => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'both-leave', quota: { maxConcurrentStreams: 2, tokensPerMinute: 1_000_000 } })
    const body = chatBody('chat-current', 'both leave [[emulator:delay=20,tokens=400]]', { temperature: 0, max_tokens: 2000, stream: true })
    const leader = await h.fetch('/v1/chat/completions', authed(key, body))
    expect(leader.headers.get('x-podgate-cache')).toBe('MISS')
    const abort = new AbortController()
    const twin = await h.fetch('/v1/chat/completions', { ...authed(key, body), signal: abort.signal })
    expect(twin.headers.get('x-podgate-cache')).toBe('COALESCED')
    await (await readSome(leader, 1)).cancel()
    abort.abort()
    await settleWithin(h)
    expect(h.emulator.calls.filter((c) => c.op === 'cancel')).toHaveLength(1)
    expect(h.emulator.activeJobs()).toEqual([])
    expect((await usageOf(h, key)).streams).toBe(0)
  })
})

describe("a token's own quota", () => {
  it.each([false, true])("a call the key's quota refuses counts nothing against the token's own quota (strict: %s)", async (strict) => {
    const { h, advance } = clockedHarness()
    const { key } = await h.createKey({ name: 'backend', quota: { requestsPerMinute: 1, strict } })
    const minted = await h.fetch('/v1/tokens', authed(key, JSON.stringify({ quota: { requestsPerDay: 2, strict } })))
    expect(minted.status).toBe(201)
    const { token } = (await minted.json()) as { token: string }
    expect((await chat(h, key)).status).toBe(200)
    const refusal = async (credential: string) => {
      const res = await chat(h, credential)
      expect(res.status).toBe(429)
      return ((await res.json()) as { error: { message: string } }).error.message
    }
    // The key's limit refuses the token's calls: "a 429 changes nothing".
    for (let i = 0; i < 3; i++) expect(await refusal(token)).toMatch(/^Rate limit reached: 1 request per minute for this key\./)
    await h.settle()
    // The token's two requests of the day are still there, one a minute (the key's limit).
    advance(60_000)
    expect((await chat(h, token)).status).toBe(200)
    expect(await refusal(token)).toMatch(/for this key\./)
    advance(60_000)
    expect((await chat(h, token)).status).toBe(200)
    advance(60_000)
    expect(await refusal(token)).toMatch(/^Rate limit reached: 2 requests per day for this token\./)
  })

  it('GET /v1/usage called with such a token reports the limits that hold the token, not its key', async () => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'backend' })
    const minted = (await (await h.fetch('/v1/tokens', authed(key, JSON.stringify({ quota: { requestsPerMinute: 5 } })))).json()) as { id: string; token: string }
    await (await chat(h, minted.token)).text()
    await h.settle()
    expect(await usageOf(h, minted.token)).toMatchObject({
      key_id: minted.id,
      store: 'kv',
      limits: [{ name: 'rpm', limit: 5, used: 1, remaining: 4 }],
      windows: { minute: { requests: 1 } },
    })
    // A token minted without a quota of its own shares its key's, and reports it.
    const shared = (await (await h.fetch('/v1/tokens', authed(key, '{}'))).json()) as { token: string }
    expect(await usageOf(h, shared.token)).toMatchObject({ store: null, limits: [] })
  })
})

describe('native jobs (/v2)', () => {
  const job = (h: Harness, key: string, model: string, via: 'run' | 'runsync', stream: boolean, n = 1) =>
    h.fetch(`/v2/${model}/${via}`, authed(key, JSON.stringify({ input: { messages: [{ role: 'user', content: 'x [[emulator:tokens=7]]' }], sampling_params: { max_tokens: 1_000, n }, stream } })))

  /** What the job's output reports it cost: classic items' usage, vLLM's JSON, or the usage chunk in its SSE text. */
  function reported(output: unknown[]): number {
    const last = output.at(-1)
    type Counts = { input?: number; output?: number; total_tokens?: number }
    const usage = typeof last === 'string' ? (JSON.parse(/"usage":(\{[^}]*\})/.exec(output.join(''))![1]!) as Counts) : (last as { usage: Counts }).usage
    return usage.total_tokens ?? usage.input! + usage.output!
  }

  /**
   * A chat-classic /runsync over `upstream` (its job ending `status`) and the same call on the OpenAI surface
   * (its answer's status checked by `answered`) each cost one request and no token.
   */
  async function noTokenOnEitherSurface(upstream: typeof fetch, status: string, answered: (status: number) => void) {
    const { h } = clockedHarness({ fetch: upstream })
    const keys = await Promise.all(['v2', 'openai'].map((name) => h.createKey({ name, quota: { tokensPerMinute: 1_000_000 } })))
    const res = await job(h, keys[0]!.key, 'chat-classic', 'runsync', false)
    expect(res.status).toBe(200)
    expect(((await res.json()) as { status: string }).status).toBe(status)
    const openai = await chat(h, keys[1]!.key, 'x', { max_tokens: 1_000 }, 'chat-classic')
    answered(openai.status)
    await openai.text()
    expect(await minuteOf(h, keys[1]!.key)).toMatchObject({ requests: 1, tokens: 0 })
    expect(await minuteOf(h, keys[0]!.key)).toMatchObject({ requests: 1, tokens: 0 })
  }

  // Found in the accounting review: a COMPLETED /runsync had its output and usage in hand and still kept
  // the whole reservation (prompt estimate + max_tokens × n), as a /run, whose result podgate never sees, does.
  it.each([
    ['chat-classic', false, 1],
    ['chat-classic', true, 2],
    ['chat-current', false, 2],
  ] as const)('a COMPLETED %s /runsync (stream %s, n %s) settles from the usage in its output', async (model, stream, n) => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'sync', quota: { tokensPerMinute: 1_000_000 } })
    const answer = (await (await job(h, key, model, 'runsync', stream, n)).json()) as { status: string; output: unknown[] }
    expect(answer.status).toBe('COMPLETED')
    expect(await minuteOf(h, key)).toMatchObject({ requests: 1, tokens: reported(answer.output) })
  })

  // Found in the accounting review: a /run kept its whole reservation (prompt estimate + max_tokens × n)
  // whatever its job used, so a runpod-sdk caller (run, then poll) was charged max_tokens for every job.
  describe.each(['kv', 'strict'] as const)('a /run job polled to its end (%s)', (store) => {
    async function runJob(content = 'x [[emulator:tokens=20]]') {
      const { h } = clockedHarness()
      const { key } = await h.createKey({ name: 'run', quota: { tokensPerMinute: 1_000_000, strict: store === 'strict' } })
      const res = await h.fetch('/v2/chat-classic/run', authed(key, JSON.stringify({ input: { messages: [{ role: 'user', content }], sampling_params: { max_tokens: 500 } } })))
      const { id } = (await res.json()) as { id: string }
      expect((await minuteOf(h, key)).tokens).toBeGreaterThan(500)
      /** Polls `op` until the job ends; its output (a stream's items'), and the key's minute after. */
      const poll = async (op: 'status' | 'stream') => {
        for (;;) {
          const job = (await (await h.fetch(`/v2/chat-classic/${op}/${id}`, authed(key))).json()) as { status: string; output?: unknown[]; stream?: { output: unknown }[] }
          if (job.status !== 'IN_QUEUE' && job.status !== 'IN_PROGRESS') return { job, output: job.output ?? job.stream?.map((item) => item.output) ?? [], minute: await minuteOf(h, key) }
        }
      }
      return { poll }
    }

    it.each(['status', 'stream'] as const)('is charged the usage its job reports at its first terminal %s poll, once', async (op) => {
      const { poll } = await runJob()
      const first = await poll(op)
      expect(first.job.status).toBe('COMPLETED')
      expect(first.minute).toMatchObject({ requests: 1, tokens: reported(first.output) })
      expect(first.minute.tokens).toBeLessThan(100)
      for (const again of ['status', 'stream', 'status'] as const) expect((await poll(again)).minute).toEqual(first.minute)
    })

    it('a job that ended FAILED is refunded its tokens at its first terminal poll, as a FAILED /runsync is', async () => {
      const { poll } = await runJob('x [[emulator:fault=job_failed]]')
      const first = await poll('status')
      expect(first.job.status).toBe('FAILED')
      expect(first.minute).toMatchObject({ requests: 1, tokens: 0 })
      expect((await poll('stream')).minute).toEqual(first.minute)
    })

    // Found in review of the correction: a poll corrected the counters of whoever polled, so a token with a
    // quota of its own polling its key's job was refunded tokens it never reserved, and the key polling the
    // token's job corrected the key's counter but never the token's.
    it("corrects the counters its submission charged: a key's job whoever of the key polls, a token's own only when that token polls", async () => {
      const { h } = clockedHarness()
      const strict = store === 'strict'
      const { key } = await h.createKey({ name: 'run', quota: { tokensPerMinute: 1_000_000, strict } })
      const minted = await h.fetch('/v1/tokens', authed(key, JSON.stringify({ quota: { tokensPerMinute: 1_000_000, strict } })))
      const { token } = (await minted.json()) as { token: string }
      const other = (await h.createKey({ name: 'other' })).key
      const run = async (credential: string) => {
        const res = await h.fetch('/v2/chat-classic/run', authed(credential, JSON.stringify({ input: { messages: [{ role: 'user', content: 'x [[emulator:tokens=20]]' }], sampling_params: { max_tokens: 500 } } })))
        return ((await res.json()) as { id: string }).id
      }
      const [byKey, byToken] = [await run(key), await run(token)]
      const reserved = (await minuteOf(h, token)).tokens
      expect(await minuteOf(h, key)).toMatchObject({ requests: 2, tokens: 2 * reserved })
      /** Polls the job as `credential` until it ends; its usage. */
      const poll = async (credential: string, id: string) => {
        for (;;) {
          const job = (await (await h.fetch(`/v2/chat-classic/status/${id}`, authed(credential))).json()) as { status: string; output: unknown[] }
          if (job.status === 'COMPLETED') return reported(job.output)
        }
      }
      const counts = async () => [await minuteOf(h, key), await minuteOf(h, token)]
      // Another key's poll of the id is a 404 and corrects nothing.
      expect((await h.fetch(`/v2/chat-classic/status/${byKey}`, authed(other))).status).toBe(404)
      // The key's job, polled by the token (twice at once, then by the key): only the key's counter, once.
      const [used] = await Promise.all([poll(token, byKey), poll(token, byKey)])
      await poll(key, byKey)
      expect(await counts()).toMatchObject([{ requests: 2, tokens: reserved + used! }, { requests: 1, tokens: reserved }])
      // The token's job, polled by its key: nothing (the token's own counter is not the key's to correct).
      await poll(key, byToken)
      expect(await counts()).toMatchObject([{ requests: 2, tokens: reserved + used! }, { requests: 1, tokens: reserved }])
      // Polled by the token: both counters its run charged, once.
      const usedByToken = await poll(token, byToken)
      await poll(token, byToken)
      expect(await counts()).toMatchObject([{ requests: 2, tokens: used! + usedByToken }, { requests: 1, tokens: usedByToken }])
    })
  })

  // Found in the token accounting review: a /runsync that answered FAILED kept its whole reservation (prompt
  // estimate + max_tokens × n), while the same failed job on the OpenAI surface is refunded every token.
  it.each(['chat-current', 'chat-classic'])('a FAILED %s /runsync is refunded its tokens, as the same failure on the OpenAI surface is', async (model) => {
    const { h } = clockedHarness()
    const keys = await Promise.all(['v2', 'openai'].map((name) => h.createKey({ name, quota: { tokensPerMinute: 1_000_000 } })))
    const content = 'x [[emulator:fault=job_failed]]'
    const res = await h.fetch(`/v2/${model}/runsync`, authed(keys[0]!.key, JSON.stringify({ input: { messages: [{ role: 'user', content }], sampling_params: { max_tokens: 1_000 } } })))
    expect(res.status).toBe(200)
    expect(((await res.json()) as { status: string }).status).toBe('FAILED')
    const openai = await chat(h, keys[1]!.key, content, { max_tokens: 1_000 }, model)
    expect(openai.status).toBeGreaterThanOrEqual(500)
    await openai.text()
    expect(await minuteOf(h, keys[1]!.key)).toMatchObject({ requests: 1, tokens: 0 })
    expect(await minuteOf(h, keys[0]!.key)).toMatchObject({ requests: 1, tokens: 0 })
  })

  // Found in the token accounting review: a /runsync that ended TIMED_OUT (in the queue, where it never ran,
  // or past its execution timeout) or CANCELLED (by an operator or Runpod) kept its whole reservation (prompt
  // estimate + max_tokens × n), while the same job behind the OpenAI surface answers 504/502 and costs no token.
  it.each([
    ['TIMED_OUT in the queue', { status: 'TIMED_OUT' }],
    ['TIMED_OUT after it ran', { status: 'TIMED_OUT', executionTime: 300, workerId: 'w1' }],
    ['CANCELLED', { status: 'CANCELLED', executionTime: 300, workerId: 'w1' }],
  ])('a /runsync that ended %s costs no token, as the same job on the OpenAI surface does', async (_, end) => {
    const upstream = (async (input: RequestInfo | URL) => {
      const op = new URL(input instanceof Request ? input.url : input).pathname.split('/')[3]
      return Response.json(op === 'run' ? { id: 'j1', status: 'IN_QUEUE' } : { id: 'j1', ...end })
    }) as typeof fetch
    await noTokenOnEitherSurface(upstream, end.status, (status) => expect(status).toBeGreaterThanOrEqual(502))
  })

  // Found in the token accounting review: a current worker's streamed job whose vLLM stream broke with an error
  // event after some tokens ends COMPLETED, its output podgate's decoder refuses: it kept the whole reservation,
  // while the same stream behind the OpenAI surface is charged the prompt estimate plus the tokens counted.
  it('a COMPLETED /runsync whose output breaks off with an error is charged the prompt estimate and the tokens counted', async () => {
    const { h } = clockedHarness()
    const keys = await Promise.all(['v2', 'openai'].map((name) => h.createKey({ name, quota: { tokensPerMinute: 1_000_000 } })))
    const content = 'x [[emulator:fault=error_event,after=3]]'
    const res = await h.fetch('/v2/chat-current/runsync', authed(keys[0]!.key, JSON.stringify({ input: { messages: [{ role: 'user', content }], sampling_params: { max_tokens: 1_000 }, stream: true } })))
    const answer = (await res.json()) as { status: string; output: unknown[] }
    expect(answer.status).toBe('COMPLETED')
    expect(JSON.stringify(answer.output)).toContain('error')
    await (await chat(h, keys[1]!.key, content, { max_tokens: 1_000, stream: true }, 'chat-current')).text()
    const openai = (await minuteOf(h, keys[1]!.key)).tokens
    expect(openai).toBeLessThan(100)
    expect((await minuteOf(h, keys[0]!.key)).tokens).toBe(openai)
  })

  // docs/quotas.md: a cancel or an event stream corrects no /run reservation (an event stream costs a request,
  // no token); the first terminal status poll does: a CANCELLED job then costs no token, a COMPLETED one its usage.
  it('a /run keeps its reservation through a cancel or an event stream, and its first terminal status poll corrects it (cancelled in the queue: no token)', async () => {
    const { h } = clockedHarness()
    const keys = await Promise.all(['cancelled', 'followed'].map((name) => h.createKey({ name, quota: { tokensPerMinute: 1_000_000 } })))
    const started = await Promise.all(keys.map(async ({ key }, i) => {
      const body = { input: { messages: [{ role: 'user', content: `x${i} [[emulator:tokens=7,${i === 0 ? 'cold=5000' : 'delay=1'}]]` }], sampling_params: { max_tokens: 1_000 } } }
      return ((await (await h.fetch('/v2/chat-classic/run', authed(key, JSON.stringify(body)))).json()) as { id: string }).id
    }))
    const reserved = await Promise.all(keys.map(async ({ key }) => (await minuteOf(h, key)).tokens))
    expect(Math.min(...reserved)).toBeGreaterThan(1_000)
    const cancelled = await h.fetch(`/v2/chat-classic/cancel/${started[0]}`, { method: 'POST', headers: { authorization: `Bearer ${keys[0]!.key}` } })
    expect(((await cancelled.json()) as { status: string }).status).toBe('CANCELLED')
    const events = await (await h.fetch(`/v2/chat-classic/stream/${started[1]}`, { headers: { authorization: `Bearer ${keys[1]!.key}`, accept: 'text/event-stream' } })).text()
    expect(events).toContain('"usage"')
    expect(await minuteOf(h, keys[0]!.key)).toMatchObject({ requests: 1, tokens: reserved[0] })
    expect(await minuteOf(h, keys[1]!.key)).toMatchObject({ requests: 2, tokens: reserved[1] })
    const polls = await Promise.all(keys.map(async ({ key }, i) => (await (await h.fetch(`/v2/chat-classic/status/${started[i]}`, authed(key))).json()) as { status: string; output: unknown[] }))
    expect(polls.map((p) => p.status)).toEqual(['CANCELLED', 'COMPLETED'])
    expect(await minuteOf(h, keys[0]!.key)).toMatchObject({ requests: 1, tokens: 0 })
    expect(await minuteOf(h, keys[1]!.key)).toMatchObject({ requests: 2, tokens: reported(polls[1]!.output) })
  })

  // Found in the final review: a caller read a /run job's output (JSON `stream` pages, or an event stream), then
  // cancelled it (or let its own `policy.executionTimeout` stop it) before it ended: its first terminal status
  // poll refunded every token, so output could be had free, past any token limit. A job that ran keeps its reservation.
  it.each([['cancel', 'CANCELLED'], ['executionTimeout', 'TIMED_OUT']] as const)('a /run job whose output was read and that then ended by %s keeps its reservation', async (how, ended) => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'run', quota: { tokensPerMinute: 1_000_000 } })
    const body = { input: { messages: [{ role: 'user', content: 'x [[emulator:tokens=400,delay=20]]' }], sampling_params: { max_tokens: 500 }, stream: true }, policy: how === 'cancel' ? undefined : { executionTimeout: 5_000 } }
    const { id } = (await (await h.fetch('/v2/chat-classic/run', authed(key, JSON.stringify(body)))).json()) as { id: string }
    const reserved = await minuteOf(h, key)
    let read = 0
    while (read < 3) {
      const page = (await (await h.fetch(`/v2/chat-classic/stream/${id}`, authed(key))).json()) as { stream: unknown[] }
      read += page.stream.length
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    if (how === 'cancel') expect((await h.fetch(`/v2/chat-classic/cancel/${id}`, { method: 'POST', headers: { authorization: `Bearer ${key}` } })).status).toBe(200)
    let status = ''
    while (status === '' || status === 'IN_PROGRESS') status = ((await (await h.fetch(`/v2/chat-classic/status-sync/${id}?wait=10000`, authed(key))).json()) as { status: string }).status
    expect(status).toBe(ended)
    expect(await minuteOf(h, key)).toEqual(reserved)
  })

  it('a COMPLETED /runsync whose output reports no usage is charged the prompt estimate and the tokens counted, as on the OpenAI surface', async () => {
    // A current worker's shorthand stream (no usage chunk: its body asks for none), and classic items without `usage`.
    const { h } = clockedHarness()
    const keys = await Promise.all(['current', 'run'].map((name) => h.createKey({ name, quota: { tokensPerMinute: 1_000_000 } })))
    const answer = (await (await job(h, keys[0]!.key, 'chat-current', 'runsync', true)).json()) as { status: string; output: unknown[] }
    expect(answer.status).toBe('COMPLETED')
    expect(JSON.stringify(answer.output)).not.toContain('usage')
    expect((await job(h, keys[1]!.key, 'chat-current', 'run', true)).status).toBe(200)
    const prompt = (await minuteOf(h, keys[1]!.key)).tokens - 1_000
    expect((await minuteOf(h, keys[0]!.key)).tokens).toBe(prompt + 7)
  })

  it('a /runsync whose output is not an answer podgate reads is charged its prompt estimate; one still running keeps the reservation of a /run', async () => {
    // Output of no shape podgate knows; then a job the wait left IN_PROGRESS.
    // The wait runs out at once, and again on each status-sync podgate asks for the rest of it.
    const runsync = [{ id: 'j1', status: 'COMPLETED', output: [{ image: 'a.png' }] }, { id: 'j2', status: 'IN_PROGRESS' }]
    const upstream = (async (input: RequestInfo | URL) => {
      const op = new URL(input instanceof Request ? input.url : input).pathname.split('/')[3]
      return Response.json(op === 'runsync' ? runsync.shift() : op === 'run' ? { id: 'j3', status: 'IN_QUEUE' } : { id: 'j2', status: 'IN_PROGRESS' })
    }) as typeof fetch
    const { h } = clockedHarness({ fetch: upstream })
    const keys = await Promise.all(['bare', 'running', 'run'].map((name) => h.createKey({ name, quota: { tokensPerMinute: 1_000_000 } })))
    for (const [i, via] of (['runsync', 'runsync', 'run'] as const).entries()) expect((await job(h, keys[i]!.key, 'chat-classic', via, false)).status).toBe(200)
    const reservation = (await minuteOf(h, keys[2]!.key)).tokens
    expect(reservation).toBeGreaterThan(1_000)
    // It ran on a GPU: the prompt is what podgate can count of it (the token accounting review).
    expect((await minuteOf(h, keys[0]!.key)).tokens).toBe(reservation - 1_000)
    expect((await minuteOf(h, keys[1]!.key)).tokens).toBe(reservation)
  })

  // A worker on runpod-python before 1.7.6 keeps vLLM's refusal as an item of a COMPLETED job's output (a later
  // one fails the job): it cost the prompt estimate on /runsync, while the OpenAI surface answers it as the
  // caller's 400 and charges no token.
  it.each([
    ['current', { error: { message: 'vLLM returned HTTP 400: {"error":{"message":"max_tokens is too large","type":"BadRequestError","param":null,"code":400}}', type: 'worker_error', code: null } }],
    ['classic', { error: { message: 'This model\'s maximum context length is 4096 tokens.', type: 'BadRequestError', param: null, code: 400 } }],
  ])('a COMPLETED /runsync whose output is vLLM\'s refusal (%s worker) costs no token, as on the OpenAI surface', async (_, item) => {
    const upstream = (async () => Response.json({ id: 'j1', status: 'COMPLETED', output: [item] })) as typeof fetch
    await noTokenOnEitherSurface(upstream, 'COMPLETED', (status) => expect(status).toBe(400))
  })

  it('a COMPLETED classic /runsync whose items carry no usage is charged the prompt estimate and the tokens counted', async () => {
    const upstream = (async () => Response.json({ id: 'j1', status: 'COMPLETED', output: [{ choices: [{ tokens: ['hi', ' there'] }] }] })) as typeof fetch
    const { h } = clockedHarness({ fetch: upstream })
    const { key } = await h.createKey({ name: 'bare', quota: { tokensPerMinute: 1_000_000 } })
    expect((await job(h, key, 'chat-classic', 'runsync', false)).status).toBe(200)
    const { tokens } = await minuteOf(h, key)
    expect(tokens).toBeGreaterThan(2)
    expect(tokens).toBeLessThan(1_000)
  })
})

describe('policy layers', () => {
  it('key limits win over model defaults, which win over gateway defaults', async () => {
    const models = { ...MODELS, 'chat-openai': { ...MODELS['chat-openai']!, quota: { requestsPerMinute: 1 } } }
    const { h } = clockedHarness({ models, quota: { defaults: { requestsPerMinute: 3 } } })
    const { key } = await h.createKey({ name: 'defaults' })
    expect((await chat(h, key)).status).toBe(200)
    expect((await chat(h, key)).status).toBe(429)
    expect((await chat(h, key, 'hi', {}, 'chat-classic')).status).toBe(200)
    expect((await chat(h, key, 'hi', {}, 'chat-classic')).status).toBe(200)
    expect((await chat(h, key, 'hi', {}, 'chat-classic')).status).toBe(429)
    const own = await h.createKey({ name: 'own', quota: { requestsPerMinute: 10 } })
    expect((await chat(h, own.key)).status).toBe(200)
    expect((await chat(h, own.key)).status).toBe(200)
  })

  it('uses the strict store gateway-wide when configured', async () => {
    const { h } = clockedHarness({ quota: { store: 'strict', defaults: { requestsPerDay: 2 } } })
    const { id, key } = await h.createKey({ name: 'q' })
    expect((await usageOf(h, key)).store).toBe('strict')
    expect((await chat(h, key)).status).toBe(200)
    expect((await chat(h, key)).status).toBe(200)
    expect((await chat(h, key)).status).toBe(429)
    // The decision lives in the key's Durable Object, not in this isolate: another gateway over the
    // same namespace (another isolate) is refused too.
    const other = clockedHarness({ quota: { store: 'strict', defaults: { requestsPerDay: 2 } } }).h
    const ids = await listDurableObjectIds(env.PODGATE_QUOTA)
    expect(ids.some((objectId) => objectId.equals(env.PODGATE_QUOTA.idFromName(id)))).toBe(true)
    expect((await chat(other, key)).status).toBe(429)
  })

  // The Worker refuses this at startup (optionsFromEnv). A library gateway took calls, an admin created keys,
  // and then every call a quota counted (every control call too) was a 500.
  it.each([{ store: 'strict' as const }, { defaults: { strict: true } }])('a strict quota (%o) with no Durable Object bound refuses every call, naming the binding in its log line', async (quota) => {
    const h = harness({ quota })
    const unbound = { ...env, PODGATE_QUOTA: undefined }
    const refused = [
      await h.app.request('/healthz', {}, unbound),
      await h.app.request('/admin/keys', { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }, body: '{"name":"k"}' }, unbound),
      await h.app.request('/v1/chat/completions', authed('pg_sk_unknown', chatBody('chat-openai')), unbound),
    ]
    expect(refused.map((r) => r.status)).toEqual([500, 500, 500])
    expect(await refused[2]!.json()).toMatchObject({ error: { code: 'internal_error' } })
    expect(h.logs.filter((line) => line.includes('bind QuotaObject as PODGATE_QUOTA'))).toHaveLength(3)
    // Bound, the same gateway serves.
    expect((await h.app.request('/healthz', {}, env)).status).toBe(200)
  })

  // Found in the quota review: a model's `strict` picked the store of the calls to that model only, so a
  // key's calls were counted in two stores, each to the whole limit: 2 requests a minute let 4 through.
  it.each([
    ['kv', true],
    ['strict', false],
  ] as const)("a key's calls to every model share one counter, whatever a model's quota says of strict (store %s, model strict: %s)", async (store, strict) => {
    const models = { ...MODELS, 'chat-openai': { ...MODELS['chat-openai']!, quota: { strict } } }
    const { h } = clockedHarness({ models, quota: { store } })
    const { key } = await h.createKey({ name: 'both', quota: { requestsPerMinute: 2 } })
    expect((await chat(h, key)).status).toBe(200)
    expect((await chat(h, key, 'hi', {}, 'chat-classic')).status).toBe(200)
    expect((await chat(h, key)).status).toBe(429)
    expect((await chat(h, key, 'hi', {}, 'chat-classic')).status).toBe(429)
    expect(await usageOf(h, key)).toMatchObject({ store, windows: { minute: { requests: 2 } } })
  })

  it("a key's control calls to every model share one counter, whatever a model's quota says of strict", async () => {
    const models = { ...MODELS, 'chat-current': { ...MODELS['chat-current']!, quota: { strict: true } } }
    const { h } = clockedHarness({ models })
    const { key } = await h.createKey({ name: 'polls', quota: { controlPerMinute: 2 } })
    const health = (model: string) => h.fetch(`/v2/${model}/health`, { headers: { authorization: `Bearer ${key}` } })
    expect((await health('chat-current')).status).toBe(200)
    expect((await health('chat-classic')).status).toBe(200)
    expect((await health('chat-current')).status).toBe(429)
    expect((await health('chat-classic')).status).toBe(429)
  })

  it('costs no KV access and sends no rate-limit headers when no limit applies', async () => {
    const recorded = recordingKv(env.PODGATE_KV, Date.now)
    const h = harness({ kv: () => recorded.kv })
    const { key } = await h.createKey({ name: 'free' })
    const lists = recorded.stats.lists
    for (let i = 0; i < 3; i++) {
      const res = await chat(h, key)
      expect(res.status).toBe(200)
      expect(res.headers.get('ratelimit')).toBeNull()
      await res.text()
    }
    await h.settle()
    expect(recorded.stats.lists).toBe(lists)
    expect([...recorded.stats.puts.keys()].filter((k) => k.startsWith('quota:'))).toEqual([])
    expect(await usageOf(h, key)).toMatchObject({ store: null, limits: [], windows: null })
  })
})

describe('KV failures', () => {
  it('quota counter writes KV refuses (its daily write limit) are logged, once per flush, and the answer is unaffected', async () => {
    const kv = env.PODGATE_KV
    const failing = new Proxy(kv, {
      get(target, name) {
        if (name === 'put') return (key: string, ...rest: unknown[]) => (key.startsWith('quota:') ? Promise.reject(new Error('KV put() limit exceeded for the day.')) : kv.put(key, ...(rest as [string])))
        const value = Reflect.get(target, name) as unknown
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value
      },
    })
    const h = harness({ kv: () => failing })
    const { key } = await h.createKey({ name: 'limited', quota: { requestsPerMinute: 10 } })
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai')))
    expect(res.status).toBe(200)
    await h.settle()
    // Without a line the store would silently count per isolate only, for the rest of the day. One line
    // per flush (the admission's, then its settle's retry), not one per counter (minute and day).
    const lines = h.logs.map((line) => JSON.parse(line) as unknown)
    expect(lines.length).toBeGreaterThanOrEqual(1)
    expect(lines.length).toBeLessThanOrEqual(2)
    for (const line of lines) expect(line).toMatchObject({ level: 'error', message: expect.stringMatching(/quota/), cause: expect.stringContaining('limit exceeded for the day') })
  })
})

describe('usage API', () => {
  it('GET /v1/usage reports windows, limits and remaining for the calling key', async () => {
    const { h } = clockedHarness()
    const { key } = await h.createKey({ name: 'q', quota: { requestsPerMinute: 5, tokensPerDay: 1000 } })
    await (await chat(h, key)).text()
    await h.settle()
    const report = await usageOf(h, key)
    expect(report.store).toBe('kv')
    expect(report.limits[0]).toEqual({ name: 'rpm', limit: 5, used: 1, remaining: 4, reset_seconds: 50, window_seconds: 60 })
    expect(report.limits[1]).toMatchObject({ name: 'tpd', limit: 1000, window_seconds: 86_400 })
  })

  it("a key limited only by a model's quota is counted on that model's calls, but its usage names no limit", async () => {
    const models = { ...MODELS, 'chat-openai': { ...MODELS['chat-openai']!, quota: { requestsPerMinute: 1 } } }
    const { h } = clockedHarness({ models })
    const { key } = await h.createKey({ name: 'model-only' })
    expect((await chat(h, key)).status).toBe(200)
    expect((await chat(h, key)).status).toBe(429)
    expect(await usageOf(h, key)).toMatchObject({ store: null, policy: null, limits: [], windows: null })
  })

  it('GET /admin/keys/:id/usage reports any key to operators only', async () => {
    const { h } = clockedHarness()
    const { id, key } = await h.createKey({ name: 'q', quota: { requestsPerMinute: 5, strict: true } })
    await (await chat(h, key)).text()
    await h.settle()
    const admin = { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } }
    const res = await h.fetch(`/admin/keys/${id}/usage`, admin)
    expect(res.status).toBe(200)
    expect(await res.json()).toMatchObject({ key_id: id, store: 'strict', windows: { minute: { requests: 1 } } })
    expect((await h.fetch(`/admin/keys/key_0000000000000000/usage`, admin)).status).toBe(404)
    expect((await h.fetch(`/admin/keys/${id}/usage`, authed(key))).status).toBeGreaterThanOrEqual(401)
    expect((await h.fetch(`/admin/keys/${id}/usage`)).status).toBeGreaterThanOrEqual(401)
  })
})

describe('the deployable Worker', () => {
  it('enforces a strict quota through the PODGATE_QUOTA Durable Object binding from wrangler.toml', async () => {
    const { exports } = await import('cloudflare:workers')
    const worker = (exports as unknown as { default: Fetcher }).default
    const created = await worker.fetch('http://podgate/admin/keys', {
      method: 'POST',
      headers: { authorization: `Bearer ${env.PODGATE_ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'worker-quota', quota: { requestsPerDay: 2, strict: true } }),
    })
    expect(created.status).toBe(201)
    const { key } = (await created.json()) as { key: string }
    const statuses: number[] = []
    for (let i = 0; i < 3; i++) {
      const res = await worker.fetch('http://podgate/v1/chat/completions', authed(key, chatBody('chat-openai', 'hi', { max_tokens: 8 })))
      await res.text()
      statuses.push(res.status)
    }
    expect(statuses).toEqual([200, 200, 429])
  })
})
