/**
 * Relays the SSE body of Runpod's `/openai/v1/*` route byte for byte, without JavaScript on the byte path.
 *
 * workerd pumps a stream it produced itself (a fetch body, an `IdentityTransformStream` fed by `pipeTo`)
 * natively, and any stream JavaScript produces at ~6× the CPU per chunk (scripts/bench/NOTES.md). So when
 * no byte needs changing (the endpoint writes the caller's model name, and the usage chunk may reach the
 * caller), the upstream body is `tee`d: workerd pipes one branch into the caller's body, and JavaScript
 * reads the other only to learn how the stream ends. It keeps the last chunks (the tail) by reference and
 * parses them once, at the end, for `[DONE]`, the usage chunk and a vLLM error event; per chunk it pays a
 * read and an array push.
 *
 * The ending stays honest: a stream cut before `[DONE]` (upstream broke or closed, idle or total timeout,
 * the key revoked) gets podgate's error event after the piped bytes, and no `[DONE]`. A vLLM error event
 * reaches the caller as vLLM wrote it (OpenAI's `{"error":{...}}`), and the stream settles as failed.
 *
 * Memory: the caller's branch is read as fast as the caller reads; the watched branch as fast as the
 * upstream sends. A caller slower than the model leaves its branch's unread chunks buffered (at most
 * the answer, which `max_tokens` bounds), where the rewriting relay (openai-relay.ts) would hold one chunk.
 */
import { createParser } from 'eventsource-parser'
import { GatewayError } from '../errors/index.ts'
import { sseErrorText } from './openai-chunks.ts'
import type { Usage } from './openai-chunks.ts'
import type { RelayOutcome } from './openai-relay.ts'
import { registerStreamControl } from './stream-control.ts'
import { isRecord, readUsage, upstreamErrorMessage, workerFailure } from './vllm.ts'

export interface OpenAIPipeOptions {
  /** The upstream body, unread: the caller receives exactly its bytes. */
  body: ReadableStream<Uint8Array>
  /** Longest silence, in ms, between two upstream chunks. Default: no limit. */
  idleMs?: number
  /** Time (epoch ms) after which an unfinished stream ends with `upstream_timeout`. Default: no limit. */
  totalDeadline?: number
  /** Called at most once, with the usage chunk's counts, when the stream ended. */
  onUsage?(usage: Usage): void
  /** Called once when the relay is over: `[DONE]` relayed (ok), or the stream cut, failed or left. */
  onEnd?(outcome: RelayOutcome): void
}

export interface OpenAIPipe {
  /** The caller's body. */
  readable: ReadableStream<Uint8Array>
  /**
   * Waits for the upstream's first chunk (without taking it from the caller's branch), within `ms`.
   * Rejects with `upstream_timeout` after `ms`, or with the read's error; resolves `false` when the
   * upstream ended first. Either way the upstream is cancelled when it does not resolve `true`.
   */
  firstChunk(ms: number, message: string): Promise<boolean>
  /** Starts the relay; call once, after `firstChunk` resolved `true`. */
  start(): void
  /** Cancels the upstream without relaying anything (an attempt given up before its first chunk). */
  cancel(): void
}

/** The tail kept for the ending: whole chunks, at least this many bytes once the stream is longer. */
const TAIL_BYTES = 16 * 1024
const IDLE_MESSAGE = 'The model stopped sending for too long.'
const TOTAL_MESSAGE = 'The answer took longer than podgate allows.'
const CUT_MESSAGE = 'The upstream stream ended before the model finished.'
const BROKEN_MESSAGE = 'The upstream connection broke before the model finished.'
const CALLER_GONE = 'The caller went away.'
const encoder = new TextEncoder()
const ignore = () => undefined

/**
 * @example
 * const pipe = pipeOpenAIStream({ body: upstream.body, idleMs: 60_000, onEnd })
 * if (!(await pipe.firstChunk(120_000, 'No first token in time.'))) throw ...
 * pipe.start()
 * return new Response(pipe.readable, { headers: SSE_HEADERS })
 */
