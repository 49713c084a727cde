/**
 * Request parsing: OpenAI bodies (the `/openai/v1/*` route and the `openai_input` passthrough) and
 * worker-vllm's native shorthand, all normalized to one {@link GenerationRequest} so every output shape
 * is built from the same generation.
 */

import * as z from 'zod/mini'
import { ENGLISH } from '../../zod/english.ts'
import { parseDirectives } from './directives.ts'
import type { Directives } from './directives.ts'
import { CHAT_MEDIA_TYPES, messageText, partType } from './generate.ts'
import type { ChatMessageText } from './generate.ts'

/** A function tool the request offers. */
export interface ToolSpec {
  name: string
  /** Its JSON Schema (`function.parameters`); absent means any object. */
  parameters?: unknown
}

/** `tool_choice`, with vLLM's default: "auto" when tools are sent without one. */
export type ToolChoice = 'none' | 'auto' | 'required' | { name: string }

/** What guided decoding constrains the output to. */
export type StructuredOutput =
  | { kind: 'json'; schema?: unknown }
  | { kind: 'choice'; choices: string[] }
  | { kind: 'regex'; pattern: string }

export interface GenerationRequest {
  kind: 'chat' | 'completion'
  messages?: ChatMessageText[]
  /** The (first) completion prompt, as text; token-id prompts are rendered as words. */
  prompt?: string
  /** Every completion prompt (a prompt list answers n choices per prompt), with its token count. */
  prompts?: Array<{ text: string; tokens: number }>
  /** The `model` the caller named, if any. */
  model?: string
  n: number
  maxTokens?: number
  stop: string[]
  seed?: number
  stream: boolean
  /** `stream_options.include_usage` (OpenAI bodies); never on native shorthand, whose body has no `stream_options`. */
  includeUsage: boolean
  /** `stream_options.continuous_usage_stats` (with include_usage, as in vLLM): usage on every chunk. */
  continuousUsage: boolean
  tools: ToolSpec[]
  toolChoice: ToolChoice
  structured?: StructuredOutput
  /** Sampled-token logprobs with this many alternatives (chat `top_logprobs`, completions `logprobs`). */
  logprobs?: { top: number }
  promptLogprobs?: number
  /** `chat_template_kwargs.enable_thinking`: reasoning deltas before the answer. */
  thinking: boolean
  /** Completions `echo`: the prompt is prepended to the text. */
  echo: boolean
  directives: Directives
}

/** worker-vllm's dynamic batch sizing: items hold 1, 3, 9, 27, 50, 50... tokens by default. */
export interface BatchSizing {
  max: number
  min: number
  growth: number
}

/** An OpenAI request vLLM refuses: the status and the message of its error body. */
export interface Refusal {
  status: number
  message: string
  type: string
  /**
   * Whose error body words it: Anthropic's on `/v1/messages*`, FastAPI's own (`{"detail": message}`) for a
   * route or method vLLM's server lacks, else vLLM's (the default).
   */
  dialect?: 'anthropic' | 'fastapi'
  /** Refused by the route's request model (pydantic), not by vLLM's serving code: see ParseResult. */
  schema?: true
}

/** A failure with `schema` was refused by the route's request model itself, before vLLM's serving code ran. */
export type ParseResult = { ok: true; request: GenerationRequest } | { ok: false; message: string; directives?: Directives; schema?: true }

export const DEFAULT_BATCHING: BatchSizing = { max: 50, min: 1, growth: 3 }
/** The classic handler's max_tokens default (utils.py JobInput). */
const CLASSIC_DEFAULT_MAX_TOKENS = 100
/**
 * vLLM's CompletionRequest default when `max_tokens` is absent (`null` means the model's context, as chat's
 * absent or null does).
 */
export const COMPLETIONS_DEFAULT_MAX_TOKENS = 16

