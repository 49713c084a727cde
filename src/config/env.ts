/**
 * Gateway options from a Worker's environment (`wrangler.toml` vars and secrets): what the shipped
 * Worker uses, exported as `podgate/worker` so a composed app reads the same variables.
 *
 * Every option of the config schema is settable through `PODGATE_CONFIG` (not those only code sets); the older single-purpose
 * variables still work and win over the same field in it. The merged options are validated by the
 * same zod schema as `createGateway()` options, so an error names the field (`runpod.maxPollsPerStream`).
 */
import type { GatewayOptions } from '../gateway.ts'
import type { QuotaObject } from '../quota/durable-object.ts'
import { isRecord } from '../http/json.ts'
import { ConfigError } from './resolve.ts'
import { strictByDefault } from '../quota/service.ts'
import { gatewayOptionsSchema } from './schema.ts'

/** The endpoint id in the shipped `wrangler.toml`: a config that still holds it was never edited. */
export const PLACEHOLDER_ENDPOINT_ID = 'your0endpoint0id'

/** A secret's name as `apiKeyEnv` gives it (`WORKER_KEY`): upper-case words joined by `_`, none key-long. */
const SECRET_NAME = /^[A-Z][A-Z0-9]{0,15}(_[A-Z0-9]{1,16})+$/

/**
 * @example
 * import { env } from 'cloudflare:workers'
 * import { createGateway } from 'podgate'
 * import { optionsFromEnv, type PodgateWorkerEnv } from 'podgate/worker'
 *
 * const gateway = createGateway(optionsFromEnv(env as unknown as PodgateWorkerEnv))
 */
export function optionsFromEnv(env: PodgateWorkerEnv): GatewayOptions {
  if (!env.RUNPOD_API_KEY) {
    throw new ConfigError('podgate: RUNPOD_API_KEY is not set. Run `npx wrangler secret put RUNPOD_API_KEY` (or use `npm run dev`, which uses the emulator).')
  }
  const base = parseJsonObject('PODGATE_CONFIG', env.PODGATE_CONFIG) ?? {}
  for (const [field, variable] of SECRET_FIELDS) {
    const [head, tail] = field.split('.') as [string, string | undefined]
    const value = tail ? (base[head] as Record<string, unknown> | undefined)?.[tail] : base[head]
    if (value !== undefined) {
      throw new ConfigError(`podgate: PODGATE_CONFIG.${field} holds a secret in a plain-text variable. Remove it and run \`npx wrangler secret put ${variable}\`.`)
    }
  }
  // createGateway takes the options that hold code (kv, breaker, fetch...) out before its schema sees them,
  // so from JSON they would fail every request ("kv is not a function"): refused here, by name.
  for (const key in base) {
    if (!(key in gatewayOptionsSchema.shape)) refuseCodeOption(key)
  }
  const runpod = over(base.runpod, { apiKey: env.RUNPOD_API_KEY, ...(env.RUNPOD_BASE_URL ? { baseUrl: env.RUNPOD_BASE_URL } : {}) })
  const models = parseJsonObject('PODGATE_MODELS', env.PODGATE_MODELS) ?? base.models
  if (models === undefined) throw new ConfigError('podgate: no models. Set PODGATE_MODELS (or "models" in PODGATE_CONFIG) under [vars] in wrangler.toml.')
  refusePlaceholder(models)
  const withKeys = endpointKeysFromEnv(models, env)
  // Field by field over PODGATE_CONFIG's quota, as RUNPOD_BASE_URL and PODGATE_TOKEN_MAX_TTL are.
  const quotaVar = parseJsonObject('PODGATE_QUOTA_CONFIG', env.PODGATE_QUOTA_CONFIG)
  const quota = quotaVar ? over(base.quota, quotaVar) : base.quota
  // As kv and breaker above: createGateway takes these out before its schema.
  for (const [name, value] of Object.entries({ quota, cache: base.cache })) {
    for (const key of ['objects', 'now', 'edgeCache']) if (isRecord(value) && key in value) refuseCodeOption(`${name}.${key}`)
  }
  // Its strict store is this binding (createGateway's default `quota.objects`): without it every call a strict
  // quota counts (control calls too) would be a 500, so refused here, as the shipped Worker starts.
  // A model's quota names no store (quota/service.ts): only the gateway's store and defaults are read.
  if (strictByDefault(quota as Parameters<typeof strictByDefault>[0]) && !env.PODGATE_QUOTA) {
    throw new ConfigError("podgate: a strict quota (quota.store 'strict', or a policy's strict: true) needs a Durable Object: bind QuotaObject as PODGATE_QUOTA in wrangler.toml (docs/quotas.md), or make it kv.")
  }
  const ttl = env.PODGATE_TOKEN_MAX_TTL
  // `1h` or `3600s` are NaN, which the schema would report as "expected a number, got NaN": name the variable and its unit.
  if (ttl && Number.isNaN(+ttl)) throw new ConfigError(`podgate: PODGATE_TOKEN_MAX_TTL must be seconds, e.g. "3600", got "${ttl}".`)
  const tokens = ttl ? over(base.tokens, { maxTtlSeconds: +ttl }) : base.tokens
  // Validated by createGateway's schema: JSON gives `unknown`, the schema gives the field-named errors.
  return {
    ...base,
    models: withKeys,
    runpod,
    // The binding checked above serves the strict store, also when the app's env names it otherwise.
    ...(quota !== undefined || env.PODGATE_QUOTA ? { quota: over(quota, env.PODGATE_QUOTA ? { objects: () => env.PODGATE_QUOTA } : {}) } : {}),
    tokens,
    // An empty secret is no secret: left unset, as an unset one is.
    adminToken: env.PODGATE_ADMIN_TOKEN || undefined,
    signingSecret: env.PODGATE_SIGNING_SECRET || undefined,
  } as GatewayOptions
}

