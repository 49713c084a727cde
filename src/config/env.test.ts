/**
 * `optionsFromEnv` (`podgate/worker`): every option settable from the Worker's environment through
 * PODGATE_CONFIG, validated by the gateway's own schema; the older variables still win; secrets and
 * the shipped placeholder are refused with a message naming the fix.
 */
import { describe, expect, it } from 'vitest'
import { createGateway } from '../gateway.ts'
import type { GatewayOptions } from '../gateway.ts'
import { resolveConfig } from './resolve.ts'
import { optionsFromEnv } from './env.ts'
import type { PodgateWorkerEnv } from './env.ts'

const MODELS = { chat: { endpoints: [{ endpointId: 'abc123' }] } }
const base = { PODGATE_KV: {} as KVNamespace, RUNPOD_API_KEY: 'rp_key' } satisfies PodgateWorkerEnv

describe('optionsFromEnv', () => {
  it('sets any JSON option from PODGATE_CONFIG, and the single-purpose variables win over it', () => {
    const options = optionsFromEnv({
      ...base,
      PODGATE_CONFIG: JSON.stringify({
        models: { other: { endpoints: [{ endpointId: 'zzz999' }] } },
        runpod: { maxPollsPerStream: 45, baseUrl: 'https://from-config.example/v2' },
        cache: { ttlSeconds: 600, scope: 'gateway' },
        cors: { maxAgeSeconds: 60 },
        maxBodyBytes: 65536,
        keyCacheTtlMs: 2000,
        tokens: { defaultTtlSeconds: 120 },
        logCalls: true,
      }),
      PODGATE_MODELS: JSON.stringify(MODELS),
      RUNPOD_BASE_URL: 'https://from-var.example/v2',
      PODGATE_TOKEN_MAX_TTL: '900',
    })
    const resolved = resolveConfig(options)
    expect(Object.keys(resolved.models)).toEqual(['chat'])
    expect(resolved.runpod).toMatchObject({ apiKey: 'rp_key', baseUrl: 'https://from-var.example/v2', maxPollsPerStream: 45 })
    expect(resolved.cache).toMatchObject({ ttlSeconds: 600, scope: 'gateway' })
    expect(resolved.tokens).toEqual({ maxTtlSeconds: 900, defaultTtlSeconds: 120 })
    expect(resolved).toMatchObject({ maxBodyBytes: 65536, keyCacheTtlMs: 2000, cors: { maxAgeSeconds: 60 }, logCalls: true })
  })

  it("PODGATE_QUOTA_CONFIG sets quota fields over PODGATE_CONFIG's quota, keeping the fields it does not name", () => {
    // The strict store's binding: without it a strict quota is refused (below).
    const bound = { ...base, PODGATE_QUOTA: {} as NonNullable<PodgateWorkerEnv['PODGATE_QUOTA']> }
    const options = optionsFromEnv({
      ...bound,
      PODGATE_MODELS: JSON.stringify(MODELS),
      PODGATE_CONFIG: JSON.stringify({ quota: { store: 'strict', flushIntervalMs: 5000, defaults: { requestsPerMinute: 10 } } }),
      PODGATE_QUOTA_CONFIG: JSON.stringify({ defaults: { requestsPerMinute: 60, tokensPerDay: 1000 } }),
    })
    // createGateway takes `objects` (the binding, handed to the strict store) out before its schema, as here.
    const resolved = (o: GatewayOptions) => {
      const { objects, ...quota } = o.quota!
      expect(objects?.({} as never)).toBe(bound.PODGATE_QUOTA)
      return resolveConfig({ ...o, quota }).quota
    }
    expect(resolved(options)).toEqual({ store: 'strict', flushIntervalMs: 5000, defaults: { requestsPerMinute: 60, tokensPerDay: 1000 } })
    expect(resolved(optionsFromEnv({ ...bound, PODGATE_MODELS: JSON.stringify(MODELS), PODGATE_QUOTA_CONFIG: '{"store":"strict"}' }))).toEqual({ store: 'strict', flushIntervalMs: 1000 })
  })

  it('refuses a strict quota with no PODGATE_QUOTA binding at startup, naming the binding, as the Worker does', () => {
    const quota = {} as NonNullable<PodgateWorkerEnv['PODGATE_QUOTA']>
    const strict: [string, Partial<PodgateWorkerEnv>][] = [
      ['quota.store', { PODGATE_QUOTA_CONFIG: '{"store":"strict"}' }],
      ['quota.defaults', { PODGATE_CONFIG: { quota: { defaults: { requestsPerMinute: 5, strict: true } } } }],
    ]
    for (const [name, vars] of strict) {
      const env = { ...base, PODGATE_MODELS: JSON.stringify(MODELS), ...vars }
      expect(() => createGateway(optionsFromEnv(env)), name).toThrow(/strict.*PODGATE_QUOTA/)
      expect(() => createGateway(optionsFromEnv({ ...env, PODGATE_QUOTA: quota })), name).not.toThrow()
    }
    const kv = { ...base, PODGATE_MODELS: JSON.stringify(MODELS), PODGATE_QUOTA_CONFIG: '{"store":"kv","defaults":{"strict":false}}' }
    expect(() => createGateway(optionsFromEnv(kv))).not.toThrow()
    // A model's quota picks no store (a key's counters live in one): its strict needs no binding.
    expect(() => createGateway(optionsFromEnv({ ...base, PODGATE_MODELS: { chat: { endpoints: [{ endpointId: 'abc123' }], quota: { strict: true } } } }))).not.toThrow()
  })

  it('takes models from PODGATE_CONFIG alone, and a wrong value fails at startup naming the field', () => {
    const options = optionsFromEnv({ ...base, PODGATE_CONFIG: { models: MODELS, runpod: { maxPollsPerStream: 0 } } })
    expect(() => createGateway(options)).toThrow(/'runpod\.maxPollsPerStream' must be at least 1/)
    expect(() => createGateway(optionsFromEnv({ ...base, PODGATE_CONFIG: { models: MODELS, cache: { scope: 'everyone' } } }))).toThrow(/'cache\.scope'/)
    expect(() => createGateway(optionsFromEnv({ ...base, PODGATE_CONFIG: { models: MODELS, unknownOption: 1 } }))).toThrow(/unknownOption/)
  })

  it('refuses the options only code sets (they would fail every request), naming the field', () => {
    // `kv: false` (meant as cache.kv) and a gateway-wide `breaker` (meant as a model's resilience.breaker)
    // were taken, and every call failed with a 500: "kv is not a function", "breaker.isOpen is not a function".
    for (const key of ['kv', 'breaker', 'credential', 'fetch', 'logSink', 'extras', 'credentialOrigins']) {
      const config = { models: MODELS, [key]: key === 'kv' ? false : key === 'breaker' ? { failures: 5 } : [] }
      expect(() => optionsFromEnv({ ...base, PODGATE_CONFIG: JSON.stringify(config) }), key).toThrow(`PODGATE_CONFIG cannot set ${key}: no such option, or one only code sets`)
    }
    // Nested ones too (`–` and `binding` in configuration.md): createGateway takes them out before its schema,
    // and `{"cache":{"edgeCache":false}}` failed every cacheable call with "edgeCache is not a function".
    for (const [name, key] of [['cache', 'edgeCache'], ['cache', 'now'], ['quota', 'objects'], ['quota', 'now']]) {
      expect(() => optionsFromEnv({ ...base, PODGATE_CONFIG: JSON.stringify({ models: MODELS, [name!]: { [key!]: false } }) }), `${name}.${key}`).toThrow(`podgate: PODGATE_CONFIG cannot set ${name}.${key}: no such option, or one only code sets`)
    }
    expect(() => optionsFromEnv({ ...base, PODGATE_MODELS: JSON.stringify(MODELS), PODGATE_QUOTA_CONFIG: '{"objects":"PODGATE_QUOTA"}' })).toThrow('podgate: PODGATE_CONFIG cannot set quota.objects')
  })

  it('refuses a JSON variable that names a key twice in one object, naming the key: JSON.parse kept only the last', () => {
    // A model block copied and not renamed replaced the first one, silently.
    const twice = '{"chat":{"endpoints":[{"endpointId":"abc123"}]},"chat":{"endpoints":[{"endpointId":"def456"}]}}'
    expect(() => optionsFromEnv({ ...base, PODGATE_MODELS: twice })).toThrow('podgate: PODGATE_MODELS names "chat" twice in one object')
    expect(() => optionsFromEnv({ ...base, PODGATE_MODELS: '{"chat":{"endpoints":[{"endpointId":"abc123","weight":1, "weight" :3}]}}' })).toThrow('podgate: PODGATE_MODELS names "weight" twice')
    const config = '{"cache":{"ttlSeconds":5},"cache":{"enabled":false}}'
    expect(() => optionsFromEnv({ ...base, PODGATE_MODELS: JSON.stringify(MODELS), PODGATE_CONFIG: config })).toThrow('podgate: PODGATE_CONFIG names "cache" twice')
    expect(() => optionsFromEnv({ ...base, PODGATE_MODELS: JSON.stringify(MODELS), PODGATE_QUOTA_CONFIG: '{"store":"kv","store":"kv"}' })).toThrow('PODGATE_QUOTA_CONFIG names "store" twice')
    // JSON.parse reads an escaped key as its characters: "\u0063hat" is "chat" named again.
    expect(() => optionsFromEnv({ ...base, PODGATE_MODELS: twice.replace('},"chat"', '},"\\u0063hat"') })).toThrow('podgate: PODGATE_MODELS names "chat" twice')
    // The same key in sibling objects, and braces, quotes and colons inside strings, are no repeat.
    const fine = { a: { endpoints: [{ endpointId: 'abc123' }], servedModelName: 'x"}{"a":' }, b: { endpoints: [{ endpointId: 'abc123' }], servedModelName: '{"b": 1}\\' } }
    expect(optionsFromEnv({ ...base, PODGATE_MODELS: JSON.stringify(fine) }).models).toEqual(fine)
  })

  it('an option section that is no object is refused by name, not dropped, read as {} or spread into its characters', () => {
    const bound = { ...base, PODGATE_MODELS: JSON.stringify(MODELS), PODGATE_QUOTA: {} as NonNullable<PodgateWorkerEnv['PODGATE_QUOTA']> }
    const cases: [string, Partial<PodgateWorkerEnv>][] = [
      // `{"runpod":45}` was replaced by the secret's object without a word; `"ab"` read as the options "0" and "1".
      ["Invalid type for 'runpod': expected an object, got a number", { PODGATE_CONFIG: '{"runpod":45}' }],
      ["Invalid type for 'runpod': expected an object, got a string", { PODGATE_CONFIG: '{"runpod":"ab"}' }],
      ["Invalid type for 'tokens': expected an object, got a string", { PODGATE_CONFIG: '{"tokens":"ab"}', PODGATE_TOKEN_MAX_TTL: '600' }],
      ["Invalid type for 'quota': expected an object, got a string", { PODGATE_CONFIG: '{"quota":"kv"}', PODGATE_QUOTA_CONFIG: '{"store":"kv"}' }],
      ["Invalid type for 'quota': expected an object, got a string", { PODGATE_CONFIG: '{"quota":"kv"}' }],
      // `"cache": false`, meant as "no caching", was read as `{}`: every default, caching on.
      ["Invalid type for 'cache': expected an object, got a boolean", { PODGATE_CONFIG: '{"cache":false}' }],
      // `"models": [...]` started a Worker serving the model "0" (each endpoint's apiKeyEnv read through it).
      ["Invalid type for 'models': expected an object, got an array", { PODGATE_MODELS: undefined, PODGATE_CONFIG: JSON.stringify({ models: [MODELS.chat] }) }],
    ]
    for (const [message, vars] of cases) expect(() => createGateway(optionsFromEnv({ ...bound, ...vars })), JSON.stringify(vars)).toThrow(message)
    // The library form too (from JavaScript, or past a cast).
    const options = { models: MODELS, runpod: { apiKey: 'rp_key' } }
    expect(() => createGateway({ ...options, cache: false as never })).toThrow("Invalid type for 'cache': expected an object, got a boolean")
    expect(() => createGateway({ ...options, quota: 'strict' as never })).toThrow("Invalid type for 'quota': expected an object, got a string")
  })

  it('refuses secrets in PODGATE_CONFIG, bad JSON, no models, and the placeholder endpoint id', () => {
    expect(() => optionsFromEnv({ ...base, PODGATE_CONFIG: { models: MODELS, adminToken: 'x'.repeat(20) } })).toThrow(/PODGATE_CONFIG\.adminToken .*wrangler secret put PODGATE_ADMIN_TOKEN/)
    expect(() => optionsFromEnv({ ...base, PODGATE_CONFIG: { models: MODELS, runpod: { apiKey: 'k' } } })).toThrow(/wrangler secret put RUNPOD_API_KEY/)
    expect(() => optionsFromEnv({ ...base, PODGATE_CONFIG: '{"models":' })).toThrow(/PODGATE_CONFIG is not valid JSON/)
    expect(() => optionsFromEnv({ ...base, PODGATE_CONFIG: '[]' })).toThrow(/PODGATE_CONFIG must be a JSON object/)
    expect(() => optionsFromEnv(base)).toThrow(/no models\. Set PODGATE_MODELS/)
    // Number('1h') is NaN, which the schema words "Invalid type for 'tokens.maxTtlSeconds': expected a number, got NaN".
    expect(() => createGateway(optionsFromEnv({ ...base, PODGATE_MODELS: MODELS, PODGATE_TOKEN_MAX_TTL: '1h' }))).toThrow('podgate: PODGATE_TOKEN_MAX_TTL must be seconds, e.g. "3600", got "1h".')
    expect(() => optionsFromEnv({ ...base, RUNPOD_API_KEY: undefined, PODGATE_MODELS: MODELS })).toThrow(/RUNPOD_API_KEY is not set/)
    // An endpoint's own key is a secret too: in PODGATE_MODELS (or PODGATE_CONFIG's models) it sat in plain text.
    const keyed = { chat: { endpoints: [{ url: 'https://worker.example', apiKey: 'plain_text_worker_key_123' }] } }
    for (const env of [{ PODGATE_MODELS: JSON.stringify(keyed) }, { PODGATE_CONFIG: { models: keyed } }]) {
      expect(() => optionsFromEnv({ ...base, ...env })).toThrow(`podgate: models.chat: an endpoint's apiKey is a secret in a plain-text variable. Name a secret instead: "apiKeyEnv": "NAME"`)
    }
    // A key pasted where its secret's name goes was quoted twice in the startup error (a log line).
    for (const pasted of ['rpa_ABCDEF0123456789SECRET', 'ABCDEF0123456789ABCDEF0123456789']) {
      const models = JSON.stringify({ chat: { endpoints: [{ url: 'https://worker.example', apiKeyEnv: pasted }] } })
      let message = ''
      try {
        optionsFromEnv({ ...base, PODGATE_MODELS: models })
      } catch (error) {
        message = (error as Error).message
      }
      expect(message).toMatch(/^podgate: models\.chat: an endpoint's apiKeyEnv names no secret that is set/)
      expect(message).not.toContain(pasted)
    }
    expect(() => optionsFromEnv({ ...base, PODGATE_MODELS: JSON.stringify({ chat: { endpoints: [{ url: 'https://worker.example', apiKeyEnv: 'WORKER_KEY' }] } }) })).toThrow('npx wrangler secret put WORKER_KEY')
    // Only a url: endpoint takes apiKeyEnv: on a Runpod endpoint id the error named an "apiKey" never written.
    const onId = JSON.stringify({ chat: { endpoints: [{ endpointId: 'abc123', apiKeyEnv: 'RUNPOD_API_KEY' }] } })
    expect(() => createGateway(optionsFromEnv({ ...base, PODGATE_MODELS: onId }))).toThrow("Unrecognized option supplied in 'models.chat.endpoints[0]': apiKeyEnv")
    const placeholder = { 'llama-3.1-8b': { endpoints: [{ endpointId: 'your0endpoint0id' }] } }
    expect(() => optionsFromEnv({ ...base, PODGATE_MODELS: JSON.stringify(placeholder) })).toThrow(/placeholder endpoint id "your0endpoint0id"/)
  })
})
