/**
 * `npm run bench:latency`: a quick look at what podgate adds to a call, outside the full bench: p50 of a
 * JSON call and of a stream's first byte for podgate (its deploy bundle, with KV, quota and the cache
 * stage) and the floor, round-robin (LATENCY_N calls, default 300), and each process's CPU per call.
 * LATENCY_HOLD=<seconds> keeps both running afterwards, with their pids, URLs and a key printed, to
 * attach `strace -tt -p <pid>` and read one call's timeline (request in, upstream out, answer out).
 */
import { bundleWorker, startFloor, startPodgate } from './workers.ts'
import { startUpstream } from './upstream.ts'
import { percentile, roundRobin, timeJson, timeStream } from './measure.ts'
import type { Target } from './measure.ts'
import { chatBody } from './wire.ts'

const script = bundleWorker('.bench/bundle', ['--env='])
const upstream = await startUpstream()
const podgate = await startPodgate({ script, runpodBaseUrl: `${upstream.url}/v2` })
const floor = await startFloor(upstream.url)
try {
  const key = await podgate.createKey()
  const targets: Target[] = [
    { name: 'floor', url: `${floor.url}/v1/chat/completions`, headers: { authorization: 'Bearer bench' }, pid: floor.workerdPid },
    { name: 'podgate', url: `${podgate.url}/v1/chat/completions`, headers: { authorization: `Bearer ${key}` }, pid: podgate.workerdPid },
  ]
  for (let i = 0; i < 30; i++) for (const t of targets) await timeJson(t, chatBody('bench', { first: 10 }))
  const n = Number(process.env.LATENCY_N ?? 300)
  const json = await roundRobin(targets, n, (t) => timeJson(t, chatBody('bench', { first: 10 })))
  const stream = await roundRobin(targets, Math.round(n / 3), (t) => timeStream(t, chatBody('bench', { events: 20, first: 10, gap: 1 }, true)))
  const p = (name: string) => percentile(json.values[name]!, 50)
  const s = (name: string) => percentile(stream.values[name]!.map((r) => r.firstByte), 50)
  console.log(`JSON p50: floor ${p('floor').toFixed(2)} ms, podgate ${p('podgate').toFixed(2)} ms, added ${(p('podgate') - p('floor')).toFixed(2)} ms; CPU/call floor ${json.cpuPerCall.floor?.toFixed(3)} podgate ${json.cpuPerCall.podgate?.toFixed(3)} ms`)
  console.log(`stream first byte p50: floor ${s('floor').toFixed(2)} ms, podgate ${s('podgate').toFixed(2)} ms, added ${(s('podgate') - s('floor')).toFixed(2)} ms`)
  if (process.env.LATENCY_HOLD) {
    console.log(`holding: podgate pid ${podgate.workerdPid} ${targets[1]!.url} key ${key}; floor pid ${floor.workerdPid} ${targets[0]!.url}`)
    await new Promise((resolve) => setTimeout(resolve, Number(process.env.LATENCY_HOLD) * 1000))
  }
} finally {
  await podgate.stop()
  await floor.stop()
  await upstream.close()
}
