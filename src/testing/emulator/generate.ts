/**
 * Deterministic "model" of the emulator: the generated text is a pure function of the prompt, the seed,
 * the choice index and the length limits, so one request yields the same answer in every output shape
 * (classic batches, current SSE cuts, the OpenAI route), streamed or not.
 */

export interface ChatMessageText {
  role: string
  /** The message's text: string content, or the text parts of array content joined. */
  content: string
  /** Its media parts (images, audio, video), which the prompt counts MEDIA_PART_TOKENS each. */
  media?: number
}

/**
 * Prompt tokens of one image, audio or video part: a fixed number, where a vision model spends
 * hundreds, by the media's size. The text the answer is made from does not see the media.
 */
export const MEDIA_PART_TOKENS = 256

/** Chat's media part types (vLLM's chat_utils.py). */
export const CHAT_MEDIA_TYPES: readonly string[] = ['image_url', 'input_image', 'image_embeds', 'image_pil', 'audio_embeds', 'audio_url', 'input_audio', 'video_url']
/** The keys vLLM's chat types a part without `type` by (chat_utils.py); a typeless part with none is refused. */
export const TYPED_BY_KEY: readonly string[] = ['image_url', 'image_pil', 'image_embeds', 'audio_embeds', 'prompt_embeds', 'audio_url', 'input_audio', 'video_url', 'tool_reference']
/** Media in chat, Responses (`input_image`) and Anthropic's Messages (`image` blocks). */
const MEDIA_TYPES: ReadonlySet<string> = new Set([...CHAT_MEDIA_TYPES, 'image'])

/** The type of a part: its `type`, or for a chat part without one, its first key vLLM types parts by. */
export function partType(part: { type?: string }): string | undefined {
  return part.type ?? Object.keys(part).find((key) => TYPED_BY_KEY.includes(key))
}

/** How many of `parts` carry media. */
function mediaParts(parts: ReadonlyArray<string | { type?: string }> | string | null | undefined): number {
  if (!Array.isArray(parts)) return 0
  return parts.filter((part) => typeof part !== 'string' && MEDIA_TYPES.has(partType(part) ?? '')).length
}

/** A message as the emulator reads it: its role, its text, and the media parts among `parts`. */
export function messageText(role: string, content: string, parts?: Parameters<typeof mediaParts>[0]): ChatMessageText {
  const media = mediaParts(parts)
  return media > 0 ? { role, content, media } : { role, content }
}

export interface GenerateOptions {
  /** Chat messages; they take precedence over `prompt`, as in worker-vllm. */
  messages?: readonly ChatMessageText[]
  prompt?: string
  seed?: number
  /** Index of the choice when `n > 1`: mixed into the seed so choices differ. Default 0. */
  choiceIndex?: number
  /** Cap on generated tokens; reaching it ends with finish_reason `length`. Default: no cap. */
  maxTokens?: number
  /** Generation ends before the first occurrence of any of these (finish_reason `stop`). */
  stop?: readonly string[]
  /** Exact number of tokens to generate (the `tokens` directive), still capped by `maxTokens`. */
  tokens?: number
}

export interface GeneratedText {
  /** Text deltas, one per token; their concatenation is `text`. The last may be cut short by a stop string. */
  tokens: string[]
  text: string
  finishReason: 'stop' | 'length'
  /** The stop string that ended the text, if one did (vLLM's `stop_reason`). */
  stopString?: string
}

// Mostly ASCII, with a few multibyte words so byte-level cuts and UTF-8 handling get exercised.
const VOCABULARY = [
  'the', 'a', 'model', 'token', 'stream', 'gateway', 'edge', 'worker', 'queue', 'job',
  'answer', 'question', 'light', 'river', 'stone', 'cloud', 'signal', 'quiet', 'bright', 'swift',
  'green', 'blue', 'amber', 'silver', 'north', 'south', 'east', 'west', 'over', 'under',
  'through', 'between', 'before', 'after', 'while', 'because', 'and', 'or', 'but', 'so',
  'is', 'was', 'will', 'can', 'may', 'should', 'runs', 'waits', 'sends', 'reads',
  'writes', 'returns', 'starts', 'ends', 'grows', 'moves', 'holds', 'keeps', 'finds', 'makes',
  'small', 'large', 'early', 'late', 'first', 'last', 'next', 'every', 'some', 'many',
  'time', 'place', 'system', 'request', 'response', 'number', 'value', 'field', 'line', 'word',
  'café', 'naïve', 'façade', 'jalapeño', 'über', '日本', '東京', 'Ωmega', '🙂', '🚀',
  'data', 'event', 'chunk', 'byte', 'cache', 'route', 'quota', 'limit', 'key', 'done',
]

