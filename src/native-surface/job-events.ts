/**
 * A job followed as Server-Sent Events: `GET /v2/{model}/stream/{id}` with `Accept: text/event-stream`.
 *
 * Runpod's `/stream/{id}` is a long poll that hands out each item once. This module turns it into:
 *   `event: status` on every state change (`{"status":"IN_QUEUE"}`, then `IN_PROGRESS`);
 *   `event: output` per stream item, `id: <n>` = items sent so far (`{"text"}` for worker-vllm jobs,
 *     `{"output"}` for passthrough handlers);
 *   `: keep-alive` comments while nothing arrives;
 *   a last `event: done` (`{"status":"COMPLETED","usage"?}`) or `event: error` (`{"status"?,"error","code"}`).
 *
 * Resuming (`Last-Event-ID: n`): items the lost connection had already taken from Runpod cannot be
 * asked for again, so a resumed stream never guesses. It waits for the job to end (status events and
 * keep-alives meanwhile), then replays items n+1.. from the finished job's `/status` output, which
 * worker-vllm keeps for 30 minutes. No duplicate and no gap, at the cost of liveness after a drop.
 * A live stream whose poll after a terminal page failed, or had no room, reads what that poll may have
 * left the same way: a cut answer never ends with `done`.
 *
 * A caller that goes away cancels the job upstream (unless `?detach=true`), so no GPU runs for nobody.
 * Each response makes at most `maxPolls` upstream polls (Workers cap subrequests per invocation) and runs
 * at most `maxMs`; past either it ends with `event: pause` and EventSource reconnects into the resume path above.
 */
import { GatewayError, toGatewayError, upstreamError } from '../errors/index.ts'
import { onAbort } from '../http/context.ts'
import { createNativeStreamDecoder } from '../streaming/native-decoder.ts'
import type { NativeStreamDecoder } from '../streaming/native-decoder.ts'
import { encoder, HEARTBEAT, PULL_ONLY } from '../streaming/openai-chunks.ts'
import type { Usage } from '../streaming/openai-chunks.ts'
import { jobFailure } from '../upstream/native.ts'
import { isCompletionBody, nativeOutputToOpenAI } from '../upstream/runpod/output.ts'
// The shared wait removes its abort listener when the timer fires (a stream polls hundreds of times on one signal).
import { cancelJob, polled, streamPage } from '../upstream/job-calls.ts'
import { sleep } from '../upstream/retry.ts'
import { isTerminal } from '../upstream/runpod/client.ts'
import type { JobStatus, JobStream, RunpodClient } from '../upstream/runpod/client.ts'
import { SSE_HEADERS } from '../upstream/types.ts'
import type { JobRef } from './job-id.ts'

export interface JobEventsOptions {
  client: RunpodClient
  job: JobRef
  /** Long-poll `?wait=` for each `/stream` call, in ms. */
  waitMs: number
  /** Most upstream polls this response may make. */
  maxPolls: number
  /** Longest this response runs before it pauses (the model's `timeouts.totalMs`: its quota slot's lease outlives it). */
  maxMs: number
  /** The caller's `Last-Event-ID`: items it already has. Unset for a first connection. */
  resumeAfter?: number
  /** Keep the job running when the caller goes away. Default false: cancel it. */
  detach?: boolean
  /** Aborts when the caller goes away. */
  signal?: AbortSignal
  waitUntil: (promise: Promise<unknown>) => void
  /** Milliseconds a poll that found items waits before the next, so items arrive batched. Default 200. */
  minPollIntervalMs?: number
  /** Called once when the response ends, however it ends (its quota stream slot is freed then). */
  onEnd?: () => void
}

/** Tells EventSource how soon to reconnect after `pause` (or a dropped connection). */
const RETRY = encoder.encode('retry: 1000\n\n')
const MAX_ERROR_CHARS = 2_000

/**
 * @example
 * return jobEventStream({ client, job: await jobs.open(id, binding), waitMs: 10_000, maxPolls: 900, maxMs: 600_000,
 *   resumeAfter: lastEventId(c), signal: c.req.raw.signal, waitUntil: waitUntilOf(c) })
 */
