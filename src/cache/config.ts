/**
 * The zod schemas of podgate's cache settings: gateway-wide (`cache`) and per model (`models.*.cache`).
 * Included in the gateway's config schema (`src/config/schema.ts`).
 */
import * as z from 'zod'

export const cacheConfigSchema = z
  .object({
    /** Cache answers at all. Default true (deterministic requests only, unless a model or caller opts in). */
    enabled: z.boolean().default(true),
    /** `key`: entries are per credential and never cross keys; `gateway`: shared by every caller. Default `key`. */
    scope: z.enum(['key', 'gateway']).default('key'),
    /** How long an answer stays cached, in seconds, for models that set no `cache.ttlSeconds`. Default 300. */
    ttlSeconds: z.number().int().min(1).max(365 * 24 * 3600).default(300),
    /** Largest entry stored, in bytes of JSON; larger answers are served but not stored. Default 1 MiB. */
    maxEntryBytes: z.number().int().min(1024).max(25 * 1024 * 1024).default(1024 * 1024),
    /** Use the Cache API (`caches.default`, per Cloudflare location) where the runtime has one. Default true. */
    cacheApi: z.boolean().default(true),
    /** Use KV (global; entries live at least 60 s there). Default true. */
    kv: z.boolean().default(true),
    /** Identical cacheable requests in flight in one isolate share one upstream call. Default true. */
    coalesce: z.boolean().default(true),
    /** How long an isolate trusts the purge generations it read, in ms: bounds a purge's delay on top of KV's. Default 5000. */
    generationCacheMs: z.number().int().min(0).max(60_000).default(5_000),
  })
  .strict()
export type CacheConfig = z.output<typeof cacheConfigSchema>

export const modelCacheSchema = z
  .object({
    /** Cache this model's answers. Default: the gateway's `cache.enabled`. */
    enabled: z.boolean().optional(),
    /** How long its answers stay cached, in seconds. Default: the gateway's `cache.ttlSeconds`. */
    ttlSeconds: z.number().int().min(1).max(365 * 24 * 3600).optional(),
    /** Cache requests that are not deterministic too (no `temperature: 0` and no `seed`). Default false. */
    nonDeterministic: z.boolean().default(false),
  })
  .strict()
export type ModelCacheConfig = z.output<typeof modelCacheSchema>
