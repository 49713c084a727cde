/**
 * Recognizing what vLLM and worker-vllm send (runpod-api.md §3): their error shapes and their usage
 * objects. Shared by the stream decoder, the OpenAI-route relay and the non-stream output mapper, so the
 * three agree on what counts as a failure.
 */
import { clip, GatewayError, invalidRequest, upstreamError } from '../errors/index.ts'
import { isRecord, parseJson } from '../http/json.ts'
import type { Usage } from './openai-chunks.ts'

/** Default cap on the characters one SSE event may buffer: 4 Mi (a Runpod stream chunk is at most 1 MB). */
export const DEFAULT_MAX_EVENT_CHARS = 4 * 1024 * 1024

/** Upstream text shown to callers is cut to this many characters. */
const MAX_UPSTREAM_MESSAGE = 300

/**
 * An eventsource-parser `onError`: unknown fields and bad `retry` values are legal noise in SSE; only an
 * event over the parser's `maxBufferSize` is fatal, and ends the stream as an upstream failure.
 */
export function refuseOversizedEvent(error: { type: string }): void {
  if (error.type === 'max-buffer-size-exceeded') throw upstreamError('The upstream sent a stream event larger than podgate accepts.')
}

export { isRecord }

/**
 * The message of an upstream error object, or `undefined` when `value` is not one. Recognizes
 * classic worker items `{"error":"..."}`, current ones `{"error":{"message":"...","type":"worker_error"}}`,
 * and vLLM's two in-stream forms, `{"error":{...}}` and `{"object":"error","message":"..."}`.
 */
export function upstreamErrorMessage(value: unknown): string | undefined {
  if (!isRecord(value)) return undefined
  const error = value.error
  if (typeof error === 'string') return messageOr(error)
  if (isRecord(error)) return messageOr(error.message)
  if (value.object === 'error') return messageOr(value.message)
  return undefined
}

/** `message` when it is a non-empty string, else 'unknown error'. */
function messageOr(message: unknown): string {
  return typeof message === 'string' && message ? message : 'unknown error'
}

/**
 * The failure an output item stands for, or `undefined` when it is no error item. Classic worker-vllm
 * runs vLLM in-process and yields vLLM's error object as is (`{"error":{"message","type","param",
 * "code":400}}`, or `{"object":"error",...}` before vLLM 0.10.1): its `code` tells a refusal of the
 * caller's request from the worker's own failure, which the current worker's `code: null` never does.
 */
export function errorItemFailure(item: unknown): GatewayError | undefined {
  const message = upstreamErrorMessage(item)
  if (message === undefined || !isRecord(item)) return undefined
  return codedRefusal(isRecord(item.error) ? item.error : item) ?? workerFailure(message)
}

/** Throws the failure of the first error item among `items`. */
export function throwErrorItem(items: unknown[]): void {
  for (const item of items) {
    const failure = errorItemFailure(item)
    if (failure) throw failure
  }
}

const MAX_REFUSAL_MESSAGE = 1_000

const CLASSIC_ROUTE_MISS = 'Invalid route'

/**
 * A Python traceback and all after it, with the label runpod-python puts before a generator handler's
 * (`handler: <message> \ntraceback: Traceback (most recent call last): …`): file paths and code stay upstream.
 * Tried only where a run of spaces begins (the lookbehind): from each of its spaces, it was quadratic.
 */
export const TRACEBACK = /(?<!\s)\s*(?:traceback: )?Traceback \(most recent call last\):[\s\S]*$/

/**
 * vLLM's words for an engine that died (V1's EngineDeadError, V0's AsyncEngineDeadError, MQLLMEngine's
 * dead loop) or a GPU fault: the message the worker stamps is `str()` of the exception, never its class.
 */
const ENGINE_FAILURE = /EngineCore encountered|(Background|Engine) loop|CUDA|out of memory|NCCL/

/**
 * vLLM's error object (`{"message","type","param","code"}`) as the caller's refusal when its `code` is
 * 400, 413 or 422 (or its type Anthropic's `invalid_request_error`), else `undefined`. Other codes (a missing model, rate limits, 5xx) are the
 * operator's or the worker's, as an HTTP answer with that status would be.
 */