/** A content part: a string (text), or an object; vLLM types one without `type` by its media key (`image_url`, ...). */
const contentPart = z.union([z.string(), z.looseObject({ type: z.optional(z.string()), text: z.optional(z.string()) })])
/** The part types whose `text` is the message's text. */
const TEXT_PART_TYPES: readonly string[] = ['text', 'input_text', 'output_text']
/** Every part type vLLM's chat accepts, sorted as its refusal lists them. */
const CHAT_PART_TYPES: readonly string[] = [...CHAT_MEDIA_TYPES, ...TEXT_PART_TYPES, 'prompt_embeds', 'refusal', 'thinking', 'tool_reference'].sort()
/** A chat message: `content` is a string, text parts, or null (an assistant's tool call). */
export const chatMessageSchema = z.looseObject({
  role: z.string(),
  content: z.optional(z.union([z.string(), z.array(contentPart), z.null()])),
})
const stop = z.nullish(z.union([z.string(), z.array(z.string())]))
const int = () => z.number().check(z.int())
const samplingFields = {
  // Their lower bounds are SamplingParams' (samplingProblem), in its words; vLLM sets n no upper bound.
  n: z.nullish(int()),
  max_tokens: z.nullish(int()),
  stop,
  seed: z.nullish(int()),
}
const jsonSchemaValue = z.union([z.record(z.string(), z.unknown()), z.string()])
const openAIFields = {
  ...samplingFields,
  model: z.nullish(z.string()),
  stream: z.nullish(z.boolean()),
  stream_options: z.nullish(z.looseObject({ include_usage: z.nullish(z.boolean()), continuous_usage_stats: z.nullish(z.boolean()) })),
  response_format: z.nullish(z.looseObject({
    type: z.enum(['text', 'json_object', 'json_schema', 'structural_tag']),
    json_schema: z.nullish(z.looseObject({ name: z.optional(z.string()), schema: z.optional(z.unknown()) })),
  })),
  structured_outputs: z.nullish(z.looseObject({
    json: z.nullish(jsonSchemaValue),
    regex: z.nullish(z.string()),
    choice: z.nullish(z.array(z.string())),
    json_object: z.nullish(z.boolean()),
  })),
  guided_json: z.nullish(jsonSchemaValue),
  guided_regex: z.nullish(z.string()),
  guided_choice: z.nullish(z.array(z.string())),
  prompt_logprobs: z.nullish(int()),
}
const tool = z.looseObject({
  type: z.literal('function'),
  function: z.looseObject({ name: z.string(), parameters: z.optional(z.unknown()) }),
})
const toolChoice = z.union([
  z.enum(['none', 'auto', 'required']),
  z.looseObject({ type: z.literal('function'), function: z.looseObject({ name: z.string() }) }),
])

export const chatBodySchema = z.looseObject({
  ...openAIFields,
  messages: z.array(chatMessageSchema).check(z.minLength(1)),
  max_completion_tokens: z.nullish(int()),
  tools: z.nullish(z.array(tool)),
  tool_choice: z.nullish(toolChoice),
  logprobs: z.nullish(z.boolean()),
  top_logprobs: z.nullish(int()),
  chat_template_kwargs: z.nullish(z.record(z.string(), z.unknown())),
  include_reasoning: z.nullish(z.boolean()),
  continue_final_message: z.nullish(z.boolean()),
  add_generation_prompt: z.nullish(z.boolean()),
})
const tokenIds = z.array(int().check(z.minimum(0))).check(z.minLength(1))
export const completionBodySchema = z.looseObject({
  ...openAIFields,
  prompt: z.nullish(z.union([z.string(), z.array(z.string()).check(z.minLength(1)), tokenIds, z.array(tokenIds).check(z.minLength(1))])),
  /** Base64 tensors, one prompt each; vLLM takes them instead of (or besides) `prompt`. */
  prompt_embeds: z.nullish(z.union([z.string(), z.array(z.string())])),
  /** Declared by vLLM's CompletionRequest, refused by its renderer. */
  suffix: z.nullish(z.string()),
  /** 0 with `echo`: vLLM scores the prompt without generating. */
  max_tokens: z.nullish(int()),
  logprobs: z.nullish(int()),
  echo: z.nullish(z.boolean()),
})
export const nativeInputSchema = z.looseObject({
  messages: z.optional(z.array(chatMessageSchema).check(z.minLength(1))),
  prompt: z.optional(z.string()),
  sampling_params: z.optional(z.looseObject(samplingFields)),
  stream: z.optional(z.boolean()),
  max_batch_size: z.optional(int().check(z.minimum(1))),
  min_batch_size: z.optional(int().check(z.minimum(0))),
  batch_size_growth_factor: z.optional(z.number().check(z.minimum(0))),
})

