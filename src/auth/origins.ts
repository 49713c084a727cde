/**
 * Browser origins on key records and tokens: one canonical spelling, so the check on the hot path is a
 * plain string comparison with the `Origin` header (which browsers send already serialized this way).
 */
import * as z from 'zod'

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

export const originSchema = z
  .string()
  .max(256)
  .transform((text, ctx) => {
    const origin = canonicalOrigin(text)
    if (origin === null) {
      ctx.addIssue({ code: 'custom', message: 'must be a browser origin such as https://app.example.com (scheme, host and optional port; no path or wildcard)' })
      return z.NEVER
    }
    return origin
  })
