/**
 * A job's `input`, classified: native shorthand, an OpenAI passthrough (`openai_route` +
 * `openai_input`) to a generating route or a utility route, or input the worker refuses. Which
 * passthrough routes exist depends on the worker generation.
 */

import * as z from 'zod/mini'
import { parseDirectives } from './directives.ts'
import type { Directives } from './directives.ts'
import { DIALECTS, isGenerationRoute } from './dialects.ts'
import type { GenerationRoute } from './dialects.ts'
import { errorDialect } from './openai-format.ts'
import { nativeDefaultMaxTokens, parseNativeInput, samplingProblem } from './requests.ts'
import type { BatchSizing, GenerationRequest, Refusal } from './requests.ts'
import { isUtilityRoute, utilityTexts } from './utility-routes.ts'
import type { UtilityRoute } from './utility-routes.ts'

export type JobRequest =
  | { shape: 'native'; request: GenerationRequest; batching: BatchSizing }
  | { shape: 'openai'; route: '/v1/models'; request?: undefined }
  | { shape: 'openai'; route: GenerationRoute; request: GenerationRequest }
  | { shape: 'utility'; route: UtilityRoute; body: unknown }
  | { shape: 'refused'; refusal: Refusal; directives: Directives }
  | { shape: 'invalid'; message: string }

/**
 * Routes worker-vllm <= v2.23 serves through `openai_route` (Responses and Messages since v2.17);
 * anything else is 400 "Invalid route".
 */
export const CLASSIC_ROUTES: readonly string[] = ['/v1/models', '/v1/chat/completions', '/v1/completions', '/v1/responses', '/v1/messages']

/**
 * The fields of vLLM's `SamplingParams` (vllm/sampling_params.py, the vLLM the classic worker v2.23 runs)
 * a job may set. `best_of`, beam search (`use_beam_search`, `length_penalty`, `early_stopping`) and
 * `truncate_prompt_tokens` are no longer among them.
 */
const SAMPLING_PARAMS: ReadonlySet<string> = new Set([
  'n', 'presence_penalty', 'frequency_penalty', 'repetition_penalty', 'temperature', 'top_p', 'top_k', 'min_p', 'seed',
  'stop', 'stop_token_ids', 'ignore_eos', 'max_tokens', 'min_tokens', 'logprobs', 'prompt_logprobs', 'logprob_token_ids',
  'detokenize', 'skip_special_tokens', 'spaces_between_special_tokens', 'include_stop_str_in_output', 'stream_interval',
  'structured_outputs', 'logit_bias', 'allowed_token_ids', 'extra_args', 'bad_words', 'thinking_token_budget', 'repetition_detection',
])

export const passthroughInputSchema = z.looseObject({
  openai_route: z.string(),
  openai_input: z.optional(z.unknown()),
})

/** What the current worker calls on its `vllm serve` for a job, when the job is no shorthand. */
interface ProxyCall {
  route: string
  method: string
  body?: unknown
}

/** The current worker's message for input that is neither a call nor shorthand (handler.py). */
const NO_CURRENT_INPUT = 'Job input must contain one of: openai_input (+openai_route), route (+body), or prompt/messages.'

/**
 * Classifies a job's `input`. The current worker proxies any route to `vllm serve`; vLLM answers a
 * route it does not have with 404.
 */
