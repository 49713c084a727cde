/**
 * Concurrent admin writes on KV, which has no compare-and-swap and lets the last write win: purges of
 * different targets, a PATCH or a second rotate racing a rotate, and a key lookup in flight while the
 * same isolate revokes. `gatedKv()` fixes the order: it holds the answer of one KV read (the read itself
 * runs at once), as a read served before another request's write and answered after it would be.
 */
import { describe, expect, it } from 'vitest'
import { ADMIN_TOKEN, authed, chatBody, harness } from './helpers.ts'

const admin = (method: string, body?: unknown): RequestInit => ({
  method,
  headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
  body: body === undefined ? undefined : JSON.stringify(body),
})

const deterministic = (model: string, content: string) => chatBody(model, content, { temperature: 0, max_tokens: 24 })

describe('cache purges', () => {
  it('races: two purges of different models at once both take effect', async () => {
    const h = harness()
    const { key } = await h.createKey()
    const chat = async (model: string) => {
      const res = await h.fetch('/v1/chat/completions', authed(key, deterministic(model, 'purge race')))
      await h.settle()
      return res.headers.get('x-podgate-cache')
    }
    expect(await chat('chat-current')).toBe('MISS')
    expect(await chat('chat-classic')).toBe('MISS')
    expect(await chat('chat-current')).toBe('HIT')
    expect(await chat('chat-classic')).toBe('HIT')
    const [a, b] = await Promise.all([
      h.fetch('/admin/cache/purge', admin('POST', { model: 'chat-current' })),
      h.fetch('/admin/cache/purge', admin('POST', { model: 'chat-classic' })),
    ])
    expect([a.status, b.status]).toEqual([200, 200])
    await h.settle()
    expect({ current: await chat('chat-current'), classic: await chat('chat-classic') }).toEqual({ current: 'MISS', classic: 'MISS' })
  })

  it("races: a key's whole-scope purge and its per-model purge at once both take effect", async () => {
    const h = harness()
    const { id, key } = await h.createKey()
    const chat = async (model: string, content: string) => {
      const res = await h.fetch('/v1/chat/completions', authed(key, deterministic(model, content)))
      await h.settle()
      return res.headers.get('x-podgate-cache')
    }
    expect(await chat('chat-current', 'scope race')).toBe('MISS')
    expect(await chat('chat-current', 'scope race')).toBe('HIT')
    const [a, b] = await Promise.all([
      h.fetch('/admin/cache/purge', admin('POST', { keyId: id })),
      h.fetch('/admin/cache/purge', admin('POST', { keyId: id, model: 'chat-classic' })),
    ])
    expect([a.status, b.status]).toEqual([200, 200])
    await h.settle()
    expect(await chat('chat-current', 'scope race')).toBe('MISS')
  })
})
