/**
 * Deterministic instances of JSON Schemas and simple regular expressions: what the emulator "decodes"
 * under guided decoding (response_format, structured_outputs, guided_json) and as tool-call arguments.
 * Covers the keywords that zod's and pydantic's JSON Schemas use; anything else yields a plain string.
 */

import type { JsonValue } from './types.ts'

type Schema = Record<string, unknown>

export interface InstanceOptions {
  /** Words to draw string values from, in order (cycled). */
  words: readonly string[]
}

const MAX_DEPTH = 8

/**
 * A value that validates against `schema`: every declared property (required or not), the first
 * `enum` value, `const`, the first non-null branch of `anyOf` / `oneOf`, `$ref` into `$defs` /
 * `definitions`, and bounds on lengths, item counts and numbers.
 *
 * @example
 * schemaInstance({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, { words: ['Paris'] })
 * // { city: 'Paris' }
 */
export function schemaInstance(schema: unknown, options: InstanceOptions): JsonValue {
  let word = 0
  const nextWord = () => options.words[word++ % Math.max(1, options.words.length)] ?? 'value'
  const root = isSchema(schema) ? schema : {}

  const build = (node: unknown, depth: number): JsonValue => {
    if (!isSchema(node)) return nextWord()
    const s = resolve(root, node)
    if ('const' in s) return s.const as JsonValue
    if (Array.isArray(s.enum) && s.enum.length > 0) return s.enum[0] as JsonValue
    const branches = (Array.isArray(s.anyOf) ? s.anyOf : Array.isArray(s.oneOf) ? s.oneOf : undefined) as unknown[] | undefined
    if (branches && branches.length > 0) {
      const branch = branches.find((b) => !(isSchema(b) && b.type === 'null')) ?? branches[0]
      return build(branch, depth)
    }
    if (Array.isArray(s.allOf)) return build(Object.assign({}, ...s.allOf.map((part) => (isSchema(part) ? resolve(root, part) : {}))), depth)

    switch (typeOf(s)) {
      case 'object': {
        const out: Record<string, JsonValue> = {}
        if (depth >= MAX_DEPTH) return out
        const properties = isSchema(s.properties) ? s.properties : {}
        for (const [key, value] of Object.entries(properties)) out[key] = build(value, depth + 1)
        for (const key of Array.isArray(s.required) ? s.required : []) {
          if (typeof key === 'string' && !(key in out)) out[key] = nextWord()
        }
        return out
      }
      case 'array': {
        const min = count(s.minItems) ?? 0
        const max = count(s.maxItems) ?? Infinity
        const length = Math.min(max, Math.max(min, 2))
        if (depth >= MAX_DEPTH) return []
        const prefix = Array.isArray(s.prefixItems) ? s.prefixItems : []
        return Array.from({ length }, (_, i) => build(prefix[i] ?? s.items, depth + 1))
      }
      case 'integer':
        return integerIn(s)
      case 'number':
        return numberIn(s)
      case 'boolean':
        return true
      case 'null':
        return null
      default:
        return stringFor(s, nextWord)
    }
  }
  return build(root, 0)
}

/** A string that a simple regex matches: literals, classes, `\d \w \s .`, groups with `|` (first branch), quantifiers. */
export function regexInstance(pattern: string): string {
  let i = 0
  const atom = (): string => {
    const ch = pattern[i++] ?? ''
    if (ch === '\\') {
      const escaped = pattern[i++] ?? ''
      return ({ d: '7', w: 'a', s: ' ', D: 'x', W: '-', S: 'x' } as Record<string, string>)[escaped] ?? escaped
    }
    if (ch === '.') return 'a'
    if (ch === '[') {
      const end = pattern.indexOf(']', i + 1)
      const body = pattern.slice(i, end === -1 ? undefined : end)
      i = end === -1 ? pattern.length : end + 1
      if (body.startsWith('^')) return body.includes('a') ? 'q' : 'a'
      const first = body.startsWith('\\') ? body.slice(0, 2) : body[0] ?? 'a'
      return first.startsWith('\\') ? regexInstance(first) : first
    }
    if (ch === '(') {
      if (pattern.startsWith('?:', i)) i += 2
      const start = i
      let depth = 1
      for (; i < pattern.length && depth > 0; i++) {
        if (pattern[i] === '\\') i++
        else if (pattern[i] === '(') depth++
        else if (pattern[i] === ')') depth--
      }
      return regexInstance(firstBranch(pattern.slice(start, i - 1)))
    }
    return ch
  }
  const seq = firstBranch(pattern)
  pattern = seq.replace(/^\^/, '').replace(/(?<!\\)\$$/, '')
  let out = ''
  while (i < pattern.length) {
    const piece = atom()
    const quantifier = /^(\*|\+|\?|\{(\d+)(?:,(\d*))?\})\??/.exec(pattern.slice(i))
    let times = 1
    if (quantifier) {
      i += quantifier[0].length
      if (quantifier[1] === '*' || quantifier[1] === '?') times = 0
      else if (quantifier[2] !== undefined) times = Number(quantifier[2])
    }
    out += piece.repeat(times)
  }
  return out
}

