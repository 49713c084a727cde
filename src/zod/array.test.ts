import { describe, expect, it } from 'vitest'
import * as z from 'zod/mini'
import { expectSameJsonSchemas, expectSameParses, resultOf } from './__fixtures__/zod-parity.ts'
import { array } from './array.ts'
import { maxLength, minLength } from './bounds.ts'
import { refine } from './refine.ts'
import { number, string } from './scalars.ts'

const LISTS = [[], ['a'], ['a', 'b'], ['a', 'b', 'c'], ['a', 5, 'c', null], [1, 2, 3, 4, 5], ['', 'bb', 'ccc'], [['a'], ['b', 'c']], 'abc', null, undefined, {}, { length: 2 }, 7]

/** podgate's list shapes: plain, bounded (a leading length check caps it), a check before the bound, nested, in objects and unions. */
function shapes(list: <T extends z.core.SomeType>(element: T) => z.ZodMiniArray<T>): Array<[z.ZodMiniType, unknown[]]> {
  const nested = [[], [[]], [['a']], [['a', 'b', 'c']], [['a'], [5]], [['a'], ['b'], ['c']], [5]]
  return [
    [list(string()), LISTS],
    [list(number()), LISTS],
    [list(string()).check(maxLength(2)), LISTS],
    [list(string()).check(minLength(1), maxLength(2)), LISTS],
    [list(string()).check(maxLength(3), maxLength(1)), LISTS],
    [list(string().check(minLength(1))).check(minLength(2)), LISTS],
    [list(string()).check(refine((v: unknown[]) => v.length !== 1, 'must not have one item'), maxLength(2)), LISTS],
    [list(list(string()).check(maxLength(2))).check(maxLength(2)), nested],
    [z.strictObject({ stop: z.optional(list(string()).check(maxLength(2))) }), LISTS.map((stop) => ({ stop }))],
    [z.union([string(), list(string()).check(maxLength(2))]), LISTS],
    [z.nullable(list(number())), LISTS],
  ]
}

describe('array()', () => {
  it('parses and fails exactly as z.array(): items under their index, a capped length refused before its items', () => {
    expectSameParses(shapes(array), shapes(z.array))
  })

  it('stops at the first item that aborts under abortEarly, as z.array() does', () => {
    // zod's own parse option, not in its public context type.
    const context = { abortEarly: true, reportInput: true } as z.core.ParseContext<z.core.$ZodIssue>
    for (const input of [[1, 'a', 2, 'b'], [1, 2], ['a']]) {
      const ours = array(number()).safeParse(input, context)
      const zods = z.array(number()).safeParse(input, context)
      expect(JSON.stringify(ours)).toBe(JSON.stringify(zods))
    }
  })

  it('parses no item of an array over its leading bound', () => {
    let read = 0
    const counted = number().check(refine(() => ++read > 0, 'never'))
    expect(resultOf(array(counted).check(maxLength(3)), Array.from({ length: 1_000_000 }, () => 1))).toMatchObject({ issues: [{ code: 'too_big', origin: 'array', maximum: 3, path: [] }] })
    expect(read).toBe(0)
    expect(resultOf(array(counted).check(maxLength(3)), [1, 2])).toEqual({ data: [1, 2] })
    expect(read).toBe(2)
  })

  it('shows in JSON Schema as z.array() does', () => {
    expectSameJsonSchemas(shapes(array), shapes(z.array))
  })
})
