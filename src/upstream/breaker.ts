/**
 * A circuit breaker per endpoint, held in the isolate: an endpoint that failed `failures` times in a row
 * is skipped for `cooldownMs`, then tried again (one more failure re-opens it; a success closes it). The
 * count is the endpoint's, the policy each model's: of two models sharing an endpoint, each skips it by
 * its own `failures` and `cooldownMs`.
 *
 * Per isolate on purpose: it costs no storage call on the request path, and each isolate learns about a
 * bad endpoint within `failures` requests of its own (measured: N isolates make `failures` x N calls to
 * a dead endpoint, each one failed over, so callers see a retry's latency, not an error). Sharing
 * through KV would not be sooner: KV reads are cached for 60 s at the edge, longer than the default
 * cool-down. A host that wants one breaker for several gateways passes its own `Breaker`
 * (`createGateway({ breaker })`), e.g. one instance for every gateway in the isolate.
 */
import type { Endpoint } from './runpod/client.ts'

export interface BreakerPolicy {
  /** Consecutive failures that open the breaker. */
  failures: number
  /** How long an open endpoint is skipped, in ms. */
  cooldownMs: number
}

export interface EndpointBreakerOptions {
  /** Clock in ms. Default `Date.now`. */
  now?: () => number
}

interface EndpointState {
  failures: number
  /** When the last of them was counted (ms). */
  at: number
}

/** What failover asks of a breaker; `EndpointBreaker` is the in-isolate one. */
export interface Breaker {
  /** True while the endpoint should be skipped (tried last) by a model with this policy. */
  isOpen(endpoint: Endpoint, policy: BreakerPolicy): boolean
  success(endpoint: Endpoint): void
  failure(endpoint: Endpoint, policy: BreakerPolicy): void
}

export class EndpointBreaker implements Breaker {
  readonly #states = new Map<string, EndpointState>()
  readonly #now: () => number

  constructor(options: EndpointBreakerOptions = {}) {
    this.#now = options.now ?? Date.now
  }

  success(endpoint: Endpoint): void {
    this.#states.delete(endpoint.base)
  }

  /** Counts a failure; the policy is read by `isOpen` (taken here as `Breaker` declares it, for hosts that delegate). */
  failure(endpoint: Endpoint, _policy?: BreakerPolicy): void {
    const state = this.#states.get(endpoint.base) ?? { failures: 0, at: 0 }
    state.failures++
    state.at = this.#now()
    this.#states.set(endpoint.base, state)
  }

  /** True while the endpoint is cooling down after `policy.failures` failures in a row. */
  isOpen(endpoint: Endpoint, policy: BreakerPolicy): boolean {
    const state = this.#states.get(endpoint.base)
    return state !== undefined && state.failures >= policy.failures && state.at + policy.cooldownMs > this.#now()
  }
}
