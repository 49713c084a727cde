/**
 * Coalescing: a cacheable request whose twin is already upstream in this isolate joins that call
 * instead of making its own, and reads the leader's events from the start, then live.
 */
import { GatewayError } from '../errors/index.ts'
import type { NormalizedRequest } from '../normalize/types.ts'
import type { CompletionContext, CompletionHandler } from '../pipeline/index.ts'
import { DONE_TEXT, sseErrorEvent } from '../streaming/openai-chunks.ts'
import { completionId, SSE_HEADERS } from '../upstream/types.ts'
import { usageChunkText } from './answer.ts'
import { lead } from './capture.ts'
import type { Flight, FlightReader } from './flight.ts'
import { nowSeconds, render, withCacheHeaders } from './replay.ts'
import type { CacheRun, Plan } from './stage.ts'

const encoder = new TextEncoder()
const HEARTBEAT_TEXT = ': keep-alive\n\n'

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
    if (!flight.answer) return retried ? lead(run, ctx, next, plan) : coalesceOrLead(run, ctx, next, plan, true)
    ctx.settle({ ok: true, usage: flight.usage, cached: true })
    return render(flight.answer, request, meta, 'COALESCED', 0)
  }

  // Registered before any wait: the flight keeps every event from here on for this reader.
  const reader = flight.reader()
  flight.followers++
  while (flight.end === 0 && flight.state === 'open') await flight.changed()
  if (flight.end === 0 && flight.state === 'failed') {
    flight.unread(reader)
    flight.leave()
    return failed()
  }
  return withCacheHeaders(new Response(follow(flight, reader, request, ctx.settle), { headers: SSE_HEADERS }), 'COALESCED', 0)
}

/**
 * A caller's stream: the flight's events so far, then live, with the caller's own usage preference.
 * The leader passes no `settle`: its dispatcher settles its outcome.
 */
export function follow(flight: Flight, reader: FlightReader, request: NormalizedRequest, settle?: CompletionContext['settle']): ReadableStream<Uint8Array> {
  if (!settle) flight.followers++
  let left = false
  const leave = () => {
    if (left) return
    left = true
    flight.unread(reader)
    flight.leave()
  }
  let usageSent = false
  let errorSent = false
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        for (;;) {
          let out = ''
          while (reader.cursor < flight.end) {
            const event = flight.at(reader.cursor++)
            if ('comment' in event) out += HEARTBEAT_TEXT
            else if (event.usage && !request.includeUsage) continue
            else {
              usageSent ||= event.usage
              errorSent ||= event.error
              out += `data: ${event.data}\n\n`
            }
          }
          // What everyone has read can go: the capture's memory follows the slowest reader.
          flight.compact()
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
