/**
 * Serves a completion through Runpod's OpenAI-compatible route (`/openai/v1/*`): the body is vLLM's own
 * OpenAI dialect, so podgate only renames the model to the caller's alias and keeps usage for itself.
 *
 * A stream is answered only once its first upstream bytes arrived, so an upstream that fails before
 * that (HTTP 5xx, 429, a body that breaks at once) is retried on the next endpoint; after it, the first
 * token, idle and total timeouts end the stream with an error event, never a clean ending.
 *
 * A stream whose bytes need no change is piped natively (streaming/openai-pipe.ts); one that does goes
 * through the JavaScript relay (streaming/openai-relay.ts), which reads the upstream body itself and
 * enforces the idle and total timeouts in one stream stage.
 */
import { OPENAI_ROUTE, toOpenAIBody } from '../normalize/index.ts'
import { isByteStream, pipeOpenAIStream, splitBody } from '../streaming/openai-pipe.ts'
import { createOpenAIRelay } from '../streaming/openai-relay.ts'
import type { RelayOutcome } from '../streaming/openai-relay.ts'
import { CALLER_GONE, GatewayError, upstreamError } from '../errors/index.ts'
import { jsonAnswerResponse } from '../pipeline/json-answer.ts'
import { retryableFailure, unsent, within } from './retry.ts'
import { errorItemFailure, isRecord, readUsage } from '../streaming/vllm.ts'
import { DIALECTS } from '../streaming/dialects.ts'
import { SSE_HEADERS } from './types.ts'
import type { CompletionCall, TokenUsage } from './types.ts'
import type { Endpoint } from './runpod/client.ts'

/** Reads one chunk, or cancels the upstream body and throws `upstream_timeout` after `ms`. */
function readWithin(reader: ReadableStreamDefaultReader<Uint8Array>, ms: number, message: string): Promise<ReadableStreamReadResult<Uint8Array>> {
  return within(reader.read(), ms, message).catch((error: unknown) => {
    reader.cancel().catch(() => undefined)
    throw error
  })
}

export async function openaiRouteCompletion(call: CompletionCall): Promise<Response> {
  const { request, model, client, plan } = call
  const started = Date.now()
  // vLLM's other routes: the path under `/v1`, as Runpod's OpenAI route (`/openai/v1/*`) is addressed.
  const path = (request.route?.path ?? OPENAI_ROUTE[request.kind]).slice('/v1'.length)
  const body = toOpenAIBody(request, model.servedModelName)

  if (request.stream) return openaiRouteStream(call, path, body, started)

  return plan.run(async (endpoint) => {
    // Each try waits only for what is left of the call's `timeouts.totalMs` (see RetryPlan.deadline).
    const timeoutMs = Math.min(call.runpod.timeoutMs, plan.deadline - Date.now())
    const json = (await client.openaiJson(endpoint, path, body, { signal: call.signal, timeoutMs })) as Record<string, unknown>
    // A classic worker's error item comes back on a 200 (worker-vllm#57): its code tells a refusal, as a job's does.
    const failure = errorItemFailure(json)
    if (failure) throw failure
    if (!isRecord(json) || (!request.route && !Array.isArray(request.kind === 'embedding' ? json.data : json.choices))) {
      throw upstreamError('The upstream answered with an unexpected completion shape.')
    }
    if (!request.route || typeof json.model === 'string') json.model = model.alias
    call.settle({ ok: true, usage: readUsage(json.usage) })
    return jsonAnswerResponse(json)
  })
}

/**
 * A stream needs the JavaScript relay only when a byte must change: the `model` name (streams carry the
 * alias, `streaming.rewriteModel` being on, and the endpoint serves another name) or the usage chunk (podgate asked for it
 * and the caller did not, and `streaming.usage` is `requested`). Otherwise the bytes are piped natively.
 */
export function needsRewrite(call: CompletionCall): boolean {
  const { model, request, streaming } = call
  // It renames the model, or strips the usage chunk.
  return !request.route && (model.streamedModelName !== model.servedModelName || (streaming.usage === 'requested' && !request.includeUsage))
}

