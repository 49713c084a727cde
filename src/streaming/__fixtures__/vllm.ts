/**
 * Test fixtures: one generation written the way each worker-vllm generation and vLLM itself write it
 * (runpod-api.md §3), plus helpers to cut text and read streams. Not part of the library.
 */
import { createParser } from 'eventsource-parser'

/** One answer, with multibyte text (2-, 3- and 4-byte UTF-8, a surrogate pair) across deltas. */
export const PIECES = ['Hel', 'lo', ',', ' wör', 'ld', ' ✓', ' 🎉', '!', ' Ça', ' va', '?']
export const TEXT = PIECES.join('')
export const PROMPT_TOKENS = 7
export const UPSTREAM_MODEL = 'meta-llama/Llama-3.1-8B-Instruct'

export interface VllmStreamOptions {
  kind?: 'chat' | 'completion'
  pieces?: string[]
  /** Per choice; default one choice with `pieces`. */
  choices?: string[][]
  finishReason?: string
  model?: string
  id?: string
  created?: number
  /** Append the usage chunk (podgate always asks for it). Default true. */
  usage?: boolean
  /** Append `data: [DONE]`. Default true. */
  done?: boolean
  /** Line ending. Default `\n`. */
  eol?: string
}

/** The SSE text vLLM writes for a streamed chat or completion, event by event. */
export function vllmEvents(options: VllmStreamOptions = {}): string[] {
  const kind = options.kind ?? 'chat'
  const choices = options.choices ?? [options.pieces ?? PIECES]
  const head = {
    id: options.id ?? (kind === 'chat' ? 'chatcmpl-9f2c1e' : 'cmpl-9f2c1e'),
    object: kind === 'chat' ? 'chat.completion.chunk' : 'text_completion',
    created: options.created ?? 1_700_000_000,
    model: options.model ?? UPSTREAM_MODEL,
  }
  const chat = (index: number, delta: object, finish: string | null) => ({
    ...head,
    choices: [{ index, delta, logprobs: null, finish_reason: finish, ...(finish ? { stop_reason: null } : {}) }],
  })
  const text = (index: number, text: string, finish: string | null) => ({
    ...head,
    choices: [{ index, text, logprobs: null, finish_reason: finish, stop_reason: null }],
  })
  const events: object[] = []
  if (kind === 'chat') choices.forEach((_, index) => events.push(chat(index, { role: 'assistant', content: '' }, null)))
  const longest = Math.max(...choices.map((pieces) => pieces.length))
  for (let step = 0; step < longest; step++) {
    choices.forEach((pieces, index) => {
      const piece = pieces[step]
      if (piece === undefined) return
      events.push(kind === 'chat' ? chat(index, { content: piece }, null) : text(index, piece, null))
    })
  }
  choices.forEach((_, index) =>
    events.push(kind === 'chat' ? chat(index, { content: '' }, options.finishReason ?? 'stop') : text(index, '', options.finishReason ?? 'stop')),
  )
  if (options.usage ?? true) {
    const completion = choices.reduce((sum, pieces) => sum + pieces.length, 0)
    events.push({ ...head, choices: [], usage: { prompt_tokens: PROMPT_TOKENS, total_tokens: PROMPT_TOKENS + completion, completion_tokens: completion } })
  }
  const eol = options.eol ?? '\n'
  const out = events.map((event) => `data: ${JSON.stringify(event)}${eol}${eol}`)
  if (options.done ?? true) out.push(`data: [DONE]${eol}${eol}`)
  return out
}

export function vllmStream(options: VllmStreamOptions = {}): string {
  return vllmEvents(options).join('')
}

/**
 * classic worker-vllm token items for `choices` (one list of deltas per choice), batched 1, 3, 9, ...
 * up to `maxBatch` deltas per choice, `usage.output` cumulative across choices.
 */
export function classicItems(choices: string[][] = [PIECES], options: { maxBatch?: number; prompt?: number } = {}): unknown[] {
  const items: unknown[] = []
  const longest = Math.max(...choices.map((pieces) => pieces.length))
  let step = 0
  let size = 1
  let output = 0
  while (step < longest) {
    const end = Math.min(step + size, longest)
    const batch = choices.map((pieces) => pieces.slice(step, end))
    output += batch.reduce((sum, tokens) => sum + tokens.length, 0)
    items.push({ choices: batch.map((tokens) => ({ tokens })), usage: { input: options.prompt ?? PROMPT_TOKENS, output } })
    step = end
    size = Math.min(size * 3, options.maxBatch ?? 50)
  }
  return items
}

/** `text` in pieces of `size` characters. */
export function cutEvery(text: string, size: number): string[] {
  const out: string[] = []
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size))
  return out
}

/** `text` cut at pseudo-random points (deterministic per seed). */
export function cutRandom<T extends string | Uint8Array>(text: T, seed: number, maxPiece = 17): T[] {
  const out: T[] = []
  let state = seed
  let at = 0
  while (at < text.length) {
    state = (state * 1_103_515_245 + 12_345) % 2_147_483_648
    const size = 1 + (state % maxPiece)
    out.push(text.slice(at, at + size) as T)
    at += size
  }
  return out
}

export function bytesOf(text: string): Uint8Array {
  return new TextEncoder().encode(text)
}

/** A body that yields `chunks` then ends, or errors with `failWith` after them. */
export function bodyOf(chunks: Uint8Array[], failWith?: Error): ReadableStream<Uint8Array> & { cancelled: () => unknown } {
  let index = 0
  let cancelReason: unknown
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      const chunk = chunks[index++]
      if (chunk) controller.enqueue(chunk)
      else if (failWith) controller.error(failWith)
      else controller.close()
    },
    cancel(reason) {
      cancelReason = reason ?? 'cancelled'
    },
  })
  return Object.assign(stream, { cancelled: () => cancelReason })
}

export async function readText(stream: ReadableStream<Uint8Array>): Promise<string> {
  const decoder = new TextDecoder()
  let text = ''
  const reader = stream.getReader()
  for (;;) {
    const { done, value } = await reader.read()
    if (done) return text + decoder.decode()
    text += decoder.decode(value, { stream: true })
  }
}

/** The `data` of every event in an SSE text. */
export function sseData(text: string): string[] {
  const data: string[] = []
  const parser = createParser({ onEvent: (event) => data.push(event.data) })
  parser.feed(text)
  return data
}

/** The text of every choice, in order, from OpenAI chunk objects or JSON texts. */
export function contentOf(chunks: unknown[]): string[] {
  const texts: string[] = []
  for (const raw of chunks) {
    const chunk = (typeof raw === 'string' ? JSON.parse(raw) : raw) as { choices?: { index: number; delta?: { content?: string }; text?: string }[] }
    for (const choice of chunk.choices ?? []) {
      texts[choice.index] = (texts[choice.index] ?? '') + (choice.delta?.content ?? choice.text ?? '')
    }
  }
  return texts
}
