/**
 * Runs in Node before the workerd test pools start: serves a real Runpod emulator over HTTP on
 * loopback, so tests whose behaviour depends on a real upstream connection (stream relays, aborts,
 * long polls) exercise one. Its URL reaches the Worker as RUNPOD_BASE_URL (see vitest.config.ts).
 */
import type { TestProject } from 'vitest/node'
import { createRunpodEmulator } from '../src/testing/index.ts'
import { serveNode } from '../scripts/lib/serve-node.ts'

declare module 'vitest' {
  export interface ProvidedContext {
    emulatorUrl: string
    replayUrl: string
  }
}

/**
 * `POST {"pieces": [...], "error": true?, "holdMs": n?}` answers an SSE body of those pieces, each written
 * as it is, then a clean end (after `holdMs` with the connection held open), or with `error` a connection
 * broken after the last piece (the socket destroyed).
 * It gives tests that script an upstream's exact bytes a body the runtime produced, as a fetch body is:
 * a JavaScript stream's `tee` drops what a branch has not read yet when it errors, the runtime's keeps it.
 */
function replayUpstream(request: Request): Promise<Response> | Response {
  if (request.method !== 'POST') return new Response('POST {"pieces": [...]}', { status: 405 })
  return request.json().then((script) => {
    const { pieces, error, holdMs } = script as { pieces: string[]; error?: boolean; holdMs?: number }
    const encoder = new TextEncoder()
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        const next = pieces.shift()
        if (next !== undefined) controller.enqueue(encoder.encode(next))
        else if (holdMs) return new Promise<void>((resolve) => setTimeout(resolve, holdMs)).then(() => controller.close())
        else if (error) controller.error(new Error('connection reset (scripted)'))
        else controller.close()
      },
    })
    return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
  })
}

export default async function setup(project: TestProject) {
  const emulator = createRunpodEmulator()
  const server = await serveNode((request) => emulator.fetch(request), { port: 0, host: '127.0.0.1' })
  project.provide('emulatorUrl', server.url)
  // Its stream errors are the scripted breaks, not failures: nothing to log.
  const replay = await serveNode(replayUpstream, { port: 0, host: '127.0.0.1', onError: () => undefined })
  project.provide('replayUrl', replay.url)
  return async () => {
    await server.close()
    await replay.close()
  }
}
