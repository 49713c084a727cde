/**
 * Usage API: `GET /v1/usage` (the calling key, or a token with a quota of its own) and `GET /admin/keys/:id/usage` (operators).
 *
 * Mount at the gateway root, after the `/v1/*` key auth and `/admin/*` admin auth middleware. Both
 * report the key's own policy over the gateway defaults; a model's defaults apply when that model is called.
 */
import { Hono } from 'hono/tiny'
import type { Context } from 'hono'
import { routeKey } from '../auth/keys.ts'
import type { KeyStore } from '../auth/keys.ts'
import type { GatewayEnv, HookContext } from '../types.ts'
import { limitStates, MINUTE_MS, DAY_MS } from './limits.ts'
import type { QuotaPolicy } from './policy.ts'
import type { QuotaService } from './service.ts'

export interface QuotaRoutesOptions {
  service: QuotaService
  /** Where key records live (for the admin route). */
  keys: (c: HookContext) => KeyStore
}

export function quotaRoutes(options: QuotaRoutesOptions): Hono<GatewayEnv> {
  const app = new Hono<GatewayEnv>()

  app.get('/v1/usage', async (c) => {
    // A token minted with a quota of its own is held to it, counted under the token's id: report that. One
    // whose quota limits no completion (a `controlPerMinute` alone) is held by its key's limits only: those.
    const { keyId, quota, tokenId, tokenQuota } = c.get('principal')
    const own = tokenQuota && options.service.policyFor(tokenQuota, undefined, true)
    return c.json(await usageReport(c, options.service, own ? tokenId! : keyId, own || options.service.policyFor(quota)))
  })

  app.get('/admin/keys/:id/usage', async (c) => {
    const record = await routeKey(c, (id) => options.keys(c).get(id))
    return c.json(await usageReport(c, options.service, record.id, options.service.policyFor(record.quota ?? null)))
  })

  return app
}

/** `policy`: the limits that hold `keyId` (`QuotaService.policyFor`). */
async function usageReport(c: Context<GatewayEnv>, service: QuotaService, keyId: string, policy: QuotaPolicy | null) {
  if (!policy) return { object: 'quota.usage', key_id: keyId, store: null, policy: null, limits: [], windows: null, streams: null }
  const store = service.storeFor(c, policy)
  const now = service.now()
  const usage = await store.usage({ keyId, now })
  return {
    object: 'quota.usage',
    key_id: keyId,
    store: store.kind,
    policy,
    limits: limitStates(policy, usage, now).map((s) => ({
      name: s.name,
      limit: s.limit,
      used: s.used,
      remaining: s.remaining,
      reset_seconds: s.resetSeconds,
      window_seconds: s.windowSeconds,
    })),
    windows: {
      minute: { start: new Date(usage.minute * MINUTE_MS).toISOString(), ...usage.minuteCounts },
      day: { start: new Date(usage.day * DAY_MS).toISOString(), ...usage.dayCounts },
    },
    streams: usage.streams,
  }
}
