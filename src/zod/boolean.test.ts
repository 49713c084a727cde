import { describe, expect, it } from 'vitest'
import * as z from 'zod/mini'
import { resultOf } from './__fixtures__/zod-parity.ts'
import { boolean } from './boolean.ts'

const INPUTS = [true, false, 0, 1, 'true', '', null, undefined, [], {}, Number.NaN]

describe('boolean()', () => {
  it('parses and fails exactly as z.boolean(): alone, optional, defaulted, nullable, in an object and a union', () => {
    const shapes = (b: () => z.ZodMiniType) => [b(), z.optional(b()), z._default(b(), true), z.nullable(b()), z.strictObject({ flag: b() }), z.union([b(), z.string()])]
    const zods = shapes(z.boolean)
    const ours = shapes(boolean)
    zods.forEach((schema, i) => {
      for (const input of INPUTS) {
        expect(JSON.stringify(resultOf(ours[i]!, input)), `${i} ${String(input)}`).toBe(JSON.stringify(resultOf(schema, input)))
        expect(JSON.stringify(resultOf(ours[i]!, { flag: input })), `${i} ${String(input)}`).toBe(JSON.stringify(resultOf(schema, { flag: input })))
      }
    })
  })

  it('shows in JSON Schema as z.boolean() does', () => {
    for (const [zods, ours] of [[z.boolean(), boolean()], [z._default(z.boolean(), false), z._default(boolean(), false)]] as const) {
      for (const io of ['input', 'output'] as const) expect(JSON.stringify(z.toJSONSchema(ours, { io }))).toBe(JSON.stringify(z.toJSONSchema(zods, { io })))
    }
  })
})
