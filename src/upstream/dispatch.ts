/**
 * The pipeline's last step: orders the model's endpoints (weighted, breaker-aware) and serves the
 * request in the mode of the endpoint each attempt lands on, failing over before the first byte.
 */
import type { ResolvedOptions } from '../config/schema.ts'
import { toGatewayError } from '../errors/index.ts'
import { waitUntilOf } from '../http/context.ts'
import type { CompletionContext, CompletionHandler } from '../pipeline/index.ts'
import { orderEndpoints } from '../routing/models.ts'
import { EndpointBreaker } from './breaker.ts'
import type { Breaker } from './breaker.ts'
import { nativeJson } from './native.ts'
import { nativeStream } from './native-stream.ts'
import { openaiRouteCompletion } from './openai-route.ts'
import { RetryPlan } from './retry.ts'
import type { RunpodClient } from './runpod/client.ts'

export interface DispatchOptions {
  client: RunpodClient
  runpod: ResolvedOptions['runpod']
  /** Endpoint health shared by this gateway's requests. Default: a new breaker (per isolate). */
  breaker?: Breaker
}

export function createDispatcher(options: DispatchOptions): CompletionHandler {
  const breaker = options.breaker ?? new EndpointBreaker()
  return function dispatch(ctx: CompletionContext): Promise<Response> {
    const signal = ctx.c.req.raw.signal
    const ordered = orderEndpoints(ctx.model, (e) => breaker.isOpen(e))
    // Mixed-mode models fail over only among endpoints of the mode the first pick chose.
    const mode = ordered[0]?.mode ?? ctx.model.config.mode
    const endpoints = ordered.filter((e) => e.mode === mode)
    const call = {
      client: options.client,
      runpod: options.runpod,
      model: ctx.model,
      plan: new RetryPlan({ endpoints, resilience: ctx.model.config.resilience, breaker, signal }),
      request: ctx.request,
      signal,
      waitUntil: waitUntilOf(ctx.c),
      settle: ctx.settle,
    }
    const serve = mode === 'openai' ? openaiRouteCompletion : ctx.request.stream ? nativeStream : nativeJson
    return serve(call).catch((error: unknown) => {
      // A caller who hung up after a request went upstream is charged its prompt (quota stage).
      if (signal.aborted && call.plan.attempted > 0) ctx.settle({ ok: false, error: toGatewayError(error), producedOutput: false, reachedUpstream: true })
      throw error
    })
  }
}
