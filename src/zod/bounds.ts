/**
 * zod's bounds as checks of podgate's own, in `zod/mini`'s functional form: `z.minimum`, `z.maximum`,
 * `z.gt` and `z.positive` for numbers, `z.minLength` and `z.maxLength` for strings and arrays. zod's four
 * check classes and their factories weigh ~430 gzipped bytes in the deployed Worker; these are one
 * factory. Each raises zod's own issue (`too_small` / `too_big` with its origin, bound, `inclusive` and
 * `continue`), a string's length counted in code points as zod counts it, and a length check runs when
 * zod's does (`when`: on any value with a length, after other issues too). Each def is zod's
 * (`check: 'greater_than'`, `value`, `inclusive`; `check: 'max_length'`, `maximum`...), so `z.toJSONSchema`
 * writes the same bounds, and zod's array still refuses one longer than its `max_length` before parsing
 * its items (it reads the bound from the def).
 */
import type * as z from 'zod/mini'
import { $ZodCheck } from 'zod/v4/core'

/** A check's own message, in place of zod's (`{ message }`, which zod keeps as the def's `error`). */
type Params = { message: string }

/**
 * A bound of `limit`: a value at least (`lower`) or at most `limit`, or beyond it when not `inclusive`; of
 * the value's `length` (strings in code points, arrays in items) when `length`, else of the number itself.
 */
function bound<T>(limit: number, lower: boolean, inclusive: boolean, params: Params | undefined, length?: boolean): z.core.$ZodCheck<T> {
  const key = lower ? 'minimum' : 'maximum'
  const def = length ? { check: lower ? 'min_length' : 'max_length', [key]: limit, when: hasLength } : { check: lower ? 'greater_than' : 'less_than', value: limit, inclusive }
  const inst = new $ZodCheck({ ...def, ...(params && { error: () => params.message }) } as z.core.$ZodCheckDef)
  inst._zod.check = (payload) => {
    const input = payload.value as unknown as number | string
    let size = input as number
    if (length) {
      const units = (input as string).length
      // A code point is one or two UTF-16 units: only a string whose units may be on the other side of the bound is counted.
      size = typeof input === 'string' && (lower ? units >= limit && units < limit * 2 : units > limit) ? codePoints(input) : units
    }
    if (lower ? (inclusive ? size >= limit : size > limit) : inclusive ? size <= limit : size < limit) return
    const code = lower ? 'too_small' : 'too_big'
    // zod's members, in zod's order.
    const issue = length
      ? { origin: typeof input === 'string' ? 'string' : Array.isArray(input) ? 'array' : 'unknown', code, [key]: limit, inclusive, input }
      : { origin: 'number', code, [key]: limit, input, inclusive }
    payload.issues.push({ ...issue, inst, continue: !inst._zod.def.abort } as never)
  }
  return inst as z.core.$ZodCheck<T>
}

/** A number at least `value` (`z.minimum`). */
export const minimum = (value: number, params?: Params) => bound<number>(value, true, true, params)
/** A number at most `value` (`z.maximum`). */
export const maximum = (value: number, params?: Params) => bound<number>(value, false, true, params)
/** A number greater than `value` (`z.gt`). */
export const gt = (value: number, params?: Params) => bound<number>(value, true, false, params)
/** A number greater than 0 (`z.positive`). */
export const positive = (params?: Params) => bound<number>(0, true, false, params)

/** Run on any value with a length, as zod's length checks are. */
function hasLength(payload: z.core.ParsePayload): boolean {
  const value = payload.value as { length?: unknown } | null | undefined
  return value != null && value.length !== undefined
}

/** `text`'s length in code points: a surrogate pair counts once, a lone surrogate once (zod's count). */
function codePoints(text: string): number {
  let count = text.length
  if (!/[\uD800-\uDBFF]/.test(text)) return count
  for (let i = 0; i < text.length - 1; i++) {
    if ((text.charCodeAt(i) & 0xfc00) === 0xd800 && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      count--
      i++
    }
  }
  return count
}

/** A string or array of at least `limit` characters (code points) or items (`z.minLength`). */
export const minLength = (limit: number, params?: Params) => bound<z.core.util.HasLength>(limit, true, true, params, true)
/** A string or array of at most `limit` characters (code points) or items (`z.maxLength`). */
export const maxLength = (limit: number, params?: Params) => bound<z.core.util.HasLength>(limit, false, true, params, true)
