/**
 * Issue 15, L5: `maxConcurrentStreams` holds `/v2/{model}/stream/{id}` job event streams too. Each open
 * event stream takes one of the key's stream slots until it ends.
 */
import { describe, expect, it } from 'vitest'
import { authed, harness } from '../helpers.ts'

describe('L5: concurrent job event streams', () => {
  it('upstream-L5: a second job SSE stream past maxConcurrentStreams is a 429; the slot frees when the first ends', async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'q', quota: { maxConcurrentStreams: 1, strict: true } })
    const run = async (content: string) => {
      const res = await h.fetch('/v2/chat-classic/run', authed(key, JSON.stringify({ input: { messages: [{ role: 'user', content }], stream: true } })))
      return ((await res.json()) as { id: string }).id
    }
    const sse = (id: string) => h.fetch(`/v2/chat-classic/stream/${id}`, { headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream' } })
    const slow = await run('slow [[emulator:tokens=8,delay=30]]')
    const quick = await run('quick [[emulator:tokens=2]]')

    const first = await sse(slow)
    expect(first.status).toBe(200)
    const second = await sse(quick)
    expect(second.status).toBe(429)
    expect(await second.json()).toMatchObject({ code: 'rate_limited' })
    expect(second.headers.get('retry-after')).toBeTruthy()

    expect(await first.text()).toContain('event: done')
    await h.settle()
    const third = await sse(quick)
    expect(third.status).toBe(200)
    expect(await third.text()).toContain('event: done')
  })
})
