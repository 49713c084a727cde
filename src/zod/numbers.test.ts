import { describe, expect, it } from 'vitest'
import * as z from 'zod/mini'
import { int } from './numbers.ts'

const PARSE_CONTEXT = { error: () => 'default', reportInput: true }
const INPUTS = [0, 5, -3, 1.5, -0.5, 2 ** 53, -(2 ** 53), 1e300, -1e300, Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER, Infinity, Number.NaN, '7', null, undefined]

/** zod's issues minus `note`, the one member podgate's wording never reads (zod-errors.ts). */
function issuesOf(schema: z.ZodMiniType, input: unknown) {
  const result = schema.safeParse(input, PARSE_CONTEXT)
  return result.success ? result.data : result.error.issues.map((issue) => {
    const { note: _, ...rest } = issue as typeof issue & { note?: string }
    return rest
  })
}

describe('int()', () => {
  it('raises exactly the issues of z.int(), alone and before other checks', () => {
    const pairs: Array<[z.ZodMiniType, z.ZodMiniType]> = [
      [z.number().check(z.int()), z.number().check(int())],
      [z.number().check(z.int(), z.minimum(1)), z.number().check(int(), z.minimum(1))],
      [z.number().check(z.int(), z.positive(), z.maximum(10)), z.number().check(int(), z.positive(), z.maximum(10))],
      [z.optional(z.number().check(z.int(), z.minimum(-1))), z.optional(z.number().check(int(), z.minimum(-1)))],
    ]
    for (const [zods, ours] of pairs) {
      for (const input of INPUTS) expect(issuesOf(ours, input), String(input)).toEqual(issuesOf(zods, input))
    }
  })

  it('shows in JSON Schema as z.int() does: an integer within the safe range', () => {
    for (const [zods, ours] of [
      [z.number().check(z.int()), z.number().check(int())],
      [z.number().check(z.int(), z.positive()), z.number().check(int(), z.positive())],
      [z.nullish(z.number().check(z.int(), z.minimum(1), z.maximum(8))), z.nullish(z.number().check(int(), z.minimum(1), z.maximum(8)))],
    ] as const) {
      expect(JSON.stringify(z.toJSONSchema(ours, { io: 'input' }))).toBe(JSON.stringify(z.toJSONSchema(zods, { io: 'input' })))
    }
  })
})
