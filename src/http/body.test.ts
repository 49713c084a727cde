import { describe, expect, it } from 'vitest'
import { GatewayError } from '../errors/index.ts'
import { readJsonBody } from './body.ts'

const MAX = 64
const encoder = new TextEncoder()

/** A POST whose body declares its length, as every HTTP body that is not chunked does. */
function declared(body: string | Uint8Array, length = typeof body === 'string' ? encoder.encode(body).byteLength : body.byteLength): Request {
  return new Request('http://podgate/v1/chat/completions', { method: 'POST', body, headers: { 'content-length': String(length) } })
}

/** A POST whose body arrives in `chunks` with no declared length, as a chunked HTTP body does. */
function chunked(chunks: Uint8Array[]): { request: Request; cancelled: () => boolean; pulled: () => number } {
  let cancelled = false
  let pulled = 0
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      const next = chunks[pulled++]
      if (next === undefined) controller.close()
      else controller.enqueue(next)
    },
    cancel() {
      cancelled = true
    },
  })
  return { request: new Request('http://podgate/v1/chat/completions', { method: 'POST', body }), cancelled: () => cancelled, pulled: () => pulled }
}

async function refusal(read: Promise<unknown>): Promise<{ code: string; message: string }> {
  const error = await read.then(() => undefined, (e: unknown) => e)
  expect(error).toBeInstanceOf(GatewayError)
  const { code, message } = error as GatewayError
  return { code, message }
}

const TOO_LARGE = { code: 'payload_too_large', message: `The request body is larger than the ${MAX}-byte limit.` }
const EMPTY = { code: 'invalid_json', message: 'The request body is empty: send a JSON object.' }

/** A JSON object of exactly `bytes` bytes. */
const objectOf = (bytes: number) => `{"a":"${'x'.repeat(bytes - 8)}"}`

describe('readJsonBody with a declared length', () => {
  it('parses a body of exactly the limit and refuses one byte more without reading it', async () => {
    expect(await readJsonBody(declared(objectOf(MAX)), MAX)).toEqual({ a: 'x'.repeat(MAX - 8) })
    const over = declared(objectOf(MAX + 1))
    expect(await refusal(readJsonBody(over, MAX))).toEqual(TOO_LARGE)
    expect(over.bodyUsed).toBe(false)
  })

  it('refuses a Request built in code that declares less than it holds, once read', async () => {
    expect(await refusal(readJsonBody(declared(objectOf(MAX + 1), 10), MAX))).toEqual(TOO_LARGE)
  })

  it('accepts a byte order mark, refuses invalid UTF-8, invalid JSON and an empty body with their own messages', async () => {
    expect(await readJsonBody(declared(new Uint8Array([0xef, 0xbb, 0xbf, ...encoder.encode('{"ok":true}')])), MAX)).toEqual({ ok: true })
    expect(await refusal(readJsonBody(declared(new Uint8Array([0x7b, 0x22, 0xff, 0x22, 0x7d])), MAX))).toEqual({ code: 'invalid_json', message: 'The request body is not valid UTF-8.' })
    expect(await refusal(readJsonBody(declared('{"a":'), MAX))).toEqual({ code: 'invalid_json', message: 'The request body is not valid JSON.' })
    expect(await refusal(readJsonBody(declared(''), MAX))).toEqual(EMPTY)
  })
})

describe('readJsonBody without a declared length', () => {
  it('joins chunks, a character split between two of them included', async () => {
    const bytes = encoder.encode('{"text":"caf\u00e9 \u2713"}')
    const cut = bytes.indexOf(0xc3) + 1
    const { request } = chunked([bytes.slice(0, cut), bytes.slice(cut)])
    expect(await readJsonBody(request, MAX)).toEqual({ text: 'caf\u00e9 \u2713' })
  })

  it('parses a body of exactly the limit', async () => {
    const body = encoder.encode(objectOf(MAX))
    expect(await readJsonBody(chunked([body.slice(0, 10), body.slice(10)]).request, MAX)).toEqual({ a: 'x'.repeat(MAX - 8) })
  })

  it('stops reading as soon as the body passes the limit and cancels the rest', async () => {
    const piece = encoder.encode('x'.repeat(40))
    const stream = chunked([piece, piece, piece, piece, piece])
    expect(await refusal(readJsonBody(stream.request, MAX))).toEqual(TOO_LARGE)
    expect(stream.pulled()).toBeLessThan(5)
    expect(stream.cancelled()).toBe(true)
  })

  it('refuses invalid UTF-8 and a body with no bytes', async () => {
    expect(await refusal(readJsonBody(chunked([new Uint8Array([0x22, 0xc3]), new Uint8Array([0x22])]).request, MAX))).toEqual({ code: 'invalid_json', message: 'The request body is not valid UTF-8.' })
    expect(await refusal(readJsonBody(chunked([]).request, MAX))).toEqual(EMPTY)
  })

  it('refuses a request with no body at all', async () => {
    expect(await refusal(readJsonBody(new Request('http://podgate/v1/chat/completions', { method: 'POST' }), MAX))).toEqual(EMPTY)
  })
})

describe('integers past 2^53', () => {
  const read = async (text: string) => JSON.stringify(await readJsonBody(declared(text), 1 << 20, true))

  it('are written upstream as the caller wrote them, wherever JSON puts a number', async () => {
    const text = '{"seed":9223372036854775807,"ids":[12345678901234567890,-12345678901234567891],"x":{"y":[[18446744073709551615]]}}'
    expect(await read(text)).toBe(text)
  })

  it('leave safe integers, decimals, exponents and digits in strings as they were', async () => {
    const text = '{"a":9007199254740991,"b":1.2345678901234567,"c":1e21,"s":"x:12345678901234567890,","n":12345678901234567890}'
    expect(JSON.parse(await read(text))).toEqual(JSON.parse(text))
    // The number keeps its digits; the string, its text.
    expect(await read(text)).toContain('"n":12345678901234567890}')
    expect(await read(text)).toContain('"s":"x:12345678901234567890,"')
  })

  it('stay rounded when two different literals round to the same value (which stood where is not known)', async () => {
    const text = '{"a":12345678901234567890,"b":12345678901234567891}'
    expect(JSON.parse(await read(text))).toEqual({ a: 12345678901234567890, b: 12345678901234567891 })
    expect(await read(text)).toBe(JSON.stringify(JSON.parse(text)))
  })
})

describe("podgate's own bodies", () => {
  it('take numbers as JavaScript does: a quota of 16 nines is a number, not kept raw', async () => {
    expect(await readJsonBody(declared('{"tokensPerDay":9999999999999999}'), 1 << 20)).toEqual({ tokensPerDay: 1e16 })
  })
})
