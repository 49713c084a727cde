/**
 * The two upstream bodies built from a NormalizedRequest: the OpenAI body for Runpod's `/openai/v1/*`
 * route and worker-vllm's native job `input` (runpod-api.md §2).
 *
 * Key order is fixed here, whatever order the request object was built in: these bodies are also hashed
 * for cache keys, and equal requests must hash equal. `user` is never sent upstream (it would split the
 * cache per user, and vLLM ignores it anyway).
 */
import { GatewayError } from '../errors/index.ts'
import type { NormalizedMessage, NormalizedRequest, SamplingParams } from './types.ts'

/** Every sampling param, in the order upstream bodies list them. */
export const SAMPLING_KEYS = [
  'max_tokens',
  'n',
  'best_of',
  'temperature',
  'top_p',
  'top_k',
  'min_p',
  'presence_penalty',
  'frequency_penalty',
  'repetition_penalty',
  'length_penalty',
  'stop',
  'stop_token_ids',
  'ignore_eos',
  'min_tokens',
  'skip_special_tokens',
  'spaces_between_special_tokens',
  'include_stop_str_in_output',
  'seed',
] as const satisfies readonly (keyof SamplingParams)[]

// Compile-time guard: adding a field to SamplingParams without listing it above fails the typecheck.
type UnlistedSamplingKey = Exclude<keyof SamplingParams, (typeof SAMPLING_KEYS)[number]>
const allSamplingKeysListed: [UnlistedSamplingKey] extends [never] ? true : UnlistedSamplingKey = true
void allSamplingKeysListed

/**
 * The body for `POST /openai/v1/chat/completions` (kind `chat`) or `/completions` (kind `completion`).
 * Streaming requests always ask for usage: podgate settles quotas from it, whatever the caller asked.
 *
 * @example
 * toOpenAIBody(request, 'meta-llama/Llama-3.1-8B-Instruct')
 * // { model, messages, max_tokens: 512, temperature: 0.7, stream: true, stream_options: { include_usage: true } }
 */
export function toOpenAIBody(req: NormalizedRequest, servedModelName: string): Record<string, unknown> {
  const body: Record<string, unknown> = { model: servedModelName }
  if (req.kind === 'chat') body.messages = messagesOf(req)
  else body.prompt = promptOf(req)
  copySampling(req.sampling, body)
  body.stream = req.stream
  if (req.stream) body.stream_options = { include_usage: true }
  return body
}

/**
 * worker-vllm's job `input` for `/run` and `/runsync`: `{messages}` or `{prompt}`, then
 * `sampling_params` (every set param, `max_tokens` included), then `stream`.
 *
 * @example
 * await client.run(endpoint, { input: toNativeInput(request) })
 */
export function toNativeInput(req: NormalizedRequest): Record<string, unknown> {
  const input: Record<string, unknown> = {}
  if (req.kind === 'chat') input.messages = messagesOf(req)
  else input.prompt = promptOf(req)
  const samplingParams: Record<string, unknown> = {}
  copySampling(req.sampling, samplingParams)
  input.sampling_params = samplingParams
  input.stream = req.stream
  return input
}

function copySampling(sampling: SamplingParams, target: Record<string, unknown>): void {
  for (const key of SAMPLING_KEYS) {
    const value = sampling[key]
    if (value !== undefined) target[key] = value
  }
}

/** Fresh `{role, content, name?}` objects, so the key order does not depend on who built the messages. */
function messagesOf(req: NormalizedRequest): { role: NormalizedMessage['role']; content: string; name?: string }[] {
  if (!req.messages) throw malformed('a chat request without messages')
  return req.messages.map((m) => (m.name === undefined
    ? { role: m.role, content: m.content }
    : { role: m.role, content: m.content, name: m.name }))
}

function promptOf(req: NormalizedRequest): string {
  if (req.prompt === undefined) throw malformed('a completion request without a prompt')
  return req.prompt
}

/** A NormalizedRequest built by podgate's own code is never like this: it is a bug, not a caller error. */
function malformed(what: string): GatewayError {
  return new GatewayError('internal_error', `podgate built ${what}.`)
}
