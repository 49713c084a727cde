/**
 * Whether a forwarded body fits worker-vllm's native job input (`{messages|prompt, sampling_params,
 * stream}`, runpod-api.md §2), and that input's parts when it does.
 *
 * A body fits only when every field it carries has a native equivalent: text-only messages in the roles
 * every chat template knows, one string prompt, and sampling params of the types worker-vllm takes. Any
 * other field (tools, response_format, logprobs, media parts, template kwargs, unknown fields) means the
 * request goes as an `openai_route` job instead, so nothing is dropped on the way.
 */
import * as z from 'zod/mini'
import { MAX_STOP_SEQUENCES, seed } from './schemas.ts'
import type { NormalizedMessage, SamplingParams } from './types.ts'
import type { ModelConfig } from '../config/schema.ts'
import { parseRequest } from './zod-errors.ts'
import { oneOf } from '../zod/one-of.ts'
import { int } from '../zod/numbers.ts'
import { refine } from '../zod/refine.ts'
import { union } from '../zod/union.ts'
import { optional } from '../zod/optional.ts'
import { strictObject } from '../zod/object.ts'
import { boolean, number, string } from '../zod/scalars.ts'
import { gt, maxLength, maximum, minLength, minimum } from '../zod/bounds.ts'
import { array } from '../zod/array.ts'
const MAX_STOP_TOKEN_IDS = 100_000

const stopString = string().check(minLength(1), maxLength(1_000))
const optionalInt = (...checks: z.core.$ZodCheck<number>[]) => optional(number().check(int(), ...checks))
const optionalNumber = (...checks: z.core.$ZodCheck<number>[]) => optional(number().check(...checks))

/**
 * worker-vllm's sampling params (runpod-api.md §2) in the types its native input takes, with the bounds
 * vLLM's `SamplingParams` checks (temperature at most 2 in current releases), and no tighter ones; names
 * are OpenAI's or vLLM's. A value out of them on the OpenAI surface sends the request as an `openai_route`
 * job instead, where vLLM answers for itself.
 */
const nativeSamplingSchema = strictObject({
  max_tokens: optionalInt(minimum(1)),
  n: optionalInt(minimum(1)),
  best_of: optionalInt(minimum(1)),
  temperature: optionalNumber(minimum(0), maximum(2)),
  top_p: optionalNumber(gt(0), maximum(1)),
  top_k: optionalInt(minimum(-1)),
  min_p: optionalNumber(minimum(0), maximum(1)),
  presence_penalty: optionalNumber(minimum(-2), maximum(2)),
  frequency_penalty: optionalNumber(minimum(-2), maximum(2)),
  repetition_penalty: optionalNumber(gt(0)),
  use_beam_search: optional(boolean()),
  length_penalty: optionalNumber(),
  early_stopping: optional(union([boolean(), oneOf(['never'])])),
  stop: optional(union([stopString, array(stopString).check(maxLength(MAX_STOP_SEQUENCES))])),
  stop_token_ids: optional(array(number().check(int(), minimum(0))).check(maxLength(MAX_STOP_TOKEN_IDS))),
  ignore_eos: optional(boolean()),
  min_tokens: optionalInt(minimum(0)),
  skip_special_tokens: optional(boolean()),
  spaces_between_special_tokens: optional(boolean()),
  include_stop_str_in_output: optional(boolean()),
  truncate_prompt_tokens: optionalInt(minimum(-1)),
  seed: optional(seed()),
  // SamplingParams' checks across fields (vLLM's sampling_params.py `_verify_args`): a classic worker
  // raises them while reading its input, which fails the job as the worker's error, not the caller's.
  // Beam search, which older vLLM ran only at temperature 0, is not greedy sampling.
}).check(refine((v) => !(v.temperature! < 1e-5 && v.n! > 1 && !v.use_beam_search) && !(v.min_tokens! > v.max_tokens!), "vLLM takes 'n' 1 at temperature 0 (greedy sampling) and 'min_tokens' at most 'max_tokens'"))

type NativeSamplingKey = keyof typeof nativeSamplingSchema.shape
const NATIVE_ROLES = new Set(['system', 'developer', 'user', 'assistant'])
const allSamplingKeysListed: [UnlistedSamplingKey] extends [never] ? true : UnlistedSamplingKey = true

/** Every sampling param, in the order native inputs list them: the schema's fields. */
export const SAMPLING_KEYS = Object.keys(nativeSamplingSchema.shape) as NativeSamplingKey[]

// Compile-time guard: a field of SamplingParams the schema lacks, or one it has that SamplingParams lacks, fails the typecheck.
type UnlistedSamplingKey = Exclude<keyof SamplingParams, NativeSamplingKey> | Exclude<NativeSamplingKey, keyof SamplingParams>
void allSamplingKeysListed

