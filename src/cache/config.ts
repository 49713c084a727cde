/**
 * The zod schemas of podgate's cache settings: gateway-wide (`cache`) and per model (`models.*.cache`).
 * Included in the gateway's config schema (`src/config/schema.ts`).
 */
import * as z from 'zod/mini'
import { intIn } from '../zod/numbers.ts'
import { oneOf } from '../zod/one-of.ts'
import { withDefault } from '../zod/with-default.ts'
import { optional } from '../zod/optional.ts'
import { strictObject } from '../zod/object.ts'
import { boolean } from '../zod/scalars.ts'

export const cacheConfigSchema = strictObject({
  /** Cache answers at all. Default true (deterministic requests only, unless a model or caller opts in). */
  enabled: withDefault(boolean(), true),
  /** `key`: entries are per credential and never cross keys; `gateway`: shared by every caller. Default `key`. */
  scope: withDefault(oneOf(['key', 'gateway']), 'key'),
  /** How long an answer stays cached, in seconds, for models that set no `cache.ttlSeconds`. Default 300. */
  ttlSeconds: withDefault(intIn(1, 365 * 24 * 3600), 300),
  /** Largest entry stored, in bytes of JSON; larger answers are served but not stored. Default 1 MiB. */
  maxEntryBytes: withDefault(intIn(1024, 25 * 1024 * 1024), 1024 * 1024),
  /** Use the Cache API (`caches.default`, per Cloudflare location) where the runtime has one. Default true. */
  cacheApi: withDefault(boolean(), true),
  /** Use KV (global; entries live at least 60 s there). Default true. */
  kv: withDefault(boolean(), true),
  /** Identical cacheable requests in flight in one isolate share one upstream call. Default true. */
  coalesce: withDefault(boolean(), true),
  /** How long an isolate trusts the purge generations it read, in ms (then uses them as long again while it re-reads them): a purge's delay on top of KV's is at most twice this. Default 5000. */
  generationCacheMs: withDefault(intIn(0, 60_000), 5_000),
})
export type CacheConfig = z.output<typeof cacheConfigSchema>

export const modelCacheSchema = strictObject({
  /** Cache this model's answers. Default: the gateway's `cache.enabled`. */
  enabled: optional(boolean()),
  /** How long its answers stay cached, in seconds. Default: the gateway's `cache.ttlSeconds`. */
  ttlSeconds: optional(intIn(1, 365 * 24 * 3600)),
  /** Cache requests that are not deterministic too (no `temperature: 0` and no `seed`). Default false. */
  nonDeterministic: withDefault(boolean(), false),
})
export type ModelCacheConfig = z.output<typeof modelCacheSchema>
