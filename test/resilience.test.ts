/**
 * Resilience in workerd, driven by the emulator's fault injection: retries before the first byte,
 * failover across a model's endpoints with a breaker, cold-start hedging, timeouts that cancel the
 * job, and honest stream failures in all three upstream shapes.
 */
import { Hono } from 'hono'
import { describe, expect, it } from 'vitest'
import type { Principal } from '../src/auth/keys.ts'
import { resolveConfig } from '../src/config/resolve.ts'
import { toGatewayError } from '../src/errors/index.ts'
import type { GatewayEnv, GatewayOptions } from '../src/index.ts'
import { openaiRoutes } from '../src/openai/routes.ts'
import type { CompletionOutcome, CompletionStage } from '../src/pipeline/index.ts'
import { resolveModels } from '../src/routing/models.ts'
import { createDispatcher } from '../src/upstream/dispatch.ts'
import { EndpointBreaker } from '../src/upstream/breaker.ts'
import { RunpodClient } from '../src/upstream/runpod/client.ts'
import { failedOver, jobFailure } from '../src/upstream/native.ts'
import { isRetryable } from '../src/upstream/retry.ts'
import { createRunpodEmulator } from '../src/testing/index.ts'
import { authed, chatBody, droppingFetch, harness, heldFetch, readSSE, RUNPOD_KEY, scriptedUpstream, streamedText } from './helpers.ts'

type OpenAIError = { error: { code: string; message: string } }
type Resilience = NonNullable<GatewayOptions['models'][string]['resilience']>

const FAST_RETRIES = { attempts: 3, baseDelayMs: 10, maxDelayMs: 50, budgetMs: 5_000 }

/** One model per mode, each over two endpoints (`a` first in weight, `b` the spare). */
function twoEndpoints(resilience: Resilience = {}): GatewayOptions['models'] {
  const shared = { resilience: { retries: FAST_RETRIES, ...resilience } }
  return {
    'chat-openai': { endpoints: [{ endpointId: 'oaia', weight: 1e6 }, { endpointId: 'oaib' }], mode: 'openai', ...shared },
    'chat-classic': { endpoints: [{ endpointId: 'classica', weight: 1e6 }, { endpointId: 'classicb' }], mode: 'native', ...shared },
    'chat-current': { endpoints: [{ endpointId: 'currenta', weight: 1e6 }, { endpointId: 'currentb' }], mode: 'native', ...shared },
  }
}
const ENDPOINT_A: Record<string, string> = { 'chat-openai': 'oaia', 'chat-classic': 'classica', 'chat-current': 'currenta' }
const ENDPOINT_B: Record<string, string> = { 'chat-openai': 'oaib', 'chat-classic': 'classicb', 'chat-current': 'currentb' }
const MODELS = Object.keys(ENDPOINT_A)
const NATIVE = ['chat-classic', 'chat-current']

function setup(resilience: Resilience = {}) {
  const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
  return harness({ models: twoEndpoints(resilience) }, emulator)
}

function callsTo(h: ReturnType<typeof setup>, endpointId: string, op?: string) {
  return h.emulator.calls.filter((c) => c.endpointId === endpointId && (op === undefined || c.op === op))
}

const completeText = async (res: Response) => {
  const events = await readSSE(res)
  expect(events.at(-1)).toBe('[DONE]')
  return streamedText(events)
}

describe('retries before the first byte', () => {
  it.each(MODELS)('%s: a 503 from the endpoint is retried and the caller gets the whole answer', async (model) => {
    const h = setup()
    h.emulator.configure(ENDPOINT_A[model]!, { fault: { kind: 'http', status: 503, times: 1, ops: ['run', 'openai'] } })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'Hello there', { stream: true })))
    expect(res.status).toBe(200)
    expect((await completeText(res)).length).toBeGreaterThan(0)
    await h.settle()
    const starts = h.emulator.calls.filter((c) => c.op === 'run' || c.op === 'openai')
    expect(starts.map((c) => c.status)).toEqual([503, 200])
    expect(h.emulator.activeJobs()).toEqual([])
  })

  it('a 429 with Retry-After is waited out on a one-endpoint model', async () => {
    const h = harness({ models: { m: { endpoints: [{ endpointId: 'solo' }], mode: 'native', resilience: { retries: FAST_RETRIES } } } })
    h.emulator.configure('solo', { fault: { kind: 'http', status: 429, times: 1, retryAfter: 1, ops: ['run'] } })
    const { key } = await h.createKey()
    const started = Date.now()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('m', 'Hi', { stream: true })))
    expect(res.status).toBe(200)
    await completeText(res)
    expect(Date.now() - started).toBeGreaterThanOrEqual(950)
    expect(callsTo(h, 'solo', 'run').map((c) => c.status)).toEqual([429, 200])
  })

  it('a Retry-After is honoured for the endpoint that sent it when it comes round again after another endpoint', async () => {
    const h = setup()
    h.emulator.configure('oaia', { fault: { kind: 'http', status: 429, times: 1, retryAfter: 1, ops: ['openai'] } })
    h.emulator.configure('oaib', { fault: { kind: 'http', status: 503, times: 1, ops: ['openai'] } })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai')))
    expect(res.status).toBe(200)
    const tries = h.emulator.calls.filter((c) => c.op === 'openai').map((c) => [c.endpointId, c.status, c.at] as const)
    expect(tries.map(([endpoint, status]) => [endpoint, status])).toEqual([['oaia', 429], ['oaib', 503], ['oaia', 200]])
    // `oaia` asked for a second: the 503 from `oaib` in between does not make it sooner.
    expect(tries[2]![2] - tries[0]![2]).toBeGreaterThanOrEqual(950)
  })

  it('a Retry-After is not waited for past the budget when its endpoint comes round again after a FAILED job', async () => {
    const h = setup({ retries: { ...FAST_RETRIES, budgetMs: 2_000 } })
    h.emulator.configure('classica', { fault: { kind: 'http', status: 429, times: 1, retryAfter: 30, ops: ['run'] } })
    h.emulator.configure('classicb', { fault: { kind: 'job_failed' } })
    const { key } = await h.createKey()
    const started = Date.now()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-classic')))
    // The FAILED job's failover is not held back by the budget, but `classica`'s 30 s are.
    expect(res.status).toBe(502)
    expect(Date.now() - started).toBeLessThan(2_000)
    expect(h.emulator.calls.filter((c) => c.op === 'run').map((c) => [c.endpointId, c.status])).toEqual([['classica', 429], ['classicb', 200]])
  })

  it('a Retry-After beyond the budget is passed to the caller at once, not waited for', async () => {
    const h = harness({ models: { m: { endpoints: [{ endpointId: 'solo' }], mode: 'openai', resilience: { retries: { ...FAST_RETRIES, budgetMs: 2_000 } } } } })
    h.emulator.configure('solo', { fault: { kind: 'http', status: 429, retryAfter: 30 } })
    const { key } = await h.createKey()
    const started = Date.now()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('m')))
    expect(res.status).toBe(429)
    expect(res.headers.get('retry-after')).toBe('30')
    expect(Date.now() - started).toBeLessThan(1_000)
    expect(callsTo(h, 'solo', 'openai')).toHaveLength(1)
  })

  it('retries stop after the configured attempts, and a caller error (400) is never retried', async () => {
    const h = setup()
    h.emulator.configure('oaia', { fault: { kind: 'http', status: 500 } })
    h.emulator.configure('oaib', { fault: { kind: 'http', status: 500 } })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai')))
    expect(res.status).toBe(502)
    expect(h.emulator.calls.filter((c) => c.op === 'openai')).toHaveLength(3)

    h.emulator.reset()
    h.emulator.configure('oaia', { fault: { kind: 'http', status: 400 } })
    const bad = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai')))
    expect(bad.status).toBe(400)
    expect(h.emulator.calls.filter((c) => c.op === 'openai').length).toBeLessThanOrEqual(1)
  })
})

