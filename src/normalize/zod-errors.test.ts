import { describe, it, expect } from 'vitest'
import * as z from 'zod/mini'
import { GatewayError } from '../errors/index.ts'
import { invalidRequestFromIssues, parseRequest } from './zod-errors.ts'

function messageOf(schema: z.ZodMiniType, body: unknown): [string | null, string] {
  try {
    parseRequest(schema, body)
  } catch (error) {
    if (!(error instanceof GatewayError)) throw error
    expect(error.code).toBe('invalid_request')
    expect(error.status).toBe(400)
    return [error.param, error.message]
  }
  throw new Error('expected a GatewayError')
}

describe('parseRequest', () => {
  const schema = z.strictObject({
    name: z.optional(z.string().check(z.minLength(2), z.maxLength(5))),
    count: z.optional(z.number().check(z.int(), z.gt(0), z.lt(10))),
    list: z.optional(z.array(z.object({ kind: z.enum(['a', 'b']) })).check(z.maxLength(2))),
    custom: z.optional(z.string().check(z.refine((v) => v === 'ok', { error: 'custom must be ok' }))),
  })

  it('returns the parsed value', () => {
    expect(parseRequest(schema, { name: 'abc' })).toEqual({ name: 'abc' })
  })

  it('refuses non-objects', () => {
    for (const body of [null, [1], 'text', 1, true, undefined]) {
      expect(messageOf(schema, body)).toEqual([null, 'The request body must be a JSON object'])
    }
  })

  it('formats bounds with their unit', () => {
    expect(messageOf(schema, { name: 'a' })).toEqual(['name', "'name' must be at least 2 characters long, got 1 character"])
    expect(messageOf(schema, { name: 'abcdef' })).toEqual(['name', "'name' must be at most 5 characters long, got 6 characters"])
    expect(messageOf(schema, { count: 0 })).toEqual(['count', "'count' must be greater than 0, got 0"])
    expect(messageOf(schema, { count: 10 })).toEqual(['count', "'count' must be less than 10, got 10"])
    expect(messageOf(schema, { list: [{ kind: 'a' }, { kind: 'a' }, { kind: 'b' }] })).toEqual([
      'list', "'list' must have at most 2 items, got 3 items",
    ])
  })

  it('builds OpenAI-style params for nested paths', () => {
    expect(messageOf(schema, { list: [{ kind: 'a' }, { kind: 'c' }] })).toEqual([
      'list[1].kind', "Invalid value for 'list[1].kind': expected 'a', 'b', got 'c'",
    ])
    expect(messageOf(schema, { list: [{ kind: 'a' }, {}] })).toEqual([
      'list[1].kind', "Missing required parameter: 'list[1].kind'",
    ])
  })

  it('keeps messages the schema wrote itself', () => {
    expect(messageOf(schema, { custom: 'no' })).toEqual(['custom', 'custom must be ok'])
  })

  it('never echoes a huge value or key', () => {
    const huge = 'x'.repeat(10_000)
    const [, valueMessage] = messageOf(schema, { list: [{ kind: huge }] })
    expect(valueMessage.length).toBeLessThan(200)
    expect(valueMessage).toContain(`'${'x'.repeat(100)}…'`)
    const [param, keyMessage] = messageOf(schema, { [huge]: 1 })
    expect(keyMessage).toBe(`Unrecognized request argument supplied: ${'x'.repeat(100)}…`)
    expect(param).toBe(`${'x'.repeat(100)}…`)
    const [, typeMessage] = messageOf(schema, { name: huge })
    expect(typeMessage).toBe("'name' must be at most 5 characters long, got 10000 characters")
  })

  it('handles an empty issue list', () => {
    expect(invalidRequestFromIssues([]).message).toBe('The request is invalid')
  })
})
