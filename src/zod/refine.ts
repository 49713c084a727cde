/**
 * `z.refine` for podgate's own checks, as a plain `z.check`: zod/mini's refine is a `$ZodCustom` schema
 * acting as a check, which would ship that class in the deployed Worker. The issue is the one `z.refine`
 * raises (`custom`, with the message given), so a refusal reads as before.
 */
import * as z from 'zod/mini'

/**
 * Fails with `message` where `test` is false. `abort` stops the field's later checks, as `z.refine`'s
 * `abort: true` does.
 *
 * @example
 * const url = z.string().check(refine((u) => URL.canParse(u), 'must be an absolute URL'))
 */
export function refine<T>(test: (value: T) => boolean, message: string, abort = false): z.core.$ZodCheck<T> {
  return z.check<T>((ctx) => {
    if (!test(ctx.value)) ctx.issues.push({ code: 'custom', input: ctx.value, path: [], message, continue: !abort })
  })
}
