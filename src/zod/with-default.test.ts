import { describe, expect, it } from 'vitest'
import * as z from 'zod/mini'
import { expectSameJsonSchemas, expectSameParses } from './__fixtures__/zod-parity.ts'
import { boolean } from './scalars.ts'
import { intIn } from './numbers.ts'
import { oneOf } from './one-of.ts'
import { union } from './union.ts'
import { withDefault } from './with-default.ts'

/** podgate's defaulted shapes, built with z._default and with withDefault. */
function shapes(d: typeof z._default): Array<[z.ZodMiniType, unknown[]]> {
  const retries = z.strictObject({ attempts: d(intIn(1, 10), 3), baseDelayMs: d(intIn(0, 60_000), 200) })
  const resilience = z.strictObject({ retries: d(retries, () => retries.parse({})), hedge: d(boolean(), false) })
  const model = z.strictObject({
    mode: d(oneOf(['openai', 'native']), 'openai'),
    defaults: d(z.strictObject({ temperature: z.optional(z.number()) }), {}),
    kinds: d(z.array(oneOf(['chat', 'completion'])).check(z.minLength(1)), ['chat', 'completion']),
    resilience: d(resilience, () => resilience.parse({})),
  })
  const endpoint = union([z.strictObject({ endpointId: z.string(), weight: d(z.number().check(z.positive()), 1) }), z.strictObject({ url: z.string(), weight: d(z.number().check(z.positive()), 1) })])
  const scalars = [undefined, null, 0, 3, 11, 2.5, 'openai', true, [], {}]
  return [
    [d(intIn(1, 10), 3), scalars],
    [d(boolean(), true), scalars],
    [z.optional(d(intIn(1, 10), 3)), scalars],
    [z.strictObject({ n: z.optional(d(intIn(1, 10), 3)) }), scalars.map((n) => ({ n }))],
    [retries, [{}, { attempts: undefined }, { attempts: 0 }, { attempts: 4, baseDelayMs: -1 }, { extra: 1 }, null]],
    [model, [{}, { mode: 'native' }, { mode: 'other' }, { defaults: { temperature: 0.5 } }, { defaults: null }, { kinds: [] }, { kinds: ['chat'] }, { resilience: { retries: {} } }, { resilience: { retries: { attempts: 20 }, hedge: 'yes' } }]],
    [endpoint, [{ endpointId: 'a' }, { url: 'u', weight: 2 }, { endpointId: 'a', weight: 0 }, {}, { url: 'u', weight: undefined }]],
  ]
}

describe('withDefault()', () => {
  it('parses and fails exactly as z._default: the same output, the same issues, absent or not, nested, in objects and unions', () => {
    expectSameParses(shapes(withDefault as typeof z._default), shapes(z._default))
  })

  it('hands every parse its own copy of an array or object default, as z._default does', () => {
    for (const d of [z._default, withDefault as typeof z._default]) {
      const schema = z.strictObject({ kinds: d(z.array(z.string()), ['chat']), defaults: d(z.looseObject({}), {}) })
      const first = schema.parse({})
      first.kinds.push('mutated')
      first.defaults.mutated = true
      expect(schema.parse({})).toEqual({ kinds: ['chat'], defaults: {} })
    }
  })

  it('shows in JSON Schema as z._default does: the default, and the field not required on input', () => {
    expectSameJsonSchemas(shapes(withDefault as typeof z._default), shapes(z._default))
  })
})