export function codedRefusal(error: Record<string, unknown>): GatewayError | undefined {
  const { message } = error
  // Classic worker-vllm's own refusal of a Messages body has Anthropic's type and no code.
  const code = error.type === 'invalid_request_error' ? 400 : error.code
  if (code === 404) return routeNotFound()
  if (typeof code !== 'number' || !isRefusalStatus(code)) return undefined
  // Classic worker-vllm's own 400 for a route it does not serve (embeddings...): a newer worker on
  // another endpoint may serve it, so it fails over like any worker failure. So does the 400 its native
  // path stamps on any failed generation when vLLM's words say the engine or GPU failed, in every form
  // it arrives in (an error item, the job's error as JSON or as a Python repr): it is not the caller's.
  // Quoted text is the caller's (pydantic's `input_value='…'`), never the engine's: a caller cannot name it.
  if (message === CLASSIC_ROUTE_MISS || ENGINE_FAILURE.test(String(message).replace(/'(\\.|[^\\'])*'|"(\\.|[^\\"])*"/g, ''))) return undefined
  return refusal(code, typeof message === 'string' ? message : undefined)
}

/**
 * An upstream 404: Runpod's (no such route or endpoint), or vLLM's for a model the endpoint does not serve
 * (a LoRA adapter it was deployed without). The operator's to fix; never counted against the endpoint's
 * breaker (`retry.ts`), since the endpoint still serves its other models.
 */
export function routeNotFound(cause?: unknown): GatewayError {
  return new GatewayError('route_not_found', "The upstream has no such route or endpoint. The operator must check the endpoint's configuration.", { cause })
}

/** vLLM's statuses for a request it refuses as written: bad or conflicting fields, too long, unprocessable. */
export function isRefusalStatus(status: number): boolean {
  return status === 400 || status === 413 || status === 422
}

/**
 * The error podgate raises for a worker or model failure, with the upstream text cut to a safe length.
 * A refusal that current worker-vllm wrapped (`vLLM returned HTTP 400: <body>`) becomes that 4xx again.
 */
export function workerFailure(message: string): GatewayError {
  const refusal = upstreamRefusal(message)
  if (refusal) return refusal
  message = message.replace(TRACEBACK, '')
  return upstreamError(`The model worker failed: ${clip(message, MAX_UPSTREAM_MESSAGE)}`)
}

/**
 * The usage of an answer from any vLLM route, as OpenAI's counts: `prompt_tokens` / `completion_tokens`
 * (OpenAI, pooling routes), `input_tokens` / `output_tokens` (Responses, Anthropic), or only
 * `total_tokens` (rerank, which generates nothing). `total_tokens` is recomputed when absent. An
 * OpenAI usage keeps its other fields (`prompt_tokens_details`): a replayed or coalesced answer shows
 * it whole. `undefined` when it counts nothing it can read.
 */
export function readUsage(value: unknown): Usage | undefined {
  if (!isRecord(value)) return undefined
  const own = count(value.prompt_tokens)
  const prompt = own ?? count(value.input_tokens)
  const completion = count(value.completion_tokens) ?? count(value.output_tokens) ?? 0
  const total = count(value.total_tokens)
  if (prompt === undefined && total === undefined) return undefined
  const promptTokens = prompt ?? total! - completion
  return { ...(own !== undefined && value), prompt_tokens: promptTokens, completion_tokens: completion, total_tokens: total ?? promptTokens + completion }
}

function count(value: unknown): number | undefined {
  return isCount(value) ? value : undefined
}

export function isCount(value: unknown): value is number {
  return Number.isInteger(value) && (value as number) >= 0
}

/** worker-vllm >= v2.24 wraps vLLM's error answers: `vLLM returned HTTP 400: {"error":{...}}`. */
const WRAPPED_REFUSAL = /^vLLM returned HTTP (4\d\d):\s*([\s\S]*)$/
/** 4xx answers that are the operator's to fix (credentials, served model name), not the caller's. */
const OPERATOR_STATUSES = new Set([401, 403, 404, 407, 429])

/**
 * vLLM's refusal of the caller's request (e.g. `"auto" tool choice requires --enable-auto-tool-choice`)
 * as `invalid_request` with vLLM's status and message, or undefined when `message` is no wrapped 4xx.
 * A refusal is the caller's to fix: never retried, never counted against the endpoint.
 */
export function upstreamRefusal(message: string): GatewayError | undefined {
  const match = WRAPPED_REFUSAL.exec(message)
  if (!match) return undefined
  const status = Number(match[1])
  const body = match[2] ?? ''
  // vLLM's 404 for what the caller named (an unknown `previous_response_id`) is typed invalid_request_error:
  // the caller's. Its 404 for a served name the endpoint lacks (NotFoundError) is the route's, the operator's.
  if (OPERATOR_STATUSES.has(status) && !body.includes('"invalid_request_error"')) return status === 404 ? routeNotFound() : undefined
  return refusalError(status, body)
}

function refusal(status: number, message: string | undefined): GatewayError {
  if (!message || message === 'unknown error') message = 'The model rejected the request.'
  return invalidRequest(clip(message, MAX_REFUSAL_MESSAGE), { status })
}

/** The `invalid_request` error for a vLLM 4xx whose body is `body` (vLLM's JSON error, or text). */
export function refusalError(status: number, body: string): GatewayError {
  const value = parseJson(body)
  return refusal(status, value === undefined ? body.trim() || undefined : upstreamErrorMessage(value))
}

/** An upstream refusal of the caller's request: relayed as is, never retried on another endpoint. */
export function isRefusal(error: unknown): boolean {
  return error instanceof GatewayError && error.code === 'invalid_request'
}