/** Parses an OpenAI chat or completions body. Failures carry vLLM's 400 message. */
export function parseOpenAIBody(kind: 'chat' | 'completion', body: unknown): ParseResult {
  if (kind === 'chat') {
    const parsed = chatBodySchema.safeParse(body, ENGLISH)
    if (!parsed.success) return { ok: false, message: describeIssue(parsed.error) }
    const b = parsed.data
    const partRefusal = contentPartRefusal(b.messages)
    if (partRefusal) return { ok: false, message: partRefusal }
    const messages = b.messages.map(toMessageText)
    const directives = parseDirectives(messages.map((m) => m.content))
    const tools = (b.tools ?? []).map((t): ToolSpec => ({ name: t.function.name, parameters: t.function.parameters }))
    const choice = toolChoiceOf(b.tool_choice == null ? undefined : typeof b.tool_choice === 'string' ? b.tool_choice : { name: b.tool_choice.function.name }, tools)
    const refuse = (message: string): ParseResult => ({ ok: false, message, directives })
    // vLLM's request validators (protocol.py), in their wording.
    const toolRefusal = toolChoiceRefusal(choice, tools)
    if (toolRefusal) return refuse(toolRefusal)
    // Read from the body as sent (a "before" validator): add_generation_prompt's default does not count.
    if (b.continue_final_message && b.add_generation_prompt) return refuse('Cannot set both `continue_final_message` and `add_generation_prompt` to True.')
    if (b.top_logprobs != null && b.top_logprobs < 0) return refuse('`top_logprobs` must be a positive value.')
    if (b.top_logprobs != null && b.top_logprobs > 0 && !b.logprobs) {
      return refuse('when using `top_logprobs`, `logprobs` must be set to true.')
    }
    const common = openAICommon(b)
    if (!common.ok) return refuse(common.message)
    return {
      ok: true,
      request: {
        ...common.value,
        kind,
        messages,
        maxTokens: b.max_completion_tokens ?? b.max_tokens ?? undefined,
        tools,
        toolChoice: choice,
        ...(b.logprobs ? { logprobs: { top: b.top_logprobs ?? 0 } } : {}),
        thinking: b.chat_template_kwargs?.enable_thinking === true && b.include_reasoning !== false,
        echo: false,
        directives,
      },
    }
  }
  const parsed = completionBodySchema.safeParse(body, ENGLISH)
  if (!parsed.success) return { ok: false, message: describeIssue(parsed.error) }
  // Absent is vLLM's default of 16; null leaves only the model's context as the cap.
  const b = { ...parsed.data, max_tokens: parsed.data.max_tokens === undefined ? COMPLETIONS_DEFAULT_MAX_TOKENS : parsed.data.max_tokens }
  const embeds = b.prompt_embeds == null ? [] : typeof b.prompt_embeds === 'string' ? [b.prompt_embeds] : b.prompt_embeds
  // A tensor's length in tokens depends on the model's hidden size; the emulator counts one per tensor.
  // An empty string is no prompt to vLLM's validator, as an empty list of tensors is none.
  const prompts = [...(b.prompt == null || b.prompt === '' ? [] : promptList(b.prompt)), ...embeds.map(() => ({ text: '', tokens: 1 }))]
  if (prompts.length === 0) return { ok: false, message: 'Either prompt or prompt_embeds must be provided and non-empty.' }
  const directives = parseDirectives(prompts.map((p) => p.text))
  // The renderer's refusals of what the route declares but does not serve.
  if (b.suffix != null) return { ok: false, message: 'suffix is not currently supported', directives }
  if (b.echo && b.prompt_embeds != null) return { ok: false, message: 'Echo is unsupported with prompt embeds.', directives }
  if (b.logprobs != null && b.logprobs < 0) return { ok: false, message: '`logprobs` must be a positive value.', directives }
  // vLLM runs echo with max_tokens 0 as one token and answers the prompt alone; without echo SamplingParams refuses 0.
  if (b.max_tokens === 0 && !b.echo) return { ok: false, message: 'max_tokens must be at least 1, got 0.', directives }
  // echo with max_tokens 0 runs as one token.
  const common = openAICommon(b.echo && b.max_tokens === 0 ? { ...b, max_tokens: 1 } : b)
  if (!common.ok) return { ok: false, message: common.message, directives }
  return {
    ok: true,
    request: {
      ...common.value,
      kind,
      prompt: prompts[0]?.text ?? '',
      prompts,
      maxTokens: b.max_tokens ?? undefined,
      tools: [],
      toolChoice: 'none',
      ...(b.logprobs != null ? { logprobs: { top: b.logprobs } } : {}),
      thinking: false,
      echo: b.echo ?? false,
      directives,
    },
  }
}

