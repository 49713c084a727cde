/**
 * `createGateway(options)`: podgate as a Hono app, mountable in any Hono app.
 *
 * Options are validated once, here; the returned app holds no per-request state of its own beyond
 * bounded in-isolate caches.
 */
import { Hono } from 'hono'
import type { Context } from 'hono'
import { adminAuth } from './admin/admin-auth.ts'
import { keysRoutes } from './admin/keys-routes.ts'
import { apiKeyAuth } from './auth/api-key-auth.ts'
import type { CredentialResolver } from './auth/api-key-auth.ts'
import { KeyStore } from './auth/keys.ts'
import { ConfigError, resolveConfig } from './config/resolve.ts'
import type { GatewayOptionsInput } from './config/schema.ts'
import { GatewayError } from './errors/index.ts'
import { createLogger } from './http/log.ts'
import type { LogSink } from './http/log.ts'
import { createErrorHandler, errorResponse, formatForPath } from './http/respond.ts'
import { openaiRoutes } from './openai/routes.ts'
import { resolveModels } from './routing/models.ts'
import { RunpodClient } from './upstream/runpod/client.ts'
import { createDispatcher } from './upstream/dispatch.ts'
import type { CompletionStage } from './pipeline/index.ts'
import type { GatewayEnv } from './types.ts'

export interface GatewayOptions extends GatewayOptionsInput {
  /**
   * The KV namespace holding keys (and later quotas and cache entries).
   * Default: the `PODGATE_KV` binding.
   */
  kv?: (c: Context<GatewayEnv>) => KVNamespace
  /** Supplies the caller's podgate key. Default: `Authorization: Bearer <key>`. */
  credential?: CredentialResolver
  /** fetch used for upstream calls. Default: the global `fetch`. */
  fetch?: typeof fetch
  /** Where log lines go (already scrubbed of secrets). Default: `console.log`. */
  logSink?: LogSink
}

/**
 * @example
 * const app = new Hono()
 * app.route('/ai', createGateway({
 *   models: { 'llama-3.1-8b': { endpoints: [{ endpointId: 'abc123' }] } },
 *   runpod: { apiKey: env.RUNPOD_API_KEY },
 * }))
 */
export function createGateway(options: GatewayOptions): Hono<GatewayEnv> {
  const { kv: kvOption, credential, fetch: fetchOption, logSink, ...input } = options
  const config = resolveConfig(input)
  const log = createLogger({ secrets: [config.runpod.apiKey, config.adminToken ?? ''], sink: logSink })
  const client = new RunpodClient({ apiKey: config.runpod.apiKey, timeoutMs: config.runpod.timeoutMs, fetch: fetchOption })
  const models = resolveModels(config)
  const kv = kvOption ?? defaultKv
  const store = (c: Context<GatewayEnv>) => new KeyStore(kv(c), { cacheTtlMs: config.keyCacheTtlMs })

  const app = new Hono<GatewayEnv>()
  app.onError(createErrorHandler(log))
  app.notFound((c) => errorResponse(new GatewayError('not_found', `No route for ${c.req.method} ${c.req.path}.`), formatForPath(c.req.path), c.get('requestId')))

  app.use(async function requestId(c, next) {
    const id = crypto.randomUUID()
    c.set('requestId', id)
    await next()
    c.header('x-request-id', id)
  })

  app.get('/healthz', (c) => c.json({ ok: true }))

  app.use('/v1/*', apiKeyAuth({ store, credential }))
  const dispatch = createDispatcher({ client, runpod: config.runpod })
  const stages: CompletionStage[] = []
  app.route('/v1', openaiRoutes({ models, maxBodyBytes: config.maxBodyBytes, stages, dispatch }))

  app.use('/admin/*', adminAuth({ token: config.adminToken }))
  app.route('/admin/keys', keysRoutes({ store, models: new Set(models.keys()), maxBodyBytes: config.maxBodyBytes }))

  return app
}

function defaultKv(c: Context<GatewayEnv>): KVNamespace {
  const kv = c.env?.PODGATE_KV
  if (!kv) throw new ConfigError('podgate: no KV namespace. Bind one as PODGATE_KV in wrangler.toml, or pass `kv: (c) => ...` to createGateway.')
  return kv
}
