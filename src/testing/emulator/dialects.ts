/**
 * The vLLM routes that generate text, each as a dialect over the one generation (`complete()`): how
 * its body becomes a {@link GenerationRequest}, and how the completion is written back as JSON and as
 * SSE events. The OpenAI route and the job scripts both go through this table, so they always agree.
 */

import { completionEvents, completionId, completionJson } from './openai-format.ts'
import type { Completion, CompletionMeta, TimedEvent } from './openai-format.ts'
import { messagesEvents, messagesJson, parseMessagesBody } from './messages-format.ts'
import { DEFAULT_BATCHING, parseOpenAIBody } from './requests.ts'
import type { BatchSizing, GenerationRequest, ParseResult } from './requests.ts'
import { parseResponsesBody, responseId, responsesEvents, responsesJson } from './responses-format.ts'
import type { JsonObject } from './types.ts'

export type GenerationRoute = '/v1/chat/completions' | '/v1/completions' | '/v1/responses' | '/v1/messages'

export interface Dialect {
  /** The body as a generation; a failure carries vLLM's 400 message. */
  parse(body: unknown): ParseResult
  /** The answer's id from a unique suffix. */
  id(suffix: string): string
  /** The non-streaming answer. */
  json(completion: Completion, meta: CompletionMeta): JsonObject
  /** The SSE events of the streaming answer, each stamped with the step that produces it. */
  events(completion: Completion, meta: CompletionMeta): TimedEvent[]
  /** How many whole events a classic worker (<= v2.23) puts in one stream item. */
  classicBatching: BatchSizing
}

/** Classic worker-vllm yields the Responses and Messages events one per stream item. */
const ONE_EVENT_PER_ITEM: BatchSizing = { max: 1, min: 1, growth: 1 }

const chatLike = (kind: GenerationRequest['kind']): Dialect => ({
  parse: (body) => parseOpenAIBody(kind, body),
  id: (suffix) => completionId(kind, suffix),
  json: completionJson,
  events: (completion, meta) => completionEvents(completion, meta, completion.request.includeUsage),
  classicBatching: DEFAULT_BATCHING,
})

export const DIALECTS: Record<GenerationRoute, Dialect> = {
  '/v1/chat/completions': chatLike('chat'),
  '/v1/completions': chatLike('completion'),
  '/v1/responses': {
    parse: parseResponsesBody,
    id: responseId,
    json: responsesJson,
    events: responsesEvents,
    classicBatching: ONE_EVENT_PER_ITEM,
  },
  '/v1/messages': {
    parse: parseMessagesBody,
    // vLLM answers with the id of the chat completion it ran.
    id: (suffix) => completionId('chat', suffix),
    json: messagesJson,
    events: messagesEvents,
    classicBatching: ONE_EVENT_PER_ITEM,
  },
}

export function isGenerationRoute(route: string): route is GenerationRoute {
  return Object.hasOwn(DIALECTS, route)
}

/** The route whose shapes a native shorthand job answers in (chat for `messages`, completions for `prompt`). */
export function nativeRoute(request: GenerationRequest): GenerationRoute {
  return request.kind === 'chat' ? '/v1/chat/completions' : '/v1/completions'
}
