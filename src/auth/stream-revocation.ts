/**
 * Ends an open event stream once its credential stops being valid (revoked, rotated or expired key).
 *
 * The stream's reads race a timer: at most every `intervalMs` the credential's key is read again through
 * the key cache, so a revocation reaches an open stream within KV's propagation delay + `keyCacheTtlMs`
 * + `intervalMs` (docs/security.md "Revocation"), while a healthy stream costs one cached lookup per
 * interval. The stream then ends with the surface's error event and its upstream read is cancelled
 * (which cancels the upstream job and settles the quota, as a caller's disconnect does).
 */

const encoder = new TextEncoder()

export interface RevocableStreamOptions {
  /** Resolves true while the credential is still valid. A failing check keeps the stream open. */
  stillValid: () => Promise<boolean>
  /** Least time between two checks, in ms. */
  intervalMs: number
  /** The error event to end with, already framed for the surface. */
  errorEvent: string
}

/**
 * @example
 * return new Response(revocableStream(res.body, { stillValid, intervalMs: 10_000, errorEvent }), res)
 */
export function revocableStream(body: ReadableStream<Uint8Array>, options: RevocableStreamOptions): ReadableStream<Uint8Array> {
  const reader = body.getReader()
  let pending: Promise<ReadableStreamReadResult<Uint8Array>> | null = null
  let timer: ReturnType<typeof setTimeout> | null = null
  let checkedAt = Date.now()

  const tick = () => new Promise<'tick'>((resolve) => (timer = setTimeout(() => resolve('tick'), Math.max(0, checkedAt + options.intervalMs - Date.now()))))

  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      for (;;) {
        pending ??= reader.read()
        const result = await Promise.race([pending, tick()])
        if (timer !== null) clearTimeout(timer)
        if (Date.now() - checkedAt >= options.intervalMs) {
          checkedAt = Date.now()
          if (!(await options.stillValid().catch(() => true))) {
            controller.enqueue(encoder.encode(options.errorEvent))
            controller.close()
            void reader.cancel('credential revoked').catch(() => undefined)
            return
          }
        }
        if (result === 'tick') continue
        pending = null
        if (result.done) controller.close()
        else controller.enqueue(result.value)
        return
      }
    },
    cancel(reason) {
      if (timer !== null) clearTimeout(timer)
      return reader.cancel(reason)
    },
  },
  // Pull only when the caller reads, as the relay below does: an eager pull would take the first event
  // before the caller asked, and a caller who left at once would be charged as if it had been answered.
  { highWaterMark: 0 })
}