export function pipeOpenAIStream(options: OpenAIPipeOptions): OpenAIPipe {
  const idleMs = options.idleMs ?? Infinity
  const totalDeadline = options.totalDeadline ?? Infinity
  const [out, watched] = options.body.tee()
  const reader = watched.getReader()
  const { readable, writable } = identityStream()
  const abort = new AbortController()

  const tail: Uint8Array[] = []
  let tailBytes = 0
  /** The tail still starts at the stream's first byte (nothing was dropped from its front). */
  let tailIsWhole = true
  /** Set when podgate itself ends the stream: a timeout, the control's `end` (revocation), a stuck `[DONE]`. */
  let forced: Ending | undefined
  let broken: unknown
  let lastChunkAt = Date.now()
  let timer: ReturnType<typeof setTimeout> | undefined
  let closeListeners: Array<() => void> | undefined
  let over = false

  function keep(chunk: Uint8Array): void {
    tail.push(chunk)
    tailBytes += chunk.byteLength
    while (tail.length > 1 && tailBytes - tail[0]!.byteLength >= TAIL_BYTES) {
      tailBytes -= tail.shift()!.byteLength
      tailIsWhole = false
    }
  }

  /**
   * Ends the relay early: the caller's bytes stop, `event` goes out last, the upstream is cancelled. It
   * settles at once: the event itself waits for the pipe to let go of the caller's body, which a body the
   * runtime produced (a fetch response) does at once, and a JavaScript-produced one after its pending read.
   */
  function force(ending: Ending): void {
    if (forced || over) return
    forced = ending
    abort.abort(ending.error)
    reader.cancel(ending.error).catch(ignore)
    report(ending, true)
  }

  /** Settles the relay once: the usage, the outcome, then the close listeners. */
  function report(ending: Ending, delivered: boolean): void {
    if (over) return
    over = true
    if (timer !== undefined) clearTimeout(timer)
    timer = undefined
    if (ending.usage) options.onUsage?.(ending.usage)
    options.onEnd?.(!ending.error ? { ok: true } : { ok: false, error: delivered ? ending.error : new GatewayError('upstream_error', CALLER_GONE), started: true })
    const listeners = closeListeners
    closeListeners = undefined
    if (listeners) for (const listener of listeners) listener()
  }

  function arm(ms: number): void {
    timer = setTimeout(onTimer, Math.max(0, ms))
  }

  function onTimer(): void {
    timer = undefined
    if (forced || over) return
    const now = Date.now()
    const idleLeft = lastChunkAt + idleMs - now
    const totalLeft = totalDeadline - now
    if (idleLeft > 0 && totalLeft > 0) return arm(Math.min(idleLeft, totalLeft))
    // `[DONE]` came but the upstream kept the connection open: the answer is whole, end it quietly.
    const end = readTail(tail, tailIsWhole)
    if (end.done) return force({ event: '', usage: end.usage, error: end.error })
    const error = new GatewayError('upstream_timeout', totalLeft <= 0 ? TOTAL_MESSAGE : IDLE_MESSAGE)
    force({ error, event: sseErrorText(error), usage: end.usage })
  }

  async function watch(): Promise<void> {
    if (idleMs !== Infinity || totalDeadline !== Infinity) arm(Math.min(idleMs, totalDeadline - Date.now()))
    try {
      for (;;) {
        const next = await reader.read()
        if (next.done) return
        lastChunkAt = Date.now()
        keep(next.value)
      }
    } catch (error) {
      broken = error
    }
  }

  async function relay(): Promise<void> {
    const piped = out.pipeTo(writable, { preventClose: true, preventAbort: true, signal: abort.signal }).then(
      () => true,
      () => {
        // The caller left (or podgate aborted the pipe): stop reading the upstream for it.
        if (!forced) reader.cancel().catch(ignore)
        return false
      },
    )
    await watch()
    const pipedAll = await piped
    const ending = forced ?? endingOf(pipedAll)
    const delivered = await close(ending.event)
    report(ending, delivered)
  }

  /** How the stream ended, once both branches are done. */
  function endingOf(pipedAll: boolean): Ending {
    if (broken !== undefined) {
      const error = broken instanceof GatewayError ? broken : new GatewayError('upstream_error', BROKEN_MESSAGE, { cause: broken })
      return { error, event: sseErrorText(error) }
    }
    const end = readTail(tail, tailIsWhole)
    // The upstream finished but the caller's branch did not: the caller left before the end.
    if (!pipedAll && end.done) return { error: new GatewayError('upstream_error', CALLER_GONE), event: '', usage: end.usage }
    if (end.error) return { error: end.error, event: '', usage: end.usage }
    if (!end.done) {
      const error = new GatewayError('upstream_error', CUT_MESSAGE)
      return { error, event: sseErrorText(error), usage: end.usage }
    }
    return { event: '', usage: end.usage }
  }

  /** Writes the closing error event (if any) and closes the caller's body; `false` when the caller was gone. */
  async function close(event: string): Promise<boolean> {
    const writer = writable.getWriter()
    try {
      if (event !== '') await writer.write(encoder.encode(event))
      await writer.close()
      return true
    } catch {
      return false
    }
  }

  function cancel(): void {
    reader.cancel().catch(ignore)
    out.cancel().catch(ignore)
  }

  registerStreamControl(readable, {
    end(event) {
      force({ error: new GatewayError('invalid_api_key', 'The stream\'s API key stopped being valid.'), event, usage: readTail(tail, tailIsWhole).usage })
    },
    onClose(listener) {
      if (over) listener()
      else (closeListeners ??= []).push(listener)
    },
  })

  return {
    readable,
    async firstChunk(ms, message) {
      let expired: ReturnType<typeof setTimeout> | undefined
      const timeout = new Promise<never>((_, reject) => {
        expired = setTimeout(() => reject(new GatewayError('upstream_timeout', message)), Math.max(0, ms))
      })
      try {
        const first = await Promise.race([reader.read(), timeout])
        if (first.done) return false
        lastChunkAt = Date.now()
        keep(first.value)
        return true
      } catch (error) {
        cancel()
        throw error
      } finally {
        if (expired !== undefined) clearTimeout(expired)
      }
    },
    start() {
      void relay()
    },
    cancel,
  }
}

/** How the relay ends: the error it settles with (none: whole), the event written last, the usage seen. */
interface Ending {
  error?: GatewayError
  event: string
  usage?: Usage
}

interface TailEnd {
  /** The last event was `[DONE]`. */
  done: boolean
  usage?: Usage
  /** A vLLM error event among the last events. */
  error?: GatewayError
}

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

/** workerd's byte-pumped identity stream; a plain TransformStream where there is none (Node tests). */
function identityStream(): { readable: ReadableStream<Uint8Array>; writable: WritableStream<Uint8Array> } {
  if (typeof IdentityTransformStream === 'function') return new IdentityTransformStream()
  return new TransformStream<Uint8Array, Uint8Array>()
}
