/**
 * Relays the SSE body of Runpod's `/openai/v1/*` route (vLLM's own stream) to the caller.
 *
 * Owns: renaming `model` to the caller's alias, keeping the usage chunk for podgate (and the caller only
 * if they asked), the idle and total timeouts, and ending honestly: a stream that breaks, errors, times
 * out or stops before `[DONE]` ends with an OpenAI error event and no `[DONE]`, so a cut answer never
 * looks whole.
 *
 * It is one pull-based `ReadableStream` that reads the upstream reader itself, not a stage to
 * `pipeThrough`: every JavaScript stream stage costs workerd a turn per chunk, which is most of the CPU
 * per relayed token (scripts/bench/NOTES.md). Reading directly also keeps the ending in podgate's hands:
 * a broken upstream becomes an error event on a cleanly closed stream instead of an errored one that
 * discards queued output.
 */
import { createParser } from 'eventsource-parser'
import type { EventSourceMessage } from 'eventsource-parser'
import { CALLER_GONE, GatewayError, toGatewayError, upstreamError } from '../errors/index.ts'
import { onAbort } from '../http/context.ts'
import { countedUsage, DONE_TEXT, encoder, PULL_ONLY, sseErrorText } from './openai-chunks.ts'
import type { Usage } from './openai-chunks.ts'
import { DEFAULT_MAX_EVENT_CHARS, isRecord, readUsage, refuseOversizedEvent, upstreamErrorMessage, workerFailure } from './vllm.ts'
import { registerStreamControl, runListeners } from './stream-control.ts'
import { IDLE_MESSAGE, ignore, TOTAL_MESSAGE } from './openai-pipe.ts'

export interface OpenAIRelayOptions {
  /** The upstream body's reader. The relay reads it to the end, and cancels it when it stops early. */
  source: ReadableStreamDefaultReader<Uint8Array>
  /** Bytes already read from `source` (a caller waiting for the first bytes), relayed before the rest. */
  first?: Uint8Array
  /** The name written into every chunk's `model` (`ResolvedModel.streamedModelName`). */
  model: string
  /** Keep the upstream usage chunk in the output: the caller set `stream_options.include_usage`. */
  includeUsage: boolean
  /** Called at most once, when the upstream usage chunk arrives (whether or not it is relayed). */
  onUsage?(usage: Usage): void
  /** Called once when the relay ends: `[DONE]` relayed (ok), or an error event written / the caller gone. */
  onEnd?(outcome: RelayOutcome): void
  /** Aborts when the caller goes away: the relay settles then (at once if it already has), whether or not its body is read or cancelled, and cancels `source`. Default: none. */
  signal?: AbortSignal
  /** Most characters one event may buffer before the stream is refused. Default 4 Mi. */
  maxEventChars?: number
  /**
   * Longest wait, in ms, of a pending upstream read for its chunk. The relay reads only for a caller's
   * read (and finishes a read it began after a held batch answered the caller), so a caller slower than
   * the model is never taken for upstream silence. Default: no limit.
   */
  idleMs?: number
  /** Time (epoch ms) after which an unfinished stream ends with `upstream_timeout`. Default: no limit. */
  totalDeadline?: number
  /**
   * Output goes to the caller at most once per this many ms: output that comes sooner after the last
   * write is held, with whatever follows, until the window ends (one timer per held batch), or until it
   * holds 16 Ki characters. Output after a quiet spell, `[DONE]` and error events go out at once. 0:
   * every chunk's output at once. Default 2.
   */
  batchMs?: number
}

/**
 * `estimate`: podgate's count of the events relayed (about a token each), which the quota charges with the
 * prompt estimate when the upstream reported no usage (vLLM sends it only at the end).
 */
export type RelayOutcome = ({ ok: true } | { ok: false; error: GatewayError; started: boolean }) & { estimate?: Usage }

/**
 * @example
 * const source = upstream.body.getReader()
 * const relay = createOpenAIRelay({ source, model: 'llama-8b', includeUsage: request.includeUsage, idleMs: 30_000 })
 * return new Response(relay, { headers: SSE_HEADERS })
 */
