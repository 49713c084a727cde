/**
 * One caller's stream of a flight (the leader's or a coalesced twin's): the events so far, then live,
 * with the caller's own usage preference, ending as the flight ends.
 */
import { CALLER_GONE, upstreamError } from '../errors/index.ts'
import { onAbort } from '../http/context.ts'
import type { CompletionContext } from '../pipeline/index.ts'
import { DONE_TEXT, encoder, PULL_ONLY, sseErrorEvent } from '../streaming/openai-chunks.ts'
import { usageChunkText } from './answer.ts'
import type { Flight, FlightReader } from './flight.ts'

/**
 * A caller's stream: the flight's events so far, then live, with the caller's own usage preference.
 * The leader passes no `settle`: its dispatcher settles its outcome. A coalesced twin passes the settle
 * coalesce.ts gives it, which marks every end `cached` (the answer is not its own call). Either lets go
 * of the flight when its caller's signal aborts, as on a body cancel.
 */
export function follow(flight: Flight, reader: FlightReader, ctx: CompletionContext, settle?: CompletionContext['settle']): ReadableStream<Uint8Array> {
  if (!settle) flight.followers++
  let left = false
  const leave = () => {
    if (left) return
    left = true
    flight.unread(reader)
    flight.leave()
  }
  const gone = () => {
    leave()
    settle?.({ ok: false, error: upstreamError(CALLER_GONE), producedOutput: true })
  }
  // A caller who left is let go of (and a twin settled) whether or not its body is ever cancelled: one
  // that left before it was answered never is.
  onAbort(ctx.c.req.raw.signal, gone)
  let usageSent = false
  let errorSent = false
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        for (;;) {
          let out = ''
          while (reader.cursor < flight.end) {
            const event = flight.at(reader.cursor++)
            if ('comment' in event) out += HEARTBEAT_TEXT
            else if (event.usage && !ctx.request.includeUsage) continue
            else {
              usageSent ||= event.usage
              errorSent ||= event.error
              out += `data: ${event.data}\n\n`
            }
          }
          // What everyone has read can go: the capture's memory follows the slowest reader.
          flight.compact()
          if (out !== '') return controller.enqueue(encoder.encode(out))
          if (flight.state === 'ok') {
            if (ctx.request.includeUsage && !usageSent && flight.usage && flight.meta) out += usageChunkText(ctx.request.kind, { ...flight.meta, model: ctx.model.streamedModelName }, flight.usage)
            controller.enqueue(encoder.encode(out + DONE_TEXT))
            controller.close()
            leave()
            settle?.({ ok: true, usage: flight.usage })
            return
          }
          if (flight.state === 'failed') {
            const error = flight.error ?? upstreamError('The shared upstream call failed.')
            if (!errorSent) controller.enqueue(sseErrorEvent(error))
            controller.close()
            leave()
            settle?.({ ok: false, error, producedOutput: true })
            return
          }
          await flight.changed()
        }
      },
      cancel: gone,
    },
    PULL_ONLY,
  )
}

const HEARTBEAT_TEXT = ': keep-alive\n\n'
