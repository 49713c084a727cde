import { describe, expect, it } from 'vitest'
import * as z from 'zod/mini'
import { expectSameJsonSchemas, expectSameParses } from './__fixtures__/zod-parity.ts'
import { boolean } from './scalars.ts'
import { nullable } from './nullable.ts'
import { intIn, positiveInt } from './numbers.ts'
import { oneOf } from './one-of.ts'
import { optional } from './optional.ts'
import { union } from './union.ts'
import { withDefault } from './with-default.ts'

type Optional = (schema: z.ZodMiniType) => z.ZodMiniType
type Default = (schema: z.ZodMiniType, value: unknown) => z.ZodMiniType

/** podgate's optional shapes, built with zod's optional (and default, nullable) and with podgate's. */
function shapes(o: Optional, d: Default, n: Optional): Array<[z.ZodMiniType, unknown[]]> {
  const scalars: unknown[] = [undefined, null, 0, 3, -1, 'a', 'secret', true, [], {}]
  const fields = (shape: Record<string, z.ZodMiniType>) => Object.fromEntries(Object.entries(shape).map(([key, field]) => [key, o(field)]))
  // A key update: every field of the scope optional, `kind` over a default (zod keeps it absent when absent).
  const update = z.strictObject(fields({ name: z.string(), kind: d(oneOf(['secret', 'publishable']), 'secret'), expiresAt: n(positiveInt()), models: n(z.array(z.string())) }))
  const policy = z.strictObject({ requestsPerMinute: o(positiveInt()), strict: o(boolean()) })
  const body = z.looseObject({ stream: o(n(boolean())), stop: o(union([z.string(), z.array(z.string()).check(z.maxLength(2))])), n: o(z.number().check(z.minimum(1))) })
  // A default that fails its own check: zod's optional leaves the field out.
  const failing = () => d(z.number(), 30).check(z.maximum(10))
  const retries = z.strictObject({ attempts: o(d(intIn(1, 10), 3)), failing: o(failing()) })
  return [
    [o(z.string()), scalars],
    [o(d(intIn(1, 10), 3)), scalars],
    [o(failing()), scalars],
    [o(n(boolean())), scalars],
    [update, [{}, { kind: undefined }, { kind: 'publishable' }, { kind: 'other' }, { name: 1, expiresAt: null, models: null }, { name: 'n', expiresAt: 0, models: [1] }, { extra: 1 }, null]],
    [policy, [{}, { requestsPerMinute: undefined }, { requestsPerMinute: 0 }, { requestsPerMinute: 5, strict: 'yes' }]],
    [body, [{}, { stream: null }, { stream: undefined }, { stream: 1 }, { stop: 'x' }, { stop: ['a', 'b', 'c'] }, { stop: 3 }, { n: 0 }, { n: 2, extra: true }]],
    [retries, [{}, { attempts: undefined }, { attempts: 4 }, { attempts: 0 }, { failing: 5 }]],
  ]
}

const zods = () => shapes(z.optional, z._default as Default, z.nullable)
const ours = () => shapes(optional, withDefault as Default, nullable as Optional)

describe('optional()', () => {
  it('parses and fails exactly as z.optional: absent, present, over a default (one that fails too), in objects', () => {
    expectSameParses(ours(), zods())
  })

  it('shows in JSON Schema as z.optional does: the inner schema, and the field not required', () => {
    expectSameJsonSchemas(ours(), zods())
  })
})
