/**
 * JSON objects of any keys, in `zod/mini`'s functional form, as an object schema's catchall: the object
 * code ships anyway, where `z.record` adds its own (~500 gzipped bytes of the deployed Worker). The
 * members keep the caller's order, as a record's do.
 */
import type * as z from 'zod/mini'
import { catchall, looseObject, object } from './object.ts'
import { customCheck } from './refine.ts'

/** An object whose every member is `value` (`z.record(z.string(), value)`). */
export function recordOf<T extends z.core.SomeType>(value: T) {
  return catchall(object({}), value)
}

/** An object of any members whose names are all in `keys`; another name is refused as an unrecognized argument. */
export function keysIn(keys: readonly string[]) {
  return looseObject({}).check(customCheck<Record<string, unknown>>((ctx) => {
    const unknown = Object.keys(ctx.value).filter((key) => !keys.includes(key))
    if (unknown.length > 0) ctx.issues.push({ code: 'unrecognized_keys', keys: unknown, input: ctx.value })
  }))
}
