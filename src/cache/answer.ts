/**
 * The normalized answer podgate stores, and its two renderings.
 *
 * One entry serves both forms of a request: per choice the text deltas in stream order (so a replayed
 * stream keeps the live chunk boundaries), the finish_reason, and the few plain fields vLLM adds
 * (`stop_reason`, `tool_calls: []`), plus the usage. An answer with anything else (tool calls,
 * reasoning, logprobs) is not captured: podgate would not replay it faithfully.
 */
import type { RequestKind } from '../normalize/types.ts'
import { DONE_TEXT } from '../streaming/openai-chunks.ts'
import type { Usage } from '../streaming/openai-chunks.ts'
import { isRecord } from '../streaming/vllm.ts'

/** JSON values podgate copies through unchanged: scalars, `null` and the empty list. */
type Plain = string | number | boolean | null | []
type Extras = Record<string, Plain>

export interface CachedChoice {
  /** Text deltas in stream order (chat `delta.content`, completion `text`); one when captured from JSON. */
  deltas: string[]
  finishReason: string | null
  /** The finish_reason came in a chunk of its own with an empty delta (classic worker-vllm). */
  finishAlone: boolean
  /** Plain fields on every chunk of the choice but the last (vLLM's completions stream: `stop_reason`). */
  midExtra?: Extras
  /** Plain fields on the choice's last chunk, or on the JSON choice (`stop_reason`). */
  endExtra?: Extras
  /** Plain fields of a JSON message besides role and content (`tool_calls: []`). */
  messageExtra?: Extras
}

export interface CachedAnswer {
  kind: RequestKind
  choices: CachedChoice[]
  usage?: Usage
  /** Plain top-level fields of a JSON answer (`prompt_logprobs: null`). */
  extra?: Extras
}

/** The identity a rendering writes into each body. */
export interface RenderMeta {
  id: string
  created: number
  model: string
}

const CHUNK_CHOICE_FIELDS = new Set(['index', 'delta', 'text', 'logprobs', 'finish_reason'])
const JSON_CHOICE_FIELDS = new Set(['index', 'message', 'text', 'logprobs', 'finish_reason'])
const MESSAGE_FIELDS = new Set(['role', 'content'])
const BODY_FIELDS = new Set(['id', 'object', 'created', 'model', 'choices', 'usage'])

/** Thrown inside capture when an answer holds something podgate would not replay faithfully. */
class Uncacheable extends Error {}

/** The plain fields of `record` outside `known`; throws `Uncacheable` on any other value. */
function extrasOf(record: Record<string, unknown>, known: ReadonlySet<string>): Extras | undefined {
  let extras: Extras | undefined
  for (const [name, value] of Object.entries(record)) {
    if (known.has(name)) continue
    if (value === undefined) continue
    if (!isPlain(value)) throw new Uncacheable(name)
    ;(extras ??= {})[name] = value
  }
  return extras
}

function isPlain(value: unknown): value is Plain {
  return value === null || typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean' || (Array.isArray(value) && value.length === 0)
}

/** What one stream event was, for the capture's caller. */
export type CapturedEvent = 'chunk' | 'usage' | 'error'

export interface AnswerCapture {
  /** Feeds one parsed `data:` event of podgate's own output. */
  accept(event: unknown): CapturedEvent
  /** `id` and `created` of the first chunk: what a coalesced caller's usage chunk must carry. */
  readonly meta: { id: string; created: number } | undefined
  /** The answer so far; `undefined` once something uncacheable or an error went by. */
  result(usage: Usage | undefined): CachedAnswer | undefined
}

/**
 * @example
 * const capture = createAnswerCapture('chat')
 * parser = createParser({ onEvent: (e) => e.data !== '[DONE]' && capture.accept(JSON.parse(e.data)) })
 */
export function createAnswerCapture(kind: RequestKind): AnswerCapture {
  const choices: CachedChoice[] = []
  let broken = false
  let meta: { id: string; created: number } | undefined

  function accept(event: unknown): CapturedEvent {
    if (!isRecord(event) || event.error !== undefined || !Array.isArray(event.choices)) {
      broken = true
      return 'error'
    }
    if (meta === undefined && typeof event.id === 'string' && typeof event.created === 'number') meta = { id: event.id, created: event.created }
    if (event.choices.length === 0 && event.usage != null) return 'usage'
    if (broken) return 'chunk'
    try {
      for (const choice of event.choices) acceptChoice(choice)
    } catch (error) {
      if (!(error instanceof Uncacheable)) throw error
      broken = true
    }
    return 'chunk'
  }

  function acceptChoice(choice: unknown): void {
    if (!isRecord(choice) || typeof choice.index !== 'number' || choice.index < 0 || choice.index > 64) throw new Uncacheable('choice')
    if (choice.logprobs != null) throw new Uncacheable('logprobs')
    const record = (choices[choice.index] ??= { deltas: [], finishReason: null, finishAlone: false })
    const extras = extrasOf(choice, CHUNK_CHOICE_FIELDS)
    const finish = choice.finish_reason ?? null
    if (finish !== null && typeof finish !== 'string') throw new Uncacheable('finish_reason')
    let text: string | undefined
    if (kind === 'chat') {
      if (!isRecord(choice.delta)) throw new Uncacheable('delta')
      const { role, content, ...rest } = choice.delta
      // Tool calls and reasoning arrive as other delta fields: podgate replays plain text only.
      if (Object.values(rest).some((v) => v != null && !(Array.isArray(v) && v.length === 0))) throw new Uncacheable('delta')
      if (content != null && typeof content !== 'string') throw new Uncacheable('content')
      // The role chunk opens each choice; replays write their own.
      if (role !== undefined && !content && finish === null) return
      text = content ?? undefined
    } else {
      if (typeof choice.text !== 'string') throw new Uncacheable('text')
      text = choice.text
    }
    if (text !== undefined) record.deltas.push(text)
    if (finish !== null) {
      record.finishReason = finish
      record.finishAlone = text === undefined
      if (extras) record.endExtra = extras
    } else if (extras && record.midExtra === undefined) {
      record.midExtra = extras
    }
  }

  return {
    accept,
    get meta() {
      return meta
    },
    result(usage) {
      if (broken || choices.length === 0 || choices.some((c) => c === undefined)) return undefined
      return { kind, choices, ...(usage ? { usage } : {}) }
    },
  }
}

