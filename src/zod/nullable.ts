/**
 * `z.nullable` and `z.nullish` for podgate's request and key fields, in `zod/mini`'s functional form: zod's
 * nullable schema brings lazy `optin`, `optout`, `values` and `pattern` members (a template literal's and a
 * discriminated union's) into the deployed Worker, which podgate never uses. It parses as zod's does: `null`
 * passes as is, anything else is the inner schema's. Its inner schema is never optional or defaulted (the
 * types refuse one; wrap the nullable in `optional()` instead), so it is a required field, as zod's nullable of
 * such a schema is. Its def is `z.nullable`'s (`type: 'nullable'`, `innerType`), so `z.toJSONSchema` writes the same
 * `anyOf` with `{"type":"null"}`.
 */
import type * as z from 'zod/mini'
import { ZodMiniType } from 'zod/mini'
import { $constructor } from 'zod/v4/core'
import { optional } from './optional.ts'

/**
 * `schema` or `null` (`z.nullable(schema)`).
 *
 * @example
 * const expiresAt = nullable(positiveInt())
 */
export function nullable<T extends z.core.SomeType>(schema: NotOptional<T>): z.ZodMiniNullable<T> {
  return new Nullable({ type: 'nullable', innerType: schema as unknown as z.core.$ZodType }) as unknown as z.ZodMiniNullable<T>
}

const Nullable = $constructor<z.ZodMiniNullable>('PodgateNullable', (inst, def) => {
  ZodMiniType.init(inst, def)
  inst._zod.parse = (payload, ctx) => (payload.value === null ? payload : def.innerType._zod.run(payload, ctx))
})

/** zod's nullable is as optional as its inner schema; this one is never optional, so it takes no optional schema. */
type NotOptional<T> = T extends z.ZodMiniOptional | z.ZodMiniDefault ? never : T

/**
 * `schema`, `null` or absent (`z.nullish(schema)`).
 *
 * @example
 * const temperature = nullish(z.number())
 */
export function nullish<T extends z.core.SomeType>(schema: NotOptional<T>): z.ZodMiniOptional<z.ZodMiniNullable<T>> {
  return optional(nullable(schema))
}
