/**
 * Serves a completion through worker-vllm's native job API: `/runsync` (+ `/status` polling) for JSON
 * answers, `/run` + `/stream/{id}` long polling for SSE. Whatever the worker generation, the caller
 * gets the same OpenAI shapes as from the OpenAI route.
 *
 * A job outlives the HTTP call that started it (runpod-api.md §1), so every path that gives up on a job
 * (caller gone, timeout, broken stream) cancels it upstream: a GPU never runs for nobody.
 */
import { GatewayError, toGatewayError } from '../errors/index.ts'
import { toNativeInput } from '../normalize/index.ts'
import { createNativeStreamDecoder } from '../streaming/native-decoder.ts'
import { DONE, encodeSSEData, sseErrorEvent } from '../streaming/openai-chunks.ts'
import { workerFailure } from '../streaming/vllm.ts'
import { nativeOutputToOpenAI } from './runpod/output.ts'
import { isTerminal } from './runpod/client.ts'
import type { JobStatus } from './runpod/client.ts'
import { completionId, SSE_HEADERS } from './types.ts'
import type { CompletionCall, TokenUsage } from './types.ts'

/** Most `/stream` polls one streamed answer may make: Workers cap subrequests per invocation. */
export const MAX_STREAM_POLLS = 900
const HEARTBEAT = new TextEncoder().encode(': keep-alive\n\n')

export async function nativeCompletion(call: CompletionCall): Promise<Response> {
  return call.request.stream ? nativeStream(call) : nativeJson(call)
}

async function nativeJson(call: CompletionCall): Promise<Response> {
  const { client, endpoint, runpod, request, model } = call
  const deadline = Date.now() + runpod.timeoutMs
  let job = await client.runsync(endpoint, { input: toNativeInput(request) }, { waitMs: Math.min(runpod.runsyncWaitMs, runpod.timeoutMs), signal: call.signal })
  try {
    let delay = 250
    while (!isTerminal(job.status)) {
      if (call.signal?.aborted) throw new GatewayError('upstream_error', 'The request was cancelled.')
      if (Date.now() + delay > deadline) throw new GatewayError('upstream_timeout', 'The model did not finish in time.')
      await sleep(delay, call.signal)
      delay = Math.min(delay * 2, 2_000)
      job = await client.status(endpoint, job.id, { signal: call.signal })
    }
  } catch (error) {
    call.waitUntil(client.cancel(endpoint, job.id).catch(() => undefined))
    throw error
  }
  if (job.status !== 'COMPLETED') throw jobFailure(job)
  const { body, usage } = nativeOutputToOpenAI(job.output, {
    kind: request.kind,
    model: model.alias,
    id: completionId(request.kind),
    created: Math.floor(Date.now() / 1000),
    maxTokens: request.sampling.max_tokens,
    n: request.sampling.n ?? 1,
  })
  call.settle({ ok: true, usage })
  return Response.json(body)
}

async function nativeStream(call: CompletionCall): Promise<Response> {
  const { client, endpoint, runpod, request, model } = call
  const job = await client.run(endpoint, { input: toNativeInput(request) }, { signal: call.signal })
  const id = completionId(request.kind)
  const created = Math.floor(Date.now() / 1000)
  const object = request.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion'
  let usage: TokenUsage | undefined
  let pending: Uint8Array[] = []
  const decoder = createNativeStreamDecoder({
    kind: request.kind,
    model: model.alias,
    id,
    created,
    maxTokens: request.sampling.max_tokens,
    onChunk: (chunk) => pending.push(encodeSSEData(JSON.stringify(chunk))),
    onUsage: (u) => (usage = { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens, total_tokens: u.total_tokens }),
  })

  let polls = 0
  let finished = false
  let emptyDelay = 0
  let producedOutput = false
  const cancelUpstream = () => {
    if (finished) return
    finished = true
    call.waitUntil(client.cancel(endpoint, job.id).catch(() => undefined))
  }
  const fail = (error: unknown) => {
    const failure = toGatewayError(error)
    cancelUpstream()
    call.settle({ ok: false, error: failure, producedOutput, usage })
    return failure
  }
  call.signal?.addEventListener('abort', cancelUpstream, { once: true })

  const body = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          for (;;) {
            if (polls >= MAX_STREAM_POLLS) throw new GatewayError('upstream_timeout', 'The model did not finish within podgate\'s poll budget.')
            polls++
            const started = Date.now()
            const page = await client.stream(endpoint, job.id, { waitMs: runpod.streamWaitMs, signal: call.signal })
            for (const item of page.stream) decoder.push(item.output)
            if (isTerminal(page.status)) {
              finished = true
              if (page.status !== 'COMPLETED') throw jobFailure(page as JobStatus)
              decoder.finish()
              for (const bytes of pending) controller.enqueue(bytes)
              call.settle({ ok: true, usage })
              if (usage) {
                if (request.includeUsage) controller.enqueue(encodeSSEData(JSON.stringify({ id, object, created, model: model.alias, choices: [], usage })))
              }
              controller.enqueue(DONE)
              controller.close()
              return
            }
            if (pending.length > 0) {
              producedOutput = true
              for (const bytes of pending) controller.enqueue(bytes)
              pending = []
              emptyDelay = 0
              return
            }
            // Nothing new. A server that honours `?wait=` already waited; one that answers at once
            // (runpod-python's local server) gets a growing pause so podgate does not spin on it.
            controller.enqueue(HEARTBEAT)
            if (Date.now() - started < 100) {
              emptyDelay = Math.min(Math.max(emptyDelay * 2, 50), 1_000)
              await sleep(emptyDelay, call.signal)
            }
            return
          }
        } catch (error) {
          if (pending.length > 0) producedOutput = true
          const failure = fail(error)
          for (const bytes of pending) controller.enqueue(bytes)
          pending = []
          controller.enqueue(sseErrorEvent({ message: failure.message, type: failure.type, code: failure.code }))
          controller.close()
        }
      },
      cancel() {
        fail(new GatewayError('upstream_error', 'The caller went away.'))
      },
    },
    { highWaterMark: 0 },
  )
  return new Response(body, { status: 200, headers: SSE_HEADERS })
}

function jobFailure(job: Pick<JobStatus, 'status' | 'error'>): GatewayError {
  if (job.status === 'TIMED_OUT') return new GatewayError('upstream_timeout', 'The model job timed out upstream.')
  if (job.status === 'CANCELLED') return new GatewayError('upstream_error', 'The model job was cancelled upstream.')
  const detail = typeof job.error === 'string' ? handlerErrorMessage(job.error) : errorMessageOf(job.error)
  return detail ? workerFailure(detail) : new GatewayError('upstream_error', 'The model worker failed.')
}

/**
 * runpod-python reports a handler exception as a JSON string with `error_message` and a Python
 * traceback. Callers get the message; the traceback (paths, internals) stays upstream.
 */
function handlerErrorMessage(error: string): string {
  if (!error.startsWith('{')) return error
  try {
    return errorMessageOf(JSON.parse(error)) ?? error
  } catch {
    return error
  }
}

function errorMessageOf(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null) return undefined
  const record = value as { message?: unknown; error_message?: unknown }
  if (typeof record.error_message === 'string') return record.error_message
  if (typeof record.message === 'string') return record.message
  return undefined
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms)
    signal?.addEventListener('abort', () => {
      clearTimeout(timer)
      resolve()
    }, { once: true })
  })
}
