/**
 * Request parsing: OpenAI bodies (the `/openai/v1/*` route and the `openai_input` passthrough) and
 * worker-vllm's native shorthand, all normalized to one {@link GenerationRequest} so every output shape
 * is built from the same generation.
 */

import * as z from 'zod'
import { parseDirectives } from './directives.ts'
import type { Directives } from './directives.ts'
import type { ChatMessageText } from './generate.ts'

export type OpenAIRoute = '/v1/chat/completions' | '/v1/completions' | '/v1/models'

export interface GenerationRequest {
  kind: 'chat' | 'completion'
  messages?: ChatMessageText[]
  prompt?: string
  /** The `model` the caller named, if any. */
  model?: string
  n: number
  maxTokens?: number
  stop: string[]
  seed?: number
  stream: boolean
  /** `stream_options.include_usage` (OpenAI bodies); native shorthand streams always carry usage. */
  includeUsage: boolean
  directives: Directives
}

/** worker-vllm's dynamic batch sizing: items hold 1, 3, 9, 27, 50, 50... tokens by default. */
export interface BatchSizing {
  max: number
  min: number
  growth: number
}

export type JobRequest =
  | { shape: 'native'; request: GenerationRequest; batching: BatchSizing }
  | { shape: 'openai'; route: OpenAIRoute; request?: GenerationRequest }
  | { shape: 'invalid'; message: string }

export type ParseResult = { ok: true; request: GenerationRequest } | { ok: false; message: string }

export const DEFAULT_BATCHING: BatchSizing = { max: 50, min: 1, growth: 3 }
/** The classic handler's max_tokens default; the OpenAI route has no cap beyond the model's context. */
const NATIVE_DEFAULT_MAX_TOKENS = 100

const contentPart = z.looseObject({ type: z.string(), text: z.string().optional() })
const message = z.looseObject({
  role: z.string(),
  content: z.union([z.string(), z.array(contentPart), z.null()]).optional(),
})
const stop = z.union([z.string(), z.array(z.string())]).nullish()
const samplingFields = {
  n: z.number().int().min(1).max(64).nullish(),
  max_tokens: z.number().int().min(1).nullish(),
  stop,
  seed: z.number().int().nullish(),
}
const openAIFields = {
  ...samplingFields,
  model: z.string().nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().nullish() }).nullish(),
}

export const chatBodySchema = z.looseObject({
  ...openAIFields,
  messages: z.array(message).min(1),
  max_completion_tokens: z.number().int().min(1).nullish(),
})
export const completionBodySchema = z.looseObject({
  ...openAIFields,
  // vLLM also takes token ids and prompt lists; the emulator answers one text prompt.
  prompt: z.union([z.string(), z.array(z.string()).length(1)]),
})
export const nativeInputSchema = z.looseObject({
  messages: z.array(message).min(1).optional(),
  prompt: z.string().optional(),
  sampling_params: z.looseObject(samplingFields).optional(),
  stream: z.boolean().optional(),
  max_batch_size: z.number().int().min(1).optional(),
  min_batch_size: z.number().int().min(0).optional(),
  batch_size_growth_factor: z.number().min(0).optional(),
})
export const passthroughInputSchema = z.looseObject({
  openai_route: z.enum(['/v1/chat/completions', '/v1/completions', '/v1/models']),
  openai_input: z.unknown().optional(),
})

/** Parses an OpenAI chat or completions body. Failures carry a message for vLLM's 400 error JSON. */
export function parseOpenAIBody(kind: 'chat' | 'completion', body: unknown): ParseResult {
  if (kind === 'chat') {
    const parsed = chatBodySchema.safeParse(body)
    if (!parsed.success) return { ok: false, message: describeIssue(parsed.error) }
    const b = parsed.data
    const messages = b.messages.map(toMessageText)
    return {
      ok: true,
      request: {
        ...openAICommon(b),
        kind,
        messages,
        maxTokens: b.max_completion_tokens ?? b.max_tokens ?? undefined,
        directives: parseDirectives(messages.map((m) => m.content)),
      },
    }
  }
  const parsed = completionBodySchema.safeParse(body)
  if (!parsed.success) return { ok: false, message: describeIssue(parsed.error) }
  const b = parsed.data
  const prompt = typeof b.prompt === 'string' ? b.prompt : (b.prompt[0] ?? '')
  return {
    ok: true,
    request: {
      ...openAICommon(b),
      kind,
      prompt,
      maxTokens: b.max_tokens ?? undefined,
      directives: parseDirectives([prompt]),
    },
  }
}

