/**
 * `z.partial` for a shape, in `zod/mini`'s functional form: zod's own partial brings its shape-cloning
 * machinery into the deployed Worker (~490 gzipped bytes) for what a map over the fields does.
 */
import type * as z from 'zod/mini'
import { optional } from './optional.ts'

/**
 * Every field of `shape`, optional.
 *
 * @example
 * const updateSchema = strictObject(optionalFields({ name: z.string() })) // { name?: string }
 */
export function optionalFields<T extends Record<string, z.core.SomeType>>(shape: T): { [K in keyof T]: z.ZodMiniOptional<T[K]> } {
  return Object.fromEntries(Object.entries(shape).map(([key, field]) => [key, optional(field)])) as { [K in keyof T]: z.ZodMiniOptional<T[K]> }
}
