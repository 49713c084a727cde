/**
 * Bad input and upstream faults: each gets OpenAI's error JSON with the right status, code and param,
 * reaches no upstream, and writes nothing.
 */
import { createExecutionContext, env } from 'cloudflare:test'
import { Hono } from 'hono'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { createRunpodEmulator } from '../src/testing/index.ts'
import { authed, chatBody, harness, MODEL_NAMES, MODELS, readSome, readSSE, RUNPOD_KEY, scriptedUpstream } from './helpers.ts'
import type { Harness } from './helpers.ts'

interface OpenAIError {
  error: { message: string; type: string; param: string | null; code: string }
}

async function kvKeys(): Promise<string[]> {
  return (await env.PODGATE_KV.list()).keys.map((k) => k.name).sort()
}

describe('bad input', () => {
  const cases: [string, () => RequestInit | ((key: string) => RequestInit), number, string, string | null][] = [
    ['non-JSON body', () => (key: string) => authed(key, '{"model": "chat-openai", '), 400, 'invalid_json', null],
    ['JSON array body', () => (key: string) => authed(key, '[]'), 400, 'invalid_request', null],
    ['unknown model', () => (key: string) => authed(key, chatBody('no-such-model')), 404, 'model_not_found', 'model'],
    ['missing model', () => (key: string) => authed(key, JSON.stringify({ messages: [{ role: 'user', content: 'x' }] })), 400, 'invalid_request', 'model'],
    ['wrong message type', () => (key: string) => authed(key, JSON.stringify({ model: 'chat-openai', messages: [{ role: 'user', content: 42 }] })), 400, 'invalid_request', 'messages[0].content'],
    ['temperature out of range', () => (key: string) => authed(key, chatBody('chat-openai', 'x', { temperature: -0.5 })), 400, 'invalid_request', 'temperature'],
    ['max_tokens over the cap', () => (key: string) => authed(key, chatBody('chat-openai', 'x', { max_tokens: 1_000_000 })), 400, 'invalid_request', 'max_tokens'],
    ['content part of the wrong type', () => (key: string) => authed(key, JSON.stringify({ model: 'chat-openai', messages: [{ role: 'user', content: [42] }] })), 400, 'invalid_request', 'messages[0].content[0]'],
    ['body over the limit', () => (key: string) => authed(key, chatBody('chat-openai', 'x'.repeat(10 * 1024 * 1024 + 10))), 413, 'payload_too_large', null],
  ]

  it.each(cases)('%s', async (_name, make, status, code, param) => {
    const h = harness()
    const { key } = await h.createKey()
    const before = await kvKeys()
    const init = make()
    const res = await h.fetch('/v1/chat/completions', typeof init === 'function' ? init(key) : init)
    expect(res.status).toBe(status)
    expect(res.headers.get('content-type')).toMatch(/application\/json/)
    const body = (await res.json()) as OpenAIError
    expect(body.error.code).toBe(code)
    expect(body.error.param).toBe(param)
    expect(body.error.message.length).toBeGreaterThan(10)
    expect(h.emulator.calls).toEqual([])
    expect(await kvKeys()).toEqual(before)
  })

  it('a missing or unknown key gets 401 with WWW-Authenticate and reaches no upstream', async () => {
    const h = harness()
    const missing = await h.fetch('/v1/chat/completions', { method: 'POST', body: chatBody('chat-openai') })
    expect(missing.status).toBe(401)
    expect(missing.headers.get('www-authenticate')).toMatch(/^Bearer/)
    expect(((await missing.json()) as OpenAIError).error.code).toBe('missing_api_key')
    const unknown = await h.fetch('/v1/chat/completions', authed('pg_sk_' + 'A'.repeat(32), chatBody('chat-openai')))
    expect(unknown.status).toBe(401)
    expect(((await unknown.json()) as OpenAIError).error.type).toBe('authentication_error')
    expect(h.emulator.calls).toEqual([])
  })

  it('the openai client surfaces errors as APIError subclasses with the status', async () => {
    const h = harness()
    const { key } = await h.createKey()
    const openai = new OpenAI({ apiKey: key, baseURL: 'http://podgate/v1', fetch: h.clientFetch, maxRetries: 0 })
    await expect(openai.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] })).rejects.toBeInstanceOf(OpenAI.NotFoundError)
    await expect(openai.chat.completions.create({ model: 'chat-openai', messages: [{ role: 'user', content: 'x' }], temperature: -1 })).rejects.toBeInstanceOf(OpenAI.BadRequestError)
    const bad = new OpenAI({ apiKey: 'pg_sk_nope', baseURL: 'http://podgate/v1', fetch: h.clientFetch, maxRetries: 0 })
    await expect(bad.models.list()).rejects.toBeInstanceOf(OpenAI.AuthenticationError)
  })

  it('unknown routes answer 404 in OpenAI format', async () => {
    const h = harness()
    const res = await h.fetch('/v1/nope')
    expect(res.status).toBe(401) // auth runs first on /v1/*: no route is revealed to unauthenticated callers
    const other = await h.fetch('/elsewhere')
    expect(other.status).toBe(404)
    expect(((await other.json()) as OpenAIError).error.code).toBe('not_found')
  })

  it('a route followed by a slash is no route (404), as on Hono\'s default router', async () => {
    const h = harness()
    const { key } = await h.createKey()
    expect((await h.fetch('/healthz/')).status).toBe(404)
    const models = await h.fetch('/v1/models/', authed(key))
    expect(models.status).toBe(404)
    expect(((await models.json()) as OpenAIError).error.code).toBe('not_found')
    const job = await h.fetch('/v2/chat-current/stream/some-job/?access_token=x', { headers: { accept: 'text/event-stream' } })
    expect(job.status).toBe(404)
    expect(await job.json()).toMatchObject({ code: 'not_found' })
    expect((await h.fetch('/healthz')).status).toBe(200)
    // Still a CORS answer, so a page can read the 404.
    const fromPage = await h.fetch('/v1/models/', { headers: { origin: 'https://app.example' } })
    expect(fromPage.status).toBe(404)
    expect(fromPage.headers.get('access-control-allow-origin')).toBe('https://app.example')
    // Only podgate's own paths: a host app's route beside the mounted gateway is the host's.
    const host = new Hono()
    host.route('/', h.app)
    host.get('/docs/', (c) => c.text('host docs'))
    expect(await (await host.fetch(new Request('http://host/docs/'), env, createExecutionContext())).text()).toBe('host docs')
  })
})

