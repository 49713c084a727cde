/**
 * Serves a completion through worker-vllm's native job API as a JSON answer: `/runsync` (+ `/status`
 * polling). Streams are served by `native-stream.ts`. Whatever the worker generation, the caller gets
 * the same OpenAI shapes as from the OpenAI route.
 *
 * A job outlives the HTTP call that started it (runpod-api.md §1), so every path that gives up on a job
 * (caller gone, timeout) cancels it upstream: a GPU never runs for nobody. A `/runsync` that failed
 * without a job id, or whose job FAILED, is retried on the next endpoint (see `retry.ts`).
 */
import { GatewayError } from '../errors/index.ts'
import { toNativeInput } from '../normalize/index.ts'
import { workerFailure } from '../streaming/vllm.ts'
import { retryableFailure, sleep } from './retry.ts'
import { nativeOutputToOpenAI } from './runpod/output.ts'
import { isTerminal } from './runpod/client.ts'
import type { JobStatus } from './runpod/client.ts'
import { completionId } from './types.ts'
import type { CompletionCall } from './types.ts'

export async function nativeJson(call: CompletionCall): Promise<Response> {
  const { client, runpod, request, model, plan } = call
  const timeoutMs = Math.min(runpod.timeoutMs, model.config.resilience.timeouts.totalMs)
  const deadline = Date.now() + timeoutMs
  const job = await plan.run(async (endpoint) => {
    let job = await client.runsync(endpoint, { input: toNativeInput(request) }, { waitMs: Math.max(1_000, Math.min(runpod.runsyncWaitMs, deadline - Date.now())), signal: call.signal })
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
    // The job has ended without output, so another endpoint may run it without running it twice.
    if (job.status !== 'COMPLETED') throw retryableFailure(jobFailure(job))
    return job
  })
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

export function jobFailure(job: Pick<JobStatus, 'status' | 'error'>): GatewayError {
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