/** The answer in a JSON completion body, or `undefined` when it holds what podgate would not replay. */
export function captureJsonAnswer(kind: RequestKind, body: unknown): CachedAnswer | undefined {
  if (!isRecord(body) || !Array.isArray(body.choices) || body.choices.length === 0) return undefined
  try {
    const choices: CachedChoice[] = []
    for (const choice of body.choices) {
      if (!isRecord(choice) || choice.index !== choices.length || choice.logprobs != null) return undefined
      let text: unknown
      let messageExtra: Extras | undefined
      if (kind === 'chat') {
        if (!isRecord(choice.message)) return undefined
        text = choice.message.content
        messageExtra = extrasOf(choice.message, MESSAGE_FIELDS)
      } else {
        text = choice.text
      }
      const finish = choice.finish_reason ?? null
      if (typeof text !== 'string' || (finish !== null && typeof finish !== 'string')) return undefined
      const endExtra = extrasOf(choice, JSON_CHOICE_FIELDS)
      choices.push({ deltas: [text], finishReason: finish, finishAlone: false, ...(endExtra ? { endExtra } : {}), ...(messageExtra ? { messageExtra } : {}) })
    }
    const extra = extrasOf(body, BODY_FIELDS)
    const usage = isRecord(body.usage) ? (body.usage as unknown as Usage) : undefined
    return { kind, choices, ...(usage ? { usage } : {}), ...(extra ? { extra } : {}) }
  } catch (error) {
    if (error instanceof Uncacheable) return undefined
    throw error
  }
}

/** The answer as OpenAI's `chat.completion` or `text_completion` body. */
export function renderJson(answer: CachedAnswer, meta: RenderMeta): Record<string, unknown> {
  const choices = answer.choices.map((choice, index) => {
    const text = choice.deltas.join('')
    const body =
      answer.kind === 'chat'
        ? { index, message: { role: 'assistant', content: text, ...choice.messageExtra }, logprobs: null, finish_reason: choice.finishReason }
        : { index, text, logprobs: null, finish_reason: choice.finishReason }
    return { ...body, ...choice.endExtra }
  })
  const object = answer.kind === 'chat' ? 'chat.completion' : 'text_completion'
  return { id: meta.id, object, created: meta.created, model: meta.model, choices, usage: answer.usage ?? null, ...answer.extra }
}

/**
 * The answer as the SSE text of a live stream: role chunks first (chat), each delta as its own chunk,
 * the finish_reason where the live stream had it, the usage chunk when asked for, then `[DONE]`.
 */
export function renderStream(answer: CachedAnswer, meta: RenderMeta, includeUsage: boolean): string {
  const object = answer.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion'
  const head = `{"id":${JSON.stringify(meta.id)},"object":"${object}","created":${meta.created},"model":${JSON.stringify(meta.model)},"choices":[`
  let out = ''
  const emit = (choice: Record<string, unknown>) => {
    out += `data: ${head}${JSON.stringify(choice)}]}\n\n`
  }
  if (answer.kind === 'chat') {
    answer.choices.forEach((_, index) => emit({ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }))
  }
  answer.choices.forEach((choice, index) => {
    const alone = choice.finishAlone || choice.deltas.length === 0
    choice.deltas.forEach((text, i) => {
      const last = !alone && i === choice.deltas.length - 1
      const body = answer.kind === 'chat' ? { index, delta: { content: text } } : { index, text }
      emit({ ...body, logprobs: null, finish_reason: last ? choice.finishReason : null, ...(last ? choice.endExtra : choice.midExtra) })
    })
    if (alone) {
      const body = answer.kind === 'chat' ? { index, delta: {} } : { index, text: '' }
      emit({ ...body, logprobs: null, finish_reason: choice.finishReason, ...choice.endExtra })
    }
  })
  if (includeUsage && answer.usage) out += `data: ${head}],"usage":${JSON.stringify(answer.usage)}}\n\n`
  return out + DONE_TEXT
}

/** The usage chunk of a stream with this identity. */
export function usageChunkText(kind: RequestKind, meta: RenderMeta, usage: Usage): string {
  const object = kind === 'chat' ? 'chat.completion.chunk' : 'text_completion'
  return `data: ${JSON.stringify({ id: meta.id, object, created: meta.created, model: meta.model, choices: [], usage })}\n\n`
}
