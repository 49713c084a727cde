/**
 * The job calls that must not leave a job running for nobody, nor give up at Runpod's first refusal
 * (runpod-api.md §1: every op has a per-endpoint rate limit, `/cancel` the lowest at 100 per 10 s and 20
 * at once, and over it a 429):
 *
 * - `runJob`: a `/run` cut off may have queued a job with no id to cancel, so one whose caller stops
 *   waiting (its deadline) runs on in the background, and the job it queued is cancelled.
 * - `cancelJob`: only `/cancel`, `executionTimeout` and `ttl` stop a job, so a cancel that was refused,
 *   failed or never arrived is sent again, or the GPU runs (and bills) for nobody.
 * - `streamPage` (and `polled`, for `/status` and `/status-sync`): a poll Runpod refused (429, or a 5xx)
 *   handed out nothing, so it is asked again instead of ending (or cancelling) a healthy job. A `/stream`
 *   poll that broke off without a status is not asked again: its page may have been handed out and lost,
 *   and a second poll would silently skip those items.
 */
import { GatewayError } from '../errors/index.ts'
import { toNativeInput } from '../normalize/index.ts'
import { sleep, unsent, within } from './retry.ts'
import { isTerminal, UpstreamStatus } from './runpod/client.ts'
import type { Endpoint, JobStatus, JobStream, RunpodClient } from './runpod/client.ts'
import type { CompletionCall } from './types.ts'

/** Tries of one cancel, in all. */
const CANCEL_TRIES = 5
/** One cancel's own timeout: a hung call must not use up the time the others need. */
const CANCEL_TIMEOUT_MS = 5_000
/** All the tries of one cancel end within this: `waitUntil` allows 30 s after the response. */
const CANCEL_WITHIN_MS = 25_000
/** Tries of one refused poll, in all. */
const POLL_TRIES = 4
/** First pause before asking again; each later one doubles (full jitter), and a longer `Retry-After` wins up to the cap. */
const BASE_DELAY_MS = 500
const MAX_DELAY_MS = 8_000

/**
 * One poll of a job (`ask`), asked again (up to POLL_TRIES in all) while Runpod refuses it with a 429 or
 * a 5xx; `onRetry` (given the refusal's status) counts each extra poll, and false (the caller's poll
 * budget is spent) asks no more.
 * Throws the last refusal, or at once any other failure.
 *
 * @example
 * job = await polled(() => client.status(endpoint, job.id, { signal }), { signal })
 */
export async function polled<T>(ask: () => Promise<T>, options: { signal?: AbortSignal | undefined; onRetry?: (status: number) => boolean }): Promise<T> {
  for (let tried = 1; ; tried++) {
    try {
      return await ask()
    } catch (error) {
      const status = statusOf(error)
      if (status === undefined || (status !== 429 && status < 500) || tried >= POLL_TRIES || options.signal?.aborted || options.onRetry?.(status) === false) throw error
      await sleep(delayFor(error, tried), options.signal)
      if (options.signal?.aborted) throw error
    }
  }
}

/**
 * Cancels a job, asking again after a 429, a 5xx or a network error; resolves once Runpod took it,
 * answered that the job is gone (another 4xx: nothing left to stop), or every try failed.
 *
 * @example
 * call.waitUntil(cancelJob(client, endpoint, job.id))
 */
export async function cancelJob(client: RunpodClient, endpoint: Endpoint, id: string): Promise<void> {
  const started = Date.now()
  for (let tried = 1; ; tried++) {
    try {
      await client.cancel(endpoint, id, { timeoutMs: CANCEL_TIMEOUT_MS })
      return
    } catch (error) {
      const status = statusOf(error)
      // Without a status: the call broke or timed out, and may not have arrived.
      const lost = error instanceof GatewayError && (error.code === 'upstream_unavailable' || error.code === 'upstream_timeout')
      const again = status === undefined ? lost : status === 429 || status >= 500
      const delay = delayFor(error, tried)
      // The next try, pause and call included, must end within the time `waitUntil` allows.
      if (!again || tried >= CANCEL_TRIES || Date.now() - started + delay + CANCEL_TIMEOUT_MS > CANCEL_WITHIN_MS) return
      await sleep(delay)
    }
  }
}

/**
 * Waits `ms` for the answer of a call that queues a job (`send`: a `/run` or `/runsync`), then rejects with
 * `upstream_timeout`. The call is not cut there: cut, it could leave a job queued with no id to cancel. It
 * is given 20 s more (so that its job's cancel still fits in the 30 s `waitUntil` allows), ends in the
 * background, and the job it queued is cancelled; so is one whose caller is `gone()` by the time it answers.
 *
 * @example
 * const job = await jobWithin(client, endpoint, { send: (timeoutMs) => client.run(endpoint, body, { timeoutMs }), ms: 120_000, waitUntil })
 */