describe('failover across endpoints', () => {
  it.each(NATIVE)('%s: a job that FAILED before any output is run on the other endpoint', async (model) => {
    const h = setup()
    h.emulator.configure(ENDPOINT_A[model]!, { fault: { kind: 'job_failed' } })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'Hello', { stream: true })))
    expect(res.status).toBe(200)
    await completeText(res)
    const json = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'Hello')))
    expect(json.status).toBe(200)
    expect(callsTo(h, ENDPOINT_B[model]!).length).toBeGreaterThan(0)
  })

  // A classic worker stamps every failed generation 400 (engine.py's catch-all), an engine that died
  // included: taken for the caller's refusal, it was answered 400 and never tried elsewhere.
  it("chat-classic: a generation the worker's engine failed before any output is run on the other endpoint, though stamped 400", async () => {
    const h = setup()
    h.emulator.configure('classica', { fault: { kind: 'mid_stream', afterTokens: 0 } })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-classic', 'Hello', { stream: true })))
    expect(res.status).toBe(200)
    await completeText(res)
    const json = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-classic', 'Hello')))
    expect(json.status).toBe(200)
    expect(callsTo(h, 'classica', 'run')).toHaveLength(2)
    expect(callsTo(h, 'classicb', 'run')).toHaveLength(2)
  })

  // The same stamp on vLLM's own refusal of the request: its message says so, and it stays the caller's.
  // Both forms of vLLM's error: nested since vLLM 0.10.1, flat (`'object': 'error'`) before.
  it.each([
    ['nested', (message: string) => `{'error': {'message': ${JSON.stringify(message)}, 'type': 'BadRequestError', 'param': None, 'code': 400}}`],
    ['flat', (message: string) => `{'object': 'error', 'message': ${JSON.stringify(message)}, 'type': 'BadRequestError', 'param': None, 'code': 400}`],
  ])("chat-classic: a stamped 400 (%s) is the worker's failure only when its message is a dead engine's or GPU's", (_, stamped) => {
    const tooLong = "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion)."
    const refused = jobFailure({ status: 'FAILED', error: stamped(tooLong) })
    expect(refused).toMatchObject({ code: 'invalid_request', status: 400, message: tooLong })
    expect(isRetryable(failedOver({ status: 'FAILED', ran: true }, refused))).toBe(false)
    const dead = ['EngineCore encountered an issue. See stack trace (above) for the root cause.', 'Background loop has errored already.', 'Engine loop is not running. Inspect the stacktrace to find the original error.', 'CUDA error: an illegal memory access was encountered']
    for (const words of dead) {
      const failure = jobFailure({ status: 'FAILED', error: stamped(words) })
      expect(failure.status).toBe(502)
      expect(isRetryable(failedOver({ status: 'FAILED', ran: true }, failure))).toBe(true)
    }
  })

  it("an endpoint two models share is judged by each model's own breaker policy", async () => {
    // Found in the failover review: the breaker opened by the failing model's threshold for every model, so a
    // model with `failures: 1` took a shared endpoint away from one that asked for three failures in a row.
    const withBreaker = (failures: number) => ({ endpoints: [{ endpointId: 'oaia', weight: 1e6 }, { endpointId: 'oaib' }], mode: 'openai' as const, resilience: { retries: FAST_RETRIES, breaker: { failures, cooldownMs: 60_000 } } })
    const h = harness({ models: { strict: withBreaker(1), lax: withBreaker(3) } })
    h.emulator.configure('oaia', { fault: { kind: 'http', status: 502, times: 1 } })
    const { key } = await h.createKey()
    const ask = async (model: string, n: number) => expect((await h.fetch('/v1/chat/completions', authed(key, chatBody(model, `n${n}`)))).status).toBe(200)
    await ask('strict', 1)
    await ask('strict', 2)
    // One failure opens it for `strict`, which goes straight to the spare; `lax` still goes to it first.
    expect(callsTo(h, 'oaia', 'openai').map((c) => c.status)).toEqual([502])
    await ask('lax', 3)
    expect(callsTo(h, 'oaia', 'openai').map((c) => c.status)).toEqual([502, 200])
    expect(callsTo(h, 'oaib', 'openai')).toHaveLength(2)
  })

  it('an endpoint that keeps failing is skipped for the cool-down (breaker per isolate)', async () => {
    // The isolate's breaker on a clock the test moves, so the cool-down's end is reached without waiting.
    let clock = Date.now()
    const h = harness({ models: twoEndpoints({ breaker: { failures: 2, cooldownMs: 60_000 } }), breaker: new EndpointBreaker({ now: () => clock }) })
    // Three failures, then the endpoint is healthy again.
    h.emulator.configure('oaia', { fault: { kind: 'http', status: 502, times: 3 } })
    const { key } = await h.createKey()
    let n = 0
    const ask = async () => expect((await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', `n${n++}`)))).status).toBe(200)
    for (let i = 0; i < 6; i++) await ask()
    // Two failures open the breaker; every later request goes straight to the healthy endpoint.
    expect(callsTo(h, 'oaia', 'openai')).toHaveLength(2)
    expect(callsTo(h, 'oaib', 'openai')).toHaveLength(6)
    // Just before the cool-down ends, still skipped.
    clock += 59_000
    await ask()
    expect(callsTo(h, 'oaia', 'openai')).toHaveLength(2)
    // Past it, the endpoint is tried again; its one more failure re-opens the breaker at once.
    clock += 1_001
    await ask()
    await ask()
    expect(callsTo(h, 'oaia', 'openai')).toHaveLength(3)
    expect(callsTo(h, 'oaib', 'openai')).toHaveLength(9)
    // Past the next cool-down it answers, and the success closes the breaker: it takes the traffic back.
    clock += 60_001
    await ask()
    await ask()
    expect(callsTo(h, 'oaia', 'openai')).toHaveLength(5)
    expect(callsTo(h, 'oaib', 'openai')).toHaveLength(9)
    // Closed means its count starts over: one new failure (of the two that open it) does not skip it.
    h.emulator.configure('oaia', { fault: { kind: 'http', status: 502, times: 1 } })
    await ask()
    await ask()
    expect(callsTo(h, 'oaia', 'openai')).toHaveLength(7)
    expect(callsTo(h, 'oaib', 'openai')).toHaveLength(10)
  })
})

