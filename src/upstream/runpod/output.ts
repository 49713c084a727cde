/**
 * Maps the `output` of a finished native worker-vllm job (`/runsync`, `/status`) to an OpenAI response,
 * whichever worker generation wrote it (runpod-api.md §3).
 *
 * Owns: recognizing the output shapes (classic token lists, vLLM's own completion JSON, and SSE text a
 * streaming worker aggregated), rewriting model (and id where vLLM wrote none), and turning error shapes into `GatewayError`.
 * Token items and SSE text go through the stream decoder, so both modes infer finish_reason alike.
 */
import { GatewayError, upstreamError } from '../../errors/index.ts'
import type { RequestKind } from '../../normalize/types.ts'
import { createNativeStreamDecoder } from '../../streaming/native-decoder.ts'
import { countedUsage, jsonMessage } from '../../streaming/openai-chunks.ts'
import type {
  ChatCompletion,
  ChatCompletionChoice,
  CompletionChunk,
  FinishReason,
  TextCompletion,
  TextCompletionChoice,
  Usage,
} from '../../streaming/openai-chunks.ts'
import { isRecord, readUsage, throwErrorItem } from '../../streaming/vllm.ts'

export interface NativeOutputOptions {
  kind: RequestKind
  /** The podgate alias written into the body's `model`. */
  model: string
  /** The id of a body podgate assembles (`chatcmpl-…` / `cmpl-…`); vLLM's own JSON keeps its id. */
  id: string
  /** Unix seconds, the `created` of a body podgate assembles. */
  created: number
  /** The request's `max_tokens`, for the finish_reason of classic output. */
  maxTokens: number
  /** The request's `n`: an output with fewer choices is refused, as a partial answer must not look whole. */
  n: number
}

export interface NativeOutput {
  /** Its `usage` is the worker's, or null when the worker reported none: podgate shows no count of its own. */
  body: ChatCompletion | TextCompletion
  /** The worker's usage, if it reported any. */
  usage?: Usage
  /** When the worker reported no usage: podgate's count (`prompt_tokens` 0), for the quota only (see `UsageMeta`). */
  estimate?: Usage
}

function checkChoices(result: NativeOutput, n: number): NativeOutput {
  if (result.body.choices.length < n) {
    throw upstreamError(`The model worker returned ${result.body.choices.length} of the ${n} choices asked for.`)
  }
  return result
}

/** vLLM's own `chat.completion` / `text_completion` JSON (current worker-vllm). */
function fromCompletionBody(body: Record<string, unknown>, options: NativeOutputOptions): NativeOutput {
  const expected = options.kind === 'chat' ? 'chat.completion' : 'text_completion'
  if (body.object !== expected || !Array.isArray(body.choices) || !body.choices.every(isRecord)) {
    throw upstreamError(`The model worker returned something other than a ${expected}.`)
  }
  body.id ??= options.id
  body.model = options.model
  body.created ??= options.created
  // Checked above as far as podgate relies on; every other field is vLLM's, passed on as written.
  const answer = body as unknown as ChatCompletion | TextCompletion
  const usage = readUsage(body.usage)
  if (usage) return { body: answer, usage }
  // No usage from vLLM: about four characters a token, so quotas still move.
  // Output is also a reasoning model's thinking (vLLM may write it under both names: counted once) and a
  // tool call's name and arguments.
  let chars = 0
  for (const choice of body.choices as Record<string, unknown>[]) {
    const message = (isRecord(choice.message) ? choice.message : { content: choice.text }) as { tool_calls?: unknown } & Record<string, unknown>
    const calls = Array.isArray(message.tool_calls) ? (message.tool_calls as { function?: Record<string, unknown> }[]) : []
    for (const text of [message.content, message.reasoning_content ?? message.reasoning, ...calls.flatMap((call) => [call?.function?.name, call?.function?.arguments])]) {
      if (typeof text === 'string') chars += text.length
    }
  }
  const completion = Math.ceil(chars / 4)
  return { body: answer, estimate: countedUsage(completion) }
}

