/**
 * `z.refine` for podgate's own checks, as a plain `z.check`: zod/mini's refine is a `$ZodCustom` schema
 * acting as a check, which would ship that class in the deployed Worker. The issue is the one `z.refine`
 * raises (`custom`, with the message given), so a refusal reads as before.
 */
import type * as z from 'zod/mini'
import { $ZodCheck } from 'zod/v4/core'

/**
 * `z.check(fn)`: a check that runs `fn` on the parse's payload. Its def is `z.check`'s (`check: 'custom'`),
 * with `def`'s members over it. zod/mini's `z.check` ships zod's params normalizer, which nothing else in
 * the Worker uses.
 *
 * @example
 * const even = customCheck<number>((payload) => payload.value % 2 === 0 || payload.issues.push({ code: 'custom', input: payload.value }))
 */
export function customCheck<T>(fn: (payload: z.core.ParsePayload<T>) => void, def?: object): z.core.$ZodCheck<T> {
  const check = new $ZodCheck({ check: 'custom', ...def } as z.core.$ZodCheckDef) as z.core.$ZodCheck<T>
  check._zod.check = fn
  return check
}

/**
 * Fails with `message` where `test` is false. `abort` stops the field's later checks, as `z.refine`'s
 * `abort: true` does.
 *
 * @example
 * const url = z.string().check(refine((u) => URL.canParse(u), 'must be an absolute URL'))
 */
export function refine<T>(test: (value: T) => boolean, message: string, abort = false): z.core.$ZodCheck<T> {
  return customCheck<T>((ctx) => {
    if (!test(ctx.value)) ctx.issues.push({ code: 'custom', input: ctx.value, path: [], message, continue: !abort })
  })
}