describe('upstream faults', () => {
  it.each(MODEL_NAMES)('%s: an upstream 500 becomes a 502 with no upstream detail', async (model) => {
    const h = harness()
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'x [[emulator:fault=http,status=500]]')))
    expect(res.status).toBe(502)
    const body = (await res.json()) as OpenAIError
    expect(body.error.code).toBe('upstream_error')
    expect(JSON.stringify(body)).not.toMatch(/emulator\.test|vllm|rp_test/)
  })

  it.each(MODEL_NAMES)('%s: an upstream 429 becomes a 429, logged for the operator (a capacity signal: Runpod limits podgate)', async (model) => {
    const h = harness()
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'x [[emulator:fault=http,status=429]]')))
    expect(res.status).toBe(429)
    expect(((await res.json()) as OpenAIError).error.code).toBe('upstream_rate_limited')
    expect(h.logs.map((line) => JSON.parse(line) as unknown)).toEqual([
      expect.objectContaining({ level: 'error', request_id: res.headers.get('x-request-id'), status: 429, path: 'POST /v1/chat/completions', model, code: 'upstream_rate_limited' }),
    ])
  })

  it('a caller over its own quota (a 429 of podgate\'s) writes no log line', async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'one', quota: { requestsPerMinute: 1 } })
    expect((await h.fetch('/v1/chat/completions', authed(key, chatBody(MODEL_NAMES[0]!, 'x')))).status).toBe(200)
    expect((await h.fetch('/v1/chat/completions', authed(key, chatBody(MODEL_NAMES[0]!, 'x')))).status).toBe(429)
    await h.settle()
    expect(h.logs).toEqual([])
  })

  it.each(MODEL_NAMES)('%s: an upstream that refuses podgate\'s credentials is a 502 whose log line names the endpoint\'s path', async (model) => {
    const h = harness()
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'x [[emulator:fault=http,status=401]]')))
    expect(res.status).toBe(502)
    expect(((await res.json()) as OpenAIError).error.message).toMatch(/RUNPOD_API_KEY/)
    // Which endpoint's credential is wrong: the upstream path, never the key.
    const endpoint = MODELS[model]!.endpoints[0]!
    expect(h.logs).toEqual([expect.stringContaining(`upstream HTTP 401 at /v2/${'endpointId' in endpoint ? endpoint.endpointId : ''}/`)])
  })

  it('a /run whose connection broke logs the network\'s own error as its cause (a bad header value, a lost connection)', async () => {
    const broken = (async (input: RequestInfo | URL) => {
      if (new URL(input instanceof Request ? input.url : String(input)).pathname.endsWith('/run')) throw new TypeError('Invalid header value.')
      throw new Error('only /run is called')
    }) as typeof fetch
    const h = harness({ fetch: broken })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-current')))
    expect(res.status).toBe(502)
    expect(h.logs.map((line) => JSON.parse(line) as unknown)).toEqual([
      expect.objectContaining({ level: 'error', status: 502, code: 'upstream_error', message: expect.stringMatching(/queued the job/), cause: 'TypeError: Invalid header value.' }),
    ])
  })

  it.each(['chat-classic', 'chat-current'])('%s: a FAILED job is a 502 naming the worker failure', async (model) => {
    const h = harness()
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'x [[emulator:fault=job_failed]]')))
    expect(res.status).toBe(502)
    expect(((await res.json()) as OpenAIError).error.message).toMatch(/worker failed/)
    // One log line says which request, call and model failed, and how.
    expect(h.logs.map((line) => JSON.parse(line) as unknown)).toEqual([
      expect.objectContaining({ level: 'error', request_id: res.headers.get('x-request-id'), status: 502, path: 'POST /v1/chat/completions', model, code: 'upstream_error', message: expect.stringMatching(/worker failed/) }),
    ])
  })

  it.each(MODEL_NAMES)('%s: a stream that breaks mid-way ends with an error event and no [DONE]', async (model) => {
    const h = harness()
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'x [[emulator:fault=mid_stream,after=3,tokens=20]]', { stream: true })))
    expect(res.status).toBe(200)
    const events = await readSSE(res)
    expect(events).not.toContain('[DONE]')
    const last = events.at(-1) as OpenAIError
    expect(last.error.code).toBe('upstream_error')
    // Past its 200 no error handler sees the failure: it is still logged, once.
    await h.settle()
    expect(h.logs.map((line) => JSON.parse(line) as unknown)).toEqual([
      expect.objectContaining({ level: 'error', request_id: res.headers.get('x-request-id'), status: 502, path: 'POST /v1/chat/completions', model, code: 'upstream_error', message: last.error.message }),
    ])
  })

  it('a coalesced streaming twin whose shared stream breaks gets its own error line, under its own request id, as a JSON twin does', async () => {
    // One attempt: a FAILED job is not run again on the JSON path, so one job is one call.
    const h = harness({ models: { ...MODELS, 'chat-current': { ...MODELS['chat-current']!, resilience: { retries: { attempts: 1 } } } } })
    const { key } = await h.createKey()
    for (const stream of [false, true]) {
      const body = chatBody('chat-current', `twins break ${stream} [[emulator:fault=mid_stream,after=10,delay=20]]`, { temperature: 0, max_tokens: 40, stream })
      const leader = h.fetch('/v1/chat/completions', authed(key, body))
      await new Promise((resolve) => setTimeout(resolve, 50))
      const responses = await Promise.all([leader, h.fetch('/v1/chat/completions', authed(key, body))])
      // One upstream job for both: the second joined the first's call (an error carries no cache header).
      if (stream) expect(responses.map((r) => r.headers.get('x-podgate-cache'))).toEqual(['MISS', 'COALESCED'])
      await Promise.all(responses.map((r) => r.text()))
      await h.settle()
      expect(h.emulator.calls.splice(0).filter((call) => call.op === 'run')).toHaveLength(1)
      const lines = h.logs.splice(0).map((line) => JSON.parse(line) as Record<string, unknown>)
      expect(lines.map((line) => line.request_id).sort()).toEqual(responses.map((r) => r.headers.get('x-request-id')).sort())
      expect(lines.every((line) => line.level === 'error' && line.status === 502 && line.code === 'upstream_error')).toBe(true)
    }
  })

  it.each(MODEL_NAMES)('%s: vLLM\'s in-band error event mid-stream reaches the caller, and the call is a failure', async (model) => {
    const h = harness()
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'x [[emulator:fault=error_event,after=3,tokens=20]]', { stream: true })))
    expect(res.status).toBe(200)
    const events = await readSSE(res)
    // The three tokens, then the error: the engine's own words, as the worker's failure (not the caller's 400).
    expect(events).not.toContain('[DONE]')
    const last = events.at(-1) as OpenAIError
    expect(last.error).toMatchObject({ code: 'upstream_error', message: expect.stringContaining('EngineCore encountered an issue') })
    const text = (events.slice(0, -1) as Array<{ choices: Array<{ delta: { content?: string } }> }>).map((e) => e.choices[0]?.delta.content ?? '').join('')
    expect(text.trim().split(/\s+/)).toHaveLength(3)
    await h.settle()
    expect(h.logs.map((line) => JSON.parse(line) as unknown)).toEqual([
      expect.objectContaining({ level: 'error', status: 502, model, code: 'upstream_error', message: last.error.message }),
    ])
  })

  it.each(MODEL_NAMES)('%s: a caller who leaves a stream is no failure: nothing is logged', async (model) => {
    const h = harness()
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'x [[emulator:tokens=200]]', { stream: true })))
    await (await readSome(res, 200)).cancel()
    await h.settle()
    expect(h.logs).toEqual([])
  })

  it.each(MODEL_NAMES)('%s: a caller who leaves a JSON call while it is upstream is no failure: nothing is logged', async (model) => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    let sent = 0
    const h = harness({ fetch: (input, init) => (sent++, emulator.fetch(new Request(input, init))) }, emulator)
    const { key } = await h.createKey()
    const left = new AbortController()
    const answer = h.fetch('/v1/chat/completions', { ...authed(key, chatBody(model, 'x [[emulator:tokens=50,delay=20]]')), signal: left.signal }).catch(() => undefined)
    await new Promise((resolve) => setTimeout(resolve, 150))
    expect(sent).toBeGreaterThan(0)
    left.abort()
    await answer
    await h.settle()
    expect(h.logs).toEqual([])
  })

  it('a rate limit of Runpod\'s met after a stream began (its polls refused) is logged for the operator, as before it', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    let polls = 0
    const limited = (async (input: RequestInfo | URL, init?: RequestInit) => {
      const request = new Request(input, init)
      if (new URL(request.url).pathname.includes('/stream/') && ++polls > 1) return new Response('slow down', { status: 429, headers: { 'retry-after': '1' } })
      return emulator.fetch(request)
    }) as typeof fetch
    const h = harness({ fetch: limited }, emulator)
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-current', 'x [[emulator:tokens=50,delay=30]]', { stream: true })))
    expect(res.status).toBe(200)
    const last = (await readSSE(res)).at(-1) as OpenAIError
    expect(last.error.code).toBe('upstream_rate_limited')
    await h.settle()
    expect(h.logs.map((line) => JSON.parse(line) as unknown)).toEqual([
      expect.objectContaining({ level: 'error', request_id: res.headers.get('x-request-id'), status: 429, model: 'chat-current', code: 'upstream_rate_limited' }),
    ])
  })
})

