/**
 * Fault resolution: which fault governs a request (a directive beats the endpoint's), and the
 * response of an injected HTTP failure.
 */

import type { Directives } from './directives.ts'
import type { HttpFault } from './endpoints.ts'
import type { EndpointBehaviour, Fault } from './types.ts'

/**
 * The fault of one request. The endpoint's HTTP fault is left out: it fires per op (and counts its
 * `times`) in the route middleware, not per job.
 */
export function requestFault(directives: Directives, behaviour: EndpointBehaviour): Fault | undefined {
  if (directives.fault) return directives.fault
  return behaviour.fault?.kind === 'http' ? undefined : behaviour.fault
}

/** An injected HTTP failure: the status with an opaque text body, as Runpod's documented-as-opaque errors. */
export function httpFaultResponse(fault: HttpFault): Response {
  const headers = new Headers({ 'content-type': 'text/plain; charset=utf-8' })
  if (fault.retryAfter !== undefined) headers.set('retry-after', String(fault.retryAfter))
  const nullBody = fault.status === 204 || fault.status === 205 || fault.status === 304
  return new Response(nullBody ? null : `Emulated upstream error (HTTP ${fault.status})`, { status: fault.status, headers })
}