/**
 * worker-vllm's params (runpod-api.md §2) that current vLLM's own `SamplingParams` no longer has (`best_of`
 * was removed, beam search moved out of it): a classic worker passing them to `SamplingParams(**params)` fails the job. So
 * an OpenAI-surface request carrying them goes as an `openai_route` job, where vLLM's OpenAI server takes
 * them; only native input (`/v2/{model}/run`), which the caller wrote for the worker, sends them as is.
 */
const NATIVE_INPUT_ONLY = new Set(['best_of', 'use_beam_search', 'length_penalty', 'early_stopping', 'truncate_prompt_tokens'])

/** Fields with no sampling meaning that the shorthand may leave out: `user` affects no output. */
const FRAMING = new Set(['model', 'messages', 'prompt', 'stream', 'stream_options', 'user', 'max_completion_tokens'])

const SAMPLING = new Set<string>(SAMPLING_KEYS)

export interface ShorthandOptions {
  /** The body stands for native input the caller wrote (`/v2/{model}/run`): worker-vllm's own params are native too. */
  nativeInput?: boolean
}

/**
 * Whether an OpenAI-surface request may take the shorthand at all: the shorthand names no model (the
 * worker runs its default), so a model with a served name of its own (a LoRA adapter, a second
 * `--served-model-name`) goes as an `openai_route` job, which names it. Native input names no model either.
 */
export function mayShorthand(model: ModelConfig, options: ShorthandOptions): boolean {
  return options.nativeInput === true || model.servedModelName === undefined
}

/**
 * Why `shorthandSampling` refused sampling params that are all native ones (a value out of vLLM's
 * bounds or of another type): throws the 400 naming the param, else returns.
 */
export function assertNativeSampling(body: Record<string, unknown>): void {
  const picked = Object.fromEntries(Object.entries(body).filter(([name, value]) => SAMPLING.has(name) && value != null))
  parseRequest(nativeSamplingSchema, picked)
}

/**
 * Text-only messages in the shorthand's form, or undefined when one carries anything else. A `developer`
 * message is native input's `system` (classic workers' chat templates know no other); on the OpenAI
 * surface it goes as an `openai_route` job instead, where vLLM keeps the role it was sent.
 */
export function shorthandMessages(messages: readonly unknown[], options: ShorthandOptions = {}): NormalizedMessage[] | undefined {
  const out: NormalizedMessage[] = []
  for (const message of messages) {
    if (typeof message !== 'object' || message === null) return undefined
    const { role, content, name, ...rest } = message as Record<string, unknown>
    if (Object.values(rest).some((v) => v !== null && v !== undefined)) return undefined
    if (typeof role !== 'string' || !NATIVE_ROLES.has(role) || (role === 'developer' && !options.nativeInput)) return undefined
    if (name !== undefined && name !== null && typeof name !== 'string') return undefined
    let text: string
    if (typeof content === 'string') text = content
    else if (Array.isArray(content) && content.length > 0) {
      const parts: string[] = []
      for (const part of content as unknown[]) {
        if (typeof part !== 'object' || part === null) return undefined
        const { type, text: partText, ...partRest } = part as Record<string, unknown>
        if (type !== 'text' || typeof partText !== 'string' || Object.keys(partRest).length > 0) return undefined
        parts.push(partText)
      }
      text = parts.join('\n')
    } else return undefined
    const normalized: NormalizedMessage = { role: role === 'developer' ? 'system' : (role as NormalizedMessage['role']), content: text }
    if (typeof name === 'string') normalized.name = name
    out.push(normalized)
  }
  return out
}

/**
 * The native sampling params of `body` (max_tokens resolved), or undefined when a field has no native
 * equivalent. Null members count as not sent.
 */
export function shorthandSampling(body: Record<string, unknown>, maxTokens: number, options: ShorthandOptions = {}): SamplingParams | undefined {
  const picked: Record<string, unknown> = {}
  for (const [name, value] of Object.entries(body)) {
    if (value === null || value === undefined) continue
    if (NATIVE_INPUT_ONLY.has(name) && !options.nativeInput) return undefined
    if (name === 'stream_options') {
      if (typeof value !== 'object' || Object.keys(value).some((k) => k !== 'include_usage')) return undefined
      continue
    }
    if (FRAMING.has(name)) continue
    if (!SAMPLING.has(name)) return undefined
    picked[name] = value
  }
  picked.max_tokens = maxTokens
  const parsed = nativeSamplingSchema.safeParse(picked)
  if (!parsed.success) return undefined
  const values = parsed.data
  const sampling: SamplingParams = { max_tokens: maxTokens }
  for (const key of SAMPLING_KEYS) {
    if (key === 'max_tokens') continue
    const value = values[key]
    if (value === undefined) continue
    ;(sampling as unknown as Record<string, unknown>)[key] = key === 'stop' && typeof value === 'string' ? [value] : value
  }
  return sampling
}
