/**
 * zod's English issue messages, for the Runpod emulator's own refusals (`podgate/testing`), which word
 * their 400s as the Python services they stand for do. `zod/mini` loads no locale (every message would read
 * "Invalid input"), and `z.config()` would change the host app's zod too, so the emulator hands this error
 * map to each parse that needs it. The gateway itself words its errors in src/normalize/zod-errors.ts and
 * ships no locale. The locale's tables are built on the first issue, never at import.
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
