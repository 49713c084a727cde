/**
 * Builds gateway options from a Worker's environment: `wrangler.toml` vars and secrets.
 *
 *   PODGATE_MODELS       JSON: model alias -> model config (see README "Configuration")
 *   RUNPOD_API_KEY       secret: the Runpod API key
 *   RUNPOD_BASE_URL      optional: overrides https://api.runpod.ai/v2 (the dev emulator, a proxy)
 *   PODGATE_ADMIN_TOKEN  secret, optional: enables /admin/*
 *   PODGATE_SIGNING_SECRET secret, optional: signs browser tokens and job ids (default: derived from RUNPOD_API_KEY)
 *   PODGATE_TOKEN_MAX_TTL optional: longest lifetime of a minted browser token, in seconds (default 3600)
 *   PODGATE_QUOTA        Durable Object binding (QuotaObject): the strict quota store
 *   PODGATE_QUOTA_CONFIG optional JSON: gateway quota config, e.g. {"defaults":{"requestsPerMinute":60},"store":"kv"} (README "Quotas")
 *   PODGATE_PLAYGROUND   optional: "true" serves the browser playground at /playground (dev only)
 *
 * A `url:` endpoint in PODGATE_MODELS may name a secret with `"apiKeyEnv": "MY_WORKER_KEY"`: its value
 * (`npx wrangler secret put MY_WORKER_KEY`) becomes the endpoint's `apiKey`, so no key sits in wrangler.toml.
 */
import { ConfigError } from '../src/index.ts'
import type { GatewayOptions, QuotaObject } from '../src/index.ts'

export interface PodgateWorkerEnv {
  PODGATE_KV: KVNamespace
  PODGATE_MODELS?: string | Record<string, unknown>
  RUNPOD_API_KEY?: string
  RUNPOD_BASE_URL?: string
  PODGATE_ADMIN_TOKEN?: string
  PODGATE_SIGNING_SECRET?: string
  PODGATE_TOKEN_MAX_TTL?: string
  PODGATE_QUOTA?: DurableObjectNamespace<QuotaObject>
  PODGATE_QUOTA_CONFIG?: string | Record<string, unknown>
  PODGATE_PLAYGROUND?: string
}

export function optionsFromEnv(env: PodgateWorkerEnv): GatewayOptions {
  if (!env.RUNPOD_API_KEY) {
    throw new ConfigError('podgate: RUNPOD_API_KEY is not set. Run `npx wrangler secret put RUNPOD_API_KEY` (or use `npm run dev`, which uses the emulator).')
  }
  return {
    models: endpointKeysFromEnv(parseModels(env.PODGATE_MODELS), env) as GatewayOptions['models'],
    runpod: { apiKey: env.RUNPOD_API_KEY, ...(env.RUNPOD_BASE_URL ? { baseUrl: env.RUNPOD_BASE_URL } : {}) },
    ...(env.PODGATE_ADMIN_TOKEN ? { adminToken: env.PODGATE_ADMIN_TOKEN } : {}),
    ...(env.PODGATE_SIGNING_SECRET ? { signingSecret: env.PODGATE_SIGNING_SECRET } : {}),
    ...(env.PODGATE_TOKEN_MAX_TTL ? { tokens: { maxTtlSeconds: Number(env.PODGATE_TOKEN_MAX_TTL) } } : {}),
    ...(env.PODGATE_QUOTA_CONFIG ? { quota: parseQuotaConfig(env.PODGATE_QUOTA_CONFIG) as GatewayOptions['quota'] } : {}),
    ...(env.PODGATE_PLAYGROUND === 'true' ? { playground: true } : {}),
  }
}

function parseModels(value: PodgateWorkerEnv['PODGATE_MODELS']): unknown {
  if (value === undefined) throw new ConfigError('podgate: PODGATE_MODELS is not set. Add it under [vars] in wrangler.toml.')
  if (typeof value !== 'string') return value
  try {
    return JSON.parse(value)
  } catch {
    throw new ConfigError('podgate: PODGATE_MODELS is not valid JSON. Check the [vars] block in wrangler.toml.')
  }
}

/** Replaces each endpoint's `apiKeyEnv: "NAME"` with `apiKey` read from the secret NAME. */
function endpointKeysFromEnv(models: unknown, env: PodgateWorkerEnv): unknown {
  if (typeof models !== 'object' || models === null) return models
  const secrets = env as unknown as Record<string, unknown>
  return Object.fromEntries(Object.entries(models).map(([alias, model]) => {
    if (typeof model !== 'object' || model === null || !Array.isArray((model as { endpoints?: unknown }).endpoints)) return [alias, model]
    const endpoints = ((model as { endpoints: unknown[] }).endpoints).map((endpoint) => {
      if (typeof endpoint !== 'object' || endpoint === null || !('apiKeyEnv' in endpoint)) return endpoint
      const { apiKeyEnv, ...rest } = endpoint as { apiKeyEnv: unknown }
      const value = typeof apiKeyEnv === 'string' ? secrets[apiKeyEnv] : undefined
      if (typeof value !== 'string' || value === '') {
        throw new ConfigError(`podgate: models.${alias}: an endpoint names apiKeyEnv ${JSON.stringify(apiKeyEnv)}, but no such secret is set. Run \`npx wrangler secret put ${String(apiKeyEnv)}\`.`)
      }
      return { ...rest, apiKey: value }
    })
    return [alias, { ...model, endpoints }]
  }))
}

function parseQuotaConfig(value: string | Record<string, unknown>): unknown {
  if (typeof value !== 'string') return value
  try {
    return JSON.parse(value)
  } catch {
    throw new ConfigError('podgate: PODGATE_QUOTA_CONFIG is not valid JSON. Check the [vars] block in wrangler.toml.')
  }
}
