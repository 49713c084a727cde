/**
 * Issue 15, item 13: the circuit breaker is per isolate by default. Measured here: every isolate pays
 * `failures` calls to a dead endpoint before it skips it (each failed over, so callers still get 200s).
 * The choice: a host passes one `breaker` to several gateways and they learn together.
 */
import { describe, expect, it } from 'vitest'
import { EndpointBreaker } from '../../src/index.ts'
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
})
