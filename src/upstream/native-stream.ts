/**
 * Serves a streamed completion through worker-vllm's native job API: `/run`, then `/stream/{id}` long
 * polls, rebuilt as OpenAI chunks whatever the worker generation.
 *
 * Owns the resilience of native streams. The response is held until the job produced its first output
 * (or failed, or the TTFT budget ran out), so a `/run` that failed, or a job that FAILED before any
 * output, is retried on the next endpoint while the caller has received nothing. Past the TTFT budget a
 * still-queued job may be hedged on another endpoint: the first to produce output wins and the other is
 * cancelled. First-token, idle and total timeouts cancel the job and end the answer with a 504, or an
 * SSE error event once the stream is open, and count against the breaker of each endpoint whose job was
 * still out. Every job given up on is cancelled upstream.
 */
import { createDialectDecoder, wasRelayed } from '../streaming/dialect-decoder.ts'
import { cancelJob, polled, runJob, streamPage } from './job-calls.ts'
import { CALLER_GONE, GatewayError, toGatewayError, upstreamError } from '../errors/index.ts'
import { createNativeStreamDecoder } from '../streaming/native-decoder.ts'
import type { NativeStreamDecoder } from '../streaming/native-decoder.ts'
import { DIALECTS, OPENAI_DIALECT } from '../streaming/dialects.ts'
import { countedUsage, DONE, encoder, encodeSSEData, HEARTBEAT, PULL_ONLY } from '../streaming/openai-chunks.ts'
import { failedOver, jobFailure, ranOn } from './native.ts'
import { finalFailure, sleep } from './retry.ts'
import { isTerminal } from './runpod/client.ts'
import type { Endpoint, JobStatus, JobStream } from './runpod/client.ts'
import { completionId, SSE_HEADERS } from './types.ts'
import type { CompletionCall, TokenUsage } from './types.ts'

