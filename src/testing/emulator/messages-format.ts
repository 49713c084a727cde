/**
 * vLLM's Anthropic routes, `/v1/messages` and `/v1/messages/count_tokens`, as vLLM's converter
 * (`entrypoints/anthropic/serving.py`) runs them: the body turned into a chat generation (`system` as the
 * system message, text blocks joined, `tool_result` blocks as tool messages, `tools` and `tool_choice`
 * as function tools, `chat_template_kwargs` as on chat), and the answer written back as a `message`
 * object or as Anthropic's named SSE events (a block opened on its first delta: thinking, text,
 * tool_use), ending with `message_stop` (older vLLM added `data: [DONE]`: the `messagesDone` option).
 * As vLLM does, the answer keeps the chat completion's id (`chatcmpl-…`) and writes its pydantic models
 * without unset or null fields (no `stop_sequence: null`; `message_start` without `type` and `role`).
 */

import * as z from 'zod/mini'
import { ENGLISH } from '../../zod/english.ts'
import type { PlannedChoice } from './choices.ts'
import { countPromptTokens, hexId, messageText } from './generate.ts'
import type { ChatMessageText } from './generate.ts'
import { toolCallId, toolTokens } from './openai-format.ts'
import type { Completion, CompletionMeta, TimedEvent } from './openai-format.ts'
import { describeIssue, plainChatRequest, toolChoiceOf, toolChoiceRefusal } from './requests.ts'
import type { ParseResult, ToolChoice, ToolSpec } from './requests.ts'
import type { JsonObject, JsonValue } from './types.ts'

const textBlock = z.looseObject({ type: z.string(), text: z.optional(z.string()) })
/** A content block: `text` and `tool_result` ones are read, `image` ones counted as media (the rest are skipped). */
const block = z.looseObject({
  type: z.string(),
  text: z.optional(z.string()),
  content: z.optional(z.union([z.string(), z.array(textBlock)])),
})
const text = z.union([z.string(), z.array(block)])
const tool = z.looseObject({ name: z.string(), input_schema: z.optional(z.unknown()) })
const toolChoice = z.looseObject({ type: z.enum(['auto', 'any', 'none', 'tool']), name: z.optional(z.string()) })
const countFields = {
  model: z.string(),
  messages: z.array(z.looseObject({ role: z.enum(['user', 'assistant']), content: text })),
  system: z.nullish(text),
  tools: z.nullish(z.array(tool)),
  tool_choice: z.nullish(toolChoice),
  chat_template_kwargs: z.nullish(z.record(z.string(), z.unknown())),
}
export const countTokensBodySchema = z.looseObject(countFields)
export const messagesBodySchema = z.looseObject({
  ...countFields,
  max_tokens: z.number().check(z.int(), z.minimum(1)),
  stream: z.nullish(z.boolean()),
  stop_sequences: z.nullish(z.array(z.string())),
  temperature: z.nullish(z.number()),
})

type CountBody = z.infer<typeof countTokensBodySchema>

/** Parses a Messages body into the chat generation vLLM runs for it. */
export function parseMessagesBody(body: unknown): ParseResult {
  const parsed = messagesBodySchema.safeParse(body, ENGLISH)
  if (!parsed.success) return { ok: false, message: describeIssue(parsed.error), schema: true }
  const b = parsed.data
  const { tools, choice } = toolsOf(b)
  const refusal = toolChoiceRefusal(choice, tools)
  if (refusal) return { ok: false, message: refusal }
  return {
    ok: true,
    request: plainChatRequest({
      messages: conversation(b),
      model: b.model,
      maxTokens: b.max_tokens,
      stop: b.stop_sequences ?? [],
      stream: b.stream ?? false,
      tools,
      toolChoice: choice,
      thinking: b.chat_template_kwargs?.enable_thinking === true,
    }),
  }
}

/** `/v1/messages/count_tokens`: the prompt tokens `/v1/messages` would report for the same body. */
export function countTokens(body: unknown): { ok: true; body: JsonObject } | { ok: false; message: string } {
  const parsed = countTokensBodySchema.safeParse(body, ENGLISH)
  if (!parsed.success) return { ok: false, message: describeIssue(parsed.error) }
  const input = countPromptTokens({ messages: conversation(parsed.data) }) + toolTokens(toolsOf(parsed.data).tools)
  return { ok: true, body: { input_tokens: input, context_management: { original_input_tokens: input } } }
}

export function messagesJson(completion: Completion, meta: CompletionMeta): JsonObject {
  const choice = completion.choices[0]
  const content: JsonObject[] = []
  if (choice?.reasoning) content.push({ type: 'thinking', thinking: choice.reasoning, signature: signature(meta) })
  if (choice?.text) content.push({ type: 'text', text: choice.text })
  choice?.toolCalls.forEach((call, i) => content.push({ type: 'tool_use', id: toolCallId(meta.id, 0, i), name: call.name, input: JSON.parse(call.arguments) as JsonValue }))
  // vLLM's `model_dump(exclude_none=True)`: `stop_sequence` is always None, so never written.
  return {
    id: meta.id,
    type: 'message',
    role: 'assistant',
    content,
    model: meta.model,
    stop_reason: stopReason(choice),
    usage: { input_tokens: completion.promptTokens, output_tokens: completion.completionTokens },
  }
}

