/**
 * What each choice of a request says, as a list of deltas (one per generated token): reasoning, then
 * a tool call (name, then argument fragments), guided output (JSON, a choice, a regex match) or text.
 * Every decision is a pure function of the request, so all output shapes carry the same answer.
 */

import { createPrng, generateCompletion, hashString } from './generate.ts'
import type { GeneratedText, GenerateOptions } from './generate.ts'
import type { GenerationRequest, StructuredOutput, ToolSpec } from './requests.ts'
import { regexInstance, schemaInstance } from './schema-instance.ts'

export type Delta =
  | { kind: 'content'; text: string }
  | { kind: 'reasoning'; text: string }
  | { kind: 'tool_start'; call: number; name: string }
  | { kind: 'tool_args'; call: number; text: string }

export type FinishReason = 'stop' | 'length' | 'tool_calls'

/** One choice. `tokens` / `text` are its content only (what the classic native shapes carry). */
export interface PlannedChoice extends Omit<GeneratedText, 'finishReason'> {
  deltas: Delta[]
  finishReason: FinishReason
  reasoning: string
  toolCalls: Array<{ name: string; arguments: string }>
  /** Completions `echo`: the prompt text put before the first delta. */
  echo: string
  /** Index of the prompt this choice answers (completions with a prompt list). */
  promptIndex: number
}

const MAX_FRAGMENT_CHARS = 6

/** Every choice of a request: `n` per prompt, in vLLM's order (prompt-major). */
export function planChoices(request: GenerationRequest): PlannedChoice[] {
  const prompts = request.kind === 'completion' ? (request.prompts ?? [{ text: request.prompt ?? '', tokens: 0 }]) : [undefined]
  return prompts.flatMap((prompt, promptIndex) =>
    Array.from({ length: request.n }, (_, choiceIndex) =>
      planChoice(request, {
        messages: request.messages,
        prompt: prompt?.text ?? request.prompt,
        seed: request.seed,
        choiceIndex,
        maxTokens: request.maxTokens,
        stop: request.stop,
        tokens: request.directives.tokens,
      }, promptIndex),
    ),
  )
}

function planChoice(request: GenerationRequest, generate: GenerateOptions, promptIndex: number): PlannedChoice {
  // Computed only for answers that need them: plain text, the common case, stays as cheap as before.
  const key = () => JSON.stringify([generate.messages?.map((m) => [m.role, m.content]) ?? generate.prompt, generate.seed ?? null, generate.choiceIndex ?? 0])
  const filler = () => generateCompletion({ ...generate, maxTokens: undefined, stop: [], tokens: undefined })
  const words = () => filler().text.split(' ').filter((w) => w !== '')

  const deltas: Delta[] = []
  let reasoning = ''
  if (request.thinking) {
    // Reasoning is planned apart from the answer (its own seed) and, for simplicity, never counts against max_tokens.
    const thought = generateCompletion({ ...generate, choiceIndex: 1000 + (generate.choiceIndex ?? 0), maxTokens: 12, stop: [], tokens: undefined })
    for (const text of thought.tokens) deltas.push({ kind: 'reasoning', text })
    reasoning = thought.text
  }

  const echo = request.echo ? (generate.prompt ?? '') : ''
  const finish = (answer: { tokens: string[]; finishReason: FinishReason; toolCalls?: PlannedChoice['toolCalls']; stopString?: string }): PlannedChoice => {
    const content = answer.tokens
    for (const text of content) deltas.push({ kind: 'content', text })
    return {
      deltas,
      tokens: content,
      text: content.join(''),
      finishReason: answer.finishReason,
      ...(answer.stopString !== undefined ? { stopString: answer.stopString } : {}),
      reasoning,
      toolCalls: answer.toolCalls ?? [],
      echo,
      promptIndex,
    }
  }

  const lastMessage = generate.messages?.at(-1)
  const answeringTool = lastMessage?.role === 'tool'
  const tool = chosenTool(request, answeringTool)
  if (tool) {
    const args = JSON.stringify(schemaInstance(tool.parameters ?? { type: 'object' }, { words: words() }))
    deltas.push({ kind: 'tool_start', call: 0, name: tool.name })
    for (const text of fragments(args, key())) deltas.push({ kind: 'tool_args', call: 0, text })
    // vLLM finishes a forced named call with "stop", an auto or required one with "tool_calls".
    const finishReason = typeof request.toolChoice === 'object' ? 'stop' : 'tool_calls'
    return finish({ tokens: [], finishReason, toolCalls: [{ name: tool.name, arguments: args }] })
  }
  if (request.structured) {
    // Guided output is never cut by max_tokens here, so it always parses.
    return finish({ tokens: fragments(guidedText(request.structured, words()), key()), finishReason: 'stop' })
  }
  if (answeringTool && lastMessage) {
    const lead = `The tool returned: ${lastMessage.content}.`.split(/(?= )/)
    const tokens = [...lead, ...filler().tokens.map((t, i) => (i === 0 ? ` ${t}` : t))]
    const cap = generate.maxTokens === undefined ? tokens.length : Math.max(1, generate.maxTokens)
    return finish({ tokens: tokens.slice(0, cap), finishReason: tokens.length > cap ? 'length' : 'stop' })
  }
  const text = generateCompletion(generate)
  // echo with max_tokens 0: vLLM answers the prompt alone (it generates one token and drops it).
  if (request.echo && generate.maxTokens === 0) return finish({ tokens: [], finishReason: 'length' })
  return finish({ tokens: text.tokens, finishReason: text.finishReason, ...(text.stopString !== undefined ? { stopString: text.stopString } : {}) })
}

/** The tool to call, if any: the named one, else the first, unless tool_choice is "none" or "auto" after a tool result. */
function chosenTool(request: GenerationRequest, answeringTool: boolean): ToolSpec | undefined {
  const choice = request.toolChoice
  if (request.tools.length === 0 || choice === 'none') return undefined
  if (typeof choice === 'object') return request.tools.find((t) => t.name === choice.name)
  // "auto" answers a tool result with text, so an agent loop ends; "required" always calls.
  if (choice === 'auto' && answeringTool) return undefined
  return request.tools[0]
}

function guidedText(structured: StructuredOutput, words: readonly string[]): string {
  switch (structured.kind) {
    case 'json':
      return JSON.stringify(
        structured.schema === undefined ? { answer: words.slice(0, 4).join(' ') } : schemaInstance(structured.schema, { words }),
      )
    case 'choice':
      return structured.choices[0] ?? ''
    case 'regex':
      return regexInstance(structured.pattern)
  }
}

/** Cuts text into token-sized fragments (1 to 6 characters, never inside a surrogate pair). */
export function fragments(text: string, seed: string): string[] {
  const chars = [...text]
  const next = createPrng(hashString(`fragments:${seed}`))
  const out: string[] = []
  for (let i = 0; i < chars.length; ) {
    const size = 1 + Math.floor(next() * MAX_FRAGMENT_CHARS)
    out.push(chars.slice(i, i + size).join(''))
    i += size
  }
  return out.length > 0 ? out : ['']
}
