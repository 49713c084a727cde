/**
 * The cache stage of the completion pipeline: lookup, replay, coalescing and store.
 *
 * A cacheable request costs one lookup on a miss (Cache API, then KV); the answer it then gets from
 * upstream is recorded from podgate's own output as it streams by and stored off the response path,
 * only once `ctx.outcome` says it ended well. Identical requests arriving meanwhile join that call.
 */
import { createParser } from 'eventsource-parser'
import { GatewayError, toGatewayError } from '../errors/index.ts'
import { waitUntilOf } from '../http/context.ts'
import type { NormalizedRequest } from '../normalize/types.ts'
import type { CompletionContext, CompletionHandler, CompletionStage } from '../pipeline/index.ts'
import type { ResolvedModel } from '../routing/models.ts'
import { DONE_TEXT, sseErrorEvent } from '../streaming/openai-chunks.ts'
import { completionId, SSE_HEADERS } from '../upstream/types.ts'
import { captureJsonAnswer, createAnswerCapture, renderJson, renderStream, usageChunkText } from './answer.ts'
import type { CachedAnswer } from './answer.ts'
import { Flight } from './flight.ts'
import { cacheKey } from './key.ts'
import type { CacheKey } from './key.ts'
import { CACHE_HEADER, decideCaching } from './policy.ts'
import type { CacheStatus, ModelCacheSettings } from './policy.ts'
import { readEntry, writeEntry } from './store.ts'
import type { CacheTiers, GenerationCache } from './store.ts'
import type { Context } from 'hono'
import type { GatewayEnv } from '../types.ts'

export interface CacheStageOptions {
  /** The cache settings of a model. */
  settings: (model: ResolvedModel) => ModelCacheSettings
  /** `key`: entries per credential (`principal.keyId`); `gateway`: shared by every caller. */
  scope: 'key' | 'gateway'
  /** The tiers a request may use (either may be missing). */
  tiers: (c: Context<GatewayEnv>) => CacheTiers
  /** KV holding purge generations. */
  kv: (c: Context<GatewayEnv>) => KVNamespace
  generations: GenerationCache
  /** Largest entry stored, in bytes of JSON. */
  maxEntryBytes: number
  /** Identical requests in flight share one upstream call. */
  coalesce: boolean
  /** The cache's clock, in ms. */
  now: () => number
  /** Where storage failures are reported (they never fail a request). */
  log?: (line: Record<string, unknown>) => void
}

interface Plan {
  key: CacheKey
  ttlSeconds: number
}

const encoder = new TextEncoder()
const HEARTBEAT_TEXT = ': keep-alive\n\n'

/**
 * @example
 * stages.push(cacheStage({ settings: () => ({ enabled: true, nonDeterministic: false, ttlSeconds: 300 }),
 *   scope: 'key', tiers: () => ({ cache: caches.default }), kv: (c) => c.env.PODGATE_KV,
 *   generations: new GenerationCache({ ttlMs: 5000, now: Date.now }), maxEntryBytes: 1 << 20,
 *   coalesce: true, now: Date.now }))
 */
