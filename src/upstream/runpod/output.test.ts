import { describe, expect, it } from 'vitest'
import { classicItems, PIECES, PROMPT_TOKENS, TEXT, UPSTREAM_MODEL, vllmEvents } from '../../streaming/__fixtures__/vllm.ts'
import { nativeOutputToOpenAI } from './output.ts'
import type { NativeOutputOptions } from './output.ts'
import { failure } from '../../streaming/__fixtures__/failure.ts'

const CHAT: NativeOutputOptions = { kind: 'chat', model: 'llama-8b', id: 'chatcmpl-1', created: 1_800_000_000, maxTokens: 100, n: 1 }
const COMPLETION: NativeOutputOptions = { ...CHAT, kind: 'completion', id: 'cmpl-1' }
/** The null fields vLLM's JSON message has, which a message podgate assembles has too. */
const NULLS = { refusal: null, annotations: null, audio: null, function_call: null }

describe('nativeOutputToOpenAI, classic output', () => {
  it('maps a /runsync token list to a chat.completion', () => {
    const output = [{ choices: [{ tokens: [TEXT] }], usage: { input: 3, output: 11 } }]
    expect(nativeOutputToOpenAI(output, CHAT)).toEqual({
      body: {
        id: 'chatcmpl-1',
        object: 'chat.completion',
        created: 1_800_000_000,
        model: 'llama-8b',
        choices: [{ index: 0, message: { role: 'assistant', content: TEXT, ...NULLS, tool_calls: [] }, logprobs: null, finish_reason: 'stop' }],
        usage: { prompt_tokens: 3, completion_tokens: 11, total_tokens: 14 },
      },
      usage: { prompt_tokens: 3, completion_tokens: 11, total_tokens: 14 },
    })
  })

  it('maps to a text_completion and infers length from max_tokens', () => {
    const output = [{ choices: [{ tokens: [TEXT] }], usage: { input: 3, output: 100 } }]
    const { body } = nativeOutputToOpenAI(output, COMPLETION)
    expect(body).toMatchObject({ object: 'text_completion', id: 'cmpl-1', choices: [{ index: 0, text: TEXT, logprobs: null, finish_reason: 'length' }] })
  })

  it('concatenates several aggregated entries per choice, with the last cumulative usage', () => {
    const { body, usage } = nativeOutputToOpenAI(classicItems([PIECES, ['x', 'y']]), { ...CHAT, n: 2 })
    expect(body.choices).toEqual([
      { index: 0, message: { role: 'assistant', content: TEXT, ...NULLS, tool_calls: [] }, logprobs: null, finish_reason: 'stop' },
      { index: 1, message: { role: 'assistant', content: 'xy', ...NULLS, tool_calls: [] }, logprobs: null, finish_reason: 'stop' },
    ])
    expect(usage).toEqual({ prompt_tokens: PROMPT_TOKENS, completion_tokens: PIECES.length + 2, total_tokens: PROMPT_TOKENS + PIECES.length + 2 })
  })

  it('judges n > 1 full-text output by the total across choices', () => {
    const output = (total: number) => [{ choices: [{ tokens: ['a'] }, { tokens: ['b'] }], usage: { input: 1, output: total } }]
    const reasons = (total: number) => nativeOutputToOpenAI(output(total), { ...CHAT, n: 2, maxTokens: 10 }).body.choices.map((c) => c.finish_reason)
    expect(reasons(20)).toEqual(['length', 'length'])
    expect(reasons(15)).toEqual(['stop', 'stop'])
  })

  it('refuses fewer choices than asked for', () => {
    const output = [{ choices: [{ tokens: ['a'] }], usage: { input: 1, output: 1 } }]
    expect(failure(() => nativeOutputToOpenAI(output, { ...CHAT, n: 2 })).message).toMatch(/1 of the 2 choices/)
  })

  it('tolerates a bare object instead of a list', () => {
    const { body } = nativeOutputToOpenAI({ choices: [{ tokens: ['hi'] }], usage: { input: 1, output: 1 } }, CHAT)
    expect(body.choices[0]).toMatchObject({ message: { content: 'hi' } })
  })
})