describe('a breaker that opens during a request', () => {
  it.each(MODELS)("%s: the request's next retry passes over its endpoint while another endpoint's breaker is closed", async (model) => {
    // Found in the config review: the retries kept the turns ordered at the start, so after `a` opened and
    // `b` failed once, the third try went to `a` (skipped by every other request) and the caller got its 502.
    const h = setup({ breaker: { failures: 2, cooldownMs: 60_000 } })
    const [a, b] = [ENDPOINT_A[model]!, ENDPOINT_B[model]!]
    h.emulator.configure(a, { fault: { kind: 'http', status: 502, times: 10 } })
    const { key } = await h.createKey()
    const tries = () => h.emulator.calls.filter((c) => c.op === 'openai' || c.op === 'run').map((c) => `${c.endpointId}:${c.status}`)
    expect((await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'one')))).status).toBe(200)
    expect(tries()).toEqual([`${a}:502`, `${b}:200`])
    // `a` fails a second time in a row (its breaker opens), then `b` once: the retry is `b`'s again.
    h.emulator.configure(b, { fault: { kind: 'http', status: 502, times: 1 } })
    expect((await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'two')))).status).toBe(200)
    expect(tries().slice(2)).toEqual([`${a}:502`, `${b}:502`, `${b}:200`])
  })
})

describe('a breaker whose cool-down ends while a request orders its endpoints', () => {
  it('still leaves every endpoint in the order: a one-endpoint model is answered, not refused for want of an endpoint', async () => {
    // A host's own breaker (or the isolate's on a clock that moves between two reads): open at the first
    // read, closed from the next one on.
    let reads = 0
    const breaker = { isOpen: () => reads++ === 0, success: () => undefined, failure: () => undefined }
    const h = harness({ models: { m: { endpoints: [{ endpointId: 'solo' }], mode: 'openai' } }, breaker })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('m')))
    expect(res.status).toBe(200)
    expect(h.emulator.calls.filter((c) => c.op === 'openai').map((c) => c.endpointId)).toEqual(['solo'])
  })
})

describe('cold starts', () => {
  it.each(NATIVE)('%s: past the TTFT budget a queued job is hedged; the winner answers, the loser is cancelled', async (model) => {
    const h = setup({ ttftBudgetMs: 200, hedge: true })
    h.emulator.configure(ENDPOINT_A[model]!, { coldStartMs: 20_000 })
    const { key } = await h.createKey()
    const started = Date.now()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'Hello', { stream: true })))
    expect(res.status).toBe(200)
    await completeText(res)
    expect(Date.now() - started).toBeLessThan(5_000)
    await h.settle()
    const loser = callsTo(h, ENDPOINT_A[model]!, 'run')[0]
    expect(callsTo(h, ENDPOINT_A[model]!, 'cancel')).toHaveLength(1)
    expect(h.emulator.job(loser!.jobId ?? '')?.status ?? 'CANCELLED').toBe('CANCELLED')
    expect(h.emulator.activeJobs()).toEqual([])
  })

  it.each(NATIVE)('%s: no hedge goes to an endpoint still inside the Retry-After it sent: the response opens with keep-alives instead', async (model) => {
    const h = setup({ ttftBudgetMs: 100, hedge: true })
    h.emulator.configure(ENDPOINT_A[model]!, { fault: { kind: 'http', status: 429, times: 1, retryAfter: 30, ops: ['run'] } })
    h.emulator.configure(ENDPOINT_B[model]!, { coldStartMs: 600 })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'Hello', { stream: true })))
    expect(res.status).toBe(200)
    const text = await res.text()
    await h.settle()
    // `a` asked for 30 s: the hedge past the TTFT budget would have been its only other endpoint.
    expect(callsTo(h, ENDPOINT_A[model]!, 'run').map((c) => c.status)).toEqual([429])
    expect(callsTo(h, ENDPOINT_B[model]!, 'run').map((c) => c.status)).toEqual([200])
    expect(text).toContain(': keep-alive')
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true)
    expect(h.emulator.activeJobs()).toEqual([])
  })

  it.each(NATIVE)('%s: a hedge passes over the endpoint next in turn while its Retry-After holds it, to the next one that is free', async (model) => {
    // `a` asks for 30 s (429), `b` fails once (503), `c` is cold: past the TTFT budget the endpoint next
    // in turn is `a`, still held, but `b` is free again. It gets the hedge, answers, and `c`'s job is cancelled.
    const [a, b, c] = ['a', 'b', 'c'].map((s) => `${ENDPOINT_A[model]!.slice(0, -1)}h${s}`) as [string, string, string]
    const endpoints = [{ endpointId: a, weight: 1e12 }, { endpointId: b, weight: 1e6 }, { endpointId: c, weight: 1 }]
    const h = harness({ models: { [model]: { endpoints, mode: 'native', resilience: { retries: { ...FAST_RETRIES, attempts: 4 }, ttftBudgetMs: 100, hedge: true } } } })
    h.emulator.configure(a, { fault: { kind: 'http', status: 429, times: 1, retryAfter: 30, ops: ['run'] } })
    h.emulator.configure(b, { fault: { kind: 'http', status: 503, times: 1, ops: ['run'] } })
    h.emulator.configure(c, { coldStartMs: 3_000 })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'Hello', { stream: true })))
    expect(res.status).toBe(200)
    await completeText(res)
    await h.settle()
    const runs = (id: string) => callsTo(h, id, 'run').map((call) => call.status)
    expect({ a: runs(a), b: runs(b), c: runs(c) }).toEqual({ a: [429], b: [503, 200], c: [200] })
    expect(callsTo(h, c, 'cancel')).toHaveLength(1)
    expect(h.emulator.activeJobs()).toEqual([])
  })

  it("a hedge's own Retry-After holds its endpoint for the retries that follow", async () => {
    // `currenta` is cold, hedged on `currentb`, which answers 429 Retry-After: 30; `currenta`'s job then
    // FAILS, and again on the retry. The next turn is `currentb`'s, 30 s off: past the budget, so no try.
    const h = setup({ ttftBudgetMs: 100, hedge: true, retries: { ...FAST_RETRIES, attempts: 4, budgetMs: 2_000 } })
    h.emulator.configure('currenta', { coldStartMs: 300, fault: { kind: 'job_failed' } })
    h.emulator.configure('currentb', { fault: { kind: 'http', status: 429, times: 1, retryAfter: 30, ops: ['run'] } })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-current', 'Hello', { stream: true })))
    expect(res.status).toBe(200)
    const events = await readSSE(res)
    await h.settle()
    expect(callsTo(h, 'currenta', 'run').map((c) => c.status)).toEqual([200, 200])
    expect(callsTo(h, 'currentb', 'run').map((c) => c.status)).toEqual([429])
    expect(events).not.toContain('[DONE]')
    expect(events.at(-1)).toMatchObject({ error: { code: 'upstream_error' } })
    expect(h.emulator.activeJobs()).toEqual([])
  })

  it('without a hedge, the response opens at the TTFT budget and keep-alives carry the cold start', async () => {
    const h = setup({ ttftBudgetMs: 100 })
    h.emulator.configure('currenta', { coldStartMs: 1_000 })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-current', 'Hello', { stream: true })))
    expect(res.status).toBe(200)
    const text = await res.text()
    expect(text).toContain(': keep-alive')
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true)
    expect(callsTo(h, 'currentb')).toHaveLength(0)
  })
})

