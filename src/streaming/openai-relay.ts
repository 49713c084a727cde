/**
 * Relays the SSE body of Runpod's `/openai/v1/*` route (vLLM's own stream) to the caller.
 *
 * Owns: renaming `model` to the caller's alias, keeping the usage chunk for podgate (and the caller only
 * if they asked), and ending honestly: a stream that breaks, errors, or stops before `[DONE]` ends with
 * an OpenAI error event and no `[DONE]`, so a cut answer never looks whole.
 *
 * It is a `{ readable, writable }` pair rather than a `TransformStream`: when the upstream body errors
 * (network drop), `pipeThrough` aborts the writable side, and a TransformStream would then error its
 * readable side and discard queued output; this pair instead writes the error event and closes cleanly.
 */
import { createParser } from 'eventsource-parser'
import type { EventSourceMessage, ParseError } from 'eventsource-parser'
import { GatewayError, toGatewayError } from '../errors/index.ts'
import { DONE_TEXT, sseErrorText } from './openai-chunks.ts'
import type { Usage } from './openai-chunks.ts'
import { DEFAULT_MAX_EVENT_CHARS, isRecord, readUsage, upstreamErrorMessage, workerFailure } from './vllm.ts'

export interface OpenAIRelayOptions {
  /** The podgate alias written into every chunk's `model` (the upstream serves another name). */
  model: string
  /** When set, replaces every chunk's `id`. Default: vLLM's id passes through. */
  id?: string
  /** Keep the upstream usage chunk in the output: the caller set `stream_options.include_usage`. */
  includeUsage: boolean
  /** Called at most once, when the upstream usage chunk arrives (whether or not it is relayed). */
  onUsage?(usage: Usage): void
  /** Called once, when the first upstream event arrives. */
  onFirstEvent?(): void
  /** Called once when the relay ends: `[DONE]` relayed (ok), or an error event written / the caller gone. */
  onEnd?(outcome: RelayOutcome): void
  /** Most characters one event may buffer before the stream is refused. Default 4 Mi. */
  maxEventChars?: number
}

export type RelayOutcome = { ok: true } | { ok: false; error: GatewayError; started: boolean }

/** What `ReadableStream.pipeThrough` accepts. */
export interface OpenAIRelay {
  writable: WritableStream<Uint8Array>
  readable: ReadableStream<Uint8Array>
}

const encoder = new TextEncoder()
const STREAM_DECODE: TextDecoderDecodeOptions = { stream: true }

/**
 * @example
 * const relay = createOpenAIRelay({ model: 'llama-8b', includeUsage: request.includeUsage, onUsage })
 * return new Response(upstream.body.pipeThrough(relay), { headers: SSE_HEADERS })
 */