export function cacheStage(options: CacheStageOptions): CompletionStage {
  const flights = new Map<string, Flight>()
  const log = options.log ?? (() => undefined)

  return async function cache(ctx, next) {
    const { c, request } = ctx
    const decision = decideCaching({ request, headers: c.req.raw.headers, settings: options.settings(ctx.model) })
    const principal = c.get('principal')
    const keyId = options.scope === 'key' ? principal?.keyId : undefined
    if (!decision.cacheable || (options.scope === 'key' && keyId === undefined)) return withCacheHeaders(await next(ctx), 'BYPASS')

    let generation: string
    try {
      generation = await options.generations.token(options.kv(c), request.model, keyId)
    } catch (error) {
      // Without the purge generation a lookup could serve a purged answer: serve this one uncached.
      log({ level: 'warn', message: 'cache generation read failed', cause: String(error) })
      return withCacheHeaders(await next(ctx), 'BYPASS')
    }
    // A token minted with a `sub` reads and writes its end user's entries only; a purge of the key covers them.
    const scope = keyId === undefined ? 'shared' : principal?.subject ? `key:${keyId}:sub:${principal.subject}` : `key:${keyId}`
    const key = await cacheKey({ request, scope, generation })
    const plan: Plan = { key, ttlSeconds: decision.ttlSeconds }

    if (decision.lookup) {
      const hit = await readEntry(options.tiers(c), key, waitUntilOf(c)).catch((error: unknown) => {
        log({ level: 'warn', message: 'cache lookup failed', cause: String(error) })
        return undefined
      })
      if (hit) {
        const age = Math.max(0, options.now() - hit.entry.storedAt)
        const fresh = age <= decision.ttlSeconds * 1000 && (decision.maxAgeSeconds === undefined || age <= decision.maxAgeSeconds * 1000)
        if (fresh) {
          ctx.settle({ ok: true, usage: hit.entry.answer.usage, cached: true })
          return replay(hit.entry.answer, request, 'HIT', age)
        }
      }
    }
    return coalesceOrLead(ctx, next, plan, false)
  }

  function coalesceOrLead(ctx: CompletionContext, next: CompletionHandler, plan: Plan, retried: boolean): Promise<Response> {
    const flight = options.coalesce ? flights.get(plan.key.hash) : undefined
    return flight ? join(flight, ctx, next, plan, retried) : lead(ctx, next, plan)
  }

  async function lead(ctx: CompletionContext, next: CompletionHandler, plan: Plan): Promise<Response> {
    const { request } = ctx
    const flight = new Flight(request.stream)
    const hash = plan.key.hash
    if (options.coalesce) flights.set(hash, flight)
    const release = () => {
      if (flights.get(hash) === flight) flights.delete(hash)
    }
    const callerGone = () => ctx.c.req.raw.signal?.aborted === true
    const store = (answer: CachedAnswer) => {
      const write = writeEntry(options.tiers(ctx.c), plan.key, { v: 1, storedAt: options.now(), answer }, { ttlSeconds: plan.ttlSeconds, maxEntryBytes: options.maxEntryBytes })
      waitUntilOf(ctx.c)(write.catch((error: unknown) => log({ level: 'warn', message: 'cache write failed', cause: String(error) })))
    }

    let response: Response
    try {
      response = await next(ctx)
    } catch (error) {
      flight.fail(toGatewayError(error), callerGone())
      release()
      throw error
    }
    if (response.status !== 200 || !response.body) {
      flight.fail(new GatewayError('upstream_error', 'The shared upstream call did not answer.'), true)
      release()
      return withCacheHeaders(response, 'MISS', 0)
    }

    if (!request.stream) {
      let text: string
      try {
        text = await response.text()
      } catch (error) {
        flight.fail(toGatewayError(error), callerGone())
        release()
        throw error
      }
      const json = parseJson(text)
      const answer = captureJsonAnswer(request.kind, json)
      const outcome = await ctx.outcome
      release()
      if (outcome.ok) {
        flight.succeed({ answer, usage: outcome.usage, meta: metaOf(json), json: text })
        if (answer) store(answer)
      } else {
        flight.fail(outcome.error, callerGone())
      }
      return withCacheHeaders(new Response(text, response), 'MISS', 0)
    }

    const capture = createAnswerCapture(request.kind)
    let capturedChars = 0
    let tooLarge = false
    let sawDone = false
    const parser = createParser({
      onEvent(event) {
        if (event.data === '[DONE]') {
          sawDone = true
          return
        }
        capturedChars += event.data.length
        if (!tooLarge && capturedChars > options.maxEntryBytes) {
          // Too large to store: existing joiners still follow, new callers start their own call.
          tooLarge = true
          release()
        }
        const kind = capture.accept(parseJson(event.data))
        flight.push({ data: event.data, usage: kind === 'usage', error: kind === 'error' })
      },
      onComment() {
        flight.push({ comment: true })
      },
    })
    const decoder = new TextDecoder()
    const reader = response.body.getReader()
    // The upstream answer is read here, not by the leader's response: joiners must not wait on how
    // fast the leader's caller reads, and the leader follows the buffer like everyone else.
    const pump = (async () => {
      try {
        for (;;) {
          const chunk = await reader.read()
          if (chunk.done) break
          parser.feed(decoder.decode(chunk.value, { stream: true }))
        }
        parser.feed(decoder.decode())
        const outcome = await ctx.outcome
        release()
        if (outcome.ok && sawDone) {
          const answer = capture.result(outcome.usage)
          flight.succeed({ answer, usage: outcome.usage, meta: capture.meta })
          if (answer && !tooLarge) store(answer)
        } else {
          flight.fail(outcome.ok ? new GatewayError('upstream_error', 'The stream ended before the model finished.') : outcome.error, callerGone() || flight.followers === 0)
        }
      } catch (error) {
        release()
        flight.fail(toGatewayError(error), callerGone())
      }
    })()
    waitUntilOf(ctx.c)(pump)
    // Everyone left before the end: stop the upstream call, as a caller that hangs up would.
    flight.onIdle = () => void reader.cancel().catch(() => undefined)
    return withCacheHeaders(new Response(follow(flight, request), response), 'MISS', 0)
  }

  async function join(flight: Flight, ctx: CompletionContext, next: CompletionHandler, plan: Plan, retried: boolean): Promise<Response> {
    const { request } = ctx
    const failed = (): Promise<Response> => {
      if (flight.abandoned && !retried) return coalesceOrLead(ctx, next, plan, true)
      const error = flight.error ?? new GatewayError('upstream_error', 'The shared upstream call failed.')
      ctx.settle({ ok: false, error, producedOutput: false })
      throw error
    }

    if (!request.stream || !flight.streams) {
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
      if (!flight.answer) return retried ? lead(ctx, next, plan) : coalesceOrLead(ctx, next, plan, true)
      ctx.settle({ ok: true, usage: flight.usage, cached: true })
      return render(flight.answer, request, meta, 'COALESCED', 0)
    }

    flight.followers++
    while (flight.events.length === 0 && flight.state === 'open') await flight.changed()
    if (flight.events.length === 0 && flight.state === 'failed') {
      flight.leave()
      return failed()
    }
    return withCacheHeaders(new Response(follow(flight, request, ctx.settle), { headers: SSE_HEADERS }), 'COALESCED', 0)
  }

  /**
   * A caller's stream: the flight's events so far, then live, with the caller's own usage preference.
   * The leader passes no `settle`: its dispatcher settles its outcome.
   */
  function follow(flight: Flight, request: NormalizedRequest, settle?: CompletionContext['settle']): ReadableStream<Uint8Array> {
    if (!settle) flight.followers++
    let cursor = 0
    let left = false
    const leave = () => {
      if (left) return
      left = true
      flight.leave()
    }
    let usageSent = false
    let errorSent = false
    return new ReadableStream<Uint8Array>(
      {
        async pull(controller) {
          for (;;) {
            let out = ''
            while (cursor < flight.events.length) {
              const event = flight.events[cursor++]!
              if ('comment' in event) out += HEARTBEAT_TEXT
              else if (event.usage && !request.includeUsage) continue
              else {
                usageSent ||= event.usage
                errorSent ||= event.error
                out += `data: ${event.data}\n\n`
              }
            }
            if (out !== '') return controller.enqueue(encoder.encode(out))
            if (flight.state === 'ok') {
              if (request.includeUsage && !usageSent && flight.usage && flight.meta) out += usageChunkText(request.kind, { ...flight.meta, model: request.model }, flight.usage)
              controller.enqueue(encoder.encode(out + DONE_TEXT))
              controller.close()
              leave()
              settle?.({ ok: true, usage: flight.usage, cached: true })
              return
            }
            if (flight.state === 'failed') {
              const error = flight.error ?? new GatewayError('upstream_error', 'The shared upstream call failed.')
              if (!errorSent) controller.enqueue(sseErrorEvent({ message: error.message, type: error.type, code: error.code }))
              controller.close()
              leave()
              settle?.({ ok: false, error, producedOutput: true })
              return
            }
            await flight.changed()
          }
        },
        cancel() {
          leave()
          settle?.({ ok: false, error: new GatewayError('upstream_error', 'The caller went away.'), producedOutput: true })
        },
      },
      { highWaterMark: 0 },
    )
  }
}

