import { describe, expect, it } from 'vitest'
import { runJob } from './job-calls.ts'
import type { CompletionCall } from './types.ts'
import type { Endpoint } from './runpod/client.ts'

const endpoint: Endpoint = { base: 'https://api.runpod.ai/v2/a', label: 'a', mode: 'native', weight: 1, credential: { kind: 'runpod' } }

describe('runJob', () => {
  it('sends no /run when its deadline has passed: the job would only be cancelled, after a warm worker may have billed it', async () => {
    const runs: unknown[] = []
    const call = {
      client: { run: (...args: unknown[]) => (runs.push(args), Promise.resolve({ id: 'j', status: 'IN_QUEUE' })) },
      runpod: { timeoutMs: 120_000 },
      request: { kind: 'chat', body: {}, sampling: { max_tokens: 1 } },
      model: {},
      waitUntil: () => undefined,
    } as unknown as CompletionCall
    await expect(runJob(call, endpoint, Date.now() - 1)).rejects.toMatchObject({ code: 'upstream_timeout' })
    expect(runs).toEqual([])
  })
})
