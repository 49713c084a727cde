/**
 * Issue 15, item 13: the circuit breaker is per isolate by default. Measured here: every isolate pays
 * `failures` calls to a dead endpoint before it skips it (each failed over, so callers still get 200s).
 * The choice: a host passes one `breaker` to several gateways and they learn together.
 */
import { describe, expect, it } from 'vitest'
import { EndpointBreaker } from '../../src/index.ts'
import type { Breaker } from '../../src/index.ts'
import type { GatewayOptions } from '../../src/index.ts'
import { createRunpodEmulator } from '../../src/testing/index.ts'
import type { EmulatorOp } from '../../src/testing/index.ts'
import { authed, chatBody, harness, readSome, RUNPOD_KEY } from '../helpers.ts'

const MODELS: GatewayOptions['models'] = {
  m: {
    endpoints: [{ endpointId: 'deada', weight: 1e6 }, { endpointId: 'liveb' }],
    mode: 'openai',
    resilience: { retries: { attempts: 3, baseDelayMs: 1, maxDelayMs: 5, budgetMs: 5_000 }, breaker: { failures: 3, cooldownMs: 600_000 } },
  },
}

async function deadCalls(shared: EndpointBreaker | undefined): Promise<number> {
  const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
  emulator.configure('deada', { fault: { kind: 'http', status: 503 } })
  // Two gateways stand for two isolates: each has its own breaker unless one is shared.
  const isolates = [harness({ models: MODELS, breaker: shared }, emulator), harness({ models: MODELS, breaker: shared }, emulator)]
  const { key } = await isolates[0]!.createKey()
  for (let i = 0; i < 8; i++) {
    for (const h of isolates) expect((await h.fetch('/v1/chat/completions', authed(key, chatBody('m', `q${i}`)))).status).toBe(200)
  }
  return emulator.calls.filter((c) => c.endpointId === 'deada').length
}

describe('item 13: breaker scope', () => {
  it('upstream-breaker: per isolate, a dead endpoint costs failures x isolates calls; a shared breaker costs failures', async () => {
    expect(await deadCalls(undefined)).toBe(3 * 2)
    expect(await deadCalls(new EndpointBreaker())).toBe(3)
  })

  it("upstream-breaker-wrapped: a host Breaker that wraps an EndpointBreaker passes it each call as the interface gives it", async () => {
    // docs/failure-behaviour.md: any implementation of `Breaker`, here one that logs and delegates. Each
    // call goes through with its arguments, the model's policy included: this file's typecheck fails if
    // EndpointBreaker stops taking them.
    const { breaker, failed } = recordingBreaker()
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    emulator.configure('deada', { fault: { kind: 'http', status: 503 } })
    const h = harness({ models: MODELS, breaker }, emulator)
    const { key } = await h.createKey()
    for (let i = 0; i < 5; i++) expect((await h.fetch('/v1/chat/completions', authed(key, chatBody('m', `w${i}`)))).status).toBe(200)
    // `failures: 3`: three failures open it, and the dead endpoint is asked no more.
    expect(failed).toEqual(['deada', 'deada', 'deada'])
    expect(emulator.calls.filter((c) => c.endpointId === 'deada').length).toBe(3)
  })
})

describe('the breaker on the native surface', () => {
  it('upstream-breaker-native: /v2/{model}/run skips an endpoint whose breaker is open, and its own failures open it', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    emulator.configure('deadn', { fault: { kind: 'http', status: 503 } })
    // The weights make the dead endpoint the first pick of every call.
    const models: GatewayOptions['models'] = {
      n: { endpoints: [{ endpointId: 'deadn', weight: 1e6 }, { endpointId: 'liven' }], mode: 'native', resilience: { breaker: { failures: 2, cooldownMs: 600_000 } } },
    }
    const h = harness({ models }, emulator)
    const { key } = await h.createKey()
    const run = async () => (await h.fetch('/v2/n/run', { ...authed(key, JSON.stringify({ input: { prompt: 'Hello' } })) })).status
    // Its own two failures open the breaker (a 503 refused the job: none was queued)...
    expect([await run(), await run()]).toEqual([503, 503])
    // ...then every job goes to the live endpoint, and the dead one is asked no more.
    for (let i = 0; i < 4; i++) expect(await run()).toBe(200)
    expect(emulator.calls.filter((c) => c.endpointId === 'deadn').length).toBe(2)
    await h.settle()
  })
})

