import { describe, it, expect } from 'vitest'
import { GatewayError } from '../errors/index.ts'
import { modelSchema } from '../config/schema.ts'
import type { ModelInput } from '../config/schema.ts'
import { normalizeChatRequest } from './chat.ts'
import { normalizeCompletionRequest } from './completion.ts'
import { toNativeInput } from './upstream-bodies.ts'
import { MAX_TEXT_CHARS } from './schemas.ts'

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
      body: { ...base, max_tokens: 512 },
      shorthand: true,
      messages: [{ role: 'user', content: 'Hi' }],
      sampling: { max_tokens: 512 },
      estimate: { promptTokens: 1, sequences: 1 },
    })
  })

  it('forwards every field it does not read unchanged, and leaves the caller body alone', () => {
    const messages = [
      { role: 'user', content: [{ type: 'text', text: 'What is here?' }, { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA', detail: 'low' } }] },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'look', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'a cat' },
    ]
    const body = {
      ...base, messages, tools: [{ type: 'function', function: { name: 'look', parameters: { type: 'object' } } }], tool_choice: 'auto',
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' } } }, logprobs: true, top_logprobs: 2,
      chat_template_kwargs: { enable_thinking: true }, vllm_future_field: { a: [1, 2] }, max_tokens: 20,
    }
    const copy = structuredClone(body)
    const req = normalizeChatRequest(body, MODEL, 'llama')
    expect(req.body).toEqual(body)
    expect(body).toEqual(copy)
    expect(req.shorthand).toBe(false)
    expect(req.messages).toBeUndefined()
  })

  it('uses the alias, not the body model', () => {
    expect(normalizeChatRequest({ ...base, model: 'other' }, MODEL, 'alias').model).toBe('alias')
  })

  it('maps every sampling param one to one', () => {
    const sampling = {
      max_tokens: 100, n: 2, temperature: 0.5, top_p: 0.9, top_k: 40, min_p: 0.05,
      presence_penalty: 0.1, frequency_penalty: -0.2, repetition_penalty: 1.1,
      stop: ['END', '###'], stop_token_ids: [2, 7], ignore_eos: true, min_tokens: 5, skip_special_tokens: false,
      spaces_between_special_tokens: false, include_stop_str_in_output: true, seed: 42,
    }
    expect(chat(sampling).sampling).toEqual(sampling)
    // best_of, beam-search params and truncation: current vLLM's SamplingParams has none of them, so a classic
    // worker would fail the job; on the OpenAI surface they go as an openai_route job, where vLLM's server takes them.
    for (const extra of [{ best_of: 3 }, { use_beam_search: true }, { length_penalty: 0.8 }, { early_stopping: true }, { truncate_prompt_tokens: 64 }]) {
      expect(chat({ ...sampling, ...extra }).shorthand).toBe(false)
      expect(normalizeChatRequest({ ...base, ...sampling, ...extra }, MODEL, 'llama', { nativeInput: true }).sampling).toEqual({ ...sampling, ...extra })
    }
  })

  it('normalizes a stop string to an array', () => {
    expect(chat({ stop: 'END' }).sampling.stop).toEqual(['END'])
  })

  it('treats null as not sent', () => {
    const req = chat({ temperature: null, stop: null, n: null, user: null, stream: null, stream_options: null })
    expect(req.sampling).toEqual({ max_tokens: 512 })
    expect(req.user).toBeUndefined()
  })

  it('keeps a developer message as sent: an OpenAI-surface request with one goes as an openai_route job; native input maps it to system', () => {
    const messages = [
      { role: 'developer', content: 'Be brief' },
      { role: 'system', content: 'S' },
      { role: 'user', content: 'Q', name: 'ann' },
      { role: 'assistant', content: 'A' },
    ]
    const req = chat({ messages })
    expect(req.shorthand).toBe(false)
    expect(req.body.messages).toEqual(messages)
    const native = normalizeChatRequest({ model: 'llama', messages }, MODEL, 'llama', { nativeInput: true })
    expect(native.messages).toEqual([
      { role: 'system', content: 'Be brief' },
      { role: 'system', content: 'S' },
      { role: 'user', content: 'Q', name: 'ann' },
      { role: 'assistant', content: 'A' },
    ])
  })

  it('leaves the shorthand when the model has a served name of its own (the shorthand names no model)', () => {
    const lora = modelOf({ servedModelName: 'sql-lora', kinds: ['chat', 'completion'] })
    const req = normalizeChatRequest({ model: 'llama', messages: [{ role: 'user', content: 'Q' }] }, lora, 'llama')
    expect(req.shorthand).toBe(false)
    expect(toNativeInput(req, 'sql-lora')).toMatchObject({ openai_route: '/v1/chat/completions', openai_input: { model: 'sql-lora' } })
    expect(normalizeCompletionRequest({ model: 'llama', prompt: 'Once' }, lora, 'llama').shorthand).toBe(false)
    // Native input names no model: the caller wrote it for the worker's default.
    expect(normalizeChatRequest({ model: 'llama', messages: [{ role: 'user', content: 'Q' }] }, lora, 'llama', { nativeInput: true }).shorthand).toBe(true)
  })

  it('flattens text parts with newlines', () => {
    const req = chat({ messages: [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }] })
    expect(req.messages).toEqual([{ role: 'user', content: 'a\nb' }])
  })

  it('copies user; fields without a native form make the request an openai_route one', () => {
    const req = chat({ user: 'u-1', metadata: { a: 'b' }, logprobs: false })
    expect(req.user).toBe('u-1')
    expect(req.shorthand).toBe(false)
    expect(req.body).toMatchObject({ user: 'u-1', metadata: { a: 'b' }, logprobs: false })
    expect(chat({ user: 'u-1', logprobs: null }).shorthand).toBe(true)
  })

  it('estimates tools, schemas and media parts in the prompt, and n or best_of in the sequences', () => {
    const plain = chat({}).estimate.promptTokens
    const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }]
    expect(chat({ tools }).estimate.promptTokens).toBe(plain + Math.ceil(JSON.stringify(tools).length / 4))
    const image = { role: 'user', content: [{ type: 'text', text: 'Hi' }, { type: 'image_url', image_url: { url: 'data:' + 'A'.repeat(100_000) } }] }
    expect(chat({ messages: [image] }).estimate.promptTokens).toBe(1 + 1024)
    expect(chat({ n: 2, best_of: 3 }).estimate.sequences).toBe(3)
  })

  it('estimates the other text parts vLLM takes (input_text, output_text) as text, not as media', () => {
    const text = 'x'.repeat(400)
    const asText = chat({ messages: [{ role: 'user', content: [{ type: 'text', text }] }] }).estimate.promptTokens
    expect(asText).toBe(100)
    for (const part of [{ type: 'input_text', text }, { type: 'output_text', text }]) {
      expect(chat({ messages: [{ role: 'user', content: [part] }] }).estimate.promptTokens, JSON.stringify(part).slice(0, 40)).toBe(asText)
    }
  })
})

