/**
 * Answers from a stored or shared answer: a cache HIT or a COALESCED caller gets the answer rendered in
 * the form it asked for, with podgate's cache headers.
 */
import { withHeaders } from '../http/headers.ts'
import type { NormalizedRequest } from '../normalize/types.ts'
import { completionId, SSE_HEADERS } from '../upstream/types.ts'
import { renderJson, renderStream } from './answer.ts'
import type { CachedAnswer, RenderMeta } from './answer.ts'
import { CACHE_HEADER } from './policy.ts'
import type { CacheStatus } from './policy.ts'

/** A stored answer as a fresh response: new id and `created`, the caller's alias. */
export function replay(answer: CachedAnswer, request: NormalizedRequest, status: CacheStatus, ageMs: number): Response {
  const meta = { id: completionId(request.kind), created: nowSeconds(), model: request.model }
  return render(answer, request, meta, status, ageMs)
}

export function render(answer: CachedAnswer, request: NormalizedRequest, meta: RenderMeta, status: CacheStatus, ageMs: number): Response {
  const headers = new Headers(request.stream ? SSE_HEADERS : { 'content-type': 'application/json' })
  headers.set(CACHE_HEADER, status)
  headers.set('age', String(Math.floor(ageMs / 1000)))
  if (request.stream) return new Response(renderStream(answer, meta, request.includeUsage), { headers })
  const choice = request.body.tool_choice
  return new Response(JSON.stringify(renderJson(answer, { ...meta, autoTools: choice == null || choice === 'auto' })), { headers })
}

export function withCacheHeaders(response: Response, status: CacheStatus, ageSeconds?: number): Response {
  return withHeaders(response, ageSeconds === undefined ? { [CACHE_HEADER]: status } : { [CACHE_HEADER]: status, age: String(ageSeconds) })
}


export function metaOf(body: unknown): { id: string; created: number } | undefined {
  if (typeof body !== 'object' || body === null) return undefined
  const { id, created } = body as { id?: unknown; created?: unknown }
  return typeof id === 'string' && typeof created === 'number' ? { id, created } : undefined
}

export function nowSeconds(): number {
  return Math.floor(Date.now() / 1000)
}
