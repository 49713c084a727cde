/**
 * `z.boolean()` as a schema of its own, in `zod/mini`'s functional form: zod's boolean brings its coercion
 * and the `pattern` a template literal reads into the deployed Worker, which podgate's flags never use.
 * It refuses what zod's does with zod's own issue (`invalid_type`, expected `boolean`), and its def is
 * `z.boolean()`'s (`type: 'boolean'`), so `z.toJSONSchema` writes `{"type":"boolean"}` as it did.
 */
import type * as z from 'zod/mini'
import { ZodMiniType } from 'zod/mini'
import { $constructor } from 'zod/v4/core'

const Flag = $constructor<z.ZodMiniBoolean<boolean>>('PodgateBoolean', (inst, def) => {
  ZodMiniType.init(inst, def)
  inst._zod.parse = (payload) => {
    if (typeof payload.value !== 'boolean') payload.issues.push({ expected: 'boolean', code: 'invalid_type', input: payload.value, inst })
    return payload
  }
})

/**
 * `true` or `false` (`z.boolean()`).
 *
 * @example
 * const hedge = z._default(boolean(), false)
 */
export function boolean(): z.ZodMiniBoolean<boolean> {
  return new Flag({ type: 'boolean' })
}
