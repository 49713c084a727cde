/**
 * `podgateCors`: CORS for the API surfaces browsers call (`/v1/*`, `/v2/*`).
 *
 * A preflight carries no credential, so it cannot be answered from the caller's key: podgate answers
 * every preflight that names an Origin by reflecting that Origin, with the methods and headers an API
 * call needs. The decision happens on the real request, in `apiKeyAuth`: a secret key is refused from any
 * origin it does not list, a publishable key or origin-bound token outside its origin(s) likewise. Only a
 * request whose credential allowed the origin can succeed, and its error answers carry CORS headers too,
 * so a page can read why it was refused.
 *
 * Never `Access-Control-Allow-Credentials`: podgate authenticates with bearer credentials, not cookies,
 * so a browser's ambient cookies are never sent or honoured. `Vary: Origin` on every answer keeps shared
 * caches from serving one origin's headers to another.
 */
import type { MiddlewareHandler } from 'hono'
import { setAnswerHeader } from '../http/headers.ts'

export interface PodgateCorsOptions {
  /** How long a browser may cache a preflight, in seconds. Default 600. */
  maxAgeSeconds?: number
}

/** What the OpenAI and Runpod SDKs send; a preflight asking for more gets its own list reflected. */
const DEFAULT_ALLOWED_HEADERS = 'authorization, content-type, accept, last-event-id'

/** Response headers a page may read: request id, rate limits (IETF draft and OpenAI's), cache. */
export const EXPOSED_HEADERS = [
  'x-request-id',
  'request-id',
  'ratelimit',
  'ratelimit-policy',
  'retry-after',
  'x-should-retry',
  'x-ratelimit-limit-requests',
  'x-ratelimit-limit-tokens',
  'x-ratelimit-remaining-requests',
  'x-ratelimit-remaining-tokens',
  'x-ratelimit-reset-requests',
  'x-ratelimit-reset-tokens',
  'x-podgate-cache',
  'age',
] as const

export function podgateCors(options: PodgateCorsOptions = {}): MiddlewareHandler {
  const maxAge = String(options.maxAgeSeconds ?? 600)
  return async function podgateCors(c, next) {
    const origin = c.req.header('origin')
    if (origin !== undefined && c.req.method === 'OPTIONS' && c.req.header('access-control-request-method') !== undefined) {
      const requestedHeaders = c.req.header('access-control-request-headers')
      return c.body(null, 204, {
        'access-control-allow-origin': origin,
        'access-control-allow-methods': ALLOWED_METHODS,
        'access-control-allow-headers': requestedHeaders && requestedHeaders.length <= 2048 ? requestedHeaders : DEFAULT_ALLOWED_HEADERS,
        'access-control-max-age': maxAge,
        vary: 'Origin, Access-Control-Request-Method, Access-Control-Request-Headers',
      })
    }
    await next()
    if (origin !== undefined) {
      setAnswerHeader(c, 'access-control-allow-origin', origin)
      setAnswerHeader(c, 'access-control-expose-headers', EXPOSE)
    }
    // Once: a host app's own CORS (or a handler) may have listed it already, in any case.
    if (!/(^|,)\s*origin\s*(,|$)/i.test(c.res.headers.get('vary') ?? '')) setAnswerHeader(c, 'vary', 'Origin', { append: true })
  }
}

const ALLOWED_METHODS = 'GET, POST, DELETE, OPTIONS'
const EXPOSE = EXPOSED_HEADERS.join(', ')
