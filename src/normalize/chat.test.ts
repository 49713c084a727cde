import { describe, it, expect } from 'vitest'
import { GatewayError } from '../errors/index.ts'
import { modelSchema } from '../config/schema.ts'
import type { ModelInput } from '../config/schema.ts'
import { normalizeChatRequest } from './chat.ts'

const modelOf = (extra: Partial<ModelInput> = {}) => modelSchema.parse({ endpoints: [{ endpointId: 'abc123' }], ...extra })
const MODEL = modelOf()
const base = { model: 'llama', messages: [{ role: 'user', content: 'Hi' }] }

function chat(body: Record<string, unknown>, model = MODEL) {
  return normalizeChatRequest({ ...base, ...body }, model, 'llama')
}

function rejection(fn: () => unknown): GatewayError {
  try {
    fn()
  } catch (error) {
    if (error instanceof GatewayError) return error
    throw error
  }
  throw new Error('expected a GatewayError')
}

/** The `[param, message]` of the 400 a chat body gets. */
function refused(body: unknown, model = MODEL): [string | null, string] {
  const error = rejection(() => normalizeChatRequest(body, model, 'llama'))
  expect(error.code).toBe('invalid_request')
  expect(error.status).toBe(400)
  return [error.param, error.message]
}

describe('normalizeChatRequest: mapping', () => {
  it('normalizes a minimal request with the fallback max_tokens', () => {
    expect(chat({})).toEqual({
      kind: 'chat',
      model: 'llama',
      stream: false,
      includeUsage: false,
      messages: [{ role: 'user', content: 'Hi' }],
      sampling: { max_tokens: 512 },
    })
  })

  it('uses the alias, not the body model', () => {
    expect(normalizeChatRequest({ ...base, model: 'other' }, MODEL, 'alias').model).toBe('alias')
  })

  it('maps every sampling param one to one', () => {
    const sampling = {
      max_tokens: 100, n: 2, best_of: 3, temperature: 0.5, top_p: 0.9, top_k: 40, min_p: 0.05,
      presence_penalty: 0.1, frequency_penalty: -0.2, repetition_penalty: 1.1, length_penalty: 0.8,
      stop: ['END', '###'], stop_token_ids: [2, 7], ignore_eos: true, min_tokens: 5, skip_special_tokens: false,
      spaces_between_special_tokens: false, include_stop_str_in_output: true, seed: 42,
    }
    expect(chat(sampling).sampling).toEqual(sampling)
  })

  it('normalizes a stop string to an array', () => {
    expect(chat({ stop: 'END' }).sampling.stop).toEqual(['END'])
  })

  it('treats null as not sent', () => {
    const req = chat({ temperature: null, stop: null, n: null, user: null, stream: null, stream_options: null })
    expect(req.sampling).toEqual({ max_tokens: 512 })
    expect(req.user).toBeUndefined()
  })

  it('maps developer to system and keeps name', () => {
    const req = chat({ messages: [
      { role: 'developer', content: 'Be brief' },
      { role: 'system', content: 'S' },
      { role: 'user', content: 'Q', name: 'ann' },
      { role: 'assistant', content: 'A' },
    ] })
    expect(req.messages).toEqual([
      { role: 'system', content: 'Be brief' },
      { role: 'system', content: 'S' },
      { role: 'user', content: 'Q', name: 'ann' },
      { role: 'assistant', content: 'A' },
    ])
  })

  it('flattens text parts with newlines', () => {
    const req = chat({ messages: [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }] })
    expect(req.messages).toEqual([{ role: 'user', content: 'a\nb' }])
  })

  it('copies user and tolerates ignored fields and off values', () => {
    const req = chat({
      user: 'u-1', metadata: { a: 'b' }, store: false, service_tier: 'auto', logprobs: false, tools: [],
      tool_choice: 'none', response_format: { type: 'text' }, modalities: ['text'],
      messages: [{ role: 'assistant', content: 'x', refusal: null, tool_calls: [], annotations: [] }],
    })
    expect(req.user).toBe('u-1')
    expect(req.sampling).toEqual({ max_tokens: 512 })
  })
})

