/**
 * The answer podgate stores, and its two renderings.
 *
 * One entry serves both forms of a request, whatever the answer holds (text, tool calls, reasoning,
 * logprobs, refusals, fields vLLM adds later): a streamed answer is kept as each choice's chunk objects
 * in order, with the order several choices' chunks interleaved in (a replayed stream is the live one,
 * chunk for chunk); a JSON answer as its whole choice
 * objects. Rendering the other form converts: chunks are merged the way clients reassemble them
 * (strings and lists appended, tool calls joined by `index`), a JSON choice becomes a role chunk and one
 * delta chunk. Embeddings (JSON only) are kept whole.
 */
import type { RequestKind } from '../normalize/types.ts'
import { DONE_TEXT, jsonMessage } from '../streaming/openai-chunks.ts'
import type { Usage } from '../streaming/openai-chunks.ts'
import { isRecord } from '../streaming/vllm.ts'

type Json = Record<string, unknown>

export interface CachedChoice {
  /** Captured from a stream: the choice's object in each chunk, `index` left out, in stream order. */
  chunks?: Json[]
  /** Top-level fields of those chunks besides id, object, created, model and choices (`prompt_token_ids`, a continuous `usage`), by chunk position. */
  tops?: Record<number, Json>
  /** Captured from JSON: the whole choice object, `index` left out. */
  whole?: Json
}

/** The answer in a JSON body (completion or embeddings list), or `undefined` when it is not one. */
export function captureJsonAnswer(kind: RequestKind, body: unknown): CachedAnswer | undefined {
  if (!isRecord(body) || body.error !== undefined) return undefined
  const extra: Json = {}
  const usage = isRecord(body.usage) ? (body.usage as unknown as Usage) : undefined
  if (kind === 'embedding') {
    if (!Array.isArray(body.data)) return undefined
    for (const [name, value] of Object.entries(body)) if (name !== 'model' && name !== 'usage') extra[name] = value
    return { kind, choices: [], extra, usage }
  }
  for (const [name, value] of Object.entries(body)) if (name !== 'usage' && !CHUNK_FIELDS.has(name)) extra[name] = value
  if (!Array.isArray(body.choices) || body.choices.length === 0 || body.choices.length > MAX_CHOICES) return undefined
  const choices: CachedChoice[] = []
  for (const choice of body.choices) {
    if (!isRecord(choice) || choice.index !== choices.length || cut(choice)) return undefined
    const { index: _index, ...whole } = choice
    choices.push({ whole })
  }
  return { kind, choices, usage, ...(Object.keys(extra).length > 0 ? { extra } : {}) }
}

export interface CachedAnswer {
  kind: RequestKind
  choices: CachedChoice[]
  usage?: Usage
  /** Top-level fields of a JSON answer besides id, object, created, model, choices and usage (`prompt_logprobs`; an embeddings list's `data`). */
  extra?: Json
  /** Captured from a stream of several choices: the choice of each chunk, in stream order (their chunks interleave). */
  order?: number[]
}

/** The identity a rendering writes into each body. */
export interface RenderMeta {
  id: string
  created: number
  model: string
  /**
   * The request let the model choose its tools (`tool_choice` absent or `auto`): a JSON message of tool
   * calls and no text then has `content: null`, as vLLM's tool parsers leave it; a named or `required`
   * choice has `""` there, as its stream's deltas do. Default false.
   */
  autoTools?: boolean
}

/** Most choices one answer may hold (prompts × n). */
const MAX_CHOICES = 1_024
/** The fields podgate writes into a chunk itself; a whole body's are these and `usage`. */
const CHUNK_FIELDS = new Set(['id', 'object', 'created', 'model', 'choices'])
/** Fields a stream repeats rather than continues: the latest value stands. */
const REPLACED = new Set(['role', 'type', 'id', 'name', 'index', 'finish_reason', 'stop_reason'])

/** A choice vLLM ended early (`abort`: the engine dropped it; `error`: it failed): no answer to keep. */
const cut = (choice: Json) => /^(abort|error)$/.test(choice.finish_reason as string)

/** What one stream event was, for the capture's caller. */
export type CapturedEvent = 'chunk' | 'usage' | 'error'

