/**
 * vLLM's OpenAI wire format: the JSON bodies and the SSE events of chat and text completions, built
 * from one {@link Completion}. Each event carries the generation step that produces it, so callers can
 * pace the events in time or cut the stream at a fault.
 */

import { countPromptTokens, generateCompletion } from './generate.ts'
import type { GeneratedText } from './generate.ts'
import type { GenerationRequest } from './requests.ts'
import type { JsonObject } from './types.ts'

/** One generation: a request and its deterministic choices. */
export interface Completion {
  request: GenerationRequest
  choices: GeneratedText[]
  promptTokens: number
  completionTokens: number
  /** Steps to generate every choice: token k of every choice is produced at step k (1-based). */
  steps: number
}

export interface CompletionMeta {
  id: string
  /** Unix seconds. */
  created: number
  model: string
}

/** An SSE event's `data` payload (a JSON text, or `[DONE]`) and the step after which it exists. */
export interface TimedEvent {
  data: string
  step: number
  /** `usage` and `done` close a stream: a fault that cuts the stream drops them. */
  kind: 'chunk' | 'usage' | 'done'
}

export const DEFAULT_MODEL_NAME = 'podgate-emulator'

/** Runs the deterministic model for every choice of a request. */
export function complete(request: GenerationRequest): Completion {
  const choices = Array.from({ length: request.n }, (_, choiceIndex) =>
    generateCompletion({
      messages: request.messages,
      prompt: request.prompt,
      seed: request.seed,
      choiceIndex,
      maxTokens: request.maxTokens,
      stop: request.stop,
      tokens: request.directives.tokens,
    }),
  )
  return {
    request,
    choices,
    promptTokens: countPromptTokens(request),
    completionTokens: choices.reduce((sum, c) => sum + c.tokens.length, 0),
    steps: Math.max(1, ...choices.map((c) => c.tokens.length)),
  }
}

export function completionId(kind: GenerationRequest['kind'], suffix: string): string {
  return `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${suffix}`
}

/** The non-streaming body: `chat.completion` or `text_completion`. */
export function completionJson(completion: Completion, meta: CompletionMeta): JsonObject {
  const { request, choices } = completion
  const chat = request.kind === 'chat'
  return {
    id: meta.id,
    object: chat ? 'chat.completion' : 'text_completion',
    created: meta.created,
    model: meta.model,
    choices: choices.map((choice, index): JsonObject =>
      chat
        ? {
            index,
            message: { role: 'assistant', content: choice.text, tool_calls: [] },
            logprobs: null,
            finish_reason: choice.finishReason,
            stop_reason: null,
          }
        : { index, text: choice.text, logprobs: null, finish_reason: choice.finishReason, stop_reason: null },
    ),
    usage: usage(completion),
    ...(chat ? { prompt_logprobs: null } : {}),
  }
}

/**
 * The streaming events as vLLM writes them: for chat a role chunk per choice (step 0), then one chunk
 * per token and choice, the last one of a choice carrying `finish_reason`; a usage chunk when asked;
 * then `[DONE]`.
 */
export function completionEvents(completion: Completion, meta: CompletionMeta, includeUsage: boolean): TimedEvent[] {
  const { request, choices } = completion
  const chat = request.kind === 'chat'
  const object = chat ? 'chat.completion.chunk' : 'text_completion'
  const chunk = (choice: JsonObject, step: number): TimedEvent => ({
    step,
    kind: 'chunk',
    data: JSON.stringify({ id: meta.id, object, created: meta.created, model: meta.model, choices: [choice] }),
  })

  const events: TimedEvent[] = []
  if (chat) {
    choices.forEach((_, index) => {
      events.push(chunk({ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }, 0))
    })
  }
  for (let step = 1; step <= completion.steps; step++) {
    choices.forEach((choice, index) => {
      const token = choice.tokens[step - 1]
      if (token === undefined) return
      const finishReason = step === choice.tokens.length ? choice.finishReason : null
      events.push(
        chunk(
          chat
            ? { index, delta: { content: token }, logprobs: null, finish_reason: finishReason, ...(finishReason ? { stop_reason: null } : {}) }
            : { index, text: token, logprobs: null, finish_reason: finishReason, stop_reason: null },
          step,
        ),
      )
    })
  }
  if (includeUsage) {
    events.push({
      step: completion.steps,
      kind: 'usage',
      data: JSON.stringify({
        id: meta.id,
        object,
        created: meta.created,
        model: meta.model,
        choices: [],
        usage: usage(completion),
      }),
    })
  }
  events.push({ step: completion.steps, kind: 'done', data: '[DONE]' })
  return events
}

/** One event as it goes on the wire. */
export function sseEvent(data: string): string {
  return `data: ${data}\n\n`
}

/** vLLM's error body, also used for the emulator's own 400s on the OpenAI route. */
export function vllmError(message: string, type: string, code: number): JsonObject {
  return { object: 'error', message, type, param: null, code }
}

export function modelList(model: string, created: number): JsonObject {
  return {
    object: 'list',
    data: [
      {
        id: model,
        object: 'model',
        created,
        owned_by: 'vllm',
        root: model,
        parent: null,
        max_model_len: 8192,
        permission: [],
      },
    ],
  }
}

function usage(completion: Completion): JsonObject {
  return {
    prompt_tokens: completion.promptTokens,
    total_tokens: completion.promptTokens + completion.completionTokens,
    completion_tokens: completion.completionTokens,
  }
}
