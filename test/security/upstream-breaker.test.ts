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
import { authed, chatBody, harness, RUNPOD_KEY } from '../helpers.ts'

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
    const inner = new EndpointBreaker()
    const failed: string[] = []
    const breaker: Breaker = {
      isOpen: (endpoint, policy) => inner.isOpen(endpoint, policy),
      success: (endpoint) => inner.success(endpoint),
      failure: (endpoint, policy) => {
        failed.push(endpoint.base.slice(endpoint.base.lastIndexOf('/') + 1))
        inner.failure(endpoint, policy)
      },
    }
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
