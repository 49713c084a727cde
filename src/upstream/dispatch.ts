/**
 * The pipeline's last step: picks an endpoint of the model and serves the request in its mode.
 */
import type { ResolvedOptions } from '../config/schema.ts'
import { waitUntilOf } from '../http/context.ts'
import type { CompletionContext, CompletionHandler } from '../pipeline/index.ts'
import { pickEndpoint } from '../routing/models.ts'
import { nativeCompletion } from './native.ts'
import { openaiRouteCompletion } from './openai-route.ts'
import type { RunpodClient } from './runpod/client.ts'

export interface DispatchOptions {
  client: RunpodClient
  runpod: ResolvedOptions['runpod']
}

export function createDispatcher(options: DispatchOptions): CompletionHandler {
  return function dispatch(ctx: CompletionContext): Promise<Response> {
    const endpoint = pickEndpoint(ctx.model)
    const call = {
      client: options.client,
      runpod: options.runpod,
      model: ctx.model,
      endpoint,
      request: ctx.request,
      signal: ctx.c.req.raw.signal,
      waitUntil: waitUntilOf(ctx.c),
      settle: ctx.settle,
    }
    return endpoint.mode === 'openai' ? openaiRouteCompletion(call) : nativeCompletion(call)
  }
}
