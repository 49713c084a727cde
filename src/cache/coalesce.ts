/**
 * Coalescing: a cacheable request whose twin is already upstream in this isolate joins that call
 * instead of making its own, and reads the leader's events from the start, then live; or, when the
 * leader's stream is piped natively, gets the whole answer when its upstream part ends.
 */
import { CALLER_GONE, GatewayError, toGatewayError, upstreamError } from '../errors/index.ts'
import { onAbort } from '../http/context.ts'
import type { CompletionContext, CompletionHandler } from '../pipeline/index.ts'
import { HEARTBEAT, PULL_ONLY, sseErrorEvent } from '../streaming/openai-chunks.ts'
import { completionId, SSE_HEADERS } from '../upstream/types.ts'
import { lead } from './capture.ts'
import { follow } from './follow.ts'
import { deadlineOf } from './flight.ts'
import type { Flight } from './flight.ts'
import { nowSeconds, render, withCacheHeaders } from './replay.ts'
import type { CacheRun, Plan } from './run.ts'

/** The error an answer that is not a stream carries (OpenAI's `{"error": {...}}`), as a GatewayError. */
async function errorOf(response: Response): Promise<GatewayError> {
  const body = (await response.json().catch(() => undefined)) as { error?: { message?: unknown } } | undefined
  const message = typeof body?.error?.message === 'string' ? body.error.message : `The upstream call answered ${response.status}.`
  return upstreamError(message)
}

/**
 * How a joiner settles an end it got from the flight, not from an upstream call of its own (the answer,
 * the flight's failure, or its caller leaving while it waited or followed): always `cached`, so quota
 * counts the request and never its tokens, whatever the leader is charged. A joiner that asks on its own
 * goes through `lead` with its context untouched: the dispatcher settles that call as any other.
 */
function settleFromFlight(ctx: CompletionContext): CompletionContext['settle'] {
  return (outcome) => ctx.settle({ ...outcome, cached: true })
}

/**
 * Joins the request's flight when one is in the air, else leads a new one. `until`: this caller joined
 * a flight before and asks again (once), with what is left of its wait (`deadlineOf`), not a new one.
 */
export function coalesceOrLead(run: CacheRun, ctx: CompletionContext, next: CompletionHandler, plan: Plan, until?: number): Promise<Response> {
  const flight = run.options.coalesce ? run.flights.get(plan.key.hash) : undefined
  // A flight gone silent lost its leader, whose request ended without taking it out of the map.
  return flight?.live() && (until ?? Infinity) > Date.now() ? join(run, flight, { ctx, next, plan, until }) : lead(run, ctx, next, plan)
}

/** How often a joiner waiting on a piped stream is sent an SSE comment, so it and the proxies on its way keep the connection. */
const HEARTBEAT_MS = 10_000

async function join(run: CacheRun, flight: Flight, call: { ctx: CompletionContext; next: CompletionHandler; plan: Plan; until?: number }): Promise<Response> {
  const { ctx, next, plan, until } = call
  const { request } = ctx
  const { signal } = ctx.c.req.raw
  const settle = settleFromFlight(ctx)
  // One wait in all, however often this caller joins: a second join waits only for what is left of it.
  // The longest a joiner waits on flights: as long as the leader's own call may take.
  const deadline = until ?? deadlineOf(ctx)
  /** This caller's own call: after a second join, or else through the flight in the air now, if any. */
  const again = () => (until ? lead(run, ctx, next, plan) : coalesceOrLead(run, ctx, next, plan, deadline))
  const failed = (): Promise<Response> => {
    // A call stopped for its own caller's reasons failed for no joiner, on a second join too (then `again` leads).
    if (flight.abandoned) return again()
    const error = flight.error ?? upstreamError('The shared upstream call failed.')
    settle({ ok: false, error, producedOutput: false })
    throw error
  }

  if (request.stream && flight.streams) {
    // Registered before any wait: the flight keeps every event from here on for this reader.
    const reader = flight.reader()
    flight.followers++
    // Until the leader's first event, or this caller left (`follow` then lets go at once), or its wait ran out.
    while (flight.end === 0 && flight.state === 'open' && flight.streams && !signal.aborted && Date.now() < deadline) await flight.changed()
    // A flight that ended with no events (a piped one that gave up at once) has nothing to follow; one
    // that sent none in time leaves this caller to its own call (`awaitPiped`, its wait over).
    if (flight.streams && (flight.end > 0 || flight.state === 'failed' || signal.aborted)) {
      if (flight.end === 0 && flight.state === 'failed') {
        flight.unread(reader)
        flight.leave()
        return failed()
      }
      return withCacheHeaders(new Response(follow(flight, reader, ctx, settle), { headers: SSE_HEADERS }), 'COALESCED', 0)
    }
    // Piped natively, or over with nothing to follow: the whole answer (or this caller's own call) below.
    flight.unread(reader)
    flight.followers--
  }
  if (request.stream && flight.state === 'open') return withCacheHeaders(new Response(awaitPiped(flight, ctx, deadline, again), { headers: SSE_HEADERS }), 'COALESCED', 0)

  flight.followers++
  await flight.whole(deadline, signal)
  flight.leave()
  // Its caller left while it waited: let go, and ask nothing on its own for a caller who is gone.
  if (signal.aborted) {
    const gone = upstreamError(CALLER_GONE)
    settle({ ok: false, error: gone, producedOutput: false })
    throw gone
  }
  // The answer turned out too large to share, or the leader never finished in the time its own call had: ask alone.
  if (flight.state === 'open' || !flight.shareable) return again()
  if (flight.state === 'failed') return failed()
  if (!request.stream && flight.json !== undefined) {
    settle({ ok: true, usage: flight.usage })
    return withCacheHeaders(new Response(flight.json, { headers: { 'content-type': 'application/json' } }), 'COALESCED', 0)
  }
  // The leader's answer could not be captured (too large, or nothing podgate replays): ask alone.
  if (!flight.answer) return again()
  settle({ ok: true, usage: flight.usage })
  return render(flight.answer, ctx, identityOf(flight, ctx), 'COALESCED', 0)
}

