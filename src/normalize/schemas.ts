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
import { described } from '../zod/describe.ts'

/** Longest text podgate accepts, per string and summed over a request's messages or prompt. */
export const MAX_TEXT_CHARS = 1_000_000
/**
 * Most items in one array: messages, content parts, prompts, inputs. vLLM has no limit of its own, so this
 * only guards podgate's parse; `maxBodyBytes` bounds a request first (OpenAI allows 2,048 embedding inputs).
 */
export const MAX_MESSAGES = 100_000
/** Most stop sequences the native shorthand carries (OpenAI allows 4; vLLM has no limit: this only bounds the parse). */
export const MAX_STOP_SEQUENCES = 1_000
/** Schema-level ceiling for `n` / `best_of`; the per-model `maxChoices` is enforced by the normalizer. */
const MAX_CHOICES_CEILING = 128
/** Longest token-id prompt or input, per array. */
const MAX_TOKEN_IDS = 1_000_000

/** A string of at most `max` characters. */
const chars = (max: number) => z.string().check(z.maxLength(max))
const modelField = described(
  z.string().check(z.minLength(1), z.maxLength(256)),
  'The podgate model alias (or, under `/v2/<model>/openai/v1`, the served model name).',
)
/** `n` and `best_of`; the model's `maxChoices` is checked by the normalizer. */
const choices = () => z.nullish(z.number().check(z.int(), z.minimum(1), z.maximum(MAX_CHOICES_CEILING)))

/** What podgate reads to size the quota reservation and to decide caching; validated so its 400s name the field. */
const readShape = {
  model: modelField,
  stream: described(z.nullish(z.boolean()), 'Answer with server-sent events.'),
  stream_options: described(
    z.nullish(z.looseObject({
      include_usage: described(z.nullish(z.boolean()), 'Send a final chunk with token usage (podgate always asks upstream for it).'),
    })),
    'Streaming options; only allowed with `stream: true`. Other members (`continuous_usage_stats`) pass through.',
  ),
  max_tokens: described(
    z.nullish(z.number().check(z.int(), z.minimum(1))),
    'Most tokens to generate. Capped per model; defaults to the model\'s configured default.',
  ),
  max_completion_tokens: described(
    z.nullish(z.number().check(z.int(), z.minimum(1))),
    'Alias of `max_tokens`. If both are sent they must be equal.',
  ),
  n: described(choices(), 'How many choices to generate (at most the model\'s `maxChoices`).'),
  best_of: described(
    choices(),
    'vLLM: generate this many sequences and return the best `n` (at least `n`, at most `maxChoices`). Charged in the reservation.',
  ),
  temperature: described(
    z.nullish(z.number().check(z.minimum(0))),
    'Sampling temperature, at least 0 (OpenAI stops at 2; vLLM takes any). `0` makes the answer cacheable.',
  ),
  seed: described(z.nullish(z.number().check(z.int())), 'Seed for reproducible sampling; makes the answer cacheable.'),
  user: described(z.nullish(chars(256)), 'An end-user identifier. Forwarded; never part of a cache key.'),
}

/**
 * A content part: podgate reads `type` (and a text part's `text` for the estimate); the rest passes
 * through. vLLM also takes a bare string as a text part, a part with no `type` (`{"image_url": ...}`), and
 * skips a null `text`.
 */
const contentPartSchema = described(
  z.union([
    chars(MAX_TEXT_CHARS),
    z.looseObject({
      type: described(
        z.optional(z.string().check(z.minLength(1), z.maxLength(64))),
        '`text`, `image_url`, `input_audio`, `audio_url`, `video_url`, ... : any type vLLM serves (vLLM infers it when left out).',
      ),
      text: z.nullish(chars(MAX_TEXT_CHARS)),
    }),
  ], { error: 'expected a string or an object' }),
  'A content part, forwarded unchanged.',
)

const messageContentSchema = described(
  z.nullish(z.union([chars(MAX_TEXT_CHARS), z.array(contentPartSchema).check(z.maxLength(MAX_MESSAGES))], {
    // For unions the message is the "expected ..." clause; the mapper adds the param and the actual type.
    error: 'expected a string, an array of content parts or null',
  })),
  'A string, content parts, or null (an assistant message with `tool_calls`).',
)

const messageSchema = described(
  z.looseObject({
    role: described(
      z.string().check(z.minLength(1), z.maxLength(64)),
      'Any role the model\'s chat template knows: system, developer, user, assistant, tool, ...',
    ),
    content: messageContentSchema,
  }),
  'A message, forwarded unchanged (`tool_calls`, `tool_call_id`, `name`, `reasoning` included).',
)

export const chatCompletionRequestSchema = described(
  z.looseObject({
    ...readShape,
    messages: described(z.array(messageSchema).check(z.minLength(1), z.maxLength(MAX_MESSAGES)), 'The conversation so far.'),
  }),
  'An OpenAI chat completion request. Fields podgate does not read are forwarded unchanged.',
)

const tokenIds = z.array(z.number().check(z.int(), z.minimum(0))).check(z.minLength(1), z.maxLength(MAX_TOKEN_IDS))

/** string | string[] | int[] | int[][]: OpenAI's prompt and embedding input forms. */
function textOrTokens(what: string) {
  return described(
    z.union(
      [
        chars(MAX_TEXT_CHARS),
        z.array(chars(MAX_TEXT_CHARS)).check(z.minLength(1), z.maxLength(MAX_MESSAGES)),
        tokenIds,
        z.array(tokenIds).check(z.minLength(1), z.maxLength(MAX_MESSAGES)),
      ],
      { error: 'expected a string, an array of strings, an array of token ids or an array of token-id arrays' },
    ),
    `The ${what}: a string, strings, token ids, or arrays of token ids.`,
  )
}

export const completionRequestSchema = described(
  z.looseObject({
    ...readShape,
    max_tokens: described(
      z.nullish(z.number().check(z.int(), z.minimum(0))),
      'Most tokens to generate. Capped per model; defaults to the model\'s configured default. `0` only with `echo: true`: vLLM then scores the prompt (its logprobs) without generating.',
    ),
    prompt: z.optional(textOrTokens('prompt')),
  }),
  'An OpenAI (legacy) text completion request: `prompt`, or vLLM\'s `prompt_embeds`, or both. Fields podgate does not read (`echo`, `logprobs`, `prompt_embeds`, ...) are forwarded unchanged.',
)

export const embeddingRequestSchema = described(
  z.looseObject({
    model: modelField,
    input: z.optional(textOrTokens('input')),
    messages: described(
      z.optional(z.array(messageSchema).check(z.minLength(1), z.maxLength(MAX_MESSAGES))),
      'vLLM: chat messages to embed instead of `input` (a multimodal embedding model takes image and audio parts this way).',
    ),
    user: readShape.user,
  }),
  'An OpenAI embeddings request (`input`), or vLLM\'s chat form (`messages`). `encoding_format`, `dimensions` and any other field are forwarded unchanged.',
)

export type ChatCompletionRequest = z.infer<typeof chatCompletionRequestSchema>
export type CompletionRequest = z.infer<typeof completionRequestSchema>
export type EmbeddingRequest = z.infer<typeof embeddingRequestSchema>
export type ChatMessageInput = ChatCompletionRequest['messages'][number]
