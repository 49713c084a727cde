/**
 * Concurrent admin writes on KV, which has no compare-and-swap and lets the last write win: purges of
 * different targets, a PATCH or a second rotate racing a rotate, and a key lookup in flight while the
 * same isolate revokes, two PATCHes of one key. `gatedKv()` fixes the order: it holds the answer of one KV
 * read (the read itself runs at once), as a read served before another request's write and answered after
 * it would be. `slowPutKv()` holds chosen writes back, as a slow write that lands after later ones would.
 */
import { env } from 'cloudflare:test'
import { describe, expect, it } from 'vitest'
import { KeyStore } from '../src/auth/keys.ts'
import { sha256Hex } from '../src/crypto/sha256.ts'
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

/** A KV namespace whose chosen `put`s wait, unwritten, until released: a slow write that lands after later ones. */
function slowPutKv(base: KVNamespace) {
  const held: { name: string; reached: () => void; gate: Promise<void> }[] = []
  const kv = new Proxy(base, {
    get(target, prop) {
      const value = Reflect.get(target, prop) as unknown
      if (typeof value !== 'function') return value
      const method = (value as (...a: unknown[]) => Promise<unknown>).bind(target)
      if (prop !== 'put') return method
      return async (name: string, ...rest: unknown[]) => {
        const i = held.findIndex((h) => h.name === name)
        if (i >= 0) {
          const [h] = held.splice(i, 1)
          h!.reached()
          await h!.gate
        }
        return method(name, ...rest)
      }
    },
  })
  return {
    kv,
    /** The next `put(name)` waits, unwritten, until `open()`. */
    hold(name: string) {
      let reached!: () => void
      let open!: () => void
      const reachedP = new Promise<void>((r) => (reached = r))
      held.push({ name, reached, gate: new Promise<void>((r) => (open = r)) })
      return { reached: () => reachedP, open: () => open() }
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

describe('keys: rotation wins every race', () => {
  it('races: a PATCH that read the key before a rotate does not bring the rotated-away secret back', async () => {
    const gated = gatedKv(env.PODGATE_KV)
    const h = harness({ keyCacheTtlMs: 0, kv: () => gated.kv })
    const { id, key: oldKey } = await h.createKey({ name: 'leaked' })
    expect((await h.fetch('/v1/models', authed(oldKey))).status).toBe(200)
    // The PATCH reads the record and its tombstone; the tombstone's answer is held ...
    const hold = gated.hold(`revoked:${id}`)
    const patch = h.fetch(`/admin/keys/${id}`, admin('PATCH', { metadata: { team: 'web' } }))
    await hold.reached()
    // ... while the operator rotates the leaked secret ...
    const rotated = await h.fetch(`/admin/keys/${id}/rotate`, admin('POST'))
    expect(rotated.status).toBe(200)
    const { key: newKey, hint } = (await rotated.json()) as { key: string; hint: string }
    // ... and then the PATCH's writes land.
    hold.open()
    expect((await patch).status).toBe(200)
    const minted = await h.fetch('/v1/tokens', authed(newKey, '{}'))
    const { token } = (await minted.json()) as { token: string }
    expect({
      oldKey: (await h.fetch('/v1/models', authed(oldKey))).status,
      newKey: (await h.fetch('/v1/models', authed(newKey))).status,
      newKeysToken: (await h.fetch('/v1/models', authed(token))).status,
    }).toEqual({ oldKey: 401, newKey: 200, newKeysToken: 200 })
    // The PATCH is not lost either, and the operator's view names the new secret.
    const view = (await (await h.fetch(`/admin/keys/${id}`, admin('GET'))).json()) as { hint: string; metadata: Record<string, string> }
    expect(view).toMatchObject({ hint, metadata: { team: 'web' } })
  })

  it('races: of two rotates that read the key at once, one secret works and the other is refused with its tokens', async () => {
    const gated = gatedKv(env.PODGATE_KV)
    const h = harness({ keyCacheTtlMs: 0, kv: () => gated.kv })
    const { id, key: oldKey } = await h.createKey({ name: 'twice' })
    const hold = gated.hold(`revoked:${id}`)
    const first = h.fetch(`/admin/keys/${id}/rotate`, admin('POST'))
    await hold.reached()
    const second = await h.fetch(`/admin/keys/${id}/rotate`, admin('POST'))
    hold.open()
    const answers = [await first, second]
    const secrets: string[] = []
    for (const res of answers) {
      const body = (await res.json()) as { key?: string }
      if (res.status === 200 && body.key) secrets.push(body.key)
    }
    expect(secrets.length).toBeGreaterThanOrEqual(1)
    const status = async (credential: string) => (await h.fetch('/v1/models', authed(credential))).status
    expect(await status(oldKey)).toBe(401)
    const working = []
    for (const secret of secrets) if ((await status(secret)) === 200) working.push(secret)
    // Exactly one secret works, and it is the one the operator's view names; its tokens work.
    expect(working.length).toBe(1)
    const view = (await (await h.fetch(`/admin/keys/${id}`, admin('GET'))).json()) as { hint: string }
    expect(working[0]!.startsWith(view.hint)).toBe(true)
    const { token } = (await (await h.fetch('/v1/tokens', authed(working[0]!, '{}'))).json()) as { token: string }
    expect(await status(token)).toBe(200)
  })

  it('races: two rotates that both find the old secret unretired leave exactly one new secret working', async () => {
    // Both rotations' check of the old secret's tombstone is answered only once both have asked.
    let arrived = 0
    let bothAsked!: () => void
    const barrier = new Promise<void>((resolve) => (bothAsked = resolve))
    const base = env.PODGATE_KV
    const kv = new Proxy(base, {
      get(target, prop) {
        const value = Reflect.get(target, prop) as unknown
        if (typeof value !== 'function') return value
        const method = (value as (...a: unknown[]) => Promise<unknown>).bind(target)
        if (prop !== 'get') return method
        return async (name: string, ...rest: unknown[]) => {
          const answer = await method(name, ...rest)
          if (name.startsWith('retired:') && arrived < 2) {
            if (++arrived === 2) bothAsked()
            await barrier
          }
          return answer
        }
      },
    })
    const store = new KeyStore(kv, { cacheTtlMs: 0 })
    const { record, key: oldKey } = await store.create({ name: 'double click' })
    const results = await Promise.all([store.rotate(record), store.rotate(record)])
    expect(arrived).toBe(2)
    const issued = results.filter((r) => r !== null)
    expect(issued.length).toBe(1)
    const reader = new KeyStore(base, { cacheTtlMs: 0 })
    expect(await reader.lookup(oldKey)).toBeNull()
    expect(await reader.lookup(issued[0]!.key)).toMatchObject({ id: record.id, hash: issued[0]!.record.hash })
    // The loser's secret never reached anyone, and key:<id> names the winner's whichever write landed last.
    expect(await reader.get(record.id)).toMatchObject({ hash: issued[0]!.record.hash, hint: issued[0]!.record.hint })
  })
})

describe('keys: what a key may do is what the operator sees', () => {
  it("races: a PATCH's slow write of the secret's record, landing after a later PATCH, does not widen the key again", async () => {
    const slow = slowPutKv(env.PODGATE_KV)
    const h = harness({ keyCacheTtlMs: 0, kv: () => slow.kv })
    const { id, key } = await h.createKey({ name: 'wide' })
    // PATCH A writes key:<id>; its write of keyhash:<hash> is slow ...
    const hold = slow.hold(`keyhash:${await sha256Hex(key)}`)
    const renamed = h.fetch(`/admin/keys/${id}`, admin('PATCH', { name: 'renamed' }))
    await hold.reached()
    // ... PATCH B reads A's record, narrows the key and writes both records ...
    expect((await h.fetch(`/admin/keys/${id}`, admin('PATCH', { models: ['chat-openai'] }))).status).toBe(200)
    // ... then A's stale keyhash:<hash> lands.
    hold.open()
    expect((await renamed).status).toBe(200)
    const view = (await (await h.fetch(`/admin/keys/${id}`, admin('GET'))).json()) as { name: string; models: string[] | null }
    expect(view).toMatchObject({ name: 'renamed', models: ['chat-openai'] })
    expect((await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-classic')))).status).toBe(403)
    expect((await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai')))).status).toBe(200)
  })

  it('races: when the two records disagree, the key is held to the operator\'s view even if the other one was written later', async () => {
    const slow = slowPutKv(env.PODGATE_KV)
    const h = harness({ keyCacheTtlMs: 0, kv: () => slow.kv })
    const { id, key } = await h.createKey({ name: 'wide' })
    // PATCH A narrows the key; its write of key:<id> is slow ...
    const holdA = slow.hold(`key:${id}`)
    const narrowed = h.fetch(`/admin/keys/${id}`, admin('PATCH', { models: ['chat-openai'] }))
    await holdA.reached()
    await new Promise((r) => setTimeout(r, 5)) // B's updatedAt is later than A's
    // ... PATCH B read the key before A's write, renames it, and its write of keyhash:<hash> is slow ...
    const holdB = slow.hold(`keyhash:${await sha256Hex(key)}`)
    const renamed = h.fetch(`/admin/keys/${id}`, admin('PATCH', { name: 'renamed' }))
    await holdB.reached()
    // ... A lands both of its records, then B's keyhash:<hash> lands last: the later, wider record.
    holdA.open()
    expect((await narrowed).status).toBe(200)
    holdB.open()
    expect((await renamed).status).toBe(200)
    const view = (await (await h.fetch(`/admin/keys/${id}`, admin('GET'))).json()) as { models: string[] | null }
    expect(view.models).toEqual(['chat-openai'])
    expect((await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-classic')))).status).toBe(403)
  })
})
