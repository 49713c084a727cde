/**
 * The completion pipeline: the stages a normalized request passes through on its way upstream.
 *
 * A stage is middleware over a `CompletionContext` (quota reserve/settle, cache lookup/store, ...);
 * the last handler dispatches upstream. `ctx.outcome` resolves once, after the last byte of a stream
 * or with the JSON answer, so a stage can settle quotas or store a cache entry from real results
 * without buffering the response itself. The contract itself is in `stage.ts`.
 */
import type { Context } from 'hono'
import { toGatewayError } from '../errors/index.ts'
import { onAbort } from '../http/context.ts'
import type { NormalizedRequest } from '../normalize/types.ts'
import type { ResolvedModel } from '../routing/models.ts'
import type { GatewayEnv } from '../types.ts'
import type { CompletionContext, CompletionHandler, CompletionOutcome, CompletionStage } from './stage.ts'

// The contract lives in stage.ts; re-exported so existing imports of pipeline/index.ts keep working.
export type { CompletionContext, CompletionHandler, CompletionOutcome, CompletionStage, CopyEnd, StreamCopy, TokenUsage } from './stage.ts'

/**
 * Chains stages in order around the terminal handler, after starting every stage's `warm` reads. Any
 * step that throws before answering settles the outcome as a failure with no output, so a stage that
 * already reserved something (a token's quota, before its key's quota refuses) is always released: no
 * stage waits on an outcome that cannot come. `settle` ignores repeats, so guarding every step is safe.
 */
export function composeStages(stages: readonly CompletionStage[], terminal: CompletionHandler): CompletionHandler {
  // The requests that reached the dispatcher: a stage that throws for any other never sent it upstream.
  const dispatched = new WeakSet<CompletionContext>()
  const dispatch: CompletionHandler = (ctx) => {
    dispatched.add(ctx)
    return terminal(ctx)
  }
  const chain = stages.reduceRight<CompletionHandler>((next, stage) => guard((ctx) => stage(ctx, next), dispatched), guard(dispatch, dispatched))
  const warmers = stages.flatMap((stage) => (stage.warm ? [stage.warm] : []))
  if (warmers.length === 0) return chain
  // Each stage's own reads start now and overlap the stages ahead of it (see `CompletionStage.warm`).
  return function warmed(ctx) {
    for (const warm of warmers) warm(ctx)
    return chain(ctx)
  }
}

export function createCompletionContext(c: Context<GatewayEnv>, request: NormalizedRequest, model: ResolvedModel): CompletionContext {
  let resolve!: (outcome: CompletionOutcome) => void
  const outcome = new Promise<CompletionOutcome>((r) => (resolve = r))
  let settled = false
  let left = false
  let listeners: Array<() => void> | undefined
  return {
    c,
    request,
    model,
    outcome,
    settle(value) {
      if (settled) return
      settled = true
      resolve(value)
    },
    onCallerLeft(listener) {
      let told = false
      const once = () => {
        if (told) return
        told = true
        listener()
      }
      onAbort(c.req.raw.signal, once)
      if (left) once()
      else (listeners ??= []).push(once)
    },
    callerLeft() {
      if (left) return
      left = true
      for (const listener of listeners ?? []) listener()
    },
  }
}

/** A throw from a request that never reached the dispatcher settles it as `refused`: it never went upstream. */
function guard(handler: CompletionHandler, dispatched: WeakSet<CompletionContext>): CompletionHandler {
  return async function guarded(ctx) {
    try {
      return await handler(ctx)
    } catch (error) {
      ctx.settle({ ok: false, error: toGatewayError(error), producedOutput: false, refused: !dispatched.has(ctx) })
      throw error
    }
  }
}
