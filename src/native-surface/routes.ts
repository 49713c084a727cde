/**
 * The Runpod-native surface, `/v2/{model}/...`: Runpod's own job API with a podgate model alias where
 * the endpoint id goes, so `runpod-sdk` and other native clients only change their base URL.
 *
 * Each call flows one way: key (apiKeyAuth, mounted by the gateway) -> model + scope -> body or job id
 * checked -> one upstream call on the endpoint the job id names. Answers keep Runpod's shapes with
 * podgate's sealed job id in place of Runpod's, and 200 on success (runpod-sdk drops other 2xx bodies).
 */
import { Hono } from 'hono/tiny'
import type { JobBinding, JobRef } from './job-id.ts'
import { CALLER_GONE, GatewayError, invalidRequest, upstreamError } from '../errors/index.ts'
import { readJsonBody } from '../http/body.ts'
import { errorResponse } from '../http/respond.ts'
import { waitUntilOf } from '../http/context.ts'
import { modelFor, orderEndpoints } from '../routing/models.ts'
import { isTerminal } from '../upstream/runpod/client.ts'
import type { ModelTable, ResolvedModel } from '../routing/models.ts'
import { reportedUsage } from '../upstream/runpod/output.ts'
import { tokensToCharge } from '../quota/stage.ts'
import type { JobStatus, JobStream, RunpodClient } from '../upstream/runpod/client.ts'
import { jobEventStream } from './job-events.ts'
import { withPublicError } from './job-error.ts'
import { cancelJob, jobWithin, streamPage } from '../upstream/job-calls.ts'
import { jobFailure, refusalIn } from '../upstream/native.ts'
import { countFault, sleep } from '../upstream/retry.ts'
import { EndpointBreaker } from '../upstream/breaker.ts'
import type { Breaker } from '../upstream/breaker.ts'
import { composeStages, createCompletionContext } from '../pipeline/index.ts'
import type { CompletionContext, CompletionStage } from '../pipeline/index.ts'
import { FALLBACK_MAX_TOKENS } from '../normalize/index.ts'
import type { NormalizedRequest, RequestKind } from '../normalize/index.ts'
import { normalizeJobBody } from './input.ts'
import { createJobSealer } from './job-id.ts'
import type { Context } from 'hono'
import type { ResolvedOptions } from '../config/schema.ts'
import type { GatewayEnv } from '../types.ts'

export interface NativeRoutesOptions {
  models: ModelTable
  client: RunpodClient
  runpod: ResolvedOptions['runpod']
  /** Seals job ids (`signingSecret`, else the Runpod key). */
  secret: string
  maxBodyBytes: number
  /**
   * Stages a job submission (`run`, `runsync`) passes through, e.g. quota. A job's usage is not known
   * when `/run` answers, so its outcome settles at once with nothing reported: a quota counts the
   * request and keeps its token reservation (prompt estimate + max_tokens x n) until `quotas` correct it. A COMPLETED `runsync`
   * settles from the usage its output reports, when it reports one (none when that output is vLLM's refusal); one that ended FAILED, TIMED_OUT or
   * CANCELLED counts no token. A caller who left once the job was queued pays its prompt estimate (or that
   * usage), as an OpenAI call's does. Default: none.
   */
  stages?: readonly CompletionStage[]
  /**
   * Endpoint health (`createGateway` passes its own, shared with the OpenAI surface): `run` and `runsync`
   * go to an endpoint whose breaker is closed while one is, and count their failures. Default: a new one.
   */
  breaker?: Breaker
  /**
   * The quota stages (`createGateway` passes its own): a `run` job's first terminal `status`, `status-sync`
   * or JSON `stream` answer corrects its reservation through them, to what a `runsync` ending so is charged.
   * Default: none (a `run` keeps its reservation).
   */
  quotas?: readonly CompletionStage[]
}

/**
 * The items an EventSource already has (`Last-Event-ID`), or undefined on a first connection. The
 * gateway also reads it before counting the opening as a control call: a malformed one counts nothing.
 */
