/**
 * vLLM's Anthropic routes, `/v1/messages` and `/v1/messages/count_tokens`: the body turned into a
 * plain chat generation (`system` as the system message, text blocks joined), and the answer written
 * back as a `message` object or as Anthropic's named SSE events, followed by vLLM's `data: [DONE]`.
 */

import * as z from 'zod/mini'
import { ENGLISH } from '../../zod/english.ts'
import { countPromptTokens, hexId } from './generate.ts'
import type { ChatMessageText } from './generate.ts'
import type { Completion, CompletionMeta, TimedEvent } from './openai-format.ts'
import { describeIssue, plainChatRequest } from './requests.ts'
import type { ParseResult } from './requests.ts'
import type { JsonObject } from './types.ts'

const block = z.looseObject({ type: z.string(), text: z.optional(z.string()) })
/** A string, or content blocks of which only `text` ones are read (images and tool blocks are skipped). */
const text = z.union([z.string(), z.array(block)])
const countFields = {
  model: z.string(),
  messages: z.array(z.looseObject({ role: z.enum(['user', 'assistant']), content: text })),
  system: z.nullish(text),
}
export const countTokensBodySchema = z.looseObject(countFields)
export const messagesBodySchema = z.looseObject({
  ...countFields,
  max_tokens: z.number().check(z.int(), z.minimum(1)),
  stream: z.nullish(z.boolean()),
  stop_sequences: z.nullish(z.array(z.string())),
  temperature: z.nullish(z.number()),
})

/** Parses a Messages body into the chat generation vLLM runs for it. */
export function parseMessagesBody(body: unknown): ParseResult {
  const parsed = messagesBodySchema.safeParse(body, ENGLISH)
  if (!parsed.success) return { ok: false, message: describeIssue(parsed.error) }
  const b = parsed.data
  return {
    ok: true,
    request: plainChatRequest({
      messages: conversation(b),
      model: b.model,
      maxTokens: b.max_tokens,
      stop: b.stop_sequences ?? [],
      stream: b.stream ?? false,
    }),
  }
}

/** `/v1/messages/count_tokens`: the prompt tokens `/v1/messages` would report for the same conversation. */
export function countTokens(body: unknown): { ok: true; body: JsonObject } | { ok: false; message: string } {
  const parsed = countTokensBodySchema.safeParse(body, ENGLISH)
  if (!parsed.success) return { ok: false, message: describeIssue(parsed.error) }
  return { ok: true, body: { input_tokens: countPromptTokens({ messages: conversation(parsed.data) }) } }
}

/** `msg_<32 hex>`: a hex suffix (the HTTP route's) as is, any other (a job id) hashed to hex. */
export function messageId(suffix: string): string {
  return `msg_${/^[0-9a-f]{32}$/.test(suffix) ? suffix : hexId(suffix)}`
}

export function messagesJson(completion: Completion, meta: CompletionMeta): JsonObject {
  return {
    ...messageObject(meta),
    content: [{ type: 'text', text: completion.choices[0]?.text ?? '' }],
    stop_reason: stopReason(completion),
    stop_sequence: null,
    usage: { input_tokens: completion.promptTokens, output_tokens: completion.completionTokens },
  }
}

/**
 * The stream as vLLM writes it: message_start and content_block_start (step 0), one
 * content_block_delta per token, then content_block_stop, message_delta, message_stop and `[DONE]`.
 */
export function messagesEvents(completion: Completion, meta: CompletionMeta): TimedEvent[] {
  const events: TimedEvent[] = []
  const push = (type: string, fields: JsonObject, step: number, kind: TimedEvent['kind']) => {
    events.push({ event: type, kind, step, data: JSON.stringify({ type, ...fields }) })
  }
  const start = { ...messageObject(meta), content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: completion.promptTokens, output_tokens: 0 } }
  push('message_start', { message: start }, 0, 'chunk')
  push('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }, 0, 'chunk')
  completion.choices[0]?.deltas.forEach((delta, index) => {
    if (delta.kind === 'content') push('content_block_delta', { index: 0, delta: { type: 'text_delta', text: delta.text } }, index + 1, 'chunk')
  })
  const last = completion.steps
  push('content_block_stop', { index: 0 }, last, 'close')
  push('message_delta', {
    delta: { stop_reason: stopReason(completion), stop_sequence: null },
    usage: { input_tokens: completion.promptTokens, output_tokens: completion.completionTokens },
  }, last, 'close')
  push('message_stop', {}, last, 'close')
  // vLLM's Messages route ends its stream as its OpenAI routes do.
  events.push({ data: '[DONE]', kind: 'done', step: last })
  return events
}

function messageObject(meta: CompletionMeta): JsonObject {
  return { id: meta.id, type: 'message', role: 'assistant', model: meta.model }
}

/** vLLM maps finish_reason "length" to "max_tokens" and every other stop to "end_turn". */
function stopReason(completion: Completion): string {
  return completion.choices[0]?.finishReason === 'length' ? 'max_tokens' : 'end_turn'
}

function conversation(b: z.infer<typeof countTokensBodySchema>): ChatMessageText[] {
  const messages: ChatMessageText[] = b.system == null ? [] : [{ role: 'system', content: blockText(b.system) }]
  for (const m of b.messages) messages.push({ role: m.role, content: blockText(m.content) })
  return messages
}

function blockText(content: z.infer<typeof text>): string {
  if (typeof content === 'string') return content
  return content.flatMap((b) => (b.type === 'text' && b.text !== undefined ? [b.text] : [])).join('\n')
}
