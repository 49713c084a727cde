/**
 * The two middlewares every request meets: the call recorder, and the guard of each endpoint op
 * (op labelling, Bearer auth, the endpoint's injected HTTP fault).
 */

import type { Context, MiddlewareHandler } from 'hono'
import { isAuthorized } from './context.ts'
import type { EmulatorContext, EmulatorEnv } from './context.ts'
import { httpFaultResponse } from './faults.ts'
import type { EmulatorCall, EmulatorOp } from './types.ts'

/** Appends every request to `context.calls` once it has been answered. */
export function recordCalls(context: EmulatorContext): MiddlewareHandler<EmulatorEnv> {
  return async function recordCall(c, next) {
    const at = context.now()
    await next()
    const call = c.get('call')
    if (call?.forget) return
    const record: EmulatorCall = {
      method: c.req.method,
      path: new URL(c.req.url).pathname,
      endpointId: call?.endpointId ?? null,
      op: call?.op ?? 'unknown',
      ...(call?.jobId !== undefined ? { jobId: call.jobId } : {}),
      status: c.res.status,
      authorized: call?.authorized ?? true,
      at,
    }
    context.calls.push(record)
    // A streamed answer outlives the handler: what happens to it later is written on this record.
    if (call) call.record = record
    // Trim in batches (a tenth over the cap) so a full log does not cost a splice per request.
    if (context.calls.length > context.maxCalls * 1.1) context.calls.splice(0, context.calls.length - context.maxCalls)
  }
}

/** Labels the request with its op, then refuses it on a bad key (401), answers the endpoint's HTTP fault, or 429 past Runpod's rate limits (`rateLimitScale`). */
export function endpointOp(context: EmulatorContext, op: EmulatorOp): MiddlewareHandler<EmulatorEnv> {
  return async function guardEndpointOp(c, next) {
    const endpointId = c.req.param('endpointId') ?? null
    const jobId = c.req.param('jobId')
    const authorized = isAuthorized(context, c.req.header('authorization'))
    c.set('call', { op, endpointId, authorized, ...(jobId !== undefined ? { jobId } : {}) })
    if (!authorized) return c.text('Unauthorized', 401)
    if (endpointId === null) return next()
    const fault = context.endpoints.takeHttpFault(endpointId, op)
    if (fault) return httpFaultResponse(fault)
    const done = context.rateLimits.admit(endpointId, op, context.endpoints.behaviour(endpointId).rateLimitScale, context.now())
    if (!done) return c.text(`Too Many Requests: past the endpoint's ${op} rate limit (emulated)`, 429)
    try {
      await next()
    } finally {
      done()
    }
  }
}

/** Records the id of a job the route created, for the call log. */
export function noteJobId(c: Context<EmulatorEnv>, jobId: string): void {
  const call = c.get('call')
  if (call) c.set('call', { ...call, jobId })
}
