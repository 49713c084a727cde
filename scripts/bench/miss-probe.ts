/**
 * What a cache miss adds to a JSON call, and why: podgate's deploy bundle called round-robin with a call
 * the cache skips (sampled: no lookup, no store) and with a new deterministic call (a `seed`: lookup,
 * miss, store in `waitUntil`), against the floor; then a floor that also writes its answer to the Cache
 * API or KV in `waitUntil` (scripts/bench/store-worker.js), which prices such a write by itself.
 * Upstream answers after 10 ms.
 *
 * Usage: `npx node scripts/bench/miss-probe.ts [calls]` (default 200 per target).
 */
import { percentile, roundRobin, timeJson } from './measure.ts'
import type { Target } from './measure.ts'
import { startUpstream } from './upstream.ts'
import { chatBody, typicalChat } from './wire.ts'
import { bundleWorker, startFloor, startPodgate, startWorker } from './workers.ts'

const n = Number(process.argv[2] ?? 200)
const script = bundleWorker('.bench/bundle', ['--env='])
const upstream = await startUpstream()
const podgate = await startPodgate({ script, runpodBaseUrl: `${upstream.url}/v2` })
const floor = await startFloor(upstream.url)
const storing = await startWorker({ script: 'scripts/bench/store-worker.js', label: 'floor + a write', bindings: { UPSTREAM: upstream.url } })
const json = () => chatBody('bench', { first: 10 })
/** p50 of each target over a round-robin run, after a warm-up. */
async function p50s(targets: (Target & { body: () => string })[]): Promise<Record<string, number>> {
  for (let i = 0; i < 30; i++) for (const t of targets) await timeJson(t, t.body())
  const run = await roundRobin(targets, n, (t) => timeJson(t, (t as Target & { body: () => string }).body()))
  return Object.fromEntries(targets.map((t) => [t.name, percentile(run.values[t.name]!, 50)]))
}
const added = (p: Record<string, number>, name: string, base: string) => `${p[name]!.toFixed(2)} ms (+${(p[name]! - p[base]!).toFixed(2)})`
try {
  const key = await podgate.createKey()
  const auth = { authorization: `Bearer ${key}` }
  const p = await p50s([
    { name: 'floor', url: `${floor.url}/v1/chat/completions`, headers: {}, body: json },
    { name: 'skipped', url: `${podgate.url}/v1/chat/completions`, headers: auth, body: json },
    { name: 'miss', url: `${podgate.url}/v1/chat/completions`, headers: auth, body: () => typicalChat('bench', { first: 10 }) },
  ])
  console.log(`JSON p50: floor ${p.floor!.toFixed(2)} ms; podgate, cache skipped ${added(p, 'skipped', 'floor')}; podgate, a new seeded call (lookup, miss, store) ${added(p, 'miss', 'floor')}`)
  const w = await p50s(['none', 'cache', 'kv', 'kv-later'].map((put) => ({ name: put, url: `${storing.url}/v1/chat/completions?put=${put}`, headers: {}, body: json })))
  console.log(`the floor with a write in waitUntil, p50: none ${w.none!.toFixed(2)} ms; Cache API put ${added(w, 'cache', 'none')}; KV put ${added(w, 'kv', 'none')}; KV put 3 ms after the answer ${added(w, 'kv-later', 'none')}`)
} finally {
  await podgate.stop()
  await floor.stop()
  await storing.stop()
  await upstream.close()
}
