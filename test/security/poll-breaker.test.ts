/**
 * An endpoint whose job polls keep failing (5xx after every try) is at fault: its breaker opens as it
 * does for a failing `/run`, though a failed poll is never retried elsewhere (the job may be running).
 */
import { describe, expect, it } from 'vitest'
import type { GatewayOptions } from '../../src/index.ts'
import { createRunpodEmulator } from '../../src/testing/index.ts'
import { authed, chatBody, harness, RUNPOD_KEY } from '../helpers.ts'

const MODELS: GatewayOptions['models'] = {
  m: {
    endpoints: [{ endpointId: 'deadaclassic', weight: 1e6 }, { endpointId: 'livebclassic' }],
    mode: 'native',
    resilience: { retries: { attempts: 3, baseDelayMs: 1, maxDelayMs: 5, budgetMs: 60_000 }, breaker: { failures: 3, cooldownMs: 600_000 } },
  },
}

describe('breaker and failed polls', () => {
  it('an endpoint whose status-sync polls always fail (503) opens its breaker after `failures` requests', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    emulator.configure('deadaclassic', { fault: { kind: 'http', status: 503, ops: ['status-sync'] } })
    const h = harness({ models: MODELS }, emulator)
    const { key } = await h.createKey()
    const statuses: number[] = []
    for (let i = 0; i < 6; i++) {
      const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('m', `q${i} [[emulator:tokens=3,delay=200]]`)))
      await res.text()
      statuses.push(res.status)
    }
    await h.settle()
    // The dead endpoint is run at most `failures` times: then the breaker sends the model's calls to the live one.
    expect(emulator.calls.filter((c) => c.endpointId === 'deadaclassic' && c.op === 'run').length).toBeLessThanOrEqual(3)
    expect(statuses.slice(3)).toEqual([200, 200, 200])
  }, 120_000)
})
