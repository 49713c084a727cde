/**
 * The number schemas podgate's settings repeat, in `zod/mini`'s functional form.
 */
import * as z from 'zod/mini'

/** An integer from `min` to `max`, both included. */
export function intIn(min: number, max: number) {
  return z.number().check(z.int(), z.minimum(min), z.maximum(max))
}

/** A positive integer, at most `max` when given. */
export function positiveInt(max?: number) {
  return max === undefined ? z.number().check(z.int(), z.positive()) : z.number().check(z.int(), z.positive(), z.maximum(max))
}
