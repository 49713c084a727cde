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
  it('names each bad field as request errors do, at most five', () => {
    expect(configError({ ...valid, runpod: { apiKey: 1, baseUrl: 'nope', maxPollsPerStream: 9_001 }, cache: { scope: 'everyone' }, extra: true })).toBe(
      [
        'podgate: invalid options. Fix these fields:',
        "  - Invalid type for 'runpod.apiKey': expected a string, got a number",
        "  - 'runpod.baseUrl' must be an absolute http(s) URL, with no query or fragment",
        "  - 'runpod.maxPollsPerStream' must be at most 9000, got 9001",
        "  - Invalid value for 'cache.scope': expected 'key', 'gateway', got 'everyone'",
        '  - Unrecognized option supplied: extra',
      ].join('\n'),
    )
    expect(configError({ ...valid, models: { chat: { endpoints: [{ endpointId: 'abc123', weight: 0 }], defaults: { top_k: 1.5 } } } })).toBe(
      [
        'podgate: invalid options. Fix these fields:',
        "  - 'models.chat.endpoints[0].weight' must be greater than 0, got 0",
        "  - Invalid type for 'models.chat.defaults.top_k': expected an integer, got 1.5",
      ].join('\n'),
    )
  })

  it('never quotes a string option it refuses for its length: a secret stays out of the message', () => {
    expect(configError({ ...valid, signingSecret: 'short-secret-value' })).toBe(
      "podgate: invalid options. Fix these fields:\n  - 'signingSecret' must be at least 32 characters: e.g. `openssl rand -hex 32`",
    )
    expect(configError({ ...valid, runpod: { apiKey: 'rp_key', timeoutMs: 'rp_secret_in_the_wrong_field' } })).not.toContain('rp_secret')
  })

  it('keeps the messages the schema writes itself', () => {
    expect(configError({ ...valid, models: {}, runpod: { apiKey: '' } })).toBe(
      "podgate: invalid options. Fix these fields:\n  - 'models' needs at least one model\n  - 'runpod.apiKey' is empty: set the RUNPOD_API_KEY secret",
    )
    expect(configError({ ...valid, models: { chat: { endpoints: [{ endpointId: 'ABC-1' }] } } })).toBe(
      "podgate: invalid options. Fix these fields:\n  - 'models.chat.endpoints[0].endpointId' must be a Runpod endpoint id: lowercase letters and digits only",
    )
  })

  it('reports the field a union member sent with a wrong type, not one it left out; and words options as options', () => {
    expect(configError({ ...valid, models: { chat: { endpoints: [{ url: 'https://x.example', apiKey: 7 }] } } })).toContain("'models.chat.endpoints[0].apiKey'")
    expect(configError({ ...valid, runpod: { apiKey: 'rp_key', apikey: 'x' } })).toContain("Unrecognized option supplied in 'runpod': apikey")
    expect(configError({ models: valid.models })).toContain("Missing required option: 'runpod'")
  })

  it("answers an endpoint url that is no http(s) URL with the option's error, not a parser's TypeError", () => {
    const endpointUrl = (url: string) => configError({ ...valid, models: { chat: { endpoints: [{ url }] } } })
    const wrong = "podgate: invalid options. Fix these fields:\n  - 'models.chat.endpoints[0].url' must be an absolute http(s) URL, with no query or fragment"
    expect(endpointUrl('nope')).toBe(wrong)
    expect(endpointUrl('ftp://files.example')).toBe(wrong)
    expect(endpointUrl('http://example.com')).toContain('uses plain http:// to a host that is not loopback')
    expect(() => resolveConfig({ ...valid, models: { chat: { endpoints: [{ url: 'http://127.0.0.1:8000' }] } } })).not.toThrow()
  })

  it('never quotes a secret: a wrong type, a short one, an unknown key beside it', () => {
    const secret = 'rp_secret_value_0123456789'
    for (const input of [
      { ...valid, runpod: { apiKey: 'rp_key', apikey: secret } },
      { ...valid, adminToken: secret.slice(0, 10) },
      { ...valid, signingSecret: secret },
      { ...valid, models: { chat: { endpoints: [{ endpointId: 'abc', apiKey: secret }] } } },
      { ...valid, models: { chat: { endpoints: [{ url: 'http://example.com', apiKey: secret }] } } },
      { ...valid, runpod: { apiKey: 'rp_key', timeoutMs: secret } },
    ]) expect(configError(input)).not.toContain('rp_secret')
  })
})

describe('runpod.baseUrl', () => {
  it('is refused unless http(s), and plain http:// only to loopback: the Runpod key goes to it in the clear', () => {
    const baseUrl = (url: string) => () => resolveConfig({ ...valid, runpod: { apiKey: 'rp_key', baseUrl: url } })
    for (const url of ['ftp://api.runpod.ai/v2', 'javascript:alert(1)', 'api.runpod.ai/v2']) {
      expect(baseUrl(url), url).toThrow("podgate: invalid options. Fix these fields:\n  - 'runpod.baseUrl' must be an absolute http(s) URL, with no query or fragment")
    }
    expect(baseUrl('http://proxy.example/v2')).toThrow("'runpod.baseUrl' uses plain http:// to a host that is not loopback")
    // podgate appends the job API's paths (`/run`, `/stream/{id}`) to it: a query or fragment would swallow them.
    for (const url of ['https://proxy.example/v2?token=abc', 'https://proxy.example/v2#x']) {
      expect(baseUrl(url), url).toThrow("'runpod.baseUrl' must be an absolute http(s) URL, with no query or fragment")
      expect(() => resolveConfig({ ...valid, models: { chat: { endpoints: [{ url }] } } }), url).toThrow("'models.chat.endpoints[0].url' must be an absolute http(s) URL, with no query or fragment")
    }
    for (const url of ['https://proxy.example/v2', 'http://127.0.0.1:8788/v2', 'http://localhost:8788/v2', 'http://[::1]:8788/v2']) expect(baseUrl(url), url).not.toThrow()
    // A space (a typo, a value pasted with its newline) parsed, and became part of every upstream path: each
    // request a 502 route_not_found instead of an error at startup.
    for (const url of ['https://proxy.example/v2 ', 'https://proxy.example/v2\n', 'https://proxy.example/ v2']) {
      expect(baseUrl(url), JSON.stringify(url)).toThrow("'runpod.baseUrl' must be an absolute http(s) URL")
      expect(() => resolveConfig({ ...valid, models: { chat: { endpoints: [{ url }] } } }), JSON.stringify(url)).toThrow("'models.chat.endpoints[0].url' must be an absolute http(s) URL")
    }
    // A URL's scheme is case-insensitive (it was accepted so before the http(s) rule): upper case is still https.
    expect(baseUrl('HTTPS://api.runpod.ai/v2')).not.toThrow()
    expect(baseUrl('HTTP://proxy.example/v2')).toThrow("'runpod.baseUrl' uses plain http:// to a host that is not loopback")
  })
})

describe('model aliases', () => {
  it('refuses an alias the schema would drop (a JSON "__proto__"), as any alias outside the pattern', () => {
    // JSON.parse makes "__proto__" an own key; the object schema leaves it out, so the model vanished unnamed.
    const models = JSON.parse('{"chat":{"endpoints":[{"endpointId":"abc123"}]},"__proto__":{"endpoints":[{"endpointId":"def456"}]}}') as GatewayOptionsInput['models']
    expect(configError({ ...valid, models })).toContain('models.__proto__: a model alias must start with a letter or digit')
  })
})
