/**
 * Retries before the first byte: which failures are worth another try, how long to wait (exponential
 * backoff with full jitter, `Retry-After` honoured within the budget), and which endpoint comes next.
 *
 * Only failures that cannot have started work upstream, or whose work has ended, are retried: network
 * errors, 429, 5xx, and jobs that failed before any output. A timeout (podgate's, or a proxy's 504) is never retried: a `/run` that
 * timed out may have queued a job, and a second one would run it twice; it still counts against its endpoint's breaker. Nor is a failed poll of a job
 * (`finalFailure`), whatever its status: the job may be running; nor a job that ran into its endpoint's
 * execution timeout (`endpointFailure`): a rerun would be billed again.
 */
import { CALLER_GONE, GatewayError, toGatewayError, upstreamError } from '../errors/index.ts'
import type { ResilienceConfig } from '../config/schema.ts'
import type { Breaker, BreakerPolicy } from './breaker.ts'
import { UpstreamStatus } from './runpod/client.ts'
import type { Endpoint } from './runpod/client.ts'

/**
 * Failures marked, whatever their code or status says: to be retried (`retry`), or not though their
 * endpoint is to blame (`fault`), or not (`final`: the breaker goes by the code and status), or not and
 * no endpoint's (`none`: a call never made).
 */
const marked = new WeakMap<GatewayError, 'retry' | 'fault' | 'final' | 'none'>()

/** Marks a failure `verdict`, as `marked` says. */
const mark = (verdict: 'retry' | 'fault' | 'final' | 'none') => (error: GatewayError): GatewayError => (marked.set(error, verdict), error)

/** Marks a failure whose work has ended upstream (a job FAILED before output), so another endpoint may retry it. */
export const retryableFailure = mark('retry')

/**
 * Marks a failure never to be retried that still counts against its endpoint: a job that ran into the
 * endpoint's execution timeout (a rerun would be billed again, and likely time out too).
 */
export const endpointFailure = mark('fault')

/**
 * Marks a failed poll never to be retried: its job may be running (a retry would run it twice). A 404 there
 * (`job_not_found`) is a job Runpod removed at its TTL, a hard limit, while it ran: it is answered as a job
 * that ran into its execution timeout (a 504, not run again, counted against its endpoint), since OpenAI
 * clients read a 404 as a missing model (the native surface, which does not use this, answers Runpod's 404).
 */
export function finalFailure(error: unknown): GatewayError {
  const failure = toGatewayError(error)
  return failure.code === 'job_not_found' ? new GatewayError('upstream_timeout', 'The model job timed out upstream.') : mark('final')(failure)
}

/** The timeout of a call not made, its time up before it started: no endpoint's failure (the breaker's count). */
export const unsent = () => mark('none')(new GatewayError('upstream_timeout', 'The upstream did not answer in time.'))

/**
 * The endpoint failed (a network error, a 429, a 5xx, a job FAILED before output, a timeout of a call made
 * to it: podgate's, as a proxy's 504), whether or not a retry is worth it.
 */
function endpointFault(error: unknown): boolean {
  // A 404 is one model's (its served name): run elsewhere (a FAILED job), but the endpoint serves the others.
  if (!(error instanceof GatewayError) || error.code === 'route_not_found') return false
  const verdict = marked.get(error)
  if (verdict && verdict !== 'final') return verdict !== 'none'
  // `upstream_unavailable`, `upstream_rate_limited`, `upstream_timeout`; an `upstream_error` by its status.
  return /^upstream_[rtu]/.test(error.code) || (error.cause instanceof UpstreamStatus && error.cause.status >= 500)
}

/** Counts `error` against `endpoint`'s breaker when it is the endpoint's fault (a caller's 400 is not). */
export function countFault(breaker: Breaker, endpoint: Endpoint, error: unknown, policy: BreakerPolicy): void {
  if (endpointFault(error)) breaker.failure(endpoint, policy)
}

function retryAfterMs(error: unknown): number | undefined {
  // Only an `UpstreamStatus` cause has `retryAfterSeconds`.
  const seconds = ((error as GatewayError | undefined)?.cause as UpstreamStatus | undefined)?.retryAfterSeconds
  return seconds && seconds * 1000
}