/**
 * The bindings and variables the podgate Worker reads. Extend it with your own app's bindings.
 *
 * | variable | kind | meaning |
 * |---|---|---|
 * | `PODGATE_KV` | KV binding | keys, quota counters, cache entries |
 * | `PODGATE_QUOTA` | Durable Object binding, optional | `QuotaObject`: the strict quota store (needed by a strict quota: refused without it) |
 * | `RUNPOD_API_KEY` | secret | the Runpod API key (`runpod.apiKey`) |
 * | `PODGATE_ADMIN_TOKEN` | secret, optional | enables `/admin/*` (`adminToken`) |
 * | `PODGATE_SIGNING_SECRET` | secret, optional | signs browser tokens and job ids (`signingSecret`) |
 * | `PODGATE_CONFIG` | JSON var, optional | any gateway option JSON can express (not secrets) |
 * | `PODGATE_MODELS` | JSON var | `models` (required here or in `PODGATE_CONFIG`) |
 * | `RUNPOD_BASE_URL` | var, optional | `runpod.baseUrl` |
 * | `PODGATE_TOKEN_MAX_TTL` | var, optional | `tokens.maxTtlSeconds` |
 * | `PODGATE_QUOTA_CONFIG` | JSON var, optional | `quota` |
 * | `PODGATE_PLAYGROUND` | var, optional | `"true"`: the dev Worker serves `/playground` (read by `createPodgateWorker`, not here: an app that mounts podgate decides itself) |
 */
export interface PodgateWorkerEnv {
  PODGATE_KV: KVNamespace
  PODGATE_QUOTA?: DurableObjectNamespace<QuotaObject>
  RUNPOD_API_KEY?: string
  PODGATE_ADMIN_TOKEN?: string
  PODGATE_SIGNING_SECRET?: string
  PODGATE_CONFIG?: string | Record<string, unknown>
  PODGATE_MODELS?: string | Record<string, unknown>
  RUNPOD_BASE_URL?: string
  PODGATE_TOKEN_MAX_TTL?: string
  PODGATE_QUOTA_CONFIG?: string | Record<string, unknown>
  PODGATE_PLAYGROUND?: string | boolean
}

/** Fields that hold secrets: they come from `wrangler secret put`, never from a plain-text var. */
export const SECRET_FIELDS = [
  ['runpod.apiKey', 'RUNPOD_API_KEY'],
  ['adminToken', 'PODGATE_ADMIN_TOKEN'],
  ['signingSecret', 'PODGATE_SIGNING_SECRET'],
] as const

/**
 * `fields` over `value`'s own; a `value` that is no object is left as it is, for the schema to refuse by
 * name (spread, `"ab"` became the options `0` and `1`, and `45` vanished).
 */
