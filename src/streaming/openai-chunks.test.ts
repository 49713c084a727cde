import { describe, expect, it } from 'vitest'
import { DONE, encodeSSEData, sseErrorEvent } from './openai-chunks.ts'

const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes)

describe('SSE encoding', () => {
  it('frames JSON as one data event, UTF-8 encoded', () => {
    expect(text(encodeSSEData('{"a":"ü🎉"}'))).toBe('data: {"a":"ü🎉"}\n\n')
    expect(text(DONE)).toBe('data: [DONE]\n\n')
  })

  it('writes OpenAI in-stream errors', () => {
    const bytes = sseErrorEvent({ message: 'The model worker failed: "boom"\n', type: 'api_error', code: 'upstream_error' })
    const body = text(bytes)
    expect(body.startsWith('data: ')).toBe(true)
    expect(body.endsWith('\n\n')).toBe(true)
    expect(body.slice(6, -2)).not.toContain('\n')
    expect(JSON.parse(body.slice(6))).toEqual({
      error: { message: 'The model worker failed: "boom"\n', type: 'api_error', param: null, code: 'upstream_error' },
    })
  })
})