describe('timeouts cancel the job and say so', () => {
  it.each(NATIVE)('%s: no first token in time is a 504 and the queued job is cancelled', async (model) => {
    const h = setup({ timeouts: { firstTokenMs: 300 } })
    h.emulator.configure(ENDPOINT_A[model]!, { coldStartMs: 20_000 })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'Hello', { stream: true })))
    expect(res.status).toBe(504)
    expect(((await res.json()) as OpenAIError).error.code).toBe('upstream_timeout')
    await h.settle()
    expect(callsTo(h, ENDPOINT_A[model]!, 'cancel')).toHaveLength(1)
    expect(h.emulator.activeJobs()).toEqual([])
  })

  it.each(MODELS)('%s: a stall after output hits the idle timeout: error event, no [DONE], job cancelled', async (model) => {
    const h = setup({ timeouts: { idleMs: 300 } })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'x [[emulator:fault=stall,after=3,tokens=20]]', { stream: true })))
    expect(res.status).toBe(200)
    const events = await readSSE(res)
    expect(events).not.toContain('[DONE]')
    expect(streamedText(events).length).toBeGreaterThan(0)
    expect((events.at(-1) as OpenAIError).error.code).toBe('upstream_timeout')
    await h.settle()
    if (model !== 'chat-openai') expect(callsTo(h, ENDPOINT_A[model]!, 'cancel')).toHaveLength(1)
    expect(h.emulator.activeJobs()).toEqual([])
  })

  it.each(NATIVE)('%s: a stall is cut at idleMs even when /stream answers empty pages and keep-alives go out meanwhile', async (model) => {
    // Runpod answers an empty page after each `?wait=` (10 s by default, against an idleMs of 60 s); each one
    // sends the caller a keep-alive, which must not count as the model's output.
    const h = harness({ models: twoEndpoints({ timeouts: { idleMs: 800, totalMs: 5_000 } }), runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', streamWaitMs: 150 } }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
    const { key } = await h.createKey()
    const started = Date.now()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'x [[emulator:fault=stall,after=3,tokens=20]]', { stream: true })))
    expect(res.status).toBe(200)
    const events = await readSSE(res)
    expect(events).not.toContain('[DONE]')
    expect(streamedText(events).length).toBeGreaterThan(0)
    expect(events.at(-1)).toMatchObject({ error: { code: 'upstream_timeout', message: 'The model stopped sending for too long.' } })
    expect(Date.now() - started).toBeLessThan(3_000)
    await h.settle()
    expect(h.emulator.activeJobs()).toEqual([])
  })

  it.each(MODELS)('%s: an answer longer than the total timeout ends with an error event', async (model) => {
    const h = setup({ timeouts: { totalMs: 400, idleMs: 5_000 } })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'x [[emulator:delay=50,tokens=100]]', { stream: true, max_tokens: 200 })))
    expect(res.status).toBe(200)
    const events = await readSSE(res)
    expect(events).not.toContain('[DONE]')
    expect((events.at(-1) as OpenAIError).error.code).toBe('upstream_timeout')
    await h.settle()
    expect(h.emulator.activeJobs()).toEqual([])
  })
})

