/**
 * zod schemas of OpenAI's `POST /v1/chat/completions` and `POST /v1/completions` bodies, as podgate accepts
 * them: the single source of the request types and, later, of the OpenAPI document.
 *
 * Objects are strict: an unknown field is a 400 (OpenAI's own behaviour), so a caller never believes a
 * parameter took effect when podgate dropped it. Fields OpenAI defines but podgate cannot serve yet are
 * declared with `unsupported()` so they fail with a message that says so, not "unrecognized".
 * Optional fields accept `null` as "not sent", as OpenAI's spec marks them nullable.
 */
import * as z from 'zod'

/** Longest text podgate accepts, per string and summed over a request's messages or prompt. */
export const MAX_TEXT_CHARS = 1_000_000
/** Most messages in one chat request. */
export const MAX_MESSAGES = 1_000
/** Most stop sequences (OpenAI allows 4; vLLM has no limit). */
export const MAX_STOP_SEQUENCES = 16
/** Schema-level ceiling for `n` / `best_of`; the per-model `maxChoices` is enforced by the normalizer. */
const MAX_CHOICES_CEILING = 128

const isNullish = (v: unknown): boolean => v === null || v === undefined
const isFalse = (v: unknown): boolean => v === false
const isEmptyArray = (v: unknown): boolean => Array.isArray(v) && v.length === 0

/**
 * A field OpenAI defines that podgate cannot serve yet. It passes only when absent, null or "off"
 * (`isOff`), so clients that always send e.g. `logprobs: false` keep working.
 */
function unsupported(name: string, isOff: (v: unknown) => boolean = isNullish, hint = '') {
  return z
    .unknown()
    .refine((v) => isNullish(v) || isOff(v), { error: `podgate does not support '${name}' yet${hint}` })
    .optional()
    .describe(`Not supported by podgate yet: omit it or send null${hint}.`)
}

const stopString = z.string().min(1).max(1_000)

/** Sampling fields shared by both request kinds; names are OpenAI's, or vLLM's for its extras. */
const samplingShape = {
  max_tokens: z.number().int().min(1).nullish()
    .describe('Most tokens to generate. Capped per model; defaults to the model\'s configured default.'),
  max_completion_tokens: z.number().int().min(1).nullish()
    .describe('Alias of `max_tokens`. If both are sent they must be equal.'),
  n: z.number().int().min(1).max(MAX_CHOICES_CEILING).nullish()
    .describe('How many choices to generate (at most the model\'s `maxChoices`).'),
  best_of: z.number().int().min(1).max(MAX_CHOICES_CEILING).nullish()
    .describe('vLLM: generate this many sequences and return the best `n` (at least `n`, at most `maxChoices`).'),
  temperature: z.number().min(0).max(2).nullish().describe('Sampling temperature, 0 to 2.'),
  top_p: z.number().gt(0).max(1).nullish().describe('Nucleus sampling probability mass, greater than 0 and at most 1.'),
  top_k: z.number().int().min(-1).nullish().describe('vLLM: sample from the k most likely tokens; -1 disables.'),
  min_p: z.number().min(0).max(1).nullish().describe('vLLM: minimum token probability relative to the most likely one.'),
  presence_penalty: z.number().min(-2).max(2).nullish().describe('Penalty for tokens already present, -2 to 2.'),
  frequency_penalty: z.number().min(-2).max(2).nullish().describe('Penalty proportional to token frequency, -2 to 2.'),
  repetition_penalty: z.number().gt(0).max(2).nullish().describe('vLLM: multiplicative repetition penalty; 1 disables.'),
  length_penalty: z.number().nullish().describe('vLLM: length penalty used with beam search / `best_of`.'),
  stop: z
    .union([stopString, z.array(stopString).max(MAX_STOP_SEQUENCES)], {
      error: 'expected a string or an array of strings',
    })
    .nullish()
    .describe(`Up to ${MAX_STOP_SEQUENCES} sequences where generation stops.`),
  stop_token_ids: z.array(z.number().int().min(0)).max(64).nullish()
    .describe('vLLM: token ids that stop generation.'),
  ignore_eos: z.boolean().nullish().describe('vLLM: keep generating after the end-of-sequence token.'),
  min_tokens: z.number().int().min(0).nullish().describe('vLLM: fewest tokens to generate before a stop may apply.'),
  skip_special_tokens: z.boolean().nullish().describe('vLLM: drop special tokens from the output text.'),
  spaces_between_special_tokens: z.boolean().nullish().describe('vLLM: put spaces between special tokens.'),
  include_stop_str_in_output: z.boolean().nullish().describe('vLLM: keep the matched stop string in the output.'),
  seed: z.number().int().nullish().describe('Seed for reproducible sampling.'),
}

