/**
 * What a job yields, decided when it is created: the ordered stream items, each stamped with the
 * generation step that produces it, and how the job ends. The job store turns steps into time, so
 * these shapes never depend on when or how often a client polls.
 *
 * Shapes follow shared/runpod-api.md §3: classic token batches, classic whole-SSE batches (OpenAI
 * passthrough, in each route's dialect), current raw SSE cut at byte boundaries, and the single-JSON
 * non-streaming outputs.
 */

import { DIALECTS, nativeRoute } from './dialects.ts'
import { createPrng, hashString, hexId } from './generate.ts'
import type { JobRequest } from './job-input.ts'
import { actingFault, complete, DEFAULT_MODEL_NAME, errorDialect, inBandError, modelList, refusalBody, sseEvent, wrongModel } from './openai-format.ts'
import type { Completion, CompletionMeta, TimedEvent } from './openai-format.ts'
import type { BatchSizing, Refusal } from './requests.ts'
import { servedRefusal } from './requests.ts'
import { pythonStr } from './python-str.ts'
import { answerUtility } from './utility-routes.ts'
import type { EndpointBehaviour, Fault, JsonObject, JsonValue, WorkerGeneration } from './types.ts'

/** A stream item and the step after which it exists (step 0: as soon as the job starts). */
export interface TimedItem {
  output: JsonValue
  step: number
}

export type JobEnding =
  | { kind: 'completed'; step: number }
  | { kind: 'failed'; step: number; error: string }
  | { kind: 'stalled' }

export interface JobScript {
  items: TimedItem[]
  ending: JobEnding
}

export interface JobScriptOptions {
  jobId: string
  generation: WorkerGeneration
  request: JobRequest
  /** The effective non-HTTP fault, if any. */
  fault?: Fault
  mangleUtf8: boolean
  /** True when tokens arrive over time: item cuts then also fall where the worker waited for a token. */
  paced: boolean
  servedModelName?: string
  /** Unix seconds for the `created` field of OpenAI bodies. */
  created: number
  /** How the endpoint's vLLM was started. */
  served: Pick<EndpointBehaviour, 'enableAutoToolChoice' | 'maxLogprobs' | 'reasoningFields' | 'embeddingDimensions' | 'messagesDone'> & Partial<Pick<EndpointBehaviour, 'rawOpenAIOutput'>>
}

const MAX_CUT_BYTES = 200

