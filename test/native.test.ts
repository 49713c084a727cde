/**
 * The Runpod-native surface, `/v2/{model}/...`, in workerd against the in-process emulator: Runpod's
 * shapes, job ids bound to key and model, input normalization, and the job event stream.
 */
import { createParser } from 'eventsource-parser'
import type { EventSourceMessage } from 'eventsource-parser'
import { Hono } from 'hono'
import type { Context } from 'hono'
import { env } from 'cloudflare:test'
import { describe, expect, it, vi } from 'vitest'
import * as podgate from '../src/index.ts'
import { createRunpodEmulator } from '../src/testing/index.ts'
import type { RunpodEmulator } from '../src/testing/index.ts'
import { harness, MODELS, readSome, RUNPOD_KEY } from './helpers.ts'
import type { Harness } from './helpers.ts'
import type { GatewayOptions } from '../src/index.ts'

const NATIVE_MODELS = { ...MODELS, 'raw-handler': { endpoints: [{ endpointId: 'rawhandler' }], mode: 'native' as const, passthrough: true } }

function post(key: string, body?: unknown, headers: Record<string, string> = {}): RequestInit {
  return {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  }
}

function get(key: string, headers: Record<string, string> = {}): RequestInit {
  return { method: 'GET', headers: { authorization: `Bearer ${key}`, ...headers } }
}

const chatInput = (content: string, extra: Record<string, unknown> = {}) => ({
  input: { messages: [{ role: 'user', content }], sampling_params: { max_tokens: 40 }, ...extra },
})

interface JobAnswer {
  id: string
  status: string
  output?: unknown
  stream?: { output: unknown }[]
  error?: unknown
}

async function json(res: Response): Promise<JobAnswer> {
  return (await res.json()) as JobAnswer
}

async function startJob(h: Harness, key: string, model: string, body: unknown): Promise<string> {
  const res = await h.fetch(`/v2/${model}/run`, post(key, body))
  expect(res.status).toBe(200)
  const job = await json(res)
  expect(job.status).toBe('IN_QUEUE')
  return job.id
}

/** Every SSE message of a response, with its event name and id (a browser-free EventSource). */
async function readEvents(res: Response): Promise<EventSourceMessage[]> {
  const events: EventSourceMessage[] = []
  const parser = createParser({ onEvent: (e) => events.push(e) })
  parser.feed(await res.text())
  return events
}

const textOf = (events: EventSourceMessage[]) =>
  events.filter((e) => e.event === 'output').map((e) => (JSON.parse(e.data) as { text: string }).text).join('')

/** The full text of a finished job, read through podgate's own OpenAI surface for comparison. */
async function completedText(h: Harness, key: string, model: string, id: string): Promise<string> {
  const res = await h.fetch(`/v2/${model}/status/${id}`, get(key))
  const job = await json(res)
  expect(job.status).toBe('COMPLETED')
  const items = job.output as unknown[]
  // Classic items carry token lists; current items are SSE text: decode both the simple way, for tests.
  let text = ''
  for (const item of items) {
    if (typeof item === 'string') {
      createParser({
        onEvent(e) {
          if (e.data === '[DONE]') return
          const chunk = JSON.parse(e.data) as { choices: { delta?: { content?: string }; text?: string; index: number }[] }
          for (const c of chunk.choices) if (c.index === 0) text += c.delta?.content ?? c.text ?? ''
        },
      }).feed(items.filter((i) => typeof i === 'string').join(''))
      break
    }
    const choices = (item as { choices: { tokens?: string[]; message?: { content: string } }[] }).choices
    // A current worker's non-streamed answer is vLLM's chat.completion, once.
    text += choices[0]?.tokens?.join('') ?? choices[0]?.message?.content ?? ''
  }
  return text
}

describe('native job API: Runpod shapes', () => {
  it.each(['chat-classic', 'chat-current'])('%s: run, status, JSON stream, with podgate job ids', async (model) => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey()
    const id = await startJob(h, key, model, chatInput('Hello there [[emulator:tokens=12]]', { stream: true }))
    const upstream = h.emulator.calls.find((c) => c.op === 'run')?.jobId
    expect(upstream).toBeTruthy()
    expect(id).not.toBe(upstream)

    const items: unknown[] = []
    for (let i = 0; i < 50; i++) {
      const res = await h.fetch(`/v2/${model}/stream/${id}`, get(key))
      expect(res.status).toBe(200)
      const page = await json(res)
      expect(page.id).toBe(id)
      expect(Array.isArray(page.stream)).toBe(true)
      items.push(...(page.stream ?? []).map((s) => s.output))
      if (page.status === 'COMPLETED') break
    }
    const status = await json(await h.fetch(`/v2/${model}/status/${id}`, post(key)))
    expect(status).toMatchObject({ id, status: 'COMPLETED' })
    expect(items).toEqual(status.output)
    // Status and stream reach Runpod as POST (accepted by the hosted API and the local test server).
    expect(h.emulator.calls.filter((c) => c.op === 'stream' || c.op === 'status').every((c) => c.method === 'POST')).toBe(true)
    expect(h.emulator.calls.filter((c) => c.op === 'stream').every((c) => c.path.endsWith(upstream ?? ''))).toBe(true)
  })

  it('runsync honours ?wait=, and status-sync finishes a job the wait left running', async () => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey()
    const quick = await json(await h.fetch('/v2/chat-classic/runsync', post(key, chatInput('quick [[emulator:tokens=5]]'))))
    expect(quick.status).toBe('COMPLETED')
    expect(quick.output).toHaveLength(1)

    const res = await h.fetch('/v2/chat-classic/runsync?wait=1000', post(key, chatInput('slow [[emulator:cold=1800,tokens=5]]')))
    expect(res.status).toBe(200)
    const pending = await json(res)
    expect(pending.status).toBe('IN_QUEUE')
    const done = await json(await h.fetch(`/v2/chat-classic/status-sync/${pending.id}?wait=5000`, get(key)))
    expect(done).toMatchObject({ id: pending.id, status: 'COMPLETED' })
  })

  it('cancel and retry answer 200 with the podgate id; health sums counts; purge-queue is refused without an upstream call', async () => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey()
    const id = await startJob(h, key, 'chat-current', chatInput('stall [[emulator:fault=stall]]'))
    const cancelled = await h.fetch(`/v2/chat-current/cancel/${id}`, post(key, {}))
    expect(cancelled.status).toBe(200)
    expect(await json(cancelled)).toMatchObject({ id, status: 'CANCELLED' })
    expect(h.emulator.activeJobs()).toEqual([])

    const failed = await startJob(h, key, 'chat-current', chatInput('fail [[emulator:fault=job_failed]]'))
    await h.fetch(`/v2/chat-current/status-sync/${failed}?wait=2000`, get(key))
    const retried = await h.fetch(`/v2/chat-current/retry/${failed}`, post(key, {}))
    expect(retried.status).toBe(200)
    expect(await json(retried)).toMatchObject({ id: failed, status: 'IN_QUEUE' })

    const health = await h.fetch('/v2/chat-current/health', get(key))
    expect(health.status).toBe(200)
    const body = (await health.json()) as { jobs: Record<string, number>; workers: Record<string, number> }
    // The retried job counts once; the cancelled one is no job in a health count.
    expect(body.jobs.retried).toBe(1)
    expect(typeof body.workers.idle).toBe('number')

    const before = h.emulator.calls.length
    const purge = await h.fetch('/v2/chat-current/purge-queue', post(key, {}))
    expect(purge.status).toBe(403)
    expect(await purge.json()).toMatchObject({ code: 'permission_denied' })
    expect(h.emulator.calls.length).toBe(before)
  })

  it('health sums the counts of every endpoint that serves the model', async () => {
    const models = { ...NATIVE_MODELS, 'chat-both': { endpoints: [{ endpointId: 'vllmcurrent' }, { endpointId: 'vllmclassic' }], mode: 'native' as const } }
    const h = harness({ models })
    const { key } = await h.createKey()
    // Each endpoint ends jobs of its own: one completed on one, two completed and one failed on the other.
    for (const [model, text] of [['chat-current', 'one'], ['chat-classic', 'two'], ['chat-classic', 'three'], ['chat-classic', 'fail [[emulator:fault=job_failed]]']] as const) {
      const id = await startJob(h, key, model, chatInput(text))
      expect(await json(await h.fetch(`/v2/${model}/status-sync/${id}?wait=5000`, get(key)))).toMatchObject({ status: expect.stringMatching(/^(COMPLETED|FAILED)$/) })
    }
    const direct = async (endpointId: string) =>
      (await (await h.emulator.fetch(new Request(`https://emulator.test/v2/${endpointId}/health`, { headers: { authorization: `Bearer ${RUNPOD_KEY}` } }))).json()) as { jobs: Record<string, number>; workers: Record<string, number> }
    const [current, classic] = [await direct('vllmcurrent'), await direct('vllmclassic')]
    expect(current.jobs).toMatchObject({ completed: 1, failed: 0 })
    expect(classic.jobs).toMatchObject({ completed: 2, failed: 1 })

    const res = await h.fetch('/v2/chat-both/health', get(key))
    expect(res.status).toBe(200)
    const body = (await res.json()) as { jobs: Record<string, number>; workers: Record<string, number> }
    expect(body.jobs).toEqual({ completed: 3, failed: 1, inProgress: 0, inQueue: 0, retried: 0 })
    const sum = (a: Record<string, number>, b: Record<string, number>) => Object.fromEntries(Object.keys({ ...a, ...b }).map((name) => [name, (a[name] ?? 0) + (b[name] ?? 0)]))
    expect(body.workers).toEqual(sum(current.workers, classic.workers))
    expect(body.workers.idle).toBe(2)
  })

  it('errors are Runpod-style JSON: unknown model, missing key, unknown route', async () => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey()
    const unknown = await h.fetch('/v2/nope/run', post(key, chatInput('x')))
    expect(unknown.status).toBe(404)
    expect(await unknown.json()).toMatchObject({ code: 'model_not_found', error: expect.any(String) })
    const anonymous = await h.fetch('/v2/chat-classic/run', { method: 'POST', body: '{}' })
    expect(anonymous.status).toBe(401)
    expect(await anonymous.json()).toMatchObject({ code: 'missing_api_key' })
    const scoped = await h.createKey({ name: 'scoped', models: ['chat-current'] })
    const denied = await h.fetch('/v2/chat-classic/run', post(scoped.key, chatInput('x')))
    expect(denied.status).toBe(403)
    expect(h.emulator.calls.filter((c) => c.op === 'run')).toEqual([])
  })
})

