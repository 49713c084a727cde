/**
 * Request coalescing: one in-flight upstream call per cache key in an isolate, and a broadcast buffer
 * that lets callers who arrive while it runs read what was produced so far and then follow it live.
 *
 * The buffer holds the leader's own output events (the `data:` payloads it streamed, or its JSON body)
 * and, at the end, the normalized answer, so each joiner can be served in the form it asked for.
 */
import { GatewayError } from '../errors/index.ts'
import type { CompletionContext } from '../pipeline/index.ts'
import type { Usage } from '../streaming/openai-chunks.ts'
import type { CachedAnswer } from './answer.ts'

export type FlightEvent =
  /** One `data:` payload of the leader's stream; `usage` marks the usage chunk, `error` an error event. */
  | { data: string; usage: boolean; error: boolean }
  /** A heartbeat comment: passed on so joiners' connections stay open through long waits. */
  | { comment: true }

/** The latest a call ends: the model's `timeouts.totalMs` from now, and a little more for its ending. */
export function deadlineOf(ctx: CompletionContext): number {
  return Date.now() + ctx.model.config.resilience.timeouts.totalMs + 5_000
}

export type FlightState = 'open' | 'ok' | 'failed'

/** Longest a waiting caller sleeps before it looks at the flight again. */
const POLL_MS = 50
/** How long joiners go without hearing from a leader whose caller left before they take its request as ended. */
const LEFT_STALE_MS = 5_000

/** Where one reader of a flight's events is: the index of the next event it will read. */
export interface FlightReader {
  cursor: number
}

