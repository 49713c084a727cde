import { describe, it, expect } from 'vitest'
import fc from 'fast-check'
import { modelSchema } from '../config/schema.ts'
import { normalizeChatRequest } from './chat.ts'
import { normalizeCompletionRequest } from './completion.ts'
import { normalizeEmbeddingRequest } from './embedding.ts'
import { SAMPLING_KEYS, toNativeInput, toOpenAIBody } from './upstream-bodies.ts'

const MODEL = modelSchema.parse({ endpoints: [{ endpointId: 'abc123' }] })

describe('toOpenAIBody', () => {
  it('is the caller body with the served model name', () => {
    const body = { model: 'llama', messages: [{ role: 'system', content: 'S' }, { role: 'user', content: 'Q', name: 'ann' }], max_tokens: 100, temperature: 0.5, stop: ['END'], user: 'u-1' }
    expect(toOpenAIBody(normalizeChatRequest(body, MODEL, 'llama'), 'meta/llama-3')).toEqual({ ...body, model: 'meta/llama-3' })
  })

  it('always asks for usage when streaming, keeping the other stream options', () => {
    const req = normalizeCompletionRequest({ model: 'gpt2', prompt: 'Once', max_tokens: 16, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true, future: 1 } }, MODEL, 'gpt2')
    expect(toOpenAIBody(req, 'gpt2')).toEqual({
      model: 'gpt2', prompt: 'Once', max_tokens: 16, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true, future: 1 },
    })
  })

  it('leaves continuous_usage_stats out when the caller turned usage off, as vLLM would ignore it', () => {
    const req = normalizeCompletionRequest({ model: 'gpt2', prompt: 'Once', max_tokens: 16, stream: true, stream_options: { include_usage: false, continuous_usage_stats: true, future: 1 } }, MODEL, 'gpt2')
    expect(toOpenAIBody(req, 'gpt2').stream_options).toEqual({ future: 1, include_usage: true })
  })

  it('keeps continuous_usage_stats sent without include_usage, which vLLM defaults to true', () => {
    const req = normalizeCompletionRequest({ model: 'gpt2', prompt: 'Once', max_tokens: 16, stream: true, stream_options: { continuous_usage_stats: true } }, MODEL, 'gpt2')
    expect(req.includeUsage).toBe(true)
    expect(toOpenAIBody(req, 'gpt2').stream_options).toEqual({ continuous_usage_stats: true, include_usage: true })
  })

  it('property: any extra fields reach the upstream body unchanged, only model rewritten', () => {
    const reserved = new Set(['model', 'messages', 'prompt', 'input', 'stream', 'stream_options', 'max_tokens', 'max_completion_tokens', 'n', 'best_of', 'temperature', 'seed', 'user', '__proto__'])
    const extras = fc.dictionary(fc.string({ minLength: 1, maxLength: 12 }).filter((k) => !reserved.has(k)), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 6 })
    fc.assert(
      fc.property(extras, fc.constantFrom('chat', 'completion', 'embedding'), (extra, kind) => {
        const body: Record<string, unknown> = kind === 'chat'
          ? { model: 'm', messages: [{ role: 'user', content: 'x' }], max_tokens: 5, ...extra }
          : kind === 'completion' ? { model: 'm', prompt: ['a', 'b'], max_tokens: 5, ...extra } : { model: 'm', input: 'x', ...extra }
        const sent = JSON.parse(JSON.stringify(body)) as Record<string, unknown>
        const req = kind === 'chat' ? normalizeChatRequest(sent, MODEL, 'm') : kind === 'completion' ? normalizeCompletionRequest(sent, MODEL, 'm') : normalizeEmbeddingRequest(sent, MODEL, 'm')
        expect(JSON.parse(JSON.stringify(toOpenAIBody(req, 'served/m')))).toEqual(JSON.parse(JSON.stringify({ ...body, model: 'served/m' })))
      }),
      { numRuns: 200, seed: 13 },
    )
  })
})

describe('toNativeInput', () => {
  it('builds the shorthand with every set sampling param, in SAMPLING_KEYS order', () => {
    const req = normalizeChatRequest({ model: 'llama', messages: [{ role: 'system', content: 'S' }, { name: 'ann', content: [{ type: 'text', text: 'Q' }], role: 'user' }], seed: 1, temperature: 0.5, stop: 'END', max_tokens: 100 }, MODEL, 'llama')
    const input = toNativeInput(req)
    expect(input).toEqual({
      messages: [{ role: 'system', content: 'S' }, { role: 'user', content: 'Q', name: 'ann' }],
      sampling_params: { max_tokens: 100, temperature: 0.5, stop: ['END'], seed: 1 },
      stream: false,
    })
    expect(Object.keys(input.sampling_params as object)).toEqual(SAMPLING_KEYS.filter((k) => k in (input.sampling_params as object)))
    expect((input.messages as object[]).map((m) => Object.keys(m))).toEqual([['role', 'content'], ['role', 'content', 'name']])
    const completion = normalizeCompletionRequest({ model: 'gpt2', prompt: ['Once'], stream: true }, MODEL, 'gpt2')
    expect(toNativeInput(completion)).toEqual({ prompt: 'Once', sampling_params: { max_tokens: 512 }, stream: true })
  })

  it('sends what the shorthand cannot carry as an openai_route job with the whole OpenAI body', () => {
    const cases = [
      normalizeChatRequest({ model: 'm', messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function', function: { name: 'f' } }], stream: true }, MODEL, 'm'),
      normalizeChatRequest({ model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'u' } }] }] }, MODEL, 'm'),
      normalizeChatRequest({ model: 'm', messages: [{ role: 'user', content: 'x' }], chat_template_kwargs: { enable_thinking: true } }, MODEL, 'm'),
      normalizeCompletionRequest({ model: 'm', prompt: [[1, 2]], echo: true }, MODEL, 'm'),
      normalizeEmbeddingRequest({ model: 'm', input: ['a'], encoding_format: 'base64' }, MODEL, 'm'),
    ]
    const routes = ['/v1/chat/completions', '/v1/chat/completions', '/v1/chat/completions', '/v1/completions', '/v1/embeddings']
    cases.forEach((req, i) => {
      expect(toNativeInput(req, 'served')).toEqual({ openai_route: routes[i], openai_input: toOpenAIBody(req, 'served') })
    })
  })
})
