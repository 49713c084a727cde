/**
 * Serves a completion through Runpod's OpenAI-compatible route (`/openai/v1/*`): the body is vLLM's own
 * OpenAI dialect, so podgate only renames the model to the caller's alias and keeps usage for itself.
 */
import { toOpenAIBody } from '../normalize/index.ts'
import { createOpenAIRelay } from '../streaming/openai-relay.ts'
import { GatewayError } from '../errors/index.ts'
import { SSE_HEADERS } from './types.ts'
import type { CompletionCall, TokenUsage } from './types.ts'

export async function openaiRouteCompletion(call: CompletionCall): Promise<Response> {
  const { request, model, endpoint, client } = call
  const path = request.kind === 'chat' ? '/chat/completions' : '/completions'
  const body = toOpenAIBody(request, model.servedModelName)
  const upstream = await client.openai(endpoint, path, body, { signal: call.signal, headersTimeoutOnly: request.stream })

  if (request.stream) {
    if (!upstream.body) throw new GatewayError('upstream_error', 'The upstream answered a stream request with no body.')
    let usage: TokenUsage | undefined
    const relay = createOpenAIRelay({
      model: model.alias,
      includeUsage: request.includeUsage,
      onUsage: (u) => (usage = u),
      onEnd: (end) => call.settle(end.ok ? { ok: true, usage } : { ok: false, error: end.error, producedOutput: end.started, usage }),
    })
    return new Response(upstream.body.pipeThrough(relay), { status: 200, headers: SSE_HEADERS })
  }

  let json: Record<string, unknown>
  try {
    json = (await upstream.json()) as Record<string, unknown>
  } catch (cause) {
    throw new GatewayError('upstream_error', 'The upstream answered with a body that is not JSON, or it broke off.', { cause })
  }
  if (typeof json !== 'object' || json === null || !Array.isArray(json.choices)) {
    throw new GatewayError('upstream_error', 'The upstream answered with an unexpected completion shape.')
  }
  json.model = model.alias
  call.settle({ ok: true, usage: json.usage as TokenUsage | undefined })
  return Response.json(json)
}
