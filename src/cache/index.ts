/**
 * podgate's answer cache: exact-match, in two tiers (Cache API, KV), with stream replay, request
 * coalescing and purge by model or key scope. `createCache` wires the pieces from the resolved config;
 * the gateway adds its stage to the pipeline (after quota) and mounts its admin routes.
 */
import type { Context, Hono } from 'hono'
import type * as z from 'zod/mini'
import type { ModelConfig } from '../config/schema.ts'
import type { CompletionStage } from '../pipeline/index.ts'
import type { GatewayEnv } from '../types.ts'
import type { CacheConfig, cacheConfigSchema } from './config.ts'
import type { ModelCacheSettings } from './policy.ts'
export { CACHE_HEADER, decideCaching, isDeterministic, parseCacheControl } from './policy.ts'
import { cacheRoutes } from './routes.ts'

function defaultEdgeCache(): Cache | undefined {
  const storage = (globalThis as { caches?: CacheStorage & { default?: Cache } }).caches
  return storage?.default
}
import { cacheStage } from './stage.ts'

import { GenerationCache } from './store.ts'
export type { CacheConfig, ModelCacheConfig } from './config.ts'
export { cacheConfigSchema, modelCacheSchema } from './config.ts'
export type { CacheDecision, CacheStatus, ModelCacheSettings } from './policy.ts'
export { cacheKey, stableJson } from './key.ts'
export type { CacheKey } from './key.ts'
export { captureJsonAnswer, createAnswerCapture, renderJson, renderStream } from './answer.ts'
export type { CachedAnswer, CachedChoice } from './answer.ts'
export { GenerationCache, readEntry, writeEntry } from './store.ts'
export type { CacheEntry, CacheTiers } from './store.ts'
export { cacheStage } from './stage.ts'
export type { CacheStageOptions } from './stage.ts'
export { cacheRoutes, purgeSchema } from './routes.ts'

/** What only code can give the cache: its storage and its clock. */
export interface CacheRuntimeOptions {
  /** The Cache API cache to use. Default: `caches.default` where the runtime has one (Workers), else none. */
  edgeCache?: () => Cache | undefined
  /** The cache's clock in ms: entry ages, TTLs, generation cache. Default `Date.now`. */
  now?: () => number
}

/** `GatewayOptions.cache`: the settings of `cacheConfigSchema` plus the runtime hooks. */
export type GatewayCacheOptions = z.input<typeof cacheConfigSchema> & CacheRuntimeOptions

export interface CreateCacheOptions {
  config: CacheConfig
  models: Readonly<Record<string, ModelConfig>>
  /** The gateway's KV namespace: entries (when `config.kv`) and purge generations. */
  kv: (c: Context<GatewayEnv>) => KVNamespace
  maxBodyBytes: number
  runtime?: CacheRuntimeOptions
  log?: (line: Record<string, unknown>) => void
  /** Whether a key with this id exists (a purge by `keyId` of no key is a 404, not a KV write). Default: any id does. */
  keyExists?: (c: Context<GatewayEnv>, keyId: string) => Promise<boolean>
}

export interface PodgateCache {
  stage: CompletionStage
  /** Mount at `/admin/cache` behind admin auth. */
  routes: Hono<GatewayEnv>
}

/**
 * @example
 * const cache = createCache({ config: config.cache, models: config.models, kv, maxBodyBytes })
 * stages.push(cache.stage)
 * app.route('/admin/cache', cache.routes)
 */
export function createCache(options: CreateCacheOptions): PodgateCache {
  const { config, kv } = options
  const now = options.runtime?.now ?? Date.now
  const edgeCache = options.runtime?.edgeCache ?? defaultEdgeCache
  const generations = new GenerationCache({ ttlMs: config.generationCacheMs, now })
  const settings = new Map<string, ModelCacheSettings>(
    Object.entries(options.models).map(([alias, model]) => [
      alias,
      {
        enabled: config.enabled && (model.cache?.enabled ?? true),
        nonDeterministic: model.cache?.nonDeterministic ?? false,
        ttlSeconds: model.cache?.ttlSeconds ?? config.ttlSeconds,
      },
    ]),
  )
  const disabled: ModelCacheSettings = { enabled: false, nonDeterministic: false, ttlSeconds: config.ttlSeconds }
  const stage = cacheStage({
    settings: (model) => settings.get(model.alias) ?? disabled,
    scope: config.scope,
    tiers: (c) => ({ cache: config.cacheApi ? edgeCache() : undefined, kv: config.kv ? kv(c) : undefined }),
    kv,
    generations,
    maxEntryBytes: config.maxEntryBytes,
    coalesce: config.coalesce,
    now,
    log: options.log,
  })
  const routes = cacheRoutes({ kv, generations, models: new Set(Object.keys(options.models)), scope: config.scope, generationCacheMs: config.generationCacheMs, maxBodyBytes: options.maxBodyBytes, keyExists: options.keyExists })
  return { stage, routes }
}
