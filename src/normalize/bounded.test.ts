import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { GatewayError } from '../errors/index.ts'
import { cutAtFirstBadItem, parseBounded } from './bounded.ts'
import { chatCompletionRequestSchema, completionRequestSchema, embeddingRequestSchema } from './schemas.ts'
import { parseRequest } from './zod-errors.ts'

/** What a parse answers: its output, or its error's param and message. */
function outcome(parse: () => unknown): unknown {
  try {
    return { ok: parse() }
  } catch (error) {
    if (!(error instanceof GatewayError)) throw error
    return { param: error.param, message: error.message }
  }
}

const scalar = fc.oneof(fc.constantFrom('a', '', 'text', 'x'.repeat(70)), fc.constantFrom(0, 1, 7, -1, 1.5, 2 ** 60), fc.constant(null), fc.boolean())
const part = fc.oneof(scalar, fc.record({ type: fc.option(fc.constantFrom('text', 'image_url', '', 5), { nil: undefined }), text: fc.option(fc.oneof(fc.constant('t'), fc.constant(null), fc.constant(3)), { nil: undefined }) }, { requiredKeys: [] }))
const message = fc.oneof(
  fc.record({ role: fc.constantFrom('user', 'assistant', '', 7), content: fc.oneof(fc.constant('hi'), fc.constant(null), fc.array(part, { maxLength: 6 }), scalar) }, { requiredKeys: ['role'] }),
  scalar,
)
const tokens = fc.array(fc.oneof(fc.nat(1000), scalar), { maxLength: 8 })
const textOrTokens = fc.oneof(fc.constant('prompt'), fc.array(fc.oneof(fc.constantFrom('a', 'b'), scalar), { maxLength: 8 }), tokens, fc.array(fc.oneof(tokens, scalar), { maxLength: 5 }))

describe('parseBounded', () => {
  it('answers exactly what the whole parse answers: the same output, or the same first error', () => {
    fc.assert(
      fc.property(fc.constantFrom('llama', 5), fc.array(message, { maxLength: 6 }), textOrTokens, (model, messages, value) => {
        const cases: Array<[Parameters<typeof parseBounded>[0], Record<string, unknown>]> = [
          [chatCompletionRequestSchema, { model, messages }],
          [completionRequestSchema, { model, prompt: value }],
          [embeddingRequestSchema, { model, input: value }],
          [embeddingRequestSchema, { model, messages }],
        ]
        for (const [schema, body] of cases) expect(outcome(() => parseBounded(schema, body))).toEqual(outcome(() => parseRequest(schema, body)))
      }),
      { numRuns: 400, seed: 14 },
    )
  })

  it('hands zod the body cut just after its first bad item, never the bad items after it', () => {
    expect(cutAtFirstBadItem({ model: 'm', input: [1, 2, 'x', 3, 'y'] })).toEqual({ body: { model: 'm', input: [1, 'x'] }, renumber: { field: 'input', at: 2 } })
    expect(cutAtFirstBadItem({ prompt: ['a', 'b', 5, 6] })).toEqual({ body: { prompt: ['a', 'b', 5] } })
    expect(cutAtFirstBadItem({ input: [[1, 2], [3, 'x', 'y']] })).toEqual({ body: { input: [[1, 2], [3, 'x']] } })
    const cut = cutAtFirstBadItem({ messages: [{ role: 'user', content: 'a' }, { role: 'user', content: ['a', 5, 6, 7] }, 'bad'] })
    expect(cut?.body.messages).toEqual([{ role: 'user', content: 'a' }, { role: 'user', content: ['a', 5] }])
    expect(cutAtFirstBadItem({ messages: Array.from({ length: 10_005 }, () => ({ role: 'user', content: 'a' })) })?.body.messages).toHaveLength(10_001)
    expect(cutAtFirstBadItem({ messages: [{ role: 'user', content: [{ type: 'text', text: null }, 'b'] }], input: ['a', 'b'] })).toBeUndefined()
  })

  it('refuses bodies of close to a million items with the error of their first bad one', () => {
    const parts = Array.from({ length: 9_000 }, () => 1)
    const messages = Array.from({ length: 100 }, () => ({ role: 'user', content: ['fine', 5, ...parts] }))
    expect(outcome(() => parseBounded(chatCompletionRequestSchema, { model: 'm', messages }))).toMatchObject({ param: 'messages[0].content[1]' })
    const ids = [...Array.from({ length: 999_998 }, () => 1), 'x']
    expect(outcome(() => parseBounded(embeddingRequestSchema, { model: 'm', input: ids }))).toEqual({ param: 'input[999998]', message: "Invalid type for 'input[999998]': expected a number, got a string" })
  })
})