export async function nativeStream(call: CompletionCall): Promise<Response> {
  const { client, runpod, request, model, plan } = call
  const { ttftBudgetMs, hedge, timeouts } = model.config.resilience
  const started = Date.now()
  // Never past `timeouts.totalMs`: an answer whose first token came later would be cut at once.
  const firstTokenDeadline = Math.min(started + timeouts.firstTokenMs, plan.deadline)
  const id = completionId(request.kind)
  const created = Math.floor(started / 1000)
  const object = request.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion'
  // vLLM's other streaming routes (`/v1/responses`, `/v1/messages`) are relayed as the worker sent them.
  const generates = request.route?.generates
  const dialect = generates ? DIALECTS[generates.dialect] : undefined

  const callerGone = new AbortController()
  const signal = call.signal ? AbortSignal.any([call.signal, callerGone.signal]) : callerGone.signal
  // A caller who left with its body unread (never cancelled) must not be waited for until the total timeout.
  signal.onabort = () => wake?.()
  let controller!: ReadableStreamDefaultController<Uint8Array>
  let closed = false
  let opened = false
  let producedOutput = false
  /** The attempt whose output reached the caller. */
  let won: Attempt | undefined
  let polls = 0
  /** A job was queued upstream: the prompt reached a worker. */
  let launched = false
  const live = new Set<Attempt>()
  let open!: () => void
  let refuse!: (error: GatewayError) => void
  const ready = new Promise<void>((resolve, reject) => {
    open = resolve
    refuse = reject
  })

  // Pull-based: once output flows, the next `/stream` poll waits until the caller has read what podgate
  // holds, so a slow reader slows the polling instead of filling the isolate's memory.
  let pulled = false
  let wake: (() => void) | undefined
  const body = new ReadableStream<Uint8Array>(
    {
      start(c) {
        controller = c
      },
      pull() {
        pulled = true
        wake?.()
      },
      cancel() {
        closed = true
        callerGone.abort()
        wake?.()
      },
    },
    PULL_ONLY,
  )

  function emit(bytes: Uint8Array): void {
    if (closed) return
    pulled = false
    controller.enqueue(bytes)
  }

  /** The last characters of the answer's text sent: whether it stopped between two events. */
  let sentTail = '\n\n'
  const atEventBoundary = () => /(?:\r\n|\r|\n)(?:\r\n|\r|\n)$/.test(sentTail)
  function emitText(text: string): void {
    if (closed || text === '') return
    sentTail = (sentTail + text).slice(-4)
    emit(encoder.encode(text))
  }
  /** A keep-alive, only between two events: a dialect's text may stop mid-line (a current worker's item). */
  function heartbeat(): void {
    if (atEventBoundary()) emit(HEARTBEAT)
  }

  /** Resolves once the caller asks for more (or left, or `untilMs` passed); true when it had to wait. */
  async function demand(untilMs: number): Promise<boolean> {
    if (pulled || closed) return false
    const stop = new AbortController()
    await Promise.race([new Promise<void>((resolve) => (wake = resolve)), sleep(untilMs - Date.now(), stop.signal)])
    stop.abort()
    wake = undefined
    return true
  }

  function openResponse(): void {
    if (opened) return
    opened = true
    open()
  }

  function newAttempt(endpoint: Endpoint, job: JobStatus): Attempt {
    const attempt: Attempt = {
      endpoint,
      jobId: job.id,
      status: job.status,
      ran: ranOn(job),
      pending: '',
      items: 0,
      abort: new AbortController(),
      backoff: 0,
      polledAt: 0,
      chunks: 0,
      decoder: dialect ? createDialectDecoder({
        dialect,
        onText: (text) => (attempt.pending += text),
        onEvent: () => {
          if (attempt.chunks++ === 0) attempt.firstAt = Date.now()
        },
        onUsage: (u) => (attempt.usage = u),
      }) : createNativeStreamDecoder({
        kind: request.kind,
        model: model.streamedModelName,
        id,
        created,
        maxTokens: request.sampling.max_tokens,
        onChunk: (chunk) => {
          if (attempt.chunks++ === 0) attempt.firstAt = Date.now()
          attempt.pending += `data: ${JSON.stringify(chunk)}\n\n`
        },
        onUsage: (u, { estimated }) => (attempt[estimated ? 'estimate' : 'usage'] = u),
        onUsageChunk: (chunk) => (attempt.usageChunk = chunk),
      }),
    }
    return attempt
  }

  /** Stops an attempt: its poll is aborted and, unless it already ended, its job is cancelled upstream. */
  function drop(attempt: Attempt): void {
    live.delete(attempt)
    attempt.abort.abort()
    if (attempt.ended) return
    attempt.ended = true
    call.waitUntil(cancelJob(client, attempt.endpoint, attempt.jobId))
  }

  async function launch(endpoint: Endpoint): Promise<Attempt> {
    // Not under the caller's signal (see `runJob`): only the id a `/run` answers lets podgate cancel its job
    // (the loop sees the caller gone and drops the attempt). Never waited for past the first token's deadline.
    const job = await runJob(call, endpoint, firstTokenDeadline)
    launched = true
    const attempt = newAttempt(endpoint, job)
    live.add(attempt)
    return attempt
  }

  /** Starts a job on the plan's next endpoint, retrying only while no job id came back. */
  async function start(): Promise<void> {
    for (;;) {
      const endpoint = plan.next()
      if (!endpoint) throw new GatewayError('upstream_unavailable', 'No upstream endpoint could be tried.')
      try {
        await launch(endpoint)
        return
      } catch (error) {
        if (!(await plan.retryAfter(error, endpoint))) throw error
      }
    }
  }

  /**
   * The least time between two polls of `attempt` now (see MAX_POLL_INTERVAL_MS): none while the polls
   * left cover a poll a token for the rest of `max_tokens` (or no output came yet: long polls and the
   * empty-page pause pace those); else the answer's expected rest, at the rate seen so far, spread over
   * the polls left.
   */
  function pace(attempt: Attempt): number {
    const left = runpod.maxPollsPerStream - polls
    // Every sequence streams its own tokens: a completion's prompts each bring n of them (`estimate.sequences`).
    const tokensLeft = request.sampling.max_tokens * request.estimate.sequences - attempt.chunks
    if (attempt.chunks === 0 || tokensLeft <= left) return 0
    const perToken = (Date.now() - attempt.firstAt!) / attempt.chunks
    // Never near the idle timeout: the wait before a poll is podgate's, not the model's silence.
    return Math.min(MAX_POLL_INTERVAL_MS, timeouts.idleMs / 4, (tokensLeft * perToken) / Math.max(1, left))
  }

  function poll(attempt: Attempt, waitMs: number): Promise<PollResult> {
    if (polls >= runpod.maxPollsPerStream) {
      if (attempt.terminal) return saved(attempt, attempt.terminal)
      return Promise.resolve({ ok: false, attempt, error: new GatewayError('upstream_timeout', 'The model did not finish within podgate\'s poll budget (runpod.maxPollsPerStream).') })
    }
    polls++
    const pollSignal = AbortSignal.any([signal, attempt.abort.signal])
    const run = async (): Promise<PollResult> => {
      const wait = attempt.terminal ? 0 : Math.max(attempt.backoff, attempt.polledAt + pace(attempt) - Date.now())
      if (wait > 0) await sleep(wait, pollSignal)
      const begun = (attempt.polledAt = Date.now())
      // A poll past a terminal page asks for no `?wait=`: the job has ended.
      let page = await streamPage(client, attempt.endpoint, attempt.jobId, { waitMs: attempt.terminal ? 0 : waitMs, signal: pollSignal, onRetry: () => ++polls <= runpod.maxPollsPerStream, follow: false })
      attempt.retried ||= page.refused
      // `/stream` answers carry no `error`: one `/status` call fetches the handler's message.
      if (!attempt.terminal && isTerminal(page.status) && page.status !== 'COMPLETED' && page.error === undefined) {
        const state = await client.status(attempt.endpoint, attempt.jobId, { signal: pollSignal }).catch(() => undefined)
        if (state?.error !== undefined) page = { ...page, error: state.error }
        // A `/stream` page says nothing of the worker: whether a TIMED_OUT job ran is in its status.
        if (state && ranOn(state)) attempt.ran = true
      }
      // A poll refused with a 5xx may have taken its page upstream (a proxy's 502 or 504 on a long poll), whose
      // items no poll brings again: an answer that lost some ends with an error, never as whole. Its job's
      // saved `output` holds every item: one `/status` tells, at the end.
      if (attempt.retried && page.status === 'COMPLETED' && !page.stream.length) {
        const state = await polled(() => client.status(attempt.endpoint, attempt.jobId, { signal: pollSignal }), { signal: pollSignal }).catch(() => undefined)
        if ((state?.output as unknown[] | undefined)?.length !== attempt.items) return { ok: false, attempt, error: upstreamError('The upstream stream ended before the model finished.') }
      }
      // A server that honours `?wait=` already waited; one that answers at once (runpod-python's local
      // server) gets a growing pause so podgate does not spin on it.
      const quickAndEmpty = page.stream.length === 0 && !isTerminal(page.status) && Date.now() - begun < 100
      attempt.backoff = quickAndEmpty ? Math.min(Math.max(attempt.backoff * 2, 50), 1_000) : 0
      return { ok: true, attempt, page }
    }
    return run().catch((error: unknown) => (attempt.terminal ? saved(attempt, attempt.terminal) : { ok: false, attempt, error }))
  }

  /**
   * The last page of a job whose terminal page held items when the poll after it failed or had no room
   * in the budget: the items it may have left, read from the job's saved `output` (one `/status`) past
   * those fed so far. An answer they cannot be read for ends with an error, never as a whole one.
   */
  async function saved(attempt: Attempt, terminal: JobStream): Promise<PollResult> {
    attempt.saved = true
    try {
      let stream: JobStream['stream'] = []
      // A job that did not complete ends with its failure: the items it left would not change that.
      if (terminal.status === 'COMPLETED') {
        const { output } = await polled(() => client.status(attempt.endpoint, attempt.jobId, { signal }), { signal, onRetry: () => ++polls <= runpod.maxPollsPerStream })
        // After a poll refused with a 5xx (`retried`), items fed may be fewer than those handed out: the rest
        // cannot be told from a lost page's, so only an output of exactly those fed ends whole.
        if (!Array.isArray(output) || output.length < attempt.items || (attempt.retried && output.length > attempt.items)) throw upstreamError('The upstream stream ended before the model finished.')
        stream = output.slice(attempt.items).map((item: unknown) => ({ output: item }))
      }
      return { ok: true, attempt, page: { ...terminal, stream } }
    } catch (error) {
      return { ok: false, attempt, error }
    }
  }

  /**
   * Feeds a page to the attempt's decoder; throws the job's failure. A terminal page that held items is
   * not the last: polls follow until one holds none (or `saved` read the rest), as runpod-python's
   * `stream()` reads on, since a terminal page need not hand out a job's last items. Each page's items go
   * out before the next poll, so the answer's last ones do not wait for it.
   */
  function accept(attempt: Attempt, page: JobStream): void {
    if (!attempt.terminal && isTerminal(page.status)) attempt.terminal = page
    const terminal = attempt.terminal
    attempt.status = terminal?.status ?? page.status
    attempt.ran ||= ranOn(page)
    attempt.ended ||= !!terminal
    for (const item of page.stream) attempt.decoder.push(item.output)
    attempt.items += page.stream.length
    if (!terminal || (page.stream.length > 0 && !attempt.saved)) return
    if (terminal.status !== 'COMPLETED') throw jobFailure(terminal)
    attempt.decoder.finish()
    attempt.completed = true
  }

  /** Waits for the first attempt with output, failing over, hedging and opening the response on time. */
  async function firstOutput(): Promise<Attempt> {
    let holdDeadline = started + ttftBudgetMs
    let hedged = false
    await start()
    for (;;) {
      if (signal.aborted) throw upstreamError(CALLER_GONE)
      const now = Date.now()
      if (now >= firstTokenDeadline) throw new GatewayError('upstream_timeout', 'The model produced no first token in time.')
      if (!opened && now >= holdDeadline) {
        const [only] = live
        const other = hedge && !hedged && live.size === 1 && only?.status === 'IN_QUEUE' ? plan.nextOther(only.endpoint) : undefined
        if (other) {
          hedged = true
          holdDeadline = now + ttftBudgetMs
          await launch(other).catch((error: unknown) => plan.recordFailure(error, other))
        } else {
          // Hold no longer: clients and proxies want headers. Keep-alives carry the wait from here.
          openResponse()
          emit(HEARTBEAT)
        }
      }
      const until = Math.max(0, Math.min(firstTokenDeadline, opened ? Infinity : holdDeadline) - Date.now())
      const result = await raceLive(until)
      if (!result || !live.has(result.attempt)) continue
      const { attempt } = result
      try {
        if (!result.ok) throw result.error
        accept(attempt, result.page)
        if (attempt.pending.length > 0) return attempt
        if (opened) emit(HEARTBEAT)
      } catch (error) {
        if (attempt.pending.length > 0) {
          // The job produced output, then failed: that is a broken answer, not one to run again.
          winnerFailed(attempt)
          throw error
        }
        // Nothing of this attempt reached the caller: another endpoint may run the request afresh (see
        // `failedOver`), unless its poll failed: the job may be running, and a rerun would bill it twice.
        const failure = result.ok ? failedOver(attempt, toGatewayError(error)) : finalFailure(error)
        drop(attempt)
        if (live.size > 0) {
          plan.recordFailure(failure, attempt.endpoint)
          continue
        }
        if (!(await plan.retryAfter(failure, attempt.endpoint))) throw failure
        await start()
      }
    }
  }

  /** Sends what a failing attempt produced, so the error event follows the output it cut short. */
  function winnerFailed(attempt: Attempt): void {
    for (const other of live) if (other !== attempt) drop(other)
    producedOutput = true
    openResponse()
    if (attempt.pending.length > 0) emitText(attempt.pending)
    attempt.pending = ''
    won = attempt
  }

  /** The next poll result of any live attempt, or undefined after `ms`. */
  async function raceLive(ms: number): Promise<PollResult | undefined> {
    for (const attempt of live) attempt.poll ??= poll(attempt, Math.min(runpod.streamWaitMs, ms))
    const timer = new AbortController()
    const polls = [...live].map((a) => a.poll as Promise<PollResult>)
    const result = await Promise.race([...polls, sleep(ms, AbortSignal.any([timer.signal, signal])).then(() => undefined)])
    timer.abort()
    if (result) result.attempt.poll = undefined
    return result
  }

  async function streamRest(winner: Attempt): Promise<void> {
    for (const other of live) if (other !== winner) drop(other)
    plan.succeeded(winner.endpoint)
    won = winner
    // The call's (RetryPlan.deadline): retries, and another mode's tries before these, count too.
    const totalDeadline = plan.deadline
    let lastOutput = Date.now()
    for (;;) {
      if (winner.pending.length > 0) {
        producedOutput = true
        emitText(winner.pending)
        winner.pending = ''
        lastOutput = Date.now()
      }
      if (winner.completed) break
      if (signal.aborted) throw upstreamError(CALLER_GONE)
      const now = Date.now()
      if (now >= totalDeadline) throw new GatewayError('upstream_timeout', 'The answer took longer than podgate allows.')
      if (now - lastOutput >= timeouts.idleMs) throw new GatewayError('upstream_timeout', 'The model stopped sending for too long.')
      // Time spent waiting on a slow reader is not the model's silence, but it is no output either: the
      // idle clock stops while the caller reads (a keep-alive included), it does not start over.
      // A poll past a terminal page brings what the job already made: it does not wait for the reader.
      if (!winner.terminal && (await demand(totalDeadline))) lastOutput += Date.now() - now
      if (signal.aborted) throw upstreamError(CALLER_GONE)
      const result = await raceLive(Math.min(totalDeadline, lastOutput + timeouts.idleMs) - Date.now())
      if (!result) continue
      if (!result.ok) throw finalFailure(result.error)
      try {
        accept(winner, result.page)
      } catch (error) {
        // What the page held before the failure still goes out, ahead of the error event.
        winnerFailed(winner)
        throw error
      }
      if (winner.pending.length === 0 && !winner.completed) heartbeat()
    }
    const { usage } = winner
    call.settle({ ok: true, usage, estimate: counted(winner) })
    // A dialect's stream ends with its own last event, relayed already.
    if (!dialect) {
      if (usage && request.includeUsage) emit(encodeSSEData(JSON.stringify(winner.usageChunk ?? { id, object, created, model: model.streamedModelName, choices: [], usage })))
      emit(DONE)
    }
    closed = true
    controller.close()
  }

  async function drive(): Promise<void> {
    try {
      const winner = await firstOutput()
      openResponse()
      await streamRest(winner)
    } catch (error) {
      // The caller left, or cancelled its body: `signal` joins the two.
      const gone = signal.aborted
      const failure = gone ? upstreamError(CALLER_GONE) : toGatewayError(error)
      // A job given up on counts against its endpoint as its failure says (a timeout does; a caller gone does not).
      for (const attempt of live) drop(attempt), plan.recordFailure(failure, attempt.endpoint)
      // A caller who hangs up once a job ran has had its prompt processed: quota charges it. A cut answer
      // is charged what it produced: the worker's usage so far, else podgate's count.
      won?.decoder.cut?.()
      call.settle({ ok: false, error: failure, producedOutput, usage: won?.usage, estimate: won && counted(won), reachedUpstream: gone && launched })
      if (!opened) return refuse(failure)
      if (!wasRelayed(failure)) emit(encoder.encode(`${atEventBoundary() ? '' : '\n\n'}${(dialect ?? OPENAI_DIALECT).errorEvent(failure)}`))
      if (!closed) {
        closed = true
        controller.close()
      }
    }
  }

  call.waitUntil(drive())
  await ready
  return new Response(body, { headers: SSE_HEADERS })
}

