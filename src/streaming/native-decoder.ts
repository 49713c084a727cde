/**
 * Turns the `/stream` items of one native worker-vllm job into OpenAI chunks, whichever worker generation
 * produced them (runpod-api.md §3), so a native stream reads exactly like one from the `/openai/v1` route.
 *
 * Owns: telling the item shapes apart (classic token batches, SSE text whole or cut anywhere, a classic
 * worker's chunk lists under `RAW_OPENAI_OUTPUT=0`, error items), synthesizing what classic output lacks (role chunk, finish_reason, OpenAI usage), and refusing
 * to call a stream complete that the model never finished.
 */
import { createParser } from 'eventsource-parser'
import type { EventSourceMessage, EventSourceParser } from 'eventsource-parser'
import { GatewayError, toGatewayError, upstreamError } from '../errors/index.ts'
import type { RequestKind } from '../normalize/types.ts'
import { countedUsage } from './openai-chunks.ts'
import type { ChatCompletionChunk, CompletionChunk, FinishReason, Usage } from './openai-chunks.ts'
import { DEFAULT_MAX_EVENT_CHARS, errorItemFailure, isCount, isRecord, readUsage, refuseOversizedEvent, upstreamErrorMessage, workerFailure } from './vllm.ts'

function unknownOutput(item: unknown): GatewayError {
  const what = item === null ? 'null' : Array.isArray(item) ? 'a list' : typeof item
  return upstreamError(`The model worker streamed an item podgate does not understand (${what}).`)
}

export interface UsageMeta {
  /**
   * `true` when the upstream never reported usage and podgate counted instead: `prompt_tokens` is 0 and
   * `completion_tokens` is the number of output deltas (SSE: content, reasoning or tool calls) or generation steps (classic). A current
   * worker-vllm's shorthand stream always ends so (its body to vLLM asks for no usage chunk). Such a
   * count is for the quota only: no caller may be shown it as usage.
   */
  estimated: boolean
}

/** `{"choices":[{"tokens":[...]}],"usage":{"input":5,"output":3}}`, or undefined for any other shape. */
function readClassicItem(item: unknown): ClassicItem | undefined {
  if (!isRecord(item) || !Array.isArray(item.choices)) return undefined
  const choices: string[][] = []
  for (const choice of item.choices as unknown[]) {
    if (!isRecord(choice) || !Array.isArray(choice.tokens)) return undefined
    const tokens: unknown[] = choice.tokens
    for (const token of tokens) if (typeof token !== 'string') return undefined
    choices.push(tokens as string[])
  }
  const usage = item.usage
  const counted = isRecord(usage) && isCount(usage.input) && isCount(usage.output)
  return { choices, usage: counted ? { input: usage.input as number, output: usage.output as number } : undefined }
}

export interface NativeDecoderOptions {
  kind: RequestKind
  /** The name written into every chunk's `model` (`ResolvedModel.streamedModelName`: the alias, unless `streaming.rewriteModel` is off). */
  model: string
  /** The id of the chunks podgate writes from classic token items (`chatcmpl-…` / `cmpl-…`); vLLM's chunks keep theirs. */
  id: string
  /** Unix seconds, the `created` of the chunks podgate writes; vLLM's chunks keep theirs. */
  created: number
  /** The request's `max_tokens`: classic output has no finish_reason, so `length` is inferred from it. */
  maxTokens: number
  /** Called with each chunk in wire order. The usage chunk is never passed here (see `onUsage`). */
  onChunk(chunk: CompletionChunk): void
  /**
   * Called at most once with the answer's usage: as soon as an SSE usage chunk arrives, else from
   * `finish()` (classic `usage` items, or a count flagged `estimated`).
   */
  onUsage?(usage: Usage, meta: UsageMeta): void
  /**
   * Called with vLLM's own usage chunk (SSE output only; `model` rewritten), so a
   * caller who asked for usage gets it whole (`prompt_tokens_details` and all).
   */
  onUsageChunk?(chunk: Record<string, unknown>): void
  /** Most characters one SSE event may buffer before the stream is refused. Default 4 Mi. */
  maxEventChars?: number
}

export interface NativeStreamDecoder {
  /** Accepts the `output` of one `/stream` item. Throws `GatewayError('upstream_error')` on a failure. */
  push(item: unknown): void
  /** The job reached COMPLETED: emits the closing chunks, or throws if the answer is incomplete. */
  finish(): void
  /**
   * The answer broke off before `finish()`: reports the usage so far through `onUsage` unless reported
   * already (a classic worker's last count, else podgate's, flagged `estimated`), so a cut answer is
   * charged what it produced.
   */
  cut?(): void
}

interface ClassicItem {
  choices: string[][]
  usage: { input: number; output: number } | undefined
}