export function lastEventId(c: Context): number | undefined {
  const raw = c.req.header('last-event-id')
  if (raw === undefined || raw === '') return undefined
  if (!/^\d{1,9}$/.test(raw)) throw invalidRequest('Last-Event-ID must be an event id this stream sent (a whole number).')
  return Number(raw)
}

/** Runpod's bounds for `?wait=` on `/runsync` and `/status-sync`. */
const MIN_WAIT_MS = 1_000
const MAX_WAIT_MS = 300_000
/**
 * Longest single upstream wait of a `/runsync`: a longer one goes on as `/status-sync` waits. Its job's
 * id comes back within this, inside the 30 s `waitUntil` lives past a caller who left, so that caller's
 * job is cancelled (a single 90 s wait returned the id too late, and the job ran on, billed).
 */
const LEG_MS = 25_000

/**
 * The native routes on their own, for an app without `createGateway`: their errors answer in Runpod's
 * format (`{"error", "code"}`), as under `createGateway`. Only a `GatewayError` does: anything else, and a
 * refusal of your middleware (`apiKeyAuth`), is your app's `onError`'s to answer.
 *
 * @example
 * const config = resolveConfig(options)
 * app.use('/v2/*', apiKeyAuth({ store }))
 * app.route('/v2', nativeRoutes({ models: resolveModels(config), client, runpod: config.runpod, secret, maxBodyBytes: 1 << 20 }))
 */
export function nativeRoutes(options: NativeRoutesOptions): Hono<GatewayEnv> {
  return nativeSurface(options).onError((error, c) => {
    if (!(error instanceof GatewayError)) throw error
    return errorResponse(error, 'runpod', c.get('requestId'))
  })
}