describe('nativeOutputToOpenAI, current output', () => {
  const vllmBody = {
    id: 'chatcmpl-upstream',
    object: 'chat.completion',
    created: 1_700_000_000,
    model: UPSTREAM_MODEL,
    choices: [{ index: 0, message: { role: 'assistant', content: TEXT, reasoning_content: null, tool_calls: [] }, logprobs: null, finish_reason: 'stop', stop_reason: null }],
    usage: { prompt_tokens: 5, total_tokens: 16, completion_tokens: 11, prompt_tokens_details: null },
    prompt_logprobs: null,
  }

  it("passes vLLM JSON on with model rewritten, vLLM's id and created kept (its id names the caller's request_id)", () => {
    const { body, usage, estimate } = nativeOutputToOpenAI([structuredClone(vllmBody)], CHAT)
    expect(body).toEqual({ ...vllmBody, model: 'llama-8b' })
    // vLLM's usage, whole: the counts, and the fields beside them (`prompt_tokens_details`).
    expect(usage).toEqual(vllmBody.usage)
    expect(estimate).toBeUndefined()
  })

  it('tolerates a bare object and estimates missing usage for the quota, never in the body', () => {
    const { usage: _, ...withoutUsage } = structuredClone(vllmBody)
    const result = nativeOutputToOpenAI(withoutUsage, CHAT)
    expect(result.usage).toBeUndefined()
    expect(result.estimate).toEqual({ prompt_tokens: 0, completion_tokens: Math.ceil(TEXT.length / 4), total_tokens: Math.ceil(TEXT.length / 4) })
    expect(result.body.usage).toBeUndefined()
  })

  it('estimates missing usage from a reasoning model\'s thinking and its tool calls too, not only its content', () => {
    const thinking = 'x'.repeat(400)
    const call = { id: 'chatcmpl-tool-1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }
    const { usage: _, ...withoutUsage } = structuredClone(vllmBody)
    const message = { role: 'assistant', content: null, reasoning_content: thinking, reasoning: thinking, tool_calls: [call] }
    const result = nativeOutputToOpenAI({ ...withoutUsage, choices: [{ ...withoutUsage.choices[0], message, finish_reason: 'tool_calls' }] }, CHAT)
    // vLLM writes the thinking under both names: it is counted once, with the call's name and arguments.
    const chars = thinking.length + 'get_weather'.length + '{"city":"Paris"}'.length
    expect(result.estimate).toEqual({ prompt_tokens: 0, completion_tokens: Math.ceil(chars / 4), total_tokens: Math.ceil(chars / 4) })
  })

  it('refuses a body of the other kind, or several bodies', () => {
    expect(failure(() => nativeOutputToOpenAI([structuredClone(vllmBody)], COMPLETION)).code).toBe('upstream_error')
    expect(failure(() => nativeOutputToOpenAI([vllmBody, vllmBody], CHAT)).code).toBe('upstream_error')
  })

  it('joins SSE text a streaming worker aggregated', () => {
    const { body, usage } = nativeOutputToOpenAI(vllmEvents(), CHAT)
    expect(body.choices).toEqual([{ index: 0, message: { role: 'assistant', content: TEXT, ...NULLS, tool_calls: [] }, logprobs: null, finish_reason: 'stop' }])
    expect(usage).toEqual({ prompt_tokens: PROMPT_TOKENS, completion_tokens: PIECES.length, total_tokens: PROMPT_TOKENS + PIECES.length })
    expect(failure(() => nativeOutputToOpenAI(vllmEvents({ done: false }), CHAT)).message).toMatch(/ended before/)
  })

  it('shows no usage of its own when the SSE text carries none (a current worker\'s shorthand): its count is for the quota', () => {
    const result = nativeOutputToOpenAI(vllmEvents({ usage: false }), CHAT)
    expect(result.body.usage).toBeNull()
    expect(result.usage).toBeUndefined()
    expect(result.estimate).toEqual({ prompt_tokens: 0, completion_tokens: PIECES.length, total_tokens: PIECES.length })
  })
})

describe('nativeOutputToOpenAI, failures', () => {
  it.each([
    [[{ error: 'CUDA out of memory' }]],
    [[{ error: { message: 'CUDA out of memory', type: 'worker_error', code: null } }]],
    [{ error: { message: 'CUDA out of memory', type: 'worker_error', code: null } }],
  ])('raises the worker error in %j', (output) => {
    const error = failure(() => nativeOutputToOpenAI(output, CHAT))
    expect(error.code).toBe('upstream_error')
    expect(error.message).toBe('The model worker failed: CUDA out of memory')
  })

  it.each([[undefined], [null], [[]], [42], [[{ text: 'hi' }]]])('refuses output %j', (output) => {
    expect(failure(() => nativeOutputToOpenAI(output, CHAT)).code).toBe('upstream_error')
  })
})
