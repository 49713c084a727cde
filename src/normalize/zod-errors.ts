/**
 * Turns a zod validation failure into one OpenAI-style `invalid_request` error: the FIRST issue only,
 * `param` in OpenAI's path style (`messages[0].content`), and a message a person can act on.
 *
 * zod's default messages are replaced by a sentinel at parse time (a per-parse error map ranks
 * below a schema's own `error`), so the mapper can tell "zod's default, format it here" from "the schema
 * wrote this message itself, use it as is".
 */
import type * as z from 'zod/mini'
import { clip, GatewayError, invalidRequest } from '../errors/index.ts'
import { isRecord } from '../http/json.ts'

type Issue = z.core.$ZodIssue
type PathKey = PropertyKey

const DEFAULT_MESSAGE = '\u0000podgate:zod-default'
/** Quoted caller input is cut to this many characters: an error must never echo a huge value. */
const MAX_QUOTED_CHARS = 100

/** Parse options shared by every request parse; one object for the module's lifetime. */
const PARSE_CONTEXT = { error: () => DEFAULT_MESSAGE, reportInput: true } as const

/**
 * Parses `body` with `schema`, or throws the `invalid_request` GatewayError for its first issue.
 *
 * @example
 * const request = parseRequest(chatCompletionRequestSchema, body)
 */
export function parseRequest<S extends z.ZodMiniType>(schema: S, body: unknown): z.output<S> {
  assertJsonObject(body)
  const result = schema.safeParse(body, PARSE_CONTEXT)
  if (result.success) return result.data
  throw invalidRequestFromIssues(result.error.issues)
}

/** A request body must be a JSON object; arrays, strings and null are refused before any schema work. */
export function assertJsonObject(body: unknown): asserts body is Record<string, unknown> {
  if (!isRecord(body)) {
    throw invalidRequest('The request body must be a JSON object')
  }
  // Bodies are copied and forwarded member by member: a member that would become a prototype is refused.
  if (Object.hasOwn(body, '__proto__')) {
    throw invalidRequest('Unrecognized request argument supplied: __proto__', { param: '__proto__' })
  }
}

/**
 * The `invalid_request` error for the first of `issues` (zod lists them in schema field order). `option`
 * words it for the gateway's options ("Missing required option") instead of a request's fields, in
 * OpenAI's words ("Missing required parameter", "Unrecognized request argument").
 */
export function invalidRequestFromIssues(issues: readonly Issue[], option = false): GatewayError {
  const first = issues[0]
  if (!first) return invalidRequest('The request is invalid')
  const { issue, path } = leafOf(first, [])
  const param = formatParam(path)
  if (issue.code === 'unrecognized_keys') {
    const key = truncate(issue.keys[0] ?? '')
    const message = path.length === 0
      ? `Unrecognized ${option ? 'option' : 'request argument'} supplied: ${key}`
      : `Unrecognized ${option ? 'option' : 'argument'} supplied in '${param}': ${key}`
    return invalidRequest(message, { param: param ? `${param}.${key}` : key })
  }
  return invalidRequest(messageFor(issue, param, option ? 'option' : 'parameter'), param ? { param } : {})
}

function article(expected: string): string {
  if (expected === 'int') return 'an integer'
  return /^[aeiou]/.test(expected) ? `an ${expected}` : `a ${expected}`
}

function messageFor(issue: Issue, path: string, noun: string): string {
  const custom = issue.message !== DEFAULT_MESSAGE
  // A schema's own words say what is wrong with the field (`must be ...`): the field is named before them.
  if (custom && issue.code !== 'invalid_union') return path ? `'${path}' ${issue.message}` : `Invalid request: ${issue.message}`
  const param = path || 'body'
  const input = issue.input
  // JSON has no `undefined`, and issues carry their input (`reportInput`): undefined means absent.
  const typeLike = issue.code === 'invalid_type' || issue.code === 'invalid_union' || issue.code === 'invalid_value'
  if (typeLike && input === undefined) return `Missing required ${noun}: '${param}'`
  switch (issue.code) {
    case 'invalid_type':
      // A number refused as a number (`1.5` for an integer, `1e400` parsed as Infinity): show the value.
      return `Invalid type for '${param}': expected ${article(issue.expected)}, got ${
        typeof input === 'number' && (issue.expected === 'int' || issue.expected === 'number') ? input : typeOf(input)
      }`
    case 'invalid_union': {
      const expected = custom
        ? issue.message
        : `expected ${issue.errors.map((branch) => expectedOf(branch[0])).join(' or ')}`
      return `Invalid type for '${param}': ${expected}, got ${typeOf(input)}`
    }
    case 'too_big':
      return `'${param}' must ${bound(issue.origin, 'at most', 'less than', issue.maximum, issue.inclusive)}, got ${measure(issue.origin, input)}`
    case 'too_small':
      return `'${param}' must ${bound(issue.origin, 'at least', 'greater than', issue.minimum, issue.inclusive)}, got ${measure(issue.origin, input)}`
    case 'invalid_value':
      return `Invalid value for '${param}': expected ${issue.values.map(show).join(', ')}, got ${show(input)}`
    default:
      return `Invalid value for '${param}'`
  }
}