describe('call log (logCalls)', () => {
  /** The call lines written so far, parsed; no line may hold a secret (the Runpod key, a presented key or token). */
  const callLines = (h: Harness, ...secrets: string[]) => {
    for (const line of h.logs) for (const secret of [RUNPOD_KEY, ...secrets]) expect(line).not.toContain(secret)
    return h.logs.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.message === 'call')
  }
  const model = MODEL_NAMES[0]!

  it('is off by default: a successful call writes no line', async () => {
    const h = harness()
    const { key } = await h.createKey()
    expect((await h.fetch('/v1/chat/completions', authed(key, chatBody(model)))).status).toBe(200)
    await h.settle()
    expect(h.logs).toEqual([])
  })

  it('on, a JSON call writes one info line: who, which model, status, tokens, duration (never the key)', async () => {
    const h = harness({ logCalls: true })
    const { id, key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model)))
    const { usage } = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } }
    await h.settle()
    const lines = callLines(h, key)
    expect(lines).toEqual([
      expect.objectContaining({ level: 'info', request_id: res.headers.get('x-request-id'), key_id: id, token_id: null, model, path: 'POST /v1/chat/completions', stream: false, status: 200, cache: 'BYPASS', prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens, estimated: false, ms: expect.any(Number) }),
    ])
    expect(h.logs).toHaveLength(1)
  })

  it('on, a stream\'s line comes once it ended, with the usage of its usage chunk; a minted token is named beside its key', async () => {
    const h = harness({ logCalls: true })
    const { id, key } = await h.createKey()
    const minted = await h.fetch('/v1/tokens', authed(key, '{}'))
    const { token, id: tokenId } = (await minted.json()) as { token: string; id: string }
    const res = await h.fetch('/v1/chat/completions', authed(token, chatBody(model, 'x [[emulator:tokens=200]]', { stream: true, stream_options: { include_usage: true } })))
    expect(res.status).toBe(200)
    const reader = await readSome(res, 200)
    expect(callLines(h)).toEqual([])
    let rest = ''
    for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value)
    const usage = JSON.parse(rest.split('\n').find((l) => l.includes('"usage":{'))!.slice(6)).usage as Record<string, number>
    await h.settle()
    expect(callLines(h, key, token)).toEqual([
      expect.objectContaining({ level: 'info', request_id: res.headers.get('x-request-id'), key_id: id, token_id: tokenId, model, stream: true, status: 200, prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens, estimated: false }),
    ])
  })

  it('on, a cache hit says HIT', async () => {
    const h = harness({ logCalls: true })
    const { key } = await h.createKey()
    const body = chatBody('chat-current', 'cached call line', { temperature: 0, max_tokens: 24 })
    expect((await h.fetch('/v1/chat/completions', authed(key, body))).headers.get('x-podgate-cache')).toBe('MISS')
    await h.settle()
    expect((await h.fetch('/v1/chat/completions', authed(key, body))).headers.get('x-podgate-cache')).toBe('HIT')
    await h.settle()
    expect(callLines(h, key).map((line) => [line.status, line.cache])).toEqual([[200, 'MISS'], [200, 'HIT']])
  })

  it('on, a call its quota refuses is counted too (429, its code), with no error line', async () => {
    const h = harness({ logCalls: true })
    const { id, key } = await h.createKey({ name: 'one', quota: { requestsPerMinute: 1 } })
    expect((await h.fetch('/v1/chat/completions', authed(key, chatBody(model)))).status).toBe(200)
    const refused = await h.fetch('/v1/chat/completions', authed(key, chatBody(model)))
    expect(refused.status).toBe(429)
    await h.settle()
    expect(callLines(h, key).at(-1)).toEqual(expect.objectContaining({ level: 'info', request_id: refused.headers.get('x-request-id'), key_id: id, model, status: 429, code: 'rate_limited' }))
    expect(h.logs).toHaveLength(2)
  })

  it('on, the native /v2 run, runsync, retry and job event stream write one line each (a poll none)', async () => {
    const h = harness({ logCalls: true })
    const { id, key } = await h.createKey()
    const job = (content: string) => JSON.stringify({ input: { messages: [{ role: 'user', content }], sampling_params: { max_tokens: 20 } } })
    const run = await h.fetch('/v2/chat-current/run', authed(key, job('x [[emulator:tokens=5]]')))
    const { id: jobId } = (await run.json()) as { id: string }
    await h.settle()
    const runsync = await h.fetch('/v2/chat-current/runsync', authed(key, job('y [[emulator:tokens=5]]')))
    expect(((await runsync.json()) as { status: string }).status).toBe('COMPLETED')
    await h.settle()
    const events = await h.fetch(`/v2/chat-current/stream/${jobId}`, { headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream' } })
    expect(await events.text()).toContain('event: done')
    expect((await h.fetch(`/v2/chat-current/status/${jobId}`, authed(key))).status).toBe(200)
    const failed = (await (await h.fetch('/v2/chat-current/run', authed(key, job('z [[emulator:fault=job_failed]]')))).json()) as { id: string }
    await h.fetch(`/v2/chat-current/status-sync/${failed.id}?wait=2000`, authed(key))
    const retry = await h.fetch(`/v2/chat-current/retry/${failed.id}`, authed(key, '{}'))
    expect(retry.status).toBe(200)
    await h.settle()
    const line = (res: Response, path: string, stream: boolean) => expect.objectContaining({ level: 'info', request_id: res.headers.get('x-request-id'), key_id: id, token_id: null, model: 'chat-current', path, stream, status: 200 })
    const lines = callLines(h, key)
    expect(lines).toEqual([
      line(run, 'POST /v2/chat-current/run', false),
      line(runsync, 'POST /v2/chat-current/runsync', false),
      line(events, `GET /v2/chat-current/stream/${jobId}`, true),
      expect.objectContaining({ path: 'POST /v2/chat-current/run' }),
      line(retry, `POST /v2/chat-current/retry/${failed.id}`, false),
    ])
    // A /run settles before any output; a COMPLETED runsync counts what its output reports.
    expect(lines[0]!.completion_tokens).toBeUndefined()
    expect(lines[1]!.completion_tokens).toBeGreaterThan(0)
  })

  it('on, a passthrough /runsync that COMPLETED writes its 200 line and no error line', async () => {
    const h = harness({ logCalls: true, models: { ...MODELS, 'raw-vllm': { endpoints: [{ endpointId: 'vllmclassic' }], mode: 'native', passthrough: true } } })
    const { key } = await h.createKey()
    const res = await h.fetch('/v2/raw-vllm/runsync', authed(key, JSON.stringify({ input: { prompt: 'hi', sampling_params: { max_tokens: 4 } } })))
    expect(((await res.json()) as { status: string }).status).toBe('COMPLETED')
    await h.settle()
    expect(h.logs.map((line) => JSON.parse(line) as Record<string, unknown>)).toEqual([expect.objectContaining({ level: 'info', message: 'call', path: 'POST /v2/raw-vllm/runsync', status: 200 })])
  })

  // A JSON twin gets the whole answer; a streaming twin follows a native endpoint's events live, or waits
  // for the whole answer of a stream piped natively (a real byte stream: the scripted upstream's).
  it.each(['json', 'followed', 'piped'] as const)('on, coalesced twins (%s) each write one line: the leader MISS, the twin COALESCED', async (shape) => {
    const SERVED = 'Served-Model-8B'
    const chunk = `{"id":"chatcmpl-up","object":"chat.completion.chunk","created":1700000000,"model":"${SERVED}","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":"stop"}]}`
    const usage = '{"id":"chatcmpl-up","object":"chat.completion.chunk","created":1700000000,"model":"x","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}'
    // Held 300 ms after [DONE]: the flight is still open when the twin joins.
    const upstream = scriptedUpstream(() => [`data: ${chunk}\n\n`, `data: ${usage}\n\n`, 'data: [DONE]\n\n'], { holdMs: 300 })
    const piped = shape === 'piped'
    const h = harness({ logCalls: true, ...(piped ? { models: { [SERVED]: { endpoints: [{ endpointId: 'epsame' }], mode: 'openai' as const } }, fetch: upstream.fetch } : {}) })
    const { key } = await h.createKey()
    const stream = shape !== 'json'
    const body = chatBody(piped ? SERVED : 'chat-current', `twins ${shape} [[emulator:delay=20,tokens=8]]`, { temperature: 0, max_tokens: 24, stream, ...(piped ? { stream_options: { include_usage: true } } : {}) })
    const leader = h.fetch('/v1/chat/completions', authed(key, body))
    if (piped) await leader
    const responses = await Promise.all([leader, h.fetch('/v1/chat/completions', authed(key, body))])
    expect(responses.map((r) => r.headers.get('x-podgate-cache'))).toEqual(['MISS', 'COALESCED'])
    await Promise.all(responses.map((r) => r.text()))
    await h.settle()
    if (piped) expect(upstream.calls).toHaveLength(1)
    expect(callLines(h, key).map((line) => [line.request_id, line.status, line.cache, line.stream])).toEqual(expect.arrayContaining(responses.map((r) => [r.headers.get('x-request-id'), 200, r.headers.get('x-podgate-cache'), stream])))
    expect(h.logs).toHaveLength(2)
  })

  it.each(MODEL_NAMES)('on, %s: a caller who leaves is no upstream failure: its line says 499 (client closed request), no code, and no error line', async (model) => {
    const h = harness({ logCalls: true })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'x [[emulator:tokens=200]]', { stream: true })))
    await (await readSome(res, 200)).cancel()
    const left = new AbortController()
    const answer = h.fetch('/v1/chat/completions', { ...authed(key, chatBody(model, 'y [[emulator:tokens=50,delay=20]]')), signal: left.signal }).catch(() => undefined)
    await new Promise((resolve) => setTimeout(resolve, 150))
    left.abort()
    await answer
    await h.settle()
    expect(h.logs).toHaveLength(2)
    // The OpenAI route's JSON answer (the emulator's) comes whole despite the abort: that call ended well.
    const json = model === 'chat-openai' ? [false, 200, undefined] : [false, 499, undefined]
    expect(callLines(h, key).map((line) => [line.stream, line.status, line.code])).toEqual(expect.arrayContaining([[true, 499, undefined], json]))
  })

  it('on, a failure keeps its error line beside its call line', async () => {
    const h = harness({ logCalls: true })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-classic', 'x [[emulator:fault=job_failed]]')))
    expect(res.status).toBe(502)
    await h.settle()
    const lines = h.logs.map((line) => JSON.parse(line) as Record<string, unknown>)
    expect(lines.map((line) => [line.level, line.status, line.code])).toEqual(expect.arrayContaining([['error', 502, 'upstream_error'], ['info', 502, 'upstream_error']]))
    expect(lines).toHaveLength(2)
  })
})

