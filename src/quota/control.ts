/**
 * `controlQuota`: counts a key's control calls (the native surface's `status`, `status-sync`, `stream`
 * (each JSON poll, and each opening of an event stream), `cancel`, `health`, and `POST /v1/tokens`) against its `controlPerMinute`
 * (default 600). Each of them costs an upstream call or a signature, so none is free; over the limit
 * the call gets a 429 with `Retry-After` and the `RateLimit` fields, before anything goes upstream.
 *
 * Control calls are counted apart from completions (under `ctl:<keyId>` in the key's store), so polling
 * a job never uses up the key's `requestsPerMinute`. A job event stream's own polls are not control
 * calls: its opening counted one, the completion stages admitted it as a stream, and its polls are bounded
 * by `runpod.maxPollsPerStream`.
 */
import type { Context, MiddlewareHandler } from 'hono'
import { GatewayError } from '../errors/index.ts'
import { waitUntilOf } from '../http/context.ts'
import type { GatewayEnv } from '../types.ts'
import { limitStates } from './limits.ts'
import type { QuotaUsage } from './limits.ts'
import type { QuotaService } from './service.ts'
import type { QuotaStore, Reservation } from './store.ts'

/** Where control counts live: apart from the key's completion counts. */
export function controlCounterId(keyId: string): string {
  return `ctl:${keyId}`
}

/** The IETF `RateLimit-Policy` / `RateLimit` fields for the `control` limit. */
function controlHeaders(limit: number, usage: QuotaUsage, now: number): Record<string, string> {
  const state = limitStates({ requestsPerMinute: limit }, usage, now)[0]
  if (!state) return {}
  return {
    'ratelimit-policy': `"control";q=${limit};w=60`,
    ratelimit: `"control";r=${state.remaining};t=${state.resetSeconds}`,
  }
}

/**
 * Counts one control call of the request's key (for `model`, when the call names one): throws the 429
 * over the limit, else returns the `RateLimit` fields for the answer.
 *
 * @example
 * const headers = await countControl(quota, c) // in a route, once its input is known to be good
 */
export async function countControl(service: QuotaService, c: Context<GatewayEnv>, model?: string): Promise<Record<string, string>> {
  const principal = c.get('principal')
  const now = service.now()
  const background = waitUntilOf(c)
  /** One control call under `counter` (a key or token id), at `limit` a minute. */
  const reserve = async (counter: string, limit: number, strict: boolean | undefined) => {
    const policy = { requestsPerMinute: limit, strict }
    const store = service.storeFor(c, policy)
    const result = await store.reserve({ keyId: controlCounterId(counter), policy, cost: { tokens: 0, stream: false }, now, background })
    return { store, result, headers: controlHeaders(limit, result.usage, now), left: limit - result.usage.minuteCounts.requests }
  }
  // A token minted with a `controlPerMinute` of its own is held to it first, under its token id, so one
  // busy token cannot use up its siblings' share of the key's control calls.
  const own = principal.tokenId !== null ? principal.tokenQuota?.controlPerMinute : undefined
  let taken: { store: QuotaStore; reservation: Reservation; headers: Record<string, string>; left: number } | undefined
  if (principal.tokenId !== null && own !== undefined) {
    const { store, result, headers, left } = await reserve(principal.tokenId, own, principal.tokenQuota?.strict)
    if (!result.ok) throw refused(own, 'token', headers, result.usage, now)
    taken = { store, reservation: result.reservation, headers, left }
  }
  const control = service.controlPolicy(principal.quota, model)
  const key = await reserve(principal.keyId, control.controlPerMinute, control.strict)
  if (!key.result.ok) {
    // Refused by its key: the call does not count against the token either.
    if (taken) await taken.store.settle({ reservation: taken.reservation, tokens: 0, release: true, background })
    throw refused(control.controlPerMinute, 'key', key.headers, key.result.usage, now)
  }
  // Held to two limits, the call reports the one with less left, as a completion does (quota/stage.ts).
  return taken && taken.left < key.left ? taken.headers : key.headers
}

/**
 * The native surface's control routes (`/v2/:model/...`): a call for a model that does not exist or
 * that the key may not use is refused by the route and counts nothing; any other call counts, refused
 * or not (a forged or foreign job id still costs an upstream call).
 *
 * @example
 * app.use('/v2/:model/status/:id', controlQuota(quota, (alias) => models.has(alias))) // after the key auth middleware
 */
export function controlQuota(service: QuotaService, known: (model: string) => boolean): MiddlewareHandler<GatewayEnv> {
  return async function controlQuota(c, next) {
    const model = c.req.param('model')
    const allowed = c.get('principal').models
    if (model === undefined || !known(model) || (allowed !== null && !allowed.includes(model))) return next()
    const headers = await countControl(service, c, model)
    await next()
    // Appended: an event stream's completion stages set these fields for the limits they hold it to (a 429 of theirs names one).
    for (const [name, value] of Object.entries(headers)) c.res.headers.append(name, value)
  }
}

function refused(limit: number, holder: 'key' | 'token', headers: Record<string, string>, usage: QuotaUsage, now: number): GatewayError {
  const retryAfter = Math.max(1, Math.ceil(((usage.minute + 1) * 60_000 - now) / 1000))
  return new GatewayError(
    'rate_limited',
    `Control call limit reached: this ${holder} may make ${limit} control calls (status, polls, cancel, health, token minting) a minute. Retry after ${retryAfter}s, or follow the job with one event stream (Accept: text/event-stream).`,
    { headers: { ...headers, 'retry-after': String(retryAfter) } },
  )
}