/**
 * Most time between two `/stream` polls of one job once output flows. Polls are paced only when the
 * poll budget (`runpod.maxPollsPerStream`: Workers cap subrequests per invocation) could not give each
 * token still to come a poll of its own: a long poll returns at its first item, and a current worker
 * yields about an event an item, so an unpaced long answer would use up the budget early.
 */
const MAX_POLL_INTERVAL_MS = 1_000

/** One job on one endpoint. Only the winner's chunks ever reach the caller. */
interface Attempt {
  endpoint: Endpoint
  jobId: string
  status: string
  /** A worker took the job up (see `ranOn`): a TIMED_OUT then is not run again. */
  ran: boolean
  decoder: NativeStreamDecoder
  /** SSE text decoded but not yet sent: a page's events go out as one write, not one per token. */
  pending: string
  usage?: TokenUsage
  /**
   * Set instead of `usage` when the worker reported none (current worker-vllm's shorthand asks vLLM for
   * no usage chunk): podgate's count, for the quota only. No caller is sent it.
   */
  estimate?: TokenUsage
  /** vLLM's own usage chunk, relayed as is when the caller asked for usage. */
  usageChunk?: Record<string, unknown>
  /** A terminal status was seen: nothing to cancel upstream. Unset until then, as the flags below. */
  ended?: boolean
  /** The first terminal page (with the job's error, fetched): later polls only bring the items it left. */
  terminal?: JobStream
  /** Stream items fed to the decoder: where the job's saved `output` takes over (see `saved`). */
  items: number
  /** The job's saved `output` brought its last items: no poll follows. */
  saved?: true
  /** A poll was asked again after a 5xx (`streamPage`'s `refused`): its page may have been handed out upstream and lost on the way (see `poll`). */
  retried?: true
  /** COMPLETED was seen and the decoder finished cleanly. */
  completed?: boolean
  /** Aborts this attempt's in-flight poll when it is dropped. */
  abort: AbortController
  poll?: Promise<PollResult>
  backoff: number
  /** When this attempt's last poll began (epoch ms), for the pace. */
  polledAt: number
  /** Chunks decoded so far (about a token each), and when the first came: the answer's pace so far. */
  chunks: number
  firstAt?: number
}

/**
 * podgate's count of an attempt's output, for an answer with no usage: its decoder's, else (a dialect's
 * stream, whose usage comes last) its events, about a token each.
 */
const counted = (attempt: Attempt) => attempt.estimate ?? countedUsage(attempt.chunks)

type PollResult = { ok: true; attempt: Attempt; page: JobStream } | { ok: false; attempt: Attempt; error: unknown }
