/**
 * The pipeline's last step: orders the model's endpoints (weighted, breaker-aware) and serves the
 * request in the mode of the endpoint each attempt lands on, failing over before the first byte.
 *
 * A model may mix `openai` and `native` endpoints: the endpoints of the first pick's mode are tried
 * first (each mode's handler owns its retries, hedging and timeouts), and when all of them failed in a
 * way worth retrying, before any output, the other mode's endpoints are tried the same way.
 */
import { toGatewayError } from '../errors/index.ts'
import { nativeStream } from './native-stream.ts'
import { waitUntilOf } from '../http/context.ts'
import { openaiRouteCompletion } from './openai-route.ts'
import { orderEndpoints } from '../routing/models.ts'
import { EndpointBreaker } from './breaker.ts'
import type { Breaker } from './breaker.ts'
import { nativeJson } from './native.ts'
import { isRetryable, RetryPlan } from './retry.ts'
import type { ResolvedOptions } from '../config/schema.ts'
import type { CompletionContext, CompletionHandler } from '../pipeline/index.ts'
import type { Endpoint, RunpodClient } from './runpod/client.ts'
import type { CompletionCall } from './types.ts'

/**
 * vLLM routes outside `/v1` (`/tokenize`, `/pooling`, ...): Runpod's OpenAI route is addressed under
 * `/openai/v1`, so they go to every endpoint as `openai_route` jobs, which worker-vllm v2.24+ serves.
 */
function jobOnly(request: CompletionContext['request']): boolean {
  return request.route !== undefined && !request.route.path.startsWith('/v1/')
}

export interface DispatchOptions {
  client: RunpodClient
  runpod: ResolvedOptions['runpod']
  streaming: ResolvedOptions['streaming']
  /** Endpoint health shared by this gateway's requests. Default: a new breaker (per isolate). */
  breaker?: Breaker
}

export function createDispatcher(options: DispatchOptions): CompletionHandler {
  const breaker = options.breaker ?? new EndpointBreaker()
  return async function dispatch(ctx: CompletionContext): Promise<Response> {
    const signal = ctx.signal ?? ctx.c.req.raw.signal
    const ordered = orderEndpoints(ctx.model, (e) => breaker.isOpen(e, ctx.model.config.resilience.breaker))
    const groups = byMode(ordered, ctx.model.config.mode)
    // `timeouts.totalMs` bounds the whole call: every mode's tries, their retries and backoff included.
    const deadline = Date.now() + ctx.model.config.resilience.timeouts.totalMs
    for (let i = 0; ; i++) {
      const { mode, endpoints } = groups[i]!
      const last = i === groups.length - 1
      /** This group answered (a stream it opened): nothing else will be tried, so every outcome is the request's. */
      let answered = false
      const call: CompletionCall = {
        client: options.client,
        runpod: options.runpod,
        streaming: options.streaming,
        model: ctx.model,
        plan: new RetryPlan({ endpoints, resilience: ctx.model.config.resilience, breaker, signal, deadline }),
        request: ctx.request,
        signal,
        waitUntil: waitUntilOf(ctx.c),
        // A group that failed before any output may be followed by the other mode's: its failure is not
        // the outcome yet (and if it is, the pipeline settles the error this throws). Once it answered,
        // a stream that ends before its first event is the outcome.
        settle: last ? ctx.settle : (outcome) => (answered || outcome.ok || outcome.producedOutput ? ctx.settle(outcome) : undefined),
        copy: ctx.copy,
      }
      try {
        const response = await (mode === 'openai' && !jobOnly(ctx.request) ? openaiRouteCompletion(call) : ctx.request.stream ? nativeStream(call) : nativeJson(call))
        answered = true
        return response
      } catch (error) {
        // A caller who hung up after a request went upstream is charged its prompt (quota stage).
        if (signal.aborted && call.plan.attempted > 0) ctx.settle({ ok: false, error: toGatewayError(error), producedOutput: false, reachedUpstream: true })
        // No other mode is started past `timeouts.totalMs`: its request would be cut off at once (an
        // OpenAI-route one left running upstream as a job), and the caller would get a timeout, not this failure.
        if (last || !isRetryable(error) || signal.aborted || Date.now() >= deadline) throw error
      }
    }
  }
}

/** The endpoints grouped by mode, the first pick's mode first, each group in the given order. */
function byMode(ordered: readonly Endpoint[], fallback: Endpoint['mode']): { mode: Endpoint['mode']; endpoints: Endpoint[] }[] {
  const groups: { mode: Endpoint['mode']; endpoints: Endpoint[] }[] = []
  for (const endpoint of ordered) {
    const group = groups.find((g) => g.mode === endpoint.mode)
    if (group) group.endpoints.push(endpoint)
    else groups.push({ mode: endpoint.mode, endpoints: [endpoint] })
  }
  return groups.length > 0 ? groups : [{ mode: fallback, endpoints: [] }]
}