export interface RetryPlanOptions {
  /** The model's endpoints in the order to try them (see `orderEndpoints`). */
  endpoints: readonly Endpoint[]
  resilience: ResilienceConfig
  breaker: Breaker
  signal?: AbortSignal
  /** Default `Math.random`. */
  random?: () => number
  /** When the whole call must have ended (epoch ms): its start plus `timeouts.totalMs`. */
  deadline: number
}

/**
 * The attempts of one request: each `next()` is one try, on the endpoints in turn.
 *
 * @example
 * const plan = new RetryPlan({ endpoints, resilience, breaker, deadline: Date.now() + resilience.timeouts.totalMs })
 * const answer = await plan.run((endpoint) => client.openai(endpoint, '/chat/completions', body))
 */
export class RetryPlan {
  readonly #options: RetryPlanOptions
  readonly #started = Date.now()
  #tried = 0
  /** `endpoints`, the next in turn first: a hedge brings its endpoint forward (`nextOther`). */
  readonly #order: Endpoint[]
  /** When each endpoint that sent a `Retry-After` may be asked again (epoch ms); made by the first one, not per request. */
  #notBefore: Map<string, number> | undefined

  constructor(options: RetryPlanOptions) {
    this.#options = options
    this.#order = [...options.endpoints]
  }