describe('nativeRoutes on its own', () => {
  it('mounts in a Hono app built from the package\'s exports alone, as its @example shows', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const config = podgate.resolveConfig({ models: MODELS, runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2' } })
    const client = new podgate.RunpodClient({ apiKey: RUNPOD_KEY, timeoutMs: config.runpod.timeoutMs, fetch: (input, init) => emulator.fetch(new Request(input, init)) })
    const store = () => new podgate.KeyStore(env.PODGATE_KV, { cacheTtlMs: 0 })
    const app = new Hono<podgate.GatewayEnv>()
    app.use('/v2/*', podgate.apiKeyAuth({ store }))
    app.route('/v2', podgate.nativeRoutes({ models: podgate.resolveModels(config), client, runpod: config.runpod, secret: 'a-secret-of-this-app-0123456789', maxBodyBytes: 1 << 20 }))
    const { key } = await store().create({ name: 'app' })
    const run = await app.request('/v2/chat-classic/runsync', post(key, chatInput('standalone')), env)
    expect(run.status).toBe(200)
    expect((await json(run)).status).toBe('COMPLETED')
  })

  it("answers its routes' errors in Runpod's format, as createGateway's native routes do", async () => {
    const h = harness()
    const config = podgate.resolveConfig({ models: MODELS, runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2' } })
    const client = new podgate.RunpodClient({ apiKey: RUNPOD_KEY, timeoutMs: config.runpod.timeoutMs, fetch: (input, init) => h.emulator.fetch(new Request(input, init)) })
    const app = new Hono<podgate.GatewayEnv>()
    app.use('/v2/*', podgate.apiKeyAuth({ store: () => new podgate.KeyStore(env.PODGATE_KV, { cacheTtlMs: 0 }) }))
    app.route('/v2', podgate.nativeRoutes({ models: podgate.resolveModels(config), client, runpod: config.runpod, secret: 'a-secret-of-this-app-0123456789', maxBodyBytes: 1 << 20 }))
    const { key } = await h.createKey({ name: 'scoped', models: ['chat-classic'] })
    const calls: [string, RequestInit, number][] = [
      ['/v2/nope/run', post(key, chatInput('x')), 404],
      ['/v2/chat-current/run', post(key, chatInput('x')), 403],
      ['/v2/chat-classic/run', post(key, { input: ['x'] }), 400],
      ['/v2/chat-classic/run', { ...post(key), body: '{' }, 400],
      ['/v2/chat-classic/runsync?wait=soon', post(key, chatInput('x')), 400],
      ['/v2/chat-classic/status/not-a-job', get(key), 404],
      ['/v2/chat-classic/purge-queue', post(key, {}), 403],
    ]
    for (const [path, init, status] of calls) {
      const standalone = await app.request(path, init, env)
      const mounted = await h.fetch(path, init)
      expect([standalone.status, mounted.status], path).toEqual([status, status])
      const body = (await standalone.json()) as { error: unknown; code: unknown }
      expect(typeof body.error, path).toBe('string')
      expect(body, path).toEqual(await mounted.json())
    }
  })
})

describe('native job API: jobs belong to their caller', () => {
  it('another key, another model, a tampered id and path tricks all get the same 404, with no upstream call', async () => {
    const h = harness({ models: NATIVE_MODELS })
    const owner = await h.createKey()
    const other = await h.createKey({ name: 'other' })
    const id = await startJob(h, owner.key, 'chat-classic', chatInput('mine [[emulator:tokens=3]]'))
    const [payload, signature] = id.split('.') as [string, string]
    const flipped = `${payload}.${signature.startsWith('A') ? 'B' : 'A'}${signature.slice(1)}`
    const before = h.emulator.calls.length

    const attempts: [string, RequestInit][] = [
      [`/v2/chat-classic/status/${id}`, get(other.key)],
      [`/v2/chat-current/status/${id}`, get(owner.key)],
      [`/v2/chat-classic/status/${flipped}`, get(owner.key)],
      [`/v2/chat-classic/cancel/${id}`, post(other.key, {})],
      [`/v2/chat-classic/stream/${id}`, get(other.key, { accept: 'text/event-stream' })],
      [`/v2/chat-classic/status/${payload}`, get(owner.key)],
      [`/v2/chat-classic/status/..%2F..%2Fpurge-queue`, get(owner.key)],
      [`/v2/chat-classic/status/${payload}%2F${signature}`, get(owner.key)],
      [`/v2/chat-classic/status/${id}%0A`, get(owner.key)],
    ]
    const bodies = new Set<string>()
    for (const [path, init] of attempts) {
      const res = await h.fetch(path, init)
      expect(res.status, path).toBe(404)
      const body = (await res.json()) as { code: string; error: string }
      expect(body.code).toBe('not_found')
      bodies.add(body.error)
    }
    expect(bodies.size).toBe(1)
    expect(h.emulator.calls.length).toBe(before)
    expect((await h.fetch(`/v2/chat-classic/status/${id}`, get(owner.key))).status).toBe(200)
  })
})

describe('native job API: input normalization', () => {
  it.each([
    ['max_tokens over the cap', { messages: [{ role: 'user', content: 'x' }], sampling_params: { max_tokens: 99_999 } }, 'input.sampling_params.max_tokens'],
    ['n over maxChoices', { prompt: 'x', sampling_params: { n: 9 } }, 'input.sampling_params.n'],
    ['an unknown sampling parameter', { prompt: 'x', sampling_params: { logit_bias: { '1': 5 } } }, "logit_bias: send vLLM's other fields to the OpenAI surface, /v2/chat-classic/openai/v1 (at 'input.sampling_params.logit_bias')"],
    ['sampling parameters that are not an object', { prompt: 'x', sampling_params: [1] }, "Invalid type for 'sampling_params': expected an object, got an array (at 'input.sampling_params')"],
    ['an input that is not an object', ['x'], "Invalid type for 'input': expected an object, got an array"],
    ['a sampling value out of vLLM\'s bounds', { prompt: 'x', sampling_params: { top_p: 0 } }, 'input.sampling_params.top_p'],
    ['an early_stopping that is neither a boolean nor never', { prompt: 'x', sampling_params: { early_stopping: 'soon' } }, "expected 'never', got 'soon'"],
    ['a message the native input cannot carry', { messages: [{ role: 'tool', content: 'x' }] }, "(at 'input.messages')"],
    ['a message of the wrong shape', { messages: [{ role: 'user', content: 5 }] }, 'input.messages[0].content'],
    ['a prompt list (the native input takes one string)', { prompt: ['x', 'y'] }, "prompt lists and other OpenAI fields to /v2/chat-classic/openai/v1/completions (at 'input.prompt')"],
    ['a token-id prompt', { prompt: [1, 2, 3] }, "(at 'input.prompt')"],
    ['the OpenAI passthrough input', { openai_route: '/v1/chat/completions', openai_input: {} }, "openai_route: send vLLM's other fields to the OpenAI surface, /v2/chat-classic/openai/v1"],
    ['neither messages nor prompt', { sampling_params: { max_tokens: 3 } }, 'input.messages'],
    ['both messages and prompt', { prompt: 'x', messages: [{ role: 'user', content: 'x' }] }, 'not both'],
    ['a non-boolean stream', { prompt: 'x', stream: 'yes' }, 'input.stream'],
  ])('%s is a 400 with no upstream call', async (_name, input, needle) => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey()
    for (const op of ['run', 'runsync']) {
      const res = await h.fetch(`/v2/chat-classic/${op}`, post(key, { input }))
      expect(res.status).toBe(400)
      const body = (await res.json()) as { error: string; code: string }
      expect(body.code).toBe('invalid_request')
      expect(body.error).toContain(needle)
    }
    expect(h.emulator.calls).toEqual([])
  })

  it('webhooks are refused, and a body that is not JSON is invalid_json', async () => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey()
    const hook = await h.fetch('/v2/chat-classic/run', post(key, { ...chatInput('x'), webhook: 'https://example.com/hook' }))
    expect(hook.status).toBe(400)
    // The field's name, then what is wrong with it, as every other field's message reads.
    expect(((await hook.json()) as { error: string }).error).toMatch(/^'webhook' is not forwarded by podgate: follow the job with \/status\/\{id\} or \/stream\/\{id\}/)
    const bad = await h.fetch('/v2/chat-classic/run', { ...post(key), body: '{nope' })
    expect(await bad.json()).toMatchObject({ code: 'invalid_json' })
    const wait = await h.fetch('/v2/chat-classic/runsync?wait=soon', post(key, chatInput('x')))
    expect(wait.status).toBe(400)
    expect(((await wait.json()) as { error: string }).error).toContain('wait')
    expect(h.emulator.calls).toEqual([])
  })

  it('a wait past 300000, however many digits it has, is taken as 300000 (docs/native-surface.md), not refused', async () => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey()
    const done = await json(await h.fetch('/v2/chat-classic/runsync?wait=10000000', post(key, chatInput('quick [[emulator:tokens=5]]'))))
    expect(done.status).toBe('COMPLETED')
    const status = await h.fetch(`/v2/chat-classic/status-sync/${String(done.id)}?wait=99999999999`, get(key))
    expect(status.status).toBe(200)
  })

  it('valid input reaches the worker normalized: caps, the default max_tokens, content parts flattened', async () => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey()
    const input = { messages: [{ role: 'developer', content: [{ type: 'text', text: 'be brief' }] }, { role: 'user', content: 'hi' }], max_batch_size: 8 }
    await startJob(h, key, 'chat-classic', { input, policy: { executionTimeout: 60_000 } })
    const upstreamId = h.emulator.calls.find((c) => c.op === 'run')?.jobId ?? ''
    expect(h.emulator.job(upstreamId)?.input).toEqual({
      messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hi' }],
      sampling_params: { max_tokens: 512 },
      stream: false,
      max_batch_size: 8,
    })
  })

  it('a passthrough model sends any input unchanged', async () => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey()
    const input = { image_url: 'https://example.com/cat.png', steps: 30, nested: { anything: [1, 2] } }
    await startJob(h, key, 'raw-handler', { input })
    const upstreamId = h.emulator.calls.find((c) => c.op === 'run')?.jobId ?? ''
    expect(h.emulator.job(upstreamId)?.input).toEqual(input)
  })
})