export function createOpenAIRelay(options: OpenAIRelayOptions): ReadableStream<Uint8Array> {
  const { source, model, includeUsage, onUsage, onEnd } = options
  const idleMs = options.idleMs ?? Infinity
  const totalDeadline = options.totalDeadline ?? Infinity
  const batchMs = options.batchMs ?? DEFAULT_BATCH_MS
  const timed = idleMs !== Infinity || totalDeadline !== Infinity
  let reported = false
  const modelText = jsonStringContent(model)
  const decoder = new TextDecoder()
  const parser = createParser({ onEvent: relayEvent, onError: refuseOversizedEvent, maxBufferSize: options.maxEventChars ?? DEFAULT_MAX_EVENT_CHARS })

  let first = options.first
  /** SSE text produced and not sent yet: the current batch, sent as one enqueue however many events it holds. */
  let out = ''
  /** `ended` once `[DONE]` or an error event was written, or the caller left: nothing more goes out. */
  let ended = false
  /** Chunks relayed (not error events): about a token each, the answer's count when no usage came. */
  let chunks = 0
  let usageSeen = false
  let readableClosed = false
  let controller!: ReadableStreamDefaultController<Uint8Array>
  /** When the pending upstream read began (ms), or -1 while none is pending: the idle clock. */
  let readingSince = -1
  /**
   * One timer per idle window, not one per chunk: when it fires it either times the stream out or
   * re-arms itself for what is left of the window of the read pending now (with none pending, for a
   * window more, the total deadline's watch).
   */
  let timer: ReturnType<typeof setTimeout> | undefined
  /** When output last went to the caller (ms), and how many times: the batching window's clock. */
  let sentAt = -Infinity
  /** Settles once: whole, or failed with `error`; either way with the chunks relayed as the estimate. */
  function report(error?: GatewayError): void {
    if (reported) return
    reported = true
    onEnd?.({ ...(error ? { ok: false, error, started: chunks > 0 } : { ok: true }), estimate: countedUsage(chunks) })
  }
  let sends = 0
  /** Sends a held batch at the end of its window, whether or not a read is pending then. */
  let batchTimer: ReturnType<typeof setTimeout> | undefined
  /** Called once when the relay is over (`StreamControl.onClose`): e.g. the revocation check's timer. */
  const closeListeners: Array<() => void> = []

  function closed(): void {
    runListeners(closeListeners)
  }

  function relayEvent(event: EventSourceMessage): void {
    if (ended) return
    const data = event.data
    if (data === '[DONE]') {
      out += DONE_TEXT
      ended = true
      report()
      return
    }
    const fast = rewriteChunkText(data, modelText)
    if (fast !== undefined) out += `data: ${fast}\n\n`
    else relayParsed(data)
    // Reached only by a chunk: an error event (thrown above) is no output, and costs no max_tokens.
    chunks++
  }

  function relayParsed(data: string): void {
    let value: unknown
    try {
      value = JSON.parse(data)
    } catch (cause) {
      throw upstreamError('The upstream sent a stream event that is not JSON.', { cause })
    }
    const message = upstreamErrorMessage(value)
    if (message !== undefined) throw workerFailure(message)
    if (!isRecord(value) || !Array.isArray(value.choices)) {
      throw upstreamError('The upstream streamed an event podgate does not understand.')
    }
    if (value.choices.length === 0 && value.usage != null) {
      const usage = readUsage(value.usage)
      if (usage && !usageSeen) {
        usageSeen = true
        onUsage?.(usage)
      }
      if (!includeUsage) return
    }
    value.model = model
    out += `data: ${JSON.stringify(value)}\n\n`
  }

  function feed(text: string): void {
    try {
      parser.feed(text)
    } catch (error) {
      fail(error)
    }
  }

  function fail(error: unknown): void {
    if (ended) return
    const failure = toGatewayError(error)
    out += sseErrorText(failure)
    ended = true
    report(failure)
  }

  function flush(): void {
    if (batchTimer !== undefined) clearTimeout(batchTimer)
    batchTimer = undefined
    if (out === '') return
    const text = out
    out = ''
    sentAt = Date.now()
    sends++
    if (!readableClosed) controller.enqueue(encoder.encode(text))
  }

  /**
   * Sends the output held so far if its window is over or it is big enough and returns `true`; otherwise
   * leaves it for the window's end (one timer per batch) and returns `false`, so the caller's read waits
   * at most `batchMs`.
   */
  function sendOrHold(): boolean {
    if (out === '') return false
    // Clamped: a clock that stepped back must not hold a batch longer than its window.
    const wait = Math.min(batchMs, sentAt + batchMs - Date.now())
    if (wait <= 0 || out.length >= BATCH_MAX_CHARS) {
      flush()
      return true
    }
    batchTimer ??= setTimeout(flush, wait)
    return false
  }

  /** Sends what is left and closes the caller's stream; the relay is over. */
  function finish(): void {
    flush()
    if (timer !== undefined) clearTimeout(timer)
    timer = undefined
    if (readableClosed) return
    readableClosed = true
    controller.close()
    closed()
  }

  function arm(ms: number): void {
    timer = setTimeout(onTimer, Math.max(0, ms))
  }

  function onTimer(): void {
    timer = undefined
    if (ended) return
    const now = Date.now()
    // No read pending: the caller is the slow side, which is not the upstream's idleness, but the total
    // deadline holds all the same (a caller slower than the model, or one that stopped reading, must not
    // keep the upstream call open past it): the timer ticks on, once an idle window. A read that is
    // pending is the upstream's silence, even when a held batch has answered the caller meanwhile.
    const idleLeft = readingSince < 0 ? idleMs : readingSince + idleMs - now
    const totalLeft = totalDeadline - now
    if (idleLeft > 0 && totalLeft > 0) return arm(Math.min(idleLeft, totalLeft))
    fail(new GatewayError('upstream_timeout', totalLeft <= 0 ? TOTAL_MESSAGE : IDLE_MESSAGE))
    finish()
    // Cancelling the upstream body aborts the fetch, which stops vLLM's generation; the pending read ends.
    source.cancel().catch(ignore)
  }

  /** Relays one upstream chunk into `out`; `true` when it ended the relay (all output sent). */
  function relayChunk(chunk: Uint8Array): boolean {
    feed(decoder.decode(chunk, STREAM_DECODE))
    if (!ended) return false
    finish()
    // Nothing more will be relayed ([DONE], or a refused event): stop the upstream.
    source.cancel().catch(ignore)
    return true
  }

  async function pull(): Promise<void> {
    if (first !== undefined) {
      const chunk = first
      first = undefined
      if (relayChunk(chunk)) return
    }
    if (sendOrHold()) return
    const sendsBefore = sends
    // A chunk may hold no whole event (or only a stripped usage chunk), or its output may wait for the
    // batch's window: read on until output goes out.
    for (;;) {
      if (timed) {
        readingSince = Date.now()
        if (timer === undefined) arm(Math.min(idleMs, totalDeadline - readingSince))
      }
      let next: ReadableStreamReadResult<Uint8Array>
      try {
        next = await source.read()
      } catch (reason) {
        readingSince = -1
        // A GatewayError reason is podgate's own verdict (e.g. the client's timeout), kept as the final event.
        fail(reason instanceof GatewayError ? reason : upstreamError('The upstream connection broke before the model finished.', { cause: reason }))
        // Release the errored upstream: a reader left locked on it keeps the error, and with it this
        // request's whole context, alive after the response ends (seen in heap snapshots under load).
        source.cancel(reason).catch(ignore)
        try {
          source.releaseLock()
        } catch {
          // already released
        }
        return finish()
      }
      readingSince = -1
      // A timeout or the caller leaving ended the relay while the read was pending.
      if (ended) return
      if (next.done) {
        feed(decoder.decode())
        // An event whose blank line never came is dropped (SSE spec): without [DONE] the answer is cut.
        fail(upstreamError('The upstream stream ended before the model finished.'))
        return finish()
      }
      if (relayChunk(next.value) || sendOrHold()) return
      // The batch timer answered the caller's read while this one was pending: the rest is the next pull's.
      if (sends !== sendsBefore) return
    }
  }

  const stream = new ReadableStream<Uint8Array>(
    {
      start(c) {
        controller = c
      },
      pull,
      cancel(reason) {
        // The caller went away: stop the upstream too.
        if (!ended) report(upstreamError(CALLER_GONE))
        ended = true
        readableClosed = true
        if (timer !== undefined) clearTimeout(timer)
        if (batchTimer !== undefined) clearTimeout(batchTimer)
        timer = batchTimer = undefined
        closed()
        return source.cancel(reason).catch(ignore)
      },
    },
    // Reads upstream only when the caller wants more: one chunk in flight and at most one batch queued,
    // never the answer buffered.
    PULL_ONLY,
  )
  // Also when the caller left before the relay existed (a custom fetch that ignores its signal answered
  // after): no one will read or cancel it, and such an upstream runs on unless its body is cancelled.
  onAbort(options.signal, () => {
    report(upstreamError(CALLER_GONE))
    source.cancel().catch(ignore)
  })
  // Lets a check outside the relay (the key's revocation) end it without wrapping it in another stage.
  registerStreamControl(stream, {
    end(event) {
      if (ended) return
      out += event
      ended = true
      report(new GatewayError('invalid_api_key', 'The stream\'s API key stopped being valid.'))
      finish()
      source.cancel().catch(ignore)
    },
    onClose(listener) {
      if (readableClosed) listener()
      else closeListeners.push(listener)
    },
  })
  return stream
}

