/**
 * L4: tokens minted from one key for different end users must not read each other's cached answers.
 * A token minted with `sub` (the backend's user id) has the cache scope of that subject; a token
 * without one shares its key's scope, as the key's own calls do.
 */
import { describe, expect, it } from 'vitest'
import { authed, chatBody, harness } from '../helpers.ts'
import type { Harness } from '../helpers.ts'

const question = chatBody('chat-current', 'What did I tell you yesterday?', { temperature: 0, max_tokens: 24 })

async function mint(h: Harness, key: string, body: Record<string, unknown>): Promise<string> {
  const res = await h.fetch('/v1/tokens', authed(key, JSON.stringify(body)))
  expect(res.status).toBe(201)
  const minted = (await res.json()) as { token: string; sub: string | null }
  expect(minted.sub).toBe(body.sub ?? null)
  return minted.token
}

async function ask(h: Harness, credential: string): Promise<string | null> {
  const res = await h.fetch('/v1/chat/completions', authed(credential, question))
  expect(res.status).toBe(200)
  await res.text()
  await h.settle()
  return res.headers.get('x-podgate-cache')
}

describe('L4 cache scope of minted tokens', () => {
  it("auth-cache-scope: a token minted for one sub never reads another sub's cached answer; a token without sub shares the key's", async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'app backend' })
    const alice = await mint(h, key, { sub: 'user-alice' })
    const bob = await mint(h, key, { sub: 'user-bob' })
    const anonymous = await mint(h, key, {})

    expect(await ask(h, alice)).toBe('MISS')
    expect(await ask(h, alice)).toBe('HIT')
    expect(await ask(h, bob)).toBe('MISS')
    expect(await ask(h, key)).toBe('MISS')
    expect(await ask(h, anonymous)).toBe('HIT')
    // A second token for alice is still alice.
    expect(await ask(h, await mint(h, key, { sub: 'user-alice' }))).toBe('HIT')
  })

  it('auth-cache-scope: sub must be printable ASCII without spaces', async () => {
    const h = harness()
    const { key } = await h.createKey({ name: 'app backend' })
    const res = await h.fetch('/v1/tokens', authed(key, JSON.stringify({ sub: 'two words' })))
    expect(res.status).toBe(400)
  })
})
