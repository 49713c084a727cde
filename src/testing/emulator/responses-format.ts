/**
 * vLLM's `/v1/responses` (the OpenAI Responses API): the body turned into a chat generation
 * (`instructions` as the system message, `input` as the conversation, `function_call_output` items as
 * tool messages, function `tools` and `tool_choice` as chat's, `reasoning` as thinking), and the answer
 * written back as a `response` object or as its named SSE events (a `reasoning` item whose text streams
 * as `response.reasoning_text.delta`, then a message item, or `function_call` items whose arguments
 * stream as `response.function_call_arguments.delta`; each item opened on its first delta), with no
 * `[DONE]` at the end.
 */

import * as z from 'zod/mini'
import { ENGLISH } from '../../zod/english.ts'
import type { ChatMessageText } from './generate.ts'
import { hexId, messageText } from './generate.ts'
import type { Completion, CompletionMeta, TimedEvent } from './openai-format.ts'
import { describeIssue, plainChatRequest, toolChoiceOf, toolChoiceRefusal } from './requests.ts'
import type { ParseResult, ToolSpec } from './requests.ts'
import type { JsonObject } from './types.ts'

const part = z.looseObject({ type: z.string(), text: z.optional(z.string()) })
/** A message item, or a `function_call_output` (its `output` becomes a tool message); other items are skipped. */
const item = z.looseObject({
  type: z.optional(z.string()),
  role: z.optional(z.string()),
  content: z.optional(z.union([z.string(), z.array(part)])),
  output: z.optional(z.unknown()),
})
/** Function tools are flat in the Responses API; other tool types (web search, MCP...) are not planned. */
const tool = z.looseObject({ type: z.string(), name: z.optional(z.string()), parameters: z.optional(z.unknown()) })
const toolChoice = z.union([z.enum(['none', 'auto', 'required']), z.looseObject({ type: z.literal('function'), name: z.string() })])
export const responsesBodySchema = z.looseObject({
  model: z.nullish(z.string()),
  input: z.union([z.string(), z.array(item)]),
  instructions: z.nullish(z.string()),
  max_output_tokens: z.nullish(z.number().check(z.int(), z.minimum(1))),
  stream: z.nullish(z.boolean()),
  temperature: z.nullish(z.number()),
  tools: z.nullish(z.array(tool)),
  tool_choice: z.nullish(toolChoice),
  reasoning: z.nullish(z.looseObject({ effort: z.nullish(z.string()) })),
  chat_template_kwargs: z.nullish(z.record(z.string(), z.unknown())),
  store: z.nullish(z.boolean()),
  background: z.nullish(z.boolean()),
  previous_response_id: z.nullish(z.string()),
})

const TEXT_PARTS: readonly string[] = ['input_text', 'output_text', 'text']