const STREAM_DECODE: TextDecoderDecodeOptions = { stream: true }
/**
 * Each write a JavaScript stream hands workerd's response costs the runtime a turn, several times what
 * the event itself costs (scripts/bench/NOTES.md, `relay`); an upstream writes one event per HTTP chunk,
 * so a fast model would cost a turn per token. 2 ms is below anything a reader sees.
 */
const DEFAULT_BATCH_MS = 2
/**
 * A batch goes out once it holds this many characters (UTF-16 code units), whatever its window: a batch
 * is bounded in size, not only in time (an in-isolate upstream can hand over megabytes at once).
 */
const BATCH_MAX_CHARS = 16 * 1024

const CHOICES_AFTER_MODEL = ',"choices":[{'

const QUOTE = 0x22
const BACKSLASH = 0x5c
const OPEN_BRACE = 0x7b
const OPEN_BRACKET = 0x5b
const MODEL_KEY = '"model":"'

/**
 * Rewrites `model` in a vLLM chunk's JSON text without parsing it, or returns `undefined` when the text
 * is not the plain shape this can prove safe, so the caller parses it. `modelText` is JSON string content
 * (escaped, without quotes). Returns `data` itself when the model already matches.
 *
 * vLLM (pydantic) writes `{"id":"…","object":"…","created":N,"model":"…","choices":[{…`; only that
 * prefix is inspected, so the cost does not grow with the content. Usage, error and any other event
 * fails the `"choices":[{` check and is parsed. The rest of the text is passed on unvalidated: it is
 * vLLM's JSON, and the caller's own parser sees it as vLLM wrote it.
 */
