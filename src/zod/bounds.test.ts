import { describe, expect, it } from 'vitest'
import * as z from 'zod/mini'
import { expectSameJsonSchemas, expectSameParses, resultOf } from './__fixtures__/zod-parity.ts'
import { gt, maximum, maxLength, minimum, minLength, positive } from './bounds.ts'
import { int } from './numbers.ts'
import { number, string } from './scalars.ts'

/** podgate's bounds or zod's, by name. */
interface Bounds {
  minimum: typeof z.minimum
  maximum: typeof z.maximum
  gt: typeof z.gt
  positive: typeof z.positive
  minLength: typeof z.minLength
  maxLength: typeof z.maxLength
}
const OURS = { minimum, maximum, gt, positive, minLength, maxLength } as unknown as Bounds
const ZODS: Bounds = { minimum: z.minimum, maximum: z.maximum, gt: z.gt, positive: z.positive, minLength: z.minLength, maxLength: z.maxLength }

const NUMBERS = [-3, -2, -1.5, -1, 0, 1e-9, 0.5, 1, 2, 2.0001, 7, 16, 2 ** 53, 1.5e308, 'text', null, undefined, []]
/** Strings counted in code points: a surrogate pair is one, a lone surrogate one, as zod counts them. */
const TEXTS = ['', 'a', 'ab', 'abc', 'abcd', '😀', '😀😀', 'a😀', '😀😀😀', '\uD800', '\uD800\uD800', '\uDC00\uD800', 'x'.repeat(16), '😀'.repeat(9), 5, null, undefined]
const LISTS = [[], [1], [1, 2], [1, 2, 3], ['a', 'b', 'c', 'd'], Array.from({ length: 20 }, (_, i) => i), 'ab', null, undefined, {}]

function shapes(b: Bounds): Array<[z.ZodMiniType, unknown[]]> {
  return [
    [number().check(b.minimum(0)), NUMBERS],
    [number().check(b.maximum(2)), NUMBERS],
    [number().check(b.gt(0), b.maximum(1)), NUMBERS],
    [number().check(b.minimum(-2), b.maximum(2)), NUMBERS],
    [number().check(int(), b.positive()), NUMBERS],
    [number().check(int(), b.minimum(1), b.maximum(16)), NUMBERS],
    [number().check(b.positive(), b.maximum(7)), NUMBERS],
    [string().check(b.minLength(1), b.maxLength(3)), TEXTS],
    [string().check(b.minLength(2)), TEXTS],
    [string().check(b.maxLength(2)), TEXTS],
    [string().check(b.minLength(32, { message: 'must be at least 32 characters' })), TEXTS],
    [string().check(b.maxLength(8)), TEXTS],
    [z.array(number()).check(b.minLength(1), b.maxLength(3)), LISTS],
    [z.array(string().check(b.minLength(1), b.maxLength(1))).check(b.maxLength(2)), [[], ['a'], ['a', ''], ['', 'bb'], ['a', 'b', 'c'], [1, 2, 3], Array.from({ length: 10_000 }, () => 5)]],
    [z.strictObject({ n: z.optional(number().check(b.minimum(0), b.maximum(1))), s: z.optional(string().check(b.maxLength(2))) }), [{}, { n: 2 }, { n: -1, s: 'abc' }, { s: 'ab' }, { n: 'x', s: 5 }]],
    [z.union([string().check(b.maxLength(2)), z.array(string()).check(b.maxLength(2))]), TEXTS.concat(LISTS as never[])],
  ]
}

describe('minimum(), maximum(), gt(), positive(), minLength() and maxLength()', () => {
  it('parse and fail exactly as zod\'s: the same issues, in the same order, with or without other issues first', () => {
    expectSameParses(shapes(OURS), shapes(ZODS))
  })

  it('word their own message as zod\'s do', () => {
    expect(resultOf(string().check(minLength(4, { message: 'is too short' })), 'ab')).toMatchObject({ issues: [{ code: 'too_small', message: 'is too short' }] })
  })

  it('show in JSON Schema as zod\'s do', () => {
    expectSameJsonSchemas(shapes(OURS), shapes(ZODS))
  })

  it('refuse an array over its bound before reading its items, as zod\'s do', () => {
    let read = 0
    const item = number().check(z.refine(() => ++read > 0))
    expect(resultOf(z.array(item).check(maxLength(3)), [1, 2, 3, 4])).toMatchObject({ issues: [{ code: 'too_big', origin: 'array', maximum: 3 }] })
    expect(read).toBe(0)
  })
})
