/**
 * The leader of a flight: makes the upstream call for a cacheable request, shares what it produces with
 * joiners, and records the answer for the cache from podgate's own output, or, for a stream the upstream
 * code piped natively, from the text of the pipe's copy (joiners then get the answer when it is whole).
 *
 * Memory is bounded whatever the answer's size. The capture keeps at most `maxEntryBytes` of events:
 * past that the answer is not stored, no one else may join, joiners waiting for the whole answer ask on
 * their own at once, and the shared buffer keeps only what some reader has not read yet, at most
 * `maxEntryBytes` before the upstream reads wait for the slowest reader.
 * The caller's own bytes never wait on the capture.
 */
import { CALLER_GONE, GatewayError, toGatewayError, upstreamError } from '../errors/index.ts'
import type { EventSourceParser, ParserCallbacks } from 'eventsource-parser'
import { concatBytes } from '../http/body.ts'
import { onAbort, waitUntilOf } from '../http/context.ts'
import { parseJson } from '../http/json.ts'
import { captureJsonAnswer, classifyEvent, createAnswerCapture } from './answer.ts'
import { jsonAnswerOf } from '../pipeline/json-answer.ts'
import type { AnswerCapture, CachedAnswer } from './answer.ts'
import { fitsInBytes, writeEntry } from './store.ts'
import { deadlineOf, Flight } from './flight.ts'
import { streamControl } from '../streaming/stream-control.ts'
import { createParser } from 'eventsource-parser'
import { PULL_ONLY } from '../streaming/openai-chunks.ts'
import { metaOf, withCacheHeaders } from './replay.ts'
import type { Usage } from '../streaming/openai-chunks.ts'
import type { CompletionContext, CompletionHandler, StreamCopy } from '../pipeline/index.ts'
import { follow } from './follow.ts'
import type { CacheRun, Plan } from './run.ts'

/**
 * A stream the upstream code piped natively: the caller reads the upstream's bytes, and the recorder gets
 * the answer's text from the pipe's copy (a few large blocks, most at the end) and settles the flight
 * through `copy.end`. Joiners cannot follow it live: they wait for the whole answer and get it replayed
 * (or, past the size bound, ask on their own at once).
 */
function recordPiped(leader: Leader, response: Response): Response {
  leader.flight.stopStreaming()
  // The request stays alive until the upstream's part is recorded, even if its caller leaves first.
  waitUntilOf(leader.ctx.c)(leader.flight.over)
  // A caller who left (before the answer came, or later, told by its request's signal) may never read or
  // cancel its body, which would hold the pipe's copy (and so the joiners waiting for the whole answer) to
  // a chunk a tick: the pipe lets it go and reads the upstream's part at once, for them.
  const { flight } = leader
  onAbort(leader.ctx.c.req.raw.signal, () => {
    if (flight.state === 'open' && flight.followers > 0) streamControl(response.body!)?.detach?.()
  })
  return withCacheHeaders(response, 'MISS', 0)
}

/** What one leader needs besides the flight: its context, the flight's release and the store write. */
interface Leader {
  run: CacheRun
  ctx: CompletionContext
  flight: Flight
  /** Takes the flight out of the coalescing map: no one joins it from then on. */
  release: () => void
  store: (answer: CachedAnswer) => void
  /**
   * The call was stopped for its caller (who left with no joiner waiting): its failure is no answer for
   * anyone, and a joiner still around asks on its own. A call that runs on for joiners after its caller
   * left and then fails failed for them: they get its error.
   */
  callerGone: () => boolean
  /** Stops being shared: no one may join it any more, and its failure is its caller's alone (`callerGone`). */
  halt: () => void
  /** Its caller left mid-answer while joiners wait (its pipe read on for them): once none does, the call stops. */
  left: () => void
}

/** Too large to share or store: joiners ask alone. */
function passOn(leader: Leader, response: Response): Response {
  leader.release()
  leader.flight.succeed({})
  return withCacheHeaders(response, 'MISS', 0)
}

