/**
 * `npm run bench:latency`: a quick look at what podgate adds to a call, outside the full bench: p50 of a
 * JSON call and of a stream's first byte for podgate (its deploy bundle, with KV, quota and the cache
 * stage) and the floor, round-robin (LATENCY_N calls, default 300), and each process's CPU per call.
 * LATENCY_HOLD=<seconds> keeps both running afterwards, with their pids, URLs and a key printed, to
 * attach `strace -tt -p <pid>` and read one call's timeline (request in, upstream out, answer out).
 */
import { bundleWorker, startFloor, startLeastGateways, startPodgate } from './workers.ts'
import { startUpstream } from './upstream.ts'
import { percentile, roundRobin, timeJson, timeStream } from './measure.ts'
import type { Target } from './measure.ts'
import { chatBody } from './wire.ts'

const script = bundleWorker('.bench/bundle', ['--env='])
const upstream = await startUpstream()
const podgate = await startPodgate({ script, runpodBaseUrl: `${upstream.url}/v2` })
const floor = await startFloor(upstream.url)
// The least a gateway can do (scripts/bench/least-gateway/): what reading the body, learning the usage,
// waiting for the first chunk, and Hono with podgate's schema cost by themselves, with none of podgate's code.
// The plain shapes share one process, so they have no CPU column.
const least = await startLeastGateways(upstream.url)
try {
  const key = await podgate.createKey()
  const targets: Target[] = [
    { name: 'floor', url: `${floor.url}/v1/chat/completions`, headers: { authorization: 'Bearer bench' }, pid: floor.workerdPid },
    { name: 'podgate', url: `${podgate.url}/v1/chat/completions`, headers: { authorization: `Bearer ${key}` }, pid: podgate.workerdPid },
    ...['parse', 'usage', 'first'].map((shape) => ({ name: `least-${shape}`, url: `${least.plain.url}/v1/chat/completions?shape=${shape}`, headers: { authorization: 'Bearer bench' } })),
    { name: 'least-hono', url: `${least.hono.url}/v1/chat/completions`, headers: { authorization: 'Bearer bench' }, pid: least.hono.workerdPid },
    // The least Hono gateway plus the least form of each feature podgate's rows run with.
    { name: 'least-featured', url: `${least.featured.url}/featured/v1/chat/completions`, headers: { authorization: 'Bearer bench' }, pid: least.featured.workerdPid },
  ]
  for (let i = 0; i < 30; i++) for (const t of targets) await timeJson(t, chatBody('bench', { first: 10 }))
  const n = Number(process.env.LATENCY_N ?? 300)
  // `least-first` only differs from `least-usage` for streams.
  const json = await roundRobin(targets.filter((t) => t.name !== 'least-first'), n, (t) => timeJson(t, chatBody('bench', { first: 10 })))
  const stream = await roundRobin(targets, Math.round(n / 3), (t) => timeStream(t, chatBody('bench', { events: 20, first: 10, gap: 1 }, true)))
  const p = (name: string) => percentile(json.values[name]!, 50)
  const s = (name: string) => percentile(stream.values[name]!.map((r) => r.firstByte), 50)
  console.log(`JSON p50: floor ${p('floor').toFixed(2)} ms, podgate ${p('podgate').toFixed(2)} ms, added ${(p('podgate') - p('floor')).toFixed(2)} ms; CPU/call floor ${json.cpuPerCall.floor?.toFixed(3)} podgate ${json.cpuPerCall.podgate?.toFixed(3)} ms`)
  console.log(`stream first byte p50: floor ${s('floor').toFixed(2)} ms, podgate ${s('podgate').toFixed(2)} ms, added ${(s('podgate') - s('floor')).toFixed(2)} ms`)
  // Like for like: podgate over the least Hono gateway, JSON and the stream's first byte (which it also waits for).
  console.log(`podgate over least-hono, p50 in ms: JSON ${(p('podgate') - p('least-hono')).toFixed(2)}, first byte ${(s('podgate') - s('least-hono')).toFixed(2)}`)
  // What podgate's features cost at their least, and what podgate's own way of doing them adds on top.
  console.log(`the features at their least (least-featured over least-hono), p50 in ms: JSON ${(p('least-featured') - p('least-hono')).toFixed(2)}, first byte ${(s('least-featured') - s('least-hono')).toFixed(2)}; podgate over least-featured: JSON ${(p('podgate') - p('least-featured')).toFixed(2)}, first byte ${(s('podgate') - s('least-featured')).toFixed(2)}`)
  const added = (of: (name: string) => number, names: string[]) => names.map((name) => `${name} ${(of(name) - of('floor')).toFixed(2)}`).join(', ')
  console.log(`the least gateway (no podgate code), added p50 in ms: JSON ${added(p, ['least-parse', 'least-usage', 'least-hono', 'least-featured'])}; first byte ${added(s, ['least-parse', 'least-usage', 'least-first', 'least-hono', 'least-featured'])}; CPU/call least-hono ${json.cpuPerCall['least-hono']?.toFixed(3)}, least-featured ${json.cpuPerCall['least-featured']?.toFixed(3)} ms`)
  if (process.env.LATENCY_HOLD) {
    console.log(`holding: podgate pid ${podgate.workerdPid} ${targets[1]!.url} key ${key}; floor pid ${floor.workerdPid} ${targets[0]!.url}`)
    await new Promise((resolve) => setTimeout(resolve, Number(process.env.LATENCY_HOLD) * 1000))
  }
} finally {
  await podgate.stop()
  await floor.stop()
  await least.stop()
  await upstream.close()
}