/**
 * Generates the deterministic completion of a prompt or a conversation.
 *
 * @example
 * const { text, finishReason } = generateCompletion({ messages: [{ role: 'user', content: 'Hi' }], maxTokens: 16 })
 */
export function generateCompletion(options: GenerateOptions): GeneratedText {
  const next = createPrng(hashString(generationKey(options)))
  // vLLM always produces at least one token.
  const natural = Math.max(1, Math.floor(options.tokens ?? 8 + next() * 33))
  const cap = options.maxTokens === undefined ? natural : Math.max(1, Math.floor(options.maxTokens))
  const stops = (options.stop ?? []).filter((s) => s.length > 0)

  const tokens: string[] = []
  let text = ''
  for (let i = 0; i < Math.min(natural, cap); i++) {
    const word = VOCABULARY[Math.floor(next() * VOCABULARY.length)] ?? 'token'
    const token = i === 0 ? word : ` ${word}`
    const found = firstStop(text + token, stops, text.length)
    if (found) return stopAt([...tokens, token], found)
    tokens.push(token)
    text += token
  }
  return { tokens, text, finishReason: natural > cap ? 'length' : 'stop' }
}

/**
 * Ends the text right before a stop string. Like vLLM, the token that completes the stop string still
 * counts; every delta is clipped so the deltas keep adding up to the text.
 */
function stopAt(tokens: readonly string[], found: { index: number; stop: string }): GeneratedText {
  const cut = found.index
  const full = tokens.join('')
  let offset = 0
  const clipped = tokens.map((token) => {
    const start = offset
    offset += token.length
    return full.slice(Math.min(start, cut), Math.min(offset, cut))
  })
  return { tokens: clipped, text: full.slice(0, cut), finishReason: 'stop', stopString: found.stop }
}

/**
 * The deterministic prompt token count: whitespace-separated words, plus 3 per chat message
 * (role and template markers) and MEDIA_PART_TOKENS per media part.
 */
export function countPromptTokens(input: { messages?: readonly ChatMessageText[]; prompt?: string }): number {
  if (input.messages) {
    return input.messages.reduce((sum, m) => sum + countWords(m.content) + 3 + (m.media ?? 0) * MEDIA_PART_TOKENS, 0)
  }
  return Math.max(1, countWords(input.prompt ?? ''))
}

/** FNV-1a over the UTF-8 bytes: a stable 32-bit hash for seeding. */
export function hashString(value: string): number {
  let hash = 0x811c9dc5
  for (const byte of new TextEncoder().encode(value)) {
    hash ^= byte
    hash = Math.imul(hash, 0x01000193) >>> 0
  }
  return hash
}

/** 32 hex digits derived from `key`: ids as vLLM writes them (`resp_<hex>`), stable for one key. */
export function hexId(key: string): string {
  return [0, 1, 2, 3].map((part) => hashString(`${key}:${part}`).toString(16).padStart(8, '0')).join('')
}

/** mulberry32: a tiny seeded PRNG returning floats in [0, 1). */
export function createPrng(seed: number): () => number {
  let state = seed >>> 0
  return function next() {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

function generationKey(options: GenerateOptions): string {
  // Only role and text go in, so extra message fields a gateway may add or drop do not change the answer.
  const source = options.messages
    ? { m: options.messages.map((m) => [m.role, m.content]) }
    : { p: options.prompt ?? '' }
  return JSON.stringify({ ...source, s: options.seed ?? null, i: options.choiceIndex ?? 0 })
}

/** The earliest stop string in `text` and where it starts, if one ends at or after `from`. */
function firstStop(text: string, stops: readonly string[], from: number): { index: number; stop: string } | undefined {
  let best: { index: number; stop: string } | undefined
  for (const stop of stops) {
    // Only occurrences that end inside the newest token are new: earlier ones were checked already.
    const index = text.indexOf(stop, Math.max(0, from - stop.length + 1))
    if (index !== -1 && (best === undefined || index < best.index)) best = { index, stop }
  }
  return best
}

function countWords(text: string): number {
  const trimmed = text.trim()
  return trimmed === '' ? 0 : trimmed.split(/\s+/).length
}
