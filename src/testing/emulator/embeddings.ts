/**
 * vLLM's `/v1/embeddings`: deterministic unit vectors (a hash of each input seeds them), `dimensions`
 * (truncate, then renormalize, as matryoshka models do), and `encoding_format` float or base64
 * (little-endian float32 bytes, as OpenAI and vLLM send them).
 */

import * as z from 'zod/mini'
import { ENGLISH } from '../../zod/english.ts'
import { createPrng, hashString } from './generate.ts'
import type { Refusal } from './requests.ts'
import type { JsonObject } from './types.ts'

const tokenIds = z.array(z.number().check(z.int(), z.minimum(0))).check(z.minLength(1))
export const embeddingBodySchema = z.looseObject({
  model: z.nullish(z.string()),
  input: z.optional(z.union([z.string(), z.array(z.string()).check(z.minLength(1)), tokenIds, z.array(tokenIds).check(z.minLength(1))])),
  /** vLLM's chat form (EmbeddingChatRequest): the conversation is embedded as one input. */
  messages: z.optional(z.array(z.looseObject({ role: z.string() })).check(z.minLength(1))),
  encoding_format: z.nullish(z.enum(['float', 'base64'])),
  dimensions: z.nullish(z.number().check(z.int())),
})

export type EmbeddingResult = { ok: true; body: JsonObject } | { ok: false; refusal: Refusal }

/**
 * The embeddings response for a request body, or vLLM's refusal.
 *
 * @example
 * embeddingsResponse({ input: 'hello', dimensions: 8 }, { model: 'm', defaultDimensions: 384 })
 */
export function embeddingsResponse(body: unknown, options: { model: string; defaultDimensions: number; id: string; created: number }): EmbeddingResult {
  const parsed = embeddingBodySchema.safeParse(body, ENGLISH)
  if (!parsed.success) {
    const issue = parsed.error.issues[0]
    const message = issue ? `${issue.path.join('.') || 'body'}: ${issue.message}` : 'Invalid request.'
    return { ok: false, refusal: { status: 400, type: 'BadRequestError', message } }
  }
  const b = parsed.data
  const dimensions = b.dimensions ?? options.defaultDimensions
  if (dimensions < 1 || dimensions > options.defaultDimensions) {
    return {
      ok: false,
      refusal: { status: 400, type: 'BadRequestError', message: `dimensions must be between 1 and ${options.defaultDimensions} for this model.` },
    }
  }
  if (b.input === undefined && b.messages === undefined) {
    return { ok: false, refusal: { status: 400, type: 'BadRequestError', message: 'input: Field required' } }
  }
  const inputs = b.input === undefined ? [messagesInput(b.messages!)] : inputList(b.input)
  const data = inputs.map((input, index): JsonObject => {
    const vector = embed(input.key, options.defaultDimensions, dimensions)
    return { index, object: 'embedding', embedding: b.encoding_format === 'base64' ? toBase64(vector) : [...vector] }
  })
  const promptTokens = inputs.reduce((sum, input) => sum + input.tokens, 0)
  return {
    ok: true,
    body: {
      id: options.id,
      object: 'list',
      created: options.created,
      model: options.model,
      data,
      usage: { prompt_tokens: promptTokens, total_tokens: promptTokens, completion_tokens: 0, prompt_tokens_details: null },
    },
  }
}

/**
 * The deterministic unit vector of an input: `full` pseudo-random components seeded by its hash,
 * truncated to `dimensions` and normalized.
 */
export function embed(key: string, full: number, dimensions: number): Float32Array {
  const next = createPrng(hashString(`embedding:${key}`))
  const values = Array.from({ length: full }, () => next() * 2 - 1).slice(0, dimensions)
  const norm = Math.hypot(...values) || 1
  return Float32Array.from(values, (v) => v / norm)
}

/** A conversation as one input: its key is its JSON, its tokens the words of its text (media parts one each). */
function messagesInput(messages: ReadonlyArray<Record<string, unknown>>): { key: string; tokens: number } {
  let tokens = 0
  for (const { content } of messages) {
    const parts = typeof content === 'string' ? [content] : Array.isArray(content) ? content : []
    for (const part of parts) {
      const text = typeof part === 'string' ? part : typeof part === 'object' && part !== null && typeof (part as { text?: unknown }).text === 'string' ? (part as { text: string }).text : undefined
      tokens += text === undefined ? 1 : text.trim().split(/\s+/).filter(Boolean).length
    }
  }
  return { key: `m:${JSON.stringify(messages)}`, tokens: Math.max(1, tokens) }
}

function inputList(input: NonNullable<z.infer<typeof embeddingBodySchema>['input']>): Array<{ key: string; tokens: number }> {
  const fromText = (text: string) => ({ key: `t:${text}`, tokens: Math.max(1, text.trim() === '' ? 0 : text.trim().split(/\s+/).length) })
  const fromIds = (ids: number[]) => ({ key: `i:${ids.join(',')}`, tokens: ids.length })
  if (typeof input === 'string') return [fromText(input)]
  if (input.every((x) => typeof x === 'string')) return input.map(fromText)
  if (input.every((x) => typeof x === 'number')) return [fromIds(input)]
  return input.filter((x) => Array.isArray(x)).map(fromIds)
}

export function toBase64(vector: Float32Array): string {
  const bytes = new Uint8Array(vector.length * 4)
  const view = new DataView(bytes.buffer)
  vector.forEach((value, i) => view.setFloat32(i * 4, value, true))
  let binary = ''
  for (const byte of bytes) binary += String.fromCharCode(byte)
  return btoa(binary)
}
