/**
 * Answers from a stored or shared answer: a cache HIT or a COALESCED caller gets the answer rendered in
 * the form it asked for, with podgate's cache headers.
 */
import { withHeaders } from '../http/headers.ts'
import type { CompletionContext } from '../pipeline/index.ts'
import { completionId, SSE_HEADERS } from '../upstream/types.ts'
import { renderJson, renderStream } from './answer.ts'
import type { CachedAnswer } from './answer.ts'
import { CACHE_HEADER } from './policy.ts'
import type { CacheStatus } from './policy.ts'

/** A stored answer as a fresh response: new id and `created`. */
export function replay(answer: CachedAnswer, ctx: CompletionContext, status: CacheStatus, ageMs: number): Response {
  return render(answer, ctx, { id: completionId(ctx.request.kind), created: nowSeconds() }, status, ageMs)
}

export function withCacheHeaders(response: Response, status: CacheStatus, ageSeconds?: number): Response {
  return withHeaders(response, ageSeconds === undefined ? { [CACHE_HEADER]: status } : { [CACHE_HEADER]: status, age: String(ageSeconds) })
}

export function metaOf(body: unknown): { id: string; created: number } | undefined {
  // A primitive reads no id or created; null or undefined reads as {}.
  const { id, created } = (body ?? {}) as { id?: unknown; created?: unknown }
  return typeof id === 'string' && typeof created === 'number' ? { id, created } : undefined
}

export function nowSeconds(): number {
  return Math.floor(Date.now() / 1000)
}

/**
 * The answer in the form the request asked for, named as its live answer would be: a JSON body carries
 * the alias, a stream's chunks the model's `streamedModelName` (the served name under `streaming.rewriteModel: false`).
 */
export function render(answer: CachedAnswer, ctx: CompletionContext, identity: { id: string; created: number }, status: CacheStatus, ageMs: number): Response {
  const { request, model } = ctx
  const headers = new Headers(request.stream ? SSE_HEADERS : { 'content-type': 'application/json' })
  headers.set(CACHE_HEADER, status)
  headers.set('age', String(Math.floor(ageMs / 1000)))
  if (request.stream) return new Response(renderStream(answer, { ...identity, model: model.streamedModelName }, request.includeUsage), { headers })
  const choice = request.body.tool_choice
  return new Response(JSON.stringify(renderJson(answer, { ...identity, model: model.alias, autoTools: choice == null || choice === 'auto' })), { headers })
}
