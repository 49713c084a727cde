/**
 * `z._default` for podgate's settings, in `zod/mini`'s functional form: zod's default schema brings a
 * lazy `values` member, an encode (`backward`) path, an async path and its `shallowClone` (with a
 * plain-object test) into the deployed Worker, which podgate's sync parses of JSON settings never use.
 * It parses as zod's does: an absent value (`undefined`) becomes the default without a check, a present
 * one is the inner schema's, and an inner result of `undefined` becomes the default too. Its def is
 * `z._default`'s (`type: 'default'`, `innerType`, a `defaultValue` read afresh each time) and it is
 * `defaulted` as an object field, so objects fill it in, and `z.toJSONSchema` writes the same `default`.
 */
import type * as z from 'zod/mini'
import { ZodMiniType } from 'zod/mini'
import { $constructor } from 'zod/v4/core'

/**
 * `schema`, or `value` when absent (`z._default(schema, value)`). An array or object `value` is copied
 * (one level, as zod's `shallowClone` copies a plain object or an array) for every parse that uses it.
 *
 * @example
 * const attempts = withDefault(intIn(1, 10), 3)
 */
export function withDefault<T extends z.core.SomeType>(schema: T, value: DefaultValue<T>): z.ZodMiniDefault<T> {
  return new Defaulted({
    type: 'default',
    innerType: schema as unknown as z.core.$ZodType,
    get defaultValue() {
      return typeof value === 'function' ? (value as () => unknown)() : Array.isArray(value) ? [...value] : value !== null && typeof value === 'object' ? { ...value } : value
    },
  }) as unknown as z.ZodMiniDefault<T>
}

const Defaulted = $constructor<z.ZodMiniDefault>('PodgateDefault', (inst, def) => {
  ZodMiniType.init(inst, def)
  inst._zod.optin = 'defaulted'
  inst._zod.parse = (payload, ctx) => {
    const result = payload.value === undefined ? payload : def.innerType._zod.run(payload, ctx) as z.core.ParsePayload
    if (result.value === undefined) result.value = def.defaultValue
    return result
  }
})

/** A default: JSON-like (a primitive, an array or a plain object, copied for each parse) or a function. */
type DefaultValue<T extends z.core.SomeType> = z.core.util.NoUndefined<z.core.output<T>> | (() => z.core.util.NoUndefined<z.core.output<T>>)

/**
 * An object schema whose fields all have defaults, itself defaulted: left out, it is `{}` parsed, so
 * every field at its default (each default is written once, on its field).
 *
 * @example
 * const cors = withFieldDefaults(strictObject({ maxAgeSeconds: withDefault(intIn(0, 86_400), 600) }))
 */
export function withFieldDefaults<T extends z.ZodMiniType>(schema: T): z.ZodMiniDefault<T> {
  return withDefault(schema, () => schema.parse({}) as z.core.util.NoUndefined<z.core.output<T>>)
}
