/**
 * `apiKeyAuth`: resolves the caller's credential to a Principal, or answers 401.
 *
 * Three credentials (docs/keys-and-browsers.md):
 *   - secret keys (`pg_sk_`), for servers: refused when the request carries a browser `Origin` the key
 *     does not list, so a secret pasted into a web page fails loudly;
 *   - publishable keys (`pg_pk_`): accepted only with an `Origin` the key lists;
 *   - tokens (`pg_tk_`) minted with `POST /v1/tokens`: verified by signature, then their parent key is
 *     read through the key cache, so revoking or rotating the parent ends them.
 *
 * Works on its own in any Hono app: give it a KeyStore factory (and a TokenSigner to accept tokens).
 * The credential comes from `Authorization: Bearer <credential>` unless a `credential` hook supplies it.
 * Origin rules guard credentials a request carries itself: one the hook supplies from server-side state
 * (a host app that signs its users in and keeps their podgate keys) is the host's own and is not
 * checked against the key's origins. Such a credential is ambient (a browser attaches the session
 * cookie to any request, a forged cross-site one included), so a state-changing request (anything but
 * GET, HEAD, OPTIONS) that uses it must come from the request's own origin or one of
 * `credentialOrigins`, by `Origin` or `Sec-Fetch-Site`; otherwise 403 (CSRF).
 * A browser is recognised by `Origin` or Fetch Metadata (`Sec-Fetch-Site`; not `Sec-Fetch-Mode`, which
 * server-side fetch sends too), so a same-origin GET that carries no `Origin` is still held to the
 * key's origins.
 * With `queryToken: true` a token may also come as `?access_token=` on GET requests that ask for
 * `text/event-stream`, because EventSource cannot send headers; keys are never accepted in a URL.
 */
import type { Context, MiddlewareHandler } from 'hono'
import { GatewayError } from '../errors/index.ts'
import type { GatewayEnv, HookContext } from '../types.ts'
import { isLive, keyGeneration, toPrincipal } from './keys.ts'
import type { KeyRecord, KeyStore, Principal } from './keys.ts'
import { dialectOf, OPENAI_DIALECT } from '../streaming/dialects.ts'
import { revocableStream } from './stream-revocation.ts'
import { canonicalOrigin, isSameOriginRequest, requestOrigin } from './origins.ts'
import { ConfigError } from '../config/resolve.ts'
import { TOKEN_PREFIX } from './tokens.ts'
import type { RequestOrigin } from './origins.ts'
import { formatForPath, runpodErrorBody } from '../http/respond.ts'
import type { TokenSigner } from './tokens.ts'

/** An Origin header is caller input: bounded and stripped of control characters before it is echoed. */
function printable(text: string): string {
  return text.slice(0, 200).replace(/[^\x20-\x7e]/g, '?')
}

export type CredentialResolver = (c: Context) => string | undefined | Promise<string | undefined>

export interface ApiKeyAuthOptions {
  /** Where key records live. `c` is the request's context in your app, with its bindings (`(c) => new KeyStore(c.env.APP_KV, ...)`). */
  store: (c: HookContext) => KeyStore
  /**
   * Supplies the credential. Default: the `Authorization: Bearer` header. A credential it returns that
   * the request did not carry in its `Authorization` header skips the origin rules.
   */
  credential?: CredentialResolver
  /** Verifies minted tokens. Without it, tokens are refused like unknown keys. */
  tokens?: TokenSigner
  /**
   * Also accept a token as `?access_token=<token>` when the request is a GET asking for
   * `text/event-stream` (EventSource). Use it only on event-stream routes. Default false.
   *
   * @example
   * app.use('/v2/:model/stream/:id', apiKeyAuth({ store, tokens, queryToken: true }))
   */
  queryToken?: boolean
  /**
   * An event stream answered to this credential re-checks it at most this often (through the key
   * cache) and ends with an error event once the key is revoked, rotated or expired. Default 10000.
   */
  streamCheckMs?: number
  /**
   * Origins, besides the request's own, whose pages may make state-changing calls with a credential
   * the `credential` hook supplies (e.g. from a cookie session), such as `https://app.example.com`; an
   * entry that is not a browser origin throws `ConfigError`. Default: none, same origin only.
   */
  credentialOrigins?: readonly string[]
}