describe('normalizeChatRequest: defaults and caps', () => {
  const withDefaults = modelOf({
    defaults: { temperature: 0.2, top_p: 0.8, top_k: 20, min_p: 0.1, presence_penalty: 0.3, frequency_penalty: 0.4,
      repetition_penalty: 1.05, seed: 7, stop: '</s>', min_tokens: 3, max_tokens: 300 },
    maxTokensCap: 1000,
  })

  it('applies defaults only where the caller sent nothing', () => {
    expect(chat({}, withDefaults).sampling).toEqual({
      max_tokens: 300, temperature: 0.2, top_p: 0.8, top_k: 20, min_p: 0.1, presence_penalty: 0.3,
      frequency_penalty: 0.4, repetition_penalty: 1.05, stop: ['</s>'], min_tokens: 3, seed: 7,
    })
    const callerWins = chat({ temperature: 0, stop: [], seed: 1, top_k: -1, max_tokens: 50 }, withDefaults).sampling
    expect(callerWins).toMatchObject({ temperature: 0, stop: [], seed: 1, top_k: -1, max_tokens: 50, top_p: 0.8 })
  })

  it('prefers defaultMaxTokens, then defaults.max_tokens, then 512, clamped to the cap', () => {
    expect(chat({}, modelOf({ defaultMaxTokens: 64, defaults: { max_tokens: 300 } })).sampling.max_tokens).toBe(64)
    expect(chat({}, modelOf({ defaults: { max_tokens: 300 } })).sampling.max_tokens).toBe(300)
    expect(chat({}, modelOf({ maxTokensCap: 100 })).sampling.max_tokens).toBe(100)
    expect(chat({}, modelOf({ defaultMaxTokens: 5000, maxTokensCap: 2000 })).sampling.max_tokens).toBe(2000)
  })

  it('accepts max_completion_tokens as an alias', () => {
    expect(chat({ max_completion_tokens: 77 }).sampling.max_tokens).toBe(77)
    expect(chat({ max_completion_tokens: 77, max_tokens: 77 }).sampling.max_tokens).toBe(77)
  })

  it('refuses conflicting aliases', () => {
    expect(refused({ ...base, max_tokens: 10, max_completion_tokens: 20 })[0]).toBe('max_completion_tokens')
  })

  it('refuses max_tokens above the cap, naming the cap', () => {
    const [param, message] = refused({ ...base, max_tokens: 5000 })
    expect(param).toBe('max_tokens')
    expect(message).toBe("'max_tokens' must be at most 4096 for model 'llama', got 5000")
    expect(refused({ ...base, max_completion_tokens: 5000 })[0]).toBe('max_completion_tokens')
  })

  it('refuses n and best_of above maxChoices, and best_of below n', () => {
    expect(refused({ ...base, n: 5 })).toEqual(['n', "'n' must be at most 4 for model 'llama', got 5"])
    expect(refused({ ...base, best_of: 5 })[0]).toBe('best_of')
    expect(refused({ ...base, n: 3, best_of: 2 })).toEqual(['best_of', "'best_of' must be at least 'n' (3), got 2"])
    expect(chat({ n: 4 }, MODEL).sampling.n).toBe(4)
  })

  it('refuses a caller min_tokens above max_tokens but clamps a default one', () => {
    expect(refused({ ...base, max_tokens: 10, min_tokens: 11 })[0]).toBe('min_tokens')
    expect(chat({ max_tokens: 2 }, withDefaults).sampling.min_tokens).toBe(2)
  })

  it('refuses a model that only takes completions', () => {
    expect(refused(base, modelOf({ kinds: ['completion'] }))).toEqual([
      'model',
      "model 'llama' only accepts completion requests: use /v1/completions",
    ])
  })
})

describe('normalizeChatRequest: streaming', () => {
  it('passes stream and include_usage', () => {
    expect(chat({ stream: true })).toMatchObject({ stream: true, includeUsage: false })
    expect(chat({ stream: true, stream_options: { include_usage: true } })).toMatchObject({ includeUsage: true })
    expect(chat({ stream: true, stream_options: { include_usage: false } }).includeUsage).toBe(false)
  })

  it('refuses stream_options without stream: true', () => {
    for (const stream of [undefined, false]) {
      expect(refused({ ...base, stream, stream_options: { include_usage: true } })[0]).toBe('stream_options')
    }
  })

  it('refuses unknown stream_options fields', () => {
    expect(refused({ ...base, stream: true, stream_options: { foo: 1 } })).toEqual([
      'stream_options.foo',
      "Unrecognized argument supplied in 'stream_options': foo",
    ])
  })
})

