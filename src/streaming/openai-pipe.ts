/**
 * Relays the SSE body of Runpod's `/openai/v1/*` route byte for byte, with no JavaScript on the byte path.
 *
 * workerd pumps a body natively (at the runtime's own cost per chunk) only in a few shapes, and at ~6× that
 * cost as soon as JavaScript produces, transforms or reads along (scripts/bench/NOTES.md measures each).
 * The one that keeps podgate in charge of the ending: the upstream body is `tee`d; one branch is piped by
 * workerd into the caller's body (an `IdentityTransformStream`, left open); the other is piped by workerd
 * through a `CompressionStream` and a `DecompressionStream`, which hand it back in a few large blocks.
 * JavaScript reads those with `readAtLeast` (workerd fills a 32 KiB buffer natively, at least 16 KiB per
 * read) into buffers it reuses, and keeps the last block or two, at least 16 KiB (the tail). JavaScript
 * reading a `tee` branch chunk by chunk would switch the whole tee to the slow path, and a sink that reads
 * the copy in large blocks itself (`Response.arrayBuffer()`, or `readAtLeast` on the branch) holds the
 * caller's branch back until the block fills: the compressor reads as the bytes come. When the caller's
 * pipe is done, JavaScript reads the tail for `[DONE]`, the usage chunk and any vLLM error event, writes
 * podgate's error event if the stream was cut, and closes the caller's body. A stage that records the
 * answer (the cache) gets the copy's whole text and its ending as the upstream sends them (`onText`,
 * `onCopyEnd`), however fast the caller reads.
 *
 * Endings, as the rewriting relay's (openai-relay.ts): a stream cut before `[DONE]` (the upstream broke
 * or closed, the total timeout, the key revoked, the caller's first-token wait) ends with podgate's error
 * event and no `[DONE]`. A vLLM error event reaches the caller as vLLM wrote it (OpenAI's `{"error":...}`
 * and then `[DONE]`); the stream settles as failed. Not enforced here: the idle timeout between chunks
 * (watching each chunk is what costs); a stalled stream ends at the total timeout.
 *
 * Memory: the compressor's and inflater's windows and two or three 32 KiB read buffers, whatever the
 * answer's length (reading into a new array per block grew the heap by ~6 MiB over a 10 MB answer, until
 * the next collection); and what the `tee` buffers for the branch that reads slower (a caller slower than
 * the model, or the compressor on a stream sent faster than it deflates).
 */
import { createParser } from 'eventsource-parser'
import { GatewayError } from '../errors/index.ts'
import { sseErrorText } from './openai-chunks.ts'
import type { Usage } from './openai-chunks.ts'
import type { RelayOutcome } from './openai-relay.ts'
import type { CopyEnd } from '../pipeline/stage.ts'
import { registerStreamControl } from './stream-control.ts'
import { isRecord, readUsage, upstreamErrorMessage, workerFailure } from './vllm.ts'

export interface OpenAIPipeOptions {
  /** The upstream body, produced by the runtime (a fetch body): the caller receives exactly its bytes. */
  body: ReadableStream<Uint8Array>
  /** Bytes already read from `body` (the caller waited for the first chunk before answering), sent first. */
  first?: Uint8Array
  /** Aborts the upstream request: stops the model when the caller went away. */
  abortUpstream(reason: GatewayError): void
  /** Time (epoch ms) after which an unfinished stream ends with `upstream_timeout`. Default: no limit. */
  totalDeadline?: number
  /** Called at most once, with the usage chunk's counts, when the stream ended. */
  onUsage?(usage: Usage): void
  /** Called once when the relay is over: `[DONE]` relayed (ok), or the stream cut, failed or left. */
  onEnd?(outcome: RelayOutcome): void
  /**
   * Given the whole answer's text, in pieces and in order, as the copy is read (a few large blocks, most
   * at the end), up to where the upstream ended or broke; then `onCopyEnd`. For a stage that records the
   * answer (the cache); without it only the tail is kept. A forced ending (timeout, revocation) may
   * settle `onEnd` before the last pieces.
   */
  onText?(piece: string): void
  /** Called once when the upstream's part is over, however fast the caller reads the rest. */
  onCopyEnd?(end: CopyEnd): void
}