export function jobEventStream(options: JobEventsOptions): Response {
  const { client, job, waitMs, maxPolls, signal } = options
  const until = Date.now() + options.maxMs
  const minInterval = options.minPollIntervalMs ?? 200
  const replay = options.resumeAfter !== undefined
  let sent = options.resumeAfter ?? 0
  let status: string | undefined
  let polls = 0
  let idleDelay = 0
  let ended = false
  /** Some poll of this response was refused and asked again (see `liveStep`). */
  let refused: true | undefined
  /** The caller cancelled the body, or it was closed: nothing may be written any more. */
  let closed = false
  let out: ReadableStreamDefaultController<Uint8Array> | undefined
  const send = (bytes: Uint8Array) => {
    if (!closed) out?.enqueue(bytes)
  }
  let finished = false
  const end = () => {
    if (finished) return
    finished = true
    options.onEnd?.()
  }
  const close = () => {
    if (closed) return
    closed = true
    out?.close()
    end()
  }
  const text = createItemText(job.kind)
  const pause = (reason = 'poll_budget') => {
    ended = true
    send(event('pause', { reason, resume: 'reconnect with Last-Event-ID' }))
    close()
  }

  const cancelUpstream = () => {
    if (ended || options.detach) return
    ended = true
    options.waitUntil(cancelJob(client, job.endpoint, job.upstreamId))
  }
  // The caller's leaving ends the stream whether or not its body is ever cancelled (one it left before
  // it was answered never is), and a signal that aborted while the stages ran fires no event.
  const gone = () => {
    cancelUpstream()
    end()
  }
  onAbort(signal, gone)

  const body = new ReadableStream<Uint8Array>(
    {
      start(controller) {
        out = controller
        send(RETRY)
      },
      async pull() {
        try {
          if (polls >= maxPolls) return pause()
          // No poll that could run past it (but always one, so a reconnect makes progress).
          if (polls > 0 && Date.now() + waitMs >= until) return pause('time_limit')
          polls++
          const started = Date.now()
          if (replay) await replayStep()
          else await liveStep()
          if (ended) return close()
          if (Date.now() - started < minInterval) await sleep(minInterval - (Date.now() - started), signal)
        } catch (error) {
          if (closed || signal?.aborted) return
          // A refused poll whose retry the budget had no room for: the job goes on, the caller reconnects.
          if (polls > maxPolls) return pause()
          // podgate lost track of the job (upstream unreachable, job expired); the job itself may go on.
          const failure = toGatewayError(error)
          ended = true
          send(event('error', { error: failure.message, code: failure.code }))
          close()
        }
      },
      cancel() {
        closed = true
        cancelUpstream()
        end()
      },
    },
    PULL_ONLY,
  )

  function noteStatus(next: string): void {
    if (next === status) return
    status = next
    if (!isTerminal(next)) send(event('status', { status: next }))
  }

  async function liveStep(): Promise<void> {
    const output = (items: JobStream['stream']) => {
      for (const item of items) send(event('output', text.push(item.output), ++sent))
      return true
    }
    // The one poll a response always makes waits no longer than maxMs leaves either (streamWaitMs may be longer).
    const page = await streamPage(client, job.endpoint, job.upstreamId, { waitMs: Math.min(waitMs, Math.max(1, until - Date.now())), signal, onRetry: () => ++polls <= maxPolls, onItems: output })
    noteStatus(page.status)
    output(page.stream)
    // A poll refused with a 5xx may have taken its page upstream (a proxy's 502 on a long poll): the saved
    // output tells whether every item came, or `done` would end an answer with a gap (and ids that drifted).
    // Any earlier page's poll counts: the page lost is most often a long poll's mid-job, not the last. A cut
    // page cannot tell (its rest is read past the items sent, which a lost page shifted): it ends so too.
    if ((refused ||= page.refused) && page.status === 'COMPLETED' && (page.cut || ((await polled(() => client.status(job.endpoint, job.upstreamId, { signal }), { signal, onRetry: () => ++polls <= maxPolls }).catch(() => undefined))?.output as unknown[] | undefined)?.length !== sent)) {
      ended = true
      send(event('error', { status: page.status, error: 'Items were lost upstream: read the output with /status.', code: 'upstream_error' }))
      return
    }
    // The poll after a terminal page failed or had no room: the job's saved output holds what it left.
    if (page.cut) return replayStep()
    if (isTerminal(page.status)) {
      // `/stream` answers carry no `error`; one `/status` call fetches the handler's message.
      if (page.status !== 'COMPLETED' && page.error === undefined) {
        return finish(await client.status(job.endpoint, job.upstreamId, { signal }).catch(() => page))
      }
      return finish(page)
    }
    if (page.stream.length > 0) {
      idleDelay = 0
      return
    }
    send(HEARTBEAT)
    await idle(page.status)
  }

  async function replayStep(): Promise<void> {
    const state = await polled(() => client.status(job.endpoint, job.upstreamId, { signal }), { signal, onRetry: () => ++polls <= maxPolls })
    noteStatus(state.status)
    if (!isTerminal(state.status)) {
      send(HEARTBEAT)
      await idle(state.status, 5_000)
      return
    }
    if (state.status === 'COMPLETED') {
      const items = Array.isArray(state.output) ? state.output : undefined
      if (!items || items.length < sent) {
        ended = true
        send(event('error', { status: state.status, error: 'This job cannot be resumed: the upstream no longer holds its streamed items.', code: 'not_found' }))
        return
      }
      // The decoder must see every earlier item (a live stream's has): an SSE event may start in one item and end in the next.
      for (const item of items.slice(replay ? 0 : sent, sent)) text.push(item)
      for (const item of items.slice(sent)) send(event('output', text.push(item), ++sent))
    }
    finish(state)
  }

  function finish(job: Pick<JobStatus, 'status' | 'error'>): void {
    ended = true
    if (job.status !== 'COMPLETED') {
      // The OpenAI surface's message (never a traceback) and code: a refusal (vLLM's 400) is the caller's invalid_request.
      const failure = jobFailure(job)
      send(event('error', { status: job.status, error: job.error == null || job.error === '' ? `The job ended with status ${job.status}.` : failure.message.slice(0, MAX_ERROR_CHARS), code: failure.code }))
      return
    }
    const result = text.finish()
    if ('error' in result) send(event('error', { status: job.status, error: result.error.message, code: result.error.code }))
    // JSON leaves an undefined usage out: `done` carries usage only when the job reported it.
    else send(event('done', { status: job.status, usage: result.usage }))
  }

  /**
   * Nothing new. Runpod's `?wait=` already waited; a server that answers at once (a cold queue that
   * does not long-poll, runpod-python's local server) gets a growing pause, so podgate does not spin.
   */
  async function idle(state: string, ceiling = state === 'IN_QUEUE' ? 5_000 : 1_000): Promise<void> {
    idleDelay = Math.min(Math.max(idleDelay * 2, 250), ceiling)
    await sleep(idleDelay, signal)
  }

  return new Response(body, { headers: SSE_HEADERS })
}