export function rewriteChunkText(data: string, modelText: string): string | undefined {
  // A raw newline means a multi-line `data:` event, which a single-line re-framing would corrupt.
  if (data.charCodeAt(0) !== OPEN_BRACE || data.indexOf('\n') !== -1) return undefined
  const keyAt = data.indexOf(MODEL_KEY)
  if (keyAt === -1) return undefined
  // Before `"model"` only flat scalars may appear: with no nesting and no escapes every quote is
  // structural, so an even count proves `"model"` is a top-level key and not text inside a string.
  let quotes = 0
  for (let i = 1; i < keyAt; i++) {
    const code = data.charCodeAt(i)
    if (code === QUOTE) quotes++
    else if (code === BACKSLASH || code === OPEN_BRACE || code === OPEN_BRACKET) return undefined
  }
  if ((quotes & 1) === 1) return undefined
  const valueAt = keyAt + MODEL_KEY.length
  let valueEnd = valueAt
  for (;;) {
    if (valueEnd >= data.length) return undefined
    const code = data.charCodeAt(valueEnd)
    if (code === QUOTE) break
    if (code === BACKSLASH) return undefined
    valueEnd++
  }
  if (!data.startsWith(CHOICES_AFTER_MODEL, valueEnd + 1)) return undefined
  if (valueEnd - valueAt === modelText.length && data.startsWith(modelText, valueAt)) return data
  return `${data.slice(0, valueAt)}${modelText}${data.slice(valueEnd)}`
}

/** The content of `value` as a JSON string literal, without its quotes. */
export function jsonStringContent(value: string): string {
  return JSON.stringify(value).slice(1, -1)
}