export function parseJobInput(input: unknown, generation: 'classic' | 'current' = 'current'): JobRequest {
  if (generation === 'current') {
    const call = proxyCall(input)
    if (call) return proxiedCall(call)
    const { messages, prompt } = (input ?? {}) as { messages?: unknown; prompt?: unknown }
    if (messages == null && prompt == null) return { shape: 'invalid', message: NO_CURRENT_INPUT }
  }
  // The classic worker (utils.py JobInput) takes an `openai_route` job or shorthand, nothing else.
  const passthrough = generation === 'classic' ? passthroughInputSchema.safeParse(input) : undefined
  if (!passthrough?.success) {
    const native = parseNativeInput(input, generation)
    if (!native.ok) return { shape: 'invalid', message: native.message }
    // The classic worker builds vLLM's SamplingParams(**sampling_params) (utils.py JobInput), a msgspec
    // Struct that refuses any other key: the job fails with the TypeError's text. The current worker posts
    // them into vLLM's OpenAI body, which ignores what it does not know.
    const sampling = (input as { sampling_params?: Record<string, unknown> }).sampling_params ?? {}
    const unknown = generation === 'classic' ? Object.keys(sampling).find((key) => !SAMPLING_PARAMS.has(key)) : undefined
    if (unknown !== undefined) return { shape: 'invalid', message: `Unexpected keyword argument '${unknown}'` }
    // SamplingParams' own checks: the classic worker raises them while reading the input (the job fails
    // with their text, as any exception there); the current worker's vLLM refuses them with a 400.
    const problem = samplingProblem({ max_tokens: nativeDefaultMaxTokens(generation, input as { messages?: unknown }), ...sampling })
    if (problem !== undefined) {
      return generation === 'classic'
        ? { shape: 'invalid', message: problem }
        : { shape: 'refused', refusal: { status: 400, type: 'BadRequestError', message: problem }, directives: native.request.directives }
    }
    return { shape: 'native', request: native.request, batching: native.batching }
  }
  const route = passthrough.data.openai_route
  const body = passthrough.data.openai_input
  if (!CLASSIC_ROUTES.includes(route)) {
    return { shape: 'refused', refusal: { status: 400, type: 'BadRequestError', message: 'Invalid route' }, directives: {} }
  }
  if (route === '/v1/models') return { shape: 'openai', route }
  return generationJob(route as GenerationRoute, body)
}

/**
 * The call the current worker makes for a job (handler.py `_normalize_job_input`, Python truthiness):
 * a non-empty `openai_input` is POSTed to `openai_route` (chat completions when absent), a bare
 * `openai_route` is fetched with GET, and `route` goes with `body` and `method` (POST with a body, else
 * GET). Undefined for shorthand.
 */
function proxyCall(input: unknown): ProxyCall | undefined {
  if (typeof input !== 'object' || input === null) return undefined
  const { openai_input: openaiInput, openai_route: openaiRoute, route, body, method } = input as Record<string, unknown>
  if (truthy(openaiInput)) return { route: truthy(openaiRoute) ? String(openaiRoute) : '/v1/chat/completions', method: 'POST', body: openaiInput }
  if (truthy(openaiRoute)) return { route: String(openaiRoute), method: 'GET' }
  if (truthy(route)) return { route: String(route), method: (truthy(method) ? String(method) : truthy(body) ? 'POST' : 'GET').toUpperCase(), body }
  return undefined
}

/** The emulated `vllm serve`'s answer to one call: FastAPI's 405 for a method its route lacks, 404 for no route. */
function proxiedCall({ route, method, body }: ProxyCall): JobRequest {
  const served = route === '/v1/models' || isUtilityRoute(route) || isGenerationRoute(route)
  const fastapi = (status: 404 | 405): JobRequest => ({
    shape: 'refused',
    refusal: { status, type: '', message: status === 404 ? 'Not Found' : 'Method Not Allowed', dialect: 'fastapi' },
    directives: {},
  })
  if (!served) return fastapi(404)
  if (method !== (route === '/v1/models' ? 'GET' : 'POST')) return fastapi(405)
  if (route === '/v1/models') return { shape: 'openai', route }
  if (isUtilityRoute(route)) return { shape: 'utility', route, body }
  return generationJob(route as GenerationRoute, body)
}

/** Python's truthiness of a JSON value: null, false, 0, "", [] and {} are false. */
function truthy(value: unknown): boolean {
  if (Array.isArray(value)) return value.length > 0
  if (typeof value === 'object' && value !== null) return Object.keys(value).length > 0
  return Boolean(value)
}

function generationJob(route: GenerationRoute, body: unknown): JobRequest {
  const parsed = DIALECTS[route].parse(body)
  if (parsed.ok) return { shape: 'openai', route, request: parsed.request }
  return {
    shape: 'refused',
    refusal: { status: 400, type: 'BadRequestError', message: parsed.message, dialect: errorDialect(route), ...(parsed.schema ? { schema: true } : {}) },
    directives: parsed.directives ?? {},
  }
}

/** Directives of a job's input, for faults that must act before the job runs. */
export function jobDirectives(request: JobRequest): Directives {
  switch (request.shape) {
    case 'native':
    case 'openai':
      return request.request?.directives ?? {}
    case 'refused':
      return request.directives
    case 'utility':
      return parseDirectives(utilityTexts(request.route, request.body))
    default:
      return {}
  }
}