describe('native job API: SSE', () => {
  it.each(['chat-classic', 'chat-current'])('%s: status, one output event per item with text, monotonic ids, done with the usage the worker reported', async (model) => {
    const h = harness({ models: NATIVE_MODELS, runpod: { apiKey: 'rp_test_key_never_leaks_0123456789', baseUrl: 'https://emulator.test/v2', streamWaitMs: 300 } })
    const { key } = await h.createKey()
    const id = await startJob(h, key, model, chatInput('Tell me a story [[emulator:tokens=30,cold=700,delay=5]]', { stream: true }))
    const res = await h.fetch(`/v2/${model}/stream/${id}`, get(key, { accept: 'text/event-stream' }))
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toContain('text/event-stream')
    const raw = await res.clone().text()
    const events = await readEvents(res)

    const statuses = events.filter((e) => e.event === 'status').map((e) => (JSON.parse(e.data) as { status: string }).status)
    expect(statuses).toEqual(['IN_QUEUE', 'IN_PROGRESS'])
    expect(raw).toContain(': keep-alive')
    const outputs = events.filter((e) => e.event === 'output')
    expect(outputs.map((e) => e.id)).toEqual(outputs.map((_, i) => String(i + 1)))
    const last = events.at(-1)
    expect(last?.event).toBe('done')
    const done = JSON.parse(last?.data ?? '{}') as { status: string; usage?: { prompt_tokens: number; completion_tokens: number } }
    if (model === 'chat-classic') {
      expect(done.usage?.prompt_tokens).toBeGreaterThan(0)
      expect(done.usage?.completion_tokens).toBeGreaterThan(0)
    } else {
      // A current worker posts the shorthand to vLLM with no stream_options: no usage, and podgate shows no count of its own.
      expect(done).toEqual({ status: 'COMPLETED' })
    }

    const text = textOf(events)
    expect(text.length).toBeGreaterThan(0)
    expect(text).toBe(await completedText(h, key, model, id))
    const upstream = await h.emulator.fetch(new Request('http://emulator.test/__emulator/calls'))
    expect(((await upstream.json()) as { op: string }[]).filter((c) => c.op === 'cancel')).toEqual([])
  })

  it('a passthrough job streams its raw items', async () => {
    const h = harness({ models: { ...NATIVE_MODELS, 'raw-vllm': { endpoints: [{ endpointId: 'vllmclassic' }], mode: 'native', passthrough: true } } })
    const { key } = await h.createKey()
    const id = await startJob(h, key, 'raw-vllm', { input: { prompt: 'raw [[emulator:tokens=4]]', stream: true } })
    const events = await readEvents(await h.fetch(`/v2/raw-vllm/stream/${id}`, get(key, { accept: 'text/event-stream' })))
    const outputs = events.filter((e) => e.event === 'output').map((e) => JSON.parse(e.data) as { output: unknown })
    expect(outputs.length).toBeGreaterThan(0)
    expect(outputs[0]?.output).toMatchObject({ choices: [{ tokens: expect.any(Array) }] })
    expect(events.at(-1)?.event).toBe('done')
  })

  it('a job that fails mid-stream ends with an error event after the output it produced', async () => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey()
    const id = await startJob(h, key, 'chat-current', chatInput('x [[emulator:fault=mid_stream,after=4,tokens=20]]', { stream: true }))
    const events = await readEvents(await h.fetch(`/v2/chat-current/stream/${id}`, get(key, { accept: 'text/event-stream' })))
    expect(events.some((e) => e.event === 'output')).toBe(true)
    const last = events.at(-1)
    expect(last?.event).toBe('error')
    expect(JSON.parse(last?.data ?? '{}')).toMatchObject({ status: 'FAILED', code: 'upstream_error', error: expect.any(String) })
    expect(events.some((e) => e.event === 'done')).toBe(false)
  })

  it('Last-Event-ID resumes after the last item the caller had, without duplicates', async () => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey()
    const id = await startJob(h, key, 'chat-current', chatInput('resume me [[emulator:tokens=40,delay=5]]', { stream: true }))
    const first = await readEvents(await h.fetch(`/v2/chat-current/stream/${id}`, get(key, { accept: 'text/event-stream' })))
    const outputs = first.filter((e) => e.event === 'output')
    expect(outputs.length).toBeGreaterThan(3)

    const resumed = await readEvents(await h.fetch(`/v2/chat-current/stream/${id}`, get(key, { accept: 'text/event-stream', 'last-event-id': '2' })))
    const again = resumed.filter((e) => e.event === 'output')
    expect(again.map((e) => e.id)).toEqual(outputs.slice(2).map((e) => e.id))
    expect(textOf(again)).toBe(textOf(outputs.slice(2)))
    expect(resumed.at(-1)?.event).toBe('done')

    const bad = await h.fetch(`/v2/chat-current/stream/${id}`, get(key, { accept: 'text/event-stream', 'last-event-id': 'x1' }))
    expect(bad.status).toBe(400)
  })

  it('a resumed stream of a running job waits for the end, then sends exactly the missing items', async () => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey()
    const id = await startJob(h, key, 'chat-classic', chatInput('lost [[emulator:tokens=30,delay=20]]', { stream: true }))
    // A first connection took some items, then dropped with `detach` so the job ran on.
    const first = await h.fetch(`/v2/chat-classic/stream/${id}?detach=true`, get(key, { accept: 'text/event-stream' }))
    const reader = first.body!.getReader()
    const seen: EventSourceMessage[] = []
    const parser = createParser({ onEvent: (e) => seen.push(e) })
    const decoder = new TextDecoder()
    while (seen.filter((e) => e.event === 'output').length < 2) {
      const { value, done } = await reader.read()
      if (done) break
      parser.feed(decoder.decode(value, { stream: true }))
    }
    await reader.cancel()
    await h.settle()
    expect(h.emulator.calls.filter((c) => c.op === 'cancel')).toEqual([])
    const had = seen.filter((e) => e.event === 'output')
    const lastId = had.at(-1)?.id ?? '0'

    const resumed = await readEvents(await h.fetch(`/v2/chat-classic/stream/${id}`, get(key, { accept: 'text/event-stream', 'last-event-id': lastId })))
    expect(resumed.at(-1)?.event).toBe('done')
    const rest = resumed.filter((e) => e.event === 'output')
    expect(rest[0]?.id).toBe(String(Number(lastId) + 1))
    expect(textOf(had) + textOf(rest)).toBe(await completedText(h, key, 'chat-classic', id))
  })

  // `poll_budget`: the response made its `runpod.maxPollsPerStream` polls. `time_limit`: it ran for its
  // model's `timeouts.totalMs`: a stream holds one of its key's concurrent streams, a strict quota's for a
  // lease of that time, and an event stream that ran on past it could let the key open one stream too many.
  it.each([
    { reason: 'poll_budget', model: 'chat-classic', runpod: { maxPollsPerStream: 3 }, polls: 3 },
    { reason: 'time_limit', model: 'short', runpod: {}, polls: undefined },
  ])('a stream that reaches its $reason pauses without cancelling, and EventSource resumes it', async ({ reason, model, runpod, polls }) => {
    const models = { ...NATIVE_MODELS, short: { endpoints: [{ endpointId: 'vllmclassic' }], mode: 'native' as const, resilience: { timeouts: { totalMs: 400 } } } }
    const h = harness({ models, runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', streamWaitMs: 50, ...runpod } })
    const { key } = await h.createKey()
    const id = await startJob(h, key, model, chatInput('long [[emulator:tokens=150,delay=20]]', { stream: true }))
    const first = await readEvents(await h.fetch(`/v2/${model}/stream/${id}`, get(key, { accept: 'text/event-stream' })))
    expect(first.at(-1)).toMatchObject({ event: 'pause', data: JSON.stringify({ reason, resume: 'reconnect with Last-Event-ID' }) })
    if (polls !== undefined) expect(h.emulator.calls.filter((c) => c.op === 'stream')).toHaveLength(polls)
    expect(h.emulator.calls.filter((c) => c.op === 'cancel')).toEqual([])
    const had = first.filter((e) => e.event === 'output')
    expect(had.length).toBeGreaterThan(0)

    // What EventSource does on its own after the stream closes: reconnect with the last id it saw.
    const events: EventSourceMessage[] = []
    let lastId = had.at(-1)?.id ?? ''
    for (let attempt = 0; attempt < 20 && events.at(-1)?.event !== 'done'; attempt++) {
      const next = await readEvents(await h.fetch(`/v2/${model}/stream/${id}`, get(key, { accept: 'text/event-stream', 'last-event-id': lastId })))
      events.push(...next)
      lastId = next.filter((e) => e.id !== undefined).at(-1)?.id ?? lastId
    }
    expect(events.at(-1)?.event).toBe('done')
    const rest = events.filter((e) => e.event === 'output')
    expect([...had, ...rest].map((e) => e.id)).toEqual([...had, ...rest].map((_, i) => String(i + 1)))
    expect(textOf(had) + textOf(rest)).toBe(await completedText(h, key, model, id))
  })

  // `runpod.streamWaitMs` may be up to 300 s, a model's totalMs as little as a second: the one poll a
  // response always makes must not wait past totalMs either, or the stream outlives its quota lease.
  it('the first poll of an event stream waits no longer than the model lets the stream run', async () => {
    const models = { ...NATIVE_MODELS, short: { endpoints: [{ endpointId: 'vllmclassic' }], mode: 'native' as const, resilience: { timeouts: { totalMs: 400 } } } }
    const h = harness({ models, runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', streamWaitMs: 5_000 } })
    const { key } = await h.createKey()
    const id = await startJob(h, key, 'short', chatInput('queued [[emulator:tokens=3,cold=4000]]', { stream: true }))
    const started = Date.now()
    const first = await readEvents(await h.fetch(`/v2/short/stream/${id}?detach=true`, get(key, { accept: 'text/event-stream' })))
    expect(first.at(-1)).toMatchObject({ event: 'pause', data: JSON.stringify({ reason: 'time_limit', resume: 'reconnect with Last-Event-ID' }) })
    expect(Date.now() - started).toBeLessThan(2_000)
  })
})

describe('native job API: SSE of a job run with stream:false', () => {
  async function finishedJob(model: string) {
    const h = harness({ models: NATIVE_MODELS, runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', streamWaitMs: 300 } })
    const { key } = await h.createKey()
    const id = await startJob(h, key, model, chatInput('Hello [[emulator:tokens=8]]', { stream: false }))
    const events = await readEvents(await h.fetch(`/v2/${model}/stream/${id}`, get(key, { accept: 'text/event-stream' })))
    return { h, key, id, events, answer: await completedText(h, key, model, id) }
  }

  function expectDone(events: EventSourceMessage[]) {
    const last = events.at(-1)
    expect(last?.event, last?.data).toBe('done')
    const done = JSON.parse(last?.data ?? '{}') as { status: string; usage?: { completion_tokens: number } }
    expect(done.status).toBe('COMPLETED')
    expect(done.usage?.completion_tokens).toBeGreaterThan(0)
  }

  it.each(['chat-classic', 'chat-current'])('%s: the answer arrives as text and the stream ends with `done`, not `error`', async (model) => {
    const { events, answer } = await finishedJob(model)
    expectDone(events)
    const outputs = events.filter((e) => e.event === 'output')
    expect(outputs).toHaveLength(1)
    // Classic output names no finish_reason (podgate infers it only when the job ends); vLLM's answer does.
    if (model === 'chat-current') expect(JSON.parse(outputs[0]?.data ?? '{}')).toMatchObject({ finish_reason: 'stop' })
    expect(answer.length).toBeGreaterThan(0)
    expect(textOf(events)).toBe(answer)
  })

  it.each(['chat-classic', 'chat-current'])('%s: a resumed stream (Last-Event-ID) replays the answer, or only ends, with `done`', async (model) => {
    const { h, key, id, answer } = await finishedJob(model)
    const replayed = await readEvents(await h.fetch(`/v2/${model}/stream/${id}`, get(key, { accept: 'text/event-stream', 'last-event-id': '0' })))
    expectDone(replayed)
    expect(textOf(replayed)).toBe(answer)
    const caughtUp = await readEvents(await h.fetch(`/v2/${model}/stream/${id}`, get(key, { accept: 'text/event-stream', 'last-event-id': '1' })))
    expectDone(caughtUp)
    expect(caughtUp.filter((e) => e.event === 'output')).toEqual([])
  })
})

describe('cancel on disconnect', () => {
  /** A Runpod that takes the job `/op` queues (telling `queued` 50 ms later), then is slow to answer it. */
  const slowToAnswer = (emulator: RunpodEmulator, op: string, queued: () => void): GatewayOptions['fetch'] => async (input, init) => {
    const request = new Request(input, init)
    const late = new URL(request.url).pathname.endsWith(`/${op}`)
    if (late) setTimeout(queued, 50)
    const answer = await emulator.fetch(request)
    if (late) await new Promise((resolve) => setTimeout(resolve, 200))
    return answer
  }

  it.each(['chat-classic', 'chat-current'])('%s: an SSE caller that goes away cancels the job upstream', async (model) => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey()
    const id = await startJob(h, key, model, chatInput('forever [[emulator:tokens=400,delay=25]]', { stream: true }))
    const res = await h.fetch(`/v2/${model}/stream/${id}`, get(key, { accept: 'text/event-stream' }))
    const reader = await readSome(res, 200)
    expect(h.emulator.activeJobs()).toHaveLength(1)
    await reader.cancel()
    await h.settle()
    expect(h.emulator.calls.filter((c) => c.op === 'cancel')).toHaveLength(1)
    expect(h.emulator.activeJobs()).toEqual([])
  })

  it.each(['run', 'runsync'])('a caller who left while /%s was out has the job it queued cancelled: no one else has its id', async (op) => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    let arrived!: () => void
    const queued = new Promise<void>((resolve) => (arrived = resolve))
    const h = harness({
      models: NATIVE_MODELS,
      // Runpod takes the job, then its answer is slow to come back.
      fetch: slowToAnswer(emulator, op, () => arrived()),
    }, emulator)
    const { key } = await h.createKey()
    const abort = new AbortController()
    const answered = h.fetch(`/v2/chat-current/${op}?wait=1000`, { ...post(key, chatInput('forever [[emulator:tokens=400,delay=25]]', { stream: true, sampling_params: { max_tokens: 1000 } })), signal: abort.signal }).catch((error: unknown) => error)
    await queued
    abort.abort()
    await answered
    await h.settle()
    expect(emulator.calls.filter((c) => c.op === 'cancel')).toHaveLength(1)
    expect(emulator.activeJobs()).toEqual([])
  })

  /** A Runpod whose `/runsync` wait runs out at once: it takes the job and answers IN_QUEUE, recording each `?wait=`. */
  function waitRunsOut(emulator: ReturnType<typeof createRunpodEmulator>, waits: string[]): GatewayOptions['fetch'] {
    return async (input, init) => {
      const request = new Request(input, init)
      const url = new URL(request.url)
      const op = /\/(runsync|status-sync)\b/.exec(url.pathname)?.[1]
      if (op) waits.push(`${op} ${url.searchParams.get('wait')}`)
      if (op !== 'runsync') return emulator.fetch(request)
      url.pathname = url.pathname.replace(/runsync$/, 'run')
      return emulator.fetch(new Request(url, request))
    }
  }

  it('a runsync wait longer than 25 s waits upstream in legs of at most 25 s (the job id comes back within waitUntil\'s 30 s), and answers the finished job', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const waits: string[] = []
    const h = harness({ models: NATIVE_MODELS, fetch: waitRunsOut(emulator, waits) }, emulator)
    const { key } = await h.createKey()
    const done = await json(await h.fetch('/v2/chat-classic/runsync?wait=60000', post(key, chatInput('quick [[emulator:tokens=5]]'))))
    expect(done.status).toBe('COMPLETED')
    expect(done.output).toHaveLength(1)
    expect(waits[0]).toBe('runsync 25000')
    expect(waits.length).toBeGreaterThan(1)
    expect(waits.slice(1).every((wait) => /^status-sync \d+$/.test(wait) && Number(wait.split(' ')[1]) <= 25_000)).toBe(true)
  })

  /** A gateway whose Runpod answers each op with `answer`, recording the ops asked. */
  function scriptedRunpod(answer: (op: string) => Response) {
    const ops: string[] = []
    const h = harness({
      models: NATIVE_MODELS,
      fetch: async (input, init) => {
        const op = new URL(new Request(input, init).url).pathname.split('/')[3]!
        ops.push(op)
        return answer(op)
      },
    })
    return { h, ops }
  }

  it('a Runpod that answers a wait at once, still running, is asked at most as many legs as the wait holds', async () => {
    const { h, ops } = scriptedRunpod(() => Response.json({ id: 'job-1', status: 'IN_PROGRESS' }))
    const { key } = await h.createKey()
    const running = await json(await h.fetch('/v2/chat-classic/runsync?wait=60000', post(key, chatInput('x'))))
    expect(running.status).toBe('IN_PROGRESS')
    expect(ops).toEqual(['runsync', 'status-sync', 'status-sync'])
  })

  it('a status-sync leg Runpod refuses answers the running job, as a runsync whose wait ran out, so the caller can still poll or cancel it', async () => {
    const { h, ops } = scriptedRunpod((op) => (op === 'status-sync' ? new Response('upstream connect error', { status: 503 }) : Response.json({ id: 'job-1', status: 'IN_PROGRESS' })))
    const { key } = await h.createKey()
    const res = await h.fetch('/v2/chat-classic/runsync?wait=60000', post(key, chatInput('x')))
    expect(res.status).toBe(200)
    const running = await json(res)
    expect(running.status).toBe('IN_PROGRESS')
    expect(running.id).toMatch(/\S/)
    expect(ops).toEqual(['runsync', 'status-sync'])
    const status = await h.fetch(`/v2/chat-classic/status/${running.id}`, { headers: { authorization: `Bearer ${key}` } })
    expect(status.status).toBe(200)
  })

  it('a caller who leaves a long runsync wait after its job id came back has the job cancelled at once', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const waits: string[] = []
    const h = harness({ models: NATIVE_MODELS, fetch: waitRunsOut(emulator, waits) }, emulator)
    const { key } = await h.createKey()
    const abort = new AbortController()
    const answered = h.fetch('/v2/chat-current/runsync?wait=60000', { ...post(key, chatInput('forever [[emulator:tokens=400,delay=25]]', { stream: true, sampling_params: { max_tokens: 1000 } })), signal: abort.signal }).catch((error: unknown) => error)
    await vi.waitFor(() => expect(waits.some((wait) => wait.startsWith('status-sync'))).toBe(true))
    abort.abort()
    await answered
    await h.settle()
    expect(emulator.calls.filter((c) => c.op === 'cancel')).toHaveLength(1)
    expect(emulator.activeJobs()).toEqual([])
  })

  /** A fetch that rejects once its signal aborts, as the runtime's does: the in-process emulator answers regardless. */
  const abortable = (fetch: GatewayOptions['fetch']): GatewayOptions['fetch'] => (input, init) =>
    new Promise<Response>((resolve, reject) => {
      init?.signal?.addEventListener('abort', () => reject(new DOMException('The operation was aborted.', 'AbortError')))
      fetch!(input, init).then(resolve, reject)
    })

  // A retry names a job its caller already holds: nothing is orphaned, so a caller who leaves while the
  // retry is out has its job requeued and pays as for a run, the outcome podgate knows; one gone before
  // the retry went upstream has nothing sent and pays no token.
  it('a caller who leaves while /retry is out pays as for a run (its job is requeued); one gone before has nothing sent', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    let arrived = () => {}
    const h = harness({
      models: NATIVE_MODELS,
      quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) },
      // Runpod takes the retry, then its answer is slow to come back; a fetch under an aborted signal is never sent.
      fetch: abortable(async (input, init) => {
        if (init?.signal?.aborted) throw new DOMException('The operation was aborted.', 'AbortError')
        const request = new Request(input, init)
        const retry = new URL(request.url).pathname.includes('/retry/')
        const answer = await emulator.fetch(request)
        if (retry) arrived()
        if (retry) await new Promise((resolve) => setTimeout(resolve, 200))
        return answer
      }),
    }, emulator)
    const { key } = await h.createKey({ name: 'retry', quota: { tokensPerMinute: 100_000 } })
    const failedJob = async () => {
      const id = await startJob(h, key, 'chat-current', chatInput('fail [[emulator:fault=job_failed]]'))
      expect((await json(await h.fetch(`/v2/chat-current/status-sync/${id}?wait=2000`, get(key)))).status).toBe('FAILED')
      // Its poll refunded the run's tokens (from waitUntil): landed before the counts compared below.
      await h.settle()
      return id
    }
    const tokens = async () => ((await (await h.fetch('/v1/usage', get(key))).json()) as { windows: { minute: { tokens: number } } }).windows.minute.tokens
    const retries = () => emulator.calls.filter((c) => c.op === 'retry').length

    // A caller who waits: the charge of a retry.
    let id = await failedJob()
    let before = await tokens()
    expect((await h.fetch(`/v2/chat-current/retry/${id}`, post(key, {}))).status).toBe(200)
    await h.settle()
    const charge = (await tokens()) - before
    expect(charge).toBeGreaterThan(0)

    id = await failedJob()
    before = await tokens()
    const abort = new AbortController()
    const answered = h.fetch(`/v2/chat-current/retry/${id}`, { ...post(key, {}), signal: abort.signal }).catch((error: unknown) => error)
    await new Promise<void>((resolve) => (arrived = resolve))
    abort.abort()
    await answered
    await h.settle()
    expect(retries()).toBe(2)
    expect((await tokens()) - before).toBe(charge)

    id = await failedJob()
    before = await tokens()
    const gone = new AbortController()
    gone.abort()
    await h.fetch(`/v2/chat-current/retry/${id}`, { ...post(key, {}), signal: gone.signal }).catch(() => undefined)
    await h.settle()
    expect(retries()).toBe(2)
    expect((await tokens()) - before).toBe(0)
  })

  // On Cloudflare a request whose caller left lives only as long as what its waitUntil holds: a key with
  // no quota has no quota settle holding it, so the retry call itself must be held to its answer.
  it('a retry whose caller left is held by waitUntil to its answer for a key with no quota (its call line is written)', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    let arrived = () => {}
    const h = harness({
      models: NATIVE_MODELS,
      logCalls: true,
      fetch: async (input, init) => {
        const request = new Request(input, init)
        const answer = await emulator.fetch(request)
        if (new URL(request.url).pathname.includes('/retry/')) {
          arrived()
          await new Promise((resolve) => setTimeout(resolve, 200))
        }
        return answer
      },
    }, emulator)
    const { key } = await h.createKey({ name: 'no-quota' })
    const id = await startJob(h, key, 'chat-current', chatInput('fail [[emulator:fault=job_failed]]'))
    expect((await json(await h.fetch(`/v2/chat-current/status-sync/${id}?wait=2000`, get(key)))).status).toBe('FAILED')
    const held: Promise<unknown>[] = []
    const ctx = { waitUntil: (promise: Promise<unknown>) => void held.push(promise), passThroughOnException: () => undefined, props: {} } as unknown as ExecutionContext
    const abort = new AbortController()
    const called = new Promise<void>((resolve) => (arrived = resolve))
    void h.app.fetch(new Request(`http://podgate/v2/chat-current/retry/${id}`, { ...post(key, {}), signal: abort.signal }), env, ctx)
    await called
    abort.abort()
    // The runtime ends the request once the work waitUntil holds is done, looking again after the
    // microtasks that work ran (they may have handed it more).
    for (let done = 0; done < held.length; ) {
      const batch = held.slice(done)
      done = held.length
      await Promise.allSettled(batch)
      await new Promise((resolve) => setTimeout(resolve, 0))
    }
    const lines = h.logs.map((line) => JSON.parse(line) as { message: string; path?: string; status?: number })
    expect(lines.filter((line) => line.message === 'call' && line.path?.includes('/retry/'))).toMatchObject([{ status: 200 }])
  })

  /**
   * Starts a long job, then sends its cancel through `cancel` (the fetch of the cancel only; it calls
   * `arrived` once the cancel is out), and lets the cancel's caller stop waiting as soon as it is.
   */
  async function cancelLeftBehind(cancel: (request: Request, emulator: RunpodEmulator, arrived: () => void) => Promise<Response>) {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    let arrived = () => {}
    const h = harness({
      models: NATIVE_MODELS,
      fetch: async (input, init) => {
        const request = new Request(input, init)
        return new URL(request.url).pathname.includes('/cancel/') ? cancel(request, emulator, arrived) : emulator.fetch(request)
      },
    }, emulator)
    const { key } = await h.createKey()
    const id = await startJob(h, key, 'chat-classic', chatInput('long [[emulator:tokens=400,delay=25]]', { stream: true, sampling_params: { max_tokens: 1000 } }))
    const abort = new AbortController()
    const called = new Promise<void>((resolve) => (arrived = resolve))
    const answered = h.fetch(`/v2/chat-classic/cancel/${id}`, { ...post(key, {}), signal: abort.signal }).catch((error: unknown) => error)
    await called
    abort.abort()
    await answered
    await h.settle()
    return emulator
  }

  // runpod-sdk gives a cancel 3 s, and Runpod's /cancel has its lowest rate limits: a caller that stops
  // waiting for its cancel must not take the cancel back, or the job it asked to stop runs on, billed.
  it('a cancel whose caller stops waiting still reaches Runpod: the job is cancelled', async () => {
    // A cancel that is slow to go out: one whose signal aborted by then is never sent, as the runtime's fetch.
    const emulator = await cancelLeftBehind(async (request, emulator, arrived) => {
      arrived()
      await new Promise((resolve) => setTimeout(resolve, 100))
      if (request.signal.aborted) throw new DOMException('The operation was aborted.', 'AbortError')
      return emulator.fetch(request)
    })
    await new Promise((resolve) => setTimeout(resolve, 150))
    expect(emulator.calls.filter((c) => c.op === 'cancel')).toHaveLength(1)
    expect(emulator.activeJobs()).toEqual([])
  })

  // A cancel its caller stopped waiting for has no one to try it again: one Runpod refused (its rate
  // limit for /cancel is the lowest) is asked again by podgate, as the cancels podgate sends itself are.
  it('a cancel Runpod refuses (429) after its caller stopped waiting is asked again: the job is cancelled', async () => {
    let refused = 0
    const emulator = await cancelLeftBehind(async (request, emulator, arrived) => {
      if (refused++ > 0) return emulator.fetch(request)
      arrived()
      await new Promise((resolve) => setTimeout(resolve, 100))
      return Response.json({ error: 'Too many requests' }, { status: 429, headers: { 'retry-after': '0' } })
    })
    expect(refused).toBe(2)
    expect(emulator.calls.filter((c) => c.op === 'cancel')).toHaveLength(1)
    expect(emulator.activeJobs()).toEqual([])
  })

  // docs/quotas.md: a caller who hangs up once its prompt reached the upstream pays the prompt (and any
  // output reported), as on the OpenAI surface; not every token refunded, nor the whole reservation kept.
  it.each([
    ['/run, before its answer', 'run', 1_000],
    ['/runsync, before its first wait ended', 'runsync', 1_000],
    ['/runsync, during a status-sync leg', 'runsync', 60_000],
  ] as const)('a caller who left %s pays the prompt estimate for the job it queued (then cancelled)', async (_when, op, wait) => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const waits: string[] = []
    let arrived!: () => void
    const queued = new Promise<void>((resolve) => (arrived = resolve))
    const h = harness({
      models: NATIVE_MODELS,
      quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) },
      // A long wait: Runpod's first wait runs out at once, then the caller leaves during a status-sync leg,
      // whose fetch (under the caller's signal) rejects as the runtime's does. A short one: Runpod takes the
      // job, then its answer is slow to come back, and the caller leaves meanwhile.
      fetch: wait > 25_000 ? abortable(waitRunsOut(emulator, waits)) : slowToAnswer(emulator, op, () => arrived()),
    }, emulator)
    const { key } = await h.createKey({ name: 'left', quota: { tokensPerMinute: 100_000 } })
    const abort = new AbortController()
    const answered = h.fetch(`/v2/chat-current/${op}?wait=${wait}`, { ...post(key, chatInput('forever [[emulator:tokens=400,delay=25]]', { stream: true, sampling_params: { max_tokens: 1000 } })), signal: abort.signal }).catch((error: unknown) => error)
    if (wait > 25_000) await vi.waitFor(() => expect(waits.some((w) => w.startsWith('status-sync'))).toBe(true))
    else await queued
    abort.abort()
    await answered
    await h.settle()
    expect(emulator.calls.filter((c) => c.op === 'cancel')).toHaveLength(1)
    const usage = (await (await h.fetch('/v1/usage', get(key))).json()) as { windows: { minute: { requests: number; tokens: number } } }
    expect(usage.windows.minute.requests).toBe(1)
    // The prompt estimate (a few tokens): neither nothing nor the 1000 max_tokens reserved.
    expect(usage.windows.minute.tokens).toBeGreaterThan(0)
    expect(usage.windows.minute.tokens).toBeLessThan(100)
  })

  // A caller who left before its call went upstream (while its key and quota were checked) sent no prompt
  // to a GPU: it pays the request, and no token.
  it.each(['chat-current', 'chat-classic', 'chat-openai'])('%s: a caller who left before the call went upstream pays no token, and nothing is sent', async (model) => {
    const h = harness({ models: NATIVE_MODELS, quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } })
    const { key } = await h.createKey({ name: 'gone', quota: { tokensPerMinute: 100_000 } })
    const abort = new AbortController()
    abort.abort()
    await h.fetch('/v1/chat/completions', { ...post(key, { model, messages: [{ role: 'user', content: 'never sent' }], max_tokens: 1000 }), signal: abort.signal }).catch(() => undefined)
    await h.settle()
    expect(h.emulator.calls.filter((c) => c.op !== 'health')).toEqual([])
    const usage = (await (await h.fetch('/v1/usage', get(key))).json()) as { windows: { minute: { requests: number; tokens: number } } }
    expect(usage.windows.minute.tokens).toBe(0)
  })

  it.each(['run', 'runsync'])('a caller who left before /%s went upstream has no job queued, and pays no token', async (op) => {
    const h = harness({ models: NATIVE_MODELS, quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } })
    const { key } = await h.createKey({ name: 'gone', quota: { tokensPerMinute: 100_000 } })
    const abort = new AbortController()
    abort.abort()
    await h.fetch(`/v2/chat-current/${op}`, { ...post(key, chatInput('never sent', { sampling_params: { max_tokens: 1000 } })), signal: abort.signal }).catch(() => undefined)
    await h.settle()
    expect(h.emulator.calls.filter((c) => c.op !== 'health')).toEqual([])
    const usage = (await (await h.fetch('/v1/usage', get(key))).json()) as { windows: { minute: { requests: number; tokens: number } } }
    expect(usage.windows.minute).toMatchObject({ requests: 1, tokens: 0 })
  })

  // docs/api.md: a caller who left writes no log line; "The caller went away." is no failure of podgate's or Runpod's.
  it.each(['/v2/chat-current/run', '/v2/chat-current/runsync', '/v2/chat-current/retry', '/v1/chat/completions'])('a caller who left before %s went upstream writes no error log line', async (path) => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey({ name: 'gone-quiet' })
    const id = path.endsWith('/retry') ? `/${await startJob(h, key, 'chat-current', chatInput('fail [[emulator:fault=job_failed]]'))}` : ''
    const abort = new AbortController()
    abort.abort()
    const body = path.startsWith('/v1') ? { model: 'chat-current', messages: [{ role: 'user', content: 'never sent' }] } : chatInput('never sent')
    const res = await h.fetch(`${path}${id}`, { ...post(key, body), signal: abort.signal })
    expect(res.status).toBe(502)
    await h.settle()
    // Nothing sent for it (a retry's job was queued first, by the run that failed).
    expect(h.emulator.calls.filter((c) => c.op !== 'health')).toHaveLength(id ? 1 : 0)
    expect(h.logs).toEqual([])
  })

  it('?detach=true leaves the job running', async () => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey()
    const id = await startJob(h, key, 'chat-current', chatInput('forever [[emulator:tokens=400,delay=25]]', { stream: true }))
    const reader = await readSome(await h.fetch(`/v2/chat-current/stream/${id}?detach=true`, get(key, { accept: 'text/event-stream' })), 100)
    await reader.cancel()
    await h.settle()
    expect(h.emulator.calls.filter((c) => c.op === 'cancel')).toEqual([])
    expect(h.emulator.activeJobs()).toHaveLength(1)
    await h.fetch(`/v2/chat-current/cancel/${id}`, post(key, {}))
  })

  it.each(['chat-classic', 'chat-current'])('%s: an OpenAI-surface stream whose caller goes away cancels its job', async (model) => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', post(key, {
      model,
      messages: [{ role: 'user', content: 'forever [[emulator:tokens=400,delay=25]]' }],
      stream: true,
      max_tokens: 1000,
    }))
    expect(res.status).toBe(200)
    const reader = await readSome(res, 300)
    expect(h.emulator.activeJobs()).toHaveLength(1)
    await reader.cancel()
    await h.settle()
    expect(h.emulator.calls.filter((c) => c.op === 'cancel')).toHaveLength(1)
    expect(h.emulator.activeJobs()).toEqual([])
  })

  // A caller who leaves is told by its request's signal; its body may never be read or cancelled (it left
  // before the answer was handed over, or the runtime does not cancel it). Its job and stream slot must
  // not wait on that body.
  const streamsOf = async (h: Harness, key: string) => ((await (await h.fetch('/v1/usage', get(key))).json()) as { streams: number }).streams
  /** Waits for the waitUntil work, or at most `ms`: a settle that waits on a body no one reads never ends. */
  const settleWithin = (h: Harness, ms: number) => Promise.race([h.settle(), new Promise((resolve) => setTimeout(resolve, ms))])

  it('an event stream whose caller left while its key and quota were checked cancels the job and frees its stream slot', async () => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey({ name: 'early', quota: { maxConcurrentStreams: 1 } })
    const id = await startJob(h, key, 'chat-current', chatInput('forever [[emulator:tokens=400,delay=25]]', { stream: true }))
    const abort = new AbortController()
    abort.abort()
    const res = await h.fetch(`/v2/chat-current/stream/${id}`, { ...get(key, { accept: 'text/event-stream' }), signal: abort.signal })
    expect(res.status).toBe(200)
    await settleWithin(h, 2_000)
    expect(h.emulator.calls.filter((c) => c.op === 'cancel')).toHaveLength(1)
    expect(h.emulator.activeJobs()).toEqual([])
    expect(await streamsOf(h, key)).toBe(0)
  })

  it.each(['a job event stream', 'an OpenAI-surface stream'])('%s whose caller left mid-answer, its body left unread, cancels the job at once and frees its stream slot', async (surface) => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey({ name: 'unread', quota: { maxConcurrentStreams: 1 } })
    const abort = new AbortController()
    const content = 'forever [[emulator:tokens=400,delay=25]]'
    let res: Response
    if (surface === 'a job event stream') {
      const id = await startJob(h, key, 'chat-current', chatInput(content, { stream: true }))
      res = await h.fetch(`/v2/chat-current/stream/${id}`, { ...get(key, { accept: 'text/event-stream' }), signal: abort.signal })
    } else {
      res = await h.fetch('/v1/chat/completions', { ...post(key, { model: 'chat-current', messages: [{ role: 'user', content }], stream: true, max_tokens: 1000 }), signal: abort.signal })
    }
    await readSome(res, 200)
    abort.abort()
    await settleWithin(h, 2_000)
    expect(h.emulator.calls.filter((c) => c.op === 'cancel')).toHaveLength(1)
    expect(h.emulator.activeJobs()).toEqual([])
    expect(await streamsOf(h, key)).toBe(0)
  })
})