export function jobWithin(
  client: RunpodClient,
  endpoint: Endpoint,
  { send, ms, waitUntil, gone = () => false }: {
    send: (timeoutMs: number) => Promise<JobStatus>
    ms: number
    waitUntil: (promise: Promise<unknown>) => void
    gone?: () => boolean
  },
): Promise<JobStatus> {
  const queued = send(ms + 20_000)
  let late = false
  // `late` is set once `within` has settled: this reaction, registered before `within`'s own, has run by
  // then for an answer in time (a job queued, not cancelled).
  waitUntil(queued.then((job) => ((late || gone()) && !isTerminal(job.status) ? cancelJob(client, endpoint, job.id) : undefined), () => undefined))
  return within(queued, ms, 'The upstream did not answer in time.').finally(() => (late = true))
}

/**
 * Queues the call's job with `/run`, its answer waited for until `deadline` or `runpod.timeoutMs`, whichever
 * comes first: then `upstream_timeout` (see `jobWithin`).
 *
 * @example
 * const job = await runJob(call, endpoint, plan.deadline)
 */
export function runJob(call: CompletionCall, endpoint: Endpoint, deadline: number): Promise<JobStatus> {
  const { client } = call
  const ms = Math.min(deadline - Date.now(), call.runpod.timeoutMs)
  // No time left to hear its answer: a job queued now would only be cancelled (a warm worker may bill it first).
  if (ms <= 0) return Promise.reject(unsent())
  const body = { input: toNativeInput(call.request, call.model.servedModelName) }
  return jobWithin(client, endpoint, { send: (timeoutMs) => client.run(endpoint, body, { timeoutMs }), ms, waitUntil: call.waitUntil })
}

/**
 * One `/stream` page, asked again (up to POLL_TRIES in all) while Runpod refuses the poll with a 429 or
 * a 5xx and `onRetry` (which counts each extra poll against the caller's budget) answers true. Throws the
 * last refusal, or at once any other failure.
 *
 * A terminal page that held items is followed by more polls until one holds none, their items added to
 * it: runpod-python's `stream()` does so, as a terminal page need not hand out a job's last items. Given
 * `onItems`, each such page's items are offered to it before the next poll (as runpod-python yields
 * them), so the answer's last items need not wait a round trip: the page returned holds the rest. A
 * follow-up that fails, or that the budget has no room for, may have left items: the page returned is
 * then marked `cut`, for the caller to read them from the job's saved `output`.
 * `follow: false` leaves the follow-up polls to the caller (the OpenAI surface's native streams).
 * A page some poll of which was refused with a 5xx and asked again is marked `refused`: a proxy's 5xx
 * may have come after Runpod handed its items out, and they are gone (Runpod's 429 hands out nothing).
 */
export async function streamPage(
  client: RunpodClient,
  endpoint: Endpoint,
  id: string,
  options: { waitMs?: number; signal?: AbortSignal; onRetry?: (status: number) => boolean; onItems?: (items: JobStream['stream']) => boolean; follow?: false },
): Promise<JobStream & { cut?: true; refused?: true }> {
  let refused: true | undefined
  const ask = (waitMs = 0) => polled(() => client.stream(endpoint, id, { waitMs, signal: options.signal }), { ...options, onRetry: (status) => (status > 499 && (refused = true), options.onRetry?.(status) !== false) })
  const page: JobStream & { cut?: true; refused?: true } = await ask(options.waitMs)
  let more = page.stream
  while (options.follow !== false && isTerminal(page.status) && more.length > 0) {
    if (options.onItems?.(page.stream)) page.stream = []
    // No `?wait=`: the job has ended. runpod-python's local server forgets a streamed job (FAILED "Job ID
    // not found", no items): that page ends the answer with what the pages held. A follow-up (`onRetry(0)`:
    // no refusal, one poll more) the budget has no room for, or that failed, leaves the page cut (the items
    // offered to `onItems` went out).
    const next = options.onRetry?.(0) !== false && (await ask().catch(() => undefined))
    if (!next) return { ...page, cut: true, refused }
    more = next.stream
    page.stream.push(...more)
  }
  return refused ? { ...page, refused } : page
}

function statusOf(error: unknown): number | undefined {
  return error instanceof GatewayError && error.cause instanceof UpstreamStatus ? error.cause.status : undefined
}

function delayFor(error: unknown, tried: number): number {
  const ceiling = Math.min(MAX_DELAY_MS, BASE_DELAY_MS * 2 ** (tried - 1))
  const jittered = Math.floor(ceiling / 2 + (Math.random() * ceiling) / 2)
  const asked = error instanceof GatewayError && error.cause instanceof UpstreamStatus ? error.cause.retryAfterSeconds : undefined
  return asked === undefined ? jittered : Math.min(MAX_DELAY_MS, Math.max(jittered, asked * 1000))
}
