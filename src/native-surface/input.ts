/**
 * The body of native `/run` and `/runsync` calls, validated before anything goes upstream.
 *
 * For worker-vllm models the `input` (`messages` or `prompt`, `sampling_params`, `stream`) goes through
 * the same normalizer as the OpenAI surface, so the model's caps and defaults hold on both surfaces and
 * no field reaches the GPU that podgate did not check (`openai_route` included). Models configured
 * `passthrough: true` serve other handlers: their `input` is any JSON object and is sent as is.
 */
import * as z from 'zod/mini'
import { GatewayError, invalidRequest } from '../errors/index.ts'
import { assertNativeSampling, normalizeChatRequest, normalizeCompletionRequest, parseRequest, SAMPLING_KEYS, toNativeInput } from '../normalize/index.ts'
import type { NormalizedRequest } from '../normalize/index.ts'
import type { ResolvedModel } from '../routing/models.ts'
import { lazily } from '../zod/lazily.ts'
import { int } from '../zod/numbers.ts'
import { keysIn } from '../zod/records.ts'
import { refine } from '../zod/refine.ts'
import type { JobKind } from './job-id.ts'
import { optional } from '../zod/optional.ts'
import { looseObject, strictObject } from '../zod/object.ts'
import { boolean, number, unknown } from '../zod/scalars.ts'
import { maximum, minimum } from '../zod/bounds.ts'

export interface JobRequest {
  kind: JobKind
  /** The `/run` body to send upstream. */
  body: { input: Record<string, unknown>; policy?: JobPolicy }
  /** The worker-vllm request as the OpenAI surface knows it (for quota estimates); absent for passthrough input. */
  normalized?: NormalizedRequest
}

// Worded after the field's name, which the message puts first: "'webhook' is not forwarded ...".
const refused = () =>
  optional(unknown().check(refine(
    (v) => v === undefined || v === null,
    'is not forwarded by podgate: follow the job with /status/{id} or /stream/{id}',
  )))

const DAY_MS = 24 * 60 * 60_000

const policyShape = () => strictObject({
  executionTimeout: optional(number().check(int(), minimum(5_000), maximum(7 * DAY_MS))),
  ttl: optional(number().check(int(), minimum(10_000), maximum(7 * DAY_MS))),
  lowPriority: optional(boolean()),
})
type JobPolicy = z.infer<ReturnType<typeof policyShape>>

const runBodySchema = lazily(() => strictObject({
  input: looseObject({}),
  policy: optional(policyShape()),
  // Runpod would call these with its own job id and results, past podgate's keys and normalization.
  webhook: refused(),
  webhookV2: refused(),
  s3Config: refused(),
}))

/** worker-vllm's input (runpod-api.md §2). `messages`, `prompt` and the sampling values are checked by the normalizer. */
const vllmInputSchema = lazily(() => strictObject({
  messages: optional(unknown()),
  prompt: optional(unknown()),
  sampling_params: optional(keysIn(SAMPLING_KEYS)),
  stream: optional(boolean()),
  apply_chat_template: optional(boolean()),
  max_batch_size: optional(number().check(int(), minimum(1), maximum(1_000))),
  min_batch_size: optional(number().check(int(), minimum(0), maximum(1_000))),
  batch_size_growth_factor: optional(number().check(minimum(0), maximum(100))),
}))

/** The normalizer reads this input as worker-vllm's own: its params go to the worker as written. */
const NATIVE_INPUT = { nativeInput: true } as const

const BATCH_KEYS = ['apply_chat_template', 'max_batch_size', 'min_batch_size', 'batch_size_growth_factor'] as const

/**
 * @example
 * const { kind, body } = normalizeJobBody(await readJsonBody(c.req.raw, max), model)
 * const job = await client.run(endpoint, body)
 */
export function normalizeJobBody(raw: unknown, model: ResolvedModel): JobRequest {
  const envelope = located(() => parseRequest(runBodySchema(), raw), '')
  // An undefined policy is left out of the JSON sent to Runpod, as an absent one.
  const { policy } = envelope
  if (model.config.passthrough) return { kind: 'raw', body: { input: envelope.input, policy } }

  const input = located(() => {
    try {
      return parseRequest(vllmInputSchema(), envelope.input)
    } catch (error) {
      // A field worker-vllm's input lacks: the OpenAI surface carries every field vLLM takes.
      if (error instanceof GatewayError && error.message.startsWith('Unrecognized')) error.message += `: send vLLM's other fields to the OpenAI surface, /v2/${model.alias}/openai/v1`
      throw error
    }
  }, 'input.')
  const kind = input.messages !== undefined ? 'chat' : 'completion'
  if (input.messages !== undefined && input.prompt !== undefined) {
    throw invalidRequest("Send either 'input.messages' or 'input.prompt', not both.")
  }
  if (input.messages === undefined && input.prompt === undefined) {
    throw invalidRequest("Missing required parameter: 'input.messages' (chat) or 'input.prompt' (completion).")
  }
  if (!model.config.kinds.includes(kind)) {
    const wanted = kind === 'chat' ? 'input.prompt' : 'input.messages'
    throw invalidRequest(`model '${model.alias}' only accepts '${wanted}'.`)
  }
  // The OpenAI body these fields stand for; the normalizer checks them and applies the model's caps.
  const openai: Record<string, unknown> = { model: model.alias, ...input.sampling_params }
  if (kind === 'chat') openai.messages = input.messages
  else openai.prompt = input.prompt
  if (input.stream !== undefined) openai.stream = input.stream
  const request = located(
    () => (kind === 'chat' ? normalizeChatRequest(openai, model.config, model.alias, NATIVE_INPUT) : normalizeCompletionRequest(openai, model.config, model.alias, NATIVE_INPUT)),
    'input.',
    (param) => (param === 'messages' || param === 'prompt' || /^(messages|prompt)\[/.test(param) ? param : `sampling_params.${param}`),
  )
  if (!request.shorthand) {
    // A sampling value out of vLLM's bounds names itself; anything else is in the messages.
    located(() => assertNativeSampling(request.body), 'input.', (param) => `sampling_params.${param}`)
    // The OpenAI surface serves tools, media parts, prompt lists and other fields (as an `openai_route` job on native endpoints).
    const chat = kind === 'chat'
    located(() => {
      throw invalidRequest(`worker-vllm's native input takes text messages (system, user, assistant) or one string prompt only: send tools, media, prompt lists and other OpenAI fields to /v2/${model.alias}/openai/v1/${chat ? 'chat/' : ''}completions`, { param: chat ? 'messages' : 'prompt' })
    }, 'input.')
  }
  const upstream = toNativeInput(request)
  for (const key of BATCH_KEYS) if (input[key] !== undefined) upstream[key] = input[key]
  return { kind, body: { input: upstream, policy }, normalized: request }
}

/**
 * Runpod's error body has no `param`, so the field at fault goes into the message, named as the caller
 * wrote it (`input.sampling_params.max_tokens`, not the OpenAI name the normalizer knows).
 */
function located<T>(parse: () => T, prefix: string, rename: (param: string) => string = (p) => p): T {
  try {
    return parse()
  } catch (error) {
    if (!(error instanceof GatewayError) || error.param === null) throw error
    const param = `${prefix}${rename(error.param)}`
    return rethrow(new GatewayError(error.code, `${error.message} (at '${param}')`, { param }))
  }
}

function rethrow(error: GatewayError): never {
  throw error
}