describe('local handlers (runpod-python --rp_serve_api)', () => {
  /** runpod-python's local test server: no endpoint id in paths, POST only on status and stream, no cancel or health. */
  function localServer(emulator: ReturnType<typeof createRunpodEmulator>): (request: Request) => Promise<Response> {
    const app = new Hono()
    const forward = async (c: Context) => {
      const url = new URL(c.req.url)
      return emulator.fetch(new Request(`http://emulator.test/v2/localworker${url.pathname}${url.search}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${RUNPOD_KEY}`, 'content-type': 'application/json' },
        body: await c.req.text(),
      }))
    }
    app.post('/run', forward)
    app.post('/runsync', forward)
    app.post('/status/:id', forward)
    app.post('/stream/:id', forward)
    app.get('/status/:id', (c) => c.text('Method Not Allowed', 405))
    app.get('/stream/:id', (c) => c.text('Method Not Allowed', 405))
    return async (request) => app.fetch(request)
  }

  it('an endpoint configured by URL serves run, status and the job event stream', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const local = localServer(emulator)
    const h = harness({
      models: { local: { endpoints: [{ url: 'http://127.0.0.1:8000' }], mode: 'native' } },
      fetch: (input, init) => {
        const request = new Request(input, init)
        return new URL(request.url).host === '127.0.0.1:8000' ? local(request) : emulator.fetch(request)
      },
    }, emulator)
    const { key } = await h.createKey()
    const id = await startJob(h, key, 'local', chatInput('local [[emulator:tokens=9]]', { stream: true }))
    const events = await readEvents(await h.fetch(`/v2/local/stream/${id}`, get(key, { accept: 'text/event-stream' })))
    expect(events.at(-1)?.event).toBe('done')
    expect(textOf(events)).toBe(await completedText(h, key, 'local', id))
    const sync = await json(await h.fetch('/v2/local/runsync', post(key, chatInput('sync [[emulator:tokens=3]]'))))
    expect(sync.status).toBe('COMPLETED')
    // Every upstream call went through the local server's paths, as POST.
    expect(emulator.calls.every((c) => c.method === 'POST' && c.path.startsWith('/v2/localworker/'))).toBe(true)
    expect(emulator.calls.map((c) => c.op)).toEqual(expect.arrayContaining(['run', 'stream', 'status', 'runsync']))
  })
})