async function openaiRouteStream(call: CompletionCall, path: string, body: Record<string, unknown>, started: number): Promise<Response> {
  const { model, client, plan, streaming } = call
  const generates = call.request.route?.generates
  const dialect = generates ? DIALECTS[generates.dialect] : undefined
  const { timeouts } = model.config.resilience
  let usage: TokenUsage | undefined
  const onUsage = (u: TokenUsage) => (usage = u)
  // The relay exists once the upstream answered: whatever ends it, the prompt was processed. With no
  // usage (a cut stream: vLLM sends it last), the relay's count of the events is charged.
  // A stream that failed counts against its endpoint as its failure says (a stall past `idleMs` does).
  const onEnd = (end: RelayOutcome) => (end.ok || plan.recordFailure(end.error, at), call.settle(end.ok ? { ...end, usage } : { ...end, producedOutput: end.started, usage, reachedUpstream: true }))
  /** The endpoint of the last try: the one that answered, once one did. */
  let at: Endpoint
  const open = async (endpoint: Endpoint, signal: AbortSignal | undefined) => {
    at = endpoint
    // A retry whose first-byte deadline passed in its backoff is not sent: no time is left to hear it.
    if (firstByteMs() <= 0) throw unsent()
    const upstream = await client.openai(endpoint, path, body, { signal, headersTimeoutOnly: true, timeoutMs: Math.min(call.runpod.timeoutMs, firstByteMs()) })
    if (!upstream.body) throw upstreamError('The upstream answered a stream request with no body.')
    return { body: upstream.body, fetched: upstream.url !== '' }
  }
  // A retry's first byte is waited for only until the first one's deadline, and never past `totalMs`.
  const firstByteMs = () => Math.min(started + timeouts.firstTokenMs, plan.deadline) - Date.now()

  const pipeable = !needsRewrite(call)
  const opened = await plan.run(async (endpoint) => {
    // The native pipe ends a stream by aborting its upstream request: each attempt gets its own abort.
    const upstream = pipeable ? new AbortController() : undefined
    const signal = upstream && call.signal ? AbortSignal.any([call.signal, upstream.signal]) : (upstream?.signal ?? call.signal)
    const { body: answer, fetched } = await open(endpoint, signal)
    // Decided before the first read: a BYOB reader can only be tried on an unlocked stream.
    // Another dialect's stream is always piped: only OpenAI's has a JavaScript relay, which rewrites it.
    // Only a byte stream (a fetch body: it takes a BYOB reader) is piped: workerd cannot abort a pipe
    // from a JavaScript stream while its read is pending, so a timeout could not end a stalled one
    // (in-process upstreams such as `podgate/testing`'s emulator take the JavaScript relay instead). A
    // JavaScript stream of `type: 'bytes'` from a custom `fetch` passes: if it stalls, the timeout still
    // settles the request at once, and the caller's stream ends when its pending read does; if it errors,
    // its `tee` drops what the pipe's copy had not read yet, so a break just after `[DONE]` settles as
    // failed (docs/passthrough.md).
    const piped = upstream && (dialect !== undefined || isByteStream(answer)) ? upstream : undefined
    // Natively only what fetch answered (its Response has a `url`): workerd `tee`s a body made in the
    // isolate (a custom fetch's string, bytes or Blob, an IdentityTransformStream's readable side) into
    // branches that cannot be piped into the caller's IdentityTransformStream, and that pipe never ends
    // (its "Inter-TransformStream ReadableStream.pipeTo() is not implemented" escapes uncaught). Such a
    // body looks like a fetch body a custom fetch wrapped anew: every Response fetch did not answer is
    // piped through a JavaScript stream.
    const stream = piped && !fetched ? answer.pipeThrough(new TransformStream<Uint8Array, Uint8Array>()) : answer
    // A piped stream is split first and its first chunk read from the copy, so that every byte reaches
    // the caller natively (openai-pipe.ts); both branches are cancelled if the attempt fails.
    const split = piped ? splitBody(stream) : undefined
    const reader = (split?.copy ?? stream).getReader()
    const first = await readWithin(reader, firstByteMs(), FIRST_TOKEN_MESSAGE).catch((error: unknown) => {
      split?.cancel(error)
      return brokeBeforeFirstByte(error, call.signal?.aborted)
    })
    if (first.done) {
      split?.cancel()
      throw retryableFailure(upstreamError(ENDED_MESSAGE))
    }
    return { reader, first: first.value, piped, split }
  })
  const { reader, first, piped, split } = opened
  if (piped && split) {
    reader.releaseLock()
    // A custom fetch that ignores its signal may answer after the caller left: nothing would read or
    // cancel the piped answer, and such an upstream generates on until its body is cancelled. (The
    // JavaScript relay checks the same itself.)
    if (call.signal?.aborted) {
      const gone = upstreamError(CALLER_GONE)
      split.cancel(gone)
      throw gone
    }
    const { copy } = call
    if (copy) copy.piped = true
    const native = pipeOpenAIStream({ body: split, first, abortUpstream: (reason) => piped.abort(reason), totalDeadline: plan.deadline, idleMs: timeouts.idleMs, onUsage, onEnd, dialect, signal: call.signal, onText: copy?.text, onCopyEnd: copy?.end, readOn: copy?.readOn })
    return new Response(native, { headers: SSE_HEADERS })
  }
  const relay = createOpenAIRelay({
    source: reader,
    first,
    model: model.streamedModelName,
    includeUsage: call.request.includeUsage || streaming.usage === 'always',
    idleMs: timeouts.idleMs,
    totalDeadline: plan.deadline,
    onUsage,
    onEnd,
    signal: call.signal,
  })
  return new Response(relay, { headers: SSE_HEADERS })
}

const FIRST_TOKEN_MESSAGE = 'The model produced no first token in time.'
const ENDED_MESSAGE = 'The upstream stream ended before its first byte.'

/**
 * A first-byte timeout stays one; any other failure before the first byte is worth another endpoint, but
 * the read a caller who left (`gone`) aborted: that is no failure of the endpoint's (its breaker's count).
 */
function brokeBeforeFirstByte(error: unknown, gone: boolean | undefined): never {
  if (gone) throw upstreamError(CALLER_GONE, { cause: error })
  if (error instanceof GatewayError && error.code === 'upstream_timeout') throw error
  throw retryableFailure(upstreamError('The upstream stream broke before its first byte.', { cause: error }))
}
