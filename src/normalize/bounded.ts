/**
 * Parses a request body at a cost bounded by its first bad item, not by how many bad items it holds.
 *
 * zod reports every item of an array that fails (a union, every branch's), so a body of a million bad
 * content parts or token ids (10 MiB allows that) would cost seconds of CPU and more memory than an
 * isolate has, and a crashed isolate ends every other caller's stream in it. The arrays a request may
 * carry by the hundred thousand (`messages`, their content parts, `prompt` and `input`) are first walked
 * once by hand, with the schema's own rules; at the first item the schema would refuse, only the body
 * cut just after that item is parsed, which gives the same first error as the whole body would.
 */
import type * as z from 'zod/mini'
import { GatewayError } from '../errors/index.ts'
import { isRecord } from '../http/json.ts'
import { MAX_MESSAGES, MAX_TEXT_CHARS, MAX_TOKEN_IDS } from './schemas.ts'
import { parseRequest } from './zod-errors.ts'

/**
 * `parseRequest`, at a bounded cost for bodies full of bad items.
 *
 * @example
 * const req = parseBounded(chatCompletionRequestSchema, body)
 */
export function parseBounded<S extends z.ZodMiniType>(schema: S, body: Record<string, unknown>): z.output<S> {
  const cut = cutAtFirstBadItem(body)
  // Throws the cut body's first error; a cut body the schema takes (were this walk the stricter) falls through.
  if (cut !== undefined) {
    try {
      parseRequest(schema, cut.body)
    } catch (error) {
      throw cut.renumber && error instanceof GatewayError ? renumbered(error, cut.renumber) : error
    }
  }
  return parseRequest(schema, body)
}

interface Cut {
  body: Record<string, unknown>
  /** The cut array holds the first item and the bad one: its index 1 stands for `at` in `field`. */
  renumber?: { field: string; at: number }
}

const isText = (value: unknown): boolean => typeof value === 'string' && value.length <= MAX_TEXT_CHARS
const isShortText = (value: unknown): boolean => typeof value === 'string' && value.length >= 1 && value.length <= 64
const isTokenId = (value: unknown): boolean => Number.isSafeInteger(value) && (value as number) >= 0

function cutParts(parts: unknown[]): unknown[] | undefined {
  if (parts.length > MAX_MESSAGES) return parts.slice(0, MAX_MESSAGES + 1)
  for (let j = 0; j < parts.length; j++) {
    const part = parts[j]
    if (isText(part)) continue
    const ok = isRecord(part) && (part.type === undefined || isShortText(part.type)) && (part.text == null || isText(part.text))
    if (!ok) return parts.slice(0, j + 1)
  }
  return undefined
}

function cutMessages(messages: unknown[]): unknown[] | undefined {
  if (messages.length > MAX_MESSAGES) return messages.slice(0, MAX_MESSAGES + 1)
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i]
    if (!isRecord(message) || !isShortText(message.role)) return messages.slice(0, i + 1)
    const { content } = message
    if (content == null || isText(content)) continue
    if (!Array.isArray(content)) return messages.slice(0, i + 1)
    const parts = cutParts(content)
    if (parts) return [...messages.slice(0, i), { ...message, content: parts }]
  }
  return undefined
}

/** The body cut just after its first bad item (or its first item past a bound), or undefined when it has none. */
export function cutAtFirstBadItem(body: Record<string, unknown>): Cut | undefined {
  if (Array.isArray(body.messages)) {
    const messages = cutMessages(body.messages)
    if (messages) return { body: { ...body, messages } }
  }
  for (const field of ['prompt', 'input'] as const) {
    const value = body[field]
    if (!Array.isArray(value)) continue
    const cut = cutTextOrTokens(value)
    if (cut) return { body: { ...body, [field]: cut.items }, ...(cut.at === undefined ? {} : { renumber: { field, at: cut.at } }) }
  }
  return undefined
}

function renumbered(error: GatewayError, { field, at }: { field: string; at: number }): GatewayError {
  const from = `${field}[1]`
  if (error.param === null || !error.param.startsWith(from)) return error
  const to = `${field}[${at}]`
  return new GatewayError(error.code, error.message.replace(from, to), { param: to + error.param.slice(from.length) })
}

/**
 * string[] | int[] | int[][], in the form its first item takes: the cut items, and for token ids with a
 * bad one past the second, `at` its index (the cut then holds the first id and the bad item alone: the
 * strings branch would fail at each id in between).
 */
function cutTextOrTokens(items: unknown[]): { items: unknown[]; at?: number } | undefined {
  const first = items[0]
  if (typeof first === 'number') {
    if (items.length > MAX_TOKEN_IDS) return { items: items.slice(0, MAX_TOKEN_IDS + 1) }
    const bad = items.findIndex((item) => !isTokenId(item))
    if (bad < 0) return undefined
    return bad > 1 ? { items: [first, items[bad]], at: bad } : { items: items.slice(0, bad + 1) }
  }
  if (items.length > MAX_MESSAGES) return { items: items.slice(0, MAX_MESSAGES + 1) }
  if (Array.isArray(first)) {
    for (let i = 0; i < items.length; i++) {
      const ids = items[i]
      if (!Array.isArray(ids) || ids.length === 0) return { items: items.slice(0, i + 1) }
      if (ids.length > MAX_TOKEN_IDS) return { items: [...items.slice(0, i), ids.slice(0, MAX_TOKEN_IDS + 1)] }
      const bad = ids.findIndex((id) => !isTokenId(id))
      if (bad >= 0) return { items: [...items.slice(0, i), ids.slice(0, bad + 1)] }
    }
    return undefined
  }
  const bad = items.findIndex((item) => !isText(item))
  return bad < 0 ? undefined : { items: items.slice(0, bad + 1) }
}