describe('log sink', () => {
  it('one that is async is held by waitUntil until it finished: the error line of a failure and the call line', async () => {
    const written: string[] = []
    const h = harness({ logCalls: true, logSink: async (line) => { await new Promise((resolve) => setTimeout(resolve, 100)); written.push(line) } })
    const { key } = await h.createKey()
    await h.settle()
    written.length = 0
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'x [[emulator:fault=http,status=500]]')))
    expect(res.status).toBe(502)
    await res.text()
    await h.settle()
    expect(written.map((line) => (JSON.parse(line) as { level: string }).level).sort()).toEqual(['error', 'info'])
  })

  it('one that throws loses its line, never the answer: a failure still gets its error answer, with its request id', async () => {
    const h = harness({ logCalls: true, logSink: () => { throw new Error('sink down') } })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-classic', 'x [[emulator:fault=job_failed]]')))
    expect(res.status).toBe(502)
    expect(res.headers.get('x-request-id')).toBeTruthy()
    expect(((await res.json()) as OpenAIError).error.code).toBe('upstream_error')
    const ok = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai')))
    expect(ok.status).toBe(200)
    await h.settle()
  })

  it('one that is async and rejects leaves no unhandled rejection (a stream failed past its 200, a call line)', async () => {
    const unhandled: unknown[] = []
    const listener = (event: PromiseRejectionEvent) => {
      unhandled.push(event.reason)
      event.preventDefault()
    }
    addEventListener('unhandledrejection', listener)
    try {
      let lines = 0
      const h = harness({ logCalls: true, logSink: async () => { lines++; throw new Error('async sink down') } })
      const { key } = await h.createKey()
      const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'x [[emulator:fault=mid_stream,after=3,tokens=20]]', { stream: true })))
      expect((await readSSE(res)).at(-1)).toMatchObject({ error: { code: 'upstream_error' } })
      await h.settle()
      await new Promise((resolve) => setTimeout(resolve, 50))
      expect(lines).toBe(2)
      expect(unhandled).toEqual([])
    } finally {
      removeEventListener('unhandledrejection', listener)
    }
  })
})