describe("a timeout on /v1/messages is Anthropic's timeout_error", () => {
  const messages = (content: string, stream: boolean) => JSON.stringify({ model: 'chat-current', max_tokens: 50, stream, messages: [{ role: 'user', content }] })
  type AnthropicError = { type: string; error: { type: string; message: string } }

  it('no first token in time: a 504 typed timeout_error, as Anthropic types its 504', async () => {
    const h = setup({ timeouts: { firstTokenMs: 300 } })
    h.emulator.configure('currenta', { coldStartMs: 20_000 })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/messages', authed(key, messages('Hello', true)))
    expect(res.status).toBe(504)
    expect(await res.json()).toMatchObject({ type: 'error', error: { type: 'timeout_error' } })
    await h.settle()
  })

  it("a stall after output: the stream's error event is typed timeout_error", async () => {
    const h = setup({ timeouts: { idleMs: 300 } })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/messages', authed(key, messages('x [[emulator:fault=stall,after=3,tokens=20]]', true)))
    expect(res.status).toBe(200)
    const text = await res.text()
    const last = text.trimEnd().split('\n').at(-1)!
    expect(JSON.parse(last.slice('data: '.length)) as AnthropicError).toMatchObject({ type: 'error', error: { type: 'timeout_error', message: 'The model stopped sending for too long.' } })
    await h.settle()
    expect(h.emulator.activeJobs()).toEqual([])
  })
})

describe('a JSON answer under the timeout', () => {
  it('chat-openai: a body that stalls mid-way ends at the timeout with an error, not a hang', async () => {
    const stalling = (async (_input: RequestInfo | URL, init?: RequestInit) => {
      const signal = init?.signal
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(new TextEncoder().encode('{"id":"chatcmpl-stall","object":"chat.completion","choices":['))
          // As a fetch body does: aborting the call errors its body.
          signal?.addEventListener('abort', () => controller.error(signal.reason))
        },
      })
      return new Response(body, { headers: { 'content-type': 'application/json' } })
    }) as typeof fetch
    const models = { 'chat-openai': { endpoints: [{ endpointId: 'oaia' }], mode: 'openai' as const, resilience: { timeouts: { totalMs: 300 } } } }
    const h = harness({ models, fetch: stalling })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'Hello')))
    expect(res.status).toBe(502)
    expect(((await res.json()) as OpenAIError).error).toMatchObject({ code: 'upstream_error', message: 'The upstream answered with a body that is not JSON, or it broke off.' })
  })
})

describe('honest stream failures', () => {
  it.each(MODELS)('%s: output then failure: the error event ends it, never [DONE], and no retry runs it twice', async (model) => {
    const h = setup()
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'x [[emulator:fault=mid_stream,after=4,tokens=20,delay=20]]', { stream: true })))
    expect(res.status).toBe(200)
    const events = await readSSE(res)
    expect(events).not.toContain('[DONE]')
    expect(streamedText(events).length).toBeGreaterThan(0)
    expect((events.at(-1) as OpenAIError).error.code).toBe('upstream_error')
    await h.settle()
    expect(h.emulator.calls.filter((c) => c.op === 'run' || c.op === 'openai')).toHaveLength(1)
    expect(h.emulator.activeJobs()).toEqual([])
  })
})

describe('settle reports how a broken stream ended', () => {
  /** The OpenAI routes over the dispatcher with a stage that records `ctx.outcome`, as quota stages see it. */
  function recordingApp() {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const config = resolveConfig({ models: twoEndpoints(), runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2' } })
    const client = new RunpodClient({ apiKey: RUNPOD_KEY, timeoutMs: config.runpod.timeoutMs, fetch: (input, init) => emulator.fetch(new Request(input, init)) })
    const outcomes: CompletionOutcome[] = []
    const record: CompletionStage = async (ctx, next) => {
      void ctx.outcome.then((o) => outcomes.push(o))
      return next(ctx)
    }
    const app = new Hono<GatewayEnv>()
    app.use(async (c, next) => {
      c.set('principal', { models: null } as unknown as Principal)
      await next()
    })
    app.onError((error) => Response.json({ error: error.message }, { status: toGatewayError(error).status }))
    app.route('/v1', openaiRoutes({ models: resolveModels(config), maxBodyBytes: 1 << 20, stages: [record], dispatch: createDispatcher({ client, runpod: config.runpod, streaming: config.streaming }) }))
    return { app, outcomes, emulator }
  }

  it.each(MODELS)('%s: a mid-stream failure settles with producedOutput: true; a clean one with ok', async (model) => {
    const { app, outcomes } = recordingApp()
    const broken = await app.request('/v1/chat/completions', { method: 'POST', body: chatBody(model, 'x [[emulator:fault=mid_stream,after=4,tokens=20,delay=20]]', { stream: true }) })
    expect(await broken.text()).not.toContain('[DONE]')
    const clean = await app.request('/v1/chat/completions', { method: 'POST', body: chatBody(model, 'Hello', { stream: true }) })
    expect(await clean.text()).toContain('[DONE]')
    await new Promise((r) => setTimeout(r, 50))
    expect(outcomes).toHaveLength(2)
    expect(outcomes[0]).toMatchObject({ ok: false, producedOutput: true, error: { code: 'upstream_error' } })
    expect(outcomes[1]).toMatchObject({ ok: true })
    // A current worker's shorthand stream reports no usage: podgate's count settles as `estimate`, never as `usage`.
    const settled = outcomes[1] as { usage?: { completion_tokens: number }; estimate?: { prompt_tokens: number; completion_tokens: number } }
    if (model === 'chat-current') {
      expect(settled.usage).toBeUndefined()
      expect(settled.estimate?.prompt_tokens).toBe(0)
    }
    expect((model === 'chat-current' ? settled.estimate : settled.usage)?.completion_tokens).toBeGreaterThan(0)
  })

  it('a failure before any output settles with producedOutput: false', async () => {
    const { app, outcomes } = recordingApp()
    const res = await app.request('/v1/chat/completions', { method: 'POST', body: chatBody('chat-current', 'x [[emulator:fault=http,status=500]]', { stream: true }) })
    expect(res.status).toBe(502)
    await new Promise((r) => setTimeout(r, 50))
    expect(outcomes).toEqual([expect.objectContaining({ ok: false, producedOutput: false })])
  })
})

describe('a model with endpoints of both modes, OpenAI route first', () => {
  // Found in review: the dispatcher dropped every settle without output from a group that is not the
  // last, so that the other mode could still be tried; but a stream the OpenAI route had already
  // answered cannot be, and its outcome was never settled: the stream slot stayed taken (30 minutes under
  // strict quotas), the reservation was kept, and a cache's coalesced twins waited on it.
  it('a stream that breaks after its first bytes but before a whole event still settles: its stream slot is free again', async () => {
    const partial = 'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"del'
    const upstream = scriptedUpstream(() => [partial, new Error('connection reset')])
    const models: GatewayOptions['models'] = { mixed: { endpoints: [{ endpointId: 'epmixo', mode: 'openai', weight: 1e6 }, { endpointId: 'epmixn', mode: 'native', weight: 1e-6 }] } }
    const h = harness({ models, fetch: upstream.fetch }, createRunpodEmulator({ apiKey: RUNPOD_KEY }))
    const { key } = await h.createKey({ name: 'mixed', quota: { maxConcurrentStreams: 1, tokensPerMinute: 100_000, strict: true } })
    const open = () => h.fetch('/v1/chat/completions', authed(key, chatBody('mixed', 'Hi', { stream: true, max_tokens: 16 })))
    const first = await open()
    expect(first.status).toBe(200)
    expect((await readSSE(first)).at(-1)).toMatchObject({ error: { code: 'upstream_error' } })
    await expect.poll(async () => {
      const next = await open()
      await next.body?.cancel()
      return next.status
    }, { timeout: 3_000 }).toBe(200)
  })
})

describe('Runpod OpenAI-route requests, run by Runpod as jobs', () => {
  for (const stream of [false, true]) {
    it(`one whose connection broke after Runpod took it is not sent again: it may be running (stream: ${stream})`, async () => {
      const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
      const h = harness({ fetch: droppingFetch(emulator, (path) => path.includes('/openai/v1/')) }, emulator)
      const { key } = await h.createKey()
      const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'x [[emulator:tokens=20]]', { max_tokens: 100, stream })))
      expect(res.status).toBe(502)
      expect(await res.text()).toContain('may be running')
      await h.settle()
      expect(emulator.calls.filter((c) => c.op === 'openai')).toHaveLength(1)
    })
  }
})