const modelField = z.string().min(1).max(256).describe('The podgate model alias.')

/** Fields both kinds share besides `model` and the text: streaming, sampling, tolerated OpenAI fields. */
const commonShape = {
  stream: z.boolean().nullish().describe('Answer with server-sent events.'),
  stream_options: z
    .strictObject({
      include_usage: z.boolean().nullish().describe('Send a final chunk with token usage.'),
      include_obfuscation: z.boolean().nullish().describe('Accepted and ignored: podgate adds no obfuscation.'),
    })
    .nullish()
    .describe('Streaming options; only allowed with `stream: true`.'),
  user: z.string().max(256).nullish().describe('An end-user identifier, for abuse tracking. Never sent upstream.'),
  ...samplingShape,
  logit_bias: unsupported('logit_bias', isNullish, ': it needs token ids of the served model'),
  metadata: z.record(z.string(), z.string()).nullish().describe('Accepted and ignored.'),
  store: unsupported('store', isFalse),
  service_tier: z.string().nullish().describe('Accepted and ignored.'),
}

/** A `{type:"text"}` part. Any other type is refused by name, so vision/audio callers learn why. */
const textPartSchema = z.strictObject({
  type: z.literal('text', {
    error: (issue) =>
      typeof issue.input === 'string'
        ? `podgate does not support '${issue.input.slice(0, 100)}' content parts yet: only 'text' parts are accepted`
        : undefined,
  }),
  text: z.string().max(MAX_TEXT_CHARS).describe('The text of the part.'),
})

const messageContentSchema = z
  .union([z.string().max(MAX_TEXT_CHARS), z.array(textPartSchema).min(1).max(MAX_MESSAGES)], {
    // For unions the message is the "expected ..." clause; the mapper adds the param and the actual type.
    error: 'expected a string or an array of text parts',
  })
  .describe('A string, or text parts (joined with newlines).')

const messageSchema = z.strictObject({
  role: z
    .enum(['system', 'developer', 'user', 'assistant'], {
      error: (issue) =>
        issue.input === 'tool' || issue.input === 'function'
          ? `podgate does not support '${issue.input}' messages yet`
          : undefined,
    })
    .describe('`developer` is treated as `system`.'),
  content: messageContentSchema,
  name: z.string().max(256).nullish().describe('An optional participant name.'),
  // Echoed assistant messages from OpenAI SDKs carry these; off values pass, real tool use is refused.
  tool_calls: unsupported('tool_calls', isEmptyArray),
  function_call: unsupported('function_call'),
  audio: unsupported('audio'),
  refusal: z.string().nullish().describe('Accepted and ignored.'),
  annotations: z.array(z.unknown()).nullish().describe('Accepted and ignored.'),
})

export const chatCompletionRequestSchema = z
  .strictObject({
    model: modelField,
    messages: z.array(messageSchema).min(1).max(MAX_MESSAGES).describe('The conversation so far.'),
    ...commonShape,
    tools: unsupported('tools', isEmptyArray),
    tool_choice: unsupported('tool_choice', (v) => v === 'none'),
    functions: unsupported('functions', isEmptyArray),
    function_call: unsupported('function_call', (v) => v === 'none'),
    parallel_tool_calls: unsupported('parallel_tool_calls'),
    logprobs: unsupported('logprobs', isFalse),
    top_logprobs: unsupported('top_logprobs'),
    response_format: unsupported(
      'response_format',
      (v) => typeof v === 'object' && v !== null && 'type' in v && v.type === 'text',
      ': only {"type":"text"} is accepted',
    ),
    audio: unsupported('audio'),
    modalities: unsupported('modalities', (v) => Array.isArray(v) && v.length === 1 && v[0] === 'text'),
    prediction: unsupported('prediction'),
  })
  .describe('An OpenAI chat completion request.')

export const completionRequestSchema = z
  .strictObject({
    model: modelField,
    prompt: z
      .union(
        [
          z.string().max(MAX_TEXT_CHARS),
          z
            .array(z.string().max(MAX_TEXT_CHARS))
            .length(1, { error: 'podgate accepts exactly one prompt per request: send a string' }),
        ],
        { error: 'expected a string' },
      )
      .describe('The prompt: a string, or an array of exactly one string. Token-id prompts are not supported.'),
    ...commonShape,
    echo: unsupported('echo', isFalse),
    suffix: unsupported('suffix', (v) => v === ''),
    logprobs: unsupported('logprobs'),
  })
  .describe('An OpenAI (legacy) text completion request.')

export type ChatCompletionRequest = z.infer<typeof chatCompletionRequestSchema>
export type CompletionRequest = z.infer<typeof completionRequestSchema>
export type ChatMessageInput = ChatCompletionRequest['messages'][number]
