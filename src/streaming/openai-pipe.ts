/**
 * Relays the SSE body of Runpod's `/openai/v1/*` route byte for byte, with no JavaScript on the byte path.
 *
 * workerd pumps a body natively (at the runtime's own cost per chunk) only in a few shapes, and at ~6× that
 * cost as soon as JavaScript produces, transforms or waits on every chunk (scripts/bench/NOTES.md measures
 * each). The one that keeps podgate in charge of the ending: the upstream body is `tee`d; one branch is
 * piped by workerd into the caller's body (an `IdentityTransformStream`, left open); the other (the copy)
 * is read by JavaScript now and then, never per chunk: a BYOB read takes everything the branch holds (up
 * to 32 KiB a read, into a buffer it reuses), and once the copy is drained no read waits on it until the
 * next tick (once the caller's part is over, or the stream is being ended, it reads the rest at once).
 * A tick lasts 25 ms to 1 s: shorter while the copy brings a lot (so it holds little), longer
 * while it brings little (so a slow model wakes JavaScript about once a second, not once a token).
 * JavaScript keeps the last 16 to 32 KiB (the tail). Reading the copy per chunk would put a JavaScript
 * wake-up on every chunk, and a read that waits for a block to fill (`readAtLeast` on the branch) holds
 * the caller's branch back until it fills. When the caller's pipe is done, JavaScript reads the rest of
 * the copy and the tail for `[DONE]`, the usage chunk and any vLLM error event, writes podgate's error
 * event if the stream was cut, and closes the caller's body. A stage that records the answer (the cache)
 * gets the copy's whole text and its ending as the copy is read (`onText`, `onCopyEnd`), however fast the
 * caller reads.
 *
 * Endings, as the rewriting relay's (openai-relay.ts): a stream cut before `[DONE]` (the upstream broke
 * or closed, the idle or total timeout, the key revoked, the caller's first-token wait) ends with
 * podgate's error event and no `[DONE]`. A vLLM error event reaches the caller as vLLM wrote it (OpenAI's
 * `{"error":...}` and then `[DONE]`); the stream settles as failed. The idle timeout counts from the last
 * read of the copy that brought bytes, and cuts only while a read waits for more, so it ends a stalled
 * stream between `idleMs` and `idleMs` + one tick after its last byte (a tick is at most 1 s, and at
 * most `idleMs`). A total timeout or a revocation first lets the copy read what the upstream sent: an
 * answer already whole is not cut. An upstream that keeps its connection open after `[DONE]` past a
 * timeout is only disconnected: the answer ends as whole. A caller who leaves (its body cancelled, or
 * `signal` aborted) stops the upstream and the copy, so an upstream body its abort does not reach is
 * cancelled too; while others wait for the answer (a cache flight's joiners), the pipe is detached
 * instead, when the caller leaves before it was handed its body (`detach`) or mid-answer (`readOn`),
 * and the copy then reads the upstream's part at once.
 *
 * Memory: the tail's two or three 16 KiB blocks and one 32 KiB read buffer, whatever the answer's length
 * (reading into a new array per read grew the heap by ~6 MiB over a 10 MB answer, until the next
 * collection); and what the `tee` buffers for the branch that reads slower: the copy, for at most one
 * tick, and a caller slower than the model.
 */
import { createParser } from 'eventsource-parser'
import { CALLER_GONE, GatewayError, upstreamError } from '../errors/index.ts'
import { onAbort } from '../http/context.ts'
import { BEFORE_OUTPUT, OPENAI_DIALECT } from './dialects.ts'
import type { Dialect, StreamEnding } from './dialects.ts'
import { countedUsage, encoder } from './openai-chunks.ts'
import type { Usage } from './openai-chunks.ts'
import type { RelayOutcome } from './openai-relay.ts'
import type { CopyEnd } from '../pipeline/stage.ts'
import { registerStreamControl, runListeners } from './stream-control.ts'

/**
 * The upstream body, produced by the runtime (a fetch body): the caller receives exactly its bytes. Either
 * whole, or split by `splitBody` with its first chunk (`first`) already read from the copy (the caller
 * waited for it before answering), which the caller's branch still holds.
 */
export type OpenAIPipeOptions = PipeOptions & ({ body: ReadableStream<Uint8Array>; first?: undefined } | { body: SplitBody; first: Uint8Array | undefined })

