/**
 * Coalescing: a cacheable request whose twin is already upstream in this isolate joins that call
 * instead of making its own, and reads the leader's events from the start, then live.
 */
import { GatewayError } from '../errors/index.ts'
import type { CompletionContext, CompletionHandler } from '../pipeline/index.ts'
import { completionId, SSE_HEADERS } from '../upstream/types.ts'
import { lead } from './capture.ts'
import { follow } from './follow.ts'
import type { Flight } from './flight.ts'
import { nowSeconds, render, withCacheHeaders } from './replay.ts'
import type { CacheRun, Plan } from './run.ts'


/** Joins the request's flight when one is in the air, else leads a new one. */
export function coalesceOrLead(run: CacheRun, ctx: CompletionContext, next: CompletionHandler, plan: Plan, retried: boolean): Promise<Response> {
  const flight = run.options.coalesce ? run.flights.get(plan.key.hash) : undefined
  return flight ? join(run, flight, { ctx, next, plan, retried }) : lead(run, ctx, next, plan)
}

async function join(run: CacheRun, flight: Flight, call: { ctx: CompletionContext; next: CompletionHandler; plan: Plan; retried: boolean }): Promise<Response> {
  const { ctx, next, plan, retried } = call
  const { request } = ctx
  const failed = (): Promise<Response> => {
    if (flight.abandoned && !retried) return coalesceOrLead(run, ctx, next, plan, true)
    const error = flight.error ?? new GatewayError('upstream_error', 'The shared upstream call failed.')
    ctx.settle({ ok: false, error, producedOutput: false })
    throw error
  }

  if (request.stream && flight.streams) {
    // Registered before any wait: the flight keeps every event from here on for this reader.
    const reader = flight.reader()
    flight.followers++
    while (flight.end === 0 && flight.state === 'open' && flight.streams) await flight.changed()
    if (flight.streams) {
      if (flight.end === 0 && flight.state === 'failed') {
        flight.unread(reader)
        flight.leave()
        return failed()
      }
      return withCacheHeaders(new Response(follow(flight, reader, request, ctx.settle), { headers: SSE_HEADERS }), 'COALESCED', 0)
    }
    // The leader's stream turned out to be piped natively: wait for the whole answer, as below.
    flight.unread(reader)
    flight.followers--
  }

  flight.followers++
  await flight.ended()
  flight.leave()
  if (flight.state === 'failed') return failed()
  const meta = { id: flight.meta?.id ?? completionId(request.kind), created: flight.meta?.created ?? nowSeconds(), model: request.model }
  if (!request.stream && flight.json !== undefined) {
    ctx.settle({ ok: true, usage: flight.usage, cached: true })
    return withCacheHeaders(new Response(flight.json, { headers: { 'content-type': 'application/json' } }), 'COALESCED', 0)
  }
  // The leader's answer could not be captured (too large, or nothing podgate replays): ask alone.
  if (!flight.answer) return retried ? lead(run, ctx, next, plan) : coalesceOrLead(run, ctx, next, plan, true)
  ctx.settle({ ok: true, usage: flight.usage, cached: true })
  return render(flight.answer, request, meta, 'COALESCED', 0)
}