/** Builds everything a job will ever yield. */
export function buildJobScript(options: JobScriptOptions): JobScript {
  const { request, generation } = options
  let { fault } = options
  // runpod-python (since 1.7.6, Dec 2024; worker-vllm pins 1.11 and 1.12) ends a job at the first dict
  // item with a truthy `error`: that item is not streamed nor kept in `output`, and the job's `error`
  // is Python's `str()` of it: the text itself, or a dict's repr (`{'message': …, 'code': None}`).
  const failWith = (item: JsonObject, step = 0, items: TimedItem[] = []): JobScript => ({
    items,
    ending: { kind: 'failed', step, error: pythonStr(item.error) },
  })
  const fail = (message: string, step = 0, items: TimedItem[] = []): JobScript => failWith(errorItem(generation, message), step, items)

  // vLLM's refusals: the current worker wraps vLLM's HTTP error body into its own error item (its
  // status is lost); the classic worker runs vLLM in-process and yields the error body itself, whose
  // error object, code and all, becomes the job's error.
  const refuse = (refusal: Refusal): JobScript => {
    if (generation === 'classic') return failWith(classicRefusalItem(refusal))
    return fail(`vLLM returned HTTP ${refusal.status}: ${JSON.stringify(refusalBody(refusal))}`)
  }
  if (request.shape === 'invalid') return fail(request.message)
  if (request.shape === 'refused') return refuse(request.refusal)
  if (fault?.kind === 'job_failed') {
    // A handler that raises before yielding. worker-vllm's handlers are async generators, so runpod-python
    // reports it as `run_job_generator` does (rp_job.py), in text with the traceback after it; the JSON
    // of `error_type` / `error_message` is `run_job`'s, for plain function handlers only.
    return { items: [], ending: { kind: 'failed', step: 0, error: handlerException() } }
  }
  if (request.shape === 'openai' && request.route === '/v1/models') {
    const model = options.servedModelName ?? DEFAULT_MODEL_NAME
    return { items: [{ output: modelList(model, options.created), step: 0 }], ending: { kind: 'completed', step: 0 } }
  }

  const { servedModelName } = options
  if (request.shape === 'utility') {
    const named = (request.body as { model?: unknown } | null | undefined)?.model
    const misnamed = wrongModel({ served: servedModelName, model: named, route: request.route })
    if (misnamed) return refuse(misnamed)
    const result = answerUtility(request.route, request.body, {
      model: servedModelName ?? (typeof named === 'string' ? named : DEFAULT_MODEL_NAME),
      idSuffix: hexId(options.jobId),
      created: options.created,
      embeddingDimensions: options.served.embeddingDimensions,
    })
    return result.ok ? { items: [{ output: result.body, step: 0 }], ending: { kind: 'completed', step: 0 } } : refuse(result.refusal)
  }
  const req = request.request
  const route = request.shape === 'native' ? nativeRoute(req) : request.route
  const dialect = DIALECTS[route]
  // A classic worker's native generation writes no SSE: an in-band error is its error item there.
  fault = actingFault(fault, req.stream, generation === 'classic' && request.shape === 'native' ? undefined : route)
  const served = request.shape === 'openai' ? servedRefusal(req, options.served) : undefined
  const refusal = request.shape === 'openai' ? (wrongModel({ served: servedModelName, model: req.model, route }) ?? (served && { ...served, dialect: errorDialect(route) })) : undefined
  if (refusal) return refuse(refusal)
  const completion = complete(req)
  const meta: CompletionMeta = {
    id: dialect.id(options.jobId),
    created: options.created,
    model: servedModelName ?? req.model ?? DEFAULT_MODEL_NAME,
    reasoningFields: options.served.reasoningFields,
    messagesDone: options.served.messagesDone,
  }
  const cutoff = fault && 'afterTokens' in fault ? Math.min(fault.afterTokens, completion.steps) : undefined

  let items: TimedItem[]
  if (!req.stream) {
    const single =
      generation === 'classic' && request.shape === 'native' ? classicSingle(completion) : dialect.json(completion, meta)
    items = cutoff === undefined ? [{ output: single, step: completion.steps }] : []
  } else if (generation === 'classic' && request.shape === 'native') {
    items = classicBatches(completion, request.batching, cutoff)
  } else {
    // A usage chunk only when the body asked for one: OpenAI input with `stream_options.include_usage` (never the shorthand).
    let events = dialect.events(completion, meta)
    if (cutoff !== undefined) events = events.filter((e) => e.step <= cutoff && e.kind === 'chunk')
    // vLLM's SSE as the worker relays it, in-band error and `[DONE]` included: the job itself completes.
    if (fault?.kind === 'error_event') events = [...events, ...inBandError(cutoff ?? 0)]
    items =
      generation === 'classic'
        ? wholeEventBatches(events, dialect.classicBatching, options.served.rawOpenAIOutput === false && (route === '/v1/chat/completions' || route === '/v1/completions'))
        : cutEvents(events, { seed: options.jobId, mangleUtf8: options.mangleUtf8, paced: options.paced })
  }

  if (fault?.kind === 'stall') return { items, ending: { kind: 'stalled' } }
  if (fault?.kind === 'mid_stream') {
    const step = cutoff ?? 0
    const message = `Emulated worker failure after ${step} tokens (fault=mid_stream).`
    // The classic worker's native path catches any exception of a generation in vLLMEngine.generate
    // (engine.py) and yields vLLM's whole error body for it, stamped 400 by create_error_response's
    // defaults whatever went wrong: its code says nothing about the request, its message does (here
    // vLLM V1's EngineDeadError, an engine that died mid-generation).
    if (generation === 'classic' && request.shape === 'native') {
      const dead = `${message} EngineCore encountered an issue. See stack trace (above) for the root cause.`
      return failWith({ error: { error: { message: dead, type: 'BadRequestError', param: null, code: 400 } } }, step, items)
    }
    return fail(message, step, items)
  }
  return { items, ending: { kind: 'completed', step: fault?.kind === 'error_event' ? (cutoff ?? 0) + 1 : completion.steps } }
}

/**
 * What worker-vllm <= v2.23 (engine.py) yields for a refusal: vLLM's error body, except from its Responses
 * and Messages handlers, which answer a body their request model refuses with their own "Invalid request
 * format", and (Messages) read an ErrorResponse's `type` and `message` with getattr defaults, which a
 * vLLM ErrorResponse (its fields are under `error`) never has: "internal_error", "Unknown error".
 */
function classicRefusalItem(refusal: Refusal): JsonObject {
  if (refusal.dialect === 'anthropic') {
    return { type: 'error', error: refusal.schema ? { type: 'invalid_request_error', message: 'Invalid request format' } : { type: 'internal_error', message: 'Unknown error' } }
  }
  return refusalBody(refusal.schema ? { ...refusal, message: 'Invalid request format' } : refusal)
}

/** The error item of a worker generation (§3): a string for classic, an object for current. */
export function errorItem(generation: WorkerGeneration, message: string): JsonObject {
  return generation === 'classic' ? { error: message } : { error: { message, type: 'worker_error', code: null } }
}

/** worker-vllm's BatchSize: grows by `growth` from `min` up to `max`, or stays at `max` when not dynamic. */
function batchSizes(sizing: BatchSizing): () => number {
  const dynamic = sizing.growth > 1 && sizing.min >= 1 && sizing.max > sizing.min
  let current = dynamic ? sizing.min : sizing.max
  return function nextSize() {
    const size = current
    if (dynamic) current = Math.min(current * sizing.growth, sizing.max)
    return size
  }
}

