/**
 * Job lifecycle as a pure function of time. workerd cannot keep timers running between requests, so
 * nothing advances a job: its status and produced items are computed from its timestamps, its script
 * and the clock whenever someone asks.
 */

import type { JobScript } from './outputs.ts'
import type { EmulatorJobView, JobStatus } from './types.ts'

export interface JobRecord {
  id: string
  endpointId: string
  via: 'run' | 'runsync'
  input: unknown
  script: JobScript
  createdAt: number
  /** When the current attempt was queued (creation, or the last retry). */
  attemptAt: number
  /** When the current attempt leaves IN_QUEUE. */
  startAt: number
  tokenDelayMs: number
  /** A `cold` directive, re-applied on retry. */
  coldOverrideMs?: number
  executionTimeoutMs: number
  ttlMs: number
  retentionMs: number
  cancelledAt?: number
  retries: number
  /** Items handed out by `/stream` so far. */
  delivered: number
}

export interface JobState {
  status: JobStatus
  /** How many of the script's items exist. */
  produced: number
  endedAt?: number
  /** Whether the attempt ever left IN_QUEUE. */
  started: boolean
  error?: string
}

interface Ending {
  at: number
  status: JobStatus
  error?: string
}

const SWEEP_INTERVAL_MS = 1_000

export const TERMINAL_STATUSES: readonly JobStatus[] = ['COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT']

export function isTerminal(status: JobStatus): boolean {
  return TERMINAL_STATUSES.includes(status)
}

/** When the job's step `step` is done. */
export function stepTime(job: JobRecord, step: number): number {
  return job.startAt + step * job.tokenDelayMs
}

/** The job's state at `now`. */
export function jobState(job: JobRecord, now: number): JobState {
  const ending = endingOf(job)
  const ended = ending !== undefined && now >= ending.at
  const at = ended ? ending.at : now
  const started = at >= job.startAt
  let produced = 0
  if (started) {
    while (produced < job.script.items.length && stepTime(job, job.script.items[produced]?.step ?? 0) <= at) produced++
  }
  if (ended) {
    return { status: ending.status, produced, endedAt: ending.at, started, ...(ending.error !== undefined ? { error: ending.error } : {}) }
  }
  return { status: started ? 'IN_PROGRESS' : 'IN_QUEUE', produced, started }
}

/** The next time after `now` at which the job's state can change, or it is removed (Infinity if never). */
export function nextChangeAt(job: JobRecord, now: number): number {
  const removal = removedAt(job)
  const ending = endingOf(job)
  if (ending && now >= ending.at) return removal > now ? removal : Infinity
  let next = Math.min(ending?.at ?? Infinity, removal)
  if (job.startAt > now) next = Math.min(next, job.startAt)
  for (const item of job.script.items) {
    const at = stepTime(job, item.step)
    if (at > now) {
      next = Math.min(next, at)
      break
    }
  }
  return next
}

/**
 * When Runpod deletes the job at its TTL ("TTL is a hard limit": every op then answers 404, running or
 * done), if a worker took it before then; one still queued at its TTL ends TIMED_OUT instead (Infinity).
 */
export function removedAt(job: JobRecord): number {
  const ttlAt = job.attemptAt + job.ttlMs
  return job.startAt < ttlAt ? ttlAt : Infinity
}

/** The earliest of: the script's own end, the execution timeout, the TTL in the queue, a cancel. Ties go to the script. */
function endingOf(job: JobRecord): Ending | undefined {
  const candidates: Ending[] = []
  const scripted = job.script.ending
  if (scripted.kind === 'completed') candidates.push({ at: stepTime(job, scripted.step), status: 'COMPLETED' })
  if (scripted.kind === 'failed') candidates.push({ at: stepTime(job, scripted.step), status: 'FAILED', error: scripted.error })
  candidates.push({ at: job.startAt + job.executionTimeoutMs, status: 'TIMED_OUT' })
  if (removedAt(job) === Infinity) candidates.push({ at: job.attemptAt + job.ttlMs, status: 'TIMED_OUT' })
  if (job.cancelledAt !== undefined) candidates.push({ at: job.cancelledAt, status: 'CANCELLED' })
  return candidates.reduce<Ending | undefined>((best, c) => (best === undefined || c.at < best.at ? c : best), undefined)
}

/** Jobs by id, dropping each one `retentionMs` after it ended, or at its TTL once a worker took it. */
export class JobStore {
  #jobs = new Map<string, JobRecord>()
  #sweptAt = -Infinity

  /** Adds a job; now and then also drops expired ones, so a long load run does not grow without bound. */
  add(job: JobRecord, now: number): void {
    this.#jobs.set(job.id, job)
    if (now - this.#sweptAt >= SWEEP_INTERVAL_MS) this.all(now)
  }

  /** The job, if it exists on that endpoint and its results are still kept. */
  get(id: string, now: number, endpointId?: string): JobRecord | undefined {
    const job = this.#jobs.get(id)
    if (!job || (endpointId !== undefined && job.endpointId !== endpointId)) return undefined
    if (this.#expired(job, now)) {
      this.#jobs.delete(id)
      return undefined
    }
    return job
  }

  delete(id: string): void {
    this.#jobs.delete(id)
  }

  /** Every kept job, expired ones swept out first. */
  all(now: number): JobRecord[] {
    this.#sweptAt = now
    for (const job of this.#jobs.values()) {
      if (this.#expired(job, now)) this.#jobs.delete(job.id)
    }
    return [...this.#jobs.values()]
  }

  clear(): void {
    this.#jobs.clear()
  }

  #expired(job: JobRecord, now: number): boolean {
    if (now >= removedAt(job)) return true
    const state = jobState(job, now)
    return state.endedAt !== undefined && now >= state.endedAt + job.retentionMs
  }
}

export function viewJob(job: JobRecord, now: number): EmulatorJobView {
  const state = jobState(job, now)
  return {
    id: job.id,
    endpointId: job.endpointId,
    status: state.status,
    via: job.via,
    input: job.input,
    createdAt: job.createdAt,
    startAt: job.startAt,
    ...(state.endedAt !== undefined ? { endedAt: state.endedAt } : {}),
    retries: job.retries,
    itemsProduced: state.produced,
    itemsDelivered: job.delivered,
    ...(state.error !== undefined ? { error: state.error } : {}),
  }
}