describe('normalizeChatRequest: defaults and caps', () => {
  const withDefaults = modelOf({
    defaults: { temperature: 0.2, top_p: 0.8, top_k: 20, min_p: 0.1, presence_penalty: 0.3, frequency_penalty: 0.4,
      repetition_penalty: 1.05, seed: 7, stop: '</s>', min_tokens: 3, max_tokens: 300 },
    maxTokensCap: 1000,
  })

  it('applies defaults only where the caller sent nothing', () => {
    expect(chat({}, withDefaults).body).toMatchObject({ temperature: 0.2, stop: '</s>', max_tokens: 300, seed: 7 })
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

  it('clamps a default min_tokens to max_tokens (a caller min_tokens is vLLM\'s to check)', () => {
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
    // vLLM's StreamOptions: `include_usage` defaults to true, and null reads as false.
    expect(chat({ stream: true, stream_options: {} }).includeUsage).toBe(true)
    expect(chat({ stream: true, stream_options: { include_usage: null } }).includeUsage).toBe(false)
    expect(chat({ stream: true, stream_options: null }).includeUsage).toBe(false)
  })

  it('refuses stream_options without stream: true, unless it is empty (vLLM serves that)', () => {
    for (const stream of [undefined, false]) {
      expect(refused({ ...base, stream, stream_options: { include_usage: true } })[0]).toBe('stream_options')
      expect(chat({ stream, stream_options: {} })).toMatchObject({ stream: false, includeUsage: false })
    }
  })

  it('forwards other stream_options members (continuous_usage_stats)', () => {
    const req = chat({ stream: true, stream_options: { include_usage: false, continuous_usage_stats: true } })
    expect(req.body.stream_options).toEqual({ include_usage: false, continuous_usage_stats: true })
    expect(req.shorthand).toBe(false)
  })
})

describe('normalizeChatRequest: rejections', () => {
  it('accepts tools, logprobs, response formats and unknown fields: they pass through', () => {
    for (const [field, value] of [['tools', [{ type: 'function' }]], ['tool_choice', 'auto'], ['logprobs', true], ['response_format', { type: 'json_object' }], ['logit_bias', { '50256': -100 }], ['foo', 1]] as const) {
      expect(chat({ [field]: value }).body[field]).toEqual(value)
    }
  })

  it('refuses bodies that are not JSON objects', () => {
    for (const body of [null, [], 'hi', 3]) {
      expect(refused(body)).toEqual([null, 'The request body must be a JSON object'])
    }
  })

  it('refuses bad messages with OpenAI-style params', () => {
    expect(refused({ model: 'llama' })).toEqual(['messages', "Missing required parameter: 'messages'"])
    expect(refused({ ...base, messages: [] })).toEqual(['messages', "'messages' must have at least 1 item, got 0 items"])
    expect(refused({ ...base, messages: [{ role: 5, content: 'x' }] })).toEqual([
      'messages[0].role', "Invalid type for 'messages[0].role': expected a string, got a number",
    ])
    expect(refused({ ...base, messages: [{ content: 'x' }] })).toEqual(['messages[0].role', "Missing required parameter: 'messages[0].role'"])
    expect(refused({ ...base, messages: [{ role: 'user', content: 5 }] })).toEqual([
      'messages[0].content',
      "Invalid type for 'messages[0].content': expected a string, an array of content parts or null, got a number",
    ])
    expect(refused({ ...base, messages: ['hi'] })[0]).toBe('messages[0]')
  })

  it('accepts any role, null content and extra message fields', () => {
    const messages = [{ role: 'bot', content: 'x', extra: 1 }, { role: 'assistant', content: null, tool_calls: [{ id: 'c' }] }, { role: 'user' }]
    expect(chat({ messages }).body.messages).toEqual(messages)
  })

  it('accepts any part vLLM takes; refuses a part whose type or text is not a string', () => {
    const messages = [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'input_audio', input_audio: { data: 'x', format: 'wav' } }, { type: 'video_url', video_url: { url: 'x' } }] }]
    expect(chat({ messages }).body.messages).toEqual(messages)
    // vLLM also takes a bare string as a text part, infers a missing type from the part's key, and skips a null text.
    const vllmForms = [{ role: 'user', content: ['a', { image_url: { url: 'x' } }, { type: 'image_url', image_url: { url: 'x' }, text: null }] }]
    const request = chat({ messages: vllmForms })
    expect(request.body.messages).toEqual(vllmForms)
    expect(request.shorthand).toBe(false)
    expect(refused({ ...base, messages: [{ role: 'user', content: [{ type: 5 }] }] })[0]).toBe('messages[0].content[0].type')
    expect(refused({ ...base, messages: [{ role: 'user', content: [{ type: 'text', text: 5 }] }] })[0]).toBe('messages[0].content[0].text')
  })

  it('refuses too many messages and too much text', () => {
    const many = Array.from({ length: 10_001 }, () => ({ role: 'user', content: 'x' }))
    expect(refused({ ...base, messages: many })).toEqual(['messages', "'messages' must have at most 10000 items, got 10001 items"])
    // The bound is the largest body podgate reads: a long-context prompt of millions of characters passes.
    expect(chat({ messages: [{ role: 'user', content: 'x'.repeat(4_000_000) }] }).estimate.promptTokens).toBe(1_000_000)
    const big = 'x'.repeat(MAX_TEXT_CHARS / 2 + 1)
    const [param, message] = refused({ ...base, messages: [{ role: 'user', content: big }, { role: 'user', content: big }] })
    expect(param).toBe('messages')
    expect(message).toContain('too long')
    expect(refused({ ...base, messages: [{ role: 'user', content: 'x'.repeat(MAX_TEXT_CHARS + 1) }] })).toEqual([
      'messages[0].content',
      `'messages[0].content' must be at most ${MAX_TEXT_CHARS} characters long, got ${MAX_TEXT_CHARS + 1} characters`,
    ])
  })

  it('refuses out-of-range values of the fields podgate reads with the exact param', () => {
    expect(refused({ ...base, temperature: -1 })).toEqual(['temperature', "'temperature' must be at least 0, got -1"])
    // podgate checks only the lower bound: vLLM applies its own upper one (some releases take more than 2).
    expect(chat({ temperature: 2.5 }).body.temperature).toBe(2.5)
    expect(refused({ ...base, temperature: '1' })).toEqual(['temperature', "Invalid type for 'temperature': expected a number, got a string"])
    expect(refused({ ...base, n: 1.5 })).toEqual(['n', "Invalid type for 'n': expected an integer, got 1.5"])
    expect(refused({ ...base, seed: 0.5 })[0]).toBe('seed')
    expect(refused({ ...base, user: 'u'.repeat(257) })[0]).toBe('user')
    // Fields podgate does not read are vLLM's to validate: they pass, and the request leaves the native shorthand.
    expect(chat({ top_p: 0, stop: 5 }).shorthand).toBe(false)
    expect(refused({ ...base, stream: 'yes' })[0]).toBe('stream')
    expect(refused({ ...base, model: 5 })).toEqual(['model', "Invalid type for 'model': expected a string, got a number"])
    // vLLM takes any 64-bit seed, beyond JavaScript's safe integers; past 64 bits it is refused here.
    expect(chat({ seed: 2 ** 60 }).body.seed).toBe(2 ** 60)
    expect(refused({ ...base, seed: 2 ** 64 })).toEqual(['seed', "'seed' must be a 64-bit integer"])
    // INT64_MAX is 2^63 - 1: 2^63 itself is one past it, -2^63 is INT64_MIN.
    expect(refused({ ...base, seed: 2 ** 63 })[0]).toBe('seed')
    expect(chat({ seed: -(2 ** 63) }).body.seed).toBe(-(2 ** 63))
  })

  it('reports the first issue in schema order', () => {
    expect(refused({ ...base, temperature: -1, n: 0, zzz: 1 })[0]).toBe('n')
  })
})