export interface AnswerCapture {
  /** Feeds one parsed `data:` event of podgate's own output. */
  accept(event: unknown): CapturedEvent
  /** `id` and `created` of the first chunk: what a coalesced caller's usage chunk must carry. */
  readonly meta: { id: string; created: number } | undefined
  /** The answer so far; `undefined` once an error went by. */
  result(usage: Usage | undefined): CachedAnswer | undefined
}

/** What one event of podgate's own stream is: the test `AnswerCapture.accept` makes, also once it stops recording. */
export function classifyEvent(value: unknown): CapturedEvent {
  if (!isRecord(value) || value.error !== undefined || !Array.isArray(value.choices)) return 'error'
  return value.choices.length === 0 && value.usage != null ? 'usage' : 'chunk'
}

/**
 * @example
 * const capture = createAnswerCapture('chat')
 * parser = createParser({ onEvent: (e) => e.data !== '[DONE]' && capture.accept(JSON.parse(e.data)) })
 */
export function createAnswerCapture(kind: RequestKind): AnswerCapture {
  const choices: CachedChoice[] = []
  const order: number[] = []
  let broken = false
  let meta: { id: string; created: number } | undefined

  function accept(value: unknown): CapturedEvent {
    const kind = classifyEvent(value)
    if (kind === 'error') {
      broken = true
      return kind
    }
    const event = value as Json & { choices: unknown[] }
    if (meta === undefined && typeof event.id === 'string' && typeof event.created === 'number') meta = { id: event.id, created: event.created }
    if (kind === 'usage' || broken) return kind
    let top: Json | undefined
    for (const [name, value] of Object.entries(event)) if (!CHUNK_FIELDS.has(name)) (top ??= {})[name] = value
    for (const choice of event.choices) {
      if (!isRecord(choice) || typeof choice.index !== 'number' || !Number.isInteger(choice.index) || choice.index < 0 || choice.index >= MAX_CHOICES || cut(choice)) {
        broken = true
        break
      }
      const { index, ...rest } = choice
      const record = (choices[index] ??= { chunks: [] })
      const chunks = (record.chunks ??= [])
      if (top) (record.tops ??= {})[chunks.length] = top
      chunks.push(rest)
      order.push(index)
    }
    return 'chunk'
  }

  return {
    accept,
    get meta() {
      return meta
    },
    result(usage) {
      // `includes` sees a choice that never came (a hole), where `some` would skip it.
      if (broken || choices.length === 0 || choices.includes(undefined as never)) return undefined
      return { kind, choices, ...(choices.length > 1 ? { order } : {}), usage }
    },
  }
}

function withoutIndex(call: Json): Json {
  const { index: _index, ...rest } = call
  return rest
}

/** The answer as OpenAI's `chat.completion`, `text_completion` or embeddings `list` body. */
export function renderJson(answer: CachedAnswer, meta: RenderMeta): Json {
  if (answer.kind === 'embedding') return { ...answer.extra, model: meta.model, usage: answer.usage ?? null }
  const choices = answer.choices.map((choice, index) => ({ index, ...(choice.whole ?? assembled(answer.kind, choice.chunks ?? [], meta.autoTools)) }))
  const object = answer.kind === 'chat' ? 'chat.completion' : 'text_completion'
  return { id: meta.id, object, created: meta.created, model: meta.model, choices, usage: answer.usage ?? null, ...answer.extra }
}

/**
 * The answer as the SSE text of a live stream: each choice's chunks as they came (a JSON answer: a role
 * chunk and one chunk holding the whole message), the usage chunk when asked for, then `[DONE]`.
 */
export function renderStream(answer: CachedAnswer, meta: RenderMeta, includeUsage: boolean): string {
  const object = answer.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion'
  const head = `{"id":${JSON.stringify(meta.id)},"object":"${object}","created":${meta.created},"model":${JSON.stringify(meta.model)},"choices":[`
  let out = ''
  const lists = answer.choices.map((choice) => choice.chunks ?? split(answer.kind, choice.whole ?? {}))
  const next = lists.map(() => 0)
  // In the live order where it was recorded (several streamed choices interleave), else each choice in turn.
  for (const index of answer.order ?? lists.flatMap((list, index) => list.map(() => index))) {
    const at = next[index]!++
    const chunk = lists[index]?.[at]
    if (!chunk) continue
    const top = answer.choices[index]!.tops?.[at]
    const tail = top ? `,${JSON.stringify(top).slice(1, -1)}` : ''
    out += `data: ${head}${JSON.stringify({ index, ...chunk })}]${tail}}\n\n`
  }
  if (includeUsage && answer.usage) out += usageChunkText(answer.kind, meta, answer.usage)
  return out + DONE_TEXT
}