const CHALLENGE = 'Bearer realm="podgate"'

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS'])

/**
 * The credential a request carries: `Authorization: Bearer <credential>`, else `x-api-key` (how Anthropic's
 * SDKs send one), also beside an `Authorization` of another scheme (a proxy's Basic auth).
 */
export function bearerCredential(c: Context): string | undefined {
  return /^Bearer[ \t]+([^\s]+)[ \t]*$/i.exec(c.req.header('authorization') ?? '')?.[1] ?? (c.req.header('x-api-key') || undefined)
}

/** 401 with the RFC 6750 challenge; the message says what to do, never echoes the credential. */
export function refused(message: string): GatewayError {
  return new GatewayError('invalid_api_key', message, { headers: { 'www-authenticate': `${CHALLENGE}, error="invalid_token"` } })
}

/** The surface's in-stream error event: OpenAI's `data: {"error":...}`, the job stream's `event: error`, or a dialect's. */
function revokedEvent(path: string): string {
  const error = new GatewayError('invalid_api_key', REVOKED_MESSAGE)
  const dialect = dialectOf(path)
  if (!dialect && formatForPath(path) === 'runpod') return `event: error\ndata: ${JSON.stringify(runpodErrorBody(error))}\n\n`
  return (dialect ?? OPENAI_DIALECT).errorEvent(error)
}

/** A token from `?access_token=`, where the options allow it. Throws when a URL carries anything else. */
function queryCredential(c: Context, allowed: boolean | undefined): string | undefined {
  if (!c.req.url.includes('access_token=')) return undefined
  const value = c.req.query('access_token')
  if (!value) return undefined
  const eventStream = c.req.method === 'GET' && (c.req.header('accept') ?? '').includes('text/event-stream')
  if (!allowed || !eventStream) {
    throw refused('access_token in the URL is accepted only on GET event-stream routes: send "Authorization: Bearer <credential>" instead.')
  }
  if (!value.startsWith(TOKEN_PREFIX)) {
    throw refused('Only a short-lived token (pg_tk_...) may be sent as access_token; keys never belong in a URL.')
  }
  return value
}

