/**
 * Runpod's native endpoint ops (shared/runpod-api.md §1): run, runsync, status, status-sync, stream,
 * cancel, retry, purge-queue, health. Long polls are the only waiting, done inside the request.
 */

import type { Context, Hono } from 'hono'
import { readJsonBody, recordBody, sleep, waitParam } from './context.ts'
import type { EmulatorContext, EmulatorEnv } from './context.ts'
import { httpFaultResponse, requestFault } from './faults.ts'
import { isTerminal, jobState, nextChangeAt, stepTime } from './jobs.ts'
import type { JobRecord, JobState } from './jobs.ts'
import { endpointOp, noteJobId } from './middleware.ts'
import { buildJobScript } from './outputs.ts'
import { jobDirectives, parseJobInput } from './job-input.ts'
import { runBodySchema } from './requests.ts'
import type { RunBody } from './requests.ts'
import type { EndpointBehaviour, JsonObject } from './types.ts'

const MB = 1024 * 1024
const DEFAULT_SYNC_WAIT_MS = 90_000
const DEFAULT_STREAM_WAIT_MS = 1_000

export function registerNativeRoutes(api: Hono<EmulatorEnv>, context: EmulatorContext): void {
  const found = (c: Context<EmulatorEnv>): JobRecord | undefined =>
    context.jobs.get(c.req.param('jobId') ?? '', context.now(), c.req.param('endpointId'))

  api.post('/:endpointId/run', endpointOp(context, 'run'), (c) => submit(c, context, 'run'))
  api.post('/:endpointId/runsync', endpointOp(context, 'runsync'), (c) => submit(c, context, 'runsync'))

  // The status a running job reports on this endpoint (`runningStatus`).
  const running = (c: Context<EmulatorEnv>) => context.endpoints.behaviour(c.req.param('endpointId') ?? '').runningStatus

  api.on(['GET', 'POST'], '/:endpointId/status/:jobId', endpointOp(context, 'status'), (c) => {
    const job = found(c)
    return job ? c.json(statusBody(job, jobState(job, context.now()), running(c))) : notFound()
  })

  api.on(['GET', 'POST'], '/:endpointId/status-sync/:jobId', endpointOp(context, 'status-sync'), async (c) => {
    const job = found(c)
    if (!job) return notFound()
    const wait = waitParam(c.req.query('wait'), DEFAULT_SYNC_WAIT_MS, context.maxWaitMs)
    const state = await longPoll(context, job, { waitMs: wait, signal: c.req.raw.signal }, (s) => isTerminal(s.status))
    return state ? c.json(statusBody(job, state, running(c))) : notFound()
  })

  api.on(['GET', 'POST'], '/:endpointId/stream/:jobId', endpointOp(context, 'stream'), async (c) => {
    const job = found(c)
    if (!job) return notFound()
    const wait = waitParam(c.req.query('wait'), DEFAULT_STREAM_WAIT_MS, context.maxWaitMs)
    const begin = context.now()
    const state = await longPoll(
      context,
      job,
      { waitMs: wait, signal: c.req.raw.signal },
      (s) => s.produced > job.delivered || isTerminal(s.status),
    )
    if (!state) return notFound()
    // Each call hands out only what the previous calls did not (shared/runpod-api.md §1).
    const fresh = job.script.items.slice(job.delivered, state.produced)
    job.delivered = Math.max(job.delivered, state.produced)
    // runpod-python posts each item as the handler yields it and the job's end only after the last
    // (rp_job.handle_job: stream_result, then send_result): a poll that was waiting when the job ended
    // woke at those last items, before the end, which the next poll tells.
    const endedMeanwhile = state.endedAt !== undefined && state.endedAt > begin && fresh.length > 0
    return c.json({ id: job.id, status: shown(endedMeanwhile ? 'IN_PROGRESS' : state.status, running(c)), stream: fresh.map((item) => ({ output: item.output })) })
  })

  api.post('/:endpointId/cancel/:jobId', endpointOp(context, 'cancel'), (c) => {
    const job = found(c)
    if (!job) return notFound()
    const now = context.now()
    // Cancelling a finished job changes nothing; the answer then tells its real status.
    if (!isTerminal(jobState(job, now).status)) job.cancelledAt = now
    return c.json({ id: job.id, status: jobState(job, now).status })
  })

  api.post('/:endpointId/retry/:jobId', endpointOp(context, 'retry'), (c) => {
    const job = found(c)
    if (!job) return notFound()
    const now = context.now()
    const status = jobState(job, now).status
    if (status !== 'FAILED' && status !== 'TIMED_OUT') {
      return c.text(`Bad Request: job is ${status}; only FAILED and TIMED_OUT jobs can be retried`, 400)
    }
    job.retries++
    job.delivered = 0
    job.cancelledAt = undefined
    planAttempt(context, job, now)
    return c.json({ id: job.id, status: 'IN_QUEUE' })
  })

  api.post('/:endpointId/purge-queue', endpointOp(context, 'purge-queue'), (c) => {
    const endpointId = c.req.param('endpointId')
    const now = context.now()
    let removed = 0
    for (const job of context.jobs.all(now)) {
      if (job.endpointId === endpointId && jobState(job, now).status === 'IN_QUEUE') {
        context.jobs.delete(job.id)
        removed++
      }
    }
    return c.json({ removed, status: 'completed' })
  })

  api.get('/:endpointId/health', endpointOp(context, 'health'), (c) => c.json(health(context, c.req.param('endpointId'))))
}