/** The native routes with no error handler of their own: `createGateway`'s answers (and logs) their errors. */
export function nativeSurface(options: NativeRoutesOptions): Hono<GatewayEnv> {
  const { models, client, runpod, breaker = new EndpointBreaker() } = options
  const jobs = createJobSealer(options.secret)
  const app = new Hono<GatewayEnv>()

  const bindingOf = (c: Context<GatewayEnv>): JobBinding => ({
    model: modelFor(models, c.req.param('model'), c.get('principal')),
    keyId: c.get('principal').keyId,
  })
  /** The caller's job, or the one 404; checked before any upstream call. */
  const jobOf = async (c: Context<GatewayEnv>) => {
    const binding = bindingOf(c)
    return { binding, job: await jobs.open(c.req.param('id') ?? '', binding) }
  }
  /** Runpod's answer with podgate's id for the job in place of Runpod's. */
  const answer = async <T extends { id?: string; error?: unknown }>(c: Context<GatewayEnv>, body: T, job: JobRef, binding: JobBinding) =>
    c.json({ ...withPublicError(body), id: await jobs.seal(job, binding) })
  /**
   * A poll's answer. A terminal one corrects a held reservation (through `quotas`, once) to what a `runsync`
   * ending so is charged; a `stream` page only from the usage it reports (a later `status` reads the output).
   */
  const polled = async (c: Context<GatewayEnv>, body: JobStatus | JobStream, job: JobRef, binding: JobBinding) => {
    const { held } = job
    // Only a job's terminal poll with a reservation to correct goes through the quota stages.
    if (!held || !isTerminal(body.status)) return answer(c, body, job, binding)
    const ctx = createCompletionContext(c, passthroughRequest(''), binding.model)
    const page = 'stream' in body
    const output = page ? body.stream.map((item) => item.output) : body.output
    const { usage, estimate } = reportedUsage(output, job.kind as RequestKind, 0)
    const done = body.status === 'COMPLETED' && !page
    // Not FAILED: one that ran (`executionTime`) and was cancelled or timed out keeps the reservation but for the
    // usage its output reports (its caller may have read its output); one stopped in the queue costs none.
    ctx.job = { ...held, id: job.upstreamId, charge: body.status == 'FAILED' || refusalIn(output) || !(page || done || (body as JobStatus).executionTime) ? 0 : tokensToCharge({ ok: true, usage, estimate: done ? estimate : undefined }, held.tokens, held.p) }
    return composeStages(options.quotas ?? [], () => answer(c, body, job, binding))(ctx)
  }

  app.post('/:model/run', (c) => submit(c, 'run'))
  app.post('/:model/runsync', (c) => submit(c, 'runsync'))

  app.on(['GET', 'POST'], '/:model/status/:id', async (c) => {
    const { binding, job } = await jobOf(c)
    return polled(c, await client.status(job.endpoint, job.upstreamId, { signal: c.req.raw.signal }), job, binding)
  })

  app.on(['GET', 'POST'], '/:model/status-sync/:id', async (c) => {
    const { binding, job } = await jobOf(c)
    return polled(c, await client.statusSync(job.endpoint, job.upstreamId, { signal: c.req.raw.signal, waitMs: waitParam(c, runpod.runsyncWaitMs) }), job, binding)
  })

  app.on(['GET', 'POST'], '/:model/stream/:id', async (c) => {
    const { binding, job } = await jobOf(c)
    if (isEventStream(c)) {
      const resumeAfter = lastEventId(c)
      // An open event stream holds one of the key's concurrent streams (quota), freed when it ends.
      const admitted = composeStages(options.stages ?? [], async (ctx: CompletionContext) => jobEventStream({
        client,
        job,
        waitMs: runpod.streamWaitMs,
        maxPolls: runpod.maxPollsPerStream,
        maxMs: binding.model.config.resilience.timeouts.totalMs,
        resumeAfter,
        detach: c.req.query('detach') === 'true',
        signal: c.req.raw.signal,
        waitUntil: waitUntilOf(c),
        onEnd: () => ctx.settle({ ok: true }),
      }))
      return admitted(createCompletionContext(c, { ...passthroughRequest(binding.model.alias), stream: true }, binding.model))
    }
    const started = Date.now()
    // A terminal page that held items is followed (no `?wait=`) until one holds none, its items added: runpod-sdk
    // stops at the first terminal page, which need not hold the job's last items. A refused first poll is the
    // caller's to retry; a refused follow-up is asked again (`onRetry(0)` began them): its caller was told the job ended.
    let following = false
    const { cut, refused, ...page } = await streamPage(client, job.endpoint, job.upstreamId, { signal: c.req.raw.signal, waitMs: runpod.streamWaitMs, onRetry: (status) => following ||= !status })
    // A follow-up that failed left items at Runpod: answered as a running job's page, its caller polls for them.
    if (cut) page.status = 'IN_PROGRESS'
    // runpod-sdk polls again at once and Runpod's long poll answers at the first item (about a token on a
    // current worker): a page of a running job is held to 200 ms, so items come batched and following a
    // job costs a few control calls a second, not one a token.
    if (page.stream.length > 0 && !isTerminal(page.status)) await sleep(started + 200 - Date.now(), c.req.raw.signal)
    // `stream` is always an array (the client makes it one): runpod-sdk iterates it unguarded.
    return polled(c, page, job, binding)
  })

  app.post('/:model/cancel/:id', async (c) => {
    const { binding, job } = await jobOf(c)
    // Not under the caller's signal (runpod-sdk gives a cancel 3 s): a cancel its caller stopped waiting for
    // still goes out, or the job it asked to stop runs on, billed. waitUntil holds the request to its answer,
    // and one Runpod refused with no caller left to try again is asked again, as podgate's own cancels are.
    const cancelled = client.cancel(job.endpoint, job.upstreamId)
    waitUntilOf(c)(cancelled.catch(() => (c.req.raw.signal.aborted ? cancelJob(client, job.endpoint, job.upstreamId) : undefined)))
    return answer(c, await cancelled, job, binding)
  })

  // A retry runs the job again on the GPU: it passes the same stages as a run (a quota counts the request
  // and reserves tokens). podgate keeps no job inputs, so the reservation is what a run with the model's
  // default max_tokens reserves.
  app.post('/:model/retry/:id', async (c) => {
    const { binding, job } = await jobOf(c)
    const queue = composeStages(options.stages ?? [], async (ctx: CompletionContext) => {
      // A caller already gone has nothing sent. Else not under its signal: the job's id is the caller's
      // already, so a requeued job is not orphaned and runs whether its caller waits or not; a call cut
      // short would leave it requeued and billed while settling as a failure. waitUntil holds the request
      // to its settle (a quota's does too, but a key may have none): else workerd may end it at the leave.
      if (c.req.raw.signal.aborted) throw upstreamError(CALLER_GONE)
      waitUntilOf(c)(ctx.outcome)
      const result = await client.retry(job.endpoint, job.upstreamId)
      ctx.settle({ ok: true })
      return answer(c, result, job, binding)
    })
    return queue(createCompletionContext(c, retryRequest(binding.model), binding.model))
  })

  app.post('/:model/purge-queue', (c) => {
    bindingOf(c)
    // An endpoint's queue holds every caller's jobs; no key may empty it for the others.
    throw new GatewayError('permission_denied', 'purge-queue is not available through podgate: it would remove every caller\'s queued jobs. Cancel your own jobs with POST /v2/{model}/cancel/{id}.')
  })

  async function submit(c: Context<GatewayEnv>, via: 'run' | 'runsync'): Promise<Response> {
    const binding = bindingOf(c)
    const request = normalizeJobBody(await readJsonBody(c.req.raw, options.maxBodyBytes, true), binding.model)
    const waitMs = via === 'runsync' ? waitParam(c, runpod.runsyncWaitMs) : undefined
    // Stages see a non-streaming request: a job holds no stream open on podgate.
    const normalized = { ...(request.normalized ?? passthroughRequest(binding.model.alias)), stream: false }
    const queue = composeStages(options.stages ?? [], async (ctx: CompletionContext) => {
      // A weighted pick among the endpoints whose breaker is closed (all of them when none is).
      const endpoint = orderEndpoints(binding.model, (e) => breaker.isOpen(e, binding.model.config.resilience.breaker))[0]!
      const signal = c.req.raw.signal
      // A caller gone before its job went upstream (while its key and quota were checked) has nothing sent.
      if (signal.aborted) throw upstreamError(CALLER_GONE)
      // Not under the caller's signal: a caller who leaves before the job's id reaches it leaves a job no
      // one can find, so its id, once it comes, cancels it (from `waitUntil`, which outlives the caller).
      // So does an answer past `runpod.timeoutMs` (a `runsync`: its first leg's wait and 5 s), the caller's 504.
      const deadline = Date.now() + (waitMs ?? 0)
      const leg = Math.min(waitMs!, LEG_MS)
      const send = (timeoutMs: number) => (via === 'run' ? client.run(endpoint, request.body, { timeoutMs }) : client.runsync(endpoint, request.body, { waitMs: leg, timeoutMs }))
      let result = await jobWithin(client, endpoint, { send, ms: via === 'run' ? runpod.timeoutMs : leg + 5_000, waitUntil: waitUntilOf(c), gone: () => signal.aborted }).catch((error: unknown) => {
        countFault(breaker, endpoint, error, binding.model.config.resilience.breaker)
        throw error
      })
      // The rest of a longer wait, under the caller's signal: the id is known, so leaving cancels the job at once.
      const cancel = () => waitUntilOf(c)(cancelJob(client, endpoint, result.id))
      signal.addEventListener('abort', cancel)
      try {
        // As many legs as the wait holds, however soon Runpod answers one: never a tight loop of calls.
        for (let legs = Math.ceil(waitMs! / LEG_MS) - 1, left; legs-- > 0 && !isTerminal(result.status) && (left = deadline - Date.now()) >= MIN_WAIT_MS; ) {
          // A refused leg (or one its caller left) answers the job as a runsync whose wait ran out: its caller keeps the id, to poll or cancel.
          result = await client.statusSync(endpoint, result.id, { signal, waitMs: Math.min(left, LEG_MS) }).catch(() => ((legs = 0), result))
        }
      } finally {
        signal.removeEventListener('abort', cancel)
      }
      // A COMPLETED `runsync` holds its output: it counts what that reports (or podgate's count of it). One that
      // ended without output (FAILED, TIMED_OUT, CANCELLED) is refunded its tokens, as the same native job on the
      // OpenAI surface is; one still running keeps the reservation. A caller who left once its job was upstream
      // (the job then cancelled) pays its prompt and any output reported, as on the OpenAI surface.
      // Only a job that ran closes the breaker: Runpod queues a job (`IN_QUEUE`) while the endpoint's workers fail.
      // A COMPLETED job whose output is vLLM's refusal (runpod-python before 1.7.6 kept its error item) made
      // nothing: no token, as that refusal costs on the OpenAI surface.
      const normalized = result.status === 'COMPLETED' ? (breaker.success(endpoint), request.normalized) : undefined
      const usage = normalized && reportedUsage(result.output, normalized.kind, normalized.sampling.max_tokens)
      const failure = result.status === 'COMPLETED' ? refusalIn(result.output) : isTerminal(result.status) && jobFailure(result)
      ctx.settle(signal.aborted ? { ok: false, error: upstreamError(CALLER_GONE), producedOutput: false, reachedUpstream: true, ...usage } : failure ? { ok: false, error: failure, producedOutput: false } : { ok: true, ...usage })
      // A job still running keeps its reservation, sealed into its id for its first terminal poll to correct.
      return answer(c, result, { kind: request.kind, endpoint, upstreamId: result.id, held: ctx.job?.tokens && !isTerminal(result.status) ? ctx.job : undefined }, binding)
    })
    return queue(createCompletionContext(c, normalized, binding.model))
  }

  app.get('/:model/health', async (c) => c.json(await health(client, bindingOf(c).model, c.req.raw.signal)))

  return app
}

