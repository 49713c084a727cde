import { describe, expect, it } from 'vitest'
import * as z from 'zod/mini'
import { resultOf } from './__fixtures__/zod-parity.ts'
import { customCheck, refine } from './refine.ts'

describe('refine()', () => {
  it('raises exactly the issues of z.refine: alone, aborting, after other checks and on an object', () => {
    const isHttps = (u: string) => u.startsWith('https://')
    const pairs: Array<[z.ZodMiniType, z.ZodMiniType, unknown[]]> = [
      [z.string().check(z.refine(isHttps, 'must be https')), z.string().check(refine(isHttps, 'must be https')), ['https://a', 'http://a', 3, undefined]],
      [
        z.string().check(z.maxLength(8), z.refine(isHttps, { message: 'must be https', abort: true }), z.refine((u) => u.length > 9, { message: 'too short' })),
        z.string().check(z.maxLength(8), refine(isHttps, 'must be https', true), refine((u: string) => u.length > 9, 'too short')),
        ['https://a', 'http://a', 'http://abcdefgh', 'https://abcdefgh'],
      ],
      [
        z.strictObject({ a: z.optional(z.number()), b: z.optional(z.string()) }).check(z.refine((o) => o.a !== undefined || o.b !== undefined, { message: 'give a or b' })),
        z.strictObject({ a: z.optional(z.number()), b: z.optional(z.string()) }).check(refine((o: { a?: number, b?: string }) => o.a !== undefined || o.b !== undefined, 'give a or b')),
        [{}, { a: 1 }, { a: 'x' }, { c: 1 }, null],
      ],
      [
        z.optional(z.unknown().check(z.refine((v) => v === undefined || v === null, { error: 'not forwarded' }))),
        z.optional(z.unknown().check(refine((v) => v === undefined || v === null, 'not forwarded'))),
        [undefined, null, 0, 'x', {}],
      ],
    ]
    for (const [zods, ours, inputs] of pairs) {
      for (const input of inputs) expect(JSON.stringify(resultOf(ours, input)), JSON.stringify(input)).toBe(JSON.stringify(resultOf(zods, input)))
    }
  })

  it('shows in JSON Schema as z.refine does: not at all', () => {
    const zods = z.string().check(z.maxLength(8), z.refine((u) => u !== '', 'empty'))
    const ours = z.string().check(z.maxLength(8), refine((u: string) => u !== '', 'empty'))
    expect(JSON.stringify(z.toJSONSchema(ours, { io: 'input' }))).toBe(JSON.stringify(z.toJSONSchema(zods, { io: 'input' })))
  })
})

describe('customCheck()', () => {
  it('is z.check: the same def, the same issues, the same JSON Schema', () => {
    const odd = (payload: z.core.ParsePayload<number>) => {
      if (payload.value % 2 === 0) payload.issues.push({ code: 'custom', message: 'must be odd', input: payload.value, continue: payload.value > 0 })
    }
    const def = { check: 'number_format', format: 'safeint' }
    expect(customCheck(odd)._zod.def).toEqual(z.check(odd)._zod.def)
    expect(customCheck(odd, def)._zod.def).toEqual(z.check(odd, { ...def } as object)._zod.def)
    const pairs: Array<[z.ZodMiniType, z.ZodMiniType]> = [
      [z.number().check(customCheck(odd), z.maximum(5)), z.number().check(z.check(odd), z.maximum(5))],
      [z.array(z.number().check(customCheck(odd))), z.array(z.number().check(z.check(odd)))],
      [z.number().check(customCheck(odd, def)), z.number().check(z.check(odd, { ...def } as object))],
    ]
    for (const [ours, zods] of pairs) {
      for (const input of [1, 2, -2, 8, [1, 2, -4], 'x']) expect(JSON.stringify(resultOf(ours, input)), JSON.stringify(input)).toBe(JSON.stringify(resultOf(zods, input)))
      for (const io of ['input', 'output'] as const) expect(JSON.stringify(z.toJSONSchema(ours, { io }))).toBe(JSON.stringify(z.toJSONSchema(zods, { io })))
    }
  })
})