function event(name: string, data: unknown, id?: number): Uint8Array {
  // JSON.stringify escapes newlines, so one `data:` line always holds the whole payload.
  return encoder.encode(`event: ${name}\n${id === undefined ? '' : `id: ${id}\n`}data: ${JSON.stringify(data)}\n\n`)
}

interface ItemText {
  /** The event payload for one stream item. */
  push(item: unknown): Record<string, unknown>
  finish(): { usage?: Usage } | { error: GatewayError }
}

/**
 * Text deltas of worker-vllm items, through the same decoder as the OpenAI surface (classic token
 * batches and SSE text cut anywhere alike), or the text of a current worker's whole answer (`stream:
 * false`), read as the JSON surface reads it. An item it cannot read (an error item, an unknown shape)
 * is passed on raw, and decoding stops: the job's final status tells the rest.
 */
function createItemText(kind: JobRef['kind']): ItemText {
  if (kind === 'raw') return { push: (item) => ({ output: item }), finish: () => ({}) }
  let texts: string[] = []
  let reasons: (string | null)[] = []
  let usage: Usage | undefined
  let started = false
  /** The job's only item was its whole answer. */
  let answered = false
  // Once an item cannot be read, later items pass on raw, and the final event is this error: an answer
  // the worker broke must never end with `done`.
  let failure: GatewayError | undefined
  // Events carry text only: no id, model or timestamp to write, and no max_tokens to infer `length` from.
  const frame = { kind, model: '', id: '', created: 0, maxTokens: Number.MAX_SAFE_INTEGER }
  const decoder: NativeStreamDecoder = createNativeStreamDecoder({
    ...frame,
    onChunk(chunk) {
      for (const choice of chunk.choices) {
        const delta = 'delta' in choice ? choice.delta.content : choice.text
        if (typeof delta === 'string') texts[choice.index] = (texts[choice.index] ?? '') + delta
        if (choice.finish_reason) reasons[choice.index] = choice.finish_reason
      }
    },
    // A count podgate made (a current worker's shorthand stream reports none) is not the worker's usage.
    onUsage: (reported, { estimated }) => (usage = estimated ? undefined : reported),
  })

  function readAnswer(body: Record<string, unknown>): void {
    // A copy: the reader writes its own id and model into the body, and a body it refuses is relayed raw.
    const { body: answer, usage: reported } = nativeOutputToOpenAI({ ...body }, { ...frame, n: 1 })
    answer.choices.forEach((choice, index) => {
      const text = 'message' in choice ? choice.message.content : choice.text
      texts[index] = typeof text === 'string' ? text : ''
      reasons[index] = choice.finish_reason
    })
    usage = reported
    answered = true
  }

  function read(item: unknown): void {
    if (answered) throw upstreamError('The model worker sent output after its whole answer.')
    if (!started && isCompletionBody(item)) readAnswer(item)
    else decoder.push(item)
    started = true
  }

  return {
    push(item) {
      if (failure) return { output: item }
      texts = []
      reasons = []
      try {
        read(item)
      } catch (error) {
        failure = toGatewayError(error)
        return { output: item }
      }
      const payload: Record<string, unknown> = { text: texts[0] ?? '' }
      if (texts.length > 1) payload.choices = Array.from(texts, (t, index) => ({ index, text: t ?? '' }))
      if (reasons[0]) payload.finish_reason = reasons[0]
      return payload
    },
    finish() {
      try {
        if (failure) throw failure
        if (!answered) decoder.finish()
        return { usage }
      } catch (error) {
        // vLLM's refusal kept in the output is the caller's invalid_request, as on the OpenAI surface.
        return { error: error instanceof GatewayError ? error : upstreamError('The model stream could not be read.') }
      }
    },
  }
}