/** Classic token items, or SSE text a streaming worker yielded: decoded like a stream, then joined. */
function fromStreamItems(items: unknown[], options: NativeOutputOptions): NativeOutput {
  const { kind, model, id, created, maxTokens } = options
  const texts: string[][] = []
  const reasons: (FinishReason | null)[] = []
  let usage: Usage | undefined
  let estimate: Usage | undefined
  const decoder = createNativeStreamDecoder({
    kind,
    model,
    id,
    created,
    maxTokens,
    onChunk(chunk: CompletionChunk) {
      for (const choice of chunk.choices) {
        const text = 'delta' in choice ? choice.delta.content : choice.text
        const parts = (texts[choice.index] ??= [])
        if (typeof text === 'string' && text !== '') parts.push(text)
        if (choice.finish_reason != null) reasons[choice.index] = choice.finish_reason
      }
    },
    onUsage(reported, { estimated }) {
      if (estimated) estimate = reported
      else usage = reported
    },
  })
  try {
    for (const item of items) decoder.push(item)
    decoder.finish()
  } catch (error) {
    // The decoder speaks of streamed items; this output came whole, from `/runsync` or `/status`.
    if (error instanceof GatewayError && error.message.includes('streamed')) throw new GatewayError(error.code, error.message.replace('streamed', 'returned'), { cause: error })
    throw error
  }

  // flatMap, not map: an index no chunk named leaves no hole in the list.
  const choices = texts.flatMap((parts, index): Array<ChatCompletionChoice | TextCompletionChoice> => {
    const content = parts.join('')
    const finish_reason = reasons[index] ?? null
    return [{ index, ...(kind === 'chat' ? { message: jsonMessage(content) } : { text: content }), logprobs: null, finish_reason }]
  })
  const object = kind === 'chat' ? 'chat.completion' : 'text_completion'
  const body = { id, object, created, model, choices, usage: usage ?? null } as ChatCompletion | TextCompletion
  return { body, usage, estimate }
}

/**
 * @example
 * const { body, usage, estimate } = nativeOutputToOpenAI(job.output, { kind: 'chat', model: 'llama-8b',
 *   id: 'chatcmpl-1', created: 1_700_000_000, maxTokens: 256, n: 1 })
 */
export function nativeOutputToOpenAI(output: unknown, options: NativeOutputOptions): NativeOutput {
  // A list because Runpod aggregates a handler's yields; runpod-python's local server hands back what
  // the handler returned, so a bare value, or a generator's yielded lists, are read the same way.
  const items: unknown[] = output == null ? [] : Array.isArray(output) ? output.flatMap((item: unknown) => (Array.isArray(item) ? item : [item])) : [output]
  if (items.length === 0) throw upstreamError('The model worker returned no output.')
  throwErrorItem(items)
  const first = items[0]
  if (isCompletionBody(first)) {
    if (items.length !== 1) throw upstreamError('The model worker returned several completions for one request.')
    return checkChoices(fromCompletionBody(first, options), options.n)
  }
  return checkChoices(fromStreamItems(items, options), options.n)
}

/**
 * The usage a COMPLETED job's `output` reports (classic items' `usage`, vLLM's JSON or its SSE usage
 * chunk), or, when it reports none, podgate's count of its output (`estimate`, which the quota charges
 * with the prompt estimate). An output that breaks off (an error event or item) or that podgate cannot
 * read counts what was read before it, as a stream cut short does. Leaves `output` unchanged.
 *
 * @example
 * const { usage, estimate } = reportedUsage(job.output, 'chat', 256) // a `/runsync` settles its quota from it
 */
export function reportedUsage(output: unknown, kind: RequestKind, maxTokens: number): Pick<NativeOutput, 'usage' | 'estimate'> {
  const items: unknown[] = Array.isArray(output) ? output.flat() : [output]
  // Read in place: nativeOutputToOpenAI rewrites a whole answer's id and model, which the caller gets.
  if (isCompletionBody(items[0])) return { usage: readUsage(items[0].usage) }
  let counted = {}
  const decoder = createNativeStreamDecoder({ kind, model: '', id: '', created: 0, maxTokens, onChunk() {}, onUsage: (usage, { estimated }) => (counted = { [estimated ? 'estimate' : 'usage']: usage }) })
  try {
    for (const item of items) decoder.push(item)
    decoder.finish()
  } catch {
    decoder.cut?.()
  }
  return counted
}

/**
 * Whether an output item is a whole answer (current worker-vllm's `stream: false` output, vLLM's
 * `chat.completion` or `text_completion`) rather than a stream item; `nativeOutputToOpenAI` reads it.
 */
export function isCompletionBody(item: unknown): item is Record<string, unknown> {
  // A primitive, a list or null reads no `object`.
  return typeof (item as { object?: unknown } | null | undefined)?.object === 'string'
}
