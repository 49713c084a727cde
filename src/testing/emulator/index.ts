/**
 * A faithful in-process emulator of Runpod Serverless endpoints running worker-vllm, for tests and
 * local development. Web-standard APIs only: it runs inside workerd and on Node alike.
 */

import { createEmulatorApp } from './app.ts'
import type { EmulatorContext } from './context.ts'
import { EndpointRegistry } from './endpoints.ts'
import { isTerminal, jobState, JobStore, viewJob } from './jobs.ts'
import type { EmulatorCall, EmulatorOptions, RunpodEmulator } from './types.ts'
import { RateLimits } from './rate-limits.ts'

const DEFAULT_MAX_WAIT_MS = 10_000
const DEFAULT_MAX_CALLS = 100_000

/**
 * Creates an emulator. Endpoint ids need no registration: an id containing `classic` behaves as a
 * worker-vllm <= v2.23 endpoint, any other id as >= v2.24.
 *
 * @example
 * const emulator = createRunpodEmulator({ apiKey: 'rp_test', endpoints: { slow: { tokenDelayMs: 20 } } })
 * const res = await emulator.fetch(new Request('http://emulator/v2/vllmclassic/runsync', {
 *   method: 'POST',
 *   headers: { authorization: 'Bearer rp_test' },
 *   body: JSON.stringify({ input: { prompt: 'Hello' } }),
 * }))
 */
export function createRunpodEmulator(options: EmulatorOptions = {}): RunpodEmulator {
  const calls: EmulatorCall[] = []
  const context: EmulatorContext = {
    now: options.now ?? Date.now,
    maxWaitMs: options.maxWaitMs ?? DEFAULT_MAX_WAIT_MS,
    maxCalls: options.maxCalls ?? DEFAULT_MAX_CALLS,
    apiKey: options.apiKey,
    endpoints: new EndpointRegistry({ defaults: options.defaults, endpoints: options.endpoints }),
    jobs: new JobStore(),
    calls,
    lastRequests: new Map(),
    rateLimits: new RateLimits(),
  }

  const emulator: RunpodEmulator = {
    calls,
    async fetch(request) {
      return app.fetch(request)
    },
    reset() {
      // Emptied in place: callers may hold the array.
      calls.length = 0
      context.jobs.clear()
      context.endpoints.reset()
      context.lastRequests.clear()
      context.rateLimits.reset()
    },
    lastRequest(endpointId) {
      return context.lastRequests.get(endpointId)
    },
    activeJobs() {
      const now = context.now()
      return context.jobs
        .all(now)
        .filter((job) => !isTerminal(jobState(job, now).status))
        .map((job) => viewJob(job, now))
    },
    job(id) {
      const now = context.now()
      const job = context.jobs.get(id, now)
      return job ? viewJob(job, now) : undefined
    },
    configure(endpointId, behaviour) {
      context.endpoints.configure(endpointId, behaviour)
    },
  }
  const app = createEmulatorApp(context, emulator)
  return emulator
}
