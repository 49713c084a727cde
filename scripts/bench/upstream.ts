/**
 * The bench baseline: a fixed-latency OpenAI-compatible upstream on plain node:http, as cheap as a
 * server gets so that what the gateways add is what stands out.
 *
 * Serves `POST /v1/chat/completions` (direct calls, Portkey's custom host) and Runpod's path shape
 * `POST /v2/<endpointId>/openai/v1/chat/completions` (podgate's `openai` mode via RUNPOD_BASE_URL).
 * JSON answers come after `first` ms; streams send their head at once, then `events` SSE events.
 */
import { createServer } from 'node:http'
import type { ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { closingEvents, completionJson, contentEvent, parseScenario } from './wire.ts'

export interface BenchUpstream {
  url: string
  close(): Promise<void>
}

const CHAT_PATH = /^\/(?:v2\/[^/]+\/openai\/)?v1\/chat\/completions$/

export async function startUpstream(): Promise<BenchUpstream> {
  const server = createServer({ noDelay: true, keepAliveTimeout: 60_000 }, (req, res) => {
    if (req.method !== 'POST' || !CHAT_PATH.test(req.url ?? '')) {
      res.writeHead(404).end()
      return
    }
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8')
      const scenario = parseScenario(body)
      const model = /"model":"([^"]*)"/.exec(body)?.[1] ?? 'bench'
      if (/"stream":true/.test(body)) {
        void stream(res, model, scenario.events, scenario.bytes, scenario.first, scenario.gap)
        return
      }
      setTimeout(() => {
        const json = completionJson(model)
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) }).end(json)
      }, scenario.first)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      }),
  }
}

async function stream(res: ServerResponse, model: string, events: number, bytes: number, first: number, gap: number): Promise<void> {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
  res.flushHeaders()
  await sleep(first)
  for (let i = 0; i < events; i++) {
    if (res.destroyed) return
    const ok = res.write(contentEvent(model, i, bytes))
    if (gap > 0) await sleep(gap)
    else if (!ok) await new Promise((resolve) => res.once('drain', resolve))
    // Yield now and then even at full speed, so concurrent streams interleave.
    else if (i % 16 === 15) await new Promise((resolve) => setImmediate(resolve))
  }
  res.end(closingEvents(model, events))
}