/** The first alternative of a top-level `|`. */
function firstBranch(pattern: string): string {
  let depth = 0
  for (let i = 0; i < pattern.length; i++) {
    const ch = pattern[i]
    if (ch === '\\') i++
    else if (ch === '(' || ch === '[') depth++
    else if (ch === ')' || ch === ']') depth--
    else if (ch === '|' && depth === 0) return pattern.slice(0, i)
  }
  return pattern
}

function stringFor(s: Schema, nextWord: () => string): string {
  if (typeof s.pattern === 'string') return regexInstance(s.pattern)
  switch (s.format) {
    case 'date-time':
      return '2026-01-01T00:00:00Z'
    case 'date':
      return '2026-01-01'
    case 'time':
      return '12:00:00'
    case 'email':
      return 'user@example.com'
    case 'uri':
    case 'url':
      return 'https://example.com/'
    case 'uuid':
      return '00000000-0000-4000-8000-000000000000'
  }
  const min = count(s.minLength) ?? 0
  const max = count(s.maxLength) ?? Infinity
  let text = nextWord()
  while ([...text].length < min) text += ` ${nextWord()}`
  return [...text].slice(0, max).join('')
}

function integerIn(s: Schema): number {
  const low = bound(s.minimum, s.exclusiveMinimum, 1)
  const high = bound(s.maximum, s.exclusiveMaximum, -1)
  // 42 where the bounds allow it: zod's `.int()` alone bounds an integer by ±(2^53 - 1), which a
  // generated answer should not show.
  let value = 42
  if (low !== undefined) value = Math.max(value, Math.ceil(low))
  if (high !== undefined) value = Math.min(value, Math.floor(high))
  const step = typeof s.multipleOf === 'number' && s.multipleOf > 0 ? s.multipleOf : undefined
  if (step !== undefined) value = Math.ceil(value / step) * step
  return value
}

function numberIn(s: Schema): number {
  // The midpoint lies strictly inside any non-empty interval, exclusive bounds included.
  const low = typeof s.exclusiveMinimum === 'number' ? s.exclusiveMinimum : typeof s.minimum === 'number' ? s.minimum : undefined
  const high = typeof s.exclusiveMaximum === 'number' ? s.exclusiveMaximum : typeof s.maximum === 'number' ? s.maximum : undefined
  if (low !== undefined && high !== undefined) return (low + high) / 2
  if (low !== undefined) return low + 0.5
  if (high !== undefined) return Math.min(high - 0.5, 42.5)
  return 42.5
}

/** The tightest bound of `inclusive` / `exclusive` (nudged by `direction` when exclusive). */
function bound(inclusive: unknown, exclusive: unknown, direction: 1 | -1): number | undefined {
  if (typeof exclusive === 'number') return exclusive + direction
  return typeof inclusive === 'number' ? inclusive : undefined
}

function typeOf(s: Schema): string | undefined {
  if (Array.isArray(s.type)) return s.type.find((t) => t !== 'null') ?? s.type[0]
  if (typeof s.type === 'string') return s.type
  if (isSchema(s.properties)) return 'object'
  if ('items' in s) return 'array'
  return undefined
}

function resolve(root: Schema, node: Schema): Schema {
  let current = node
  for (let hops = 0; typeof current.$ref === 'string' && hops < MAX_DEPTH; hops++) {
    const match = /^#\/(\$defs|definitions)\/(.+)$/.exec(current.$ref)
    const defs = match ? root[match[1] ?? ''] : undefined
    const target = match && isSchema(defs) ? defs[decodeURIComponent(match[2] ?? '')] : current.$ref === '#' ? root : undefined
    if (!isSchema(target)) return {}
    const { $ref: _ref, ...rest } = current
    current = { ...target, ...rest }
  }
  return current
}

function isSchema(value: unknown): value is Schema {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

function count(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : undefined
}
