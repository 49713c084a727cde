import { describe, expect, expectTypeOf, it } from 'vitest'
import * as z from 'zod/mini'
import { expectSameJsonSchemas, expectSameParses, resultOf } from './__fixtures__/zod-parity.ts'
import { boolean } from './scalars.ts'
import { nullable, nullish } from './nullable.ts'
import { intIn, positiveInt } from './numbers.ts'
import { catchall, looseObject, object, strictObject } from './object.ts'
import { oneOf } from './one-of.ts'
import { optional } from './optional.ts'
import { refine } from './refine.ts'
import { union } from './union.ts'
import { withDefault } from './with-default.ts'

interface Objects {
  object: typeof z.object
  strictObject: typeof z.strictObject
  looseObject: typeof z.looseObject
  catchall: typeof z.catchall
}

const zods: Objects = { object: z.object, strictObject: z.strictObject, looseObject: z.looseObject, catchall: z.catchall }
const ours = { object, strictObject, looseObject, catchall } as unknown as Objects

/** A JSON body as the Worker gets one: `__proto__` an own member, as JSON.parse makes it. */
const json = (text: string): unknown => JSON.parse(text)

/** podgate's object shapes, built with zod's objects and with podgate's, each with inputs that reach every branch. */
function shapes(o: Objects): Array<[z.ZodMiniType, unknown[]]> {
  const notObjects = [undefined, null, 0, 'a', true, [], [{}]]
  const policy = o.strictObject({ requestsPerMinute: optional(positiveInt()), strict: optional(boolean()) })
  // Required, optional, defaulted, optional over a default, over a failing default, nullable, unknown.
  const fields = o.strictObject({
    name: z.string(),
    kind: withDefault(oneOf(['secret', 'publishable']), 'secret'),
    attempts: optional(withDefault(intIn(1, 10), 3)),
    failing: optional(withDefault(z.number(), 30).check(z.maximum(10))),
    defaultedFailing: withDefault(z.number(), 30).check(z.maximum(10)),
    expiresAt: nullable(positiveInt()),
    extra: z.unknown(),
  })
  // The same defaults in an object that parses, so a default's output (left out, filled in) shows.
  const defaults = o.strictObject({
    kind: withDefault(oneOf(['secret', 'publishable']), 'secret'),
    attempts: optional(withDefault(intIn(1, 10), 3)),
    failing: optional(withDefault(z.number(), 30).check(z.maximum(10))),
    retries: withDefault(o.strictObject({ attempts: withDefault(intIn(1, 10), 3) }), () => ({ attempts: 3 })),
  })
  const message = o.looseObject({ role: z.string(), content: nullish(z.string()), name: optional(z.string()) })
  const body = o.looseObject({
    messages: z.array(message).check(z.minLength(1)),
    stream_options: nullish(o.looseObject({ include_usage: nullish(boolean()) })),
    stop: optional(union([z.string(), z.array(z.string())])),
  })
  const claims = o.object({ sub: z.string(), exp: optional(z.number()) })
  const model = o.strictObject({ endpoints: z.array(o.strictObject({ endpointId: z.string(), weight: withDefault(z.number(), 1) })), cap: optional(positiveInt()) })
  const models = o.catchall(o.object({}), model).check(refine((m: object) => Object.keys(m).length > 0, 'needs at least one model'))
  const metadata = o.catchall(o.object({}), z.string().check(z.maxLength(3)))
  const sampling = optional(o.looseObject({}).check(z.check((ctx) => {
    const unknown = Object.keys(ctx.value).filter((key) => !['top_k'].includes(key))
    if (unknown.length > 0) ctx.issues.push({ code: 'unrecognized_keys', keys: unknown, input: ctx.value })
  })))
  // An object's own check runs after an unknown key (its issue does not abort), not after a field's issue.
  const checked = o.strictObject({ a: optional(z.number()) }).check(refine(() => false, 'is checked'))
  const options = o.strictObject({ runpod: o.strictObject({ apiKey: optional(z.string()), polls: withDefault(intIn(1, 100), 30) }), models })
  const proto = [json('{"__proto__":{"polluted":1}}'), json('{"name":"n","expiresAt":null,"extra":1,"__proto__":{"a":1}}'), json('{"role":"u","__proto__":{"a":1}}')]
  return [
    [policy, [...notObjects, {}, { requestsPerMinute: undefined }, { requestsPerMinute: 0 }, { requestsPerMinute: 5, strict: 'yes' }, { b: 1, a: 2, requestsPerMinute: 5 }, { strict: true, requestsPerMinute: 1 }, ...proto]],
    [fields, [...notObjects, {}, { name: 'n', expiresAt: null, extra: 0 }, { name: 1, kind: 'other', attempts: 0, failing: 5, defaultedFailing: 50, expiresAt: undefined }, { extra: undefined, attempts: undefined, failing: undefined, defaultedFailing: undefined, kind: undefined }, { name: 'n', expiresAt: 1, extra: null, zz: 1, aa: 2 }, ...proto]],
    [defaults, [{}, { kind: undefined, attempts: undefined, failing: undefined, retries: undefined }, { attempts: 5, failing: 7, retries: {} }, { failing: 11 }, { retries: { attempts: 0 } }]],
    [message, [...notObjects, {}, { role: 'user' }, { role: 'user', content: null, z: 1, a: undefined }, { role: 2, content: 3, name: null }, ...proto]],
    [body, [...notObjects, {}, { messages: [] }, { messages: [{ role: 'u' }, { role: 1, content: [] }], stream: true }, { messages: [{ role: 'u' }], stream_options: { include_usage: 'x', other: 1 } }, { messages: [{}], stop: 3, stream_options: null }, json('{"messages":[{"role":"u","__proto__":{"x":1}}],"__proto__":{"y":1}}')]],
    [claims, [...notObjects, {}, { sub: 's' }, { exp: 1, sub: 's', other: 2 }, { sub: 3, exp: 'x' }, ...proto]],
    [models, [...notObjects, {}, { a: { endpoints: [] } }, { b: { endpoints: [{ endpointId: 'e' }] }, a: { endpoints: [{ endpointId: 'f', weight: 2 }], cap: 3 } }, { a: { endpoints: [{}] }, b: null, c: { endpoints: [], x: 1 } }, { a: undefined }, ...proto]],
    [metadata, [...notObjects, {}, { a: 'x', b: 'yyyyy', c: 3 }, { a: undefined }, json('{"a":"x","__proto__":"y"}')]],
    [sampling, [...notObjects, {}, { top_k: 1 }, { top_k: 1, temperature: 2, seed: 3 }, json('{"__proto__":{}}')]],
    [checked, [...notObjects, {}, { a: 1, b: 2 }, { a: 'x' }, { a: 'x', b: 2 }]],
    [options, [...notObjects, {}, { runpod: {}, models: {} }, { runpod: { apiKey: 1, polls: 0, x: 1 }, models: { m: { endpoints: [{ endpointId: 1 }] } }, y: 2 }, { models: { m: { endpoints: [] } }, runpod: { polls: undefined } }]],
  ]
}