interface PipeOptions {
  /** Aborts the upstream request: stops the model when the caller went away. */
  abortUpstream(reason: GatewayError): void
  /** Time (epoch ms) after which an unfinished stream ends with `upstream_timeout`. Default: no limit. */
  totalDeadline?: number
  /** Longest time, in ms, the upstream may send nothing before the stream ends with `upstream_timeout`. Default: no limit. */
  idleMs?: number
  /** Called at most once, with the usage chunk's counts, when the stream ended. */
  onUsage?(usage: Usage): void
  /** Called once when the relay is over: `[DONE]` relayed (ok), or the stream cut, failed or left. */
  onEnd?(outcome: RelayOutcome): void
  /**
   * Given the whole answer's text, in pieces and in order, as the copy is read (once a tick, and the rest
   * at the end), up to where the upstream ended or broke; then `onCopyEnd`. For a stage that records the
   * answer (the cache); without it only the tail is kept. A forced ending (timeout, revocation) may
   * settle `onEnd` before the last pieces.
   */
  onText?(piece: string): void
  /** Called once when the upstream's part is over, however fast the caller reads the rest. */
  onCopyEnd?(end: CopyEnd): void
  /**
   * Asked when the caller left mid-answer (its body cancelled): true detaches the pipe, as `detach` does,
   * so the copy reads the upstream's part on, at once, for others (a cache flight's joiners), instead of
   * stopping the upstream. Default: stop.
   */
  readOn?(): boolean
  /** How the stream ends, and podgate's error event in it. Default: OpenAI's (`[DONE]`). */
  dialect?: Dialect
  /**
   * Aborted when the caller left (a coalesced leader's: when its caller and every twin did). The stream
   * then stops as when the caller's body is cancelled, also when no one will ever read or cancel that
   * body (the caller left before it was handed over), which an upstream that ignores its abort needs.
   */
  signal?: AbortSignal
}

/** The upstream body as the pipe reads it: `out` piped to the caller natively, `copy` read by JavaScript. */
export interface SplitBody {
  out: ReadableStream<Uint8Array>
  copy: ReadableStream<Uint8Array>
}

/**
 * Splits an upstream body before its first chunk is read, so that the first chunk can be read from the
 * copy: the caller's branch then carries every byte natively, and JavaScript writes none of them (a
 * same-machine A/B found no CPU difference from writing the first chunk: NOTES.md). Cancels both branches when the
 * stream is not piped after all (`cancel`): the upstream is cancelled only once both are.
 */
export function splitBody(body: ReadableStream<Uint8Array>): SplitBody & { cancel(reason?: unknown): void } {
  const [out, copy] = body.tee()
  return {
    out,
    copy,
    cancel(reason) {
      out.cancel(reason).catch(ignore)
      copy.cancel(reason).catch(ignore)
    },
  }
}

/** The tail read for the ending: at least this much of the answer's end, in bytes. */
const TAIL_BYTES = 16 * 1024
/** The tail is kept in blocks of this size, reused. */
const BLOCK_BYTES = 16 * 1024
/** Most bytes one read of the copy takes. */
const READ_BYTES = 32 * 1024
/** Most bytes the tail keeps to hold a dialect's long last event whole (a Responses stream's repeats the answer). */
const LONG_EVENT_BYTES = 4 * 1024 * 1024
/** Ticks between the copy's drains, in ms: the bounds a tick moves within (it starts at the shortest). */
const TICK_MIN_MS = 25
const TICK_MAX_MS = 1000
/** How long a failed caller pipe waits for the copy to tell whether the upstream broke, in ms. */
const BREAK_GRACE_MS = 50
/** The timeout errors' messages, shared with the relay (openai-relay.ts). */
export const TOTAL_MESSAGE = 'The answer took longer than podgate allows.'
export const IDLE_MESSAGE = 'The model stopped sending for too long.'
const EVENT_BREAK = /\r\n\r\n|\n\n|\r\r/

const decoder = new TextDecoder()
export const ignore = () => undefined
const CUT_MESSAGE = 'The upstream stream ended before the model finished.'
const BROKEN_MESSAGE = 'The upstream connection broke before the model finished.'

