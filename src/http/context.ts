/**
 * Small helpers over Hono's Context that keep working outside Workers (e.g. `app.request()` in tests,
 * where there is no ExecutionContext).
 */
import type { Context } from 'hono'

export function waitUntilOf(c: Context): (promise: Promise<unknown>) => void {
  let ctx: ExecutionContext | undefined
  try {
    ctx = c.executionCtx as ExecutionContext
  } catch {
    ctx = undefined
  }
  if (ctx) return (promise) => ctx.waitUntil(promise)
  return (promise) => void promise.catch(() => undefined)
}
