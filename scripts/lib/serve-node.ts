/**
 * Serves a web-standard fetch handler (`(Request) => Response`) over node:http: the one bridge the
 * emulator, dev and bench scripts use to put an in-process app on a real socket.
 *
 * - Request bodies stream in with backpressure; response bodies stream out chunk by chunk, each
 *   written (and so flushed) as it comes, which SSE needs.
 * - A client that goes away aborts the Request's `signal` and cancels the response body, so the
 *   handler can stop work (e.g. a gateway cancelling its upstream job).
 * - A response body that errors mid-way destroys the socket: the client sees a truncated body,
 *   never a clean end.
 */

import { createServer } from 'node:http'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

export type FetchHandler = (request: Request) => Response | Promise<Response>

export interface ServeNodeOptions {
  /** Port to bind; 0 picks a free one (read it from the result). Default 0. */
  port?: number
  /** Interface to bind. Default `127.0.0.1`: loopback only. */
  host?: string
  /** Called with handler and stream errors. Default: `console.error`. */
  onError?: (error: unknown) => void
}

export interface NodeServer {
  /** `http://host:port`, without a trailing slash. */
  url: string
  port: number
  /** Stops listening and ends every open connection (streams included). */
  close(): Promise<void>
}

// Hop-by-hop headers belong to one connection; node:http writes its own.
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'proxy-connection'])

/**
 * @example
 * const server = await serveNode((request) => app.fetch(request), { port: 8788 })
 * console.log(server.url)
 * await server.close()
 */
export async function serveNode(handler: FetchHandler, options: ServeNodeOptions = {}): Promise<NodeServer> {
  const host = options.host ?? '127.0.0.1'
  const onError = options.onError ?? ((error: unknown) => console.error('[serve-node]', error))
  const server = createServer({ noDelay: true }, (req, res) => {
    handle(handler, req, res, host).catch((error: unknown) => {
      onError(error)
      if (!res.headersSent) {
        res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end('Internal Server Error')
      } else {
        res.destroy()
      }
    })
  })

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  const { port } = server.address() as AddressInfo
  const urlHost = host.includes(':') ? `[${host}]` : host
  return {
    url: `http://${urlHost}:${port}`,
    port,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((error) => (error ? reject(error) : resolve()))
        server.closeAllConnections()
      }),
  }
}

async function handle(handler: FetchHandler, req: IncomingMessage, res: ServerResponse, host: string): Promise<void> {
  const aborter = new AbortController()
  let body: ReadableStreamDefaultReader<Uint8Array> | undefined
  res.on('close', () => {
    // 'close' before the response finished means the client went away.
    if (res.writableFinished) return
    aborter.abort(new Error('client disconnected'))
    body?.cancel().catch(() => {})
  })

  const response = await handler(toRequest(req, host, aborter.signal))
  res.statusCode = response.status
  if (response.statusText) res.statusMessage = response.statusText
  for (const [name, value] of response.headers) {
    if (HOP_BY_HOP.has(name) || name === 'set-cookie') continue
    res.setHeader(name, value)
  }
  const cookies = response.headers.getSetCookie()
  if (cookies.length > 0) res.setHeader('set-cookie', cookies)

  if (!response.body || req.method === 'HEAD') {
    await response.body?.cancel()
    res.end()
    return
  }
  // Send the head now: an SSE client should see its headers before the first event is ready.
  res.flushHeaders()
  body = response.body.getReader()
  if (res.destroyed) {
    await body.cancel()
    return
  }
  let written: Promise<void> = Promise.resolve()
  try {
    for (;;) {
      const { done, value } = await body.read()
      if (done) break
      let ready = true
      written = new Promise((resolve) => {
        ready = res.write(value, () => resolve())
      })
      if (!ready) await drained(res)
      if (res.destroyed) return
    }
  } catch (error) {
    // The body errored mid-way: let what was written reach the client, then cut the connection so
    // the client cannot mistake the truncated body for a complete one.
    await Promise.race([written, new Promise((resolve) => setTimeout(resolve, 1000))])
    if (!res.destroyed) res.destroy(error instanceof Error ? error : new Error(String(error)))
    return
  }
  res.end()
}

function toRequest(req: IncomingMessage, host: string, signal: AbortSignal): Request {
  const headers = new Headers()
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i]
    const value = req.rawHeaders[i + 1]
    if (name !== undefined && value !== undefined && !name.startsWith(':')) headers.append(name, value)
  }
  const authority = req.headers.host ?? `${host}:${req.socket.localPort ?? ''}`
  const url = new URL(req.url ?? '/', `http://${authority}`)
  const method = req.method ?? 'GET'
  const hasBody = method !== 'GET' && method !== 'HEAD'
  // `duplex: 'half'` is required by undici for a streamed request body.
  const init: RequestInit & { duplex?: 'half' } = { method, headers, signal }
  if (hasBody) {
    init.body = bodyStream(req)
    init.duplex = 'half'
  }
  return new Request(url, init)
}

/** The request body as a web stream, pulled (so paused) only as fast as the handler reads. */
function bodyStream(req: IncomingMessage): ReadableStream<Uint8Array> {
  const chunks: AsyncIterator<Buffer> = req[Symbol.asyncIterator]()
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const { done, value } = await chunks.next()
      if (done) controller.close()
      else controller.enqueue(new Uint8Array(value.buffer, value.byteOffset, value.byteLength))
    },
    async cancel() {
      await chunks.return?.()
    },
  })
}

/** Resolves when the socket can take more data, or when it closed (so a dead client cannot hang us). */
function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done)
      res.off('close', done)
      resolve()
    }
    res.on('drain', done)
    res.on('close', done)
  })
}
