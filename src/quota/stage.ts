/**
 * `quotaStage`: the pipeline stage that reserves a call's quota before it goes upstream and settles it
 * from the real result once `ctx.outcome` resolves (after the last byte of a stream).
 *
 * Settling: an answer that was not the request's own upstream call (a cache hit, a coalesced twin,
 * however it ended) counts the request, no tokens; a success counts its real `usage`, or, when the
 * upstream reported none, the prompt estimate plus the output podgate counted (`estimate`); a
 * failure before any output refunds the tokens, unless the caller hung up after the prompt reached the
 * upstream (then the prompt and any reported output count); a failure after some output counts what
 * the upstream reported (or, as on success, the prompt estimate plus the output counted), else keeps the
 * reservation. Requests are never refunded once they went upstream;
 * one that a later stage refused before that (the key's quota, after a token's own) is taken back.
 * A key with no limits costs one policy merge and no store access.
 */
import { GatewayError } from '../errors/index.ts'
import { waitUntilOf } from '../http/context.ts'
import { withHeaders } from '../http/headers.ts'
import type { NormalizedRequest } from '../normalize/types.ts'
import type { CompletionContext, CompletionOutcome, CompletionStage } from '../pipeline/index.ts'
import { limitHeaders, retryAfterOf } from './headers.ts'
import { limitStates } from './limits.ts'
import type { LimitName, LimitState, QuotaCost, QuotaUsage } from './limits.ts'
import type { QuotaPolicy } from './policy.ts'
import type { QuotaService } from './service.ts'

/** The limits a call was admitted under, merged across its quota stages (a token's runs around its key's). */
const admitted = new WeakMap<CompletionContext, LimitState[]>()

const LIMIT_TEXT: Record<LimitName, string> = {
  rpm: 'requests per minute',
  rpd: 'requests per day',
  tpm: 'tokens per minute',
  tpd: 'tokens per day',
  streams: 'concurrent streams',
}

/**
 * What a request reserves: its prompt estimate (text at ~4 characters a token, token ids one each, a
 * fixed cost per image / audio / video part, tool definitions and response schemas as text; see
 * `RequestEstimate`) plus every token it may generate: max_tokens for each prompt × max(n, best_of).
 * Settling from the upstream's usage corrects it.
 */
export function estimateTokens(request: NormalizedRequest): number {
  return request.estimate.promptTokens + request.sampling.max_tokens * request.estimate.sequences
}

/**
 * What an answer costs. Not its own upstream call (`cached`: a hit, or a coalesced twin that finished,
 * failed with the shared call, or left): free. Nothing reached the caller: free, unless the caller hung
 * up after the prompt reached the upstream (it was processed on a GPU), which costs the prompt plus
 * what the upstream reports generated. An upstream that counted no prompt tokens, or an answer whose usage
 * podgate counted itself (`estimate`), is charged the prompt estimate plus the completion tokens.
 */
export function tokensToCharge(outcome: CompletionOutcome, reserved: number, promptEstimate = 0): number {
  if (outcome.cached) return 0
  const usage = outcome.usage ?? outcome.estimate
  if (outcome.ok || outcome.producedOutput) return usage ? charged(usage, promptEstimate) : reserved
  if (outcome.reachedUpstream) return usage ? charged(usage, promptEstimate) : promptEstimate
  return 0
}

/**
 * @example
 * // createGateway does this; a host app composing its own pipeline can too.
 * const quota = createQuotaService({ kv: (c) => c.env.PODGATE_KV, defaults: { requestsPerMinute: 60 } })
 * const stages = [quotaStage(quota)]
 */