describe('objects', () => {
  it('parse and fail exactly as zod\'s: output and its key order, every issue with its code, path, keys and input', () => {
    expectSameParses(shapes(ours), shapes(zods))
  })

  it('never let a __proto__ member become the output\'s prototype', () => {
    const input = json('{"role":"u","__proto__":{"polluted":true}}')
    for (const schema of [looseObject({ role: z.string() }), catchall(object({}), z.unknown()), object({ role: z.string() })]) {
      const result = schema.safeParse(input)
      expect(result.success).toBe(true)
      expect(Object.getPrototypeOf(result.data)).toBe(Object.prototype)
      expect(Object.hasOwn(result.data as object, '__proto__')).toBe(false)
    }
    expect(resultOf(strictObject({ role: z.string() }), input)).toEqual(resultOf(z.strictObject({ role: z.string() }), input))
  })

  it('keep their shape, as zod\'s do (`schema.shape`, `def.shape`), through a check', () => {
    const name = z.string()
    const schema = strictObject({ name }).check(refine(() => true, 'never'))
    expect(schema.shape).toEqual({ name })
    expect(schema._zod.def.shape.name).toBe(name)
  })

  it('have zod\'s types: the same schema type, so the same z.infer', () => {
    const shape = { name: z.string(), kind: withDefault(oneOf(['a', 'b']), 'a'), tags: optional(z.array(z.string())) }
    expectTypeOf(strictObject(shape)).toEqualTypeOf(z.strictObject(shape))
    expectTypeOf(looseObject(shape)).toEqualTypeOf(z.looseObject(shape))
    expectTypeOf(object(shape)).toEqualTypeOf(z.object(shape))
    expectTypeOf(catchall(object({}), z.number())).toEqualTypeOf(z.catchall(z.object({}), z.number()))
    expectTypeOf<z.input<ReturnType<typeof strictObject<typeof shape>>>>().toEqualTypeOf<z.input<ReturnType<typeof z.strictObject<typeof shape>>>>()
  })

  it('show in JSON Schema as zod\'s do: properties, required (input and output), additionalProperties', () => {
    expectSameJsonSchemas(shapes(ours), shapes(zods))
  })
})
