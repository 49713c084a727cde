/**
 * State shared by the emulator's routes, the Hono env type, and the small HTTP helpers they share.
 */

import type { EndpointRegistry } from './endpoints.ts'
import type { JobStore } from './jobs.ts'
import type { EmulatorCall, EmulatorOp, EmulatorRequestRecord } from './types.ts'
import type { RateLimits } from './rate-limits.ts'

export interface EmulatorContext {
  now: () => number
  maxWaitMs: number
  maxCalls: number
  apiKey?: string
  endpoints: EndpointRegistry
  jobs: JobStore
  calls: EmulatorCall[]
  /** The last body each endpoint received (OpenAI route and run/runsync). */
  lastRequests: Map<string, EmulatorRequestRecord>
  /** Runpod's per-endpoint rate limits, where an endpoint's `rateLimitScale` turns them on. */
  rateLimits: RateLimits
}

/** What the recording middleware writes down about a request, filled in by the route that took it. */
export interface CallInfo {
  op: EmulatorOp
  endpointId: string | null
  jobId?: string
  authorized: boolean
  /** Set by the reset control route, so the call log starts empty after a reset. */
  forget?: boolean
  /** This request's entry in `calls`, once it was answered. */
  record?: EmulatorCall
}

export type EmulatorEnv = { Variables: { call: CallInfo | undefined } }

export type JsonBody = { ok: true; value: unknown } | { ok: false; status: 400 | 413; message: string }

/** Reads a JSON body; an empty body reads as `{}`. Each surface words the failure its own way. */
export async function readJsonBody(request: Request, limitBytes: number): Promise<JsonBody> {
  const text = await request.text()
  if (new TextEncoder().encode(text).length > limitBytes) {
    return { ok: false, status: 413, message: `Request body larger than ${limitBytes} bytes` }
  }
  if (text.trim() === '') return { ok: true, value: {} }
  try {
    return { ok: true, value: JSON.parse(text) as unknown }
  } catch {
    return { ok: false, status: 400, message: 'Request body is not valid JSON' }
  }
}

/** Notes the body an endpoint op received, for {@link EmulatorContext.lastRequests}. */
export function recordBody(context: EmulatorContext, request: { endpointId: string; op: EmulatorOp; url: string; body: JsonBody }): void {
  context.lastRequests.set(request.endpointId, {
    op: request.op,
    path: new URL(request.url).pathname,
    body: request.body.ok ? request.body.value : undefined,
    at: context.now(),
  })
}

/** The `?wait=` of a long poll in ms, capped by `maxWaitMs`. */
export function waitParam(value: string | undefined, fallbackMs: number, maxWaitMs: number): number {
  const parsed = value === undefined ? NaN : Number(value)
  const wait = Number.isFinite(parsed) && parsed >= 0 ? parsed : fallbackMs
  return Math.min(wait, maxWaitMs)
}

/** Resolves after `ms`, or as soon as `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted || ms <= 0) return resolve()
    const onAbort = () => {
      clearTimeout(timer)
      resolve()
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}

export function isAuthorized(context: EmulatorContext, header: string | undefined): boolean {
  return context.apiKey === undefined || header === `Bearer ${context.apiKey}`
}