export function createOpenAIRelay(options: OpenAIRelayOptions): OpenAIRelay {
  const { model, id, includeUsage, onUsage, onFirstEvent, onEnd } = options
  let reported = false
  function report(outcome: RelayOutcome): void {
    if (reported) return
    reported = true
    onEnd?.(outcome)
  }
  const modelText = jsonStringContent(model)
  const idText = id === undefined ? undefined : jsonStringContent(id)
  const decoder = new TextDecoder()
  const parser = createParser({ onEvent: relayEvent, onError: onParseError, maxBufferSize: options.maxEventChars ?? DEFAULT_MAX_EVENT_CHARS })

  /** SSE text produced by the current write: sent as one enqueue, however many events the bytes held. */
  let out = ''
  /** `ended` once `[DONE]` or an error event was written: nothing more goes out. */
  let ended = false
  let started = false
  let usageSeen = false
  let readableClosed = false
  let readableController!: ReadableStreamDefaultController<Uint8Array>
  let writableController!: WritableStreamDefaultController
  let wake: (() => void) | undefined

  function relayEvent(event: EventSourceMessage): void {
    if (ended) return
    if (!started) {
      started = true
      onFirstEvent?.()
    }
    const data = event.data
    if (data === '[DONE]') {
      out += DONE_TEXT
      ended = true
      report({ ok: true })
      return
    }
    const fast = rewriteChunkText(data, modelText, idText)
    if (fast !== undefined) out += `data: ${fast}\n\n`
    else relayParsed(data)
  }

  function relayParsed(data: string): void {
    let value: unknown
    try {
      value = JSON.parse(data)
    } catch (cause) {
      throw new GatewayError('upstream_error', 'The upstream sent a stream event that is not JSON.', { cause })
    }
    const message = upstreamErrorMessage(value)
    if (message !== undefined) throw workerFailure(message)
    if (!isRecord(value) || !Array.isArray(value.choices)) {
      throw new GatewayError('upstream_error', 'The upstream streamed an event podgate does not understand.')
    }
    if (value.choices.length === 0 && value.usage != null) {
      const usage = readUsage(value.usage)
      if (usage && !usageSeen) {
        usageSeen = true
        onUsage?.(usage)
      }
      if (!includeUsage) return
    }
    if (idText !== undefined) value.id = id
    value.model = model
    out += `data: ${JSON.stringify(value)}\n\n`
  }

  function onParseError(error: ParseError): void {
    if (error.type === 'max-buffer-size-exceeded') {
      throw new GatewayError('upstream_error', 'The upstream sent a stream event larger than podgate accepts.')
    }
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
    out += sseErrorText({ message: failure.message, type: failure.type, code: failure.code })
    ended = true
    report({ ok: false, error: failure, started })
  }

  function flush(): void {
    if (out === '') return
    const text = out
    out = ''
    if (!readableClosed) readableController.enqueue(encoder.encode(text))
  }

  function closeReadable(): void {
    if (readableClosed) return
    readableClosed = true
    readableController.close()
  }

  const readable = new ReadableStream<Uint8Array>({
    start(controller) {
      readableController = controller
    },
    pull() {
      const resume = wake
      wake = undefined
      resume?.()
    },
    cancel(reason) {
      // The caller went away: stop reading upstream, which makes pipeThrough cancel the upstream body.
      readableClosed = true
      if (!ended) report({ ok: false, error: new GatewayError('upstream_error', 'The caller went away.'), started })
      ended = true
      const resume = wake
      wake = undefined
      resume?.()
      writableController.error(reason)
    },
  })

  const writable = new WritableStream<Uint8Array>({
    start(controller) {
      writableController = controller
    },
    async write(chunk) {
      if (ended) return
      feed(decoder.decode(chunk, STREAM_DECODE))
      flush()
      if (ended) {
        closeReadable()
        // Nothing more will be relayed: erroring this side makes pipeThrough cancel the upstream body.
        writableController.error(new Error('podgate: the relayed stream has ended'))
        return
      }
      const room = readableController.desiredSize
      if (!readableClosed && room !== null && room <= 0) {
        await new Promise<void>((resolve) => {
          wake = resolve
        })
      }
    },
    close() {
      if (!ended) {
        feed(decoder.decode())
        // An event whose blank line never came is dropped (SSE spec): without [DONE] the answer is cut.
        fail(new GatewayError('upstream_error', 'The upstream stream ended before the model finished.'))
      }
      flush()
      closeReadable()
    },
    abort(reason) {
      // A GatewayError reason is podgate's own verdict (e.g. an idle timeout), kept as the final event.
      fail(reason instanceof GatewayError ? reason : new GatewayError('upstream_error', 'The upstream connection broke before the model finished.', { cause: reason }))
      flush()
      closeReadable()
    },
  })

  return { writable, readable }
}

const QUOTE = 0x22
const BACKSLASH = 0x5c
const OPEN_BRACE = 0x7b
const OPEN_BRACKET = 0x5b
const MODEL_KEY = '"model":"'
const CHOICES_AFTER_MODEL = ',"choices":[{'
const ID_KEY = '{"id":"'

/**
 * Rewrites `model` (and `id` when `idText` is set) in a vLLM chunk's JSON text without parsing it, or
 * returns `undefined` when the text is not the plain shape this can prove safe, so the caller parses it.
 * Both replacements are JSON string contents (escaped, without quotes). Returns `data` itself when the
 * model already matches and no id is set.
 *
 * vLLM (pydantic) writes `{"id":"…","object":"…","created":N,"model":"…","choices":[{…`; only that
 * prefix is inspected, so the cost does not grow with the content. Usage, error and any other event
 * fails the `"choices":[{` check and is parsed. The rest of the text is passed on unvalidated: it is
 * vLLM's JSON, and the caller's own parser sees it as vLLM wrote it.
 */
export function rewriteChunkText(data: string, modelText: string, idText: string | undefined): string | undefined {
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
  if (idText !== undefined) {
    if (!data.startsWith(ID_KEY)) return undefined
    const idEnd = data.indexOf('"', ID_KEY.length)
    if (idEnd === -1 || idEnd >= keyAt) return undefined
    return `${ID_KEY}${idText}${data.slice(idEnd, valueAt)}${modelText}${data.slice(valueEnd)}`
  }
  if (valueEnd - valueAt === modelText.length && data.startsWith(modelText, valueAt)) return data
  return `${data.slice(0, valueAt)}${modelText}${data.slice(valueEnd)}`
}

/** The content of `value` as a JSON string literal, without its quotes. */
export function jsonStringContent(value: string): string {
  return JSON.stringify(value).slice(1, -1)
}