/**
 * @example
 * const split = splitBody(upstream.body)
 * const reader = split.copy.getReader()
 * const first = await reader.read() // the first chunk, then the reader's lock released
 * reader.releaseLock()
 * return new Response(pipeOpenAIStream({ body: split, first: first.value, abortUpstream, onEnd }), { headers: SSE_HEADERS })
 */
export function pipeOpenAIStream(options: OpenAIPipeOptions): ReadableStream<Uint8Array> {
  const { body, first } = options
  const dialect = options.dialect ?? OPENAI_DIALECT
  const totalDeadline = options.totalDeadline ?? Infinity
  const idleMs = options.idleMs ?? Infinity
  const { readable, writable } = identityStream()
  // A tick no longer than the idle timeout, so that a read waits again before the idle clock runs out.
  const pace = pacer(Math.max(TICK_MIN_MS, Math.min(TICK_MAX_MS, idleMs)))
  const stop = new AbortController()
  let forced: { error: GatewayError; event: string } | undefined
  const closeListeners: Array<() => void> = []
  let over = false
  /** The upstream is done (its copy ended): the caller reads the rest of a decided stream, nothing cuts it. */
  let upstreamDone = false
  let timer: ReturnType<typeof setTimeout> | undefined
  /** Why podgate stopped the upstream, when it did. */
  let stopped: CopyEnd['stopped']
  /** Stops the copy's reads: its ending is then what it read. */
  const copyStop = new AbortController()
  /** The answer's last bytes, as the copy reads them. */
  const tail = tailBlocks(dialect)
  /** The caller left (`options.signal`): its body may never be read, so nothing is written to it. */
  let left = false
  /** The caller left while others wait for the answer: the upstream's part is read on for them (`detach`, `readOn`). */
  let detached = false
  /** Holds the caller's body once the pipe let go of it: what ends it from then on. */
  let writer: WritableStreamDefaultWriter<Uint8Array> | undefined

  /** Settles once: the usage, the outcome (with the events' count), then the close listeners (the revocation check's timer). */
  function report(outcome: RelayOutcome, end?: TailEnd): void {
    if (over) return
    over = true
    if (end?.usage) options.onUsage?.(end.usage)
    options.onEnd?.({ ...outcome, estimate: end?.estimate })
    runListeners(closeListeners)
  }

  /** The copy's ending, once the pipe has started. */
  let copyEnding: Promise<TailEnd> | undefined
  /** A forced ending waits for the copy (`force`): later ones are not needed. */
  let deciding = false

  /**
   * Ends the stream early from outside the copy's reads (the total timeout, a revocation): a copy
   * between two ticks may not have pulled the upstream's end yet (with a caller reading slowly, nothing
   * else pulls it), so it first reads at once, and the stream is cut only if the upstream's part is
   * still not over after that (at most BREAK_GRACE_MS later). An answer the upstream already finished
   * is never cut.
   */
  function force(error: GatewayError, event: string): void {
    if (forced || over || upstreamDone || deciding) return
    deciding = true
    pace.hurry()
    void settledWithin(copyEnding, BREAK_GRACE_MS).then(() => {
      deciding = false
      cut(error, event)
    })
  }

  /**
   * Ends the stream now: the caller's pipe stops and `event` goes out last. It settles at once, from
   * what the copy read (its usage chunk, if one came): the event waits for the pipe to let go of the
   * caller's body, which a runtime-produced upstream body does at once, and a JavaScript-produced one
   * only after its pending read.
   */
  function cut(error: GatewayError, event: string): void {
    if (forced || over || upstreamDone) return
    // What the copy read so far, parsed (not its last bytes matched: a proxy's keep-alives may follow `[DONE]`).
    const read = tail.end()
    if (read.done) {
      // The upstream sent `[DONE]` and kept its connection open: only the connection is ended. A fetch
      // body then breaks after the whole answer, both branches keep what they hold, and the stream ends
      // as whole. A body that ignores the abort (a JavaScript stream from a custom fetch) is settled here a
      // moment later, as whole too: the copy stops, the stream settles from what it read, and the caller's
      // pipe is stopped (workerd lets go of such a body only once its pending read ends, so the caller's
      // body stays open until then or until the caller leaves).
      options.abortUpstream(error)
      void settledWithin(copyEnding, BREAK_GRACE_MS).then(() => {
        if (upstreamDone || over) return
        copyStop.abort()
        void copyEnding?.then((end) => {
          // Decided as the ending below decides it, from all the copy read.
          const failure = end.error ?? (end.done ? undefined : upstreamError(CUT_MESSAGE))
          report(failure ? { ok: false, error: failure, started: !!end.output } : { ok: true }, end)
          stop.abort(error)
        })
      })
      return
    }
    forced = { error, event }
    stopped ??= error.code === 'upstream_timeout' ? 'timeout' : 'revoked'
    stop.abort(error)
    options.abortUpstream(error)
    pace.hurry()
    // Settled from what the copy read so far: a usage chunk already in hand is what the answer cost.
    report({ ok: false, error, started: !!read.output }, read)
  }

  /**
   * A read of the copy under the idle timeout, `since` the last read that brought bytes: the upstream
   * has sent nothing since then if this read still waits `idleMs` after it. Only a waiting read is timed
   * (never a tick), so the cut can be immediate: nothing unread is left behind.
   */
  function watched<T>(read: Promise<T>, since: number): Promise<T> {
    const idle = setTimeout(() => {
      const error = new GatewayError('upstream_timeout', IDLE_MESSAGE)
      cut(error, dialect.errorEvent(error))
    }, Math.max(0, since + idleMs - Date.now()))
    return read.finally(() => clearTimeout(idle))
  }

  async function relay(): Promise<void> {
    if (totalDeadline !== Infinity) {
      timer = setTimeout(() => {
        const error = new GatewayError('upstream_timeout', TOTAL_MESSAGE)
        force(error, dialect.errorEvent(error))
      }, Math.max(0, totalDeadline - Date.now()))
    }
    // A split body's first chunk, read from its copy, is still in its caller's branch.
    const { out, copy } = 'copy' in body ? body : splitBody(body)
    let copyBroke = false
    const reading: CopyReading = { onText: options.onText, pace: pace.wait, onBreak: () => (copyBroke = true), stop: copyStop.signal, tail }
    if (idleMs !== Infinity) reading.watch = watched
    const ending = tailOf(copy, first, reading).then((end) => {
      upstreamDone = true
      if (timer !== undefined) clearTimeout(timer)
      try {
        options.onCopyEnd?.({ ...end, ...(!end.done && !end.error && forced ? { error: forced.error } : {}), stopped })
      } catch {
        // The recorder's failure is its own, as in `tailOf`: the caller's ending does not depend on it.
      }
      return end
    })
    copyEnding = ending
    // preventAbort: the caller's body stays writable for the closing event whatever ended the pipe.
    const piped = await out.pipeTo(writable, { preventClose: true, preventAbort: true, signal: stop.signal }).then(
      () => true,
      () => false,
    )
    // The upstream's part is over for the caller: the copy is read to its end without waiting for ticks.
    pace.hurry()
    writer = writable.getWriter()
    // The pipe failed: the upstream broke, or the caller left (which its request's signal tells, when it
    // was given one, and otherwise only the write of the closing event below). Either way nothing more
    // goes to the caller: stop the model, and the copy ends too, unless others wait for the answer
    // (`readOn`). (A pipe stopped after the copy ended whole, or detached, is over, not failed.)
    if (!piped && !forced && !upstreamDone && !detached) {
      // A broken upstream breaks the copy too: a moment lets it say so, so that a recorder is told the
      // caller left only when it did.
      await settledWithin(ending, BREAK_GRACE_MS)
      const callerLeft = !copyBroke && !forced && !upstreamDone
      // Others wait for this answer: the copy, hurried, reads the upstream's part on for them.
      if (callerLeft && !left && options.readOn?.()) detached = true
      else {
        if (callerLeft) stopped ??= 'caller'
        options.abortUpstream(upstreamError(BROKEN_MESSAGE))
        // The caller left: the copy stops too, so that an upstream body the abort does not reach (a custom
        // fetch that ignores its signal) is cancelled, both branches being, rather than read to its end.
        if (stopped === 'caller') copyStop.abort()
      }
    }
    // A detached stream's upstream part is read on for others, under the total timeout that held it for
    // the caller (the copy's ending clears it). Otherwise nothing more is read for anyone.
    if (timer !== undefined && !detached) clearTimeout(timer)
    const end = await ending
    // A tail that ends with `[DONE]` and holds no error event is a whole answer, however the connection
    // ended after it; and when podgate ended it just as the whole answer went out (a revocation racing
    // the end), nothing is written after `[DONE]` either.
    let error = forced?.error ?? end.error
    let event = forced && !(piped && end.done) ? forced.event : ''
    if (!error && !end.done) {
      error = upstreamError(piped || detached ? CUT_MESSAGE : BROKEN_MESSAGE)
      event = dialect.errorEvent(error)
    }
    // As when the caller's body is cancelled and the event cannot be written.
    if (left && !forced && !end.error && !end.done) error = upstreamError(CALLER_GONE)
    if (event !== '' && !left && !detached) {
      // The piped bytes may stop mid-event: a blank line first ends that fragment (a blank line after a
      // whole event is a no-op), so the error event is read as its own.
      const delivered = await writer.write(encoder.encode(`\n\n${event}`)).then(() => true, () => false)
      if (!delivered && !forced) error = upstreamError(CALLER_GONE)
    }
    // Settled before the caller's body closes: once it has, the request may end, and with it this code.
    report(error ? { ok: false, error, started: !!end.output } : { ok: true }, end)
    await writer.close().catch(ignore)
  }

  registerStreamControl(readable, {
    end(event) {
      force(new GatewayError('invalid_api_key', 'The stream\'s API key stopped being valid.'), event)
    },
    onClose(listener) {
      if (over) listener()
      else closeListeners.push(listener)
    },
    detach() {
      if (over || left || forced) return
      detached = true
      // Its pipe ends (the caller's branch cancelled), also when something holds the caller's body
      // locked (a reader that will never read again); the copy, hurried, reads the rest at once.
      stop.abort(upstreamError(CALLER_GONE))
      // An unlocked body is let go too, once handed over: a Response (a stage's or Hono's copy of it)
      // cannot be made of a cancelled body.
      setTimeout(() => readable.cancel().catch(ignore), 0)
    },
  })

  // The caller left: its pipe stops (the caller's branch cancelled), and the ending above stops the copy.
  onAbort(options.signal, () => {
    if (over || left) return
    left = true
    const gone = upstreamError(CALLER_GONE)
    // A body no one reads holds the pipe's pending write, and so the pipe, until it is cancelled (a body
    // the runtime reads is locked: its own cancel, when the caller's connection ends, does the same).
    readable.cancel(gone).catch(ignore)
    stop.abort(gone)
    // A detached stream's pipe is over already: its copy is what still reads the upstream.
    if (detached) {
      stopped ??= 'caller'
      options.abortUpstream(gone)
      copyStop.abort()
    }
  })

  relay().catch((cause: unknown) => {
    // A step above failed in a way it does not expect: stop the model and settle, so nothing waits on this.
    const error = upstreamError(BROKEN_MESSAGE, { cause })
    if (!upstreamDone) options.abortUpstream(error)
    report({ ok: false, error, started: true })
    // Through the writer once it holds the caller's body: the body's own abort then fails, and it would never end.
    void (writer ?? writable).abort(error).catch(ignore)
  })
  return readable
}