describe('EventSource credentials', () => {
  it('a minted token works as ?access_token= on the event stream only, and only for its own key\'s jobs', async () => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey()
    const other = await h.createKey({ name: 'other' })
    const minted = await h.fetch('/v1/tokens', post(key, { models: ['chat-classic'] }))
    expect(minted.status).toBe(201)
    const { token } = (await minted.json()) as { token: string }
    const otherToken = ((await (await h.fetch('/v1/tokens', post(other.key, {}))).json()) as { token: string }).token
    const id = await startJob(h, key, 'chat-classic', chatInput('browser [[emulator:tokens=6]]', { stream: true }))

    const res = await h.fetch(`/v2/chat-classic/stream/${id}?access_token=${token}`, { headers: { accept: 'text/event-stream' } })
    expect(res.status).toBe(200)
    expect((await readEvents(res)).at(-1)?.event).toBe('done')
    const foreign = await h.fetch(`/v2/chat-classic/stream/${id}?access_token=${otherToken}`, { headers: { accept: 'text/event-stream' } })
    expect(foreign.status).toBe(404)
    const onStatus = await h.fetch(`/v2/chat-classic/status/${id}?access_token=${token}`, { headers: { accept: 'text/event-stream' } })
    expect(onStatus.status).toBe(401)
    const keyInUrl = await h.fetch(`/v2/chat-classic/stream/${id}?access_token=${key}`, { headers: { accept: 'text/event-stream' } })
    expect(keyInUrl.status).toBe(401)
  })
})

