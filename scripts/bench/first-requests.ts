/**
 * Where a new isolate's first request goes: a fresh workerd with podgate's deploy bundle per sample
 * (its key already in persisted KV, as a deployed Worker finds it), then one request of a kind and a
 * second one, timed from the client. Each kind adds one piece of first-request work to the one before:
 * `healthz` (building the gateway from the environment, the router's first match), `models` (+ the key's
 * first KV read), `sampled` (+ the quota's first KV list and the first upstream call), `typical` (+ the
 * cache: the purge generations, the Cache API and KV lookups, the store).
 *
 * Usage: `npx node scripts/bench/first-requests.ts [starts]` (default 5 starts per kind).
 */
import { rmSync } from 'node:fs'
import { percentile } from './measure.ts'
import { startUpstream } from './upstream.ts'
import { chatBody, typicalChat } from './wire.ts'
import { bundleWorker, startPodgate } from './workers.ts'

const starts = Number(process.argv[2] ?? 5)
const script = bundleWorker('.bench/first-requests/bundle', ['--env='])
const upstream = await startUpstream()
const state = '.bench/first-requests/state'
rmSync(state, { recursive: true, force: true })
const start = () => startPodgate({ script, runpodBaseUrl: `${upstream.url}/v2`, persistTo: state, label: 'first requests' })
const seeding = await start()
const key = await seeding.createKey()
await seeding.stop()

const chat = (body: string) => (url: string) => fetch(`${url}/v1/chat/completions`, { method: 'POST', body, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' } })
const kinds: Record<string, (url: string) => Promise<Response>> = {
  healthz: (url) => fetch(`${url}/healthz`),
  models: (url) => fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${key}` } }),
  sampled: chat(chatBody('bench', { first: 0 })),
  typical: chat(typicalChat('bench', { first: 0 })),
}
const timed = async (send: () => Promise<Response>) => {
  const started = performance.now()
  const res = await send()
  await res.arrayBuffer()
  if (res.status !== 200) throw new Error(`first requests: HTTP ${res.status}`)
  return performance.now() - started
}

const samples: Record<string, { ready: number[]; first: number[]; second: number[] }> = {}
for (let i = 0; i < starts; i++) {
  for (const [kind, send] of Object.entries(kinds)) {
    const server = await start()
    try {
      const first = await timed(() => send(server.url))
      const second = await timed(() => send(server.url))
      const row = (samples[kind] ??= { ready: [], first: [], second: [] })
      row.ready.push(server.readyMs)
      row.first.push(first)
      row.second.push(second)
    } finally {
      await server.stop()
    }
  }
}
await upstream.close()
const ms = (values: number[]) => `${percentile(values, 50).toFixed(1)} ms`
for (const [kind, row] of Object.entries(samples)) console.log(`${kind.padEnd(8)} ready ${ms(row.ready)}, first ${ms(row.first)}, second ${ms(row.second)} (median of ${starts})`)
process.exit(0)