/**
 * A fetch to the emulator that holds the calls `slow` picks (by endpoint id and op) `ms` first, then
 * answers them `status` itself or passes them on, as a slow upstream does; aborting a call ends its wait.
 * `calls` lists each call as `endpoint op`.
 */
function slowFetch(emulator: ReturnType<typeof createRunpodEmulator>, slow: (endpoint: string, op: string) => { ms: number; status?: number } | undefined) {
  const calls: string[] = []
  const fetchSlow = async (input: RequestInfo | URL, init?: RequestInit) => {
    const request = new Request(input, init)
    const [, , endpoint = '', op = ''] = new URL(request.url).pathname.split('/')
    calls.push(`${endpoint} ${op}`)
    const hold = slow(endpoint, op)
    if (hold) {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(resolve, hold.ms)
        request.signal.addEventListener('abort', () => (clearTimeout(timer), reject(request.signal.reason)), { once: true })
      })
      if (hold.status) return Response.json({ error: 'busy' }, { status: hold.status })
    }
    return emulator.fetch(request)
  }
  return { fetch: fetchSlow as typeof fetch, calls }
}

describe('timeouts.totalMs bounds the whole call, retries and backoff included', () => {
  for (const [mode, stream] of [['openai', false], ['openai', true], ['native', false], ['native', true]] as const) {
    it(`${mode} (stream: ${stream}): a retry whose Retry-After would pass totalMs is not started: the 429 is passed on`, async () => {
      const h = harness({ models: { m: { endpoints: [{ endpointId: 'solo' }], mode, resilience: { retries: FAST_RETRIES, timeouts: { totalMs: 800 } } } } })
      h.emulator.configure('solo', { fault: { kind: 'http', status: 429, times: 1, retryAfter: 1, ops: ['run', 'openai'] } })
      const { key } = await h.createKey()
      const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('m', 'Hi', { stream })))
      await h.settle()
      expect(h.emulator.calls.filter((c) => c.op === 'run' || c.op === 'openai').map((c) => c.status)).toEqual([429])
      expect(res.status).toBe(429)
      expect(res.headers.get('retry-after')).toBe('1')
    })
  }

  for (const [limit, stream] of [['timeouts.totalMs', false], ['timeouts.totalMs', true], ['runpod.timeoutMs', false], ['runpod.timeoutMs', true]] as const) {
    it(`native (stream: ${stream}): a /run still out at ${limit} is answered 504 then, and the job it queued is cancelled once it answers`, async () => {
      const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
      // Runpod answers `/run` on demand: once the caller has its answer, or after 10 s at the latest.
      const { fetch: held, release, queued } = heldFetch(emulator, 'run')
      const model = { endpoints: [{ endpointId: 'solo' }], mode: 'native' as const, ...(limit === 'timeouts.totalMs' ? { resilience: { timeouts: { totalMs: 500 } } } : {}) }
      const runpod = { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', ...(limit === 'runpod.timeoutMs' ? { timeoutMs: 500 } : {}) }
      const h = harness({ models: { m: model }, runpod, fetch: held }, emulator)
      const { key } = await h.createKey()
      const order: string[] = []
      const fallback = setTimeout(() => (order.push('/run answered'), release()), 10_000)
      const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('m', 'Hello', { stream })))
      order.push(`caller answered ${res.status}`)
      clearTimeout(fallback)
      release()
      expect(order).toEqual(['caller answered 504'])
      expect(((await res.json()) as OpenAIError).error.code).toBe('upstream_timeout')
      await Promise.all(queued)
      await h.settle()
      expect(emulator.calls.filter((c) => c.op === 'run')).toHaveLength(1)
      expect(emulator.calls.filter((c) => c.op === 'cancel')).toHaveLength(1)
      expect(emulator.activeJobs()).toEqual([])
    })
  }

  it.each(['chat-openai', 'chat-classic'])('%s: runpod.timeoutMs bounds each try of a JSON answer, so a failover gets all of it again (within totalMs)', async (model) => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    // Each endpoint takes 2.5 s to answer the call that starts the work, `a` with a 503: each try fits in
    // the 4 s of runpod.timeoutMs, both together do not.
    const upstream = slowFetch(emulator, (endpoint, op) => (op !== 'run' && op !== 'openai' ? undefined : endpoint === ENDPOINT_A[model] ? { ms: 2_500, status: 503 } : { ms: 2_500 }))
    const runpod = { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', timeoutMs: 4_000 }
    const h = harness({ models: twoEndpoints(), runpod, fetch: upstream.fetch }, emulator)
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model)))
    await h.settle()
    expect(upstream.calls.filter((call) => / (run|openai)$/.test(call))).toEqual([`${ENDPOINT_A[model]} ${model === 'chat-openai' ? 'openai' : 'run'}`, `${ENDPOINT_B[model]} ${model === 'chat-openai' ? 'openai' : 'run'}`])
    expect(res.status).toBe(200)
    expect(emulator.activeJobs()).toEqual([])
  })

  it('chat-openai: a retry gets only the time left of totalMs, and ends with the timeout error', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    // `oaia` fails after 600 ms; `oaib` would answer 700 ms after it was asked, past the 1 s in all.
    const upstream = slowFetch(emulator, (endpoint) => (endpoint === 'oaia' ? { ms: 600, status: 503 } : { ms: 700 }))
    const h = harness({ models: twoEndpoints({ timeouts: { totalMs: 1_000 } }), fetch: upstream.fetch }, emulator)
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai')))
    expect(upstream.calls).toEqual(['oaia openai', 'oaib openai'])
    expect(res.status).toBe(504)
    expect(((await res.json()) as OpenAIError).error).toMatchObject({ code: 'upstream_timeout', message: 'The upstream did not answer in time.' })
  })

  it('chat-openai: a retried stream waits for its answer only until totalMs, never opening past it', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const upstream = slowFetch(emulator, (endpoint) => (endpoint === 'oaia' ? { ms: 600, status: 503 } : { ms: 700 }))
    const h = harness({ models: twoEndpoints({ timeouts: { totalMs: 1_000, firstTokenMs: 5_000 } }), fetch: upstream.fetch }, emulator)
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'Hi', { stream: true })))
    expect(upstream.calls).toEqual(['oaia openai', 'oaib openai'])
    expect(res.status).toBe(504)
    expect(((await res.json()) as OpenAIError).error.code).toBe('upstream_timeout')
  })

  it.each(NATIVE)('%s: a FAILED job failed over near totalMs gets a 504, not a first chunk cut short, and its job is cancelled', async (model) => {
    const h = setup({ timeouts: { totalMs: 1_000, firstTokenMs: 5_000 } })
    h.emulator.configure(ENDPOINT_A[model]!, { coldStartMs: 600, fault: { kind: 'job_failed' } })
    h.emulator.configure(ENDPOINT_B[model]!, { coldStartMs: 600 })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'Hello', { stream: true })))
    expect(res.status).toBe(504)
    expect(((await res.json()) as OpenAIError).error.code).toBe('upstream_timeout')
    await h.settle()
    expect(callsTo(h, ENDPOINT_B[model]!, 'run')).toHaveLength(1)
    expect(callsTo(h, ENDPOINT_B[model]!, 'cancel')).toHaveLength(1)
    expect(h.emulator.activeJobs()).toEqual([])
  })

  it("a model's other mode, tried after the first failed, gets what is left of totalMs, not all of it again", async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const upstream = slowFetch(emulator, (endpoint) => (endpoint === 'epmixo' ? { ms: 700, status: 503 } : undefined))
    const models: GatewayOptions['models'] = {
      mixed: { endpoints: [{ endpointId: 'epmixo', mode: 'openai', weight: 1e6 }, { endpointId: 'epmixn', mode: 'native', weight: 1e-6 }], resilience: { retries: { ...FAST_RETRIES, attempts: 1 }, timeouts: { totalMs: 1_500 } } },
    }
    const h = harness({ models, fetch: upstream.fetch }, emulator)
    emulator.configure('epmixn', { coldStartMs: 1_000 })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('mixed')))
    await h.settle()
    expect(upstream.calls.slice(0, 2)).toEqual(['epmixo openai', 'epmixn run'])
    expect(res.status).toBe(504)
    expect(((await res.json()) as OpenAIError).error.code).toBe('upstream_timeout')
    expect(emulator.activeJobs()).toEqual([])
  })

  for (const first of ['openai', 'native'] as const) {
    it(`a stream on a model's other mode, tried after ${first} failed, ends at totalMs from the request's start`, async () => {
      const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
      const failing = first === 'openai' ? 'epmixo' : 'epmixn'
      const upstream = slowFetch(emulator, (endpoint) => (endpoint === failing ? { ms: 700, status: 503 } : undefined))
      const endpoints = [{ endpointId: 'epmixo', mode: 'openai' as const, weight: first === 'openai' ? 1e6 : 1e-6 }, { endpointId: 'epmixn', mode: 'native' as const, weight: first === 'native' ? 1e6 : 1e-6 }]
      const h = harness({ models: { mixed: { endpoints, resilience: { retries: { ...FAST_RETRIES, attempts: 1 }, timeouts: { totalMs: 1_500, idleMs: 5_000 } } } }, fetch: upstream.fetch }, emulator)
      const { key } = await h.createKey()
      // 24 tokens 50 ms apart, begun 700 ms in: about 1.9 s from the start, past the 1.5 s in all.
      const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('mixed', 'x [[emulator:delay=50,tokens=24]]', { stream: true, max_tokens: 100 })))
      expect(res.status).toBe(200)
      const events = await readSSE(res)
      await h.settle()
      expect(upstream.calls[0]).toBe(`${failing} ${first === 'openai' ? 'openai' : 'run'}`)
      expect(events).not.toContain('[DONE]')
      expect(events.at(-1)).toMatchObject({ error: { code: 'upstream_timeout', message: 'The answer took longer than podgate allows.' } })
      expect(emulator.activeJobs()).toEqual([])
    })
  }
})

