/**
 * Request coalescing: one in-flight upstream call per cache key in an isolate, and a broadcast buffer
 * that lets callers who arrive while it runs read what was produced so far and then follow it live.
 *
 * The buffer holds the leader's own output events (the `data:` payloads it streamed, or its JSON body)
 * and, at the end, the normalized answer, so each joiner can be served in the form it asked for.
 */
import type { GatewayError } from '../errors/index.ts'
import type { Usage } from '../streaming/openai-chunks.ts'
import type { CachedAnswer } from './answer.ts'

export type FlightEvent =
  /** One `data:` payload of the leader's stream; `usage` marks the usage chunk, `error` an error event. */
  | { data: string; usage: boolean; error: boolean }
  /** A heartbeat comment: passed on so joiners' connections stay open through long waits. */
  | { comment: true }

export type FlightState = 'open' | 'ok' | 'failed'

/** Longest a waiting caller sleeps before it looks at the flight again. */
const POLL_MS = 50

export class Flight {
  /** The leader asked for a stream: joiners that stream too can follow its events. */
  readonly streams: boolean
  readonly events: FlightEvent[] = []
  state: FlightState = 'open'
  error: GatewayError | undefined
  /** The leader's caller went away (or its answer cannot serve joiners): joiners serve themselves. */
  abandoned = false
  /** The normalized answer, when the leader's answer could be captured. */
  answer: CachedAnswer | undefined
  usage: Usage | undefined
  /** `id` and `created` of the leader's answer. */
  meta: { id: string; created: number } | undefined
  /** The leader's JSON body text, when it did not stream. */
  json: string | undefined
  /** Callers reading or awaiting this flight (the leader included). */
  followers = 0
  /** Called when the last follower leaves before the end. */
  onIdle: (() => void) | undefined
  #wake: (() => void)[] = []

  constructor(streams: boolean) {
    this.streams = streams
  }

  push(event: FlightEvent): void {
    this.events.push(event)
    this.#notify()
  }

  succeed(result: { answer: CachedAnswer | undefined; usage: Usage | undefined; meta: Flight['meta']; json?: string }): void {
    if (this.state !== 'open') return
    this.state = 'ok'
    this.answer = result.answer
    this.usage = result.usage
    this.meta = result.meta
    this.json = result.json
    this.#notify()
  }

  fail(error: GatewayError, abandoned: boolean): void {
    if (this.state !== 'open') return
    this.state = 'failed'
    this.error = error
    this.abandoned = abandoned
    this.#notify()
  }

  leave(): void {
    this.followers--
    if (this.followers <= 0 && this.state === 'open') this.onIdle?.()
  }

  /**
   * Resolves at the next event, at the end, or after `pollMs`, whichever comes first. The timer is
   * what keeps a joiner alive in Workers: its request context sees its own pending timer, not just a
   * promise another request will resolve, and the runtime would otherwise cancel it as hung.
   */
  changed(pollMs = POLL_MS): Promise<void> {
    if (this.state !== 'open') return Promise.resolve()
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

  async ended(): Promise<void> {
    while (this.state === 'open') await this.changed()
  }

  #notify(): void {
    const wake = this.#wake
    this.#wake = []
    for (const resolve of wake) resolve()
  }
}
