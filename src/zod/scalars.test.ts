import { describe, expect, it } from 'vitest'
import * as z from 'zod/mini'
import { expectSameJsonSchemas, expectSameParses, resultOf } from './__fixtures__/zod-parity.ts'
import { boolean, never, number, string, unknown } from './scalars.ts'

const INPUTS = [true, false, 0, 1, -2.5, 1e300, Number.NaN, Infinity, -Infinity, 'true', '', 'text', null, undefined, [], [1], {}, { a: 1 }]

/** Each scalar beside zod's, and podgate's shapes of them: checked, optional, defaulted, nullable, in an object and a union. */
const PAIRS: Array<[() => z.ZodMiniType, () => z.ZodMiniType]> = [[string, z.string], [number, z.number], [boolean, z.boolean], [unknown, z.unknown], [never, z.never]]

function shapes(scalar: () => z.ZodMiniType, type: 'string' | 'number' | 'boolean' | 'unknown' | 'never'): Array<[z.ZodMiniType, unknown[]]> {
  const checked = type === 'string' ? (string_: z.ZodMiniType) => (string_ as z.ZodMiniString).check(z.minLength(1), z.maxLength(3))
    : type === 'number' ? (number_: z.ZodMiniType) => (number_ as z.ZodMiniNumber).check(z.gt(0), z.maximum(2))
      : (other: z.ZodMiniType) => other
  const inputs = [...INPUTS, { flag: 'x' }, { flag: 1 }, { flag: true }, { flag: 'long text' }, { flag: 2.5 }]
  return [
    [scalar(), inputs],
    [checked(scalar()), inputs],
    [z.optional(scalar()), inputs],
    [z._default(scalar() as z.ZodMiniString, 'x' as never), inputs],
    [z.nullable(scalar()), inputs],
    [z.strictObject({ flag: checked(scalar()) }), inputs],
    [z.looseObject({ flag: z.optional(scalar()) }), inputs],
    [z.union([scalar(), z.array(scalar())]), inputs],
    [z.array(checked(scalar())).check(z.maxLength(2)), [[], ['a'], [1, 2], [true, 'ab', 0.5], ['abcd']]],
  ]
}

describe('string(), number(), boolean(), unknown() and never()', () => {
  it('parse and fail exactly as zod\'s: alone, checked, optional, defaulted, nullable, in objects, unions and arrays', () => {
    for (const [ours, theirs] of PAIRS) {
      const type = theirs()._zod.def.type as 'string'
      expectSameParses(shapes(ours, type), shapes(theirs, type))
    }
  })

  it('tell NaN and Infinity from other non-numbers as z.number() does (`received`)', () => {
    expect(resultOf(number(), Number.NaN)).toMatchObject({ issues: [{ code: 'invalid_type', expected: 'number', received: 'NaN' }] })
    expect(resultOf(number(), -Infinity)).toMatchObject({ issues: [{ received: '-Infinity' }] })
    expect(resultOf(number(), '1')).toEqual(resultOf(z.number(), '1'))
  })

  it('show in JSON Schema as zod\'s do', () => {
    for (const [ours, theirs] of PAIRS) {
      const type = theirs()._zod.def.type as 'string'
      expectSameJsonSchemas(shapes(ours, type), shapes(theirs, type))
    }
  })
})
