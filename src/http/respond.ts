/**
 * Turns a GatewayError into the response format of the surface that was called.
 */
import type { Context } from 'hono'
import { anthropicType, openAIErrorBody, toGatewayError } from '../errors/index.ts'
import type { GatewayError } from '../errors/index.ts'
import { logFailure } from './log.ts'
import type { Log } from './log.ts'

/**
 * The surface a path belongs to decides the error format: the native job routes (`/v2/<model>/run`,
 * `.../status/<id>`, ...) answer Runpod's, `/v1/messages` (and every path under it) Anthropic's, as does
 * `/v1/models*` to a call with `anthropic-version` (Anthropic's SDKs), and every
 * other path, Runpod's `/v2/<model>/openai/v1/*` and `/v2/rerank` included, OpenAI's. Read from the
 * path's end: a host app may mount podgate under a `/v2` of its own (`/api/v2/v1/...`).
 */
export function formatForPath(path: string, anthropicVersion?: string): ErrorFormat {
  if (/\/v1\/messages(\/|$)/.test(path) || (anthropicVersion && /\/v1\/models(\/|$)/.test(path))) return 'anthropic'
  return /\/v2\/[^/]+\/(run(sync)?|purge-queue|health|(status(-sync)?|stream|cancel|retry)\/[^/]+)\/?$/.test(path) ? 'runpod' : 'openai'
}

export type ErrorFormat = 'openai' | 'runpod' | 'anthropic'

/** Runpod's job API answers errors as `{"error": "<message>"}`; podgate adds its code. */
export function runpodErrorBody(error: GatewayError): { error: string; code: string } {
  return { error: error.message, code: error.code }
}

/** Anthropic's error body, for `/v1/messages` (vLLM's Anthropic route): its SDKs read this shape. */
function anthropicErrorBody(error: GatewayError): { type: 'error'; error: { type: string; message: string } } {
  return { type: 'error', error: { type: anthropicType(error), message: error.message } }
}

/** `scrub` takes the operator's secrets out of the body: a message may quote an upstream's answer. */
export function errorResponse(error: GatewayError, format: ErrorFormat, requestId?: string, scrub?: (text: string) => string): Response {
  const headers = new Headers(error.headers)
  headers.set('content-type', 'application/json; charset=utf-8')
  if (requestId) headers.set('x-request-id', requestId), headers.set('request-id', requestId)
  const body = JSON.stringify(format === 'runpod' ? runpodErrorBody(error) : format === 'anthropic' ? anthropicErrorBody(error) : openAIErrorBody(error))
  return new Response(scrub ? scrub(body) : body, { status: error.status, headers })
}

/**
 * Hono `onError`: logs unexpected errors (without secrets) and answers in the caller's format, with
 * `scrub` taking the operator's secrets out of the answer.
 */
export function createErrorHandler(log: Log, scrub?: (text: string) => string) {
  return function onError(err: Error, c: Context): Response {
    const error = toGatewayError(err)
    const requestId = c.get('requestId') as string | undefined
    logFailure(log, c, error)
    return errorResponse(error, formatForPath(c.req.path, c.req.header('anthropic-version')), requestId, scrub)
  }
}
