/**
 * `z.optional` for podgate's fields, in `zod/mini`'s functional form: zod's optional schema brings lazy
 * `values` and `pattern` members (a discriminated union's and a template literal's, with zod's regex
 * cleaner) into the deployed Worker, which podgate never uses. It parses as zod's does: an absent value
 * (`undefined`) passes, unless the inner schema has a default, which then fills it in (left out if that
 * fails); a present one is the inner schema's. Like zod's it is an optional field (`optin`/`optout`), or a
 * defaulted one over a default. Its def is `z.optional`'s (`type: 'optional'`, `innerType`), so
 * `z.toJSONSchema` writes the same schema and leaves the field out of `required`.
 */
import type * as z from 'zod/mini'
import { ZodMiniType } from 'zod/mini'
import { $constructor } from 'zod/v4/core'

/**
 * `schema` or absent (`z.optional(schema)`).
 *
 * @example
 * const user = optional(z.string())
 */
export function optional<T extends z.core.SomeType>(schema: T): z.ZodMiniOptional<T> {
  return new Optional({ type: 'optional', innerType: schema as unknown as z.core.$ZodType }) as unknown as z.ZodMiniOptional<T>
}

const Optional = $constructor<z.ZodMiniOptional>('PodgateOptional', (inst, def) => {
  ZodMiniType.init(inst, def)
  const inner = def.innerType._zod
  const defaulted = inner.optin === 'defaulted'
  inst._zod.optin = defaulted ? 'defaulted' : 'optional'
  inst._zod.optout = 'optional'
  inst._zod.parse = (payload, ctx) => {
    if (payload.value !== undefined) return inner.run(payload, ctx)
    if (defaulted) {
      const result = inner.run({ value: undefined, issues: [] }, ctx) as z.core.ParsePayload
      payload.value = result.issues.length ? undefined : result.value
    }
    return payload
  }
})