/**
 * Parses the leader's events into the answer capture (at most `maxEntryBytes` of them) and, unless the
 * stream is piped, into the flight, for joiners to follow live. A piped stream settles the flight from
 * how its upstream part ended (`copy.end`), not from how fast the leader's caller reads it.
 */
function streamRecorder(leader: Leader): StreamRecorder {
  const { run, ctx, flight, release } = leader
  const { maxEntryBytes } = run.options
  let capture: AnswerCapture | undefined = createAnswerCapture(ctx.request.kind)
  let meta: Flight['meta']
  let capturedChars = 0
  let sawDone = false
  /** A piped answer too large to share or store: nothing more to record. */
  let gaveUp = false
  /** The answer cannot be shared or stored (too large, or the recorder failed): joiners ask on their own. */
  const giveUp = () => {
    meta = capture?.meta ?? meta
    capture = undefined
    release()
    flight.seal()
    // Joiners waiting for the whole answer need not wait for the end to learn it; live readers read on.
    flight.unshare()
    // A piped flight has no live readers: it is over for joiners, and nothing more needs recording.
    if (copy.piped) {
      gaveUp = true
      flight.stopStreaming()
      flight.succeed({ meta })
      // No joiner waits on it any more: a call that ran on only for them (its caller left) stops.
      flight.onIdle?.()
    }
  }
  const copy: StreamCopy = {
    piped: false,
    text(text) {
      if (gaveUp) return
      try {
        // Made at the first text, once it is known whether the stream is piped: a piped stream's events have
        // no other bound, so one that grows past maxEntryBytes (no entry could hold it) is given up on as it
        // comes instead of held whole. A relayed stream's are bounded by the relay, and its readers need them all.
        // Only that overflow gives up: an unknown field or a bad `retry` is legal noise, ignored as the caller's SDK ignores it.
        ;(parser ??= createParser(copy.piped ? { ...callbacks, maxBufferSize: maxEntryBytes, onError: (error) => error.type === 'max-buffer-size-exceeded' && giveUp() } : callbacks)).feed(text)
      } catch (error) {
        run.log(ctx, { message: 'cache: recording a piped stream failed', cause: String(error) })
        giveUp()
      }
    },
    end(end) {
      // Stopped for the leader's own reasons (its caller left, its key was revoked): joiners ask on their own.
      conclude(end.done && !end.error, end.usage, end.error, end.stopped === 'caller' || end.stopped === 'revoked')
    },
    // The leader's caller left mid-answer: the call runs on while joiners wait for its whole answer, as
    // a call read here does (captureStream), and its caller's key is charged it.
    readOn() {
      if (flight.state !== 'open' || !flight.shareable || flight.followers <= 0) return false
      leader.left()
      return true
    },
  }
  /** The answer is over: shared with joiners and stored when it is whole (it ended with `[DONE]`), else failed. */
  const conclude = (ok: boolean, usage: Usage | undefined, error: GatewayError | undefined, abandoned: boolean) => {
    release()
    // Joiners of a piped flight never follow it: none may start now that it is over.
    if (copy.piped) flight.stopStreaming()
    // Settled first: joiners must not wait on the log or the store.
    const answer = ok && sawDone ? capture?.result(usage) : undefined
    if (ok && sawDone) flight.succeed({ answer, usage, meta: capture?.meta ?? meta })
    else flight.fail(ok || !error ? upstreamError('The stream ended before the model finished.') : error, abandoned)
    if (flight.sealed) run.log(ctx, { level: 'info', message: 'cache: answer over maxEntryBytes, not stored', max_entry_bytes: maxEntryBytes, peak_buffered_chars: flight.peakBufferedChars })
    if (answer) leader.store(answer)
  }
  let parser: EventSourceParser | undefined
  const callbacks: ParserCallbacks = {
    onEvent(event) {
      if (event.data === '[DONE]') {
        sawDone = true
        return
      }
      capturedChars += event.data.length
      // Too large to store: the readers so far follow on, new callers start their own call.
      if (capture && capturedChars > maxEntryBytes) giveUp()
      // A piped stream has no live readers: past the bound, nothing needs its events.
      if (copy.piped && !capture) return
      const value = parseJson(event.data)
      const kind = capture ? capture.accept(value) : classifyEvent(value)
      if (!copy.piped) flight.push({ data: event.data, usage: kind === 'usage', error: kind === 'error' })
    },
    onComment() {
      if (!copy.piped) flight.push({ comment: true })
    },
  }
  return {
    copy,
    feed: copy.text,
    async finish() {
      const outcome = await ctx.outcome
      conclude(outcome.ok, outcome.usage, outcome.ok ? undefined : outcome.error, leader.callerGone() || flight.followers === 0)
    },
  }
}

