/**
 * zod's English issue messages, for the errors podgate passes on in zod's words: config mistakes and the
 * bodies of admin, token and cache-purge calls. `zod/mini` loads no locale (every message would read
 * "Invalid input"), and `z.config()` would change the host app's zod too, so podgate hands this error
 * map to each parse that needs it. The locale's tables are built on the first issue, never at import.
 */
import en from 'zod/v4/locales/en.js'
import type * as z from 'zod/mini'

let english: z.core.$ZodErrorMap | undefined

/**
 * Parse params that word issues as classic zod does in English. A schema's own `error` still wins.
 *
 * @example
 * const parsed = gatewayOptionsSchema.safeParse(input, ENGLISH)
 */
export const ENGLISH: z.core.ParseContext<z.core.$ZodIssue> = {
  error: (issue) => (english ??= en().localeError)(issue),
}
