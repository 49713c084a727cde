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
  it('sends max_completion_tokens as max_tokens, the only name vLLM\'s completions read (16 tokens when absent)', () => {
    const req = completion({ max_completion_tokens: 300 })
    expect(req.body.max_tokens).toBe(300)
    expect(req.body).not.toHaveProperty('max_completion_tokens')
    expect(req.sampling.max_tokens).toBe(300)
  })

  it('normalizes a minimal request', () => {
    expect(completion({})).toEqual({
      kind: 'completion',
      model: 'gpt2',
      stream: false,
      includeUsage: false,
      body: { ...base, max_tokens: 512 },
      shorthand: true,
      prompt: 'Once upon',
      sampling: { max_tokens: 512 },
      estimate: { promptTokens: 3, sequences: 1 },
    })
  })

  it('unwraps an array of one string for the native shorthand', () => {
    expect(completion({ prompt: ['Hello'] }).prompt).toBe('Hello')
  })

  it('maps sampling params, stream flags and user', () => {
    const req = completion({
      max_tokens: 20, temperature: 0.1, stop: '\n', n: 1, seed: 3, stream: true,
      stream_options: { include_usage: true }, user: 'u',
    })
    expect(req).toMatchObject({ stream: true, includeUsage: true, user: 'u', shorthand: true })
    expect(req.sampling).toEqual({ max_tokens: 20, n: 1, temperature: 0.1, stop: ['\n'], seed: 3 })
    // Current vLLM's SamplingParams has no best_of (a classic worker fails the job): an openai_route job takes it.
    expect(completion({ best_of: 2, n: 1 }).shorthand).toBe(false)
  })

  it('applies defaults', () => {
    const model = modelOf({ defaults: { temperature: 0.3, stop: ['x'] }, defaultMaxTokens: 99 })
    expect(completion({}, model).sampling).toEqual({ max_tokens: 99, temperature: 0.3, stop: ['x'] })
  })

  it('accepts string, string[], int[] and int[][] prompts, counting each prompt\'s sequences', () => {
    for (const [prompt, tokens, sequences] of [
      [['a', 'b', 'c'], 1, 3],
      [[1, 2, 3], 3, 1],
      [[[1, 2], [3]], 3, 2],
    ] as const) {
      const req = completion({ prompt, n: 2 })
      expect(req.body.prompt).toEqual(prompt)
      expect(req.shorthand).toBe(false)
      expect(req.estimate).toEqual({ promptTokens: tokens, sequences: sequences * 2 })
    }
  })

  it('forwards echo, logprobs, prompt_embeds, suffix and unknown fields unchanged', () => {
    const extra = { echo: true, logprobs: 2, prompt_embeds: 'AAAA', suffix: 'tail', logit_bias: { '1': 2 }, vllm_x: [1] }
    const req = completion(extra)
    expect(req.body).toEqual({ ...base, ...extra, max_tokens: 512 })
    expect(req.shorthand).toBe(false)
  })

  it('refuses a missing, empty or mistyped prompt', () => {
    expect(refused({ model: 'gpt2' })).toEqual(['prompt', "Missing required parameter: 'prompt'"])
    expect(refused({ ...base, prompt: 5 })[0]).toBe('prompt')
    expect(refused({ ...base, prompt: [] })[0]).toBe('prompt')
    expect(refused({ ...base, prompt: [1, 'a'] })[0]).toMatch(/^prompt/)
    expect(refused({ ...base, prompt: [[1, -2]] })[0]).toMatch(/^prompt\[0\]/)
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