/**
 * The stream as vLLM writes it: message_start (step 0); each block opened by content_block_start on its
 * first delta and closed by content_block_stop when the next one opens or the answer ends (a thinking
 * block after its signature_delta); one content_block_delta per token (`thinking_delta`, `text_delta`,
 * `input_json_delta`); then message_delta with the usage and message_stop (and `[DONE]` with
 * `meta.messagesDone`, as older vLLM wrote, whose message_start held its usage beside the message). Events are vLLM's `model_dump_json(exclude_unset=True)`:
 * only the fields its converter set.
 */
export function messagesEvents(completion: Completion, meta: CompletionMeta): TimedEvent[] {
  const events: TimedEvent[] = []
  const push = (type: string, fields: JsonObject, step: number, kind: TimedEvent['kind']) => {
    events.push({ event: type, kind, step, data: JSON.stringify({ type, ...fields }) })
  }
  const usage = { input_tokens: completion.promptTokens, output_tokens: 0 }
  // Older vLLM (anthropic/serving_messages.py, which also wrote `[DONE]`) set only the message's id, content
  // and model, and put the prompt's count beside the message.
  const message = { id: meta.id, content: [], model: meta.model }
  const start: JsonObject = meta.messagesDone ? { message, usage } : { message: { ...message, stop_reason: null, stop_sequence: null, usage } }
  push('message_start', start, 0, 'chunk')
  const choice = completion.choices[0]
  let open: { index: number; type: string } | undefined
  let next = 0
  const close = (step: number, kind: TimedEvent['kind']) => {
    if (!open) return
    if (open.type === 'thinking') push('content_block_delta', { index: open.index, delta: { type: 'signature_delta', signature: signature(meta) } }, step, kind)
    push('content_block_stop', { index: open.index }, step, kind)
    open = undefined
  }
  const begin = (block: JsonObject & { type: string }, step: number) => {
    close(step, 'chunk')
    open = { index: next++, type: block.type }
    push('content_block_start', { index: open.index, content_block: block }, step, 'chunk')
    return open.index
  }
  choice?.deltas.forEach((delta, i) => {
    const step = i + 1
    switch (delta.kind) {
      case 'reasoning': {
        const index = open?.type === 'thinking' ? open.index : begin({ type: 'thinking', thinking: '' }, step)
        push('content_block_delta', { index, delta: { type: 'thinking_delta', thinking: delta.text } }, step, 'chunk')
        break
      }
      case 'content': {
        const index = open?.type === 'text' ? open.index : begin({ type: 'text', text: '' }, step)
        push('content_block_delta', { index, delta: { type: 'text_delta', text: delta.text } }, step, 'chunk')
        break
      }
      case 'tool_start':
        begin({ type: 'tool_use', id: toolCallId(meta.id, 0, delta.call), name: delta.name, input: {} }, step)
        break
      case 'tool_args':
        push('content_block_delta', { index: open?.index ?? 0, delta: { type: 'input_json_delta', partial_json: delta.text } }, step, 'chunk')
        break
    }
  })
  const last = completion.steps
  close(last, 'close')
  push('message_delta', {
    delta: { stop_reason: stopReason(choice) },
    usage: { input_tokens: completion.promptTokens, output_tokens: completion.completionTokens },
  }, last, 'close')
  push('message_stop', {}, last, 'close')
  if (meta.messagesDone) events.push({ data: '[DONE]', kind: 'done', step: last })
  return events
}

/** vLLM's map from chat's finish_reason: tool_calls to tool_use, length to max_tokens, the rest to end_turn. */
function stopReason(choice: PlannedChoice | undefined): string {
  if (choice?.finishReason === 'tool_calls') return 'tool_use'
  return choice?.finishReason === 'length' ? 'max_tokens' : 'end_turn'
}

/** A thinking block's signature: vLLM writes a random hex one; the emulator's is stable per message. */
function signature(meta: CompletionMeta): string {
  return hexId(`${meta.id}:signature`)
}

/** Anthropic's tools as function tools, and its tool_choice as chat's (auto, any -> required, none, tool -> named). */
function toolsOf(b: CountBody): { tools: ToolSpec[]; choice: ToolChoice } {
  const tools = (b.tools ?? []).map((t): ToolSpec => ({ name: t.name, parameters: t.input_schema }))
  const c = b.tool_choice
  const asked: ToolChoice | undefined = c == null ? undefined : c.type === 'any' ? 'required' : c.type === 'tool' ? { name: c.name ?? '' } : c.type
  return { tools, choice: toolChoiceOf(asked, tools) }
}

/**
 * The conversation vLLM builds: a user's `tool_result` blocks become tool messages ahead of the user's
 * own text, and a user message that held only tool results is not sent as one, as vLLM's converter does.
 */
function conversation(b: CountBody): ChatMessageText[] {
  const messages: ChatMessageText[] = b.system == null ? [] : [{ role: 'system', content: blockText(b.system) }]
  for (const m of b.messages) {
    if (typeof m.content === 'string') {
      messages.push({ role: m.role, content: m.content })
      continue
    }
    if (m.role === 'user') for (const part of m.content) if (part.type === 'tool_result') messages.push({ role: 'tool', content: blockText(part.content ?? '') })
    const content = blockText(m.content)
    const message = messageText(m.role, content, m.content)
    if (content !== '' || message.media || m.role === 'assistant' || !m.content.some((part) => part.type === 'tool_result')) messages.push(message)
  }
  return messages
}

function blockText(content: string | ReadonlyArray<{ type: string; text?: string }>): string {
  if (typeof content === 'string') return content
  return content.flatMap((b) => (b.type === 'text' && b.text !== undefined ? [b.text] : [])).join('\n')
}