function replay(answer: CachedAnswer, request: NormalizedRequest, status: CacheStatus, ageMs: number): Response {
  const meta = { id: completionId(request.kind), created: nowSeconds(), model: request.model }
  return render(answer, request, meta, status, ageMs)
}

function render(answer: CachedAnswer, request: NormalizedRequest, meta: { id: string; created: number; model: string }, status: CacheStatus, ageMs: number): Response {
  const headers = new Headers(request.stream ? SSE_HEADERS : { 'content-type': 'application/json' })
  headers.set(CACHE_HEADER, status)
  headers.set('age', String(Math.floor(ageMs / 1000)))
  if (request.stream) return new Response(renderStream(answer, meta, request.includeUsage), { headers })
  return new Response(JSON.stringify(renderJson(answer, meta)), { headers })
}

function withCacheHeaders(response: Response, status: CacheStatus, ageSeconds?: number): Response {
  const out = new Response(response.body, response)
  out.headers.set(CACHE_HEADER, status)
  if (ageSeconds !== undefined) out.headers.set('age', String(ageSeconds))
  return out
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

function metaOf(body: unknown): { id: string; created: number } | undefined {
  if (typeof body !== 'object' || body === null) return undefined
  const { id, created } = body as { id?: unknown; created?: unknown }
  return typeof id === 'string' && typeof created === 'number' ? { id, created } : undefined
}

function nowSeconds(): number {
  return Math.floor(Date.now() / 1000)
}