/** The tail read for the ending: at least this much of the answer's end, in bytes. */
const TAIL_BYTES = 16 * 1024
const TOTAL_MESSAGE = 'The answer took longer than podgate allows.'
const CUT_MESSAGE = 'The upstream stream ended before the model finished.'
const BROKEN_MESSAGE = 'The upstream connection broke before the model finished.'
const CALLER_GONE = 'The caller went away.'
const COMPRESSION = 'deflate-raw'
const encoder = new TextEncoder()
const ignore = () => undefined

/**
 * @example
 * const first = await reader.read() // the first chunk, then the reader's lock released
 * return new Response(pipeOpenAIStream({ body: upstream.body, first: first.value, abortUpstream, onEnd }), { headers: SSE_HEADERS })
 */
export function pipeOpenAIStream(options: OpenAIPipeOptions): ReadableStream<Uint8Array> {
  const { body, first } = options
  const totalDeadline = options.totalDeadline ?? Infinity
  const { readable, writable } = identityStream()
  const stop = new AbortController()
  let forced: { error: GatewayError; event: string } | undefined
  let closeListeners: Array<() => void> | undefined
  let over = false
  /** The upstream is done (its copy ended): the caller reads the rest of a decided stream, nothing cuts it. */
  let upstreamDone = false
  let timer: ReturnType<typeof setTimeout> | undefined
  /** Why podgate stopped the upstream, when it did. */
  let stopped: CopyEnd['stopped']

  /** Settles once: the usage, the outcome, then the close listeners (the revocation check's timer). */
  function report(outcome: RelayOutcome, usage?: Usage): void {
    if (over) return
    over = true
    if (usage) options.onUsage?.(usage)
    options.onEnd?.(outcome)
    const listeners = closeListeners
    closeListeners = undefined
    if (listeners) for (const listener of listeners) listener()
  }

  /**
   * Ends the stream early: the caller's pipe stops and `event` goes out last. It settles at once: the
   * event waits for the pipe to let go of the caller's body, which a runtime-produced upstream body does
   * at once, and a JavaScript-produced one only after its pending read.
   */
  function force(error: GatewayError, event: string): void {
    if (forced || over || upstreamDone) return
    forced = { error, event }
    stopped ??= error.code === 'upstream_timeout' ? 'timeout' : 'revoked'
    stop.abort(error)
    options.abortUpstream(error)
    report({ ok: false, error, started: true })
  }

  async function relay(): Promise<void> {
    if (totalDeadline !== Infinity) {
      timer = setTimeout(() => {
        const error = new GatewayError('upstream_timeout', TOTAL_MESSAGE)
        force(error, sseErrorText(error))
      }, Math.max(0, totalDeadline - Date.now()))
    }
    // The first chunk, read before the tee, goes to the caller first; then the rest, piped.
    const [out, copy] = body.tee()
    // Deflating and inflating again re-chunks the copy natively: JavaScript wakes once per block of
    // tens of KiB, not per chunk, and keeps only the tail. A copy that breaks closes the compressor
    // instead of aborting it, so the end it still holds (the usage, `[DONE]`) is flushed, not lost.
    const compressor = new CompressionStream(COMPRESSION)
    let copyBroke = false
    copy.pipeTo(compressor.writable, { preventAbort: true }).catch(() => {
      copyBroke = true
      compressor.writable.close().catch(ignore)
    })
    const ending = tailOf(compressor.readable.pipeThrough(new DecompressionStream(COMPRESSION)), first, options.onText).then((end) => {
      upstreamDone = true
      if (timer !== undefined) clearTimeout(timer)
      try {
        options.onCopyEnd?.({ ...end, ...(!end.done && !end.error && forced ? { error: forced.error } : {}), ...(stopped ? { stopped } : {}) })
      } catch {
        // The recorder's failure is its own, as in `tailOf`: the caller's ending does not depend on it.
      }
      return end
    })
    if (first) {
      const writer = writable.getWriter()
      // Queued, not awaited: the write settles only once the caller reads it, and a caller who leaves
      // before that would hold the relay here for good. The pipe's writes queue behind it.
      writer.write(first).catch(ignore)
      writer.releaseLock()
    }
    // preventAbort: the caller's body stays writable for the closing event whatever ended the pipe.
    const piped = await out.pipeTo(writable, { preventClose: true, preventAbort: true, signal: stop.signal }).then(
      () => true,
      () => false,
    )
    if (timer !== undefined) clearTimeout(timer)
    const writer = writable.getWriter()
    // The pipe failed: the upstream broke, or the caller left (which only the write of the closing event
    // below tells). Either way nothing more goes to the caller: stop the model, and the copy ends too.
    if (!piped && !forced) {
      // A broken upstream breaks the copy too: one turn of the event loop lets it say so, so that a
      // recorder is told the caller left only when it did.
      await new Promise((resolve) => setTimeout(resolve, 0))
      if (!copyBroke && !forced) stopped ??= 'caller'
      options.abortUpstream(new GatewayError('upstream_error', BROKEN_MESSAGE))
    }
    const end = await ending
    // A tail that ends with `[DONE]` and holds no error event is a whole answer, however the connection
    // ended after it; and when podgate ended it just as the whole answer went out (a revocation racing
    // the end), nothing is written after `[DONE]` either.
    let error = forced?.error ?? end.error
    let event = forced && !(piped && end.done) ? forced.event : ''
    if (!error && !end.done) {
      error = new GatewayError('upstream_error', piped ? CUT_MESSAGE : BROKEN_MESSAGE)
      event = sseErrorText(error)
    }
    if (event !== '') {
      // The piped bytes may stop mid-event: a blank line first ends that fragment (a blank line after a
      // whole event is a no-op), so the error event is read as its own.
      const delivered = await writer.write(encoder.encode(`\n\n${event}`)).then(() => true, () => false)
      if (!delivered && !forced) error = new GatewayError('upstream_error', CALLER_GONE)
    }
    // Settled before the caller's body closes: once it has, the request may end, and with it this code.
    report(error ? { ok: false, error, started: true } : { ok: true }, end.usage)
    await writer.close().catch(ignore)
  }

  registerStreamControl(readable, {
    end(event) {
      force(new GatewayError('invalid_api_key', 'The stream\'s API key stopped being valid.'), event)
    },
    onClose(listener) {
      if (over) listener()
      else (closeListeners ??= []).push(listener)
    },
  })

  relay().catch((cause: unknown) => {
    // A step above failed in a way it does not expect: stop the model and settle, so nothing waits on this.
    const error = new GatewayError('upstream_error', BROKEN_MESSAGE, { cause })
    if (!upstreamDone) options.abortUpstream(error)
    report({ ok: false, error, started: true })
    writable.abort(error).catch(ignore)
  })
  return readable
}

