/**
 * Python's `str()` of a JSON value, as runpod-python applies it to a handler's error item: a string as
 * is, anything else as its repr (`{'message': '…', 'type': 'worker_error', 'code': None}`).
 */

import type { JsonValue } from './types.ts'

/**
 * @example
 * pythonStr({ message: 'boom', code: null }) // "{'message': 'boom', 'code': None}"
 */
export function pythonStr(value: JsonValue | undefined): string {
  return typeof value === 'string' ? value : pythonRepr(value ?? null)
}

function pythonRepr(value: JsonValue): string {
  if (value === null) return 'None'
  if (value === true) return 'True'
  if (value === false) return 'False'
  if (typeof value === 'number') return String(value)
  if (typeof value === 'string') return stringRepr(value)
  if (Array.isArray(value)) return `[${value.map(pythonRepr).join(', ')}]`
  return `{${Object.entries(value).map(([k, v]) => `${stringRepr(k)}: ${pythonRepr(v)}`).join(', ')}}`
}

/** Python quotes with `'` unless the text holds `'` and no `"`; it escapes the quote, `\`, and control characters. */
function stringRepr(text: string): string {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'"
  let out = quote
  for (const char of text) {
    const code = char.codePointAt(0) ?? 0
    if (char === quote || char === '\\') out += `\\${char}`
    else if (char === '\n') out += '\\n'
    else if (char === '\r') out += '\\r'
    else if (char === '\t') out += '\\t'
    else if (code < 0x20 || (code >= 0x7f && code < 0xa0)) out += `\\x${code.toString(16).padStart(2, '0')}`
    else out += char
  }
  return out + quote
}