/**
 * Parses with podgate's wording of zod's issues, without throwing: for the gateway's own options, whose
 * mistakes are reported several at a time.
 */
export function safeParseWorded<S extends z.ZodMiniType>(schema: S, input: unknown): z.core.util.SafeParseResult<z.output<S>> {
  return schema.safeParse(input, PARSE_CONTEXT)
}

/** A value for a message: short scalars verbatim, strings quoted and truncated, containers by type. */
function show(value: unknown): string {
  if (typeof value === 'string') return `'${truncate(value)}'`
  if (typeof value === 'number' || typeof value === 'boolean' || value === null) return String(value)
  return typeOf(value)
}

/** `'temperature' must be at most 2` / `'stop' must have at most 16 items` / `... be at least 1 character long`. */
function bound(origin: string, inclusiveWord: string, exclusiveWord: string, limit: number | bigint, inclusive = true): string {
  const word = inclusive ? inclusiveWord : exclusiveWord
  if (origin === 'string') return `be ${word} ${plural(limit, 'character')} long`
  if (origin === 'array') return `have ${word} ${plural(limit, 'item')}`
  return `be ${word} ${limit}`
}

/** What the caller sent, in the unit of the bound (a count for strings and arrays, never their content). */
function measure(origin: string, input: unknown): string {
  if (origin === 'string' && typeof input === 'string') return plural(input.length, 'character')
  if (origin === 'array' && Array.isArray(input)) return plural(input.length, 'item')
  return show(input)
}

function expectedOf(issue: Issue | undefined): string {
  return issue?.code === 'invalid_type' ? article(issue.expected) : 'another shape'
}

/**
 * A union that failed in every branch reports all branches; the caller is best served by the branch that
 * got furthest into the value: the bad `type` of one content part rather than "expected a string", the
 * one number among strings rather than "expected a number" at the first string. A type error at an
 * array's first item says only that the branch is of another kind, so it ranks below a size or format
 * problem of the branch whose kind matched ("at most 100 items"); a size problem ranks above a type
 * error as deep as it.
 */
function leafOf(issue: Issue, prefix: readonly PathKey[]): { issue: Issue; path: PathKey[] } {
  const path = [...prefix, ...issue.path]
  if (issue.code === 'invalid_union') {
    let best: Issue | undefined
    let bestRank = 0
    for (const branch of issue.errors) {
      const head = branch[0]
      if (!head) continue
      // A field the branch misses ranks below one present with a wrong type: the caller sent the latter.
      const rank = head.code !== 'invalid_type' ? head.path.length * 2 + 1 : head.path.at(-1) === 0 ? 0.5 : head.path.length * 2 - (head.input === undefined ? 0.25 : 0)
      if (rank > bestRank) {
        best = head
        bestRank = rank
      }
    }
    if (best) return leafOf(best, path)
  }
  return { issue, path }
}

function typeOf(value: unknown): string {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'an array'
  return article(typeof value)
}

function truncate(text: string): string {
  return clip(text, MAX_QUOTED_CHARS)
}

function plural(count: number | bigint, unit: string): string {
  return `${count} ${unit}${count === 1 ? '' : 's'}`
}

/** `['messages', 0, 'content']` -> `messages[0].content`. */
function formatParam(path: readonly PathKey[]): string {
  let out = ''
  for (const key of path) out += typeof key === 'number' ? `[${key}]` : out ? `.${truncate(String(key))}` : truncate(String(key))
  return out
}