export function apiKeyAuth(options: ApiKeyAuthOptions): MiddlewareHandler<GatewayEnv> {
  const resolve = options.credential ?? bearerCredential
  const streamCheckMs = options.streamCheckMs ?? 10_000
  // Compared with the `Origin` header as browsers spell it: checked and spelled so once, as a key's origins are.
  const credentialOrigins = (options.credentialOrigins ?? []).map((origin) => {
    const canonical = canonicalOrigin(origin)
    if (!canonical) throw new ConfigError(`podgate: credentialOrigins: ${JSON.stringify(origin)} must be a browser origin such as https://app.example.com (scheme, host and optional port; no path or wildcard).`)
    return canonical
  })
  return async function apiKeyAuth(c, next) {
    const resolved = await resolve(c)
    const credential = resolved ?? queryCredential(c, options.queryToken)
    if (!credential) {
      throw new GatewayError('missing_api_key', 'Missing API key: send "Authorization: Bearer <podgate key or token>" (or "x-api-key: <key>").', {
        headers: { 'www-authenticate': CHALLENGE },
      })
    }
    const fromRequest = options.credential === undefined || resolved === undefined || credential === bearerCredential(c)
    if (!fromRequest && !SAFE_METHODS.has(c.req.method) && !isSameOriginRequest(c.req.raw, credentialOrigins)) {
      throw new GatewayError(
        'permission_denied',
        'Cross-site request refused: a request signed in by a session must come from a page of the same origin (or one listed in `credentialOrigins`).',
      )
    }
    const origin: OriginCheck = fromRequest ? requestOrigin(c.req.raw) : 'host'
    const store = options.store(c)
    const principal = credential.startsWith(TOKEN_PREFIX) ? await tokenPrincipal(credential, origin, store, options.tokens) : await keyPrincipal(credential, origin, store)
    c.set('principal', principal)
    await next()
    const body = c.res.body
    if (body && (c.res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
      const stillValid = async () => {
        // A token's own expiry ends its stream as its key's revocation does.
        if (principal.tokenExpiresAt !== null && Date.now() >= principal.tokenExpiresAt) return false
        const record = await store.lookupById(principal.keyId)
        return record !== null && isLive(record) && keyGeneration(record) === principal.keyGeneration
      }
      const stream = revocableStream(body, { stillValid, intervalMs: streamCheckMs, errorEvent: revokedEvent(c.req.path) })
      c.res = new Response(stream, c.res)
    }
  }
}

const REVOKED_MESSAGE = 'This stream ended: its credential was revoked, rotated or expired while it was open.'

/** Where the request comes from, to check a credential against, or `host`: supplied by the host app, not checked. */
type OriginCheck = RequestOrigin | 'host'

async function keyPrincipal(credential: string, where: OriginCheck, store: KeyStore): Promise<Principal> {
  const record = await store.lookup(credential)
  if (!record) throw refused('Invalid API key: it is unknown, was revoked, or was replaced by a rotation.')
  if (!isLive(record)) throw refused(`This API key expired at ${new Date(record.expiresAt ?? 0).toISOString()}.`)
  if (where === 'host') return toPrincipal(record)
  const origin = where.origin
  if (record.kind === 'secret') {
    if (where.browser && (origin === undefined || !record.origins.includes(origin))) {
      throw refused(
        `A secret key was sent from ${origin === undefined ? 'a browser (Sec-Fetch-Site)' : `the browser origin '${printable(origin)}'`}. Secret keys belong on servers: mint a short-lived token with POST /v1/tokens from your backend, or use a publishable key (pg_pk_) that allows this origin.`,
      )
    }
  } else if (origin === undefined || !record.origins.includes(origin)) {
    throw refused(
      origin === undefined
        ? 'A publishable key works only from a browser origin it allows, and this request carries no Origin.'
        : `This publishable key does not allow the origin '${printable(origin)}'.`,
    )
  }
  return toPrincipal(record)
}

async function tokenPrincipal(credential: string, where: OriginCheck, store: KeyStore, signer: TokenSigner | undefined): Promise<Principal> {
  const check = signer ? await signer.verify(credential) : ({ ok: false, reason: 'malformed' } as const)
  if (!check.ok) {
    throw refused(
      check.reason === 'expired'
        ? `This token expired at ${new Date((check.claims?.exp ?? 0) * 1000).toISOString()}: mint a new one with POST /v1/tokens.`
        : 'Invalid token: it is malformed, was altered, or was not signed by this gateway.',
    )
  }
  const claims = check.claims
  const parent = await store.lookupById(claims.kid)
  if (!parent || keyGeneration(parent) !== claims.gen || !isLive(parent)) {
    throw refused('This token is no longer valid: the key that minted it was revoked, rotated or expired.')
  }
  const origin = where === 'host' ? undefined : where.origin
  if (where !== 'host' && claims.origin !== null && origin !== claims.origin) {
    throw refused(
      origin === undefined ? 'This token is bound to a browser origin, and this request carries no Origin.' : `This token does not allow the origin '${printable(origin)}'.`,
    )
  }
  return {
    ...toPrincipal(parent),
    credential: 'token',
    models: intersect(claims.models, parent.models),
    tokenId: claims.jti,
    tokenQuota: claims.quota,
    tokenExpiresAt: claims.exp * 1000,
    subject: claims.sub ?? null,
  }
}

/** A token's scope is re-checked against its parent's current scope: narrowing the key narrows its tokens. */
function intersect(token: string[] | null, parent: KeyRecord['models']): string[] | null {
  if (token === null) return parent
  if (parent === null) return token
  return token.filter((m) => parent.includes(m))
}
