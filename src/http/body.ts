/**
 * Reads a JSON request body under a byte limit, without trusting `Content-Length` alone.
 *
 * A body that declares its length within the limit is read whole by the runtime, in one call: over
 * HTTP the runtime frames a body by that length (and drops the header of a chunked one), so it cannot
 * be longer. A body without one (chunked, or a Request built in code) is counted as it arrives and
 * reading stops as soon as it passes the limit. Either way the length read is checked again, so a
 * Request built in code that declares less than it holds is refused too, once read.
 */
import { GatewayError } from '../errors/index.ts'

/** An integer of 16 digits or more where JSON puts a number: after `:`, `,` or `[`, before `,`, `}` or `]`. */
const WIDE_INTEGER = /[:,[]\s*(-?\d{16,})(?=\s*[,}\]])/g

// One decoder for every body: `decode` without `stream` keeps no state between calls.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false })

const MAX_DEPTH = 1000

/**
 * `wide`: integers past 2^53 keep the caller's digits (`keepWideIntegers`), for bodies that go upstream;
 * podgate's own bodies (admin, tokens) take numbers as JavaScript does. `absent`: the value of an absent
 * or empty body (one whose fields are all optional); without it, such a body is refused.
 */
export async function readJsonBody(request: Request, maxBytes: number, wide = false, absent?: object): Promise<unknown> {
  const declared = request.headers.get('content-length')
  if (declared !== null && Number(declared) > maxBytes) throw tooLarge(maxBytes)
  if (!request.body) return empty(absent)
  // The runtime's own read costs a fraction of a JavaScript read loop (one call, no reader, no chunk objects).
  const bytes = declared !== null && /^\d+$/.test(declared) ? new Uint8Array(await request.arrayBuffer()) : await readCounted(request.body, maxBytes)
  if (bytes.byteLength > maxBytes) throw tooLarge(maxBytes)
  if (bytes.byteLength === 0) return empty(absent)
  let text: string
  try {
    text = utf8.decode(bytes)
  } catch {
    throw new GatewayError('invalid_json', 'The request body is not valid UTF-8.')
  }
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    notJson()
  }
  return wide ? keepWideIntegers(value, text) : value
}

function tooLarge(maxBytes: number): GatewayError {
  return new GatewayError('payload_too_large', `The request body is larger than the ${maxBytes}-byte limit.`)
}

/**
 * An integer past 2^53 (a 64-bit `seed`) parsed as a number would go upstream rounded: each is put back
 * as the caller wrote it, a raw JSON value that `JSON.stringify` writes as is. The text is scanned for
 * them, and only a body that has some is walked (a reviver would slow every value's parse, ~28x on a
 * body of token ids). A rounded value that two different literals share stays rounded (which stood
 * where is not known); so does one nested deeper than MAX_DEPTH.
 */
function keepWideIntegers(value: unknown, text: string): unknown {
  const literals = new Map<number, string>()
  for (const [, digits] of text.matchAll(WIDE_INTEGER)) {
    const n = Number(digits)
    const seen = literals.get(n)
    if (!Number.isSafeInteger(n)) literals.set(n, seen === undefined || seen === digits ? digits! : '')
  }
  const put = (node: unknown, depth: number): unknown => {
    if (typeof node === 'number') return literals.get(node) ? rawJSON(literals.get(node)!) : node
    if (node && typeof node === 'object' && depth < MAX_DEPTH) for (const key in node) (node as Record<string, unknown>)[key] = put((node as Record<string, unknown>)[key], depth + 1)
    return node
  }
  return literals.size ? put(value, 0) : value
}

/** `JSON.rawJSON` (ES2026), which TypeScript's lib does not declare yet; `isRawJSON` tells one apart. */
export const { rawJSON, isRawJSON } = JSON as unknown as { rawJSON(text: string): object; isRawJSON(value: unknown): value is { rawJSON: string } }

/** Reads `body` whole, counting as it comes; past `maxBytes` it stops reading and refuses. */
async function readCounted(body: ReadableStream<Uint8Array>, maxBytes: number): Promise<Uint8Array> {
  const reader = body.getReader()
  const parts: Uint8Array[] = []
  let total = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    total += value.byteLength
    if (total > maxBytes) {
      await reader.cancel().catch(() => {})
      throw tooLarge(maxBytes)
    }
    parts.push(value)
  }
  return parts.length === 1 ? parts[0]! : concatBytes(parts, total)
}

/** `parts` in one array of `total` bytes (their sum). */
export function concatBytes(parts: Uint8Array[], total: number): Uint8Array {
  const out = new Uint8Array(total)
  let offset = 0
  for (const part of parts) {
    out.set(part, offset)
    offset += part.byteLength
  }
  return out
}

/** Refuses a body that is not JSON. */
export function notJson(): never {
  throw new GatewayError('invalid_json', 'The request body is not valid JSON.')
}

function empty(absent: object | undefined): object {
  if (absent) return absent
  throw new GatewayError('invalid_json', 'The request body is empty: send a JSON object.')
}