/**
 * The refusals that depend on how the endpoint's vLLM was started: "auto" tool choice without
 * `--enable-auto-tool-choice`, and more logprobs than `--max-logprobs`.
 */
export function servedRefusal(
  request: GenerationRequest,
  served: { enableAutoToolChoice: boolean; maxLogprobs: number },
): Refusal | undefined {
  const autoTools = request.directives.autoToolChoice ?? served.enableAutoToolChoice
  if (request.kind === 'chat' && request.toolChoice === 'auto' && !autoTools) {
    return {
      status: 400,
      type: 'BadRequestError',
      message: '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
    }
  }
  const top = request.logprobs?.top ?? 0
  if (top > served.maxLogprobs) {
    return { status: 400, type: 'BadRequestError', message: `Requested sample logprobs of ${top}, which is greater than max allowed: ${served.maxLogprobs}` }
  }
  const prompt = request.promptLogprobs ?? 0
  if (prompt > served.maxLogprobs) {
    return { status: 400, type: 'BadRequestError', message: `Requested prompt logprobs of ${prompt}, which is greater than max allowed: ${served.maxLogprobs}` }
  }
  return undefined
}

/** worker-vllm's native shorthand, parsed: the generation and the batch sizing of its stream. */
export type NativeParse = { ok: true; request: GenerationRequest; batching: BatchSizing } | { ok: false; message: string }

/**
 * The `max_tokens` of native shorthand that sets none: the classic handler's 100; the current worker posts
 * the shorthand to vLLM's completions route (`prompt`: 16) or chat route (`messages`: no default).
 */
export function nativeDefaultMaxTokens(generation: 'classic' | 'current', input: { messages?: unknown }): number | undefined {
  if (generation === 'classic') return CLASSIC_DEFAULT_MAX_TOKENS
  return input.messages === undefined ? COMPLETIONS_DEFAULT_MAX_TOKENS : undefined
}

/** Parses worker-vllm's native shorthand (`prompt` or `messages`, `sampling_params`, batch sizing). */
export function parseNativeInput(input: unknown, generation: 'classic' | 'current' = 'classic'): NativeParse {
  const parsed = nativeInputSchema.safeParse(input, ENGLISH)
  if (!parsed.success) return { ok: false, message: describeIssue(parsed.error) }
  const b = parsed.data
  const sampling = b.sampling_params ?? {}
  const common = {
    n: sampling.n ?? 1,
    maxTokens: sampling.max_tokens ?? nativeDefaultMaxTokens(generation, b),
    stop: toStops(sampling.stop),
    seed: sampling.seed ?? undefined,
    stream: b.stream ?? false,
    // worker-vllm >= v2.24 posts `{...sampling_params, stream}` and asks for no usage chunk (vLLM sends
    // one only with --enable-force-include-usage); classic token items carry usage of their own.
    includeUsage: false,
    continuousUsage: false,
    tools: [],
    toolChoice: 'none' as const,
    thinking: false,
    echo: false,
  }
  let request: GenerationRequest
  if (b.messages) {
    const messages = b.messages.map(toMessageText)
    request = { ...common, kind: 'chat', messages, directives: parseDirectives(messages.map((m) => m.content)) }
  } else if (b.prompt !== undefined) {
    request = { ...common, kind: 'completion', prompt: b.prompt, directives: parseDirectives([b.prompt]) }
  } else {
    return { ok: false, message: 'Input must contain "messages", "prompt" or "openai_route".' }
  }
  return {
    ok: true,
    request,
    batching: {
      max: b.max_batch_size ?? DEFAULT_BATCHING.max,
      // worker-vllm treats 0 and missing alike (`x or default`).
      min: b.min_batch_size || DEFAULT_BATCHING.min,
      growth: b.batch_size_growth_factor || DEFAULT_BATCHING.growth,
    },
  }
}

/** What vLLM's Responses and Messages routes run once they have turned their body into a conversation. */
export interface PlainChatOptions {
  messages: ChatMessageText[]
  model?: string
  maxTokens?: number
  stop?: string[]
  stream: boolean
  /** Function tools, already in chat's terms; `toolChoice` defaults as on chat ("auto" with tools). */
  tools?: ToolSpec[]
  toolChoice?: ToolChoice
  /** `chat_template_kwargs.enable_thinking`: reasoning before the answer. */
  thinking?: boolean
}

