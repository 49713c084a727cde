/**
 * Ends an open event stream once its credential stops being valid (revoked, rotated or expired key).
 *
 * One timer per stream, not one per chunk: every `intervalMs` the credential's key is read again through
 * the key cache, so a revocation reaches an open stream within KV's propagation delay + `keyCacheTtlMs`
 * + `intervalMs` (docs/security.md "Revocation"), while a healthy stream costs one cached lookup per
 * interval and nothing per chunk. The stream then ends with the surface's error event and its upstream
 * read is cancelled (which cancels the upstream job and settles the quota, as a caller's disconnect does).
 *
 * A body that registered a `StreamControl` (the OpenAI relay) is returned as it is and ended through
 * that hook; any other body is wrapped in one pull-through stage.
 */
import { encoder, PULL_ONLY } from '../streaming/openai-chunks.ts'
import { registerStreamControl, streamControl } from '../streaming/stream-control.ts'
import type { StreamControl } from '../streaming/stream-control.ts'

/** `body` behind one pull-through stage that registers a control (bodies that have none of their own). */
function controlledStream(body: ReadableStream<Uint8Array>): ReadableStream<Uint8Array> {
  const reader = body.getReader()
  const listeners: Array<() => void> = []
  let closed = false
  let controller!: ReadableStreamDefaultController<Uint8Array>
  const close = () => {
    if (closed) return
    closed = true
    for (const listener of listeners.splice(0)) listener()
  }
  const stream = new ReadableStream<Uint8Array>(
    {
      start(c) {
        controller = c
      },
      async pull() {
        const result = await reader.read().catch((error: unknown) => {
          close()
          throw error
        })
        if (closed) return
        if (result.done) {
          close()
          controller.close()
        } else controller.enqueue(result.value)
      },
      cancel(reason) {
        close()
        return reader.cancel(reason)
      },
    },
    // Pull only when the caller reads: an eager pull would take the first event before the caller
    // asked, and a caller who left at once would be charged as if it had been answered.
    PULL_ONLY,
  )
  registerStreamControl(stream, {
    end(event) {
      if (closed) return
      close()
      // The body may have stopped mid-event: a blank line first ends it (after a whole event it is a no-op).
      controller.enqueue(encoder.encode(`\n\n${event}`))
      controller.close()
      void reader.cancel('credential revoked').catch(() => undefined)
    },
    onClose(listener) {
      if (closed) listener()
      else listeners.push(listener)
    },
  })
  return stream
}

export interface RevocableStreamOptions {
  /** Resolves true while the credential is still valid. A failing check keeps the stream open. */
  stillValid: () => Promise<boolean>
  /** Time between two checks, in ms. */
  intervalMs: number
  /** The error event to end with, already framed for the surface. */
  errorEvent: string
}

/**
 * @example
 * return new Response(revocableStream(res.body, { stillValid, intervalMs: 10_000, errorEvent }), res)
 */
export function revocableStream(body: ReadableStream<Uint8Array>, options: RevocableStreamOptions): ReadableStream<Uint8Array> {
  const control = streamControl(body)
  if (control) {
    watch(control, options)
    return body
  }
  const wrapped = controlledStream(body)
  watch(streamControl(wrapped)!, options)
  return wrapped
}

function watch(control: StreamControl, options: RevocableStreamOptions): void {
  let closed = false
  let timer: ReturnType<typeof setTimeout> | undefined
  const check = async () => {
    timer = undefined
    const valid = await options.stillValid().catch(() => true)
    if (closed) return
    if (valid) timer = setTimeout(check, options.intervalMs)
    else control.end(options.errorEvent)
  }
  timer = setTimeout(check, options.intervalMs)
  control.onClose(() => {
    closed = true
    if (timer !== undefined) clearTimeout(timer)
  })
}