async function submit(c: Context<EmulatorEnv>, context: EmulatorContext, via: 'run' | 'runsync'): Promise<Response> {
  const endpointId = c.req.param('endpointId') ?? ''
  const body = await readJsonBody(c.req.raw, via === 'run' ? 10 * MB : 20 * MB)
  recordBody(context, { endpointId, op: via, url: c.req.url, body })
  if (!body.ok) return c.text(`Bad Request: ${body.message}`, body.status)
  const parsed = runBodySchema.safeParse(body.value)
  if (!parsed.success) return c.text('Bad Request: the body needs an "input" object', 400)

  const behaviour = context.endpoints.behaviour(endpointId)
  const directives = jobDirectives(parseJobInput(parsed.data.input, behaviour.generation))
  const fault = requestFault(directives, behaviour)
  if (fault?.kind === 'http') return httpFaultResponse(fault)

  const job = createJob(context, endpointId, via, parsed.data)
  noteJobId(c, job.id)
  if (via === 'run') return c.json({ id: job.id, status: 'IN_QUEUE' })

  const wait = waitParam(c.req.query('wait'), DEFAULT_SYNC_WAIT_MS, context.maxWaitMs)
  const state = await longPoll(context, job, { waitMs: wait, signal: c.req.raw.signal }, (s) => isTerminal(s.status))
  return state ? c.json(statusBody(job, state, behaviour.runningStatus)) : notFound()
}

function createJob(context: EmulatorContext, endpointId: string, via: 'run' | 'runsync', body: RunBody): JobRecord {
  const now = context.now()
  const behaviour = context.endpoints.behaviour(endpointId)
  const uuid = crypto.randomUUID()
  const job: JobRecord = {
    id: via === 'runsync' ? `sync-${uuid}-u1` : `${uuid}-u1`,
    endpointId,
    via,
    input: body.input,
    script: { items: [], ending: { kind: 'stalled' } },
    createdAt: now,
    attemptAt: now,
    startAt: now,
    tokenDelayMs: 0,
    executionTimeoutMs: body.policy?.executionTimeout ?? behaviour.executionTimeoutMs,
    ttlMs: body.policy?.ttl ?? behaviour.ttlMs,
    retentionMs: via === 'runsync' ? behaviour.runsyncRetentionMs : behaviour.retentionMs,
    retries: 0,
    delivered: 0,
  }
  planAttempt(context, job, now)
  context.jobs.add(job, now)
  return job
}

/**
 * (Re)plans the job's attempt starting at `now` with the endpoint's behaviour of the moment, so a
 * retry after `configure` removed a fault succeeds. The script is a pure function of the job id and
 * input, so a retry yields the same text.
 */
