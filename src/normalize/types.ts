/**
 * The normalized request: what every surface's input becomes before routing.
 *
 * Both upstream modes are built from it: `openaiBody` for Runpod's `/openai/v1/*` route and
 * `nativeInput` for worker-vllm's `/run` / `/runsync` job input.
 */

export type RequestKind = 'chat' | 'completion'

/** A chat message after normalization: content parts flattened to one string. */
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
  length_penalty?: number
  stop?: string[]
  stop_token_ids?: number[]
  ignore_eos?: boolean
  min_tokens?: number
  skip_special_tokens?: boolean
  spaces_between_special_tokens?: boolean
  include_stop_str_in_output?: boolean
  seed?: number
}

export interface NormalizedRequest {
  kind: RequestKind
  /** The podgate model alias the caller named. */
  model: string
  stream: boolean
  /** The caller asked for `stream_options.include_usage`. podgate always asks upstream for usage. */
  includeUsage: boolean
  /** Present when kind is `chat`. */
  messages?: NormalizedMessage[]
  /** Present when kind is `completion`. */
  prompt?: string
  sampling: SamplingParams
  /** The caller's `user`, if any (never part of a cache key). */
  user?: string
}