describe('retries while some breakers are open', () => {
  it('upstream-breaker-retry: a retry goes to an endpoint whose breaker is closed again, not to the open ones', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    for (const dead of ['deadb', 'deadc']) emulator.configure(dead, { fault: { kind: 'http', status: 503 } })
    const models: GatewayOptions['models'] = {
      m: { endpoints: [{ endpointId: 'livea' }, { endpointId: 'deadb' }, { endpointId: 'deadc' }], mode: 'openai', resilience: { retries: { baseDelayMs: 1, maxDelayMs: 2 } } },
    }
    // The two dead endpoints' breakers are open (as three calls, the default `breaker.failures`, would have left them).
    const breaker = new EndpointBreaker()
    for (const dead of ['deadb', 'deadc']) for (let i = 0; i < 3; i++) breaker.failure({ base: `https://emulator.test/v2/${dead}` } as Parameters<Breaker['failure']>[0])
    const h = harness({ models, breaker }, emulator)
    const { key } = await h.createKey()
    // The live endpoint fails once: its retry was spent on the two open ones, and the caller got a 502.
    emulator.configure('livea', { fault: { kind: 'http', status: 503, times: 1 } })
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('m')))
    expect(res.status).toBe(200)
    expect(emulator.calls.map((c) => `${c.endpointId} ${c.status}`)).toEqual(['livea 503', 'livea 200'])
  })
})

describe('what closes a breaker on the native surface', () => {
  it('upstream-breaker-queued: a job /run queued is no success: it does not close a breaker its workers keep failing', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    // Runpod's API queues jobs while the endpoint's workers fail every call the OpenAI surface makes.
    emulator.configure('deadq', { fault: { kind: 'http', status: 503, ops: ['openai'] } })
    const models: GatewayOptions['models'] = {
      q: {
        endpoints: [{ endpointId: 'deadq', weight: 1e6 }, { endpointId: 'liveq' }],
        mode: 'openai',
        resilience: { retries: { attempts: 2, baseDelayMs: 1, maxDelayMs: 2 }, breaker: { failures: 3, cooldownMs: 600_000 } },
      },
    }
    const h = harness({ models }, emulator)
    const { key } = await h.createKey()
    for (let i = 0; i < 4; i++) {
      for (const q of ['a', 'b']) expect((await h.fetch('/v1/chat/completions', authed(key, chatBody('q', `${q}${i}`)))).status).toBe(200)
      expect((await h.fetch('/v2/q/run', authed(key, JSON.stringify({ input: { prompt: 'Hello' } })))).status).toBe(200)
    }
    // Three failures in a row open it, whatever /run queued in between: the dead route is asked no more.
    expect(emulator.calls.filter((c) => c.endpointId === 'deadq' && c.op === 'openai').length).toBe(3)
    await h.settle()
  })
})

/** A breaker that records the endpoint of each failure it is told of, and judges as the in-isolate one does. */
function recordingBreaker(): { breaker: Breaker; failed: string[] } {
  const inner = new EndpointBreaker()
  const failed: string[] = []
  const breaker: Breaker = {
    isOpen: (endpoint, policy) => inner.isOpen(endpoint, policy),
    success: (endpoint) => inner.success(endpoint),
    failure: (endpoint, policy) => {
      failed.push(endpoint.label)
      inner.failure(endpoint, policy)
    },
  }
  return { breaker, failed }
}