describe('quotas on native jobs', () => {
  it('a job submission counts as a request and reserves its tokens; over the limit is a Runpod-style 429 with no upstream call', async () => {
    // The quota's clock is fixed mid-minute: both submissions fall in one window whenever the test runs.
    const h = harness({ models: NATIVE_MODELS, quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } })
    const limited = await h.createKey({ name: 'limited', quota: { requestsPerMinute: 1 } })
    await startJob(h, limited.key, 'chat-classic', chatInput('one [[emulator:tokens=3]]'))
    const second = await h.fetch('/v2/chat-classic/run', post(limited.key, chatInput('two')))
    expect(second.status).toBe(429)
    expect(await second.json()).toMatchObject({ code: 'rate_limited' })
    expect(second.headers.get('retry-after')).toBeTruthy()

    const small = await h.createKey({ name: 'small', quota: { tokensPerMinute: 100 } })
    const big = await h.fetch('/v2/chat-classic/runsync', post(small.key, { input: { prompt: 'x', sampling_params: { max_tokens: 200 } } }))
    expect(big.status).toBe(429)
    expect(((await big.json()) as { error: string }).error).toContain('max_tokens')
    expect(h.emulator.calls.filter((c) => c.op === 'run' || c.op === 'runsync')).toHaveLength(1)
  })

  it('runpod-sdk\'s stream (JSON /stream polls in a tight loop) of a current worker\'s answer stays within the control limit', async () => {
    const h = harness({ models: NATIVE_MODELS, quota: { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) } })
    const { key } = await h.createKey({ name: 'sdk', quota: { controlPerMinute: 30 } })
    // A current worker yields about a token an item, and Runpod's long poll answers at the first item.
    const id = await startJob(h, key, 'chat-current', chatInput('sdk [[emulator:tokens=100,delay=10]]', { stream: true, sampling_params: { max_tokens: 100 } }))
    const items: unknown[] = []
    for (let polls = 0; polls < 200; polls++) {
      const res = await h.fetch(`/v2/chat-current/stream/${id}`, get(key))
      expect(res.status, await res.clone().text()).toBe(200)
      const page = await json(res)
      items.push(...(page.stream ?? []).map((s) => s.output))
      if (page.status === 'COMPLETED') break
    }
    const status = await json(await h.fetch(`/v2/chat-current/status/${id}`, get(key)))
    expect(items).toEqual(status.output)
  })
})

