/**
 * vLLM's routes that generate nothing: `/v1/embeddings`, `/v1/messages/count_tokens`, `/v1/rerank`
 * (and `/v2/rerank`), `/v1/score`, `/classify`, `/pooling`, `/tokenize` and `/detokenize`. Each answer
 * is a pure function of the body (scores and labels from a hash of the texts), so the HTTP route and a
 * job agree.
 */

import * as z from 'zod/mini'
import { ENGLISH } from '../../zod/english.ts'
import { embed, embeddingsResponse, toBase64 } from './embeddings.ts'
import { generateCompletion, hashString, MEDIA_PART_TOKENS } from './generate.ts'
import type { ChatMessageText } from './generate.ts'
import { errorDialect } from './openai-format.ts'
import { countTokens } from './messages-format.ts'
import { chatMessageSchema, describeIssue, embeddingTexts, toMessageText } from './requests.ts'
import type { Refusal } from './requests.ts'
import type { JsonObject } from './types.ts'

export type UtilityRoute =
  | '/v1/embeddings'
  | '/v1/messages/count_tokens'
  | '/v1/rerank'
  | '/v2/rerank'
  | '/v2/embed'
  | '/v1/score'
  | '/classify'
  | '/pooling'
  | '/tokenize'
  | '/detokenize'

export interface UtilityOptions {
  /** The `model` the answer names. */
  model: string
  /** A unique suffix for the answer's id (hex on the HTTP route, the job id in a job). */
  idSuffix: string
  /** Unix seconds. */
  created: number
  /** Vector length of `/v1/embeddings` (without `dimensions`) and `/pooling`. */
  embeddingDimensions: number
}

export type UtilityResult = { ok: true; body: JsonObject } | { ok: false; refusal: Refusal }

/** vLLM's `--max-model-len` as `/tokenize` reports it. */
export const MAX_MODEL_LEN = 8192

const texts = z.union([z.string(), z.array(z.string()).check(z.minLength(1))])
const model = z.nullish(z.string())
const rerankSchema = z.looseObject({ model, query: z.string(), documents: z.array(z.string()), top_n: z.nullish(z.number().check(z.int(), z.minimum(0))) })
const cohereEmbedSchema = z.looseObject({
  model,
  texts: z.optional(z.array(z.string())),
  images: z.optional(z.array(z.string())),
  output_dimension: z.nullish(z.number().check(z.int(), z.minimum(1))),
  embedding_types: z.nullish(z.array(z.enum(['float', 'base64']))),
})
const scoreSchema = z.looseObject({ model, text_1: texts, text_2: texts })
const inputSchema = z.looseObject({ model, input: texts })
const tokenizeSchema = z.looseObject({
  model,
  prompt: z.optional(z.string()),
  messages: z.optional(z.array(chatMessageSchema)),
  return_token_strs: z.nullish(z.boolean()),
})
const detokenizeSchema = z.looseObject({ model, tokens: z.array(z.number().check(z.int(), z.minimum(0))) })

type Answer = (body: unknown, options: UtilityOptions) => UtilityResult