/** What stages see of a passthrough job: a request with no tokens to estimate. */
function passthroughRequest(alias: string): NormalizedRequest {
  return { kind: 'completion', model: alias, stream: false, includeUsage: false, body: {}, shorthand: true, prompt: '', sampling: { max_tokens: 0 }, estimate: { promptTokens: 0, sequences: 0 } }
}

/** What stages see of a retry: no prompt, and the model's default max_tokens (none for passthrough input). */
function retryRequest(model: ResolvedModel): NormalizedRequest {
  const request = passthroughRequest(model.alias)
  if (model.config.passthrough) return request
  const config = model.config
  return { ...request, sampling: { max_tokens: Math.min(config.defaultMaxTokens ?? config.defaults.max_tokens ?? FALLBACK_MAX_TOKENS, config.maxTokensCap) }, estimate: { promptTokens: 0, sequences: 1 } }
}

/**
 * `?wait=` in ms, clamped to Runpod's bounds; absent, podgate's configured wait (`fallback`). A malformed
 * one is a 400 (checked before a control call counts).
 */
export function waitParam(c: Context, fallback: number): number {
  const raw = c.req.query('wait')
  if (raw === undefined) return fallback
  if (!/^\d+$/.test(raw)) throw invalidRequest(`'wait' must be a whole number of milliseconds (${MIN_WAIT_MS} to ${MAX_WAIT_MS}).`, { param: 'wait' })
  return Math.min(Math.max(Number(raw), MIN_WAIT_MS), MAX_WAIT_MS)
}

/** Whether the caller asks for the job's events (`Accept: text/event-stream`) rather than a JSON page. */
export function isEventStream(c: Context): boolean {
  return (c.req.header('accept') ?? '').includes('text/event-stream')
}

/** Runpod's health answer; for a model served by several endpoints, their counts summed. */
async function health(client: RunpodClient, model: ResolvedModel, signal: AbortSignal): Promise<{ jobs: Record<string, number>; workers: Record<string, number> }> {
  const results = await Promise.allSettled(model.endpoints.map((endpoint) => client.health(endpoint, { signal })))
  const total = { jobs: {} as Record<string, number>, workers: {} as Record<string, number> }
  for (const result of results) {
    if (result.status !== 'fulfilled') continue
    for (const part of ['jobs', 'workers'] as const) {
      for (const [name, count] of Object.entries(result.value[part] ?? {})) {
        if (typeof count === 'number') total[part][name] = (total[part][name] ?? 0) + count
      }
    }
  }
  // None answered: the first one's error (a model has one at least).
  if (results.every((result) => result.status === 'rejected')) throw (results[0] as PromiseRejectedResult).reason
  return total
}