/** The ending read from the answer's last bytes: `first`, then `rest` (read to its end or its break). */
async function tailOf(rest: ReadableStream<Uint8Array>, first: Uint8Array | undefined, onText?: (piece: string) => void): Promise<TailEnd> {
  const tail: Uint8Array[] = []
  let bytes = 0
  let whole = true
  /** Read buffers no longer in the tail, reused for the next read. */
  const free: ArrayBuffer[] = []
  const ours = new WeakSet<ArrayBuffer>()
  let text = onText ? new TextDecoder() : undefined
  // The recorder's failure is its own: the caller's stream and its ending go on without it.
  const feed = (piece: string) => {
    try {
      onText!(piece)
    } catch {
      text = undefined
    }
  }
  const keep = (chunk: Uint8Array) => {
    if (text) feed(text.decode(chunk, { stream: true }))
    tail.push(chunk)
    bytes += chunk.byteLength
    while (tail.length > 1 && bytes - tail[0]!.byteLength >= TAIL_BYTES) {
      const dropped = tail.shift()!
      bytes -= dropped.byteLength
      whole = false
      if (ours.has(dropped.buffer as ArrayBuffer)) free.push(dropped.buffer as ArrayBuffer)
    }
  }
  const finish = () => {
    if (text) feed(text.decode())
    return readTail(tail, whole)
  }
  if (first) keep(first)
  try {
    const blocks = byobReader(rest)
    if (blocks) {
      // At least TAIL_BYTES per read, filled natively: JavaScript wakes once per block, and the buffers are
      // reused (a new array per read would grow the heap with the answer until the next collection).
      for (;;) {
        const buffer = free.pop() ?? new ArrayBuffer(TAIL_BYTES * 2)
        const next = await blocks.readAtLeast(TAIL_BYTES, new Uint8Array(buffer))
        if (next.done || !next.value) return finish()
        ours.add(next.value.buffer as ArrayBuffer)
        keep(next.value)
      }
    }
    const reader = rest.getReader()
    for (;;) {
      const next = await reader.read()
      if (next.done) return finish()
      keep(next.value)
    }
  } catch {
    // What came before the break is kept.
    return finish()
  }
}

