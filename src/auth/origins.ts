/**
 * Browser origins on key records and tokens: one canonical spelling, so the check on the hot path is a
 * plain string comparison with the `Origin` header (which browsers send already serialized this way).
 */
import * as z from 'zod/mini'
import { lazily } from '../zod/lazily.ts'
import { refine } from '../zod/refine.ts'
import { string } from '../zod/scalars.ts'
import { maxLength } from '../zod/bounds.ts'

/**
 * `https://App.Example.com:443/` -> `https://app.example.com`; null for anything that is not a bare
 * http(s) origin (paths, queries, credentials, wildcards and the opaque origin `null` are refused).
 */
export function canonicalOrigin(text: string): string | null {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    return null
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return null
  if (url.username || url.password || url.search || url.hash || url.pathname !== '/') return null
  if (text.includes('*')) return null
  return url.origin
}

/**
 * A browser origin as a field accepts it: checked here, stored as `canonicalOrigin` spells it (the
 * routes map the parsed value). A check, not a transform: zod's pipe and transform would add ~0.35 KiB
 * to the bundle for these two fields.
 */
export const originSchema = lazily(() =>
  string().check(
    maxLength(256),
    refine((text: string) => canonicalOrigin(text) !== null, 'must be a browser origin such as https://app.example.com (scheme, host and optional port; no path or wildcard)'),
  ),
)

/** Origins that passed `originSchema`, in their canonical spelling. */
export function canonicalOrigins(origins: string[]): string[] {
  return [...new Set(origins.map((origin) => canonicalOrigin(origin) ?? origin))]
}

/** How a request presents itself: from a browser page (and which origin), or from a server. */
export interface RequestOrigin {
  /**
   * True when a browser sent it: it carries `Origin` or `Sec-Fetch-Site`. Not `Sec-Fetch-Mode` alone:
   * Node's `fetch` sends `Sec-Fetch-Mode: cors` from servers too; only browsers send `Sec-Fetch-Site`.
   */
  browser: boolean
  /**
   * The page's origin: the `Origin` header, else the request's own origin when `Sec-Fetch-Site:
   * same-origin` says the page shares it (browsers omit `Origin` on same-origin GETs). Unset when unknown.
   */
  origin?: string
}

/**
 * Reads where a request comes from. `Origin` alone misses browser requests that omit it (same-origin
 * GETs, navigations); every current browser sends `Sec-Fetch-Site` on every request to a secure origin.
 *
 * @example
 * requestOrigin(c.req.raw) // { browser: true, origin: 'https://app.example.com' }
 */
export function requestOrigin(request: Request): RequestOrigin {
  const origin = request.headers.get('origin') ?? undefined
  if (origin !== undefined) return { browser: true, origin }
  const site = request.headers.get('sec-fetch-site')
  if (site === null) return { browser: false }
  return { browser: true, origin: site === 'same-origin' ? new URL(request.url).origin : undefined }
}

/**
 * Whether a browser request comes from the request's own origin or one of `allowed`. A request with
 * neither `Origin` nor Fetch Metadata is no browser's and cannot be a cross-site forgery.
 */
export function isSameOriginRequest(request: Request, allowed: readonly string[] = []): boolean {
  const from = requestOrigin(request)
  if (!from.browser) return true
  if (from.origin === undefined) return false
  return from.origin === new URL(request.url).origin || allowed.includes(from.origin)
}
