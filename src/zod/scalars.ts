/**
 * `z.string()`, `z.number()`, `z.boolean()`, `z.unknown()` and `z.never()` as schemas of their own, in
 * `zod/mini`'s functional form: zod's bring their coercion and the `pattern` a template literal reads into
 * the deployed Worker, which podgate's fields never use. Each refuses what zod's does with zod's own issue
 * (`invalid_type`, expected `string`, `number`, `boolean` or `never`; a number's issue says `received`
 * `NaN` or `Infinity` as zod's does), and its def is zod's (`type: 'string'`, ...), so `z.toJSONSchema`
 * writes the same schema. One constructor makes them all, each type with the test of its values.
 */
import type * as z from 'zod/mini'
import { ZodMiniType } from 'zod/mini'
import { $constructor } from 'zod/v4/core'

/** Each type's test of its values. */
const ACCEPTS: Record<string, (value: unknown) => boolean> = {
  string: (value) => typeof value === 'string',
  number: Number.isFinite,
  boolean: (value) => typeof value === 'boolean',
  unknown: () => true,
  never: () => false,
}

/** A string (`z.string()`). */
export function string(): z.ZodMiniString<string> {
  return new Scalar({ type: 'string' }) as never
}

const Scalar = $constructor<z.ZodMiniType>('PodgateScalar', (inst, def) => {
  ZodMiniType.init(inst, def)
  const accepts = ACCEPTS[def.type]!
  inst._zod.parse = (payload) => {
    const input = payload.value
    if (!accepts(input)) {
      payload.issues.push({ expected: def.type as 'string', code: 'invalid_type', input, inst, ...(def.type === 'number' && typeof input === 'number' ? { received: String(input) } : {}) })
    }
    return payload
  }
})

/** A finite number (`z.number()`): not NaN nor Infinity. */
export function number(): z.ZodMiniNumber<number> {
  return new Scalar({ type: 'number', checks: [] }) as never
}

/**
 * `true` or `false` (`z.boolean()`).
 *
 * @example
 * const hedge = withDefault(boolean(), false)
 */
export function boolean(): z.ZodMiniBoolean<boolean> {
  return new Scalar({ type: 'boolean' }) as never
}

/** Anything (`z.unknown()`). */
export function unknown(): z.ZodMiniUnknown {
  return new Scalar({ type: 'unknown' }) as never
}

/** Nothing (`z.never()`): the catchall of a strict object. */
export function never(): z.ZodMiniNever {
  return new Scalar({ type: 'never' }) as never
}