function classicSingle(completion: Completion): JsonObject {
  return {
    choices: completion.choices.map((c) => ({ tokens: [c.text] })),
    usage: { input: completion.promptTokens, output: completion.completionTokens },
  }
}

/** Classic native streaming: token deltas of all choices counted together into growing batches. */
function classicBatches(completion: Completion, sizing: BatchSizing, cutoff?: number): TimedItem[] {
  const nextSize = batchSizes(sizing)
  const lastStep = cutoff ?? completion.steps
  const items: TimedItem[] = []
  let size = nextSize()
  let batch = completion.choices.map((): string[] => [])
  let inBatch = 0
  let total = 0
  const flush = (step: number) => {
    items.push({
      step,
      output: {
        choices: batch.map((tokens) => ({ tokens })),
        usage: { input: completion.promptTokens, output: total },
      },
    })
    batch = completion.choices.map((): string[] => [])
    inBatch = 0
  }
  for (let step = 1; step <= lastStep; step++) {
    completion.choices.forEach((choice, index) => {
      const token = choice.tokens[step - 1]
      if (token === undefined) return
      batch[index]?.push(token)
      total++
      inBatch++
      if (inBatch >= size) {
        flush(step)
        size = nextSize()
      }
    })
  }
  if (inBatch > 0) flush(lastStep)
  return items
}

/**
 * Classic OpenAI passthrough: whole SSE events joined into batches (growing ones for chat), `[DONE]`
 * counted as one. `objects` (chat and completions under `RAW_OPENAI_OUTPUT=0`): each batch is a list of
 * the events' parsed data instead, `[DONE]` left out and not counted, as engine.py does.
 */
function wholeEventBatches(events: readonly TimedEvent[], sizing: BatchSizing, objects = false): TimedItem[] {
  const nextSize = batchSizes(sizing)
  const items: TimedItem[] = []
  const output = (batch: TimedEvent[]): JsonValue => (objects ? batch.map((e) => JSON.parse(e.data) as JsonValue) : batch.map((e) => sseEvent(e)).join(''))
  let size = nextSize()
  let batch: TimedEvent[] = []
  for (const event of events) {
    if (objects && event.kind === 'done') continue
    batch.push(event)
    if (batch.length >= size) {
      items.push({ output: output(batch), step: event.step })
      batch = []
      size = nextSize()
    }
  }
  const last = batch.at(-1)
  if (last) items.push({ output: output(batch), step: last.step })
  return items
}

/**
 * Current worker: the SSE bytes cut at pseudo-random offsets seeded by the job id, so an event (and,
 * with `mangleUtf8`, a multibyte character) can straddle two items, as on the real worker.
 */
function cutEvents(events: readonly TimedEvent[], options: { seed: string; mangleUtf8: boolean; paced: boolean }): TimedItem[] {
  const encoder = new TextEncoder()
  const ends: Array<{ end: number; step: number }> = []
  const chunks: Uint8Array[] = []
  let length = 0
  for (const event of events) {
    const bytes = encoder.encode(sseEvent(event))
    chunks.push(bytes)
    length += bytes.length
    ends.push({ end: length, step: event.step })
  }
  const bytes = new Uint8Array(length)
  let offset = 0
  for (const chunk of chunks) {
    bytes.set(chunk, offset)
    offset += chunk.length
  }

  const next = createPrng(hashString(options.seed))
  const cuts = new Set<number>([length])
  for (let at = 0; at < length; ) {
    at += 1 + Math.floor(next() * MAX_CUT_BYTES)
    cuts.add(Math.min(at, length))
  }
  if (options.paced) {
    // The worker cannot read bytes vLLM has not written yet: a read ends wherever a step's events end.
    ends.forEach((e, i) => {
      if (ends[i + 1]?.step !== e.step) cuts.add(e.end)
    })
  }
  const boundaries = [...cuts].sort((a, b) => a - b)
  const items: TimedItem[] = []
  let start = 0
  let eventIndex = 0
  for (let cut of boundaries) {
    if (!options.mangleUtf8) {
      // Back off to the start of the character the cut falls in; if that leaves nothing, go forward.
      while (cut > start && isContinuationByte(bytes[cut])) cut--
      if (cut === start) {
        cut++
        while (cut < length && isContinuationByte(bytes[cut])) cut++
      }
    }
    if (cut <= start) continue
    while ((ends[eventIndex]?.end ?? length) < cut) eventIndex++
    // A fresh decoder per cut: split characters become U+FFFD, like Python's errors="replace".
    const text = new TextDecoder().decode(bytes.subarray(start, cut))
    items.push({ output: text, step: ends[eventIndex]?.step ?? 0 })
    start = cut
  }
  return items
}

function isContinuationByte(byte: number | undefined): boolean {
  return byte !== undefined && (byte & 0xc0) === 0x80
}

function handlerException(): string {
  const message = 'Emulated handler failure (fault=job_failed).'
  const traceback = `Traceback (most recent call last):\n  File "/src/handler.py", line 1, in handler\nRuntimeError: ${message}\n`
  return `handler: ${message} \ntraceback: ${traceback}`
}