/**
 * A chat generation with no guided output or logprobs: what vLLM's Responses and Messages routes run.
 */
export function plainChatRequest(options: PlainChatOptions): GenerationRequest {
  const tools = options.tools ?? []
  return {
    kind: 'chat',
    messages: options.messages,
    model: options.model,
    n: 1,
    maxTokens: options.maxTokens,
    stop: options.stop ?? [],
    stream: options.stream,
    includeUsage: false,
    continuousUsage: false,
    tools,
    toolChoice: toolChoiceOf(options.toolChoice, tools),
    thinking: options.thinking ?? false,
    echo: false,
    directives: parseDirectives(options.messages.map((m) => m.content)),
  }
}

/** The `tool_choice` a request asked for, or vLLM's default: "auto" when it sends tools, else "none". */
export function toolChoiceOf(asked: ToolChoice | undefined, tools: readonly ToolSpec[]): ToolChoice {
  return asked ?? (tools.length > 0 ? 'auto' : 'none')
}

/** vLLM's refusal of a `tool_choice` its `tools` cannot satisfy (its request validators, in their wording). */
export function toolChoiceRefusal(choice: ToolChoice, tools: readonly ToolSpec[]): string | undefined {
  if (choice !== 'none' && tools.length === 0) return 'When using `tool_choice`, `tools` must be set.'
  if (typeof choice === 'object' && !tools.some((t) => t.name === choice.name)) return `Tool '${choice.name}' has not been passed in \`tools\`.`
  return undefined
}

/** The strings of an embeddings `input`, for directives. */
export function embeddingTexts(body: unknown): string[] {
  const input = typeof body === 'object' && body !== null ? (body as { input?: unknown }).input : undefined
  if (typeof input === 'string') return [input]
  return Array.isArray(input) ? input.filter((x): x is string => typeof x === 'string') : []
}

/** A chat message's text (string content, or its text parts joined by newlines) and its media parts. */
export function toMessageText(m: z.infer<typeof chatMessageSchema>): ChatMessageText {
  const content = typeof m.content === 'string'
    ? m.content
    : (m.content ?? []).flatMap((part) => (typeof part === 'string' ? [part] : part.type !== undefined && TEXT_PART_TYPES.includes(part.type) && part.text !== undefined ? [part.text] : [])).join('\n')
  return messageText(m.role, content, m.content)
}

/**
 * vLLM's refusal of a chat content part it cannot type or does not take (chat_utils.py), in its wording;
 * undefined when every part is one it takes.
 */
export function contentPartRefusal(messages: ReadonlyArray<z.infer<typeof chatMessageSchema>>): string | undefined {
  for (const m of messages) {
    if (!Array.isArray(m.content)) continue
    for (const part of m.content) {
      if (typeof part === 'string') continue
      const type = partType(part)
      if (type === undefined) return "Missing 'type' field in multimodal part."
      if (!CHAT_PART_TYPES.includes(type)) return `Unsupported chat content part type: '${type}'. Supported types: ${CHAT_PART_TYPES.join(', ')}.`
    }
  }
  return undefined
}

function toStops(value: string | string[] | null | undefined): string[] {
  if (value === null || value === undefined) return []
  return typeof value === 'string' ? [value] : value
}

/**
 * The checks of vLLM's SamplingParams (sampling_params.py `_verify_args`) on `n` and `max_tokens`, in its
 * words: each at least 1, greedy sampling (temperature below 1e-5) makes one choice, and `min_tokens`
 * cannot pass `max_tokens`.
 */
export function samplingProblem(params: Record<string, unknown>): string | undefined {
  const n = typeof params.n === 'number' ? params.n : 1
  const { temperature, min_tokens: min, max_tokens: max } = params
  if (n < 1) return `n must be at least 1, got ${n}.`
  if (typeof max === 'number' && max < 1) return `max_tokens must be at least 1, got ${max}.`
  if (typeof temperature === 'number' && temperature < 1e-5 && n > 1) return `n must be 1 when using greedy sampling, got ${n}.`
  if (typeof min === 'number' && typeof max === 'number' && min > max) return `min_tokens must be less than or equal to max_tokens=${max}, got ${min}.`
  return undefined
}

