import { describe, it, expect } from 'vitest'
import { GatewayError } from '../errors/index.ts'
import { modelSchema } from '../config/schema.ts'
import { normalizeChatRequest } from './chat.ts'
import { normalizeCompletionRequest } from './completion.ts'
import { SAMPLING_KEYS, toNativeInput, toOpenAIBody } from './upstream-bodies.ts'
import type { NormalizedRequest } from './types.ts'

const MODEL = modelSchema.parse({ endpoints: [{ endpointId: 'abc123' }] })

const chatRequest: NormalizedRequest = {
  kind: 'chat',
  model: 'llama',
  stream: false,
  includeUsage: false,
  messages: [{ role: 'system', content: 'S' }, { role: 'user', content: 'Q', name: 'ann' }],
  sampling: { max_tokens: 100, temperature: 0.5, stop: ['END'] },
  user: 'u-1',
}

const completionRequest: NormalizedRequest = {
  kind: 'completion',
  model: 'gpt2',
  stream: true,
  includeUsage: false,
  prompt: 'Once',
  sampling: { max_tokens: 16 },
}

describe('toOpenAIBody', () => {
  it('builds a chat body with the served model name and no user', () => {
    expect(toOpenAIBody(chatRequest, 'meta/llama-3')).toEqual({
      model: 'meta/llama-3',
      messages: [{ role: 'system', content: 'S' }, { role: 'user', content: 'Q', name: 'ann' }],
      max_tokens: 100,
      temperature: 0.5,
      stop: ['END'],
      stream: false,
    })
  })

  it('always asks for usage when streaming, whatever the caller asked', () => {
    expect(toOpenAIBody(completionRequest, 'gpt2')).toEqual({
      model: 'gpt2',
      prompt: 'Once',
      max_tokens: 16,
      stream: true,
      stream_options: { include_usage: true },
    })
  })

  it('refuses a request without its text (a podgate bug)', () => {
    const broken: NormalizedRequest = { ...chatRequest, messages: undefined }
    expect(() => toOpenAIBody(broken, 'm')).toThrow(GatewayError)
    expect(() => toNativeInput({ ...completionRequest, prompt: undefined })).toThrow(GatewayError)
  })
})

describe('toNativeInput', () => {
  it('builds worker-vllm input with every set sampling param', () => {
    expect(toNativeInput(chatRequest)).toEqual({
      messages: [{ role: 'system', content: 'S' }, { role: 'user', content: 'Q', name: 'ann' }],
      sampling_params: { max_tokens: 100, temperature: 0.5, stop: ['END'] },
      stream: false,
    })
    expect(toNativeInput(completionRequest)).toEqual({ prompt: 'Once', sampling_params: { max_tokens: 16 }, stream: true })
  })
})

describe('key order', () => {
  const allSampling = {
    seed: 1, include_stop_str_in_output: true, spaces_between_special_tokens: true, skip_special_tokens: true,
    min_tokens: 1, ignore_eos: false, stop_token_ids: [1], stop: ['x'], length_penalty: 1, repetition_penalty: 1,
    frequency_penalty: 0, presence_penalty: 0, min_p: 0, top_k: 5, top_p: 1, temperature: 1, best_of: 2, n: 1,
    max_tokens: 9,
  }

  it('lists sampling params in SAMPLING_KEYS order whatever the input order', () => {
    const reversed: NormalizedRequest = { ...chatRequest, sampling: allSampling }
    expect(Object.keys(toOpenAIBody(reversed, 'm'))).toEqual(['model', 'messages', ...SAMPLING_KEYS, 'stream'])
    const native = toNativeInput(reversed)
    expect(Object.keys(native)).toEqual(['messages', 'sampling_params', 'stream'])
    expect(Object.keys(native.sampling_params as object)).toEqual([...SAMPLING_KEYS])
  })

  it('orders message keys role, content, name', () => {
    const shuffled: NormalizedRequest = { ...chatRequest, messages: [{ name: 'n', content: 'c', role: 'user' }] }
    const body = toOpenAIBody(shuffled, 'm') as { messages: object[] }
    expect(body.messages.map((m) => Object.keys(m))).toEqual([['role', 'content', 'name']])
  })

  it('gives equal requests byte-identical bodies regardless of the caller key order', () => {
    const a = normalizeChatRequest(
      { model: 'llama', messages: [{ role: 'user', content: 'Hi' }], temperature: 0.2, stop: 'x', seed: 4, stream: true },
      MODEL, 'llama',
    )
    const b = normalizeChatRequest(
      { stream: true, seed: 4, stop: ['x'], temperature: 0.2, messages: [{ content: 'Hi', role: 'user' }], model: 'llama' },
      MODEL, 'llama',
    )
    expect(JSON.stringify(toOpenAIBody(a, 'm'))).toBe(JSON.stringify(toOpenAIBody(b, 'm')))
    expect(JSON.stringify(toNativeInput(a))).toBe(JSON.stringify(toNativeInput(b)))
    const c = normalizeCompletionRequest({ temperature: 1, prompt: ['p'], model: 'g' }, MODEL, 'g')
    const d = normalizeCompletionRequest({ model: 'g', prompt: 'p', temperature: 1 }, MODEL, 'g')
    expect(JSON.stringify(toOpenAIBody(c, 'm'))).toBe(JSON.stringify(toOpenAIBody(d, 'm')))
  })
})