function planAttempt(context: EmulatorContext, job: JobRecord, now: number): void {
  const behaviour = context.endpoints.behaviour(job.endpointId)
  const request = parseJobInput(job.input, behaviour.generation)
  const directives = jobDirectives(request)
  const fault = requestFault(directives, behaviour)
  job.attemptAt = now
  job.coldOverrideMs = directives.coldStartMs
  job.startAt = context.endpoints.admit(job.endpointId, now, directives.coldStartMs)
  job.tokenDelayMs = directives.tokenDelayMs ?? behaviour.tokenDelayMs
  job.script = buildJobScript({
    jobId: job.id,
    generation: behaviour.generation,
    request,
    fault: fault?.kind === 'http' ? undefined : fault,
    mangleUtf8: directives.mangleUtf8 ?? behaviour.mangleUtf8,
    paced: job.tokenDelayMs > 0,
    servedModelName: behaviour.servedModelName,
    created: Math.floor(job.createdAt / 1000),
    served: behaviour,
  })
  const ending = job.script.ending
  if (ending.kind !== 'stalled') context.endpoints.keepWarm(job.endpointId, stepTime(job, ending.step))
}

/**
 * Waits until `done` holds, the job cannot change any more, `waitMs` passed, or the client left; undefined
 * when the job was removed meanwhile (its TTL). Time is bounded both by the emulator clock and by time
 * actually slept, so a frozen fake clock cannot make a long poll spin forever.
 */
async function longPoll(
  context: EmulatorContext,
  job: JobRecord,
  options: { waitMs: number; signal: AbortSignal },
  done: (state: JobState) => boolean,
): Promise<JobState | undefined> {
  const begin = context.now()
  let slept = 0
  for (;;) {
    const now = context.now()
    if (!context.jobs.get(job.id, now)) return undefined
    const state = jobState(job, now)
    const remaining = Math.min(options.waitMs - (now - begin), options.waitMs - slept)
    if (done(state) || remaining <= 0 || options.signal.aborted) return state
    const pause = Math.min(remaining, Math.max(1, nextChangeAt(job, now) - now))
    await sleep(pause, options.signal)
    slept += pause
  }
}

function statusBody(job: JobRecord, state: JobState, running: EndpointBehaviour['runningStatus']): JsonObject {
  const body: JsonObject = { id: job.id, status: shown(state.status, running) }
  if (state.started) {
    body.delayTime = job.startAt - job.attemptAt
    body.workerId = `emulator-${job.endpointId}`
    if (state.endedAt !== undefined) body.executionTime = state.endedAt - job.startAt
  }
  if (state.status === 'COMPLETED') body.output = job.script.items.map((item) => item.output)
  if (state.error !== undefined) body.error = state.error
  if (job.retries > 0) body.retries = job.retries
  return body
}

function shown(status: JobState['status'], running: EndpointBehaviour['runningStatus']): string {
  return status === 'IN_PROGRESS' ? running : status
}

function health(context: EmulatorContext, endpointId: string): JsonObject {
  const now = context.now()
  const jobs = { completed: 0, failed: 0, inProgress: 0, inQueue: 0, retried: 0 }
  for (const job of context.jobs.all(now)) {
    if (job.endpointId !== endpointId) continue
    const status = jobState(job, now).status
    if (status === 'COMPLETED') jobs.completed++
    if (status === 'FAILED' || status === 'TIMED_OUT') jobs.failed++
    if (status === 'IN_PROGRESS') jobs.inProgress++
    if (status === 'IN_QUEUE') jobs.inQueue++
    jobs.retried += job.retries
  }
  const worker = context.endpoints.workerState(endpointId, now)
  const running = jobs.inProgress > 0 ? 1 : 0
  const idle = worker.warm && running === 0 ? 1 : 0
  return {
    jobs,
    workers: { idle, running, throttled: 0, initializing: worker.initializing ? 1 : 0, ready: idle, unhealthy: 0 },
  }
}

function notFound(): Response {
  return new Response('Not Found: no such job (unknown id, or its result expired)', { status: 404 })
}
