/**
 * Recognizing what vLLM and worker-vllm send (runpod-api.md §3): their error shapes and their usage
 * objects. Shared by the stream decoder, the OpenAI-route relay and the non-stream output mapper, so the
 * three agree on what counts as a failure.
 */
import { GatewayError } from '../errors/index.ts'
import type { Usage } from './openai-chunks.ts'

/** Default cap on the characters one SSE event may buffer: 4 Mi (a Runpod stream chunk is at most 1 MB). */
export const DEFAULT_MAX_EVENT_CHARS = 4 * 1024 * 1024

/** Upstream text shown to callers is cut to this many characters. */
const MAX_UPSTREAM_MESSAGE = 300

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/**
 * The message of an upstream error object, or `undefined` when `value` is not one. Recognizes
 * classic worker items `{"error":"..."}`, current ones `{"error":{"message":"...","type":"worker_error"}}`,
 * and vLLM's two in-stream forms, `{"error":{...}}` and `{"object":"error","message":"..."}`.
 */
export function upstreamErrorMessage(value: unknown): string | undefined {
  if (!isRecord(value)) return undefined
  const error = value.error
  if (typeof error === 'string') return error || 'unknown error'
  if (isRecord(error)) return typeof error.message === 'string' && error.message ? error.message : 'unknown error'
  if (value.object === 'error') return typeof value.message === 'string' && value.message ? value.message : 'unknown error'
  return undefined
}

/** The error podgate raises for a worker or model failure, with the upstream text cut to a safe length. */
export function workerFailure(message: string): GatewayError {
  const detail = message.length > MAX_UPSTREAM_MESSAGE ? `${message.slice(0, MAX_UPSTREAM_MESSAGE)}…` : message
  return new GatewayError('upstream_error', `The model worker failed: ${detail}`)
}

/**
 * OpenAI usage read from an upstream object, extra fields (`prompt_tokens_details`) dropped, or
 * `undefined` when the counts are missing. `total_tokens` is recomputed when absent.
 */
export function readUsage(value: unknown): Usage | undefined {
  if (!isRecord(value)) return undefined
  const prompt = value.prompt_tokens
  const completion = value.completion_tokens
  if (!isCount(prompt) || !isCount(completion)) return undefined
  const total = isCount(value.total_tokens) ? value.total_tokens : prompt + completion
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: total }
}

export function isCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0
}
