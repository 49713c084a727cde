/**
 * Splits a gateway's added latency into the way in and the way out: the upstream (in this process, on
 * the client's clock) records when each request arrived and when it wrote the first event, so per call
 * `in` = arrival − sent and `out` = first byte at the client − first event written (a JSON answer: its
 * write). Round-robin between the floor, the least gateway that waits for the first chunk (`least-first`),
 * the least gateway with every feature of podgate's rows (`least-featured`) and podgate (its deploy
 * bundle, key, quota, cache stage).
 *
 * Usage: `npx node scripts/bench/split-probe.ts [calls] [<tree> ...]` (default 200 per target and kind).
 * Each `<tree>` (a checkout or `git worktree` of this repository, as for `npm run bench:ab`) adds podgate
 * as built from it, to the same round-robin: a change's in and out, read against the same code without it.
 */
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { resolve } from 'node:path'
import { percentile } from './measure.ts'
import { chatBody, completionJson, contentEvent, closingEvents } from './wire.ts'
import { bundleWorker, startFloor, startLeastGateways, startPodgate } from './workers.ts'

const n = Number(process.argv[2] ?? 200)
const trees = process.argv.slice(3)
let arrived = 0
let written = 0
const server = createServer({ noDelay: true, keepAliveTimeout: 60_000 }, (req, res) => {
  const chunks: Buffer[] = []
  req.on('data', (c: Buffer) => chunks.push(c))
  req.on('end', () => {
    arrived = performance.now()
    const body = Buffer.concat(chunks).toString('utf8')
    const model = /"model":"([^"]*)"/.exec(body)?.[1] ?? 'bench'
    if (!/"stream":true/.test(body)) {
      setTimeout(() => {
        const json = completionJson(model)
        written = performance.now()
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) }).end(json)
      }, 5)
      return
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    res.flushHeaders()
    setTimeout(() => {
      written = performance.now()
      res.write(contentEvent(model, 0, 4))
      setTimeout(() => res.end(closingEvents(model, 1)), 1)
    }, 5)
  })
})
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
const upstream = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
const script = bundleWorker('.bench/split/bundle', ['--env='])
const podgate = await startPodgate({ script, runpodBaseUrl: `${upstream}/v2` })
const floor = await startFloor(upstream)
const least = await startLeastGateways(upstream)
const key = await podgate.createKey()
const built = []
for (const [i, tree] of trees.entries()) {
  // wrangler resolves `--outdir` from the config's directory: an absolute path keeps each bundle here.
  const served = await startPodgate({ script: bundleWorker(resolve(`.bench/split/tree-${i}`), ['--env=', '--config', resolve(tree, 'wrangler.toml')]), runpodBaseUrl: `${upstream}/v2`, label: tree })
  built.push({ name: `${i}:${tree}`, served, key: await served.createKey() })
}
const targets = [
  // The least gateway that waits for the first chunk before answering, as podgate does (scripts/bench/least-gateway/).
  { name: 'least-first', url: `${least.plain.url}/v1/chat/completions?shape=first`, auth: 'Bearer bench' },
  // The least gateway with every feature podgate's rows run with (its `/featured` route, a process of its own).
  { name: 'least-featured', url: `${least.featured.url}/featured/v1/chat/completions`, auth: 'Bearer bench' },
  { name: 'floor', url: `${floor.url}/v1/chat/completions`, auth: 'Bearer bench' },
  { name: 'podgate', url: `${podgate.url}/v1/chat/completions`, auth: `Bearer ${key}` },
  ...built.map((b) => ({ name: b.name, url: `${b.served.url}/v1/chat/completions`, auth: `Bearer ${b.key}` })),
]
type Split = { in: number; out: number }
const results: Record<string, Split[]> = {}
const once = async (t: (typeof targets)[number], stream: boolean) => {
  const sent = performance.now()
  const res = await fetch(t.url, { method: 'POST', body: chatBody('bench', {}, stream), headers: { authorization: t.auth, 'content-type': 'application/json' } })
  const reader = res.body!.getReader()
  const first = await reader.read()
  const firstAt = performance.now()
  while (!(await reader.read()).done);
  if (res.status !== 200 || first.done) throw new Error(`${t.name}: HTTP ${res.status}`)
  ;(results[`${t.name} ${stream ? 'stream' : 'json'}`] ??= []).push({ in: arrived - sent, out: firstAt - written })
}
try {
  for (let i = 0; i < 20; i++) for (const t of targets) for (const s of [false, true]) await once(t, s)
  for (const k of Object.keys(results)) delete results[k]
  for (let i = 0; i < n; i++) for (const t of targets) for (const s of [false, true]) await once(t, s)
  for (const [name, rows] of Object.entries(results)) {
    const p = (pick: (s: Split) => number) => percentile(rows.map(pick), 50).toFixed(2)
    console.log(`${name.padEnd(Math.max(20, ...targets.map((t) => t.name.length + 7)))} in p50 ${p((s) => s.in)} ms, out p50 ${p((s) => s.out)} ms`)
  }
} finally {
  await podgate.stop()
  for (const b of built) await b.served.stop()
  await floor.stop()
  await least.stop()
  server.close()
  server.closeAllConnections()
}