describe('a host hook that throws something not an Error', () => {
  const circular: Record<string, unknown> = { code: 2 }
  circular.self = circular
  it.each([
    ['a string', 'boom rp_test_key_never_leaks_0123456789', 'boom [redacted]'],
    ['an object', { code: 1, key: 'rp_test_key_never_leaks_0123456789' }, '{"code":1,"key":"[redacted]"}'],
    // JSON.stringify throws on these two: the line is still written, naming what was thrown.
    ['a circular object', circular, 'object'],
    ['a BigInt', 10n, 'bigint'],
  ])('(%s) gets podgate\'s 500 in the caller\'s format, with its request id and its log line naming it', async (_name, thrown, cause) => {
    let broken = false
    const h = harness({ kv: () => { if (broken) throw thrown; return env.PODGATE_KV } })
    const { key } = await h.createKey()
    broken = true
    const calls: [string, string | undefined, (body: Record<string, unknown>) => unknown][] = [
      ['/v1/chat/completions', chatBody('chat-openai'), (b) => (b as unknown as OpenAIError).error.code],
      ['/v1/messages', JSON.stringify({ model: 'chat-current', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }), (b) => (b as { type: string }).type],
      ['/v2/chat-classic/run', JSON.stringify({ input: { prompt: 'x' } }), (b) => b.code],
    ]
    for (const [path, body, read] of calls) {
      const res = await h.fetch(path, authed(key, body))
      expect(res.status).toBe(500)
      expect(res.headers.get('x-request-id')).toBeTruthy()
      const text = await res.text()
      expect(text).not.toContain(RUNPOD_KEY)
      expect(read(JSON.parse(text) as Record<string, unknown>)).toBe(path.startsWith('/v1/messages') ? 'error' : 'internal_error')
      expect(h.logs.map((line) => JSON.parse(line) as unknown)).toContainEqual(expect.objectContaining({ level: 'error', request_id: res.headers.get('x-request-id'), status: 500, code: 'internal_error', cause }))
    }
    expect(h.logs.join('\n')).not.toContain(RUNPOD_KEY)
    // Mounted in a host app too (Hono wraps each of podgate's handlers in its own onError there).
    const mounted = await new Hono().route('/ai', h.app).fetch(new Request('http://host/ai/v1/chat/completions', authed(key, chatBody('chat-openai'))), env, createExecutionContext())
    expect(mounted.status).toBe(500)
    expect(((await mounted.json()) as OpenAIError).error.code).toBe('internal_error')
  })
})

