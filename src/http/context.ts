/**
 * Small helpers over Hono's Context and its request that keep working outside Workers (e.g.
 * `app.request()` in tests, where there is no ExecutionContext).
 */
import type { Context } from 'hono'

/**
 * Runs `left` once the caller's signal aborts: at once when it already has (an abort that came while the
 * stages ran fires no event), else on the event. The signal fires whether or not a body is ever cancelled.
 */
export function onAbort(signal: AbortSignal | undefined, left: () => void): void {
  if (signal?.aborted) left()
  else signal?.addEventListener('abort', left)
}

export function waitUntilOf(c: Context): (promise: Promise<unknown>) => void {
  let ctx: ExecutionContext | undefined
  try {
    ctx = c.executionCtx as ExecutionContext
  } catch {
    // No execution context (a test's bare app): ctx stays undefined.
  }
  if (ctx) return (promise) => ctx.waitUntil(promise)
  return (promise) => void promise.catch(() => undefined)
}
