/**
 * `POST /admin/cache/purge`: forget cached answers of a model, of a key's scope, or of both at once.
 *
 * A purge starts a new generation (see `GenerationCache`), which every cache key folds in, so both
 * tiers miss from then on: at once in this isolate, elsewhere within the generation cache time plus
 * KV's propagation delay. Where a KV prefix names exactly the purged entries, they are also deleted
 * (bounded, off the response path); everything else expires by its TTL.
 */
import { Hono } from 'hono/tiny'
import type { Context } from 'hono'
import * as z from 'zod/mini'
import { GatewayError, invalidRequest } from '../errors/index.ts'
import { readJsonBody } from '../http/body.ts'
import { waitUntilOf } from '../http/context.ts'
import { parseRequest } from '../normalize/zod-errors.ts'
import type { GatewayEnv } from '../types.ts'
import { lazily } from '../zod/lazily.ts'
import { refine } from '../zod/refine.ts'
import { kvPrefix } from './key.ts'
import type { GenerationCache } from './store.ts'
import { optional } from '../zod/optional.ts'
import { strictObject } from '../zod/object.ts'
import { string } from '../zod/scalars.ts'
import { maxLength, minLength } from '../zod/bounds.ts'
/** KV's documented propagation delay for a changed value. */
const KV_PROPAGATION_SECONDS = 60

/** The KV prefix holding exactly the purged entries, when there is one. */
function cheapPrefix(scope: 'key' | 'gateway', model: string | undefined, keyId: string | undefined): string | undefined {
  if (scope === 'key' && keyId !== undefined) return kvPrefix(`key:${keyId}`, model)
  if (scope === 'gateway' && keyId === undefined && model !== undefined) return kvPrefix('shared', model)
  return undefined
}

export const purgeSchema = lazily(() => strictObject({
  model: optional(string().check(minLength(1), maxLength(128))),
  keyId: optional(string().check(minLength(1), maxLength(64))),
}).check(refine((body: { model?: string, keyId?: string }) => body.model !== undefined || body.keyId !== undefined, 'give `model`, `keyId` or both')))

export function cacheRoutes(options: CacheRoutesOptions): Hono<GatewayEnv> {
  const app = new Hono<GatewayEnv>()

  app.post('/purge', async (c) => {
    const { model, keyId } = parseRequest(purgeSchema(), await readJsonBody(c.req.raw, options.maxBodyBytes))
    if (keyId !== undefined && options.scope === 'gateway') {
      throw invalidRequest('Cached answers are shared by every key (cache.scope is "gateway"): purge by model.', { param: 'keyId' })
    }
    if (model !== undefined && !options.models.has(model)) throw invalidRequest(`Unknown model '${model}'.`, { param: 'model' })
    // A mistyped id must not report a purge that purged nothing (an operator may be removing a leaked answer).
    if (keyId !== undefined && options.keyExists && !(await options.keyExists(c, keyId))) {
      throw new GatewayError('not_found', `No key has the id '${keyId}': nothing was purged.`, { param: 'keyId' })
    }
    const kv = options.kv(c)
    await options.generations.bump(kv, { model, keyId })
    const prefix = cheapPrefix(options.scope, model, keyId)
    if (prefix !== undefined) waitUntilOf(c)(deletePrefix(kv, prefix, model !== undefined).catch(() => undefined))
    return c.json({
      purged: { model: model ?? null, keyId: keyId ?? null },
      // Other isolates trust a generation for generationCacheMs, then use it for as long again while they re-read it.
      maxDelaySeconds: KV_PROPAGATION_SECONDS + Math.ceil((2 * options.generationCacheMs) / 1000),
    })
  })

  return app
}

export interface CacheRoutesOptions {
  kv: (c: Context<GatewayEnv>) => KVNamespace
  generations: GenerationCache
  models: ReadonlySet<string>
  scope: 'key' | 'gateway'
  /** How long other isolates may still use an old generation, in ms. */
  generationCacheMs: number
  maxBodyBytes: number
  /** Whether a key with this id exists. Default: any id does. */
  keyExists?: (c: Context<GatewayEnv>, keyId: string) => Promise<boolean>
}

/** Most KV entries one purge deletes; the rest are unreachable already and expire by TTL. */
export const MAX_PURGE_DELETES = 500

/**
 * With `oneModel`, only the keys the prefix ends at a hash: an alias may hold `:`, so `cache:<scope>:chat:`
 * also begins the entries of `chat:v2` (and `cache:key:<id>:sub:` those of the key's end users), which stay.
 */
async function deletePrefix(kv: KVNamespace, prefix: string, oneModel: boolean): Promise<void> {
  const page = await kv.list({ prefix, limit: MAX_PURGE_DELETES })
  await Promise.all(page.keys.filter((k) => !oneModel || !k.name.includes(':', prefix.length)).map((k) => kv.delete(k.name)))
}