const ROUTES: Record<UtilityRoute, Answer> = {
  '/v1/embeddings': (body, o) =>
    embeddingsResponse(body, { model: o.model, defaultDimensions: o.embeddingDimensions, id: `embd-${o.idSuffix}`, created: o.created }),
  '/v1/messages/count_tokens': (body) => {
    const counted = countTokens(body)
    return counted.ok ? answered(counted.body) : badRequest(counted.message)
  },
  '/v1/rerank': rerank,
  // Cohere's v2 API: vLLM answers it with the same handler (worker-vllm v2.24+ reaches it as a job only).
  '/v2/rerank': rerank,
  '/v2/embed': cohereEmbed,
  '/v1/score': (body, o) => parsed(scoreSchema, body, (b) => {
    const left = list(b.text_1)
    const right = list(b.text_2)
    // vLLM's _validate_score_input_lens, in its wording.
    if (left.length > 1 && left.length !== right.length) return badRequest('Input lengths must be either 1:1, 1:N or N:N')
    const pairs = right.map((text, i) => [left.length === 1 ? (left[0] ?? '') : (left[i] ?? ''), text] as const)
    const data = pairs.map(([a, b2], index): JsonObject => ({ index, object: 'score', score: relevance(a, b2) }))
    return answered(listBody('score', o, data, pairs.reduce((sum, [a, b2]) => sum + words(a) + words(b2), 0)))
  }),
  '/classify': (body, o) => parsed(inputSchema, body, (b) => {
    const inputs = list(b.input)
    const data = inputs.map((text, index): JsonObject => {
      const p = unitHash(`classify:${text}`)
      return { index, label: p >= 0.5 ? 'positive' : 'negative', probs: [p, 1 - p], num_classes: 2 }
    })
    return answered(listBody('classify', o, data, inputs.reduce((sum, text) => sum + words(text), 0)))
  }),
  '/pooling': (body, o) => parsed(inputSchema, body, (b) => {
    const inputs = list(b.input)
    // The same vector `/v1/embeddings` gives the text, so the two routes agree.
    const data = inputs.map((text, index): JsonObject => ({ index, object: 'pooling', data: [...embed(`t:${text}`, o.embeddingDimensions, o.embeddingDimensions)] }))
    return answered(listBody('pool', o, data, inputs.reduce((sum, text) => sum + words(text), 0)))
  }),
  '/tokenize': (body) => parsed(tokenizeSchema, body, (b) => {
    if (b.messages === undefined && b.prompt === undefined) return badRequest('Either prompt or messages must be provided.')
    const tokens = b.messages === undefined ? wordTokens(b.prompt ?? '') : chatTokens(b.messages.map(toMessageText))
    return answered({
      count: tokens.length,
      max_model_len: MAX_MODEL_LEN,
      tokens: tokens.map((t) => t.id),
      token_strs: b.return_token_strs ? tokens.map((t) => t.text) : null,
    })
  }),
  '/detokenize': (body) => parsed(detokenizeSchema, body, (b) => answered({
    prompt: b.tokens.length === 0 ? '' : generateCompletion({ prompt: `detokenize:${b.tokens.join(',')}`, tokens: b.tokens.length }).text,
  })),
}

/** `/v1/rerank` (and `/v2/rerank`): documents by a hash-based relevance to the query, best first. */
function rerank(body: unknown, o: UtilityOptions): UtilityResult {
  return parsed(rerankSchema, body, (b) => {
    const scored = b.documents.map((text, index) => ({ index, document: { text }, relevance_score: relevance(b.query, text) }))
    scored.sort((x, y) => y.relevance_score - x.relevance_score)
    const tokens = b.documents.reduce((sum, doc) => sum + words(b.query) + words(doc), 0)
    return answered({
      id: `rerank-${o.idSuffix}`,
      model: o.model,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
      results: b.top_n ? scored.slice(0, b.top_n) : scored,
    })
  })
}

/**
 * `/v2/embed`, vLLM's Cohere v2 embed (PR #37074): the vectors `/v1/embeddings` gives the same texts, by
 * type (`float`, `base64`; the binary types are not emulated), and the count as Cohere reports it:
 * `meta.billed_units`, text and image tokens apart (an image is a media part's tokens).
 */
function cohereEmbed(body: unknown, o: UtilityOptions): UtilityResult {
  return parsed(cohereEmbedSchema, body, (b) => {
    const inputs = [...(b.texts ?? []).map((text) => `t:${text}`), ...(b.images ?? []).map((image) => `image:${image}`)]
    if (inputs.length === 0) return badRequest('One of texts, images or inputs must be provided.')
    const dimensions = Math.min(b.output_dimension ?? o.embeddingDimensions, o.embeddingDimensions)
    const vectors = inputs.map((key) => embed(key, o.embeddingDimensions, dimensions))
    const embeddings: JsonObject = {}
    for (const type of b.embedding_types ?? ['float']) {
      embeddings[type] = type === 'float' ? vectors.map((v) => [...v]) : vectors.map(toBase64)
    }
    const imageTokens = (b.images?.length ?? 0) * MEDIA_PART_TOKENS
    const inputTokens = (b.texts ?? []).reduce((sum, text) => sum + words(text), 0)
    return answered({
      id: `embd-${o.idSuffix}`,
      embeddings,
      ...(b.texts && { texts: b.texts }),
      meta: { api_version: { version: '2' }, billed_units: { input_tokens: inputTokens, image_tokens: imageTokens } },
      response_type: 'embeddings_by_type',
    })
  })
}

