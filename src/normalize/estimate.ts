/**
 * What a prompt costs before the model says: the quota reservation is sized from this, and settling
 * from the upstream's usage corrects it. Cheap by design (no tokenizer): ~4 characters a token.
 */
import { invalidRequest } from '../errors/index.ts'
import { MAX_TEXT_CHARS } from './schemas.ts'

/** Characters per token assumed for text. */
export const CHARS_PER_TOKEN = 4

/** Prompt tokens and prompt count of a completion prompt or embedding input (string | string[] | int[] | int[][]). */
export function textOrTokensCost(value: string | string[] | number[] | number[][], param: string): { tokens: number; count: number } {
  if (typeof value === 'string') return { tokens: Math.ceil(value.length / CHARS_PER_TOKEN), count: 1 }
  const first = value[0]
  if (typeof first === 'number') return { tokens: value.length, count: 1 }
  let chars = 0
  let ids = 0
  for (const item of value as (string | number[])[]) {
    if (typeof item === 'string') chars += item.length
    else ids += item.length
  }
  if (chars > MAX_TEXT_CHARS) {
    throw invalidRequest(`The ${param} is too long: more than ${MAX_TEXT_CHARS} characters in total`, { param })
  }
  return { tokens: Math.ceil(chars / CHARS_PER_TOKEN) + ids, count: value.length }
}

/** Prompt tokens of a chat request; refuses messages whose text passes MAX_TEXT_CHARS in total. */
export function chatPromptTokens(body: Record<string, unknown>, messages: readonly Record<string, unknown>[]): number {
  let chars = 0
  let media = 0
  for (const message of messages) {
    for (const [name, value] of Object.entries(message)) {
      if (value === null || value === undefined || name === 'role') continue
      if (typeof value === 'string') chars += value.length
      else if (name === 'content' && Array.isArray(value)) {
        for (const part of value as (string | Record<string, unknown>)[]) {
          if (typeof part === 'string') chars += part.length
          // vLLM's text, input_text and output_text parts (chat_utils.py); a null text is skipped, as vLLM skips it.
          else if (/text/.test(part.type as string)) chars += typeof part.text === 'string' ? part.text.length : 0
          else media++
        }
      } else chars += JSON.stringify(value).length
    }
    // Each string is bounded by the schema; this bounds their sum, which is what the GPU actually sees.
    if (chars > MAX_TEXT_CHARS) {
      throw invalidRequest(`The messages are too long: more than ${MAX_TEXT_CHARS} characters in total`, { param: 'messages' })
    }
  }
  return Math.ceil((chars + jsonFieldChars(body)) / CHARS_PER_TOKEN) + media * MEDIA_PART_TOKENS
}

/**
 * Tokens reserved per non-text content part (image_url, input_audio, audio_url, video_url, *_embeds):
 * a typical image is 500 to 1,500 tokens in current vision models.
 */
export const MEDIA_PART_TOKENS = 1_024

/** Request fields whose JSON becomes prompt text: tool definitions, output schemas, grammars, documents. */
const PROMPT_JSON_FIELDS = ['tools', 'functions', 'response_format', 'structured_outputs', 'guided_json', 'guided_regex', 'guided_choice', 'guided_grammar', 'documents', 'chat_template'] as const

/** Characters of tool definitions and schemas in `body`. */
export function jsonFieldChars(body: Record<string, unknown>): number {
  let chars = 0
  for (const name of PROMPT_JSON_FIELDS) {
    const value = body[name]
    if (value !== null && value !== undefined) chars += typeof value === 'string' ? value.length : JSON.stringify(value).length
  }
  return chars
}