/** Resolves once `promise` settles (however) or `ms` have passed, whichever comes first. */
function settledWithin(promise: Promise<unknown> | undefined, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const elapsed = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))
  return Promise.race([promise?.then(ignore, ignore), elapsed]).then(() => {
    if (timer !== undefined) clearTimeout(timer)
  })
}

/** How `tailOf` reads the copy. */
interface CopyReading {
  onText?: (piece: string) => void
  /** Waits before the next read once the copy is drained, given the bytes that drain brought (none: the first wait). */
  pace: (drained?: number) => Promise<void>
  /** Wraps each read (the idle timeout), given when the last read that brought bytes settled. */
  watch?: <T>(read: Promise<T>, since: number) => Promise<T>
  /** Called when the copy broke (the upstream did). */
  onBreak: () => void
  /** Aborted: the copy stops reading and ends with what it read. */
  stop: AbortSignal
  /** Where the read bytes' tail is kept (the pipe reads it too, to settle a stream it cuts). */
  tail: Tail
}

/** The ending read from the answer's last bytes: `first`, then `rest` (read to its end or its break). */
async function tailOf(rest: ReadableStream<Uint8Array>, first: Uint8Array | undefined, reading: CopyReading): Promise<TailEnd> {
  const { tail } = reading
  let text = reading.onText ? new TextDecoder() : undefined
  // The recorder's failure is its own: the caller's stream and its ending go on without it.
  const feed = (piece: string) => {
    try {
      reading.onText!(piece)
    } catch {
      text = undefined
    }
  }
  const take = (chunk: Uint8Array) => {
    if (text) feed(text.decode(chunk, { stream: true }))
    tail.append(chunk)
  }
  const watch = reading.watch ?? (<T>(read: Promise<T>) => read)
  let since = Date.now()
  const finish = () => {
    if (text) feed(text.decode())
    return tail.end()
  }
  if (first) take(first)
  try {
    const reader = byobReader(rest)
    const chunks = reader ? undefined : rest.getReader()
    reading.stop.addEventListener('abort', () => void (reader ?? chunks)!.cancel().catch(() => undefined), { once: true })
    if (reader) {
      // Each read takes what the branch holds, into one buffer reused (a new array per read would grow
      // the heap with the answer until the next collection). A read that leaves room drained the branch:
      // the next one waits for a tick, so no read waits on the copy meanwhile and a chunk wakes nothing.
      let buffer = new ArrayBuffer(READ_BYTES)
      let drained = 0
      // The first read waits for a tick too, as every later one does: no read waits on the copy between
      // ticks, so no single chunk wakes JavaScript.
      await reading.pace()
      for (;;) {
        const next = await watch(reader.read(new Uint8Array(buffer)), since)
        if (next.done || !next.value) return finish()
        buffer = next.value.buffer as ArrayBuffer
        take(next.value)
        since = Date.now()
        drained += next.value.byteLength
        if (next.value.byteLength < buffer.byteLength) {
          await reading.pace(drained)
          drained = 0
        }
      }
    }
    for (;;) {
      const next = await watch(chunks!.read(), since)
      if (next.done) return finish()
      take(next.value)
      since = Date.now()
    }
  } catch {
    // What came before the break is kept.
    reading.onBreak()
    return finish()
  }
}