/** Parses a Responses body into the chat generation vLLM runs for it. */
export function parseResponsesBody(body: unknown): ParseResult {
  const parsed = responsesBodySchema.safeParse(body, ENGLISH)
  if (!parsed.success) return { ok: false, message: describeIssue(parsed.error), schema: true }
  const b = parsed.data
  // vLLM's `ResponsesRequest.validate_background` (protocol.py): `data.get("store", True)` must hold.
  if (b.background && b.store === false) return { ok: false, message: 'background can only be used when `store` is true', schema: true }
  const messages: ChatMessageText[] = b.instructions == null ? [] : [{ role: 'system', content: b.instructions }]
  if (typeof b.input === 'string') messages.push({ role: 'user', content: b.input })
  else {
    for (const entry of b.input) {
      if (entry.type === 'function_call_output') messages.push({ role: 'tool', content: typeof entry.output === 'string' ? entry.output : JSON.stringify(entry.output ?? '') })
      if (entry.role === undefined) continue
      const content = typeof entry.content === 'string'
        ? entry.content
        : (entry.content ?? []).flatMap((p) => (TEXT_PARTS.includes(p.type) && p.text !== undefined ? [p.text] : [])).join('\n')
      messages.push(messageText(entry.role, content, entry.content))
    }
  }
  const tools = (b.tools ?? []).flatMap((t): ToolSpec[] => (t.type === 'function' && t.name !== undefined ? [{ name: t.name, parameters: t.parameters }] : []))
  const choice = toolChoiceOf(b.tool_choice == null ? undefined : typeof b.tool_choice === 'string' ? b.tool_choice : { name: b.tool_choice.name }, tools)
  const refusal = toolChoiceRefusal(choice, tools)
  if (refusal) return { ok: false, message: refusal }
  // The model thinks when asked to: `reasoning` with an effort other than "none", or the chat route's
  // `chat_template_kwargs.enable_thinking` (which wins when it says false).
  const enableThinking = b.chat_template_kwargs?.enable_thinking
  const thinking = typeof enableThinking === 'boolean' ? enableThinking : b.reasoning != null && b.reasoning.effort !== 'none'
  return {
    ok: true,
    request: plainChatRequest({ messages, model: b.model ?? undefined, maxTokens: b.max_output_tokens ?? undefined, stream: b.stream ?? false, tools, toolChoice: choice, thinking }),
  }
}

/**
 * vLLM's response store on `/v1/responses` (serving_responses.py `create_responses`), over the stored
 * conversations of the worker that takes the request: with the store off (`VLLM_ENABLE_RESPONSES_API_STORE`
 * unset), `store` (default true) is dropped and `background` is a 400 invalid_request_error; an unknown
 * `previous_response_id` (always, with the store off) is a 404 invalid_request_error. A known one's
 * conversation (`msg_store`: its messages and its answer, `_construct_input_messages`) goes before `input`.
 * Gives the body to generate from and, when the answer is to be stored, its conversation so far.
 */
export function responsesStore(body: JsonObject, enabled: boolean, stored: Map<string, JsonObject[]>):
  | { ok: false; status: number; error: JsonObject }
  | { ok: true; body: JsonObject; conversation: JsonObject[] | undefined; background: boolean } {
  const store = body.store !== false && enabled
  if (body.store !== false && !enabled && body.background === true) {
    const message = 'This vLLM engine does not support `store=True` and therefore does not support the background mode. To enable these features, set the environment variable `VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server.'
    return { ok: false, status: 400, error: { error: { message, type: 'invalid_request_error', param: null, code: 400 } } }
  }
  const previousId = body.previous_response_id
  const previous = typeof previousId === 'string' ? stored.get(previousId) : []
  if (!previous) {
    return { ok: false, status: 404, error: { error: { message: `Response with id '${String(previousId)}' not found.`, type: 'invalid_request_error', param: 'response_id', code: 404 } } }
  }
  const input = typeof body.input === 'string' ? [{ role: 'user', content: body.input }] : (body.input as JsonObject[])
  const expanded = { ...body, input: [...previous, ...input] }
  const system = typeof body.instructions === 'string' ? [{ role: 'system', content: body.instructions }] : []
  return { ok: true, body: expanded, conversation: store ? [...system, ...expanded.input] : undefined, background: store && body.background === true }
}

/** A background request's immediate answer (serving_responses.py): `queued`, no output, no usage. */
export function queuedResponse(completion: Completion, meta: CompletionMeta): JsonObject {
  return { ...responseObject(completion, meta, false), status: 'queued' }
}

/** `resp_<32 hex>`: a hex suffix (the HTTP route's) as is, any other (a job id) hashed to hex. */
export function responseId(suffix: string): string {
  return `resp_${/^[0-9a-f]{32}$/.test(suffix) ? suffix : hexId(suffix)}`
}

/** The non-streaming answer: `completed`, or `incomplete` when `max_output_tokens` cut it. */
export function responsesJson(completion: Completion, meta: CompletionMeta): JsonObject {
  return responseObject(completion, meta, true)
}