describe('every endpoint answers 503 with Retry-After (no workers, throttled)', () => {
  const models = {
    'two-openai': { endpoints: [{ endpointId: 'epa' }, { endpointId: 'epb' }], mode: 'openai' as const },
    'two-native': { endpoints: [{ endpointId: 'epa' }, { endpointId: 'epb' }], mode: 'native' as const },
  }
  // Each endpoint asks for its own wait; the caller is told the shortest.
  const busy: typeof fetch = async (input, init) => new Response('no workers available', { status: 503, headers: { 'retry-after': new Request(input, init).url.includes('/epa/') ? '20' : '40' } })
  const calls: [string, string, (body: Record<string, unknown>) => unknown][] = [
    ['/v1/chat/completions', chatBody('two-openai'), (b) => (b as unknown as OpenAIError).error.code],
    ['/v1/chat/completions', chatBody('two-native'), (b) => (b as unknown as OpenAIError).error.code],
    ['/v1/chat/completions', chatBody('two-native', 'x', { stream: true }), (b) => (b as unknown as OpenAIError).error.code],
    ['/v2/two-openai/openai/v1/chat/completions', chatBody('two-openai', 'x', { stream: true }), (b) => (b as unknown as OpenAIError).error.code],
    ['/v1/messages', JSON.stringify({ model: 'two-native', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }), (b) => (b as { error: { type: string } }).error.type],
    ['/v2/two-native/run', JSON.stringify({ input: { prompt: 'x' } }), (b) => b.code],
    ['/v2/two-native/runsync', JSON.stringify({ input: { prompt: 'x' } }), (b) => b.code],
  ]
  it.each(calls)('%s %s: a 503 with the upstream\'s shortest Retry-After, in the caller\'s format', async (path, body, read) => {
    const h = harness({ models, fetch: busy })
    const { key } = await h.createKey()
    const res = await h.fetch(path, authed(key, body))
    expect(res.status).toBe(503)
    // A native /v2 job call tries one endpoint (no failover): that endpoint's own wait.
    expect(res.headers.get('retry-after')).toMatch(/^\/v2\/two-native\/run/.test(path) ? /^(20|40)$/ : /^20$/)
    expect(read((await res.json()) as Record<string, unknown>)).toBe(path === '/v1/messages' ? 'api_error' : 'service_unavailable')
  })
})

describe('a caller-sent x-request-id', () => {
  it('is never taken: podgate mints its own (a 10 KB, control-character or key-bearing value reaches no header or log line)', async () => {
    const h = harness({ logCalls: true })
    const { key } = await h.createKey()
    h.logs.length = 0
    for (const sent of ['a'.repeat(10_000), `x"}\t{"level":"info`, `id ${RUNPOD_KEY}`]) {
      const init = authed(key, chatBody('chat-openai'))
      const res = await h.fetch('/v1/chat/completions', { ...init, headers: { ...(init.headers as Record<string, string>), 'x-request-id': sent } })
      expect(res.status).toBe(200)
      await res.text()
      expect(res.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/)
    }
    await h.settle()
    expect(h.logs.length).toBe(3)
    for (const line of h.logs) expect((JSON.parse(line) as { request_id: string }).request_id).toMatch(/^[0-9a-f-]{36}$/)
    expect(h.logs.join('\n')).not.toContain(RUNPOD_KEY)
  })
})