describe("a model's other mode is not tried once timeouts.totalMs has passed", () => {
  it('a native job that FAILED at totalMs is answered as it failed: no OpenAI-route request is sent with no time left', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    emulator.configure('epmixn', { coldStartMs: 10_000 })
    const calls: string[] = []
    // Runpod holds the `/status-sync` wait to its end, and the job FAILED just then: its answer comes in a
    // little after the call's totalMs.
    const upstream = (async (input: RequestInfo | URL, init?: RequestInit) => {
      const request = new Request(input, init)
      const url = new URL(request.url)
      const [, , endpoint = '', op = '', id = ''] = url.pathname.split('/')
      calls.push(`${endpoint} ${op}`)
      if (op !== 'status-sync') return emulator.fetch(request)
      await new Promise((resolve) => setTimeout(resolve, Number(url.searchParams.get('wait')) + 100))
      return Response.json({ id, status: 'FAILED', error: 'boom' })
    }) as typeof fetch
    const endpoints = [{ endpointId: 'epmixn', mode: 'native' as const, weight: 1e6 }, { endpointId: 'epmixo', mode: 'openai' as const, weight: 1e-6 }]
    const h = harness({ models: { mixed: { endpoints, resilience: { retries: FAST_RETRIES, timeouts: { totalMs: 1_500 } } } }, fetch: upstream }, emulator)
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('mixed')))
    await h.settle()
    expect(calls.filter((call) => call.startsWith('epmixo'))).toEqual([])
    expect(res.status).toBe(502)
    expect(((await res.json()) as OpenAIError).error.message).toBe('The model worker failed: boom')
  })
})

