/**
 * vLLM's `/v1/responses` (the OpenAI Responses API): the body turned into a chat generation
 * (`instructions` as the system message, `input` as the conversation, `function_call_output` items as
 * tool messages, function `tools` and `tool_choice` as chat's), and the answer written back as a
 * `response` object or as its named SSE events (a message item, or `function_call` items whose
 * arguments stream as `response.function_call_arguments.delta`), with no `[DONE]` at the end.
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
  return {
    ok: true,
    request: plainChatRequest({ messages, model: b.model ?? undefined, maxTokens: b.max_output_tokens ?? undefined, stream: b.stream ?? false, tools, toolChoice: choice }),
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
 * The stream as vLLM writes it: created, in_progress, the message item and its text part opened
 * (step 0), one `response.output_text.delta` per token, then the closing events and
 * `response.completed` (or `response.incomplete`) carrying the whole answer.
 */
export function responsesEvents(completion: Completion, meta: CompletionMeta): TimedEvent[] {
  const text = completion.choices[0]?.text ?? ''
  const itemId = messageItemId(meta.id)
  const at = { item_id: itemId, output_index: 0, content_index: 0 }
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
  push('response.output_item.added', { output_index: 0, item: messageItem(itemId, '', 'in_progress') }, 0, 'chunk')
  push('response.content_part.added', { ...at, part: outputText('') }, 0, 'chunk')
  completion.choices[0]?.deltas.forEach((delta, index) => {
    if (delta.kind === 'content') push('response.output_text.delta', { ...at, delta: delta.text }, index + 1, 'chunk')
  })
  const last = completion.steps
  push('response.output_text.done', { ...at, text }, last, 'close')
  push('response.content_part.done', { ...at, part: outputText(text) }, last, 'close')
  push('response.output_item.done', { output_index: 0, item: messageItem(itemId, text, 'completed') }, last, 'close')
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
      : [messageItem(messageItemId(meta.id), choice?.text ?? '', 'completed')],
    usage: done
      ? {
          input_tokens: input,
          input_tokens_details: { cached_tokens: 0 },
          output_tokens: output,
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: input + output,
        }
      : null,
  }
}

function messageItem(id: string, text: string, status: 'in_progress' | 'completed'): JsonObject {
  return { id, type: 'message', role: 'assistant', status, content: status === 'completed' ? [outputText(text)] : [] }
}

function outputText(text: string): JsonObject {
  return { type: 'output_text', text, annotations: [] }
}

/** `msg_<32 hex>`, stable for one response. */
function messageItemId(responseId: string): string {
  return `msg_${hexId(`${responseId}:item`)}`
}

/** A `function_call` output item: `fc_<hex>` and `call_<hex>`, stable for one response and call. */
function functionCallItem(responseId: string, call: number, fn: { name: string; arguments: string }, status: 'in_progress' | 'completed'): JsonObject {
  return { type: 'function_call', id: functionCallId(responseId, call), call_id: `call_${hexId(`${responseId}:call:${call}`)}`, name: fn.name, arguments: fn.arguments, status }
}

function functionCallId(responseId: string, call: number): string {
  return `fc_${hexId(`${responseId}:fc:${call}`)}`
}