export function isUtilityRoute(route: string): route is UtilityRoute {
  return Object.hasOwn(ROUTES, route)
}

/** The answer of a utility route to a body, or vLLM's refusal (in Anthropic's dialect on count_tokens). */
export function answerUtility(route: UtilityRoute, body: unknown, options: UtilityOptions): UtilityResult {
  const result = ROUTES[route](body, options)
  return result.ok ? result : { ok: false, refusal: { ...result.refusal, dialect: errorDialect(route) } }
}

/** The texts of a utility body that may carry directives: `input` of embeddings, every string of the others. */
export function utilityTexts(route: UtilityRoute, body: unknown): string[] {
  if (route === '/v1/embeddings') return embeddingTexts(body)
  const out: string[] = []
  const walk = (value: unknown): void => {
    if (typeof value === 'string') out.push(value)
    else if (Array.isArray(value)) value.forEach(walk)
    else if (typeof value === 'object' && value !== null) Object.values(value).forEach(walk)
  }
  walk(body)
  return out
}

/**
 * Tokens of a conversation as the emulator counts them (generate.ts `countPromptTokens`): per message a
 * start marker, its role, a placeholder per media token, its words and an end marker.
 */
function chatTokens(messages: readonly ChatMessageText[]): Array<{ id: number; text: string }> {
  const media = (m: ChatMessageText) => Array.from({ length: (m.media ?? 0) * MEDIA_PART_TOKENS }, () => ({ id: 3, text: '<|media|>' }))
  return messages.flatMap((m) => [{ id: 1, text: '<|start|>' }, token(m.role), ...media(m), ...wordTokens(m.content), { id: 2, text: '<|end|>' }])
}

function wordTokens(text: string): Array<{ id: number; text: string }> {
  const trimmed = text.trim()
  return trimmed === '' ? [] : trimmed.split(/\s+/).map(token)
}

/** A word's token id: stable, above the few special ids. */
function token(text: string): { id: number; text: string } {
  return { id: 100 + (hashString(`token:${text}`) % 100_000), text }
}

/** A deterministic score in (0, 1) of a pair of texts; rerank and score share it. */
function relevance(query: string, document: string): number {
  return unitHash(`score:${query}\u0000${document}`)
}

function unitHash(key: string): number {
  return (hashString(key) + 0.5) / 2 ** 32
}

function words(text: string): number {
  return Math.max(1, wordTokens(text).length)
}

function list(value: string | string[]): string[] {
  return typeof value === 'string' ? [value] : value
}

function listBody(prefix: string, o: UtilityOptions, data: JsonObject[], tokens: number): JsonObject {
  return {
    id: `${prefix}-${o.idSuffix}`,
    object: 'list',
    created: o.created,
    model: o.model,
    data,
    usage: { prompt_tokens: tokens, total_tokens: tokens, completion_tokens: 0 },
  }
}

function parsed<S extends z.ZodMiniType>(schema: S, body: unknown, answer: (b: z.infer<S>) => UtilityResult): UtilityResult {
  const result = schema.safeParse(body, ENGLISH)
  return result.success ? answer(result.data) : badRequest(describeIssue(result.error))
}

function answered(body: JsonObject): UtilityResult {
  return { ok: true, body }
}

function badRequest(message: string): UtilityResult {
  return { ok: false, refusal: { status: 400, type: 'BadRequestError', message } }
}
