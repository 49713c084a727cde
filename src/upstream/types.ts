/**
 * What a completion call needs from the request path, whichever upstream mode serves it.
 */
import type { ResolvedOptions } from '../config/schema.ts'
import type { NormalizedRequest, RequestKind } from '../normalize/types.ts'
import type { ResolvedModel } from '../routing/models.ts'
import type { RunpodClient } from './runpod/client.ts'
import type { CompletionOutcome, StreamCopy } from '../pipeline/stage.ts'
import type { RetryPlan } from './retry.ts'

// Defined with the stage contract (quotas settle from it); re-exported for the upstream code.
export type { TokenUsage } from '../pipeline/stage.ts'

const ID_PREFIX: Record<RequestKind, string> = { chat: 'chatcmpl', completion: 'cmpl', embedding: 'embd' }

export function completionId(kind: RequestKind): string {
  return `${ID_PREFIX[kind]}-${crypto.randomUUID().replaceAll('-', '')}`
}

export interface CompletionCall {
  client: RunpodClient
  runpod: ResolvedOptions['runpod']
  streaming: ResolvedOptions['streaming']
  model: ResolvedModel
  /** The attempts this request may make, over the model's endpoints in order. */
  plan: RetryPlan
  request: NormalizedRequest
  /** Aborts when the caller goes away. */
  signal?: AbortSignal
  /** Work that must outlive the response (e.g. cancelling an upstream job). */
  waitUntil: (promise: Promise<unknown>) => void
  /** Reports how the answer ended, once (see CompletionContext.settle). */
  settle: (outcome: CompletionOutcome) => void
  /** A stage's reader of a natively piped stream (see CompletionContext.copy). */
  copy?: StreamCopy
}

export const SSE_HEADERS: Readonly<Record<string, string>> = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  // Stops reverse proxies (nginx and friends) from buffering the stream.
  'x-accel-buffering': 'no',
}
