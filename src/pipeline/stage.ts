/**
 * The stage contract: what every completion stage (quota, cache, ...) and the upstream dispatcher
 * implement or receive. Kept apart from the runner (`pipeline/index.ts`) so stages and upstream code
 * import the contract without importing the code that runs them.
 *
 * Contract: a stage that answers without calling `next` (a cache hit, a refusal) must `settle` the
 * context itself; the dispatcher settles every answer it produces.
 */
import type { Context } from 'hono'
import type { GatewayError } from '../errors/index.ts'
import type { NormalizedRequest } from '../normalize/types.ts'
import type { Reservation } from '../quota/store.ts'
import type { ResolvedModel } from '../routing/models.ts'
import type { GatewayEnv } from '../types.ts'

/** OpenAI's `usage` object, as upstreams report it and quotas settle from it. */
export interface TokenUsage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
}

/**
 * `cached`, on either kind of end: the answer was not this request's own upstream call (a hit from
 * podgate's cache, or a coalesced twin served from another caller's call), so quota counts the
 * request and never its tokens, however it ended: finished, failed, or left by its caller.
 */
export type CompletionOutcome =
  /**
   * `estimate`: podgate's count of the output (`prompt_tokens` 0), for when the upstream reported no
   * usage (a current worker-vllm's native shorthand stream, a stream cut before its usage chunk). Quota charges it with the prompt estimate; it is
   * never shown to a caller, cached or shared, which is why it is not `usage`.
   */
  | { ok: true; usage?: TokenUsage; estimate?: TokenUsage; cached?: boolean }
  /**
   * `producedOutput`: some of the answer reached the caller before the failure. `reachedUpstream`: the
   * caller went away after the request reached the upstream, so the prompt was processed and is paid for.
   * `refused`: a later stage refused the request before it went upstream (the key's quota, after a
   * token's own): it counts as never made. `estimate`: as on success, podgate's count of the output so far.
   */
  | { ok: false; error: GatewayError; producedOutput: boolean; usage?: TokenUsage; estimate?: TokenUsage; reachedUpstream?: boolean; refused?: boolean; cached?: boolean }

export interface CompletionContext {
  c: Context<GatewayEnv>
  request: NormalizedRequest
  model: ResolvedModel
  /** Resolves exactly once with how the answer ended. */
  readonly outcome: Promise<CompletionOutcome>
  /** Resolves `outcome`; later calls are ignored. Called by the upstream dispatcher. */
  settle(outcome: CompletionOutcome): void
  /**
   * Runs `listener` once, when the caller left: its request's signal aborted, or a stage heard it
   * otherwise (`callerLeft`). At once when it already has.
   */
  onCallerLeft(listener: () => void): void
  /**
   * Told by a stage that heard the caller leave by other means than its request's signal (the cache's
   * leader, whose pipe found its body cancelled, on a host whose signal does not say so).
   */
  callerLeft(): void
  /**
   * Set before `next` by a stage that records a streamed answer (the cache). When the upstream code
   * pipes the stream natively (streaming/openai-pipe.ts), the caller's body is the upstream's bytes and
   * cannot be read along cheaply: it sets `copy.piped`, hands the answer's text to `copy.text` in order
   * as the upstream sends it, then calls `copy.end` once the upstream's part is over, however fast the
   * caller reads; the stage records from that instead of reading the body.
   */
  copy?: StreamCopy
  /**
   * Set by a stage's `warm` that may answer without the upstream (the cache): whether it will (a fresh
   * hit), found out once, when first called (the stage's own lookup). A stage ahead of it that would
   * refuse the call for the upstream's work (the quota's token limits) asks first: a cached answer costs
   * no tokens.
   */
  withoutUpstream?: () => Promise<boolean>
  /**
   * What the upstream call runs under, when not its caller's request signal: set by a stage that shares
   * the call with other callers (the cache's coalescing), to abort once every one of them left.
   */
  signal?: AbortSignal
  /**
   * The first quota reservation that admitted the call (`p`: its prompt estimate); or, set by the native
   * surface on a job's terminal poll, that job's (`id`: its upstream id), which the quota stages correct
   * once to `charge` tokens.
   */
  job?: Reservation & { p: number; id?: string; charge?: number }
}

export interface StreamCopy {
  /** Set by the upstream code when it piped the stream: the answer's text arrives through `text`. */
  piped: boolean
  /** The next piece of the answer's text (SSE, as the upstream wrote it). */
  text(piece: string): void
  /** The upstream's part is over: how it ended (see `CopyEnd`). Called once, after the last `text`. */
  end(end: CopyEnd): void
  /**
   * Asked when the caller left mid-answer: true when others wait for this answer (a cache flight's
   * joiners), so the upstream's part is read on for them rather than stopped.
   */
  readOn?(): boolean
}

/** How a piped stream's upstream part ended, read from the answer's last events. */
export interface CopyEnd {
  /** The last event was `[DONE]`. */
  done: boolean
  /** A vLLM error event among the last events, or why podgate stopped the upstream. */
  error?: GatewayError
  usage?: TokenUsage
  /** podgate stopped the upstream: its caller left or its key was revoked (not the upstream's fault), or the idle or total timeout. */
  stopped?: 'caller' | 'revoked' | 'timeout'
}

export type CompletionHandler = (ctx: CompletionContext) => Promise<Response>
export type CompletionStage = ((ctx: CompletionContext, next: CompletionHandler) => Promise<Response>) & {
  /**
   * Optional: starts the reads the stage will wait for, before any stage runs, so they overlap the
   * stages ahead of it (the cache's purge generation, while the quota stage waits on its own store).
   * Called once per request, in stage order; it must read only, never throw, and leave any failure for
   * the stage itself to meet.
   */
  warm?: (ctx: CompletionContext) => void
}