function unknownEvent(): GatewayError {
  return upstreamError('The model worker streamed an event podgate does not understand.')
}

interface ClassicChoice {
  /** Token deltas seen; the worker appends one per generation step. */
  steps: number
  /** The step of the last non-empty delta: a choice that already stopped keeps receiving `""` (n > 1). */
  lastTextStep: number
}

/**
 * @example
 * const decoder = createNativeStreamDecoder({
 *   kind: 'chat', model: 'llama-8b', id: 'chatcmpl-1', created: 1_700_000_000, maxTokens: 256,
 *   onChunk: (chunk) => send(encodeSSEData(JSON.stringify(chunk))),
 *   onUsage: (usage, { estimated }) => settle(usage, estimated),
 * })
 * for (const item of page.stream) decoder.push(item.output)
 * if (page.status === 'COMPLETED') decoder.finish()
 */
export function createNativeStreamDecoder(options: NativeDecoderOptions): NativeStreamDecoder {
  const { kind, model, id, created, maxTokens, onChunk, onUsage } = options
  const chunkObject = kind === 'chat' ? 'chat.completion.chunk' : 'text_completion'
  let shape: 'classic' | 'sse' | undefined
  let failure: GatewayError | undefined
  let finished = false
  let usageReported = false

  const classicChoices: ClassicChoice[] = []
  let classicUsage: ClassicItem['usage']

  // One parser for the whole job: the current worker cuts vLLM's SSE text at arbitrary points, so an
  // event (or a line ending) may start in one item and end in the next.
  let parser: EventSourceParser | undefined
  let sawDone = false
  /** The chunks came as lists of objects, which end with the job, never with `[DONE]`. */
  let listed = false
  /** Per choice index: its finish_reason, `null` while open. */
  const finishReasons: (FinishReason | null)[] = []
  let outputDeltas = 0

  function push(item: unknown): void {
    if (failure) throw failure
    if (finished) throw new GatewayError('internal_error', 'The stream decoder got an item after finish().')
    try {
      accept(item)
    } catch (error) {
      failure = toGatewayError(error)
      throw failure
    }
  }

  function finish(): void {
    if (failure) throw failure
    if (finished) return
    finished = true
    try {
      if (shape === undefined) throw upstreamError('The model worker finished without any output.')
      if (shape === 'classic') finishClassic()
      else finishSSE()
    } catch (error) {
      failure = toGatewayError(error)
      throw failure
    }
  }

  function useShape(next: 'classic' | 'sse'): void {
    if (shape === undefined) shape = next
    else if (shape !== next) throw upstreamError('The model worker mixed token items and SSE text in one stream.')
  }

  function acceptClassic(item: ClassicItem): void {
    const { choices } = item
    for (let index = classicChoices.length; index < choices.length; index++) {
      classicChoices.push({ steps: 0, lastTextStep: 0 })
      if (kind === 'chat') onChunk(chunk(index, { delta: { role: 'assistant', content: '' } }, null))
    }
    for (let index = 0; index < choices.length; index++) {
      const tokens = choices[index] as string[]
      const state = classicChoices[index] as ClassicChoice
      for (const token of tokens) {
        state.steps++
        if (token !== '') state.lastTextStep = state.steps
      }
      const text = tokens.length === 1 ? (tokens[0] as string) : tokens.join('')
      if (text === '') continue
      outputDeltas++
      onChunk(chunk(index, kind === 'chat' ? { delta: { content: text } } : { text }, null))
    }
    if (item.usage) classicUsage = item.usage
  }

  function finishClassic(): void {
    if (classicChoices.length === 0) throw upstreamError('The model worker finished without any choices.')
    // The choices the worker ran, which is what its `usage.output` counts across.
    const choiceCount = classicChoices.length
    const total = classicUsage?.output
    // Streamed batches give per-choice step counts; a `/runsync`-style item (one full-text token per
    // choice) does not, and only the total across choices is left.
    const perChoiceSteps = classicChoices.some((choice) => choice.steps > 1)
    // Classic worker-vllm reports no finish_reason, so it is inferred (sound in one direction: `length` is
    // only claimed when the count proves max_tokens was reached; a choice that hit it with multi-token steps
    // may read `stop`):
    // - one choice: `length` when `usage.output` (or the step count) reached max_tokens, else `stop`;
    // - n > 1, streamed: `usage.output` is the total across choices, so each choice is judged by the step of
    //   its last non-empty delta (a choice that stopped keeps receiving empty deltas while others run);
    // - n > 1, one full-text item per choice: only the total is known, so every choice reads `length` when
    //   it reached n × max_tokens, else `stop`.
    for (let index = 0; index < classicChoices.length; index++) {
      const state = classicChoices[index] as ClassicChoice
      const reachedMax = choiceCount <= 1
        ? Math.max(total ?? 0, state.lastTextStep) >= maxTokens
        : perChoiceSteps ? state.lastTextStep >= maxTokens : total !== undefined && total >= choiceCount * maxTokens
      onChunk(chunk(index, kind === 'chat' ? { delta: {} } : { text: '' }, reachedMax ? 'length' : 'stop'))
    }
    reportSoFar()
  }

  /** The usage known so far: classic items' last `usage`, else podgate's count (classic steps, SSE output deltas). */
  function reportSoFar(): void {
    if (classicUsage) {
      const { input, output } = classicUsage
      return reportUsage(countedUsage(output, input), false)
    }
    const counted = shape === 'classic' ? classicChoices.reduce((steps, choice) => steps + choice.steps, 0) : outputDeltas
    reportUsage(countedUsage(counted), true)
  }

  function acceptEvent(event: EventSourceMessage): void {
    if (sawDone) return
    const data = event.data
    if (data === '[DONE]') {
      sawDone = true
      return
    }
    let value: unknown
    try {
      value = JSON.parse(data)
    } catch (cause) {
      throw upstreamError('The model worker sent a stream event that is not JSON.', { cause })
    }
    acceptValue(value)
  }

  function acceptValue(value: unknown): void {
    const message = upstreamErrorMessage(value)
    if (message !== undefined) throw workerFailure(message)
    if (!isRecord(value) || !Array.isArray(value.choices)) throw unknownEvent()
    const choices: unknown[] = value.choices
    if (choices.length === 0) {
      // vLLM's usage chunk. A chunk with neither choices nor usage carries nothing to relay.
      const usage = readUsage(value.usage)
      if (usage) {
        if (!usageReported && options.onUsageChunk) {
          value.id ??= id
          value.model = model
          value.created ??= created
          options.onUsageChunk(value)
        }
        reportUsage(usage, false)
      }
      return
    }
    if (value.object !== chunkObject) {
      throw upstreamError(`The model worker streamed chunks of another kind than this ${kind} request.`)
    }
    for (const choice of choices) {
      if (!isRecord(choice) || !isCount(choice.index)) throw unknownEvent()
      const reason = choice.finish_reason
      if (typeof reason === 'string') finishReasons[choice.index] = reason
      else if (finishReasons[choice.index] === undefined) finishReasons[choice.index] = null
      // Output is also a reasoning model's thinking (`reasoning_content`, `reasoning` in newer vLLM) and a tool call's arguments.
      const delta = choice.delta
      if (kind === 'chat' ? isRecord(delta) && (delta.content || delta.reasoning_content || delta.reasoning || delta.tool_calls) : choice.text) outputDeltas++
    }
    value.id ??= id
    value.model = model
    value.created ??= created
    // Checked above as far as podgate relies on; every other field is vLLM's, relayed as written.
    onChunk(value as unknown as CompletionChunk)
  }

  function accept(item: unknown): void {
    if (typeof item === 'string') {
      useShape('sse')
      parser ??= createParser({ onEvent: acceptEvent, onError: refuseOversizedEvent, maxBufferSize: options.maxEventChars ?? DEFAULT_MAX_EVENT_CHARS })
      parser.feed(item)
      return
    }
    // A classic worker under RAW_OPENAI_OUTPUT=0: an `openai_route` job's chunks as objects, no `[DONE]`.
    if (Array.isArray(item) && item.length > 0 && item.every(isRecord)) {
      useShape('sse')
      listed = true
      for (const value of item) acceptValue(value)
      return
    }
    const failure = errorItemFailure(item)
    if (failure) throw failure
    const classic = readClassicItem(item)
    if (!classic) throw unknownOutput(item)
    useShape('classic')
    acceptClassic(classic)
  }

  function finishSSE(): void {
    // A final event whose blank line never came is still an event once the job is COMPLETED; a cut one
    // then fails as JSON instead of being dropped.
    parser?.feed('\n\n')
    let done = 0
    let open = 0
    for (const reason of finishReasons) {
      if (typeof reason === 'string') done++
      else if (reason === null) open++
    }
    if (!(sawDone || listed) || done === 0 || open > 0) {
      throw upstreamError('The model stream ended before the model finished.')
    }
    reportSoFar()
  }

  function reportUsage(usage: Usage, estimated: boolean): void {
    if (usageReported) return
    usageReported = true
    onUsage?.(usage, { estimated })
  }

  /** A chunk of one choice: `part` is its `delta` (chat) or its `text` (completions). */
  function chunk(index: number, part: { delta: ChatCompletionChunk['choices'][number]['delta'] } | { text: string }, reason: FinishReason | null): CompletionChunk {
    return { id, object: chunkObject, created, model, choices: [{ index, ...part, logprobs: null, finish_reason: reason }] } as CompletionChunk
  }

  return { push, finish, cut: reportSoFar }
}
