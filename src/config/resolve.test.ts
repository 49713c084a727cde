import { describe, expect, it } from 'vitest'
import { ConfigError, resolveConfig } from './resolve.ts'
import type { GatewayOptionsInput } from './schema.ts'

const valid = { models: { chat: { endpoints: [{ endpointId: 'abc123' }] } }, runpod: { apiKey: 'rp_key' } } satisfies GatewayOptionsInput

function configError(input: unknown): string {
  try {
    resolveConfig(input as GatewayOptionsInput)
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error
    return error.message
  }
  throw new Error('expected a ConfigError')
}

describe('resolveConfig', () => {
  // zod/mini loads no locale: without podgate's English error map every one of these reads "Invalid input".
  it("names each bad field with zod's English message, at most five", () => {
    expect(configError({ ...valid, runpod: { apiKey: 1, baseUrl: 'nope', maxPollsPerStream: 9_001 }, cache: { scope: 'everyone' }, extra: true })).toBe(
      [
        'podgate: invalid options. Fix these fields:',
        '  - runpod.apiKey: Invalid input: expected string, received number',
        '  - runpod.baseUrl: Invalid URL',
        '  - runpod.maxPollsPerStream: Too big: expected number to be <=9000',
        '  - cache.scope: Invalid option: expected one of "key"|"gateway"',
        '  - (options): Unrecognized key: "extra"',
      ].join('\n'),
    )
    expect(configError({ ...valid, models: { chat: { endpoints: [{ endpointId: 'abc123', weight: 0 }], defaults: { top_k: 1.5 } } } })).toBe(
      [
        'podgate: invalid options. Fix these fields:',
        '  - models.chat.endpoints.0.weight: Too small: expected number to be >0',
        '  - models.chat.defaults.top_k: Invalid input: expected int, received number',
      ].join('\n'),
    )
  })

  it('keeps the messages the schema writes itself', () => {
    expect(configError({ ...valid, models: {}, runpod: { apiKey: '' } })).toBe(
      'podgate: invalid options. Fix these fields:\n  - models: needs at least one model\n  - runpod.apiKey: is empty: set the RUNPOD_API_KEY secret',
    )
  })
})