function openAICommon(b: z.infer<typeof chatBodySchema> | z.infer<typeof completionBodySchema>) {
  const stream = b.stream ?? false
  // vLLM's validator reads Python truthiness: an empty `stream_options` passes.
  if (!stream && b.stream_options != null && Object.keys(b.stream_options).length > 0) {
    return { ok: false as const, message: 'Stream options can only be defined when `stream=True`.' }
  }
  if (stream && b.prompt_logprobs != null && b.prompt_logprobs > 0) {
    return { ok: false as const, message: '`prompt_logprobs` are not available when `stream=True`.' }
  }
  const problem = samplingProblem({ ...b, max_tokens: (b as { max_completion_tokens?: number | null }).max_completion_tokens ?? b.max_tokens })
  if (problem) return { ok: false as const, message: problem }
  // vLLM's StreamOptions defaults `include_usage` to true; null reads as false.
  const includeUsage = b.stream_options != null && (b.stream_options.include_usage ?? b.stream_options.include_usage !== null)
  const structured = structuredOutput(b)
  return {
    ok: true as const,
    value: {
      model: b.model ?? undefined,
      n: b.n ?? 1,
      stop: toStops(b.stop),
      seed: b.seed ?? undefined,
      stream,
      includeUsage,
      continuousUsage: includeUsage && (b.stream_options?.continuous_usage_stats ?? false),
      ...(structured ? { structured } : {}),
      ...(b.prompt_logprobs != null ? { promptLogprobs: b.prompt_logprobs } : {}),
    },
  }
}

/** structured_outputs, then response_format, then the legacy guided_* fields (older vLLM still reads them). */
function structuredOutput(b: z.infer<typeof chatBodySchema> | z.infer<typeof completionBodySchema>): StructuredOutput | undefined {
  const so = b.structured_outputs
  if (so?.json != null) return { kind: 'json', schema: schemaValue(so.json) }
  if (so?.choice != null && so.choice.length > 0) return { kind: 'choice', choices: so.choice }
  if (so?.regex != null) return { kind: 'regex', pattern: so.regex }
  if (so?.json_object) return { kind: 'json' }
  const rf = b.response_format
  if (rf?.type === 'json_object') return { kind: 'json' }
  if (rf?.type === 'json_schema') return { kind: 'json', schema: rf.json_schema?.schema }
  if (b.guided_json != null) return { kind: 'json', schema: schemaValue(b.guided_json) }
  if (b.guided_choice != null && b.guided_choice.length > 0) return { kind: 'choice', choices: b.guided_choice }
  if (b.guided_regex != null) return { kind: 'regex', pattern: b.guided_regex }
  return undefined
}

function schemaValue(value: Record<string, unknown> | string): unknown {
  if (typeof value !== 'string') return value
  try {
    return JSON.parse(value) as unknown
  } catch {
    return undefined
  }
}

/** Completion prompts as text with their token counts; token ids render as their numbers. */
function promptList(prompt: NonNullable<z.infer<typeof completionBodySchema>['prompt']>): Array<{ text: string; tokens: number }> {
  const fromText = (text: string) => ({ text, tokens: Math.max(1, countWords(text)) })
  const fromIds = (ids: number[]) => ({ text: ids.join(' '), tokens: ids.length })
  if (typeof prompt === 'string') return [fromText(prompt)]
  if (prompt.every((p) => typeof p === 'string')) return prompt.map(fromText)
  if (prompt.every((p) => typeof p === 'number')) return [fromIds(prompt)]
  return prompt.filter((p) => Array.isArray(p)).map(fromIds)
}

function countWords(text: string): number {
  const trimmed = text.trim()
  return trimmed === '' ? 0 : trimmed.split(/\s+/).length
}

/** The first issue of a failed parse, as `path: message` (vLLM's 400 wording is free-form). */
export function describeIssue(error: z.core.$ZodError): string {
  const issue = error.issues[0]
  if (!issue) return 'Invalid request.'
  const path = issue.path.length > 0 ? issue.path.join('.') : 'body'
  return `${path}: ${issue.message}`
}

/** The body of `/run` and `/runsync`. */
export const runBodySchema = z.looseObject({
  input: z.record(z.string(), z.unknown()),
  webhook: z.optional(z.string()),
  policy: z.optional(z.looseObject({
    executionTimeout: z.optional(z.number().check(z.positive())),
    ttl: z.optional(z.number().check(z.positive())),
    lowPriority: z.optional(z.boolean()),
  })),
})
export type RunBody = z.infer<typeof runBodySchema>