describe('job SSE never makes a broken answer look whole', () => {
  it('a COMPLETED job whose stream carried a worker error ends with an error event, not done', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    let injected = false
    // A current worker-vllm that hits an error mid-generation writes vLLM's error event into its SSE
    // text and still ends the job COMPLETED: only the stream says the answer is broken.
    const h = harness(
      {
        models: NATIVE_MODELS,
        fetch: async (input, init) => {
          const request = new Request(input, init)
          const response = await emulator.fetch(request)
          if (injected || !/\/stream\//.test(new URL(request.url).pathname)) return response
          const page = (await response.json()) as { stream: { output: unknown }[] }
          if (page.stream.length === 0) return Response.json(page)
          injected = true
          page.stream.unshift({ output: 'data: {"error":{"message":"CUDA out of memory","type":"worker_error","code":null}}\n\n' })
          return Response.json(page)
        },
      },
      emulator,
    )
    const { key } = await h.createKey()
    const id = await startJob(h, key, 'chat-current', chatInput('oom [[emulator:tokens=3]]', { stream: true }))
    const events = await readEvents(await h.fetch(`/v2/chat-current/stream/${id}`, get(key, { accept: 'text/event-stream' })))
    expect(injected).toBe(true)
    expect(events.some((e) => e.event === 'done')).toBe(false)
    expect(events.at(-1)?.event).toBe('error')
    expect(events.at(-1)?.data).toContain('CUDA out of memory')
  })

  it('a failed job tells the caller the handler message, never its traceback', async () => {
    const h = harness({ models: NATIVE_MODELS })
    const { key } = await h.createKey()
    const id = await startJob(h, key, 'chat-classic', chatInput('x [[emulator:fault=job_failed]]', { stream: true }))
    const events = await readEvents(await h.fetch(`/v2/chat-classic/stream/${id}`, get(key, { accept: 'text/event-stream' })))
    const last = events.at(-1)
    expect(last?.event).toBe('error')
    expect(last?.data).toContain('Emulated handler failure')
    expect(last?.data).not.toMatch(/Traceback|handler\.py|error_traceback/)
  })

  /** The last event of a chat-classic job's event stream, ending in error; `upstream` answers Runpod's calls it fakes (by op), the emulator the rest. */
  async function lastJobError(upstream: (op: string | undefined) => Response | undefined): Promise<unknown> {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const fetch = async (input: RequestInfo | URL, init?: RequestInit) => {
      const request = new Request(input, init)
      return upstream(new URL(request.url).pathname.split('/')[3]) ?? emulator.fetch(request)
    }
    const h = harness({ models: NATIVE_MODELS, fetch }, emulator)
    const { key } = await h.createKey()
    const id = await startJob(h, key, 'chat-classic', chatInput('too long [[emulator:tokens=3]]', { stream: true }))
    const events = await readEvents(await h.fetch(`/v2/chat-classic/stream/${id}`, get(key, { accept: 'text/event-stream' })))
    expect(events.at(-1)?.event).toBe('error')
    return JSON.parse(events.at(-1)?.data ?? '{}')
  }

  it("a job vLLM refused (a classic worker's error item, as runpod-python's Python repr) ends with the caller's invalid_request, as on the OpenAI surface", async () => {
    const refusal = `{'error': {'object': 'error', 'message': "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.", 'type': 'BadRequestError', 'param': None, 'code': 400}}`
    const last = await lastJobError((op) => {
      if (op === 'stream') return Response.json({ status: 'FAILED', stream: [] })
      if (op === 'status') return Response.json({ id: 'job-1', status: 'FAILED', error: refusal })
      return undefined
    })
    expect(last).toEqual({ status: 'FAILED', error: "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.", code: 'invalid_request' })
  })

  it("a COMPLETED job whose output is vLLM's refusal (runpod-python before 1.7.6 keeps the error item) ends with invalid_request too", async () => {
    const item = { error: { object: 'error', message: "This model's maximum context length is 4096 tokens.", type: 'BadRequestError', param: null, code: 400 } }
    let polled = 0
    const last = await lastJobError((op) => (op === 'stream' ? Response.json({ status: 'COMPLETED', stream: polled++ ? [] : [{ output: item }] }) : undefined))
    expect(last).toEqual({ status: 'COMPLETED', error: "This model's maximum context length is 4096 tokens.", code: 'invalid_request' })
  })
})