/**
 * The answer's last bytes (at least TAIL_BYTES of them when it has that many), copied into reused blocks;
 * for a dialect whose last event is long, from where the last event began (up to LONG_EVENT_BYTES).
 */
function tailBlocks(dialect: Dialect): Tail {
  const blocks: Array<{ bytes: Uint8Array; length: number }> = []
  const free: Uint8Array[] = []
  let size = 0
  let whole = true
  /** Bytes appended, and where the last event began (after a blank line), from the start. */
  let appended = 0
  let eventStart = 0
  /** The two bytes before the chunk: the last one in the low byte. */
  let previous = 0
  /** Where the first block kept begins, from the start. */
  let kept = 0
  return {
    append(chunk) {
      if (dialect.longLast) {
        // An event begins with a field's name (a letter, above `:`): a comment or a blank line after the
        // last event (a proxy's keep-alive) begins none, and the last event stays whole.
        const byte = (i: number) => (i >= 0 ? chunk[i]! : (previous >> (-1 - i) * 8) & 255)
        for (let i = chunk.byteLength - 1; i >= 0; i--) {
          if (chunk[i]! > COLON && byte(i - 1) === LF && byte(i - 2) === LF) {
            eventStart = appended + i
            break
          }
        }
        previous = (byte(chunk.byteLength - 2) << 8) | byte(chunk.byteLength - 1)
      }
      appended += chunk.byteLength
      for (let offset = 0; offset < chunk.byteLength; ) {
        let last = blocks.at(-1)
        if (!last || last.length === last.bytes.byteLength) {
          last = { bytes: free.pop() ?? new Uint8Array(BLOCK_BYTES), length: 0 }
          blocks.push(last)
        }
        const n = Math.min(last.bytes.byteLength - last.length, chunk.byteLength - offset)
        last.bytes.set(chunk.subarray(offset, offset + n), last.length)
        last.length += n
        size += n
        offset += n
      }
      while (blocks.length > 1 && size - blocks[0]!.length >= TAIL_BYTES && (kept + blocks[0]!.length <= eventStart - 2 || size > LONG_EVENT_BYTES || !dialect.longLast)) {
        const dropped = blocks.shift()!
        size -= dropped.length
        kept += dropped.length
        whole = false
        free.push(dropped.bytes)
      }
    },
    end: () => readTail(blocks.map((block) => block.bytes.subarray(0, block.length)), whole, dialect, appended),
  }
}

