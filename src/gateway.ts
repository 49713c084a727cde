/**
 * `createGateway(options)`: podgate as a Hono app, mountable in any Hono app.
 *
 * Options are validated once, here; the returned app holds no per-request state of its own beyond
 * bounded in-isolate caches.
 */
import { Hono } from 'hono/tiny'
import type { Context, MiddlewareHandler } from 'hono'
// Keys and tokens (the logger and body helpers among them), then what every route shares, then the
// completion path, then quota and CORS. Not alphabetical on purpose: the bundler lays modules out in import
// order, and in this one alike code sits closer, so the shipped Worker gzips ~680 B smaller
// (test/e2e/bundle-size.test.ts measures it; a search over orders found this one).
import { setAnswerHeader } from './http/headers.ts'
import { isRecord } from './http/json.ts'
import type { LogSink } from './http/log.ts'
import { TokenSigner } from './auth/tokens.ts'
import { keysRoutes } from './admin/keys-routes.ts'
import { notJson } from './http/body.ts'
import { callLog, createLogger, lateFailureLog, secretScrubber } from './http/log.ts'
import { tokenQuotaStage } from './auth/token-quota.ts'
import type { CredentialResolver } from './auth/api-key-auth.ts'
import { tokenRoutes } from './auth/token-routes.ts'
import { apiKeyAuth } from './auth/api-key-auth.ts'
import type { GatewayOptionsInput } from './config/schema.ts'
import { ConfigError, resolveConfig } from './config/resolve.ts'
import { GatewayError, toGatewayError } from './errors/index.ts'
import { createErrorHandler, errorResponse, formatForPath } from './http/respond.ts'
import { adminAuth } from './admin/admin-auth.ts'
import { openaiRoutes, runpodOpenAIRoutes } from './openai/routes.ts'
import { createCache } from './cache/index.ts'
import type { GatewayCacheOptions } from './cache/index.ts'
import { resolveModels } from './routing/models.ts'
import { RunpodClient } from './upstream/runpod/client.ts'
import { createDispatcher } from './upstream/dispatch.ts'
import { EndpointBreaker } from './upstream/breaker.ts'
import type { Breaker } from './upstream/breaker.ts'
import type { CompletionStage } from './pipeline/index.ts'
import { isEventStream, lastEventId, nativeSurface, waitParam } from './native-surface/routes.ts'
import { assertEnforceable, createQuotaService, strictByDefault } from './quota/service.ts'
import { quotaRoutes } from './quota/routes.ts'
import { podgateCors } from './cors/index.ts'
import type { QuotaServiceOptions } from './quota/service.ts'
import { quotaStage } from './quota/stage.ts'
import { controlQuota, countControl } from './quota/control.ts'
import { KeyStore } from './auth/keys.ts'
import type { openApiHandler } from './openapi/document.ts'
import type { playgroundHandler } from './playground/page.ts'
import type { GatewayEnv, HookContext } from './types.ts'

export interface GatewayOptions extends GatewayOptionsInput {
  /**
   * The KV namespace holding keys, quota counters and cache entries. Default: the `PODGATE_KV` binding.
   * `c` is the request's context in your app, with your app's bindings (`(c) => c.env.APP_KV`).
   */
  kv?: (c: HookContext) => KVNamespace
  /** Supplies the caller's podgate key. Default: `Authorization: Bearer <key>`, else `x-api-key` (`bearerCredential`). */
  credential?: CredentialResolver
  /**
   * Origins, besides the request's own, whose pages may make state-changing calls with a credential the
   * `credential` hook supplies (a cookie session). Default: none: such calls must be same-origin (CSRF).
   */
  credentialOrigins?: readonly string[]
  /** fetch used for upstream calls. Default: the global `fetch`. */
  fetch?: typeof fetch
  /** Where log lines go (already scrubbed of secrets); never awaited (an async one's lines are held by the request's `waitUntil`; the quota store's by its flush), and one that throws or rejects loses that line only. Default: `console.log`. */
  logSink?: LogSink
  /** Quota defaults and store (see `quotaConfigSchema`), plus the Durable Object namespace and a clock. */
  quota?: GatewayQuotaOptions
  /** Answer caching (see `cacheConfigSchema`), plus the Cache API instance and the cache's clock. */
  cache?: GatewayCacheOptions
  /** Endpoint health for failover. Default: a breaker of this gateway's own, per isolate (see `EndpointBreaker`). */
  breaker?: Breaker
  /**
   * Dev tools, passed in so a Worker that does not use them does not ship them: `openapi` serves
   * `GET /openapi.json`, `playground` serves `GET /playground` when the `playground` option is on.
   * Default: neither.
   *
   * @example
   * import { createGateway, openApiHandler, playgroundHandler } from 'podgate'
   * createGateway({ ...options, extras: { openapi: openApiHandler, playground: playgroundHandler } })
   */
  extras?: GatewayExtras
}

