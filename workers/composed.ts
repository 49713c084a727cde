/**
 * podgate composed into a larger Hono app: the app has its own pages and its own session login (a
 * signed cookie), and mounts podgate under `/ai`. The app's auth feeds podgate through the `credential`
 * hook: a signed-in user's requests use a podgate key the app created for them and keeps server-side,
 * so the browser never holds a podgate key at all. Callers without a session may still send a key as
 * `Authorization: Bearer`.
 *
 * Deploy: `npm run deploy -- --config workers/composed.wrangler.toml` (docs/composition.md), which checks it first.
 * Tested by test/composition.test.ts; docs/composition.md shows this file whole, and
 * test/e2e/pack.test.ts typechecks it there against the packed package.
 *
 * The login here is a stand-in (any well-formed user name signs in): put your real identity provider
 * in `POST /login`; the rest stays as it is.
 */
import { env } from 'cloudflare:workers'
import { Hono } from 'hono'
import type { Context } from 'hono'
import { deleteCookie, getSignedCookie, setSignedCookie } from 'hono/cookie'
import { bearerCredential, createGateway, KeyStore, openApiHandler } from '../src/index.ts'
import { optionsFromEnv } from '../src/worker.ts'
import type { PodgateWorkerEnv } from '../src/worker.ts'

export interface ComposedEnv extends PodgateWorkerEnv {
  /** Signs the session cookie (32+ characters). `wrangler secret put APP_SESSION_SECRET`. */
  APP_SESSION_SECRET: string
}

type AppEnv = { Bindings: ComposedEnv }

const SESSION_COOKIE = 'session'
const SESSION_TTL_SECONDS = 8 * 60 * 60
const USER_NAME = /^[a-z0-9][a-z0-9-]{0,31}$/
/** KV prefix of the app's own records: user -> the podgate key the app created for them. */
const USER_KEY_PREFIX = 'app:user-key:'

/** Who the session cookie says is signed in, if it is valid and not expired. */
async function sessionUser(c: Context<AppEnv>): Promise<string | undefined> {
  const value = await getSignedCookie(c, sessionSecret(c), SESSION_COOKIE)
  if (!value) return undefined
  const [user, expires] = value.split('|')
  return user && Number(expires) > Date.now() ? user : undefined
}

function sessionSecret(c: Context<AppEnv>): string {
  const secret = c.env.APP_SESSION_SECRET
  if (!secret || secret.length < 32) throw new Error('APP_SESSION_SECRET must be set to at least 32 characters: `wrangler secret put APP_SESSION_SECRET`.')
  return secret
}

/** The user's podgate key, created on first sign-in and kept in KV, never sent to the browser. */
async function podgateKeyFor(kv: KVNamespace, user: string): Promise<string> {
  const existing = await kv.get(USER_KEY_PREFIX + user)
  if (existing) return existing
  const { key } = await new KeyStore(kv, { cacheTtlMs: 10_000 }).create({ name: `user:${user}`, metadata: { user } })
  await kv.put(USER_KEY_PREFIX + user, key)
  return key
}

const app = new Hono<AppEnv>()

app.get('/', (c) => c.text('An app with podgate at /ai. POST /login {"user":"alice"}, then call /ai/v1/chat/completions.'))

app.post('/login', async (c) => {
  const body = await c.req.json().catch(() => null) as { user?: unknown } | null
  const user = typeof body?.user === 'string' ? body.user : ''
  if (!USER_NAME.test(user)) return c.json({ error: 'user must be 1-32 lowercase letters, digits or dashes' }, 400)
  await podgateKeyFor(c.env.PODGATE_KV, user)
  const expires = Date.now() + SESSION_TTL_SECONDS * 1000
  await setSignedCookie(c, SESSION_COOKIE, `${user}|${expires}`, sessionSecret(c), {
    httpOnly: true, secure: true, sameSite: 'Lax', path: '/', maxAge: SESSION_TTL_SECONDS,
  })
  return c.json({ user })
})

app.post('/logout', (c) => {
  deleteCookie(c, SESSION_COOKIE, { path: '/', secure: true })
  return c.json({ ok: true })
})

app.get('/me', async (c) => {
  const user = await sessionUser(c)
  return user ? c.json({ user }) : c.json({ error: 'not signed in' }, 401)
})

app.route('/ai', createGateway({
  ...optionsFromEnv(env as ComposedEnv),
  // The hook podgate calls for every /ai/v1/* request: the session's key, else a bearer key. The cookie
  // is ambient, so podgate refuses a state-changing call that uses it unless it comes from this app's own
  // origin (Origin / Sec-Fetch-Site: CSRF). A front end on another origin of yours: list it here.
  credentialOrigins: [],
  credential: async (c) => {
    const user = await sessionUser(c as Context<AppEnv>)
    if (!user) return bearerCredential(c)
    return (await c.env.PODGATE_KV.get(USER_KEY_PREFIX + user)) ?? undefined
  },
  // Serve GET /ai/openapi.json (left out unless passed in, to keep bundles small).
  extras: { openapi: openApiHandler },
}))

export default app