/** The emulator, but an endpoint named `hang` takes every call and never answers it (until the call is aborted, as fetch ends). */
function hanging(emulator: ReturnType<typeof createRunpodEmulator>): typeof fetch {
  return (async (input: RequestInfo | URL, init?: RequestInit) => {
    const request = new Request(input, init)
    if (!new URL(request.url).pathname.startsWith('/v2/hang/')) return emulator.fetch(request)
    return new Promise<never>((_, reject) => request.signal.addEventListener('abort', () => reject(request.signal.reason), { once: true }))
  }) as typeof fetch
}

const FAST = { attempts: 3, baseDelayMs: 10, maxDelayMs: 50, budgetMs: 5_000 }
const RUNPOD = { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2' }

describe("podgate's own timeout of a call counts against the endpoint's breaker, as a proxy's 504 does", () => {
  it.each([false, true])('upstream-breaker-timeout: an endpoint that never answers opens its breaker after `failures` timeouts; the next caller is served by the other (stream: %s)', async (stream) => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const models: GatewayOptions['models'] = {
      m: { endpoints: [{ endpointId: 'hang', weight: 1e6 }, { endpointId: 'live' }], mode: 'openai', resilience: { retries: FAST, timeouts: { firstTokenMs: 300 }, breaker: { failures: 2, cooldownMs: 600_000 } } },
    }
    const h = harness({ models, runpod: { ...RUNPOD, timeoutMs: 300 }, fetch: hanging(emulator) }, emulator)
    const { key } = await h.createKey()
    // A timeout is not retried (the call may be running): the first two callers wait it out and get a 504.
    for (let i = 0; i < 2; i++) expect((await h.fetch('/v1/chat/completions', authed(key, chatBody('m', `t${i}`, { stream })))).status).toBe(504)
    // The third is not sent to `hang` (a timeout there would be its 504): its breaker is open.
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('m', 'third', { stream })))
    expect(res.status).toBe(200)
    await res.text()
    expect(emulator.calls.filter((c) => c.endpointId === 'live')).toHaveLength(1)
  })

  it.each([false, true])('upstream-breaker-timeout-native: a job that never starts counts once its time is up (stream: %s)', async (stream) => {
    const { breaker, failed } = recordingBreaker()
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    emulator.configure('coldn', { coldStartMs: 60_000 })
    const models: GatewayOptions['models'] = { n: { endpoints: [{ endpointId: 'coldn' }], mode: 'native', resilience: { retries: FAST, timeouts: { firstTokenMs: 300 } } } }
    const h = harness({ models, breaker, runpod: { ...RUNPOD, timeoutMs: 1_500 } }, emulator)
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('n', 'Hi', { stream })))
    expect(res.status).toBe(504)
    await h.settle()
    expect(failed).toEqual(['coldn'])
  })

  it.each([['m', 'openai'], ['n', 'native']])('upstream-breaker-timeout-idle: %s (%s) a stream that stalls past idleMs counts against its endpoint', async (model, mode) => {
    const { breaker, failed } = recordingBreaker()
    const models: GatewayOptions['models'] = { [model]: { endpoints: [{ endpointId: `stall${model}` }], mode: mode as 'openai', resilience: { retries: FAST, timeouts: { idleMs: 300 } } } }
    const h = harness({ models, breaker })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'x [[emulator:fault=stall,after=3,tokens=20]]', { stream: true })))
    expect(res.status).toBe(200)
    expect(await res.text()).toContain('upstream_timeout')
    await h.settle()
    expect(failed).toEqual([`stall${model}`])
  })
})