interface Tail {
  append(chunk: Uint8Array): void
  end(): TailEnd
}

const LF = 0x0a
const COLON = 0x3a

/**
 * Paces the copy's reads: each wait lasts one tick, which halves after a drain of a read's worth or more
 * and doubles after one of under a quarter of that, within TICK_MIN_MS..`longest`; once hurried (the
 * caller's pipe is over), no wait lasts.
 */
function pacer(longest: number): { wait(drained?: number): Promise<void>; hurry(): void } {
  let tick = TICK_MIN_MS
  let hurried = false
  let wake: (() => void) | undefined
  return {
    wait(drained) {
      if (hurried) return Promise.resolve()
      // The first wait (no drain yet) keeps the shortest tick.
      if (drained !== undefined && drained >= READ_BYTES) tick = Math.max(TICK_MIN_MS, tick / 2)
      else if (drained !== undefined && drained < READ_BYTES / 4) tick = Math.min(longest, tick * 2)
      return new Promise<void>((resolve) => {
        const timer = setTimeout(done, tick)
        function done() {
          clearTimeout(timer)
          wake = undefined
          resolve()
        }
        wake = done
      })
    },
    hurry() {
      hurried = true
      wake?.()
    },
  }
}

/** Whether a stream takes a BYOB reader: one the runtime produces (a fetch body), not a JavaScript stream. */
export function isByteStream(stream: ReadableStream<Uint8Array>): boolean {
  const reader = byobReader(stream)
  reader?.releaseLock()
  return reader !== undefined
}

