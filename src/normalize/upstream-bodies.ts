/**
 * The upstream bodies built from a NormalizedRequest: the OpenAI body for Runpod's `/openai/v1/*` route
 * and worker-vllm's native job `input` (runpod-api.md §2): the shorthand when the request fits it, else
 * an `openai_route` job carrying the same OpenAI body, which both worker-vllm generations serve.
 */
import { GatewayError } from '../errors/index.ts'
import { SAMPLING_KEYS } from './shorthand.ts'
import type { NormalizedMessage, NormalizedRequest, RequestKind, SamplingParams } from './types.ts'

export { SAMPLING_KEYS } from './shorthand.ts'

/** The vLLM route of each request kind, as worker-vllm's `openai_route` names it. */
export const OPENAI_ROUTE: Readonly<Record<RequestKind, '/v1/chat/completions' | '/v1/completions' | '/v1/embeddings'>> = {
  chat: '/v1/chat/completions',
  completion: '/v1/completions',
  embedding: '/v1/embeddings',
}

function copySampling(sampling: SamplingParams, target: Record<string, unknown>): void {
  for (const key of SAMPLING_KEYS) {
    const value = sampling[key]
    if (value !== undefined) target[key] = value
  }
}

/**
 * The body for `POST /openai/v1/chat/completions`, `/completions` or `/embeddings`: the caller's body,
 * `model` rewritten to the served name. Streams always ask for usage (`stream_options.include_usage`):
 * podgate settles quotas from it and strips the usage chunk when the caller did not ask for it.
 *
 * @example
 * toOpenAIBody(request, 'meta-llama/Llama-3.1-8B-Instruct')
 * // { ...callerBody, model: 'meta-llama/Llama-3.1-8B-Instruct', stream_options: { include_usage: true } }
 */
export function toOpenAIBody(req: NormalizedRequest, servedModelName: string): Record<string, unknown> {
  const body: Record<string, unknown> = { ...req.body, model: servedModelName }
  // A route that does not stream (embeddings, tokenize, rerank, ...) ignores `stream` in vLLM, but current
  // worker-vllm then relays vLLM's JSON answer as text chunks, which is no JSON answer: the field is left out.
  if (!req.stream && body.stream) delete body.stream
  // vLLM's other routes report usage in their own events: their bodies get nothing added.
  if (req.stream && !req.route) {
    // A chat or completion body's stream_options passed its schema: an object, null or absent.
    const options: Record<string, unknown> = { ...(body.stream_options as object | null | undefined) }
    // vLLM honours continuous_usage_stats only with include_usage: asking for the usage podgate needs
    // must not give a caller who did not ask for it usage on every chunk.
    if (!req.includeUsage) delete options.continuous_usage_stats
    body.stream_options = { ...options, include_usage: true }
  }
  return body
}

/**
 * worker-vllm's job `input` for `/run` and `/runsync`. The shorthand `{messages|prompt, sampling_params,
 * stream}` when the request fits it; otherwise `{openai_route, openai_input}` with the OpenAI body.
 *
 * @example
 * await client.run(endpoint, { input: toNativeInput(request, model.servedModelName) })
 */
export function toNativeInput(req: NormalizedRequest, servedModelName: string = req.model): Record<string, unknown> {
  if (!req.shorthand) return { openai_route: req.route?.path ?? OPENAI_ROUTE[req.kind], openai_input: toOpenAIBody(req, servedModelName) }
  const input: Record<string, unknown> = {}
  if (req.kind === 'chat') input.messages = messagesOf(req)
  else input.prompt = promptOf(req)
  const samplingParams: Record<string, unknown> = {}
  copySampling(req.sampling, samplingParams)
  input.sampling_params = samplingParams
  input.stream = req.stream
  return input
}

/** A NormalizedRequest built by podgate's own code is never like this: it is a bug, not a caller error. */
function malformed(what: string): GatewayError {
  return new GatewayError('internal_error', `podgate built ${what}.`)
}

function promptOf(req: NormalizedRequest): string {
  if (req.prompt === undefined) throw malformed('a completion request without a prompt')
  return req.prompt
}

/** Fresh `{role, content, name?}` objects, so the key order does not depend on who built the messages. */
function messagesOf(req: NormalizedRequest): { role: NormalizedMessage['role']; content: string; name?: string }[] {
  if (!req.messages) throw malformed('a chat request without messages')
  return req.messages.map((m) => (m.name === undefined
    ? { role: m.role, content: m.content }
    : { role: m.role, content: m.content, name: m.name }))
}