describe("what is no endpoint's timeout, and never counts", () => {
  it.each([['o', 'openai', 'openai'], ['n', 'native', 'run']] as const)('upstream-breaker-unsent: %s (%s) a retry whose first-token deadline passed in its backoff is not sent, nor counted', async (model, mode, op) => {
    const { breaker, failed } = recordingBreaker()
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    // Its 503 asks for 1 s, past the first-token deadline: the retry has no time left when its turn comes.
    emulator.configure(`only${model}`, { fault: { kind: 'http', status: 503, retryAfter: 1, times: 1, ops: [op as EmulatorOp] } })
    const models: GatewayOptions['models'] = { [model]: { endpoints: [{ endpointId: `only${model}` }], mode, resilience: { retries: FAST, timeouts: { firstTokenMs: 300 } } } }
    const h = harness({ models, breaker }, emulator)
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'Hi', { stream: true })))
    expect(res.status).toBe(504)
    await h.settle()
    // The 503 counts; the try that was never made does not.
    expect(failed).toEqual([`only${model}`])
    expect(emulator.calls.filter((c) => c.op === op)).toHaveLength(1)
  })

  it.each([false, true])('upstream-breaker-gone: a caller who leaves while its native job is queued is no failure of the endpoint (stream: %s)', async (stream) => {
    const { breaker, failed } = recordingBreaker()
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    emulator.configure('coldg', { coldStartMs: 60_000 })
    const models: GatewayOptions['models'] = { g: { endpoints: [{ endpointId: 'coldg' }], mode: 'native', resilience: { retries: FAST, ttftBudgetMs: 100, timeouts: { firstTokenMs: 1_000 } } } }
    const h = harness({ models, breaker, runpod: { ...RUNPOD, timeoutMs: 1_500 } }, emulator)
    const { key } = await h.createKey()
    const caller = new AbortController()
    setTimeout(() => caller.abort(), 300)
    const res = await h.fetch('/v1/chat/completions', { ...authed(key, chatBody('g', 'Hi', { stream })), signal: caller.signal }).catch(() => undefined)
    await res?.text().catch(() => undefined)
    await h.settle()
    expect(emulator.calls.filter((c) => c.op === 'cancel')).toHaveLength(1)
    expect(failed).toEqual([])
  })

  it.each([['o', 'openai'], ['n', 'native']] as const)('upstream-breaker-cancelled: %s (%s) a caller who cancels its stream mid-answer is no failure of the endpoint', async (model, mode) => {
    const { breaker, failed } = recordingBreaker()
    const models: GatewayOptions['models'] = { [model]: { endpoints: [{ endpointId: `stall${model}` }], mode, resilience: { retries: FAST, timeouts: { idleMs: 400 } } } }
    const h = harness({ models, breaker })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody(model, 'x [[emulator:fault=stall,after=3,tokens=20]]', { stream: true })))
    const reader = await readSome(res, 1)
    // The model stalls; the caller gives up on it first, before the idle timeout.
    await reader.cancel()
    await new Promise((resolve) => setTimeout(resolve, 600))
    await h.settle()
    expect(failed).toEqual([])
  })

  it.each([false, true])('upstream-breaker-hedge: a queued native job hedged (%s) or kept alive counts only at its final timeout, once', async (hedge) => {
    const { breaker, failed } = recordingBreaker()
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    for (const id of ['colda', 'coldb']) emulator.configure(id, { coldStartMs: 60_000 })
    const models: GatewayOptions['models'] = {
      h: { endpoints: [{ endpointId: 'colda', weight: 1e6 }, { endpointId: 'coldb' }], mode: 'native', resilience: { retries: FAST, ttftBudgetMs: 150, hedge, timeouts: { firstTokenMs: 800 } } },
    }
    const h = harness({ models, breaker }, emulator)
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('h', 'Hi', { stream: true })))
    // Past the TTFT budget the response opened (keep-alives) or the job was hedged; neither is a failure.
    expect(failed).toEqual([])
    expect(await res.text()).toContain('upstream_timeout')
    await h.settle()
    // Both jobs (or the one) had no first token by firstTokenMs: each endpoint counts once.
    expect(failed.sort()).toEqual(hedge ? ['colda', 'coldb'] : ['colda'])
  })
})