/** Classifies a job's `input`: native shorthand, OpenAI passthrough, or input the handler rejects. */
export function parseJobInput(input: unknown): JobRequest {
  const passthrough = passthroughInputSchema.safeParse(input)
  if (passthrough.success) {
    const route = passthrough.data.openai_route
    if (route === '/v1/models') return { shape: 'openai', route }
    const kind = route === '/v1/chat/completions' ? 'chat' : 'completion'
    const parsed = parseOpenAIBody(kind, passthrough.data.openai_input)
    return parsed.ok ? { shape: 'openai', route, request: parsed.request } : { shape: 'invalid', message: parsed.message }
  }

  const parsed = nativeInputSchema.safeParse(input)
  if (!parsed.success) return { shape: 'invalid', message: describeIssue(parsed.error) }
  const b = parsed.data
  const sampling = b.sampling_params ?? {}
  const common = {
    n: sampling.n ?? 1,
    maxTokens: sampling.max_tokens ?? NATIVE_DEFAULT_MAX_TOKENS,
    stop: toStops(sampling.stop),
    seed: sampling.seed ?? undefined,
    stream: b.stream ?? false,
    includeUsage: true,
  }
  let request: GenerationRequest
  if (b.messages) {
    const messages = b.messages.map(toMessageText)
    request = { ...common, kind: 'chat', messages, directives: parseDirectives(messages.map((m) => m.content)) }
  } else if (b.prompt !== undefined) {
    request = { ...common, kind: 'completion', prompt: b.prompt, directives: parseDirectives([b.prompt]) }
  } else {
    return { shape: 'invalid', message: 'Input must contain "messages", "prompt" or "openai_route".' }
  }
  return {
    shape: 'native',
    request,
    batching: {
      max: b.max_batch_size ?? DEFAULT_BATCHING.max,
      // worker-vllm treats 0 and missing alike (`x or default`).
      min: b.min_batch_size || DEFAULT_BATCHING.min,
      growth: b.batch_size_growth_factor || DEFAULT_BATCHING.growth,
    },
  }
}

/** Directives of a raw job input, for faults that must act before the input is even parsed. */
export function jobDirectives(request: JobRequest): Directives {
  return request.shape === 'invalid' ? {} : (request.request?.directives ?? {})
}

function toMessageText(m: z.infer<typeof message>): ChatMessageText {
  const content = typeof m.content === 'string'
    ? m.content
    : (m.content ?? []).flatMap((part) => (part.type === 'text' && part.text !== undefined ? [part.text] : [])).join('\n')
  return { role: m.role, content }
}

function toStops(value: string | string[] | null | undefined): string[] {
  if (value === null || value === undefined) return []
  return typeof value === 'string' ? [value] : value
}

function openAICommon(b: z.infer<typeof chatBodySchema> | z.infer<typeof completionBodySchema>) {
  return {
    model: b.model ?? undefined,
    n: b.n ?? 1,
    stop: toStops(b.stop),
    seed: b.seed ?? undefined,
    stream: b.stream ?? false,
    includeUsage: b.stream_options?.include_usage ?? false,
  }
}

function describeIssue(error: z.ZodError): string {
  const issue = error.issues[0]
  if (!issue) return 'Invalid request.'
  const path = issue.path.length > 0 ? issue.path.join('.') : 'body'
  return `${path}: ${issue.message}`
}

/** The body of `/run` and `/runsync`. */
export const runBodySchema = z.looseObject({
  input: z.record(z.string(), z.unknown()),
  webhook: z.string().optional(),
  policy: z
    .looseObject({
      executionTimeout: z.number().positive().optional(),
      ttl: z.number().positive().optional(),
      lowPriority: z.boolean().optional(),
    })
    .optional(),
})
export type RunBody = z.infer<typeof runBodySchema>