/** The `id` and `created` of the leader's answer, which its twins share. */
function identityOf(flight: Flight, ctx: CompletionContext): { id: string; created: number } {
  return { id: flight.meta?.id ?? completionId(ctx.request.kind), created: flight.meta?.created ?? nowSeconds() }
}

/**
 * A streaming joiner of a piped leader: answered at once (the leader's first bytes are out, as a live
 * follower's would be), kept open with comments, then given the whole answer replayed; or the flight's
 * error; or, when the leader's caller left or the answer was too large to share, the joiner's own call
 * relayed. Errors after the answer began are SSE error events, as for any stream.
 */
function awaitPiped(flight: Flight, ctx: CompletionContext, deadline: number, again: () => Promise<Response>): ReadableStream<Uint8Array> {
  const settle = settleFromFlight(ctx)
  flight.followers++
  let waiting = true
  let cancelled = false
  /** This caller's own call was started: from then on its dispatcher settles it, not the flight. */
  let asking = false
  let beat = Date.now()
  let own: ReadableStreamDefaultReader<Uint8Array> | undefined
  const stopWaiting = () => {
    if (!waiting) return
    waiting = false
    flight.leave()
  }
  const fail = (controller: ReadableStreamDefaultController<Uint8Array>, error: GatewayError): undefined => {
    controller.enqueue(sseErrorEvent(error))
    controller.close()
    return undefined
  }
  const cancel = (): Promise<void> | undefined => {
    cancelled = true
    stopWaiting()
    if (own) return own.cancel()
    // While its own call is being made, that call settles: `untilEnded` cancels it once it answers.
    if (!asking) settle({ ok: false, error: upstreamError(CALLER_GONE), producedOutput: true })
  }
  // Its caller's leaving ends the wait whether or not the body is ever read or cancelled.
  onAbort(ctx.c.req.raw.signal, cancel)

  /** A heartbeat, or the flight's end written out; or, to relay, the reader of this caller's own call. */
  async function untilEnded(controller: ReadableStreamDefaultController<Uint8Array>): Promise<ReadableStreamDefaultReader<Uint8Array> | undefined> {
    while (flight.state === 'open' && flight.shareable && Date.now() < deadline) {
      await flight.changed(1_000)
      if (cancelled) return undefined
      if (flight.state === 'open' && Date.now() - beat >= HEARTBEAT_MS) {
        beat = Date.now()
        controller.enqueue(HEARTBEAT)
        return undefined
      }
    }
    stopWaiting()
    if (cancelled) return undefined
    if (flight.state === 'ok' && flight.answer) {
      settle({ ok: true, usage: flight.usage })
      controller.enqueue(new Uint8Array(await render(flight.answer, ctx, identityOf(flight, ctx), 'COALESCED', 0).arrayBuffer()))
      controller.close()
      return undefined
    }
    if (flight.state === 'failed' && !flight.abandoned && flight.shareable) {
      const error = flight.error ?? upstreamError('The shared upstream call failed.')
      settle({ ok: false, error, producedOutput: true })
      return fail(controller, error)
    }
    // The leader's caller left, its answer cannot be shared, or it did not end in time: this caller's own call, relayed.
    asking = true
    try {
      const response = await again()
      if (response.status !== 200 || !response.body) throw await errorOf(response)
      return response.body.getReader()
    } catch (error) {
      const failure = toGatewayError(error)
      // Settled by its dispatcher already when the call was made; else (it never went upstream) here.
      ctx.settle({ ok: false, error: failure, producedOutput: false })
      return fail(controller, failure)
    }
  }
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        // Every pull enqueues or closes: a pull that returns with neither is not called again.
        if (!own) {
          const waited = await untilEnded(controller)
          if (waited === undefined) return
          // The caller left while its own call was being made: stop that call too.
          if (cancelled) return void waited.cancel().catch(() => undefined)
          own = waited
        }
        const chunk = await own.read()
        if (chunk.done) controller.close()
        else controller.enqueue(chunk.value)
      },
      cancel,
    },
    PULL_ONLY,
  )
}