/** workerd's BYOB reader, on a stream the runtime produces; undefined for a JavaScript stream. */
function byobReader(stream: ReadableStream<Uint8Array>): ReadableStreamBYOBReader | undefined {
  try {
    return stream.getReader({ mode: 'byob' })
  } catch {
    return undefined
  }
}

/**
 * How the answer ended, as its last events tell: `[DONE]`, the usage, any vLLM error event; `output`: an
 * event other than those `BEFORE_OUTPUT` names came before any error (or the tail was cut: more came), so
 * the answer started; `estimate`: the events read, about a token each (see `readTail`).
 */
type TailEnd = StreamEnding & { output?: boolean; estimate?: Usage }

/**
 * Reads the ending from the tail chunks: parsed once per stream, from the first event boundary in the
 * tail (its first event may have been cut when older chunks were dropped). The events of the whole
 * answer (`total` bytes, the tail's by default) are estimated at the tail's density, so counting them
 * costs the copy's reads one addition each: in vLLM's chat and completions streams an event is about a
 * token, and a long answer's events are much alike in size.
 */
export function readTail(chunks: readonly Uint8Array[], whole: boolean, dialect: Dialect = OPENAI_DIALECT, total?: number): TailEnd {
  let text = ''
  let size = 0
  for (const chunk of chunks) {
    text += decoder.decode(chunk, { stream: true })
    size += chunk.byteLength
  }
  text += decoder.decode()
  if (!whole) {
    const boundary = EVENT_BREAK.exec(text)
    text = boundary ? text.slice(boundary.index + boundary[0].length) : ''
  }
  const end: TailEnd = { done: false, output: !whole }
  // A cut tail's first boundary ends an event too.
  let events = whole ? 0 : 1
  createParser({
    onEvent(event) {
      events++
      dialect.read(event, end)
      end.output ||= !end.error && !BEFORE_OUTPUT.test(event.event ?? '')
    },
  }).feed(text)
  // A Messages stream that failed before any token: its prompt's count is what it cost.
  if (!end.output) end.usage ??= end.prompt
  else end.estimate = countedUsage(Math.round((events * (total ?? size)) / size), end.prompt?.prompt_tokens)
  return end
}

/** workerd's byte-pumped identity stream; a plain TransformStream where there is none (Node). */
function identityStream(): { readable: ReadableStream<Uint8Array>; writable: WritableStream<Uint8Array> } {
  if (typeof IdentityTransformStream === 'function') return new IdentityTransformStream()
  return new TransformStream<Uint8Array, Uint8Array>()
}