describe("a proxy's timeout (504, Cloudflare's 524) is a timeout: the request reached its upstream and may still run", () => {
  for (const status of [504, 524]) {
    it.each(MODELS.flatMap((model) => [[model, false], [model, true]] as const))(`${status}: %s (stream: %s) is not sent again elsewhere, and the caller gets upstream_timeout`, async (model, stream) => {
      const h = setup()
      h.emulator.configure(ENDPOINT_A[model]!, { fault: { kind: 'http', status, ops: ['run', 'openai'] } })
      const { key } = await h.createKey()
      const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'Hello', { stream })))
      await h.settle()
      expect(h.emulator.calls.filter((c) => c.op === 'run' || c.op === 'openai').map((c) => c.endpointId)).toEqual([ENDPOINT_A[model]])
      expect(res.status).toBe(504)
      expect(((await res.json()) as OpenAIError).error.code).toBe('upstream_timeout')
    })
  }
})

describe("one model's misconfiguration does not trip the breaker of an endpoint it shares with another", () => {
  it.each(['sharedcurrent', 'sharedclassic'])("%s: a served name the endpoint does not serve (vLLM's 404) is the operator's to fix, not counted against the endpoint", async (shared) => {
    const spare = shared.replace('shared', 'spare')
    const resilience = { retries: FAST_RETRIES, breaker: { failures: 2, cooldownMs: 60_000 } }
    const models: GatewayOptions['models'] = {
      // A LoRA adapter the endpoint was deployed without: vLLM answers 404 for its name.
      lora: { endpoints: [{ endpointId: shared }], mode: 'native', servedModelName: 'sql-lora', resilience },
      base: { endpoints: [{ endpointId: shared, weight: 1e6 }, { endpointId: spare, weight: 1e-6 }], mode: 'native', resilience },
    }
    const h = harness({ models })
    h.emulator.configure(shared, { servedModelName: 'base-model' })
    const { key } = await h.createKey()
    for (let i = 0; i < 3; i++) {
      const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('lora', `q${i}`)))
      expect(res.status).toBe(502)
      expect(((await res.json()) as OpenAIError).error.code).toBe('route_not_found')
    }
    const lora = callsTo(h, shared, 'run').length
    // The endpoint serves `base` as before: its breaker is closed, and `base` does not move to the spare.
    for (let i = 0; i < 3; i++) expect((await h.fetch('/v1/chat/completions', authed(key, chatBody('base', `b${i}`)))).status).toBe(200)
    expect(callsTo(h, shared, 'run')).toHaveLength(lora + 3)
    expect(callsTo(h, spare, 'run')).toHaveLength(0)
  })

  it("a model's endpoint that lacks its served name is failed over to one that has it: the FAILED job ran nothing", async () => {
    const resilience = { retries: FAST_RETRIES }
    const h = harness({ models: { lora: { endpoints: [{ endpointId: 'lackscurrent', weight: 1e6 }, { endpointId: 'hascurrent', weight: 1e-6 }], mode: 'native', servedModelName: 'sql-lora', resilience } } })
    h.emulator.configure('lackscurrent', { servedModelName: 'base-model' })
    h.emulator.configure('hascurrent', { servedModelName: 'sql-lora' })
    const { key } = await h.createKey()
    expect((await h.fetch('/v1/chat/completions', authed(key, chatBody('lora')))).status).toBe(200)
    expect(callsTo(h, 'hascurrent', 'run')).toHaveLength(1)
  })
})

describe("the last failure carries the shortest Retry-After the call's endpoints sent", () => {
  for (const status of [503, 429]) {
    it(`a ${status} with no Retry-After of its own, after another endpoint's ${status} asked for 2 s, tells the caller 2 s`, async () => {
      const h = harness({ models: { m: { endpoints: [{ endpointId: 'oaia', weight: 1e6 }, { endpointId: 'oaib', weight: 1e-6 }], mode: 'openai', resilience: { retries: { ...FAST_RETRIES, attempts: 2 } } } } })
      h.emulator.configure('oaia', { fault: { kind: 'http', status, retryAfter: 2 } })
      h.emulator.configure('oaib', { fault: { kind: 'http', status } })
      const { key } = await h.createKey()
      const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('m')))
      expect(h.emulator.calls.filter((c) => c.op === 'openai').map((c) => c.endpointId)).toEqual(['oaia', 'oaib'])
      expect(res.status).toBe(status)
      expect(res.headers.get('retry-after')).toBe('2')
    })
  }
})

describe('a caller who leaves while an OpenAI-route stream waits for its first byte', () => {
  it("is not counted against the endpoint's breaker: the endpoint did not fail", async () => {
    const failures: string[] = []
    const breaker = { isOpen: () => false, success: () => undefined, failure: (endpoint: { label: string }) => void failures.push(endpoint.label) }
    // Runpod answers the stream's headers, then holds its first byte (a cold start); as fetch does, the
    // body errors when the request is aborted.
    const upstream = (async (input: RequestInfo | URL, init?: RequestInit) => {
      const request = new Request(input, init)
      const body = new ReadableStream<Uint8Array>({ start: (c) => request.signal.addEventListener('abort', () => c.error(request.signal.reason), { once: true }) })
      return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
    }) as typeof fetch
    const h = harness({ models: { m: { endpoints: [{ endpointId: 'oaia' }, { endpointId: 'oaib' }], mode: 'openai', resilience: { retries: FAST_RETRIES } } }, breaker, fetch: upstream })
    const { key } = await h.createKey()
    const caller = new AbortController()
    setTimeout(() => caller.abort(), 200)
    await h.fetch('/v1/chat/completions', { ...authed(key, chatBody('m', 'Hi', { stream: true })), signal: caller.signal }).catch(() => undefined)
    await h.settle()
    expect(failures).toEqual([])
  })
})