/** Shares the whole answer with joiners and stores it once the outcome says it ended well. */
async function recordJson(leader: Leader, text: string, json: unknown, response: Response): Promise<Response> {
  const { ctx, flight, release } = leader
  const answer = captureJsonAnswer(ctx.request.kind, json)
  const outcome = await ctx.outcome
  release()
  if (outcome.ok) {
    flight.succeed({ answer, usage: outcome.usage, meta: metaOf(json), json: text })
    if (answer) leader.store(answer)
  } else {
    flight.fail(outcome.error, leader.callerGone())
  }
  return withCacheHeaders(response, 'MISS', 0)
}

interface StreamRecorder {
  /** Handed to the upstream code (CompletionContext.copy): a piped stream's text and end arrive here. */
  copy: StreamCopy
  /** The next piece of the stream's text. */
  feed(text: string): void
  /** After the last piece of a stream podgate read itself: settles the flight from the outcome and stores a whole answer. */
  finish(): Promise<void>
}

/** A stream: read here, not by the leader's response, so joiners never wait on how fast it reads. */
function captureStream(leader: Leader, recorder: StreamRecorder, response: Response): Response {
  const { run, ctx, flight, release } = leader
  const { maxEntryBytes } = run.options
  const decoder = new TextDecoder()
  const source = response.body!.getReader()
  const own = flight.reader()
  const pump = (async () => {
    try {
      for (;;) {
        // Past the bound, the upstream is read no faster than the slowest reader drains the buffer (this
        // request's beat keeps the flight live meanwhile, once its caller left: Flight.leaderLeft).
        while (flight.sealed && flight.bufferedChars > maxEntryBytes && flight.followers > 0) await flight.changed()
        const chunk = await source.read()
        if (chunk.done) break
        recorder.feed(decoder.decode(chunk.value, { stream: true }))
      }
      recorder.feed(decoder.decode())
      await recorder.finish()
    } catch (error) {
      release()
      flight.fail(toGatewayError(error), leader.callerGone())
    }
  })()
  waitUntilOf(ctx.c)(pump)
  // Everyone left before the end: stop the upstream call, as a caller that hangs up would.
  flight.onIdle = () => {
    leader.halt()
    void source.cancel().catch(() => undefined)
  }
  return withCacheHeaders(new Response(follow(flight, own, ctx), response), 'MISS', 0)
}

/** The chunks already read, then the rest of `source`, pulled as the caller reads. */
function concat(head: Uint8Array[], source: ReadableStreamDefaultReader<Uint8Array>): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const chunk = head.shift() ?? (await source.read()).value
        if (chunk === undefined) controller.close()
        else controller.enqueue(chunk)
      },
      cancel: (reason) => source.cancel(reason),
    },
    PULL_ONLY,
  )
}

/**
 * A JSON answer: taken as the dispatcher parsed it, or else read up to the size bound; shared and stored
 * whole. A larger one passes through.
 */