describe('a classic worker run with RAW_OPENAI_OUTPUT=0', () => {
  // engine.py v2.23.0: an `openai_route` job's chat or completions stream then yields lists of the parsed
  // chunks, with no `[DONE]`. Before, every such stream (tools, media, logprobs on a native model) was a 502.
  const body = {
    model: 'chat-classic',
    messages: [{ role: 'user', content: 'weather in Oslo? [[emulator:tokens=12]]' }],
    tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
    logprobs: true,
    stream: true,
    stream_options: { include_usage: true },
  }
  const answer = async (raw: boolean) => {
    const h = harness({ models: MODELS })
    h.emulator.configure('vllmclassic', { rawOpenAIOutput: raw })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', post(key, body))
    expect(res.status).toBe(200)
    const data = (await readEvents(res)).map((e) => e.data)
    const run = h.emulator.calls.find((call) => call.op === 'run')
    const json = await h.fetch('/v1/chat/completions', post(key, { ...body, stream: false, stream_options: undefined }))
    return { run, data, json: (await json.json()) as { choices: unknown[] } }
  }

  it('streams the same chunks as with the default, to [DONE], and answers the same JSON', async () => {
    const [listed, raw] = [await answer(false), await answer(true)]
    expect(listed.run).toBeDefined()
    expect(listed.data.at(-1)).toBe('[DONE]')
    // Each job names its answer and tool calls anew.
    const strip = (data: unknown) => JSON.parse(JSON.stringify(data).replace(/chatcmpl-(tool-)?[\w-]+/g, 'x').replace(/\\"created\\":\d+/g, '\\"created\\":0')) as unknown
    expect(strip(listed.data)).toEqual(strip(raw.data))
    expect(listed.data.some((d) => d.includes('"tool_calls"'))).toBe(true)
    expect(listed.data.some((d) => d.includes('"usage"'))).toBe(true)
    expect(strip(listed.json.choices)).toEqual(strip(raw.json.choices))
  })
})

describe("jobs that report RUNNING (Runpod's other name for IN_PROGRESS)", () => {
  it.each([['chat-classic', 'vllmclassic'], ['chat-current', 'vllmcurrent']])('%s: JSON and streamed answers come whole, and /v2 shows the status as Runpod sent it', async (model, endpoint) => {
    const h = harness({ models: NATIVE_MODELS })
    h.emulator.configure(endpoint, { runningStatus: 'RUNNING', tokenDelayMs: 20 })
    const { key } = await h.createKey()
    const body = { model, messages: [{ role: 'user', content: 'hi [[emulator:tokens=25]]' }] }
    const answer = await h.fetch('/v1/chat/completions', post(key, body))
    expect(answer.status).toBe(200)
    expect(((await answer.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content).not.toBe('')
    const events = await readEvents(await h.fetch('/v1/chat/completions', post(key, { ...body, stream: true })))
    expect(events.at(-1)!.data).toBe('[DONE]')
    expect(events.some((e) => e.data.includes('"finish_reason":"stop"'))).toBe(true)

    const id = await startJob(h, key, model, chatInput('hi [[emulator:tokens=40]]'))
    expect((await json(await h.fetch(`/v2/${model}/status/${id}`, get(key)))).status).toBe('RUNNING')
    const page = await json(await h.fetch(`/v2/${model}/stream/${id}`, get(key)))
    expect(['RUNNING', 'COMPLETED']).toContain(page.status)
    const done = await json(await h.fetch(`/v2/${model}/status-sync/${id}?wait=5000`, post(key)))
    expect(done.status).toBe('COMPLETED')
  })
})