type AtLeastReader = ReadableStreamBYOBReader & { readAtLeast(min: number, view: Uint8Array): Promise<ReadableStreamReadResult<Uint8Array>> }

/** workerd's BYOB reader with `readAtLeast`, on a stream the runtime produces; undefined elsewhere (Node). */
function byobReader(stream: ReadableStream<Uint8Array>): AtLeastReader | undefined {
  try {
    const reader = stream.getReader({ mode: 'byob' }) as AtLeastReader
    if (typeof reader.readAtLeast === 'function') return reader
    reader.releaseLock()
  } catch {
    // Not a byte stream.
  }
  return undefined
}

/** How the answer ended, as its last events tell: `[DONE]`, the usage, any vLLM error event. */
type TailEnd = Omit<CopyEnd, 'stopped'>

const decoder = new TextDecoder()
const EVENT_BREAK = /\r\n\r\n|\n\n|\r\r/

/**
 * Reads the ending from the tail chunks: parsed once per stream, from the first event boundary in the
 * tail (its first event may have been cut when older chunks were dropped).
 */
export function readTail(chunks: readonly Uint8Array[], whole: boolean): TailEnd {
  let text = ''
  for (const chunk of chunks) text += decoder.decode(chunk, { stream: true })
  text += decoder.decode()
  if (!whole) {
    const boundary = EVENT_BREAK.exec(text)
    text = boundary ? text.slice(boundary.index + boundary[0].length) : ''
  }
  const end: TailEnd = { done: false }
  const parser = createParser({
    onEvent(event) {
      if (event.data === '[DONE]') {
        end.done = true
        return
      }
      end.done = false
      let value: unknown
      try {
        value = JSON.parse(event.data)
      } catch {
        return
      }
      const message = upstreamErrorMessage(value)
      if (message !== undefined) end.error ??= workerFailure(message)
      else if (isRecord(value)) {
        const usage = readUsage(value.usage)
        if (usage) end.usage = usage
      }
    },
  })
  parser.feed(text)
  return end
}

/** workerd's byte-pumped identity stream; a plain TransformStream where there is none (Node). */
function identityStream(): { readable: ReadableStream<Uint8Array>; writable: WritableStream<Uint8Array> } {
  if (typeof IdentityTransformStream === 'function') return new IdentityTransformStream()
  return new TransformStream<Uint8Array, Uint8Array>()
}
