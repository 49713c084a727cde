/**
 * The normalized request: what every surface's input becomes before routing.
 *
 * `body` is the caller's request as podgate forwards it (pass-through: every field but `model` unchanged,
 * plus the model's defaults where the caller sent none). Both upstream modes are built from it:
 * `toOpenAIBody` for Runpod's `/openai/v1/*` route and `toNativeInput` for worker-vllm's job input, which
 * is the native shorthand when `shorthand` is set and an `openai_route` job otherwise.
 */

import type { VllmRoute } from './route.ts'

export type RequestKind = 'chat' | 'completion' | 'embedding'

/** A chat message in the native shorthand: content parts flattened to one string. */
export interface NormalizedMessage {
  role: 'system' | 'user' | 'assistant'
  content: string
  name?: string
}

/** worker-vllm sampling params (runpod-api.md §2), only the ones that were set. */
export interface SamplingParams {
  max_tokens: number
  n?: number
  best_of?: number
  temperature?: number
  top_p?: number
  top_k?: number
  min_p?: number
  presence_penalty?: number
  frequency_penalty?: number
  repetition_penalty?: number
  use_beam_search?: boolean
  length_penalty?: number
  early_stopping?: boolean | 'never'
  stop?: string[]
  stop_token_ids?: number[]
  ignore_eos?: boolean
  min_tokens?: number
  skip_special_tokens?: boolean
  spaces_between_special_tokens?: boolean
  include_stop_str_in_output?: boolean
  truncate_prompt_tokens?: number
  /** Past 2^53, the caller's digits as a raw JSON value (`JSON.rawJSON`), which serializes as sent. */
  seed?: number | { rawJSON: string }
}

/** What the quota reservation is sized from (see docs/passthrough.md "Quota"). */
export interface RequestEstimate {
  /** Estimated prompt tokens: text at ~4 characters a token, token ids one each, a fixed cost per media part, tool and schema JSON. */
  promptTokens: number
  /** Sequences generated: prompts × max(n, best_of); 0 for embeddings. */
  sequences: number
}

export interface NormalizedRequest {
  kind: RequestKind
  /** The podgate model alias the caller named. */
  model: string
  stream: boolean
  /** The caller asked for `stream_options.include_usage`. podgate asks upstream for usage wherever the input can carry it (not the native shorthand). */
  includeUsage: boolean
  /** The body podgate forwards, `model` still the alias (`toOpenAIBody` writes the served name). */
  body: Record<string, unknown>
  /** The request fits worker-vllm's native shorthand (`messages` / `prompt` + `sampling_params`). */
  shorthand: boolean
  /** Present when kind is `chat` and `shorthand` is set. */
  messages?: NormalizedMessage[]
  /** Present when kind is `completion` and `shorthand` is set. */
  prompt?: string
  /** Every sampling param when `shorthand` is set; else only the ones podgate reads. `max_tokens` is 0 for embeddings. */
  sampling: SamplingParams
  estimate: RequestEstimate
  /** The caller's `user`, if any (never part of a cache key). */
  user?: string
  /** Set for vLLM's other routes (`/v1/responses`, `/v1/rerank`, ...): the body goes to this route as it is. */
  route?: VllmRoute
}
