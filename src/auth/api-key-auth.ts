/**
 * `apiKeyAuth`: resolves the caller's credential to a Principal, or answers 401.
 *
 * Works on its own in any Hono app: give it a KeyStore factory. The credential comes from
 * `Authorization: Bearer <key>` unless a `credential` hook supplies it (e.g. a host app that keeps
 * podgate keys server-side and authenticates its users by session).
 */
import type { Context, MiddlewareHandler } from 'hono'
import { GatewayError } from '../errors/index.ts'
import type { GatewayEnv } from '../types.ts'
import { toPrincipal } from './keys.ts'
import type { KeyStore } from './keys.ts'

export type CredentialResolver = (c: Context) => string | undefined | Promise<string | undefined>

export interface ApiKeyAuthOptions {
  /** Where key records live. */
  store: (c: Context<GatewayEnv>) => KeyStore
  /** Supplies the credential. Default: the `Authorization: Bearer` header. */
  credential?: CredentialResolver
}

const CHALLENGE = 'Bearer realm="podgate"'

export function bearerCredential(c: Context): string | undefined {
  const header = c.req.header('authorization')
  if (!header) return undefined
  const match = /^Bearer[ \t]+([^\s]+)[ \t]*$/i.exec(header)
  return match?.[1]
}

export function apiKeyAuth(options: ApiKeyAuthOptions): MiddlewareHandler<GatewayEnv> {
  const resolve = options.credential ?? bearerCredential
  return async function apiKeyAuth(c, next) {
    const credential = await resolve(c)
    if (!credential) {
      throw new GatewayError('missing_api_key', 'Missing API key: send "Authorization: Bearer <podgate key>".', {
        headers: { 'www-authenticate': CHALLENGE },
      })
    }
    const record = await options.store(c).lookup(credential)
    if (!record) {
      throw new GatewayError('invalid_api_key', 'Invalid API key: it is unknown or was revoked.', {
        headers: { 'www-authenticate': `${CHALLENGE}, error="invalid_token"` },
      })
    }
    c.set('principal', toPrincipal(record))
    await next()
  }
}
