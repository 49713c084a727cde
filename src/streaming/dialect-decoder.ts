/**
 * Reads the `/stream` items of a native job on one of vLLM's other streaming routes (`/v1/responses`,
 * `/v1/messages`): SSE text, in whole events (classic worker-vllm) or cut anywhere (current), relayed as it
 * came and read by the route's dialect for its ending, usage and errors.
 */
import { createParser } from 'eventsource-parser'
import { GatewayError, upstreamError } from '../errors/index.ts'
import { BEFORE_OUTPUT } from './dialects.ts'
import type { Dialect, StreamEnding } from './dialects.ts'
import type { NativeStreamDecoder } from './native-decoder.ts'
import { countedUsage } from './openai-chunks.ts'
import type { Usage } from './openai-chunks.ts'
import { DEFAULT_MAX_EVENT_CHARS, errorItemFailure, refuseOversizedEvent } from './vllm.ts'

export function createDialectDecoder(options: DialectDecoderOptions): NativeStreamDecoder {
  const { dialect } = options
  const ending: StreamEnding = { done: false }
  /** An event other than those `BEFORE_OUTPUT` names came before any error (as the pipe's tail reads it). */
  let output = false
  const parser = createParser({
    onEvent(event) {
      options.onEvent?.()
      dialect.read(event, ending)
      output ||= !ending.error && !BEFORE_OUTPUT.test(event.event ?? '')
    },
    onError: refuseOversizedEvent,
    maxBufferSize: DEFAULT_MAX_EVENT_CHARS,
  })
  return {
    push(item) {
      const failure = errorItemFailure(item)
      if (failure) throw failure
      // A classic worker may batch several events into one item.
      const text = typeof item === 'string' ? item : Array.isArray(item) && item.every((s) => typeof s === 'string') ? item.join('') : undefined
      if (text === undefined) throw upstreamError('The model worker streamed an item podgate does not understand.')
      parser.feed(text)
      options.onText(text)
    },
    finish() {
      // A stream that failed before any token: its prompt is what it cost, message_start's count, else (a
      // Responses stream's events hold none) the quota's estimate, which a count of 0 stands for.
      const usage = ending.usage ?? (output ? undefined : (ending.prompt ?? countedUsage(0)))
      if (usage) options.onUsage?.(usage)
      if (ending.error) {
        relayed.add(ending.error)
        throw ending.error
      }
      if (!ending.done) throw upstreamError('The upstream stream ended before the model finished.')
    },
  }
}

export interface DialectDecoderOptions {
  dialect: Dialect
  /** Called with each item's text, as the worker sent it. */
  onText(text: string): void
  /** Called once per whole event read (about a token each): the answer's pace. */
  onEvent?(): void
  /** Called once, from `finish()`, with the usage the events reported. */
  onUsage?(usage: Usage): void
}

/** Failures whose error event already reached the caller in the upstream's own words. */
const relayed = new WeakSet<GatewayError>()

/** The upstream's own error event already told the caller of `error`: podgate writes no second one. */
export function wasRelayed(error: unknown): boolean {
  return error instanceof GatewayError && relayed.has(error)
}