/**
 * The stream as vLLM writes it: created, in_progress, then each output item opened on its first delta
 * and closed when the next one opens or the answer ends: a reasoning item (its text part, one
 * `response.reasoning_text.delta` per token), then the message item (one `response.output_text.delta`
 * per token) or one `function_call` item per call (its arguments in fragments), then
 * `response.completed` (or `response.incomplete`) carrying the whole answer.
 */
export function responsesEvents(completion: Completion, meta: CompletionMeta): TimedEvent[] {
  const events: TimedEvent[] = []
  const push = (type: string, fields: JsonObject, step: number, kind: TimedEvent['kind']) => {
    events.push({ event: type, kind, step, data: JSON.stringify({ type, ...fields, sequence_number: events.length }) })
  }
  const pending = responseObject(completion, meta, false)
  push('response.created', { response: pending }, 0, 'chunk')
  push('response.in_progress', { response: pending }, 0, 'chunk')
  const choice = completion.choices[0]
  const texts = textItems(meta)
  /** The item being written: its output index, and what writes its closing events. */
  let open: { index: number; text?: { item: TextItem; at: JsonObject; text: string }; close(step: number, kind: TimedEvent['kind']): void } | undefined
  let opened = 0
  const close = (step: number, kind: TimedEvent['kind']) => {
    open?.close(step, kind)
    open = undefined
  }
  choice?.deltas.forEach((delta, i) => {
    const step = i + 1
    if (delta.kind === 'tool_start') {
      close(step, 'chunk')
      const index = opened++
      const { call } = delta
      push('response.output_item.added', { output_index: index, item: functionCallItem(meta.id, call, { name: delta.name, arguments: '' }, 'in_progress') }, step, 'chunk')
      open = {
        index,
        close: (at, kind) => {
          const done = choice.toolCalls[call]!
          push('response.function_call_arguments.done', { output_index: index, item_id: functionCallId(meta.id, call), arguments: done.arguments, name: done.name }, at, kind)
          push('response.output_item.done', { output_index: index, item: functionCallItem(meta.id, call, done, 'completed') }, at, kind)
        },
      }
      return
    }
    if (delta.kind === 'tool_args') {
      if (open) push('response.function_call_arguments.delta', { output_index: open.index, item_id: functionCallId(meta.id, delta.call), delta: delta.text }, step, 'chunk')
      return
    }
    const item = delta.kind === 'reasoning' ? texts.reasoning : texts.message
    if (open?.text?.item !== item) {
      close(step, 'chunk')
      const index = opened++
      const text = { item, at: { item_id: item.id, output_index: index, content_index: 0 }, text: '' }
      push('response.output_item.added', { output_index: index, item: item.added }, step, 'chunk')
      push('response.content_part.added', { ...text.at, part: item.part('') }, step, 'chunk')
      open = {
        index,
        text,
        close: (at, kind) => {
          push(item.reasoning ? 'response.reasoning_text.done' : 'response.output_text.done', { ...text.at, text: text.text }, at, kind)
          push('response.content_part.done', { ...text.at, part: item.part(text.text) }, at, kind)
          push('response.output_item.done', { output_index: index, item: item.done(text.text) }, at, kind)
        },
      }
    }
    open.text!.text += delta.text
    push(item.reasoning ? 'response.reasoning_text.delta' : 'response.output_text.delta', { ...open.text!.at, delta: delta.text }, step, 'chunk')
  })
  close(completion.steps, 'close')
  const final = responseObject(completion, meta, true)
  push(final.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response: final }, completion.steps, 'close')
  return events
}

