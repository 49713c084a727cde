/**
 * Serves a completion through Runpod's OpenAI-compatible route (`/openai/v1/*`): the body is vLLM's own
 * OpenAI dialect, so podgate only renames the model to the caller's alias and keeps usage for itself.
 *
 * A stream is answered only once its first upstream bytes arrived, so an upstream that fails before
 * that (HTTP 5xx, 429, a body that breaks at once) is retried on the next endpoint; after it, the first
 * token, idle and total timeouts end the stream with an error event, never a clean ending. The relay
 * reads the upstream body itself and enforces the idle and total timeouts (one stream stage per chunk).
 */
import { toOpenAIBody } from '../normalize/index.ts'
import { createOpenAIRelay } from '../streaming/openai-relay.ts'
import { GatewayError } from '../errors/index.ts'
import { retryableFailure } from './retry.ts'
import { upstreamErrorMessage, workerFailure } from '../streaming/vllm.ts'
import { SSE_HEADERS } from './types.ts'
import type { CompletionCall, TokenUsage } from './types.ts'

const ROUTE_PATH = { chat: '/chat/completions', completion: '/completions', embedding: '/embeddings' } as const

export async function openaiRouteCompletion(call: CompletionCall): Promise<Response> {
  const { request, model, client, plan } = call
  const { timeouts } = model.config.resilience
  const started = Date.now()
  const path = ROUTE_PATH[request.kind]
  const body = toOpenAIBody(request, model.servedModelName)

  if (request.stream) {
    const { reader, first } = await plan.run(async (endpoint) => {
      const timeoutMs = Math.min(call.runpod.timeoutMs, timeouts.firstTokenMs)
      const upstream = await client.openai(endpoint, path, body, { signal: call.signal, headersTimeoutOnly: true, timeoutMs })
      if (!upstream.body) throw new GatewayError('upstream_error', 'The upstream answered a stream request with no body.')
      const reader = upstream.body.getReader()
      const first = await readWithin(reader, started + timeouts.firstTokenMs - Date.now(), 'The model produced no first token in time.').catch((error: unknown) => {
        if (error instanceof GatewayError && error.code === 'upstream_timeout') throw error
        throw retryableFailure(new GatewayError('upstream_error', 'The upstream stream broke before its first byte.', { cause: error }))
      })
      if (first.done) throw retryableFailure(new GatewayError('upstream_error', 'The upstream stream ended before its first byte.'))
      return { reader, first: first.value }
    })

    let usage: TokenUsage | undefined
    const relay = createOpenAIRelay({
      source: reader,
      first,
      model: model.alias,
      includeUsage: request.includeUsage,
      idleMs: timeouts.idleMs,
      totalDeadline: started + timeouts.totalMs,
      onUsage: (u) => (usage = u),
      // The relay exists once the upstream answered: whatever ends it, the prompt was processed.
      onEnd: (end) => call.settle(end.ok ? { ok: true, usage } : { ok: false, error: end.error, producedOutput: end.started, usage, reachedUpstream: true }),
    })
    return new Response(relay, { status: 200, headers: SSE_HEADERS })
  }

  return plan.run(async (endpoint) => {
    const timeoutMs = Math.min(call.runpod.timeoutMs, timeouts.totalMs)
    const upstream = await client.openai(endpoint, path, body, { signal: call.signal, timeoutMs })
    let json: Record<string, unknown>
    try {
      json = (await upstream.json()) as Record<string, unknown>
    } catch (cause) {
      throw new GatewayError('upstream_error', 'The upstream answered with a body that is not JSON, or it broke off.', { cause })
    }
    const message = upstreamErrorMessage(json)
    if (message !== undefined) throw workerFailure(message)
    if (typeof json !== 'object' || json === null || !Array.isArray(request.kind === 'embedding' ? json.data : json.choices)) {
      throw new GatewayError('upstream_error', 'The upstream answered with an unexpected completion shape.')
    }
    json.model = model.alias
    call.settle({ ok: true, usage: json.usage as TokenUsage | undefined })
    return Response.json(json)
  })
}

/** Reads one chunk, or cancels the upstream body and throws `upstream_timeout` after `ms`. */
async function readWithin(reader: ReadableStreamDefaultReader<Uint8Array>, ms: number, message: string): Promise<ReadableStreamReadResult<Uint8Array>> {
  let timer: ReturnType<typeof setTimeout> | null = null
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new GatewayError('upstream_timeout', message)), Math.max(0, ms))
  })
  try {
    return await Promise.race([reader.read(), timeout])
  } catch (error) {
    reader.cancel().catch(() => undefined)
    throw error
  } finally {
    if (timer !== null) clearTimeout(timer)
  }
}