/** The usage chunk of a stream with this identity: with no null member, as vLLM's (its JSON writes `prompt_tokens_details: null`). */
export function usageChunkText(kind: RequestKind, meta: RenderMeta, usage: Usage): string {
  const object = kind === 'chat' ? 'chat.completion.chunk' : 'text_completion'
  return `data: ${JSON.stringify({ id: meta.id, object, created: meta.created, model: meta.model, choices: [], usage }, (_, value: unknown) => value ?? undefined)}\n\n`
}

/** Appends `source` into `target`: strings and lists continue, objects merge, tool calls join by index. */
function merge(target: Json, source: Json): void {
  for (const [name, value] of Object.entries(source)) {
    const current = target[name]
    if (value === null || value === undefined) {
      if (!(name in target)) target[name] = null
    } else if (name === 'tool_calls' && Array.isArray(value)) {
      const calls = Array.isArray(current) ? (current as Json[]) : (target[name] = [] as Json[])
      for (const call of value) {
        if (!isRecord(call)) continue
        const at = typeof call.index === 'number' ? calls.find((c) => c.index === call.index) : undefined
        if (at) merge(at, call)
        else calls.push(structuredClone(call))
      }
    } else if (typeof value === 'string' && typeof current === 'string' && !REPLACED.has(name)) {
      target[name] = current + value
    } else if (Array.isArray(value) && Array.isArray(current)) {
      target[name] = [...current, ...value]
    } else if (isRecord(value) && isRecord(current)) {
      merge(current, value)
    } else {
      target[name] = isRecord(value) || Array.isArray(value) ? structuredClone(value) : value
    }
  }
}

/** A streamed choice as one JSON choice, reassembled as clients do. */
function assembled(kind: RequestKind, chunks: readonly Json[], autoTools = false): Json {
  // vLLM's JSON message (the reasoning keys' names vary by version: only those the chunks carried).
  const out: Json = kind === 'chat' ? { message: jsonMessage(null) } : { text: '' }
  for (const chunk of chunks) {
    const { delta, ...rest } = chunk
    if (kind === 'chat' && isRecord(delta)) merge(out.message as Json, delta)
    merge(out, rest)
  }
  const message = out.message
  // JSON tool calls carry no `index`: it only orders the stream's fragments. Tool calls the model chose
  // with no text have `content: null` in vLLM's JSON (`RenderMeta.autoTools`); the stream sent `""`.
  if (isRecord(message) && Array.isArray(message.tool_calls) && message.tool_calls.length > 0) {
    message.tool_calls = message.tool_calls.map((call) => (isRecord(call) ? withoutIndex(call) : call))
    if (autoTools && message.content === '') message.content = null
  }
  out.logprobs ??= null
  out.finish_reason ??= null
  return out
}

/**
 * A JSON choice as the chunks of a stream: the role chunk, then one delta with the whole message. A delta holds
 * only what vLLM sets on one: none of the message's null fields (`refusal`, `audio`...) nor an empty `tool_calls`;
 * nor does a completion's chunk hold `prompt_logprobs` (the key keeps a stream from an entry that has them), nor
 * a null the JSON choice writes for what is unset (`token_ids`) but `logprobs`, `finish_reason` and `stop_reason`.
 */
function split(kind: RequestKind, whole: Json): Json[] {
  const { message, prompt_logprobs: _prompt, ...rest } = whole
  const { role: _role, ...delta } = isRecord(message) ? message : {}
  // `content` is a message's, the others a choice's.
  for (const part of [rest, delta]) for (const [name, value] of Object.entries(part)) if (value === null ? !/^(content|logprobs|finish_reason|stop_reason)$/.test(name) : Array.isArray(value) && !value.length) delete part[name]
  if (kind !== 'chat') return [rest]
  if (Array.isArray(delta.tool_calls)) delta.tool_calls = delta.tool_calls.map((call, index) => (isRecord(call) ? { index, ...call } : call))
  return [{ delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }, { delta, ...rest }]
}
