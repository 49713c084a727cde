/**
 * The OpenAI wire shapes podgate answers with, and their SSE framing.
 *
 * Owns: the chunk / completion / usage types every upstream mode converges on, and the bytes of an SSE
 * `data:` event, of `data: [DONE]`, and of the in-stream error event that ends a stream which broke after
 * output began (OpenAI's convention: such a stream ends with the error and never with `[DONE]`).
 */

/**
 * podgate's count of `n` generated tokens, for the quota only, with the prompt's count if the upstream gave
 * one (a Messages stream's `message_start`); `prompt_tokens` 0 has quota add the prompt estimate.
 */
export const countedUsage = (n: number, prompt = 0): Usage => ({ prompt_tokens: prompt, completion_tokens: n, total_tokens: n + prompt })

/**
 * A JSON chat message as vLLM writes it: its null fields and a list of tool calls, empty when there are none
 * (for a message podgate assembles: a classic worker's answer, a JSON replay of a stream).
 */
export const jsonMessage = (content: string | null): ChatCompletionChoice['message'] => ({ role: 'assistant', content, refusal: null, annotations: null, audio: null, function_call: null, tool_calls: [] })

/** Token counts, as OpenAI reports them. */
export interface Usage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
}

/**
 * The queuing strategy of every stream podgate produces: nothing is read ahead of the caller, each
 * `pull` waits for a read. One object for all (a stream reads it once, when it is made).
 */
export const PULL_ONLY: QueuingStrategy<Uint8Array> = { highWaterMark: 0 }

/**
 * Why a choice stopped: `stop`, `length`, `tool_calls`, `content_filter`, or whatever else vLLM reports
 * (e.g. `abort`). podgate passes the upstream value through.
 */
export type FinishReason = string

export interface ChatCompletionChunkChoice {
  index: number
  /** `role` only on a choice's first chunk; vLLM extras (`reasoning_content`, `tool_calls`) pass through. */
  delta: { role?: 'assistant'; content?: string | null; [key: string]: unknown }
  logprobs?: unknown
  finish_reason: FinishReason | null
}

export interface ChatCompletionChunk {
  id: string
  object: 'chat.completion.chunk'
  created: number
  model: string
  choices: ChatCompletionChunkChoice[]
  usage?: Usage | null
}

export interface TextCompletionChunkChoice {
  index: number
  text: string
  logprobs?: unknown
  finish_reason: FinishReason | null
}

/** A streamed `/completions` chunk: OpenAI reuses `text_completion` as the object of both forms. */
export interface TextCompletionChunk {
  id: string
  object: 'text_completion'
  created: number
  model: string
  choices: TextCompletionChunkChoice[]
  usage?: Usage | null
}

export type CompletionChunk = ChatCompletionChunk | TextCompletionChunk

export interface ChatCompletionChoice {
  index: number
  message: { role: 'assistant'; content: string | null; [key: string]: unknown }
  logprobs?: unknown
  finish_reason: FinishReason | null
}

export interface ChatCompletion {
  id: string
  object: 'chat.completion'
  created: number
  model: string
  choices: ChatCompletionChoice[]
  /** null when the upstream reported none (podgate never shows a count of its own). */
  usage: Usage | null
}

export interface TextCompletionChoice {
  index: number
  text: string
  logprobs?: unknown
  finish_reason: FinishReason | null
}

export interface TextCompletion {
  id: string
  object: 'text_completion'
  created: number
  model: string
  choices: TextCompletionChoice[]
  usage: Usage | null
}

/** What an in-stream error event, OpenAI style, says (a GatewayError is one); its `param` is always null. */
export interface SSEError {
  message: string
  type: string
  code: string | null
}

/** One encoder for every stream podgate writes (an encoder holds no state). */
export const encoder = new TextEncoder()

/** An SSE comment that keeps an idle stream open through proxies. */
export const HEARTBEAT = encoder.encode(': keep-alive\n\n')

/** The text of `data: [DONE]\n\n`, for callers that batch several events into one write. */
export const DONE_TEXT = 'data: [DONE]\n\n'

/** The bytes of `data: [DONE]\n\n`. Shared: never write into it. */
export const DONE: Uint8Array = encoder.encode(DONE_TEXT)

/**
 * Frames one JSON text as an SSE event. `json` must be single-line (anything `JSON.stringify` returns is).
 *
 * @example
 * controller.enqueue(encodeSSEData(JSON.stringify(chunk)))
 */
export function encodeSSEData(json: string): Uint8Array {
  return encoder.encode(`data: ${json}\n\n`)
}

/** The text of an OpenAI-style in-stream error event. */
export function sseErrorText(error: SSEError): string {
  const body = { error: { message: error.message, type: error.type, param: null, code: error.code } }
  return `data: ${JSON.stringify(body)}\n\n`
}

/**
 * The bytes of an OpenAI-style in-stream error event: `data: {"error":{...}}\n\n`. A stream that broke
 * after output began ends with this and no `[DONE]`, so no client mistakes a cut answer for a whole one.
 *
 * @example
 * controller.enqueue(sseErrorEvent(failure))
 * controller.close()
 */
export function sseErrorEvent(error: SSEError): Uint8Array {
  return encoder.encode(sseErrorText(error))
}
