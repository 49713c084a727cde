/**
 * Serves a completion through worker-vllm's native job API as a JSON answer: `/run`, then `/status-sync`
 * long polls (Runpod's hosted API) or `/status` polls (a `url:` endpoint, e.g. runpod-python's local
 * server). Streams are served by `native-stream.ts`. Whatever the worker generation, the caller gets the
 * same OpenAI shapes as from the OpenAI route.
 *
 * A job outlives the HTTP call that started it (runpod-api.md §1), so every path that gives up on a job
 * (caller gone, timeout) cancels it upstream: a GPU never runs for nobody. That takes the job's id, so the
 * job is queued with `/run`, which answers it at once, not `/runsync`, which answers it only when the job
 * is done or its wait ran out: a caller who left during a `/runsync` left a job no one could cancel. A
 * `/run` that failed without a job id, or whose job FAILED (or TIMED_OUT before a worker took it), is
 * retried on the next endpoint (see `retry.ts`); a job whose polls failed is not: it may be running, and a
 * second would bill it twice.
 */
import { CALLER_GONE, GatewayError, toGatewayError, upstreamError } from '../errors/index.ts'
import { parseJson } from '../http/json.ts'
import { codedRefusal, errorItemFailure, isRecord, isRefusal, readUsage, throwErrorItem, workerFailure } from '../streaming/vllm.ts'
import { cancelJob, polled, runJob } from './job-calls.ts'
import { endpointFailure, finalFailure, retryableFailure, sleep } from './retry.ts'
import { nativeOutputToOpenAI } from './runpod/output.ts'
import { isTerminal } from './runpod/client.ts'
import type { JobStatus } from './runpod/client.ts'
import { completionId } from './types.ts'
import type { CompletionCall, TokenUsage } from './types.ts'

function errorMessageOf(value: unknown): string | undefined {
  // Not an object (null, a primitive): both reads are undefined.
  const record = value as { message?: unknown; error_message?: unknown } | null | undefined
  if (typeof record?.error_message === 'string') return record.error_message
  if (typeof record?.message === 'string') return record.message
  return undefined
}

export async function nativeJson(call: CompletionCall): Promise<Response> {
  const { client, runpod, request, model, plan } = call
  const gone = () => call.signal?.aborted === true
  const job = await plan.run(async (endpoint) => {
    // `runpod.timeoutMs` bounds each try (its `/run` and polls), as it does on the OpenAI route, never
    // past the call's `timeouts.totalMs` (retries included).
    const deadline = Math.min(Date.now() + runpod.timeoutMs, plan.deadline)
    // Not under the caller's signal (see `runJob`): only the id a `/run` answers lets podgate cancel its
    // job when the caller left (from `waitUntil`, which outlives the caller).
    const queued = runJob(call, endpoint, deadline)
    let cancelled = false
    const cancel = (id: string) => {
      if (cancelled) return
      cancelled = true
      call.waitUntil(cancelJob(client, endpoint, id))
    }
    call.waitUntil(queued.then((job) => (gone() && !isTerminal(job.status) ? cancel(job.id) : undefined), () => undefined))
    let job = await queued
    let ran = ranOn(job)
    try {
      // Runpod's hosted API waits for the job server-side (the op runpod-sdk uses after `/runsync`); a `url:`
      // endpoint's `/status` answers at once, so each poll there comes after a pause that grows.
      const hosted = endpoint.credential.kind === 'runpod'
      const late = () => new GatewayError('upstream_timeout', 'The model did not finish in time.')
      let delay = 250
      let pause = !hosted
      while (!isTerminal(job.status)) {
        if (gone()) throw upstreamError(CALLER_GONE)
        if (pause) {
          if (delay > deadline - Date.now()) throw late()
          await sleep(delay, call.signal)
          delay = Math.min(delay * 2, 2_000)
        }
        const waitMs = Math.min(runpod.runsyncWaitMs, deadline - Date.now())
        if (hosted && waitMs < 1_000) throw late()
        const asked = Date.now()
        // A refused poll is asked again: cancelling a healthy job for it would bill its work for nothing.
        job = await polled(() => (hosted ? client.statusSync(endpoint, job.id, { waitMs, signal: call.signal }) : client.status(endpoint, job.id, { signal: call.signal })), { signal: call.signal })
        ran ||= ranOn(job)
        // A Runpod that answered a wait at once, still running, is paced as `/status` is: not asked in a
        // tight loop until the deadline (past the Worker's subrequest limit, and its job's cancel with it).
        // One that held the wait a while is asked again at once, the pause back at its least: a job that
        // ends just after it answered is not kept waiting for a pause it did not need.
        pause = !hosted || Date.now() - asked < Math.min(waitMs, 1_000)
        if (!pause) delay = 250
      }
    } catch (error) {
      cancel(job.id)
      throw finalFailure(error)
    }
    // The job has ended without output, so another endpoint may run it without running it twice.
    if (job.status !== 'COMPLETED') throw failedOver({ status: job.status, ran }, jobFailure(job))
    // current worker-vllm reports vLLM's refusal as the job's output: the caller's to fix, not retried.
    const refusal = refusalIn(job.output)
    if (refusal) throw refusal
    return job
  })
  if (request.kind === 'embedding' || request.route) {
    const { body, usage } = jsonOutput(job.output, model.alias, request.route !== undefined)
    call.settle({ ok: true, usage })
    return Response.json(body)
  }
  const { body, usage, estimate } = nativeOutputToOpenAI(job.output, {
    kind: request.kind,
    model: model.alias,
    id: completionId(request.kind),
    created: Math.floor(Date.now() / 1000),
    maxTokens: request.sampling.max_tokens,
    n: request.sampling.n ?? 1,
  })
  call.settle({ ok: true, usage, estimate })
  return Response.json(body)
}