export function quotaStage(service: QuotaService): CompletionStage {
  return async function quota(ctx, next) {
    const principal = ctx.c.get('principal')
    // The token stage runs this stage with the token as the principal: its refusals name the token's limits.
    const holder = principal.keyId === principal.tokenId ? 'token' : 'key'
    const policy = service.policyFor(principal.quota, ctx.model.alias, holder === 'token')
    if (!policy) return next(ctx)

    const store = service.storeFor(ctx.c, policy)
    const now = service.now()
    const background = waitUntilOf(ctx.c)
    const job = ctx.job
    // A job's terminal poll (`job.id`): each counter its submission charged, corrected once, when the poller
    // is who reserved first (`job.keyId`: a token with a quota of its own, else the key) or that one's token.
    if (job?.id) return [principal.keyId, principal.tokenId].includes(job.keyId) && background(store.settle({ reservation: { ...job, keyId: principal.keyId }, tokens: job.charge!, job: job.id, background }).catch(() => undefined)), next(ctx)
    // A stream lasts its call's totalMs and at most a poll more (a /v2 event stream pauses then too), and a
    // coalesced twin may first wait a leader's totalMs (`deadlineOf`) before its own call: its lease outlives both.
    let cost: QuotaCost = { tokens: estimateTokens(ctx.request), stream: ctx.request.stream, leaseMs: 2 * ctx.model.config.resilience.timeouts.totalMs + 125_000 }
    let result = await store.reserve({ keyId: principal.keyId, policy, cost, now, background })
    // Refused for its tokens (tpm, tpd): a cached answer costs none (the request and a stream slot only).
    if (!result.ok && result.exceeded[0] === 't' && (await ctx.withoutUpstream?.())) {
      cost = { ...cost, tokens: 0 }
      result = await store.reserve({ keyId: principal.keyId, policy, cost, now, background })
    }
    if (!result.ok) throw rateLimited({ ...result, policy, cost, now, holder })

    let { reservation } = result
    // The stream slot is freed when the call ends, or at once when its caller leaves (its call may run on
    // for coalesced twins; its tokens settle when it ends). The KV store's count is freed once; the strict
    // store's lease goes with the final settle too (freeing it twice changes nothing), so an early release
    // a failed Durable Object call lost does not hold the slot for the lease's 30 minutes. A lost settle
    // only forfeits a refund or a correction; it must never fail the answer.
    const settle = (tokens: number, release: boolean) => {
      const held = reservation
      reservation = { ...held, stream: false }
      return store.settle({ reservation: held, tokens, release, background }).catch(() => undefined)
    }
    if (reservation.stream) ctx.onCallerLeft(() => reservation.stream && background(settle(reservation.tokens, false)))
    const prompt = ctx.request.estimate.promptTokens
    ctx.job ??= { ...reservation, p: prompt }
    background(ctx.outcome.then((outcome) => settle(tokensToCharge(outcome, reservation.tokens, prompt), !outcome.ok && outcome.refused === true)))

    // On the answer, and on an error after admission (an upstream 502, a relayed vLLM 400): it counted. Not
    // on one refused before it went upstream (the cache's 400): taken back, as a call refused before this stage.
    // A 429 from a stage inside this one (the key's, under a token's) keeps the fields of the limit it names.
    // A token's call is held to its own limits and its key's: each limit reported is the tighter of the two.
    const states = limitStates(policy, result.usage, now)
    for (const outer of admitted.get(ctx) ?? []) {
      const i = states.findIndex((s) => s.name === outer.name)
      if (i < 0) states.push(outer)
      else if (outer.remaining < states[i]!.remaining) states[i] = outer
    }
    admitted.set(ctx, states)
    let response: Response
    try {
      response = await next(ctx)
    } catch (error) {
      // Settled already, by the stage that threw (pipeline/index.ts `guard`).
      if (error instanceof GatewayError && error.code !== 'rate_limited' && !((await ctx.outcome) as { refused?: boolean }).refused) Object.assign(error.headers, limitHeaders(admitted.get(ctx)!))
      throw error
    }
    return withHeaders(response, limitHeaders(admitted.get(ctx)!))
  }
}

function charged(usage: { prompt_tokens: number; total_tokens: number }, promptEstimate: number): number {
  return usage.prompt_tokens > 0 ? usage.total_tokens : usage.total_tokens + promptEstimate
}

function rateLimited(input: { policy: QuotaPolicy; usage: QuotaUsage; exceeded: LimitName; cost: QuotaCost; now: number; holder: 'key' | 'token' }): GatewayError {
  const { policy, usage, exceeded, cost, now, holder } = input
  const states = limitStates(policy, usage, now)
  const state = states.find((s) => s.name === exceeded)
  const retryAfter = retryAfterOf(state)
  const limit = state?.limit ?? 0
  const byTokens = exceeded[0] === 't' // tpm, tpd
  const tooLarge = byTokens && cost.tokens > limit
  // A call that can never pass, or whose wait is longer than the openai SDK waits for (it would retry at once
  // and be refused again): `x-should-retry: false` stops its retries.
  const headers = { ...limitHeaders(states), 'retry-after': String(retryAfter), ...(tooLarge || retryAfter > 60 ? { 'x-should-retry': 'false' } : {}) }
  let message: string
  if (exceeded === 'streams') {
    message = `Too many concurrent streams: this ${holder} may keep ${limit} open. Retry when one ends.`
  } else if (tooLarge) {
    message = `This request reserves ${cost.tokens} tokens (prompt estimate + max_tokens), more than this ${holder}'s ${limit} ${LIMIT_TEXT[exceeded]}: lower max_tokens.`
  } else if (byTokens) {
    message = `Token quota reached: ${state?.remaining ?? 0} of ${limit} ${LIMIT_TEXT[exceeded]} left and this request reserves ${cost.tokens} (prompt estimate + max_tokens). Retry after ${retryAfter}s or lower max_tokens.`
  } else {
    const unit = limit === 1 ? LIMIT_TEXT[exceeded].replace('requests', 'request') : LIMIT_TEXT[exceeded]
    message = `Rate limit reached: ${limit} ${unit} for this ${holder}. Retry after ${retryAfter}s.`
  }
  return new GatewayError('rate_limited', message, { headers })
}