export class Flight {
  /**
   * Joiners that stream can follow the leader's events live: the leader asked for a stream and podgate
   * reads it (false once the leader's stream is piped natively: joiners then wait for the whole answer).
   */
  declare streams: boolean
  /** Events from index `offset` on; earlier ones were read by everyone and dropped (see `seal`). */
  readonly #events: FlightEvent[] = []
  #offset = 0
  /** Characters of `data` held in the buffer now, and the most it ever held. */
  bufferedChars = 0
  peakBufferedChars = 0
  /** No caller may join any more: events every reader has passed can be dropped. */
  sealed = false
  readonly #readers = new Set<FlightReader>()
  state: FlightState = 'open'
  declare error: GatewayError | undefined
  /** The leader's caller went away (or its answer cannot serve joiners): joiners serve themselves. */
  abandoned = false
  /**
   * The whole answer may still be shared; false once it cannot (over `maxEntryBytes`, or it could not be
   * recorded): joiners waiting for the whole answer ask on their own at once, live readers read on.
   */
  shareable = true
  /** The normalized answer, when the leader's answer could be captured. */
  declare answer: CachedAnswer | undefined
  declare usage: Usage | undefined
  /** `id` and `created` of the leader's answer. */
  declare meta: { id: string; created: number } | undefined
  /** The leader's JSON body text, when it did not stream. */
  declare json: string | undefined
  /** Callers reading or awaiting this flight (the leader included). */
  followers = 0
  /** Called when the last follower leaves before the end. */
  declare onIdle: (() => void) | undefined
  #wake: (() => void)[] = []
  #over!: () => void
  /** Resolves when the flight succeeds or fails. */
  readonly over: Promise<void> = new Promise((resolve) => (this.#over = resolve))

  /** When the leader's request last showed it runs: its last event (or the flight's start), or, once its caller left, its beat (`leaderLeft`). */
  heardAt = Date.now()
  /**
   * Not heard from longer than this (ms), the leader's request ended, and its call with it: the flight
   * fails for its joiners (one that has no byte yet asks on its own). Set once the leader's caller left
   * (`leaderLeft`): the runtime may end such a request before its call ends (on Workers, 30 s after its
   * caller left: `waitUntil`'s limit), with no word. Default: never (a leader whose caller is there ends
   * its call by its own timeouts).
   */
  declare staleMs: number
  /**
   * When the leader's call must have ended (epoch ms, `deadlineOf`). Still open after it, the leader's
   * request was ended with no word (as when the runtime ends it, its caller there or not): the flight
   * fails as a silent one does. Default: never.
   */
  declare readonly until: number

  constructor(streams: boolean, staleMs = Infinity, until = Infinity) {
    this.streams = streams
    this.staleMs = staleMs
    this.until = until
  }

  /** The event at `index`, which a registered reader has not passed yet. */
  at(index: number): FlightEvent {
    return this.#events[index - this.#offset]!
  }

  /** A reader from the first event; `unread` drops it (it left, or read to the end). */
  reader(): FlightReader {
    if (this.#offset > 0) throw new Error('Flight.reader: a sealed flight takes no new readers')
    const reader = { cursor: 0 }
    this.#readers.add(reader)
    return reader
  }

  unread(reader: FlightReader): void {
    this.#readers.delete(reader)
    this.compact()
  }

  push(event: FlightEvent): void {
    this.#events.push(event)
    this.heardAt = Date.now()
    if ('data' in event) {
      this.bufferedChars += event.data.length
      this.peakBufferedChars = Math.max(this.peakBufferedChars, this.bufferedChars)
    }
    this.#notify()
  }

  /** No one may join from now on: drop what every reader has read, now and as they read on. */
  seal(): void {
    this.sealed = true
    this.compact()
  }

  /** Drops the events every reader has passed, once sealed; wakes a producer waiting for room. */
  compact(): void {
    if (!this.sealed) return
    let min = this.end
    for (const reader of this.#readers) min = Math.min(min, reader.cursor)
    const drop = min - this.#offset
    if (drop <= 0) return
    for (const event of this.#events.splice(0, drop)) if ('data' in event) this.bufferedChars -= event.data.length
    this.#offset = min
    this.#notify()
  }

  succeed(result: { answer?: CachedAnswer; usage?: Usage; meta?: Flight['meta']; json?: string }): void {
    if (this.state !== 'open') return
    this.state = 'ok'
    this.answer = result.answer
    this.usage = result.usage
    this.meta = result.meta
    this.json = result.json
    this.#notify()
    this.#over()
  }

  /**
   * The leader's caller left: from now on its request may end before its call does, with no word. Called
   * in that request, which beats (`heardAt`) five times per `staleMs` while it runs, until the flight is
   * over; joiners that stop hearing it take it as ended. The model's own silence is not judged here: the
   * call's timeouts end a call the model stopped answering, as for any caller.
   */
  leaderLeft(staleMs = LEFT_STALE_MS): void {
    if (this.staleMs !== Infinity) return
    this.staleMs = staleMs
    this.heardAt = Date.now()
    const beat = setInterval(() => (this.heardAt = Date.now()), staleMs / 5)
    void this.over.then(() => clearInterval(beat))
  }

  /** The leader's stream is piped natively: joiners wait for the whole answer (waiting ones are woken). */
  stopStreaming(): void {
    this.streams = false
    this.#notify()
  }

  /** The whole answer will not be shared: joiners waiting for it are woken to ask on their own. */
  unshare(): void {
    this.shareable = false
    this.#notify()
  }

  /** Index one past the last event pushed. */
  get end(): number {
    return this.#offset + this.#events.length
  }

  fail(error: GatewayError, abandoned: boolean): void {
    if (this.state !== 'open') return
    this.state = 'failed'
    this.error = error
    this.abandoned = abandoned
    this.#notify()
    this.#over()
  }

  leave(): void {
    this.followers--
    if (this.followers <= 0 && this.state === 'open') this.onIdle?.()
  }

  /** Open, unless silent past `staleMs` or open past `until` (then failed now, for its readers and for callers who would join it). */
  live(): boolean {
    if (Date.now() - this.heardAt > this.staleMs || Date.now() > this.until) this.fail(new GatewayError('upstream_timeout', 'The shared upstream call ended with the request that made it.'), true)
    return this.state === 'open'
  }

  /**
   * Resolves at the next event, at the end, or after `pollMs`, whichever comes first. The timer is
   * what keeps a joiner alive in Workers: its request context sees its own pending timer, not just a
   * promise another request will resolve, and the runtime would otherwise cancel it as hung.
   */
  changed(pollMs = POLL_MS): Promise<void> {
    if (!this.live()) return Promise.resolve()
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer)
        resolve()
      }
      const timer = setTimeout(() => {
        // Unregister, so a request that has ended is never woken from another one.
        const at = this.#wake.indexOf(wake)
        if (at !== -1) this.#wake.splice(at, 1)
        resolve()
      }, pollMs)
      this.#wake.push(wake)
    })
  }

  /**
   * Waits for the whole answer: until the end, until it turns out it cannot be shared, until
   * `deadline` (epoch ms), or until `signal` (its caller's) aborts; then `state` and `shareable` say which.
   */
  async whole(deadline = Infinity, signal?: AbortSignal): Promise<void> {
    while (this.state === 'open' && this.shareable && Date.now() < deadline && !signal?.aborted) await this.changed()
  }

  #notify(): void {
    const wake = this.#wake
    this.#wake = []
    for (const resolve of wake) resolve()
  }
}
