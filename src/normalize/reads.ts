/**
 * The one list of request fields podgate reads itself. Everything else in a body is forwarded to the
 * endpoint unchanged (only `model` is rewritten to the served name); docs/passthrough.md is written
 * from this list.
 */
import type { RequestKind } from './types.ts'

export interface ReadField {
  /** The field, in OpenAI's `param` style. */
  field: string
  /** The request kinds that carry it. */
  kinds: readonly RequestKind[]
  /** Why podgate reads it. */
  why: string
}

const GENERATE: readonly RequestKind[] = ['chat', 'completion']
const ALL: readonly RequestKind[] = ['chat', 'completion', 'embedding']

export const PODGATE_READS: readonly ReadField[] = [
  { field: 'model', kinds: ALL, why: 'routing, key scope; rewritten to the served model name upstream' },
  { field: 'messages', kinds: ['chat'], why: 'shape (array of {role, content}); text length and non-text parts size the quota reservation' },
  { field: 'prompt', kinds: ['completion'], why: 'shape (string | string[] | int[] | int[][]); length and count size the reservation' },
  { field: 'input', kinds: ['embedding'], why: 'shape (string | string[] | int[] | int[][]); length sizes the reservation' },
  { field: 'stream', kinds: GENERATE, why: 'JSON or SSE answer' },
  { field: 'stream_options', kinds: GENERATE, why: '`include_usage`: podgate asks upstream for usage wherever the job input can carry it (not the native shorthand), and strips the usage chunk if the caller did not ask' },
  { field: 'max_tokens', kinds: GENERATE, why: 'capped per model (`maxTokensCap`); set to the model default when absent; sizes the reservation' },
  { field: 'max_completion_tokens', kinds: GENERATE, why: 'alias of max_tokens, same cap' },
  { field: 'n', kinds: GENERATE, why: 'capped per model (`maxChoices`); multiplies the reservation' },
  { field: 'best_of', kinds: GENERATE, why: 'capped per model (`maxChoices`), at least `n`; multiplies the reservation' },
  { field: 'temperature', kinds: GENERATE, why: '`0` makes the answer deterministic, so cacheable by default' },
  { field: 'seed', kinds: GENERATE, why: 'a fixed seed makes the answer deterministic, so cacheable by default' },
  { field: 'user', kinds: ALL, why: 'forwarded, but left out of the cache key' },
  { field: 'tools, functions, response_format, structured_outputs, guided_*', kinds: GENERATE, why: 'not validated: their JSON size is added to the reservation' },
]

/** Fields that frame the answer rather than choose it: left out of a cache key (but `stream` with `prompt_logprobs`: see `cacheKey`). */
export const FRAMING_FIELDS: readonly string[] = ['stream', 'stream_options', 'user']
