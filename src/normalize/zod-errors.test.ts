import { describe, it, expect } from 'vitest'
import * as z from 'zod/mini'
import { GatewayError } from '../errors/index.ts'
import { createKeySchema, updateKeySchema } from '../admin/keys-routes.ts'
import { mintTokenSchema } from '../auth/token-routes.ts'
import { purgeSchema } from '../cache/routes.ts'
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
    custom: z.optional(z.string().check(z.refine((v) => v === 'ok', { error: 'must be ok' }))),
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

  it('keeps the words a schema wrote itself, after the field', () => {
    expect(messageOf(schema, { custom: 'no' })).toEqual(['custom', "'custom' must be ok"])
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

/** The param and message of the refusal `parseRequest` throws for `body`. */
function refusal(schema: Parameters<typeof parseRequest>[0], body: unknown): [string | null, string] {
  try {
    parseRequest(schema, body)
  } catch (error) {
    if (!(error instanceof GatewayError)) throw error
    expect(error.code).toBe('invalid_request')
    return [error.param, error.message]
  }
  throw new Error('expected a GatewayError')
}

describe('admin, token and cache-purge bodies', () => {
  it('returns the parsed body, defaults applied', () => {
    // The route trims the name before this check (test/admin.test.ts).
    expect(parseRequest(createKeySchema(), { name: 'ci' })).toEqual({ name: 'ci', kind: 'secret' })
    // An update names only what changes, and never `kind`.
    expect(parseRequest(updateKeySchema(), {})).toEqual({})
    expect(parseRequest(updateKeySchema(), { metadata: { team: 'ml' }, expiresAt: null })).toEqual({ metadata: { team: 'ml' }, expiresAt: null })
    expect(refusal(updateKeySchema(), { kind: 'publishable' })).toEqual(['kind', 'Unrecognized request argument supplied: kind'])
  })

  it('are worded as completion requests are, with the field as an OpenAI param', () => {
    expect(refusal(createKeySchema(), 'key')).toEqual([null, 'The request body must be a JSON object'])
    expect(refusal(createKeySchema(), {})).toEqual(['name', "Missing required parameter: 'name'"])
    expect(refusal(createKeySchema(), { name: 'ci', extra: 1 })).toEqual(['extra', 'Unrecognized request argument supplied: extra'])
    expect(refusal(createKeySchema(), { name: '' })).toEqual(['name', "'name' must be at least 1 character long, got 0 characters"])
    expect(refusal(createKeySchema(), { name: 'ci', kind: 'public' })).toEqual(['kind', "Invalid value for 'kind': expected 'secret', 'publishable', got 'public'"])
    expect(refusal(updateKeySchema(), { quota: { requestsPerDay: 1.5 } })).toEqual(['quota.requestsPerDay', "Invalid type for 'quota.requestsPerDay': expected an integer, got 1.5"])
    expect(refusal(updateKeySchema(), { metadata: { a: 'x'.repeat(513) } })).toEqual(['metadata.a', "'metadata.a' must be at most 512 characters long, got 513 characters"])
    expect(refusal(updateKeySchema(), { metadata: { ['k'.repeat(65)]: 'x' } })).toEqual(['metadata', "'metadata' must have at most 50 keys, of at most 64 characters"])
    expect(refusal(updateKeySchema(), { metadata: ['x'] })).toEqual(['metadata', "Invalid type for 'metadata': expected an object, got an array"])
    expect(refusal(mintTokenSchema(), { models: [] })).toEqual(['models', "'models' must have at least 1 item, got 0 items"])
    expect(refusal(mintTokenSchema(), { ttlSeconds: 0 })).toEqual(['ttlSeconds', "'ttlSeconds' must be greater than 0, got 0"])
  })

  it('name the field before the words a schema writes itself', () => {
    expect(refusal(createKeySchema(), { name: 'ci', origins: ['https://app.example.com/path'] })).toEqual([
      'origins[0]', "'origins[0]' must be a browser origin such as https://app.example.com (scheme, host and optional port; no path or wildcard)",
    ])
    expect(refusal(mintTokenSchema(), { sub: 'a user' })).toEqual(['sub', "'sub' must be 1-128 printable ASCII characters without spaces, e.g. your user id"])
    expect(refusal(purgeSchema(), {})).toEqual([null, 'Invalid request: give `model`, `keyId` or both'])
  })
})