async function captureJson(leader: Leader, response: Response): Promise<Response> {
  const parsed = jsonAnswerOf(response)
  if (parsed) {
    if (!fitsInBytes(parsed.text, leader.run.options.maxEntryBytes)) return passOn(leader, response)
    return recordJson(leader, parsed.text, parsed.body, response)
  }
  const { flight, release } = leader
  const source = response.body!.getReader()
  const chunks: Uint8Array[] = []
  let bytes = 0
  let done = false
  try {
    while (!done && bytes <= leader.run.options.maxEntryBytes) {
      const chunk = await source.read()
      if (chunk.done) done = true
      else (chunks.push(chunk.value), (bytes += chunk.value.byteLength))
    }
  } catch (error) {
    flight.fail(toGatewayError(error), leader.callerGone())
    release()
    throw error
  }
  // This caller gets the rest as it comes.
  if (!done) return passOn(leader, new Response(concat(chunks, source), response))
  const text = new TextDecoder().decode(concatBytes(chunks, bytes))
  return recordJson(leader, text, parseJson(text), new Response(text, response))
}

export async function lead(run: CacheRun, ctx: CompletionContext, next: CompletionHandler, plan: Plan): Promise<Response> {
  const { options, flights, log } = run
  const flight = new Flight(ctx.request.stream, Infinity, deadlineOf(ctx))
  const hash = plan.key.hash
  const release = () => {
    if (flights.get(hash) === flight) flights.delete(hash)
  }
  /** Its caller left mid-answer, as its pipe heard (`Leader.left`), also on a host whose request signal does not say so. */
  let leftByBody = false
  /** Stopped for its caller, with no joiner waiting (`Leader.halt`). */
  let halted = false
  const halt = () => {
    halted = true
    release()
  }
  if (options.coalesce) {
    // Flights whose requests were ended with no word, never asked again, go too (`Flight.live`).
    for (const [other, old] of flights) if (!old.live()) flights.delete(other)
    flights.set(hash, flight)
    // The call is the flight's: its caller leaving stops it only when no joiner follows it, and its
    // request lives on (waitUntil) while the call runs for them. A stopped call takes no joiner: one
    // whose upstream ignores the abort and answers later is cut by its relay (openai-relay.ts).
    const shared = new AbortController()
    const { signal } = ctx.c.req.raw
    const stop = () => (signal.aborted || leftByBody) && (shared.abort(signal.aborted ? signal.reason : upstreamError(CALLER_GONE)), halt())
    ctx.signal = shared.signal
    flight.onIdle = stop
    onAbort(signal, () => {
      flight.leaderLeft()
      if (flight.followers <= 0) stop()
    })
    waitUntilOf(ctx.c)(flight.over)
  }
  const leader: Leader = {
    run,
    ctx,
    flight,
    release,
    store: (answer) => {
      const write = writeEntry(options.tiers(ctx.c), plan.key, { v: 1, storedAt: options.now(), answer }, { ttlSeconds: plan.ttlSeconds, maxEntryBytes: options.maxEntryBytes })
      waitUntilOf(ctx.c)(write.catch((error: unknown) => log(ctx, { message: 'cache write failed', cause: String(error) })))
    },
    callerGone: () => halted,
    halt,
    left: () => {
      leftByBody = true
      // Heard by its pipe, maybe not by its request's signal: the quota stages free its stream slot now.
      ctx.callerLeft()
      flight.leaderLeft()
    },
  }

  // A stream is recorded from the text the upstream code hands over when it pipes natively, else from
  // the body (captureStream).
  const recorder = ctx.request.stream ? streamRecorder(leader) : undefined
  if (recorder) ctx.copy = recorder.copy
  let response: Response
  try {
    response = await next(ctx)
  } catch (error) {
    flight.fail(toGatewayError(error), leader.callerGone())
    leader.release()
    throw error
  }
  if (response.status !== 200 || !response.body) {
    flight.fail(upstreamError('The shared upstream call did not answer.'), true)
    leader.release()
    return withCacheHeaders(response, 'MISS', 0)
  }
  if (!recorder) return captureJson(leader, response)
  return recorder.copy.piped ? recordPiped(leader, response) : captureStream(leader, recorder, response)
}
