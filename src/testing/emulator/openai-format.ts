/**
 * vLLM's OpenAI wire format: the JSON bodies and the SSE events of chat and text completions, built
 * from one {@link Completion}. Each event carries the generation step that produces it, so callers can
 * pace the events in time or cut the stream at a fault.
 */

import { planChoices } from './choices.ts'
import type { Delta, PlannedChoice } from './choices.ts'
import { countPromptTokens, hashString } from './generate.ts'
import { chatLogprob, completionLogprobs, promptLogprobs } from './logprobs.ts'
import type { GenerationRequest, Refusal, ToolSpec } from './requests.ts'
import type { EndpointBehaviour, Fault, JsonObject, JsonValue } from './types.ts'

/** One generation: a request and its deterministic choices. */
export interface Completion {
  request: GenerationRequest
  choices: PlannedChoice[]
  promptTokens: number
  completionTokens: number
  /** Steps to generate every choice: delta k of every choice is produced at step k (1-based). */
  steps: number
}

export interface CompletionMeta {
  id: string
  /** Unix seconds. */
  created: number
  model: string
  /** The keys reasoning goes under. Default both `reasoning` and `reasoning_content`. */
  reasoningFields?: EndpointBehaviour['reasoningFields']
  /** `/v1/messages` streams end with `data: [DONE]` after `message_stop`, as older vLLM wrote them. */
  messagesDone?: boolean
}

/** An SSE event's `data` payload (a JSON text, or `[DONE]`) and the step after which it exists. */
export interface TimedEvent {
  data: string
  step: number
  /** Every kind but `chunk` closes a stream (`close`: the Responses and Messages end events): a fault that cuts the stream drops them. */
  kind: 'chunk' | 'usage' | 'done' | 'close'
  /** The SSE `event:` name; the Responses and Messages routes name every event, chat none. */
  event?: string
}

export const DEFAULT_MODEL_NAME = 'podgate-emulator'
const BOTH_REASONING_FIELDS = ['reasoning', 'reasoning_content'] as const

/** Runs the deterministic model for every choice of a request. */
export function complete(request: GenerationRequest): Completion {
  const choices = planChoices(request)
  return {
    request,
    choices,
    promptTokens: (request.prompts ? request.prompts.reduce((sum, p) => sum + p.tokens, 0) : countPromptTokens(request)) + toolTokens(request.tools),
    completionTokens: choices.reduce((sum, c) => sum + c.deltas.length, 0),
    steps: Math.max(1, ...choices.map((c) => c.deltas.length)),
  }
}

export function completionId(kind: GenerationRequest['kind'], suffix: string): string {
  return `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${suffix}`
}

/** The non-streaming body: `chat.completion` or `text_completion`, with every null field vLLM's `model_dump()` writes. */
export function completionJson(completion: Completion, meta: CompletionMeta): JsonObject {
  const { request, choices } = completion
  const chat = request.kind === 'chat'
  const top = request.logprobs?.top
  const promptLps = request.promptLogprobs === undefined ? null : promptLogprobList(completion, request.promptLogprobs)
  return {
    id: meta.id,
    object: chat ? 'chat.completion' : 'text_completion',
    created: meta.created,
    model: meta.model,
    choices: choices.map((choice, index): JsonObject => {
      if (!chat) {
        const text = choice.echo + choice.text
        return {
          index,
          text,
          logprobs: top === undefined ? null : completionLogprobs(choice.tokens, { position: 0, offset: choice.echo.length, top }),
          finish_reason: choice.finishReason,
          stop_reason: choice.stopString ?? null,
          token_ids: null,
          prompt_logprobs: promptLps,
          prompt_token_ids: null,
        }
      }
      const toolCalls = choice.toolCalls.map((call, callIndex) => ({
        id: toolCallId(meta.id, index, callIndex),
        type: 'function',
        function: { name: call.name, arguments: call.arguments },
      }))
      const reasoning = choice.reasoning === '' ? null : choice.reasoning
      return {
        index,
        message: {
          role: 'assistant',
          // A call the tool parser found (auto) leaves `content` null; a named or `required` one writes "".
          content: toolCalls.length > 0 ? (request.toolChoice === 'auto' ? null : '') : choice.text,
          refusal: null,
          annotations: null,
          audio: null,
          function_call: null,
          tool_calls: toolCalls,
          ...reasoningKeys(meta, reasoning),
        },
        logprobs: top === undefined ? null : { content: contentTokens(choice).map((t, i) => chatLogprob(t, i, top)) },
        finish_reason: choice.finishReason,
        stop_reason: choice.stopString ?? null,
        token_ids: null,
      }
    }),
    service_tier: null,
    system_fingerprint: null,
    // model_dump() writes the unset `prompt_tokens_details`; a stream's usage chunk (exclude_none) does not.
    usage: { ...usage(completion), prompt_tokens_details: null },
    ...(chat ? { prompt_logprobs: promptLps, prompt_token_ids: null } : {}),
    kv_transfer_params: null,
  }
}

