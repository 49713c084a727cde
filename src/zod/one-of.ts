/**
 * `z.enum` for podgate's few string choices, as a check: zod's enum schema would ship in the deployed
 * Worker for them (~250 gzipped bytes). The issue is zod's own (`invalid_value` with the values), so a
 * refusal reads as an enum's: `Invalid value for 'kind': expected 'secret', 'publishable', got 'public'`.
 * `z.toJSONSchema` sees any value here: the OpenAPI document gets its `enum` from
 * src/openapi/descriptions.ts.
 */
import type * as z from 'zod/mini'
import { unknown } from './scalars.ts'
import { customCheck } from './refine.ts'

/**
 * One of `values`.
 *
 * @example
 * const kind = z._default(oneOf(['secret', 'publishable']), 'secret')
 */
export function oneOf<const T extends readonly [string, ...string[]]>(values: T): z.ZodMiniType<T[number]> {
  return unknown().check(customCheck((ctx) => {
    if (!values.includes(ctx.value as string)) ctx.issues.push({ code: 'invalid_value', values: [...values], input: ctx.value })
  })) as z.ZodMiniType<T[number]>
}
