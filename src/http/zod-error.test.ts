import { describe, expect, it } from 'vitest'
import { createKeySchema, updateKeySchema } from '../admin/keys-routes.ts'
import { mintTokenSchema } from '../auth/token-routes.ts'
import { purgeSchema } from '../cache/routes.ts'
import { GatewayError } from '../errors/index.ts'
import { parseBody } from './zod-error.ts'

function refusal(schema: Parameters<typeof parseBody>[0], body: unknown): [string | null, string] {
  try {
    parseBody(schema, body)
  } catch (error) {
    if (!(error instanceof GatewayError)) throw error
    expect(error.code).toBe('invalid_request')
    return [error.param, error.message]
  }
  throw new Error('expected a GatewayError')
}

describe('parseBody', () => {
  it('returns the parsed body, defaults applied', () => {
    expect(parseBody(createKeySchema, { name: ' ci ' })).toEqual({ name: 'ci', kind: 'secret' })
  })

  // zod/mini loads no locale: without podgate's English error map every one of these reads "Invalid input".
  it("words zod's own issues in zod's English, with the field as an OpenAI param", () => {
    expect(refusal(createKeySchema, 'key')).toEqual([null, 'Invalid request: Invalid input: expected object, received string'])
    expect(refusal(createKeySchema, {})).toEqual(['name', "Invalid 'name': Invalid input: expected string, received undefined"])
    expect(refusal(createKeySchema, { name: 'ci', extra: 1 })).toEqual([null, 'Invalid request: Unrecognized key: "extra"'])
    expect(refusal(createKeySchema, { name: ' ' })).toEqual(['name', "Invalid 'name': Too small: expected string to have >=1 characters"])
    expect(refusal(createKeySchema, { name: 'ci', kind: 'public' })).toEqual(['kind', 'Invalid \'kind\': Invalid option: expected one of "secret"|"publishable"'])
    expect(refusal(updateKeySchema, { quota: { requestsPerDay: 1.5 } })).toEqual([
      'quota.requestsPerDay', "Invalid 'quota.requestsPerDay': Invalid input: expected int, received number",
    ])
    expect(refusal(updateKeySchema, { metadata: { a: 'x'.repeat(513) } })).toEqual(['metadata.a', "Invalid 'metadata.a': Too big: expected string to have <=512 characters"])
    expect(refusal(mintTokenSchema, { models: [] })).toEqual(['models', "Invalid 'models': Too small: expected array to have >=1 items"])
    expect(refusal(mintTokenSchema, { ttlSeconds: 0 })).toEqual(['ttlSeconds', "Invalid 'ttlSeconds': Too small: expected number to be >0"])
  })

  it('keeps the messages the schemas write themselves', () => {
    expect(refusal(createKeySchema, { name: 'ci', origins: ['https://app.example.com/path'] })).toEqual([
      'origins[0]', "Invalid 'origins[0]': must be a browser origin such as https://app.example.com (scheme, host and optional port; no path or wildcard)",
    ])
    expect(refusal(mintTokenSchema, { sub: 'a user' })).toEqual(['sub', "Invalid 'sub': must be 1-128 printable ASCII characters without spaces, e.g. your user id"])
    expect(refusal(purgeSchema, {})).toEqual([null, 'Invalid request: give `model`, `keyId` or both'])
  })
})