function over(value: unknown, fields: object): unknown {
  return value === undefined || isRecord(value) ? { ...value, ...fields } : value
}

/**
 * Replaces each endpoint's `apiKeyEnv: "NAME"` with `apiKey` read from the secret NAME, so no key sits
 * in wrangler.toml (a `url:` endpoint's own bearer; ported here from workers/env.ts, issue 15).
 */
function endpointKeysFromEnv(models: unknown, env: PodgateWorkerEnv): unknown {
  // An array is left for the schema to refuse by name: entries, it would be the models "0", "1", ...
  if (!isRecord(models)) return models
  const secrets = env as unknown as Record<string, unknown>
  return Object.fromEntries(Object.entries(models).map(([alias, model]) => {
    if (typeof model !== 'object' || model === null || !Array.isArray((model as { endpoints?: unknown }).endpoints)) return [alias, model]
    const endpoints = ((model as { endpoints: unknown[] }).endpoints).map((endpoint) => {
      if (typeof endpoint !== 'object' || endpoint === null) return endpoint
      if ('apiKey' in endpoint) throw new ConfigError(`podgate: models.${alias}: an endpoint's apiKey is a secret in a plain-text variable. Name a secret instead: "apiKeyEnv": "NAME", and \`npx wrangler secret put NAME\`.`)
      // Only a url: endpoint's: on an endpoint id the schema names apiKeyEnv as no option of it.
      if (!('apiKeyEnv' in endpoint && 'url' in endpoint)) return endpoint
      const { apiKeyEnv, ...rest } = endpoint as { apiKeyEnv: unknown }
      const value = typeof apiKeyEnv === 'string' ? secrets[apiKeyEnv] : undefined
      if (typeof value !== 'string' || value === '') {
        // Quoted only when it reads as a variable's name: a key pasted here instead would land in the logs.
        const name = typeof apiKeyEnv === 'string' && SECRET_NAME.test(apiKeyEnv) && apiKeyEnv
        throw new ConfigError(`podgate: models.${alias}: an endpoint's apiKeyEnv ${name ? `"${name}" ` : ''}names no secret that is set. Run \`npx wrangler secret put ${name || 'NAME'}\``)
      }
      return { ...rest, apiKey: value }
    })
    return [alias, { ...model, endpoints }]
  }))
}

function refuseCodeOption(key: string): never {
  throw new ConfigError(`podgate: PODGATE_CONFIG cannot set ${key}: no such option, or one only code sets (docs/configuration.md).`)
}

function parseJsonObject(name: string, value: string | Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  if (value === undefined || value === '') return undefined
  let parsed: unknown = value
  if (typeof value === 'string') {
    try {
      parsed = JSON.parse(value)
    } catch {
      throw new ConfigError(`podgate: ${name} is not valid JSON. Check the [vars] block in wrangler.toml.`)
    }
    // JSON.parse keeps the last of a key named twice in one object (a model block copied and not renamed
    // replaced the first): the valid text's strings and braces, each object's keys.
    const open: Set<string>[] = []
    for (const [token, key, colon] of value.matchAll(/("(?:[^"\\]|\\.)*")(\s*:)?|[{}]/g)) {
      if (token === '{') open.push(new Set())
      else if (token === '}') open.pop()
      else if (colon) {
        // As JSON.parse reads it: "\u0061" and "a" are one key.
        const keys = open.at(-1)!, read = JSON.stringify(JSON.parse(key!))
        if (keys.has(read)) throw new ConfigError(`podgate: ${name} names ${read} twice in one object.`)
        keys.add(read)
      }
    }
  }
  if (!isRecord(parsed)) {
    throw new ConfigError(`podgate: ${name} must be a JSON object.`)
  }
  return parsed
}

function refusePlaceholder(models: unknown): void {
  if (!JSON.stringify(models).includes(`"${PLACEHOLDER_ENDPOINT_ID}"`)) return
  throw new ConfigError(`podgate: PODGATE_MODELS still holds the placeholder endpoint id "${PLACEHOLDER_ENDPOINT_ID}". Put your Runpod endpoint id in wrangler.toml [vars] (runpod.io console -> Serverless -> your endpoint).`)
}
