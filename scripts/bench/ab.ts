/**
 * `npm run bench:ab -- <tree> [<tree> ...]`: podgate as built from each work tree (a checkout or a `git
 * worktree` of this repository), side by side in one run, with the floor and the least featured gateway
 * (scripts/bench/least-gateway/hono.ts, `/featured`): round-robin JSON calls over the bench upstream
 * (answering after 10 ms, as the latency rows), and with `--streams` 100-event streams, each target in a
 * workerd of its own. Per round, each tree's added p50 over the floor and its process CPU per call over
 * the floor's. A change's effect, measured in the conditions of the bench's rows, against the same code
 * without it and against the bound, in one run.
 *
 * Options: `--rounds=N` (default 3), `--calls=N` JSON calls per target per round (default 300), `--warm=N`
 * calls to each target back to back before the rounds (default 0: 30 round-robin calls only, as the bench),
 * `--streams` (also 60 streams per target per round: first byte and CPU per stream), `--least-nopub` (a
 * second least gateway that publishes no quota counts to KV: what Miniflare's local KV costs a process).
 *
 * Order matters a little: in A/A runs (one tree given twice) the podgate started first read 0.05-0.1 ms
 * slower in every round. Give a change in both orders (`A B`, then `B A`) before reading a difference of
 * that size.
 */
import { resolve } from 'node:path'
import { percentile, roundRobin, timeJson, timeStream } from './measure.ts'
import type { Target } from './measure.ts'
import { startUpstream } from './upstream.ts'
import { chatBody } from './wire.ts'
import { bundleWorker, startFloor, startLeastGateways, startPodgate, startWorker } from './workers.ts'
import type { ServedPodgate } from './workers.ts'

const args = process.argv.slice(2)
const option = (name: string, fallback: number) => Number(args.find((a) => a.startsWith(`--${name}=`))?.split('=')[1] ?? fallback)
const trees = args.filter((a) => !a.startsWith('--'))
if (trees.length === 0) {
  console.error('usage: npm run bench:ab -- <tree> [<tree> ...] [--rounds=3] [--calls=300] [--streams] [--least-nopub]')
  process.exit(2)
}
const rounds = option('rounds', 3)
const calls = option('calls', 300)

const upstream = await startUpstream()
const stops: Array<() => Promise<void>> = []
try {
  const floor = await startFloor(upstream.url)
  stops.push(floor.stop)
  const gateways: Array<{ name: string; served: ServedPodgate; key: string }> = []
  for (const [i, tree] of trees.entries()) {
    // wrangler resolves `--outdir` from the config's directory: an absolute path keeps each bundle here.
    const script = bundleWorker(resolve(`.bench/ab-${i}`), ['--env=', '--config', resolve(tree, 'wrangler.toml')])
    const served = await startPodgate({ script, runpodBaseUrl: `${upstream.url}/v2`, label: tree })
    stops.push(served.stop)
    gateways.push({ name: `${i}:${tree}`, served, key: await served.createKey() })
  }
  const least = await startLeastGateways(upstream.url)
  stops.push(least.stop)
  const nopub = args.includes('--least-nopub') ? await startWorker({ script: bundleWorker(resolve('.bench/least-hono'), ['--env', 'dev', 'scripts/bench/least-gateway/hono.ts']), label: 'least (no KV publish)', bindings: { UPSTREAM: upstream.url } }) : undefined
  if (nopub) stops.push(nopub.stop)

  const targets: Target[] = [
    { name: 'floor', url: `${floor.url}/v1/chat/completions`, headers: { authorization: 'Bearer bench' }, pid: floor.workerdPid },
    ...gateways.map((g) => ({ name: g.name, url: `${g.served.url}/v1/chat/completions`, headers: { authorization: `Bearer ${g.key}` }, pid: g.served.workerdPid })),
    { name: 'least', url: `${least.featured.url}/featured/v1/chat/completions`, headers: { authorization: 'Bearer bench' }, pid: least.featured.workerdPid },
    ...(nopub ? [{ name: 'least, no KV publish', url: `${nopub.url}/featured/v1/chat/completions?publish=0`, headers: { authorization: 'Bearer bench' }, pid: nopub.workerdPid }] : []),
  ]
  const named = targets.filter((t) => t.name !== 'floor').map((t) => t.name)
  for (let i = 0; i < 30; i++) for (const t of targets) await timeJson(t, chatBody('bench', { first: 10 }))
  // `--warm=N`: N more calls to each target first, back to back (the upstream answering at once), so V8 has optimized what it will.
  for (const t of targets) for (let i = 0; i < option('warm', 0); i++) await timeJson(t, chatBody('bench', { first: 0 }))
  for (let round = 1; round <= rounds; round++) {
    const json = await roundRobin(targets, calls, (t) => timeJson(t, chatBody('bench', { first: 10 })))
    const p50 = (name: string) => percentile(json.values[name]!, 50)
    console.log(`round ${round}, JSON (${calls} calls each), added p50 over the floor and process CPU per call over the floor's:`)
    for (const name of named) console.log(`  ${name}: ${(p50(name) - p50('floor')).toFixed(3)} ms, CPU ${(json.cpuPerCall[name]! - json.cpuPerCall.floor!).toFixed(3)} ms`)
    if (args.includes('--streams')) {
      const stream = await roundRobin(targets, 60, (t) => timeStream(t, chatBody('bench', { events: 100, first: 10, gap: 1 }, true)))
      const first = (name: string) => percentile(stream.values[name]!.map((s) => s.firstByte), 50)
      console.log(`round ${round}, 100-event streams (60 each), added first byte p50 and process CPU per stream against the floor's:`)
      for (const name of named) console.log(`  ${name}: ${(first(name) - first('floor')).toFixed(3)} ms, CPU ${(stream.cpuPerCall[name]! / stream.cpuPerCall.floor!).toFixed(2)}×`)
    }
  }
} finally {
  for (const stop of stops.reverse()) await stop().catch(() => undefined)
  await upstream.close()
}
