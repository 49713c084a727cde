/**
 * Concurrent admin writes on KV, which has no compare-and-swap and lets the last write win: purges of
 * different targets, a PATCH or a second rotate racing a rotate, and a key lookup in flight while the
 * same isolate revokes. `gatedKv()` fixes the order: it holds the answer of one KV read (the read itself
 * runs at once), as a read served before another request's write and answered after it would be.
 */
import { env } from 'cloudflare:test'
import { describe, expect, it } from 'vitest'
import { ADMIN_TOKEN, authed, chatBody, harness } from './helpers.ts'

const admin = (method: string, body?: unknown): RequestInit => ({
  method,
  headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
  body: body === undefined ? undefined : JSON.stringify(body),
})

const deterministic = (model: string, content: string) => chatBody(model, content, { temperature: 0, max_tokens: 24 })

/** A KV namespace that can hold the answer of one `get` of `name` until released (the read itself runs at once). */
function gatedKv(base: KVNamespace) {
  let armed: string | undefined
  let reached!: () => void
  let release!: () => void
  let reachedP = Promise.resolve()
  let gate = Promise.resolve()
  const kv = new Proxy(base, {
    get(target, prop) {
      if (prop === 'get') {
        return async (name: string, ...rest: unknown[]) => {
          const value = await (target.get as (...a: unknown[]) => Promise<unknown>).call(target, name, ...rest)
          if (armed !== undefined && name === armed) {
            armed = undefined
            reached()
            await gate
          }
          return value
        }
      }
      const value = Reflect.get(target, prop) as unknown
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value
    },
  })
  return {
    kv,
    /** The next `get(name)` reads now and answers only after `open()`. */
    hold(name: string) {
      armed = name
      reachedP = new Promise<void>((r) => (reached = r))
      gate = new Promise<void>((r) => (release = r))
      return { reached: () => reachedP, open: () => release() }
    },
  }
}

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

describe('keys: the isolate that changed a key', () => {
  it('races: in the isolate that revoked, a key is refused at once even if a lookup was in flight during the revoke', async () => {
    const gated = gatedKv(env.PODGATE_KV)
    const h = harness({ kv: () => gated.kv }) // default keyCacheTtlMs: 10 s
    const { id, key } = await h.createKey({ name: 'to revoke' })
    const hold = gated.hold(`revoked:${id}`)
    const inFlight = h.fetch('/v1/models', authed(key))
    await hold.reached()
    expect((await h.fetch(`/admin/keys/${id}`, admin('DELETE'))).status).toBe(200)
    hold.open()
    expect((await inFlight).status).toBe(200) // it began before the revoke
    expect((await h.fetch('/v1/models', authed(key))).status).toBe(401)
  })

  it('races: in the isolate that rotated, the old secret is refused at once even if a lookup was in flight during the rotate', async () => {
    const gated = gatedKv(env.PODGATE_KV)
    const h = harness({ kv: () => gated.kv })
    const { id, key } = await h.createKey({ name: 'to rotate' })
    const hold = gated.hold(`revoked:${id}`)
    const inFlight = h.fetch('/v1/models', authed(key))
    await hold.reached()
    expect((await h.fetch(`/admin/keys/${id}/rotate`, admin('POST'))).status).toBe(200)
    hold.open()
    expect((await inFlight).status).toBe(200)
    expect((await h.fetch('/v1/models', authed(key))).status).toBe(401)
  })
})
