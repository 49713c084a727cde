/**
 * L9: a wait inside a request (`sleep(ms, signal)`) must remove its abort listener when the timer
 * fires: a job event stream polls hundreds of times on one request signal, and each poll that left a
 * listener behind kept it (and its closure) until the request ended.
 */
import { describe, expect, it } from 'vitest'
import { jobEventStream } from '../../src/native-surface/job-events.ts'
import type { RunpodClient } from '../../src/upstream/runpod/client.ts'

/** An AbortSignal that counts the listeners attached to it and not yet removed. */
function countingSignal(): { signal: AbortSignal; live: () => number } {
  const signal = new AbortController().signal
  const listeners = new Set<unknown>()
  const add = signal.addEventListener.bind(signal)
  const remove = signal.removeEventListener.bind(signal)
  signal.addEventListener = ((...args: Parameters<typeof add>) => {
    listeners.add(args[1])
    add(...args)
  }) as typeof signal.addEventListener
  signal.removeEventListener = ((...args: Parameters<typeof remove>) => {
    listeners.delete(args[1])
    remove(...args)
  }) as typeof signal.removeEventListener
  return { signal, live: () => listeners.size }
}

describe('L9 sleep releases its abort listener', () => {
  it('auth-abort-listeners: a job event stream of 40 polls holds no more abort listeners than it started with', async () => {
    const { signal, live } = countingSignal()
    let polls = 0
    const client = {
      // An item a page, as Runpod hands them out: once, so the page after the terminal one holds none.
      stream: async () => ({ status: ++polls < 40 ? 'IN_PROGRESS' : 'COMPLETED', stream: polls <= 40 ? [{ output: { text: 'x' } }] : [] }),
      status: async () => ({ status: 'COMPLETED' }),
      cancel: async () => ({ status: 'CANCELLED' }),
    } as unknown as RunpodClient
    const res = jobEventStream({
      client,
      job: { kind: 'raw', endpoint: { base: 'http://upstream.test/v2/x', label: 'x', mode: 'native', weight: 1, credential: { kind: 'runpod' } }, upstreamId: 'job1' },
      waitMs: 0,
      maxPolls: 100,
      maxMs: 60_000,
      signal,
      waitUntil: () => undefined,
      minPollIntervalMs: 5,
    })
    const text = await res.text()
    expect(text).toContain('event: done')
    // 40 pages, and the one after the terminal page that held an item (runpod-python asks it too).
    expect(polls).toBe(41)
    // The stream's own cancel-on-abort listener; none per poll.
    expect(live()).toBeLessThanOrEqual(1)
  })
})