/**
 * `failure`, of a job that ended with `status` before any output, marked to be run on the next endpoint
 * unless vLLM refused the request, the job COMPLETED (it ran to the end, billed: a rerun bills it twice),
 * someone (an operator, Runpod) CANCELLED it (podgate cancels only jobs it gave up on, and a job stopped
 * on purpose is not started again elsewhere), or it TIMED_OUT after a worker took it (`ran`): it ran until
 * its endpoint's execution timeout, billed, and a rerun would be billed again and likely time out too (the
 * endpoint's breaker still counts it). A job TIMED_OUT in the queue (its `ttl`) never ran: it is run on
 * the next endpoint.
 */
export function failedOver(job: { status: string; ran: boolean }, failure: GatewayError): GatewayError {
  if (isRefusal(failure) || job.status === 'COMPLETED' || job.status === 'CANCELLED') return failure
  return job.status === 'TIMED_OUT' && job.ran ? endpointFailure(failure) : retryableFailure(failure)
}

/** vLLM's refusal where an output holds it as an item (a worker on runpod-python before 1.7.6 kept it there, COMPLETED). */
export function refusalIn(output: unknown): GatewayError | undefined {
  const items: unknown[] = Array.isArray(output) ? output : [output]
  for (const item of items) {
    const failure = errorItemFailure(item)
    if (failure && isRefusal(failure)) return failure
  }
  return undefined
}

export function jobFailure(job: Pick<JobStatus, 'status' | 'error'>): GatewayError {
  if (job.status === 'TIMED_OUT') return new GatewayError('upstream_timeout', 'The model job timed out upstream.')
  if (job.status === 'CANCELLED') return upstreamError('The model job was cancelled upstream.')
  const refusal = errorObjectRefusal(job.error)
  if (refusal) return refusal
  const detail = typeof job.error === 'string' ? handlerErrorMessage(job.error) : errorMessageOf(job.error)
  return detail ? workerFailure(detail) : upstreamError('The model worker failed.')
}

/**
 * Whether a worker took the job up, as one of its answers shows: a running status, time spent running,
 * or the worker's id. Runpod ends a job TIMED_OUT both in the queue (it never ran) and past its
 * execution timeout (it ran, and was billed for it).
 */
export function ranOn(job: Pick<JobStatus, 'status' | 'executionTime' | 'workerId'>): boolean {
  return job.status === 'IN_PROGRESS' || job.status === 'RUNNING' || (job.executionTime ?? 0) > 0 || job.workerId !== undefined
}

/**
 * `{'message': "…", 'type': 'BadRequestError', 'param': None, 'code': 400}`: its message, its type, and its code
 * when it has one (current worker-vllm's `{'message': 'vLLM returned HTTP 400: …', …, 'code': None}` has none).
 */
function pythonReprError(text: string): Record<string, unknown> | undefined {
  const code = /'code': (\d{3})\b/.exec(text)
  const message = /'message': (?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")/.exec(text)
  if (!message) return undefined
  const escaped = message[1] ?? message[2] ?? ''
  return { code: code && Number(code[1]), type: /'type': '(\w+)'/.exec(text)?.[1], message: escaped.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c === 't' ? '\t' : c)) }
}

/**
 * The one JSON answer an `openai_route` job returned: an embeddings list, or the answer of another vLLM
 * route (`route`), whatever its shape. `model` is written as the alias where the answer names one.
 */
function jsonOutput(output: unknown, alias: string, route: boolean): { body: Record<string, unknown>; usage: TokenUsage | undefined } {
  const items: unknown[] = Array.isArray(output) ? output : [output]
  throwErrorItem(items)
  const body = items[0]
  if (items.length !== 1 || !isRecord(body) || (!route && !Array.isArray(body.data))) {
    throw upstreamError(`The model worker returned something other than ${route ? 'one JSON answer' : 'an embeddings list'}.`)
  }
  if (!route || typeof body.model === 'string') body.model = alias
  // vLLM's `/v2/embed` counts as Cohere does: text and image tokens apart, under `meta.billed_units`.
  // Any other answer without `usage` sums to NaN here, no count: charged podgate's estimate.
  const billed = Object(Object(body.meta).billed_units)
  return { body, usage: readUsage(body.usage ?? { prompt_tokens: billed.input_tokens + (billed.image_tokens ?? 0) }) }
}

/**
 * A job that a classic worker's error item ended: runpod-python reports the item's error object as the
 * job's, as JSON or, in versions that take `str()` of it, as a Python dict's repr.
 */
function errorObjectRefusal(error: unknown): GatewayError | undefined {
  // A dead engine's stamped 400 is the worker's failure (codedRefusal), in this form as in the others.
  const value = typeof error === 'string' && error.startsWith('{') ? (parseJson(error) ?? pythonReprError(error)) : error
  return isRecord(value) ? codedRefusal(value) : undefined
}

/**
 * runpod-python reports a handler exception as a JSON string with `error_message` and a Python
 * traceback, and a worker's error item as `str()` of its error object (a dict's repr). Callers get the
 * message; the traceback (paths, internals) stays upstream.
 */
function handlerErrorMessage(error: string): string {
  return errorMessageOf(error.startsWith('{') ? (parseJson(error) ?? pythonReprError(error)) : undefined) ?? error
}
