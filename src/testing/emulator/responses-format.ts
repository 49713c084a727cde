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
import { hexId } from './generate.ts'
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
})

const TEXT_PARTS: readonly string[] = ['input_text', 'output_text', 'text']

/** Parses a Responses body into the chat generation vLLM runs for it. */
export function parseResponsesBody(body: unknown): ParseResult {
  const parsed = responsesBodySchema.safeParse(body, ENGLISH)
  if (!parsed.success) return { ok: false, message: describeIssue(parsed.error) }
  const b = parsed.data
  const messages: ChatMessageText[] = b.instructions == null ? [] : [{ role: 'system', content: b.instructions }]
  if (typeof b.input === 'string') messages.push({ role: 'user', content: b.input })
  else {
    for (const entry of b.input) {
      if (entry.type === 'function_call_output') messages.push({ role: 'tool', content: typeof entry.output === 'string' ? entry.output : JSON.stringify(entry.output ?? '') })
      if (entry.role === undefined) continue
      const content = typeof entry.content === 'string'
        ? entry.content
        : (entry.content ?? []).flatMap((p) => (TEXT_PARTS.includes(p.type) && p.text !== undefined ? [p.text] : [])).join('\n')
      messages.push({ role: entry.role, content })
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
 * (a reasoning item's text part, one `response.reasoning_text.delta` per token, closed when the answer
 * begins; the message item's text part, one `response.output_text.delta` per token), then the closing
 * events and `response.completed` (or `response.incomplete`) carrying the whole answer.
 */
export function responsesEvents(completion: Completion, meta: CompletionMeta): TimedEvent[] {
  const events: TimedEvent[] = []
  const push = (type: string, fields: JsonObject, step: number, kind: TimedEvent['kind']) => {
    events.push({ event: type, kind, step, data: JSON.stringify({ type, ...fields, sequence_number: events.length }) })
  }
  const pending = responseObject(completion, meta, false)
  push('response.created', { response: pending }, 0, 'chunk')
  push('response.in_progress', { response: pending }, 0, 'chunk')
  const calls = completion.choices[0]?.toolCalls ?? []
  if (calls.length > 0) {
    // A tool answer: one function_call item per call, opened on its name, its arguments in fragments.
    let current: { index: number; call: number } | undefined
    const done = (step: number) => {
      if (!current) return
      const call = calls[current.call]!
      const itemId = functionCallId(meta.id, current.call)
      push('response.function_call_arguments.done', { output_index: current.index, item_id: itemId, arguments: call.arguments, name: call.name }, step, 'close')
      push('response.output_item.done', { output_index: current.index, item: functionCallItem(meta.id, current.call, call, 'completed') }, step, 'close')
    }
    completion.choices[0]!.deltas.forEach((delta, index) => {
      if (delta.kind === 'tool_start') {
        done(index + 1)
        current = { index: current ? current.index + 1 : 0, call: delta.call }
        push('response.output_item.added', { output_index: current.index, item: functionCallItem(meta.id, delta.call, { name: delta.name, arguments: '' }, 'in_progress') }, index + 1, 'chunk')
      } else if (delta.kind === 'tool_args' && current) {
        push('response.function_call_arguments.delta', { output_index: current.index, item_id: functionCallId(meta.id, delta.call), delta: delta.text }, index + 1, 'chunk')
      }
    })
    done(completion.steps)
    const final = responseObject(completion, meta, true)
    push(final.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response: final }, completion.steps, 'close')
    return events
  }
  // A text answer: the reasoning item (when the model thinks), then the message item.
  const items = textItems(completion, meta)
  let open: { item: TextItem; at: JsonObject; text: string } | undefined
  const close = (step: number, kind: TimedEvent['kind']) => {
    if (!open) return
    const { item, at, text } = open
    push(item.reasoning ? 'response.reasoning_text.done' : 'response.output_text.done', { ...at, text }, step, kind)
    push('response.content_part.done', { ...at, part: item.part(text) }, step, kind)
    push('response.output_item.done', { output_index: item.index, item: item.done(text) }, step, kind)
    open = undefined
  }
  completion.choices[0]?.deltas.forEach((delta, i) => {
    if (delta.kind !== 'reasoning' && delta.kind !== 'content') return
    const item = delta.kind === 'reasoning' ? items.reasoning! : items.message
    const step = i + 1
    if (open?.item !== item) {
      close(step, 'chunk')
      open = { item, at: { item_id: item.id, output_index: item.index, content_index: 0 }, text: '' }
      push('response.output_item.added', { output_index: item.index, item: item.added }, step, 'chunk')
      push('response.content_part.added', { ...open.at, part: item.part('') }, step, 'chunk')
    }
    open.text += delta.text
    push(item.reasoning ? 'response.reasoning_text.delta' : 'response.output_text.delta', { ...open.at, delta: delta.text }, step, 'chunk')
  })
  const last = completion.steps
  close(last, 'close')
  const final = responseObject(completion, meta, true)
  push(final.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response: final }, last, 'close')
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
    output: !done ? [] : (choice?.toolCalls.length ?? 0) > 0
      ? choice!.toolCalls.map((call, i) => functionCallItem(meta.id, i, call, 'completed'))
      : textOutput(completion, meta),
    usage: done
      ? {
          input_tokens: input,
          input_tokens_details: { cached_tokens: 0 },
          output_tokens: output,
          output_tokens_details: { reasoning_tokens: choice?.deltas.filter((d) => d.kind === 'reasoning').length ?? 0 },
          total_tokens: input + output,
        }
      : null,
  }
}

/** An output item of a text answer, as the stream opens, fills and closes it. */
interface TextItem {
  reasoning: boolean
  id: string
  index: number
  added: JsonObject
  part(text: string): JsonObject
  done(text: string): JsonObject
}

/** The items a text answer streams: its reasoning item at output index 0 when the model thought, its message after. */
function textItems(completion: Completion, meta: CompletionMeta): { reasoning?: TextItem; message: TextItem } {
  const thought = (completion.choices[0]?.reasoning ?? '') !== ''
  const reasoningId = reasoningItemId(meta.id)
  const messageId = messageItemId(meta.id)
  const message: TextItem = {
    reasoning: false,
    id: messageId,
    index: thought ? 1 : 0,
    added: messageItem(messageId, '', 'in_progress'),
    part: outputText,
    done: (text) => messageItem(messageId, text, 'completed'),
  }
  if (!thought) return { message }
  return {
    message,
    reasoning: {
      reasoning: true,
      id: reasoningId,
      index: 0,
      added: { id: reasoningId, type: 'reasoning', summary: [], status: 'in_progress' },
      part: reasoningText,
      done: (text) => reasoningItem(reasoningId, text, 'completed'),
    },
  }
}

/** The output of a whole text answer: as vLLM writes it, only the last item has a status. */
function textOutput(completion: Completion, meta: CompletionMeta): JsonObject[] {
  const choice = completion.choices[0]
  const message = messageItem(messageItemId(meta.id), choice?.text ?? '', 'completed')
  if (!choice?.reasoning) return [message]
  // vLLM leaves out an empty message after reasoning.
  return [reasoningItem(reasoningItemId(meta.id), choice.reasoning, null), ...(choice.text === '' ? [] : [message])]
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
