/**
 * Endpoint registry: the behaviour of each emulated endpoint (options, id convention, `configure`),
 * its warm/cold worker state, and how many times its HTTP fault has fired.
 */

import { DEFAULT_BEHAVIOUR } from './types.ts'
import type { EmulatorOp, EndpointBehaviour, Fault, JsonObject } from './types.ts'

export type HttpFault = Extract<Fault, { kind: 'http' }>

/** Ops an HTTP fault without `ops` applies to: every endpoint op, never the control API. */
const ENDPOINT_OPS: readonly EmulatorOp[] = [
  'run', 'runsync', 'status', 'status-sync', 'stream', 'cancel', 'retry', 'purge-queue', 'health', 'openai',
]

interface WorkerState {
  /** When the (last booted) worker is up. */
  readyAt: number
  /** Until when a worker stays up without new work. */
  warmUntil: number
  /** The `/v1/responses` conversations this worker's vLLM stored, by response id (see `responsesStore`). */
  responses: Map<string, JsonObject[]>
}

export interface EndpointRegistryOptions {
  defaults?: Partial<EndpointBehaviour>
  endpoints?: Record<string, Partial<EndpointBehaviour>>
}

export class EndpointRegistry {
  readonly #options: EndpointRegistryOptions
  #overrides = new Map<string, Partial<EndpointBehaviour>>()
  #workers = new Map<string, WorkerState>()
  #httpFaultHits = new Map<string, number>()

  constructor(options: EndpointRegistryOptions) {
    this.#options = options
  }

  /** Defaults, then the id convention, then `options.endpoints`, then `configure` calls. */
  behaviour(endpointId: string): EndpointBehaviour {
    return {
      ...DEFAULT_BEHAVIOUR,
      generation: endpointId.includes('classic') ? 'classic' : 'current',
      ...this.#options.defaults,
      ...this.#options.endpoints?.[endpointId],
      ...this.#overrides.get(endpointId),
    }
  }

  configure(endpointId: string, behaviour: Partial<EndpointBehaviour>): void {
    this.#overrides.set(endpointId, { ...this.#overrides.get(endpointId), ...behaviour })
    if ('fault' in behaviour) this.#httpFaultHits.delete(endpointId)
  }

  /** Back to the creation options: no `configure` overrides, every endpoint cold. */
  reset(): void {
    this.#overrides.clear()
    this.#workers.clear()
    this.#httpFaultHits.clear()
  }

  /**
   * Queues work that arrives at `now` and returns when it starts running: after `coldOverrideMs` when a
   * directive forces a cold start, after the boot when no worker is up, else after `queueDelayMs`.
   */
  admit(endpointId: string, now: number, coldOverrideMs?: number): number {
    const behaviour = this.behaviour(endpointId)
    if (coldOverrideMs !== undefined) return now + coldOverrideMs
    const worker = this.#workers.get(endpointId)
    if (worker && now <= worker.warmUntil) {
      // A worker that is still booting takes the job once it is up.
      const startAt = Math.max(now, worker.readyAt) + behaviour.queueDelayMs
      worker.warmUntil = Math.max(worker.warmUntil, startAt + behaviour.warmForMs)
      return startAt
    }
    const startAt = now + behaviour.coldStartMs
    this.#workers.set(endpointId, { readyAt: startAt, warmUntil: startAt + behaviour.warmForMs, responses: new Map() })
    return startAt
  }

  /** Keeps the endpoint's worker up until `busyUntil` plus `warmForMs` (a long job holds its worker). */
  keepWarm(endpointId: string, busyUntil: number): void {
    const worker = this.#workers.get(endpointId)
    if (!worker || !Number.isFinite(busyUntil)) return
    worker.warmUntil = Math.max(worker.warmUntil, busyUntil + this.behaviour(endpointId).warmForMs)
  }

  /** The stored `/v1/responses` conversations of the endpoint's worker (the one `admit` gave the request). */
  storedResponses(endpointId: string): Map<string, JsonObject[]> {
    return this.#workers.get(endpointId)?.responses ?? new Map()
  }

  workerState(endpointId: string, now: number): { initializing: boolean; warm: boolean } {
    const worker = this.#workers.get(endpointId)
    if (!worker || now > worker.warmUntil) return { initializing: false, warm: false }
    return { initializing: now < worker.readyAt, warm: now >= worker.readyAt }
  }

  /** The endpoint's HTTP fault if it applies to `op` now; each call that returns it uses up one of `times`. */
  takeHttpFault(endpointId: string, op: EmulatorOp): HttpFault | undefined {
    const fault = this.behaviour(endpointId).fault
    if (fault?.kind !== 'http' || !(fault.ops ?? ENDPOINT_OPS).includes(op)) return undefined
    const hits = this.#httpFaultHits.get(endpointId) ?? 0
    if (fault.times !== undefined && hits >= fault.times) return undefined
    this.#httpFaultHits.set(endpointId, hits + 1)
    return fault
  }
}