/**
 * The streaming events as vLLM writes them: for chat a role chunk per choice (step 0), then one chunk
 * per delta and choice, the last one of a choice carrying `finish_reason`; a usage chunk when asked
 * (usage on every chunk with continuous usage stats); then `[DONE]`.
 */
export function completionEvents(completion: Completion, meta: CompletionMeta, includeUsage: boolean): TimedEvent[] {
  const { request, choices } = completion
  const chat = request.kind === 'chat'
  const object = chat ? 'chat.completion.chunk' : 'text_completion'
  const top = request.logprobs?.top
  const continuous = includeUsage && request.continuousUsage
  const produced = choices.map(() => 0)
  // Continuous usage counts a choice's own prompt (vLLM's num_prompt_tokens[prompt_idx]); the final usage, all of them.
  const promptOf = (index: number) => request.prompts?.[choices[index]?.promptIndex ?? 0]?.tokens ?? completion.promptTokens
  const chunk = (choice: JsonObject, step: number, index: number): TimedEvent => ({
    step,
    kind: 'chunk',
    data: JSON.stringify({
      id: meta.id,
      object,
      created: meta.created,
      model: meta.model,
      choices: [choice],
      ...(continuous ? { usage: usageOf(promptOf(index), produced[index] ?? 0) } : {}),
    }),
  })

  const events: TimedEvent[] = []
  if (chat) {
    choices.forEach((_, index) => {
      events.push(chunk({ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }, 0, index))
    })
  }
  const contentSeen = choices.map(() => 0)
  const textOffset = choices.map(() => 0)
  // vLLM's named and required tool_choice paths (no tool parser) send id, type and name with the first
  // arguments: the name delta is left for the next step to carry. The named path indexes every fragment
  // by the choice's index; the required one by the call's, and writes `"name": null` on later fragments.
  const named = chat && typeof request.toolChoice === 'object'
  const required = chat && request.toolChoice === 'required'
  for (let step = 1; step <= completion.steps; step++) {
    choices.forEach((choice, index) => {
      const delta = choice.deltas[step - 1]
      if (delta === undefined) return
      produced[index] = step
      if ((named || required) && delta.kind === 'tool_start' && choice.deltas[step]?.kind === 'tool_args') return
      const last = step === choice.deltas.length
      const finish: JsonObject = last ? { finish_reason: choice.finishReason, stop_reason: choice.stopString ?? null } : { finish_reason: null, ...(chat ? {} : { stop_reason: null }) }
      const position = contentSeen[index] ?? 0
      if (delta.kind === 'content') contentSeen[index] = position + 1
      if (!chat) {
        const text = (step === 1 ? choice.echo : '') + (delta.kind === 'content' ? delta.text : '')
        const offset = textOffset[index] ?? 0
        textOffset[index] = offset + text.length
        const logprobs = top === undefined || delta.kind !== 'content'
          ? null
          : completionLogprobs([delta.text], { position, offset: offset + text.length - delta.text.length, top })
        events.push(chunk({ index, text, logprobs, ...finish }, step, index))
        return
      }
      const logprobs = top === undefined || delta.kind !== 'content' ? null : { content: [chatLogprob(delta.text, position, top)] }
      const start = named || required ? choice.deltas[step - 2] : undefined
      const at = named ? index : delta.kind === 'tool_args' ? delta.call : 0
      const body = start?.kind === 'tool_start' && delta.kind === 'tool_args'
        ? { tool_calls: [{ id: toolCallId(meta.id, index, start.call), type: 'function', index: at, function: { name: start.name, arguments: delta.text } }] }
        : (named || required) && delta.kind === 'tool_args'
          ? { tool_calls: [{ index: at, function: (required ? { name: null, arguments: delta.text } : { arguments: delta.text }) as JsonObject }] }
          : chatDelta(delta, meta, index)
      events.push(chunk({ index, delta: body, logprobs, ...finish }, step, index))
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

/** A chat chunk's `delta` (tool-call deltas as the hermes parser streams an auto call: the name first, no `arguments` key). */
function chatDelta(delta: Delta, meta: CompletionMeta, choiceIndex: number): JsonObject {
  switch (delta.kind) {
    case 'content':
      return { content: delta.text }
    case 'reasoning':
      return reasoningKeys(meta, delta.text)
    case 'tool_start':
      return {
        content: null,
        tool_calls: [{ id: toolCallId(meta.id, choiceIndex, delta.call), type: 'function', index: delta.call, function: { name: delta.name } }],
      }
    case 'tool_args':
      return { tool_calls: [{ index: delta.call, function: { arguments: delta.text } }] }
  }
}

function reasoningKeys(meta: CompletionMeta, value: string | null): JsonObject {
  return Object.fromEntries((meta.reasoningFields ?? BOTH_REASONING_FIELDS).map((key) => [key, value]))
}

/** vLLM's `chatcmpl-tool-<32 hex>`, stable for one response. */
export function toolCallId(completionId: string, choiceIndex: number, callIndex: number): string {
  const hex = [0, 1, 2, 3].map((part) => hashString(`${completionId}:${choiceIndex}:${callIndex}:${part}`).toString(16).padStart(8, '0'))
  return `chatcmpl-tool-${hex.join('')}`
}

function contentTokens(choice: PlannedChoice): string[] {
  return choice.deltas.flatMap((d) => (d.kind === 'content' ? [d.text] : []))
}

function promptLogprobList(completion: Completion, top: number): JsonValue[] {
  const { request } = completion
  const text = request.messages ? request.messages.map((m) => m.content).join(' ') : (request.prompt ?? '')
  return promptLogprobs(text.trim().split(/\s+/), completion.promptTokens, top)
}

/** Tool definitions are part of the templated prompt: about one token per four characters of their JSON. */
export function toolTokens(tools: readonly ToolSpec[]): number {
  return tools.length === 0 ? 0 : Math.ceil(JSON.stringify(tools).length / 4)
}

/** One event as it goes on the wire. */
export function sseEvent(event: Pick<TimedEvent, 'data' | 'event'>): string {
  return `${event.event === undefined ? '' : `event: ${event.event}\n`}data: ${event.data}\n\n`
}

/**
 * A fault as it acts on one request: `error_event` is sent in band only on a chat or completions stream
 * (`inBandError`); anywhere else (no stream, another route, a classic worker's native generation, whose
 * caller passes no route) it fails as `mid_stream` does.
 */
export function actingFault(fault: Fault | undefined, stream: boolean, route?: string): Fault | undefined {
  if (fault?.kind !== 'error_event' || (stream && (route === '/v1/chat/completions' || route === '/v1/completions'))) return fault
  return { kind: 'mid_stream', afterTokens: fault.afterTokens }
}

/**
 * `fault=error_event` as vLLM reports an engine that died mid-stream: its chat and completions stream
 * generators catch the exception and write `create_streaming_error_response(e)` (400 BadRequestError,
 * its defaults) as one more event, then `[DONE]`, on the 200 already under way.
 */
export function inBandError(afterTokens: number): TimedEvent[] {
  const message = `Emulated engine failure after ${afterTokens} tokens (fault=error_event): EngineCore encountered an issue. See stack trace (above) for the root cause.`
  const step = afterTokens + 1
  return [
    { step, kind: 'chunk', data: JSON.stringify(vllmError(message, 'BadRequestError', 400)) },
    { step, kind: 'done', data: '[DONE]' },
  ]
}

/** vLLM's error body (v0.10.1 and later), also used for the emulator's own errors on the OpenAI route. */
export function vllmError(message: string, type: string, code: number): JsonObject {
  return { error: { message, type, param: null, code } }
}

/** A refusal's error body in its route's dialect: vLLM's, Anthropic's on `/v1/messages`, or FastAPI's route miss. */
export function refusalBody(refusal: Refusal): JsonObject {
  if (refusal.dialect === 'fastapi') return { detail: refusal.message }
  if (refusal.dialect !== 'anthropic') return vllmError(refusal.message, refusal.type, refusal.status)
  return { type: 'error', error: { type: anthropicErrorType(refusal.status), message: refusal.message } }
}

/** vLLM's 404 for a `model` other than the served one (any model goes when none is configured). */
export function wrongModel(options: { served: string | undefined; model: unknown; route: string }): Refusal | undefined {
  const { served, model, route } = options
  if (served === undefined || typeof model !== 'string' || model === served) return undefined
  return { status: 404, type: 'NotFoundError', message: `The model \`${model}\` does not exist.`, dialect: errorDialect(route) }
}

/** The error dialect of a vLLM route: Anthropic's on `/v1/messages` and `/v1/messages/count_tokens`. */
export function errorDialect(route: string): Refusal['dialect'] {
  return route === '/v1/messages' || route.startsWith('/v1/messages/') ? 'anthropic' : undefined
}

/** Anthropic's error `type` for an HTTP status, as vLLM's Messages route maps it. */
function anthropicErrorType(status: number): string {
  switch (status) {
    case 400: return 'invalid_request_error'
    case 401: return 'authentication_error'
    case 403: return 'permission_error'
    case 404: return 'not_found_error'
    case 413: return 'request_too_large'
    case 429: return 'rate_limit_error'
    case 529: return 'overloaded_error'
    default: return status < 500 ? 'invalid_request_error' : 'api_error'
  }
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
  return usageOf(completion.promptTokens, completion.completionTokens)
}

function usageOf(promptTokens: number, completionTokens: number): JsonObject {
  return { prompt_tokens: promptTokens, total_tokens: promptTokens + completionTokens, completion_tokens: completionTokens }
}
