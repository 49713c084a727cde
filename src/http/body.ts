/**
 * Reads a JSON request body under a byte limit, without trusting `Content-Length` alone: a chunked
 * body is counted as it arrives and reading stops as soon as it passes the limit.
 */
import { GatewayError } from '../errors/index.ts'

export async function readJsonBody(request: Request, maxBytes: number): Promise<unknown> {
  const declared = request.headers.get('content-length')
  if (declared !== null && Number(declared) > maxBytes) throw tooLarge(maxBytes)
  if (!request.body) throw new GatewayError('invalid_json', 'The request body is empty: send a JSON object.')
  const reader = request.body.getReader()
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
  if (total === 0) throw new GatewayError('invalid_json', 'The request body is empty: send a JSON object.')
  const bytes = parts.length === 1 ? parts[0]! : concat(parts, total)
  let text: string
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false }).decode(bytes)
  } catch {
    throw new GatewayError('invalid_json', 'The request body is not valid UTF-8.')
  }
  try {
    return JSON.parse(text)
  } catch {
    throw new GatewayError('invalid_json', 'The request body is not valid JSON.')
  }
}

function concat(parts: Uint8Array[], total: number): Uint8Array {
  const out = new Uint8Array(total)
  let offset = 0
  for (const part of parts) {
    out.set(part, offset)
    offset += part.byteLength
  }
  return out
}

function tooLarge(maxBytes: number): GatewayError {
  return new GatewayError('payload_too_large', `The request body is larger than the ${maxBytes}-byte limit.`)
}
