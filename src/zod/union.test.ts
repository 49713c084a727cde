import { describe, expect, it } from 'vitest'
import * as z from 'zod/mini'
import { resultOf } from './__fixtures__/zod-parity.ts'
import { oneOf } from './one-of.ts'
import { union } from './union.ts'

/** podgate's union shapes, each as zod's union and as union(): options of every kind, a schema's error, nesting. */
function pairs(): Array<[z.ZodMiniType, z.ZodMiniType, unknown[]]> {
  const strings = (u: typeof z.union) => u([z.string().check(z.maxLength(4)), z.array(z.string().check(z.maxLength(4))).check(z.minLength(1), z.maxLength(2))])
  const part = (u: typeof z.union) => u([z.string(), z.looseObject({ type: z.optional(z.string()), text: z.nullish(z.string()) })], { error: 'expected a string or an object' })
  const content = (u: typeof z.union) => z.nullish(u([z.string(), z.array(part(u)).check(z.maxLength(2))], { error: 'expected a string or parts' }))
  const endpoint = (u: typeof z.union) => u([
    z.strictObject({ endpointId: z.string(), weight: z._default(z.number().check(z.positive()), 1) }),
    z.strictObject({ url: z.string(), weight: z._default(z.number().check(z.positive()), 1) }),
  ])
  const tokens = z.array(z.number().check(z.minimum(0))).check(z.minLength(1), z.maxLength(3))
  const prompt = (u: typeof z.union) => u([z.string(), tokens, z.array(z.string()).check(z.minLength(1), z.maxLength(2)), z.array(tokens).check(z.minLength(1), z.maxLength(2))], { error: 'expected a prompt' })
  const ours = union as unknown as typeof z.union
  return [
    [strings(z.union), strings(ours), ['abc', 'abcdef', [], ['a'], ['a', 'b', 'c'], ['abcdef'], [1], 3, null, undefined, {}]],
    [z.optional(z.union([z.boolean(), oneOf(['never'])])), z.optional(ours([z.boolean(), oneOf(['never'])])), [true, false, 'never', 'always', 0, null, undefined]],
    [z.looseObject({ content: content(z.union) }), z.looseObject({ content: content(ours) }), [{}, { content: null }, { content: 'hi' }, { content: [] }, { content: ['a', { type: 'text', text: 'b' }] }, { content: [3] }, { content: [{ text: 4 }] }, { content: ['a', 'b', 'c'] }, { content: 7 }, { content: [null, 'a'] }]],
    [endpoint(z.union), endpoint(ours), [{ endpointId: 'a' }, { url: 'u', weight: 2 }, { endpointId: 'a', url: 'u' }, { weight: -1 }, {}, { endpointId: 3 }, { url: 'u', weight: 0 }, 'a', null]],
    [prompt(z.union), prompt(ours), ['p', [1, 2], ['a', 'b'], [[1], [2, 3]], [], [1, 'a'], [-1], [1, 2, 3, 4], ['a', 'b', 'c'], [[]], [['a']], 5, undefined]],
  ]
}

describe('union()', () => {
  it('parses and fails exactly as z.union: the same output, the same issues (a lone standing option, invalid_union with every option\'s)', () => {
    for (const [zods, ours, inputs] of pairs()) {
      for (const input of inputs) expect(JSON.stringify(resultOf(ours, input)), JSON.stringify(input)).toBe(JSON.stringify(resultOf(zods, input)))
    }
  })

  it('shows in JSON Schema as z.union does: anyOf its options', () => {
    for (const [zods, ours] of pairs()) {
      for (const io of ['input', 'output'] as const) expect(JSON.stringify(z.toJSONSchema(ours, { io }))).toBe(JSON.stringify(z.toJSONSchema(zods, { io })))
    }
  })
})
