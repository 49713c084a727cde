/**
 * The number schemas podgate's settings repeat, in `zod/mini`'s functional form.
 */
import type * as z from 'zod/mini'
import { number } from './scalars.ts'
import { maximum, minimum, positive } from './bounds.ts'
import { customCheck } from './refine.ts'

/**
 * zod's `z.int()` as a check, raising zod's own issues: a non-integer is `invalid_type` (expected `int`)
 * and stops the field's other checks; an integer past `Number.MAX_SAFE_INTEGER` either way is `too_big` /
 * `too_small`. `z.int()` would ship zod's number-format schema and check in the deployed Worker (~310
 * gzipped bytes). Its def is `z.int()`'s (`number_format`, `safeint`), so `z.toJSONSchema` writes the
 * OpenAPI document's `integer` type and safe-integer bounds as it did for `z.int()`.
 *
 * @example
 * const seed = z.number().check(int())
 */
export function int(): z.core.$ZodCheck<number> {
  return customCheck<number>((ctx) => {
    const input = ctx.value
    if (!Number.isInteger(input)) ctx.issues.push({ code: 'invalid_type', expected: 'int', format: 'safeint', input, continue: false })
    else if (!Number.isSafeInteger(input)) {
      ctx.issues.push(input > 0
        ? { code: 'too_big', origin: 'int', maximum: Number.MAX_SAFE_INTEGER, inclusive: true, input, continue: true }
        : { code: 'too_small', origin: 'int', minimum: Number.MIN_SAFE_INTEGER, inclusive: true, input, continue: true })
    }
  }, INT_DEF)
}

// Spread over the check's def after `check: 'custom'`.
const INT_DEF = { check: 'number_format', format: 'safeint' }

/** An integer from `min` to `max`, both included. */
export function intIn(min: number, max: number) {
  return number().check(int(), minimum(min), maximum(max))
}

/** A positive integer, at most `max` when given. */
export function positiveInt(max?: number) {
  return max === undefined ? number().check(int(), positive()) : number().check(int(), positive(), maximum(max))
}
