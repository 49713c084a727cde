/**
 * The SSE dialects podgate relays, and how each one ends: OpenAI's chat and completions streams end with
 * `data: [DONE]`; vLLM's `/v1/responses` stream with a `response.completed` (or `response.incomplete`)
 * event and no `[DONE]`; its Anthropic `/v1/messages` stream with `message_stop` (then `[DONE]`, from older
 * vLLM versions only). A
 * stream that stops before its ending is cut, whatever its dialect, and podgate closes it with an error
 * event the caller's SDK reads as one.
 */
import type { EventSourceMessage } from 'eventsource-parser'
import { anthropicType } from '../errors/index.ts'
import type { GatewayError } from '../errors/index.ts'
import type { CopyEnd } from '../pipeline/stage.ts'
import type { StreamDialect } from '../normalize/route.ts'
import { parseJson } from '../http/json.ts'
import { sseErrorText } from './openai-chunks.ts'
import { isRecord, readUsage, upstreamErrorMessage, workerFailure } from './vllm.ts'
import type { Usage } from './openai-chunks.ts'

/**
 * How a stream ended, as its events tell: whole or not, its usage, an error the upstream sent; `prompt`:
 * the prompt's count a Messages stream sends first, not the answer's usage until `message_delta` adds the output's.
 */
export type StreamEnding = Omit<CopyEnd, 'stopped'> & { prompt?: Usage }

export interface Dialect {
  /** Reads one event into the ending so far. */
  read(event: EventSourceMessage, end: StreamEnding): void
  /** podgate's own error event in this dialect, for a stream it ends. */
  errorEvent(error: GatewayError): string
  /** The stream's last event repeats the whole answer: the tail keeps it whole to read it. */
  longLast?: boolean
}

export const OPENAI_DIALECT: Dialect = {
  read(event, end) {
    if ((end.done = event.data === '[DONE]')) return
    // Only an error or a usage changes the ending: the tail's other chunks (most of it) are not parsed.
    if (!event.data.includes('"error"') && !event.data.includes('"usage"')) return
    const value = parseJson(event.data)
    const message = upstreamErrorMessage(value)
    if (message !== undefined) end.error ??= workerFailure(message)
    // The answer's usage is the chunk with no choices: with `continuous_usage_stats`, vLLM also puts on every
    // chunk its own choice's count so far, which leaves out the other choices' (n > 1).
    else if (isRecord(value) && !(value.choices as unknown[] | undefined)?.length) {
      const usage = readUsage(value.usage)
      if (usage) end.usage = usage
    }
  },
  errorEvent: sseErrorText,
}

const RESPONSES_DIALECT: Dialect = {
  read(event, end) {
    const value = parseJson(event.data)
    const type = event.event ?? (value as { type?: unknown } | undefined)?.type
    end.done = type === 'response.completed' || type === 'response.incomplete'
    if (!isRecord(value)) return
    // Responses' own `error` event, or vLLM's generic in-stream error (`data: {"error":{...}}`, no name).
    const message = upstreamErrorMessage(value) ?? (type === 'error' ? (typeof value.message === 'string' ? value.message : 'unknown error') : undefined)
    if (message !== undefined) end.error ??= workerFailure(message)
    const response = value.response
    if (!isRecord(response)) return
    if (type === 'response.failed') {
      const error = response.error as { message?: unknown } | null | undefined
      end.error ??= workerFailure(typeof error?.message === 'string' ? error.message : 'unknown error')
    }
    const usage = readUsage(response.usage)
    if (usage) end.usage = usage
  },
  errorEvent: (error) => `event: error\ndata: ${JSON.stringify({ type: 'error', code: error.code, message: error.message, param: null })}\n\n`,
  longLast: true,
}

const MESSAGES_DIALECT: Dialect = {
  read(event, end) {
    // Older vLLM follows `message_stop` with `[DONE]`; current vLLM and Anthropic's own API do not.
    if (event.data === '[DONE]') return
    const value = parseJson(event.data)
    const type = event.event ?? (value as { type?: unknown } | undefined)?.type
    end.done = type === 'message_stop'
    const message = upstreamErrorMessage(value)
    if (message !== undefined) end.error ??= workerFailure(message)
    // `message_start` holds the prompt's count (in `message`; beside it from vLLM's first Anthropic route,
    // anthropic/serving_messages.py); `message_delta` the output's (vLLM's also the prompt's).
    const usage = isRecord(value) ? (type === 'message_start' && isRecord(value.message) && value.message.usage) || value.usage : undefined
    if (isRecord(usage)) end[type === 'message_start' ? 'prompt' : 'usage'] = readUsage({ ...toInputOutput(end.usage ?? end.prompt), ...usage })
  },
  errorEvent: (error) => `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: anthropicType(error), message: error.message } })}\n\n`,
}

/**
 * Events vLLM writes before the model's first token: Messages' `message_start` (with the chat stream's
 * role chunk), Responses' `response.created` and `response.in_progress` (before the model runs). A
 * stream that fails after them produced no output: it costs its prompt, not its reservation.
 */
export const BEFORE_OUTPUT = /^(?:message_start|response\.(?:created|in_progress))$/

export const DIALECTS: Readonly<Record<StreamDialect, Dialect>> = { responses: RESPONSES_DIALECT, messages: MESSAGES_DIALECT }

/** The dialect of the stream a path answers, when it is not OpenAI's. */
export function dialectOf(path: string): Dialect | undefined {
  if (path.endsWith('/v1/messages')) return MESSAGES_DIALECT
  if (path.endsWith('/v1/responses')) return RESPONSES_DIALECT
  return undefined
}

function toInputOutput(usage: Usage | undefined): Record<string, number> {
  return usage ? { input_tokens: usage.prompt_tokens, output_tokens: usage.completion_tokens } : {}
}