function responseObject(completion: Completion, meta: CompletionMeta, done: boolean): JsonObject & { status: string } {
  const choice = completion.choices[0]
  const cut = done && choice?.finishReason === 'length'
  const input = completion.promptTokens
  const output = completion.completionTokens
  return {
    id: meta.id,
    object: 'response',
    created_at: meta.created,
    model: meta.model,
    status: !done ? 'in_progress' : cut ? 'incomplete' : 'completed',
    incomplete_details: cut ? { reason: 'max_output_tokens' } : null,
    max_output_tokens: completion.request.maxTokens ?? null,
    output: !done ? [] : outputItems(completion, meta),
    usage: done
      ? {
          input_tokens: input,
          input_tokens_details: { cached_tokens: 0 },
          output_tokens: output,
          // vLLM's simple (non-gpt-oss) Responses path never fills it in: the reasoning counts in output_tokens only.
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: input + output,
        }
      : null,
  }
}

/** An output item of a text answer, as the stream opens, fills and closes it. */
interface TextItem {
  reasoning: boolean
  id: string
  added: JsonObject
  part(text: string): JsonObject
  done(text: string): JsonObject
}

/** The text items an answer may stream: its reasoning item (when the model thinks) and its message. */
function textItems(meta: CompletionMeta): { reasoning: TextItem; message: TextItem } {
  const reasoningId = reasoningItemId(meta.id)
  const messageId = messageItemId(meta.id)
  return {
    reasoning: {
      reasoning: true,
      id: reasoningId,
      added: { id: reasoningId, type: 'reasoning', summary: [], status: 'in_progress' },
      part: reasoningText,
      done: (text) => reasoningItem(reasoningId, text, 'completed'),
    },
    message: {
      reasoning: false,
      id: messageId,
      added: messageItem(messageId, '', 'in_progress'),
      part: outputText,
      done: (text) => messageItem(messageId, text, 'completed'),
    },
  }
}

/** The output of a whole answer: its reasoning, then its message or calls. As vLLM writes it, only the last item has a status. */
function outputItems(completion: Completion, meta: CompletionMeta): JsonObject[] {
  const choice = completion.choices[0]
  const reasoning = choice?.reasoning ? [reasoningItem(reasoningItemId(meta.id), choice.reasoning, null)] : []
  if (choice && choice.toolCalls.length > 0) return [...reasoning, ...choice.toolCalls.map((call, i) => functionCallItem(meta.id, i, call, 'completed'))]
  // vLLM leaves out an empty message after reasoning.
  if (reasoning.length > 0 && !choice?.text) return reasoning
  return [...reasoning, messageItem(messageItemId(meta.id), choice?.text ?? '', 'completed')]
}

function messageItem(id: string, text: string, status: 'in_progress' | 'completed'): JsonObject {
  return { id, type: 'message', role: 'assistant', status, content: status === 'completed' ? [outputText(text)] : [] }
}

function reasoningItem(id: string, text: string, status: 'completed' | null): JsonObject {
  return { id, type: 'reasoning', summary: [], content: [reasoningText(text)], encrypted_content: null, status }
}

function outputText(text: string): JsonObject {
  return { type: 'output_text', text, annotations: [] }
}

function reasoningText(text: string): JsonObject {
  return { type: 'reasoning_text', text }
}

/** `msg_<32 hex>`, stable for one response. */
function messageItemId(responseId: string): string {
  return `msg_${hexId(`${responseId}:item`)}`
}

/** `rs_<32 hex>`, stable for one response. */
function reasoningItemId(responseId: string): string {
  return `rs_${hexId(`${responseId}:reasoning`)}`
}

/** A `function_call` output item: `fc_<hex>` and `call_<hex>`, stable for one response and call. */
function functionCallItem(responseId: string, call: number, fn: { name: string; arguments: string }, status: 'in_progress' | 'completed'): JsonObject {
  return { type: 'function_call', id: functionCallId(responseId, call), call_id: `call_${hexId(`${responseId}:call:${call}`)}`, name: fn.name, arguments: fn.arguments, status }
}

function functionCallId(responseId: string, call: number): string {
  return `fc_${hexId(`${responseId}:fc:${call}`)}`
}
