/**
 * `z.object`, `z.strictObject`, `z.looseObject` and `z.catchall` for podgate's request, key and config
 * schemas, in `zod/mini`'s functional form: zod's object schema brings a frozen-shape accessor, a cached
 * normalized def, lazy `propValues` (a discriminated union's), symbol keys, async fields and a memoizer into
 * the deployed Worker (~940 gzipped bytes), which podgate's sync parses of JSON never use. It parses as zod's does: a non-object
 * is one `invalid_type` (expected `object`); the shape's fields come first, in its order, each as zod places
 * it (an absent optional field left out, an absent defaulted one filled in, an absent required one refused,
 * a field's issues under its key); then the other keys, in the input's order: refused together as one
 * `unrecognized_keys` issue (strict), kept as they are (loose), parsed by the catchall, or dropped. A
 * `__proto__` key never reaches the output. Its def is zod's (`type: 'object'`, `shape`, a `catchall` that
 * is `z.never()` when strict), so `z.toJSONSchema` writes the same schema.
 */
import * as z from 'zod/mini'
import { ZodMiniType } from 'zod/mini'
import { $constructor } from 'zod/v4/core'
import { never, unknown } from './scalars.ts'

type Field = z.core.$ZodTypeInternals

const ObjectSchema = $constructor<z.ZodMiniObject>('PodgateObject', (inst, def) => {
  ZodMiniType.init(inst, def)
  inst.shape = def.shape
  const keys = Object.keys(def.shape)
  const catchall = def.catchall?._zod
  const strict = catchall?.def.type === 'never'
  inst._zod.parse = (payload, ctx) => {
    const input = payload.value as Record<string, unknown>
    if (typeof input !== 'object' || input === null || Array.isArray(input)) {
      payload.issues.push({ expected: 'object', code: 'invalid_type', input, inst })
      return payload
    }
    const output: Record<string, unknown> = {}
    // zod's handlePropertyResult: where a field's parse of `input[key]` leaves the output and the issues.
    const place = (field: Field, key: string) => {
      const result = field.run({ value: input[key], issues: [] }, ctx) as z.core.ParsePayload
      const present = key in input
      const { optin, optout } = field
      if (!present && optin && optout === 'optional') {
        // Absence is allowed: only a default that parsed is filled in.
        if (optin === 'defaulted' && !result.issues.length && result.value !== undefined) output[key] = result.value
        return
      }
      for (const issue of result.issues) payload.issues.push({ ...issue, path: [key, ...(issue.path ?? [])] })
      if (!present && !optin) {
        if (!result.issues.length) payload.issues.push({ code: 'invalid_type', expected: 'nonoptional', input: undefined, path: [key] })
        return
      }
      if (present || optin === 'defaulted' || result.value !== undefined) output[key] = result.value
    }
    for (const key of keys) if (key !== '__proto__') place(def.shape[key]!._zod, key)
    const unrecognized: string[] = []
    if (catchall) {
      for (const key in input) {
        if (Object.hasOwn(def.shape, key)) continue
        if (strict) unrecognized.push(key)
        // Assigned to `output`, a `__proto__` key would replace its prototype.
        else if (key !== '__proto__') place(catchall, key)
      }
    }
    payload.value = output
    // It describes the input's shape, not a field's value, so it does not abort: the object's checks still run.
    if (unrecognized.length) payload.issues.push({ code: 'unrecognized_keys', keys: unrecognized, input, inst, continue: true })
    return payload
  }
})

type Shape = z.core.$ZodLooseShape
type Writeable<T> = z.core.util.Writeable<T>

/**
 * An object of `shape`'s fields; other keys are dropped (`z.object(shape)`).
 *
 * @example
 * const claims = object({ sub: z.string() })
 */
export function object<T extends Shape = Record<never, z.core.SomeType>>(shape: T): z.ZodMiniObject<Writeable<T>, z.core.$strip> {
  return objectOf(shape)
}

/**
 * An object of `shape`'s fields and no other key (`z.strictObject(shape)`).
 *
 * @example
 * const policy = strictObject({ requestsPerMinute: optional(positiveInt()) })
 */
export function strictObject<T extends Shape>(shape: T): z.ZodMiniObject<Writeable<T>, z.core.$strict> {
  return objectOf(shape, never())
}

/**
 * An object of `shape`'s fields; other keys are kept as they are (`z.looseObject(shape)`).
 *
 * @example
 * const message = looseObject({ role: z.string() })
 */
export function looseObject<T extends Shape>(shape: T): z.ZodMiniObject<Writeable<T>, z.core.$loose> {
  return objectOf(shape, unknown())
}

function objectOf<T extends Shape, C extends z.core.$ZodObjectConfig>(shape: T, catchall?: z.core.$ZodType): z.ZodMiniObject<Writeable<T>, C> {
  return new ObjectSchema({ type: 'object', shape, catchall }) as unknown as z.ZodMiniObject<Writeable<T>, C>
}

/**
 * `schema` whose other keys are each `value` (`z.catchall(schema, value)`).
 *
 * @example
 * const metadata = catchall(object({}), z.string())
 */
export function catchall<T extends z.ZodMiniObject, U extends z.core.SomeType>(schema: T, value: U): z.ZodMiniObject<T['shape'], z.core.$catchall<U>> {
  return schema.clone({ ...schema._zod.def, catchall: value as unknown as z.core.$ZodType }) as z.ZodMiniObject<T['shape'], z.core.$catchall<U>>
}
