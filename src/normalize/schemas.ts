/**
 * zod schemas of the OpenAI request bodies podgate serves: `POST /v1/chat/completions`, `/v1/completions`
 * and `/v1/embeddings`. The single source of the request types and of the OpenAPI document.
 *
 * Pass-through by default: a schema checks only the fields podgate itself reads (see `reads.ts`), and
 * every object is loose, so any other field (tools, response_format, logprobs, image parts, vLLM's
 * extras, fields no release has yet) reaches the endpoint unchanged. vLLM validates what it serves.
 * Optional fields accept `null` as "not sent", as OpenAI's spec marks them nullable.
 */
import * as z from 'zod/mini'
import { isRawJSON } from '../http/body.ts'
import { int } from '../zod/numbers.ts'
import { nullish } from '../zod/nullable.ts'
import { refine } from '../zod/refine.ts'
import { union } from '../zod/union.ts'
import { optional } from '../zod/optional.ts'
import { looseObject } from '../zod/object.ts'
import { boolean, number, string, unknown } from '../zod/scalars.ts'
import { maxLength, maximum, minLength, minimum } from '../zod/bounds.ts'
import { array } from '../zod/array.ts'

/**
 * vLLM's seed: any 64-bit integer (`ge=INT64_MIN, le=INT64_MAX`), wider than JavaScript's safe integers:
 * past those, the body reader keeps the caller's digits as a raw JSON value (http/body.ts).
 */
export const seed = () => unknown().check(refine((v) => isRawJSON(v) ? inInt64(BigInt(v.rawJSON)) : Number.isInteger(v) && inInt64(BigInt(v as number)), 'must be a 64-bit integer'))

const inInt64 = (v: bigint) => v >= -(2n ** 63n) && v < 2n ** 63n

/**
 * Longest text podgate accepts, per string and summed over a request's messages or prompt: the largest
 * `maxBodyBytes`, so only the body limit binds. vLLM bounds a prompt by the model's context, and a
 * long-context model's (256k to 10M tokens) takes several million characters.
 */
export const MAX_TEXT_CHARS = 20 * 1024 * 1024
/**
 * Most items in one array: messages, content parts, prompts, inputs (OpenAI allows 2,048 embedding
 * inputs; vLLM has no limit). It bounds what a refused request costs: a union that fails reports every
 * item of every branch, so the worst body costs a few issues an item (see bounded.ts).
 */
export const MAX_MESSAGES = 10_000
/** Most stop sequences the native shorthand carries (OpenAI allows 4; vLLM has no limit: this only bounds the parse). */
export const MAX_STOP_SEQUENCES = 1_000
/** Schema-level ceiling for `n` / `best_of`; the per-model `maxChoices` is enforced by the normalizer. */
const MAX_CHOICES_CEILING = 128
/** Longest token-id prompt or input, per array. */
export const MAX_TOKEN_IDS = 1_000_000

/** A string of at most `max` characters. */
const chars = (max: number) => string().check(maxLength(max))
const modelField = string().check(minLength(1), maxLength(256))
/** `n` and `best_of`; the model's `maxChoices` is checked by the normalizer. */
const choices = () => nullish(number().check(int(), minimum(1), maximum(MAX_CHOICES_CEILING)))

/** string | string[] | int[] | int[][]: OpenAI's prompt and embedding input forms. */
function textOrTokens() {
  return union(
    // Token ids before strings: a valid million-id prompt then passes at once, where the strings branch
    // first would fail it item by item; a valid array of strings fails the ids branch at most MAX_MESSAGES times.
    [
      chars(MAX_TEXT_CHARS),
      tokenIds,
      array(chars(MAX_TEXT_CHARS)).check(minLength(1), maxLength(MAX_MESSAGES)),
      array(tokenIds).check(minLength(1), maxLength(MAX_MESSAGES)),
    ],
    { error: 'expected a string, an array of strings, an array of token ids or an array of token-id arrays' },
  )
}

/**
 * What podgate reads to size the quota reservation and to decide caching; validated so its 400s name
 * the field. (Field descriptions for the OpenAPI document: src/openapi/descriptions.ts.)
 */
const readShape = {
  model: modelField,
  stream: nullish(boolean()),
  stream_options: nullish(looseObject({ include_usage: nullish(boolean()) })),
  max_tokens: nullish(number().check(int(), minimum(1))),
  max_completion_tokens: nullish(number().check(int(), minimum(1))),
  n: choices(),
  best_of: choices(),
  temperature: nullish(number().check(minimum(0))),
  seed: nullish(seed()),
  user: nullish(chars(256)),
}

/**
 * A content part: podgate reads `type` (and a text part's `text` for the estimate); the rest passes
 * through. vLLM also takes a bare string as a text part, a part with no `type` (`{"image_url": ...}`), and
 * skips a null `text`.
 */
const contentPartSchema = union(
  [
    chars(MAX_TEXT_CHARS),
    looseObject({
      type: optional(string().check(minLength(1), maxLength(64))),
      text: nullish(chars(MAX_TEXT_CHARS)),
    }),
  ],
  { error: 'expected a string or an object' },
)

const messageContentSchema = nullish(
  union([chars(MAX_TEXT_CHARS), array(contentPartSchema).check(maxLength(MAX_MESSAGES))], {
    // For unions the message is the "expected ..." clause; the mapper adds the param and the actual type.
    error: 'expected a string, an array of content parts or null',
  }),
)

const messageSchema = looseObject({
  role: string().check(minLength(1), maxLength(64)),
  content: messageContentSchema,
})

export const chatCompletionRequestSchema = looseObject({
  ...readShape,
  messages: array(messageSchema).check(minLength(1), maxLength(MAX_MESSAGES)),
})

const tokenIds = array(number().check(int(), minimum(0))).check(minLength(1), maxLength(MAX_TOKEN_IDS))

/** `prompt`, or vLLM's `prompt_embeds`, or both; `max_tokens: 0` only with `echo` (checked by the normalizer). */
export const completionRequestSchema = looseObject({
  ...readShape,
  max_tokens: nullish(number().check(int(), minimum(0))),
  prompt: nullish(textOrTokens()),
})

/** `input`, or vLLM's chat form (`messages`), checked by the normalizer. */
export const embeddingRequestSchema = looseObject({
  model: modelField,
  input: nullish(textOrTokens()),
  messages: nullish(array(messageSchema).check(minLength(1), maxLength(MAX_MESSAGES))),
  user: readShape.user,
})

export type ChatCompletionRequest = z.infer<typeof chatCompletionRequestSchema>
export type CompletionRequest = z.infer<typeof completionRequestSchema>
export type EmbeddingRequest = z.infer<typeof embeddingRequestSchema>
export type ChatMessageInput = ChatCompletionRequest['messages'][number]