  /**
   * The endpoint `k` turns on takes this turn, its next after every other's; those it passed over come
   * next, in their order.
   */
  #take(k: number): Endpoint {
    this.#tried++
    const [taken] = this.#order.splice(k, 1)
    this.#order.push(taken!)
    return taken!
  }

  /**
   * The endpoint of a hedge: the first, from the one next in turn on, that is not `current`, not cooling
   * down (the breaker) and not inside a `Retry-After` it sent (a hedge is never worth a wait); else
   * undefined. It takes this turn, and those it passed over come next, in their order.
   */
  nextOther(current: Endpoint): Endpoint | undefined {
    const k = this.#closed((e) => e.base === current.base || this.#held(e) > 0)
    return k < 0 || this.#tried >= this.#options.resilience.retries.attempts ? undefined : this.#take(k)
  }

  /**
   * The endpoint of the next attempt, or undefined when every attempt is used. A caller who left gets none
   * (it throws): nothing is sent for it, and with no attempt made its prompt is not charged.
   */
  next(): Endpoint | undefined {
    const { resilience, signal } = this.#options
    if (signal?.aborted) throw upstreamError(CALLER_GONE)
    if (this.#tried >= resilience.retries.attempts) return undefined
    // One whose breaker opened during this call is passed over while another's is closed, as at its start.
    return this.#take(this.#closed())
  }

  /** Counts a failed attempt against its endpoint; resolves true (after the backoff) when another try is worth it. */
  async retryAfter(error: unknown, endpoint: Endpoint): Promise<boolean> {
    const { resilience, signal } = this.#options
    this.recordFailure(error, endpoint)
    if (!isRetryable(error)) return false
    const { attempts, baseDelayMs, maxDelayMs, budgetMs } = resilience.retries
    if (this.#tried >= attempts) return false
    const ceiling = Math.min(maxDelayMs, baseDelayMs * 2 ** (this.#tried - 1))
    // Retry-After speaks for the endpoint that sent it (`recordFailure`), whenever its turn comes again
    // (after another endpoint's try too); another endpoint is tried after the backoff alone.
    const held = this.#held(this.#order[this.#closed()])
    const delay = Math.max(held, Math.floor((this.#options.random ?? Math.random)() * ceiling))
    // The time budget bounds retries of transient faults (a network error, a 429, a 5xx) and every wait a
    // Retry-After asks. An attempt that ended before any output (a FAILED job) fails over whenever it comes,
    // within `attempts`: nothing runs twice, and a caller who waited out a cold start is better served by the
    // next endpoint than by the error. `timeouts.totalMs` bounds them all: a retry with no time left is not
    // started, and the caller gets the last failure.
    if (((held > 0 || marked.get(error as GatewayError) !== 'retry') && Date.now() - this.#started + delay > budgetMs) || Date.now() + delay >= this.deadline) return false
    await sleep(delay, signal)
    return !signal?.aborted
  }

  /**
   * When the whole call must have ended (epoch ms), retries and backoff included: an attempt waits only
   * for what is left of it, and no retry starts whose backoff would reach it.
   */
  get deadline(): number {
    return this.#options.deadline
  }

  /** Attempts handed out so far (each may have reached its upstream). */
  get attempted(): number {
    return this.#tried
  }

  /**
   * Where in the turns the first endpoint is that `skip` passes and whose breaker is closed. None: a
   * hedge's is -1 (none is sent), a try's 0 (the next in turn: every endpoint is tried when all are open).
   */
  #closed(skip?: (endpoint: Endpoint) => boolean): number {
    const { resilience, breaker } = this.#options
    const k = this.#order.findIndex((e) => !skip?.(e) && !breaker.isOpen(e, resilience.breaker))
    return k < 0 && !skip ? 0 : k
  }

  /**
   * Counts a failure against its endpoint's breaker, when it is the endpoint's fault, and keeps its
   * `Retry-After` (a hedge's too): it speaks for the endpoint whenever its turn comes again.
   */
  recordFailure(error: unknown, endpoint: Endpoint): void {
    // A failed poll is not retried (`finalFailure`), but it is still the endpoint's fault.
    countFault(this.#options.breaker, endpoint, error, this.#options.resilience.breaker)
    const asked = retryAfterMs(error)
    if (asked !== undefined) (this.#notBefore ??= new Map()).set(endpoint.base, Date.now() + asked)
    const holds = this.#notBefore
    // Should this be the call's last failure (one worth another try), its caller waits for the soonest
    // endpoint that asked for a wait: not this one's, nor no wait at all because this one asked for none.
    if (holds && isRetryable(error)) (error as GatewayError).headers['retry-after'] = String(Math.max(0, Math.ceil((Math.min(...holds.values()) - Date.now()) / 1000)))
  }

  /** How long `endpoint` is still held by its `Retry-After` (ms; none when 0 or less). */
  #held(endpoint: Endpoint | undefined): number {
    return (this.#notBefore?.get(endpoint?.base ?? '') ?? 0) - Date.now()
  }

  succeeded(endpoint: Endpoint): void {
    this.#options.breaker.success(endpoint)
  }

  /** Runs `attempt` until it succeeds or the plan gives up; throws the last failure. */
  async run<T>(attempt: (endpoint: Endpoint) => Promise<T>): Promise<T> {
    for (;;) {
      const endpoint = this.next()
      if (!endpoint) throw new GatewayError('upstream_unavailable', 'No upstream endpoint could be tried.')
      try {
        const result = await attempt(endpoint)
        this.succeeded(endpoint)
        return result
      } catch (error) {
        if (!(await this.retryAfter(error, endpoint))) throw error
      }
    }
  }
}

export function isRetryable(error: unknown): boolean {
  const verdict = marked.get(error as GatewayError)
  // A timeout, podgate's or a proxy's (a 504), is never retried: the call may have queued a job, or be running one.
  return verdict ? verdict === 'retry' : (error as GatewayError | undefined)?.code !== 'upstream_timeout' && endpointFault(error)
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve()
    const timer = setTimeout(done, ms)
    function done() {
      clearTimeout(timer)
      signal?.removeEventListener('abort', done)
      resolve()
    }
    signal?.addEventListener('abort', done, { once: true })
  })
}

/**
 * `promise`, or after `ms` an `upstream_timeout` saying `message` (what `promise` does then is the caller's).
 *
 * @example
 * const first = await within(reader.read(), 5_000, 'The model produced no first token in time.')
 */
export async function within<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer!: ReturnType<typeof setTimeout>
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new GatewayError('upstream_timeout', message)), ms)))
  try {
    return await Promise.race([promise, timeout])
  } finally {
    clearTimeout(timer)
  }
}
