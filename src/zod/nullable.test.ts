import { describe, expect, it } from 'vitest'
import * as z from 'zod/mini'
import { expectSameJsonSchemas, expectSameParses } from './__fixtures__/zod-parity.ts'
import { boolean } from './scalars.ts'
import { nullable, nullish } from './nullable.ts'
import { positiveInt } from './numbers.ts'
import { union } from './union.ts'

type Wrap = (schema: z.ZodMiniType) => z.ZodMiniType

/** podgate's nullable and nullish shapes, built with zod's and with nullable()/nullish(). */
function shapes(n: Wrap, nish: Wrap): Array<[z.ZodMiniType, unknown[]]> {
  const scalars: unknown[] = [undefined, null, 0, 3, -1, 'a', '', true, [], ['a'], [1], {}, { a: 1 }]
  const models = n(z.array(z.string().check(z.minLength(1))).check(z.maxLength(2)))
  const policy = n(z.strictObject({ requestsPerMinute: z.optional(positiveInt()) }))
  const content = nish(union([z.string(), z.array(z.looseObject({ text: nish(z.string()) }))]))
  const scope = z.strictObject({ models, quota: policy, expiresAt: n(positiveInt()), origin: n(z.string()) })
  const body = z.looseObject({ stream: nish(boolean()), stream_options: nish(z.looseObject({ include_usage: nish(boolean()) })), max_tokens: nish(z.number().check(z.minimum(1))), content })
  return [
    [models, scalars],
    [policy, scalars.concat([{ requestsPerMinute: 0 }, { requestsPerMinute: 5 }, { other: 1 }])],
    [n(positiveInt()), scalars],
    [nish(boolean()), scalars],
    [content, scalars.concat([[{ text: null }], [{ text: 3 }], [{}], [null]])],
    [scope, [{}, { models: null, quota: null, expiresAt: null, origin: null }, { models: ['a'], quota: {}, expiresAt: 5, origin: 'o' }, { models: [''], quota: { x: 1 }, expiresAt: 0, origin: 1 }, { models: undefined }, null]],
    [body, [{}, { stream: null, stream_options: null, max_tokens: null, content: null }, { stream: 'yes', stream_options: { include_usage: 1 }, max_tokens: 0, content: 5 }, { stream: true, stream_options: {}, max_tokens: 3, content: 'hi' }]],
  ]
}

const ours = () => shapes(nullable as Wrap, nullish as Wrap)
const zods = () => shapes(z.nullable, z.nullish)

describe('nullable() and nullish()', () => {
  it('parse and fail exactly as z.nullable and z.nullish: the same output, the same issues, as fields required or not', () => {
    expectSameParses(ours(), zods())
  })

  it('show in JSON Schema as z.nullable and z.nullish do', () => {
    expectSameJsonSchemas(ours(), zods())
  })
})
