/**
 * A hook by which code outside a relay can end the event stream it produces, without wrapping it.
 *
 * Wrapping a response body in another JavaScript `ReadableStream` costs workerd a turn per chunk; the
 * relay already spends one, so a check that must be able to end the stream (the revocation of the key
 * that opened it) asks the relay for its control instead, and falls back to a wrapper only for bodies
 * that registered none. Keyed by the body stream object, which workerd keeps as `Response.body`.
 */

export interface StreamControl {
  /** Writes `event` (already framed for the surface) as the last event, closes the stream and stops its upstream. */
  end(event: string): void
  /** Calls `listener` once when the stream is over, however it ended; at once if it already is. */
  onClose(listener: () => void): void
  /**
   * Optional: the caller left (before it was handed the stream, or later, told by its request's signal)
   * while the upstream call runs on for others (a cache flight's joiners): nothing more goes to the caller,
   * even through a body something holds locked, and the upstream's part is read at once.
   */
  detach?(): void
}

const controls = new WeakMap<ReadableStream<Uint8Array>, StreamControl>()

export function registerStreamControl(stream: ReadableStream<Uint8Array>, control: StreamControl): void {
  controls.set(stream, control)
}

/** Calls each listener `listeners` holds, once, and empties it: the relays' `onClose` listeners. */
export function runListeners(listeners: Array<() => void>): void {
  for (const listener of listeners.splice(0)) listener()
}

/** The control `stream` registered, if any. */
export function streamControl(stream: ReadableStream<Uint8Array>): StreamControl | undefined {
  return controls.get(stream)
}
