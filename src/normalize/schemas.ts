/**
 * zod schemas of the OpenAI request bodies podgate serves: `POST /v1/chat/completions`, `/v1/completions`
 * and `/v1/embeddings`. The single source of the request types and of the OpenAPI document.
 *
 * Pass-through by default: a schema checks only the fields podgate itself reads (see `reads.ts`), and
 * every object is loose, so any other field (tools, response_format, logprobs, image parts, vLLM's
 * extras, fields no release has yet) reaches the endpoint unchanged. vLLM validates what it serves.
 * Optional fields accept `null` as "not sent", as OpenAI's spec marks them nullable.
 */
import * as z from 'zod'

/** Longest text podgate accepts, per string and summed over a request's messages or prompt. */
export const MAX_TEXT_CHARS = 1_000_000
/** Most messages in one chat request (and most prompts / inputs in one array). */
export const MAX_MESSAGES = 1_000
/** Most stop sequences the native shorthand carries (OpenAI allows 4; vLLM has no limit). */
export const MAX_STOP_SEQUENCES = 16
/** Schema-level ceiling for `n` / `best_of`; the per-model `maxChoices` is enforced by the normalizer. */
const MAX_CHOICES_CEILING = 128
/** Longest token-id prompt or input, per array. */
const MAX_TOKEN_IDS = 1_000_000

const modelField = z.string().min(1).max(256).describe('The podgate model alias (or, under `/v2/<model>/openai/v1`, the served model name).')

/** What podgate reads to size the quota reservation and to decide caching; validated so its 400s name the field. */
const readShape = {
  model: modelField,
  stream: z.boolean().nullish().describe('Answer with server-sent events.'),
  stream_options: z
    .looseObject({
      include_usage: z.boolean().nullish().describe('Send a final chunk with token usage (podgate always asks upstream for it).'),
    })
    .nullish()
    .describe('Streaming options; only allowed with `stream: true`. Other members (`continuous_usage_stats`) pass through.'),
  max_tokens: z.number().int().min(1).nullish()
    .describe('Most tokens to generate. Capped per model; defaults to the model\'s configured default.'),
  max_completion_tokens: z.number().int().min(1).nullish()
    .describe('Alias of `max_tokens`. If both are sent they must be equal.'),
  n: z.number().int().min(1).max(MAX_CHOICES_CEILING).nullish()
    .describe('How many choices to generate (at most the model\'s `maxChoices`).'),
  best_of: z.number().int().min(1).max(MAX_CHOICES_CEILING).nullish()
    .describe('vLLM: generate this many sequences and return the best `n` (at least `n`, at most `maxChoices`). Charged in the reservation.'),
  temperature: z.number().min(0).max(2).nullish().describe('Sampling temperature, 0 to 2. `0` makes the answer cacheable.'),
  seed: z.number().int().nullish().describe('Seed for reproducible sampling; makes the answer cacheable.'),
  user: z.string().max(256).nullish().describe('An end-user identifier. Forwarded; never part of a cache key.'),
}

/** A content part: podgate reads `type` (and a text part's `text` for the estimate); the rest passes through. */
const contentPartSchema = z
  .looseObject({
    type: z.string().min(1).max(64).describe('`text`, `image_url`, `input_audio`, `audio_url`, `video_url`, ... : any type vLLM serves.'),
    text: z.string().max(MAX_TEXT_CHARS).optional(),
  })
  .describe('A content part, forwarded unchanged.')

const messageContentSchema = z
  .union([z.string().max(MAX_TEXT_CHARS), z.array(contentPartSchema).max(MAX_MESSAGES)], {
    // For unions the message is the "expected ..." clause; the mapper adds the param and the actual type.
    error: 'expected a string, an array of content parts or null',
  })
  .nullish()
  .describe('A string, content parts, or null (an assistant message with `tool_calls`).')

const messageSchema = z
  .looseObject({
    role: z.string().min(1).max(64).describe('Any role the model\'s chat template knows: system, developer, user, assistant, tool, ...'),
    content: messageContentSchema,
  })
  .describe('A message, forwarded unchanged (`tool_calls`, `tool_call_id`, `name`, `reasoning` included).')

export const chatCompletionRequestSchema = z
  .looseObject({
    ...readShape,
    messages: z.array(messageSchema).min(1).max(MAX_MESSAGES).describe('The conversation so far.'),
  })
  .describe('An OpenAI chat completion request. Fields podgate does not read are forwarded unchanged.')

const tokenIds = z.array(z.number().int().min(0)).min(1).max(MAX_TOKEN_IDS)

/** string | string[] | int[] | int[][]: OpenAI's prompt and embedding input forms. */
function textOrTokens(what: string) {
  return z.union(
    [
      z.string().max(MAX_TEXT_CHARS),
      z.array(z.string().max(MAX_TEXT_CHARS)).min(1).max(MAX_MESSAGES),
      tokenIds,
      z.array(tokenIds).min(1).max(MAX_MESSAGES),
    ],
    { error: 'expected a string, an array of strings, an array of token ids or an array of token-id arrays' },
  ).describe(`The ${what}: a string, strings, token ids, or arrays of token ids.`)
}

export const completionRequestSchema = z
  .looseObject({
    ...readShape,
    prompt: textOrTokens('prompt'),
  })
  .describe('An OpenAI (legacy) text completion request. Fields podgate does not read (`echo`, `logprobs`, `prompt_embeds`, ...) are forwarded unchanged.')

export const embeddingRequestSchema = z
  .looseObject({
    model: modelField,
    input: textOrTokens('input'),
    user: readShape.user,
  })
  .describe('An OpenAI embeddings request. `encoding_format`, `dimensions` and any other field are forwarded unchanged.')

export type ChatCompletionRequest = z.infer<typeof chatCompletionRequestSchema>
export type CompletionRequest = z.infer<typeof completionRequestSchema>
export type EmbeddingRequest = z.infer<typeof embeddingRequestSchema>
export type ChatMessageInput = ChatCompletionRequest['messages'][number]