describe('normalizeChatRequest: rejections', () => {
  it.each([
    ['tools', [{ type: 'function' }]],
    ['tool_choice', 'auto'],
    ['functions', [{ name: 'f' }]],
    ['function_call', 'auto'],
    ['parallel_tool_calls', true],
    ['logprobs', true],
    ['top_logprobs', 2],
    ['response_format', { type: 'json_object' }],
    ['audio', { voice: 'x' }],
    ['modalities', ['text', 'audio']],
    ['prediction', { type: 'content', content: 'x' }],
    ['logit_bias', { '50256': -100 }],
    ['store', true],
  ])('refuses %s as not supported yet', (field, value) => {
    const [param, message] = refused({ ...base, [field]: value })
    expect(param).toBe(field)
    expect(message).toContain(`podgate does not support '${field}' yet`)
  })

  it('refuses unknown fields with OpenAI wording', () => {
    expect(refused({ ...base, foo: 1 })).toEqual(['foo', 'Unrecognized request argument supplied: foo'])
    expect(refused({ ...base, prompt: 'x' })[0]).toBe('prompt')
  })

  it('refuses bodies that are not JSON objects', () => {
    for (const body of [null, [], 'hi', 3]) {
      expect(refused(body)).toEqual([null, 'The request body must be a JSON object'])
    }
  })

  it('refuses bad messages with OpenAI-style params', () => {
    expect(refused({ model: 'llama' })).toEqual(['messages', "Missing required parameter: 'messages'"])
    expect(refused({ ...base, messages: [] })).toEqual(['messages', "'messages' must have at least 1 item, got 0 items"])
    expect(refused({ ...base, messages: [{ role: 'tool', content: 'x' }] })).toEqual([
      'messages[0].role', "podgate does not support 'tool' messages yet",
    ])
    expect(refused({ ...base, messages: [{ role: 'function', content: 'x' }] })[0]).toBe('messages[0].role')
    expect(refused({ ...base, messages: [{ role: 'bot', content: 'x' }] })).toEqual([
      'messages[0].role',
      "Invalid value for 'messages[0].role': expected 'system', 'developer', 'user', 'assistant', got 'bot'",
    ])
    expect(refused({ ...base, messages: [{ role: 'user' }] })).toEqual([
      'messages[0].content', "Missing required parameter: 'messages[0].content'",
    ])
    expect(refused({ ...base, messages: [{ role: 'user', content: 'a' }, { role: 'assistant', content: null }] })).toEqual([
      'messages[1].content',
      "Invalid type for 'messages[1].content': expected a string or an array of text parts, got null",
    ])
    expect(refused({ ...base, messages: [{ role: 'user', content: 'a', extra: 1 }] })).toEqual([
      'messages[0].extra', "Unrecognized argument supplied in 'messages[0]': extra",
    ])
    expect(refused({ ...base, messages: [{ role: 'assistant', content: 'a', tool_calls: [{ id: 'c' }] }] })[0])
      .toBe('messages[0].tool_calls')
  })

  it('refuses non-text content parts by type', () => {
    const messages = [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'image_url', image_url: { url: 'x' } }] }]
    expect(refused({ ...base, messages })).toEqual([
      'messages[0].content[1].type',
      "podgate does not support 'image_url' content parts yet: only 'text' parts are accepted",
    ])
    expect(refused({ ...base, messages: [{ role: 'user', content: [{ type: 'text' }] }] })[0]).toBe('messages[0].content[0].text')
    expect(refused({ ...base, messages: [{ role: 'user', content: [] }] })[0]).toBe('messages[0].content')
  })

  it('refuses too many messages and too much text', () => {
    const many = Array.from({ length: 1001 }, () => ({ role: 'user', content: 'x' }))
    expect(refused({ ...base, messages: many })).toEqual(['messages', "'messages' must have at most 1000 items, got 1001 items"])
    const big = 'x'.repeat(600_000)
    const [param, message] = refused({ ...base, messages: [{ role: 'user', content: big }, { role: 'user', content: big }] })
    expect(param).toBe('messages')
    expect(message).toContain('too long')
    expect(refused({ ...base, messages: [{ role: 'user', content: 'x'.repeat(1_000_001) }] })).toEqual([
      'messages[0].content',
      "'messages[0].content' must be at most 1000000 characters long, got 1000001 characters",
    ])
  })

  it('refuses out-of-range sampling params with the exact param', () => {
    expect(refused({ ...base, temperature: 3 })).toEqual(['temperature', "'temperature' must be at most 2, got 3"])
    expect(refused({ ...base, temperature: '1' })).toEqual(['temperature', "Invalid type for 'temperature': expected a number, got a string"])
    expect(refused({ ...base, top_p: 0 })).toEqual(['top_p', "'top_p' must be greater than 0, got 0"])
    expect(refused({ ...base, n: 1.5 })).toEqual(['n', "Invalid type for 'n': expected an integer, got 1.5"])
    expect(refused({ ...base, presence_penalty: -3 })[0]).toBe('presence_penalty')
    expect(refused({ ...base, frequency_penalty: 2.5 })[0]).toBe('frequency_penalty')
    expect(refused({ ...base, seed: 0.5 })[0]).toBe('seed')
    expect(refused({ ...base, stop: Array.from({ length: 17 }, (_, i) => `s${i}`) })).toEqual([
      'stop', "'stop' must have at most 16 items, got 17 items",
    ])
    expect(refused({ ...base, stop: 5 })).toEqual(['stop', "Invalid type for 'stop': expected a string or an array of strings, got a number"])
    expect(refused({ ...base, stop: ['a', 3] })[0]).toBe('stop[1]')
    expect(refused({ ...base, user: 'u'.repeat(257) })[0]).toBe('user')
    expect(refused({ ...base, top_k: -2 })[0]).toBe('top_k')
    expect(refused({ ...base, stream: 'yes' })[0]).toBe('stream')
    expect(refused({ ...base, model: 5 })).toEqual(['model', "Invalid type for 'model': expected a string, got a number"])
    expect(refused({ ...base, seed: 2 ** 60 })[0]).toBe('seed')
  })

  it('reports the first issue in schema order', () => {
    expect(refused({ ...base, temperature: 3, top_p: 2, zzz: 1 })[0]).toBe('temperature')
  })
})