export interface GatewayExtras {
  /** `openApiHandler` from `podgate`: mounts `GET /openapi.json`. */
  openapi?: typeof openApiHandler
  /** `playgroundHandler` from `podgate`: mounts `GET /playground` when `playground: true`. */
  playground?: typeof playgroundHandler
}

export type GatewayQuotaOptions = NonNullable<GatewayOptionsInput['quota']> & Pick<QuotaServiceOptions, 'objects' | 'now'>

/**
 * @example
 * const app = new Hono()
 * app.route('/ai', createGateway({
 *   models: { 'llama-3.1-8b': { endpoints: [{ endpointId: 'abc123' }] } },
 *   runpod: { apiKey: env.RUNPOD_API_KEY },
 * }))
 */
export function createGateway(options: GatewayOptions): Hono<GatewayEnv> {
  const { kv: kvOption, credential, credentialOrigins, fetch: fetchOption, logSink, quota: quotaOption, cache: cacheOption, extras = {}, breaker = new EndpointBreaker(), ...input } = options
  const { objects: quotaObjects, now: quotaNow, ...quotaConfig } = quotaOption ?? {}
  const { edgeCache, now: cacheNow, ...cacheConfig } = cacheOption ?? {}
  // A section that is no object goes to the schema as it is, to be refused by name: destructured, `cache: false`
  // read as `{}` (caching on) and `"kv"` as the options `0` and `1`.
  const section = <T>(value: unknown, fields: T) => (value === undefined || isRecord(value) ? fields : value as T)
  const config = resolveConfig({ ...(quotaOption !== undefined ? { ...input, quota: section(quotaOption, quotaConfig) } : input), cache: section(cacheOption, cacheConfig) })
  const endpointKeys = Object.values(config.models).flatMap((m) => m.endpoints.flatMap((e) => ('apiKey' in e && e.apiKey ? [e.apiKey] : [])))
  const secrets = [config.runpod.apiKey, config.adminToken ?? '', config.signingSecret ?? '', ...endpointKeys]
  const log = createLogger({ secrets, sink: logSink })
  const client = new RunpodClient({ apiKey: config.runpod.apiKey, timeoutMs: config.runpod.timeoutMs, fetch: fetchOption })
  const models = resolveModels(config)
  const kv = kvOption ?? defaultKv
  const store = (c: Context<GatewayEnv>) => new KeyStore(kv(c), { cacheTtlMs: config.keyCacheTtlMs })
  const tokens = new TokenSigner({ secret: config.signingSecret ?? config.runpod.apiKey })
  // Open streams re-check their key every second: a key-cache hit between the cache's KV reads, so a
  // revocation in this isolate reaches its open streams within a second whatever `keyCacheTtlMs` is.
  const streamCheckMs = 1_000
  const strict = strictByDefault(config.quota)

  const app = new Hono<GatewayEnv>()
  app.onError(createErrorHandler(log, secretScrubber(secrets)))
  const notFound = (c: Context<GatewayEnv>) => errorResponse(new GatewayError('not_found', `No route for ${c.req.method} ${c.req.path}.`), formatForPath(c.req.path), c.get('requestId'))
  app.notFound(notFound)

  // Off, neither the start time nor the call line costs a request anything.
  if (config.logCalls)
    app.use(async function start(c, next) {
      c.set('start', Date.now())
      await next()
    })
  app.use(async function requestId(c, next) {
    // A host app's middleware that read the body through Hono (`c.req.json()`, cached for later readers)
    // used up the raw body podgate reads: it gets Hono's copy back. Hono before 4.8.4 caches only the parse,
    // which fails again here for a body that is not JSON: refused as podgate refuses it, not as a 500. A
    // middleware that read `c.req.raw` itself left no copy: the host's bug, a 500 (not the caller's 400).
    if (c.req.raw.bodyUsed) c.req.raw = new Request(c.req.raw, { body: await c.req.arrayBuffer().catch((e) => (e instanceof SyntaxError ? notJson() : Promise.reject(e))) })
    // A host app's own (hono/request-id's): its log lines and podgate's find each other.
    const id = c.get('requestId') ?? crypto.randomUUID()
    c.set('requestId', id)
    // Bindings show only now: with no Durable Object every call is refused (a ConfigError, logged), as
    // optionsFromEnv refuses the Worker at startup, not only the calls the strict store counts (a 500 each).
    if (strict) quota.storeFor(c, { strict })
    // Hono's onError sees only an Error: a host hook's `throw 'boom'` would reach the runtime's bare 500.
    await next().catch((error) => {
      throw toGatewayError(error)
    })
    // OpenAI's SDKs read it as `x-request-id`, Anthropic's as `request-id`.
    setAnswerHeader(c, 'x-request-id', id)
    setAnswerHeader(c, 'request-id', id)
  })
  // hono/tiny's router also matches a route followed by `/`: podgate's routes have none, as on Hono's
  // default router, so such a path under podgate's own prefixes is no route. Only there: a host app's
  // routes beside a mounted gateway are its own.
  const noTrailingSlash: MiddlewareHandler<GatewayEnv> = async (c, next) => {
    if (c.req.path.endsWith('/')) throw new GatewayError('not_found', `No route for ${c.req.method} ${c.req.path}.`)
    await next()
  }
  for (const path of ['/healthz', '/openapi.json', '/playground', '/admin/*']) app.use(path, noTrailingSlash)

  app.get('/healthz', (c) => c.json({ ok: true }))
  if (extras.openapi) app.get('/openapi.json', extras.openapi({ routes: () => app.routes }))
  if (config.playground) {
    if (!extras.playground) throw new ConfigError("podgate: `playground: true` needs `extras: { playground: playgroundHandler }` (from 'podgate'), or the dev entry workers/dev.ts.")
    app.get('/playground', extras.playground())
  }

  // CORS runs before auth: preflights carry no credential, and refusals must stay readable by the page.
  const cors = podgateCors({ maxAgeSeconds: config.cors.maxAgeSeconds })
  app.use('/v1/*', cors, noTrailingSlash)
  app.use('/v2/*', cors, noTrailingSlash)
  const quota = createQuotaService({
    defaults: config.quota?.defaults,
    models: new Map(Object.entries(config.models).flatMap(([alias, m]) => (m.quota ? [[alias, m.quota] as const] : []))),
    store: config.quota?.store,
    flushIntervalMs: config.quota?.flushIntervalMs,
    kv,
    objects: quotaObjects,
    now: quotaNow,
    onWriteError: (error) => log({ level: 'error', message: 'quota: KV write failed', cause: String(error) }),
  })
  // Control calls (job status and polls, cancel, health, token minting) count against controlPerMinute,
  // once the call is known to be good: a malformed mint or an unknown model counts nothing.
  const control = controlQuota(quota, (alias) => models.has(alias))
  const auth = { store, credential, credentialOrigins, tokens, streamCheckMs }
  // One middleware authenticates /v1 and the native surface but its event streams (below).
  const keyAuth = apiKeyAuth(auth)
  app.use('/v1/*', keyAuth)
  app.route('/v1/tokens', tokenRoutes({ signer: tokens, models: new Set(models.keys()), maxBodyBytes: config.maxBodyBytes, countControl: (c) => countControl(quota, c), checkQuota: (c, policy) => assertEnforceable(quota, c, policy, 'quota'), ...config.tokens }))
  const dispatch = createDispatcher({ client, runpod: config.runpod, streaming: config.streaming, breaker })
  // First: a stream that fails past its 200 is logged as onError logs a failure before it.
  const stages: CompletionStage[] = [lateFailureLog(log)]
  // `always` reads as the caller's own `include_usage`, so every stream ends with the usage chunk: a relayed
  // or native one, a cached or coalesced one, not only a piped one (vLLM's other routes have none).
  if (config.streaming.usage === 'always') stages.push((ctx, next) => ((ctx.request.includeUsage ||= ctx.request.stream && !ctx.request.route), next(ctx)))
  // Outermost: its line counts every call the stages see, a quota's refusal included.
  if (config.logCalls) stages.unshift(callLog(log))
  // A token minted with a quota of its own is held to it (counted under its token id) before the key's.
  const quotas = [tokenQuotaStage(quotaStage(quota)), quotaStage(quota)]
  stages.push(...quotas)
  // After quota: a cached answer still counts as a request (not as tokens).
  const cache = createCache({ config: config.cache, models: config.models, kv, maxBodyBytes: config.maxBodyBytes, runtime: { edgeCache, now: cacheNow }, log, keyExists: async (c, id) => (await store(c).get(id)) !== null })
  if (config.cache.enabled) stages.push(cache.stage)
  // vLLM's other routes are not cached: their answers are not chat answers the cache can replay.
  const uncached = stages.filter((stage) => stage !== cache.stage)
  const openai = { models, maxBodyBytes: config.maxBodyBytes, stages, routeStages: uncached, dispatch }
  app.route('/v1', openaiRoutes(openai))

  // The Runpod-native surface: the same stages but the cache (a job id is no answer to reuse). `?access_token=`
  // (a minted token: EventSource sends no headers) only on its event streams.
  const nativeStreamAuth = apiKeyAuth({ ...auth, queryToken: true })
  app.use('/v2/*', function nativeSurfaceAuth(c, next) {
    return /\/v2\/[^/]+\/stream\/[^/]+$/.test(c.req.path) ? nativeStreamAuth(c, next) : keyAuth(c, next)
  })
  // purge-queue is refused to every key (native-surface/routes.ts): nothing to count. A malformed
  // `?wait=` (or an event stream's `Last-Event-ID`) is refused before the count, as a call refused for
  // its input counts nothing.
  app.use('/v2/:model/status-sync/:id', async function waitChecked(c, next) {
    waitParam(c, 0)
    await next()
  })
  app.use('/v2/:model/stream/:id', async function resumeChecked(c, next) {
    if (isEventStream(c)) lastEventId(c)
    await next()
  })
  // A JSON stream page is a poll. So is opening an event stream (which the completion stages also admit,
  // for its stream slot): without a count, a key over its control limit could reopen one, each time
  // making an upstream call, as often as it liked.
  // Each with the methods its route takes: a call with another is no route (404) and counts nothing.
  for (const op of ['status/:id', 'status-sync/:id', 'stream/:id']) app.on(['GET', 'POST'], `/v2/:model/${op}`, control)
  app.post('/v2/:model/cancel/:id', control)
  app.get('/v2/:model/health', control)
  // Runpod's URL shape for the OpenAI surface (`/v2/<model>/openai/v1/*`): the same stages, cache included.
  app.route('/v2', runpodOpenAIRoutes(openai))
  app.route('/v2', nativeSurface({ models, client, runpod: config.runpod, secret: config.signingSecret ?? config.runpod.apiKey, maxBodyBytes: config.maxBodyBytes, stages: uncached, breaker, quotas }))

  app.use('/admin/*', adminAuth({ token: config.adminToken }))
  app.route('/admin/keys', keysRoutes({ store, models: new Set(models.keys()), maxBodyBytes: config.maxBodyBytes, checkQuota: (c, policy) => assertEnforceable(quota, c, policy, 'quota') }))
  app.route('/admin/cache', cache.routes)
  app.route('/', quotaRoutes({ service: quota, keys: store }))
  // Hono answers a mounted app's unknown paths with the host's notFound (text): under its own prefixes
  // podgate keeps its error format. Registered last, after every route.
  for (const path of ['/v1/*', '/v2/*', '/admin/*']) app.all(path, notFound)

  return app
}

function defaultKv(c: Context<GatewayEnv>): KVNamespace {
  const kv = c.env?.PODGATE_KV
  if (!kv) throw new ConfigError('podgate: no KV namespace. Bind one as PODGATE_KV in wrangler.toml, or pass `kv: (c) => ...` to createGateway.')
  return kv
}
