/**
 * Deterministic logprobs in vLLM's shapes: chat `logprobs.content` entries, the completions
 * `{tokens, token_logprobs, top_logprobs, text_offset}` object, and `prompt_logprobs` lists. The
 * sampled token is always the most likely one; alternatives follow with lower logprobs.
 */

import { hashString } from './generate.ts'
import type { JsonObject, JsonValue } from './types.ts'

const ALTERNATIVES = [
  ' the', ' a', ' and', ' of', ' to', ' in', ' is', ' it', ' that', ' for',
  ' on', ' with', ' as', ' at', ' by', ' this', ' from', ' or', ' an', ' be',
]

/** The sampled token's logprob: a stable value in (-2, 0). */
function logprobOf(token: string, position: number): number {
  return -((hashString(`${position}:${token}`) % 1999) + 1) / 1000
}

/** `top` alternatives to `token` (the token itself first), with strictly falling logprobs. */
function alternatives(token: string, position: number, top: number): Array<{ token: string; logprob: number }> {
  const first = logprobOf(token, position)
  const others = ALTERNATIVES.filter((t) => t !== token)
  return Array.from({ length: top }, (_, i) => ({
    token: i === 0 ? token : (others[i - 1] ?? ` <alt${i}>`),
    logprob: i === 0 ? first : first - i * 0.75,
  }))
}

const bytes = (token: string): number[] => [...new TextEncoder().encode(token)]

/** One entry of a chat chunk's `logprobs.content`. */
export function chatLogprob(token: string, position: number, top: number): JsonObject {
  return {
    token,
    logprob: logprobOf(token, position),
    bytes: bytes(token),
    top_logprobs: alternatives(token, position, top).map((alt) => ({ token: alt.token, logprob: alt.logprob, bytes: bytes(alt.token) })),
  }
}

/**
 * The completions `logprobs` object of consecutive tokens starting at `position`, text offsets from `offset`.
 * Each `top_logprobs` entry holds the sampled token even at `logprobs: 0`, as vLLM keeps `top + 1` entries.
 */
export function completionLogprobs(tokens: readonly string[], options: { position: number; offset: number; top: number }): JsonObject {
  let offset = options.offset
  const text_offset: number[] = []
  for (const token of tokens) {
    text_offset.push(offset)
    offset += token.length
  }
  return {
    tokens: [...tokens],
    token_logprobs: tokens.map((t, i) => logprobOf(t, options.position + i)),
    top_logprobs: tokens.map((t, i) =>
      Object.fromEntries(alternatives(t, options.position + i, Math.max(1, options.top)).map((alt) => [alt.token, alt.logprob])),
    ),
    text_offset,
  }
}

/**
 * vLLM's `prompt_logprobs`: `null` for the first prompt token (nothing precedes it), then per token a
 * map from token id to `{logprob, rank, decoded_token}` holding the prompt token and `top` alternatives.
 */
export function promptLogprobs(words: readonly string[], count: number, top: number): JsonValue[] {
  return Array.from({ length: count }, (_, i): JsonValue => {
    if (i === 0) return null
    const word = words[i] ?? '<|im_sep|>'
    const entries: Array<[string, JsonValue]> = alternatives(word, -i, top + 1).map((alt, rank) => [
      String(hashString(alt.token) % 32_000),
      { logprob: alt.logprob, rank: rank + 1, decoded_token: alt.token },
    ])
    return Object.fromEntries(entries)
  })
}
