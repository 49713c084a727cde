import { describe, it, expect } from 'vitest'
import { GatewayError } from '../errors/index.ts'
import { modelSchema } from '../config/schema.ts'
import type { ModelInput } from '../config/schema.ts'
import { normalizeCompletionRequest } from './completion.ts'

const modelOf = (extra: Partial<ModelInput> = {}) => modelSchema.parse({ endpoints: [{ endpointId: 'abc123' }], ...extra })
const MODEL = modelOf()
const base = { model: 'gpt2', prompt: 'Once upon' }

function completion(body: Record<string, unknown>, model = MODEL) {
  return normalizeCompletionRequest({ ...base, ...body }, model, 'gpt2')
}

function refused(body: unknown, model = MODEL): [string | null, string] {
  try {
    normalizeCompletionRequest(body, model, 'gpt2')
  } catch (error) {
    if (!(error instanceof GatewayError)) throw error
    expect(error.code).toBe('invalid_request')
    return [error.param, error.message]
  }
  throw new Error('expected a GatewayError')
}

describe('normalizeCompletionRequest', () => {
  it('normalizes a minimal request', () => {
    expect(completion({})).toEqual({
      kind: 'completion',
      model: 'gpt2',
      stream: false,
      includeUsage: false,
      prompt: 'Once upon',
      sampling: { max_tokens: 512 },
    })
  })

  it('unwraps an array of one string', () => {
    expect(completion({ prompt: ['Hello'] }).prompt).toBe('Hello')
  })

  it('maps sampling params, stream flags, user and off values', () => {
    const req = completion({
      max_tokens: 20, temperature: 0.1, stop: '\n', best_of: 2, n: 1, seed: 3, stream: true,
      stream_options: { include_usage: true }, user: 'u', echo: false, suffix: null, logprobs: null,
    })
    expect(req).toMatchObject({ stream: true, includeUsage: true, user: 'u' })
    expect(req.sampling).toEqual({ max_tokens: 20, n: 1, best_of: 2, temperature: 0.1, stop: ['\n'], seed: 3 })
  })

  it('applies defaults', () => {
    const model = modelOf({ defaults: { temperature: 0.3, stop: ['x'] }, defaultMaxTokens: 99 })
    expect(completion({}, model).sampling).toEqual({ max_tokens: 99, temperature: 0.3, stop: ['x'] })
  })

  it('refuses token-id prompts', () => {
    const message = 'podgate does not support token-id prompts yet: send the prompt as a string'
    expect(refused({ ...base, prompt: [1, 2, 3] })).toEqual(['prompt', message])
    expect(refused({ ...base, prompt: [[1, 2]] })).toEqual(['prompt', message])
  })

  it('refuses several prompts or none', () => {
    const message = 'podgate accepts exactly one prompt per request: send a string'
    expect(refused({ ...base, prompt: ['a', 'b'] })).toEqual(['prompt', message])
    expect(refused({ ...base, prompt: [] })).toEqual(['prompt', message])
  })

  it('refuses a missing or mistyped prompt', () => {
    expect(refused({ model: 'gpt2' })).toEqual(['prompt', "Missing required parameter: 'prompt'"])
    expect(refused({ ...base, prompt: 5 })).toEqual(['prompt', "Invalid type for 'prompt': expected a string, got a number"])
  })

  it.each([
    ['echo', true],
    ['suffix', 'tail'],
    ['logprobs', 2],
    ['logit_bias', { '1': 2 }],
  ])('refuses %s as not supported yet', (field, value) => {
    const [param, message] = refused({ ...base, [field]: value })
    expect(param).toBe(field)
    expect(message).toContain(`podgate does not support '${field}' yet`)
  })

  it('refuses chat-only fields as unrecognized', () => {
    expect(refused({ ...base, messages: [] })).toEqual(['messages', 'Unrecognized request argument supplied: messages'])
    expect(refused({ ...base, tools: [] })).toEqual(['tools', 'Unrecognized request argument supplied: tools'])
  })

  it('refuses a chat-only model, stream_options without stream, and caps', () => {
    expect(refused(base, modelOf({ kinds: ['chat'] }))).toEqual([
      'model',
      "model 'gpt2' only accepts chat requests: use /v1/chat/completions",
    ])
    expect(refused({ ...base, stream_options: { include_usage: true } })[0]).toBe('stream_options')
    expect(refused({ ...base, max_tokens: 4097 })[0]).toBe('max_tokens')
    expect(refused({ ...base, n: 5 })[0]).toBe('n')
  })

  it('refuses non-object bodies', () => {
    expect(refused(['x'])).toEqual([null, 'The request body must be a JSON object'])
  })
})
