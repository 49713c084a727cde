/**
 * `npm run bench:micro -- [<tree> ...]`: the CPU of one JSON call (the latency rows' call, which the cache
 * skips) inside workerd, with no HTTP: podgate as built from each work tree (default: this one) and, in
 * the same workerd, the least featured gateway (scripts/bench/least-gateway/hono.ts, `/featured`), each
 * through `fetch` in process against the CPU bench Worker's in-process upstream and in-memory KV
 * (scripts/bench/cpu-worker/). Each number is workerd's process CPU for a loop of calls less the same loop
 * against the upstream alone, per call: the median, min and max of `--rounds=N` loops (default 15) of
 * `--calls=N` calls (default 200), the trees and targets taken in turn. A work tree built from main reads
 * within ±5% of another.
 */
import { resolve } from 'node:path'
import { cpuNs } from './processes.ts'
import { bundleWorker, startWorker } from './workers.ts'
import type { ServedWorker } from './workers.ts'

const args = process.argv.slice(2)
const option = (name: string, fallback: number) => Number(args.find((a) => a.startsWith(`--${name}=`))?.split('=')[1] ?? fallback)
const trees = args.filter((a) => !a.startsWith('--'))
if (trees.length === 0) trees.push('.')
const rounds = option('rounds', 15)
const calls = option('calls', 200)

const servers: ServedWorker[] = []
try {
  for (const [i, tree] of trees.entries()) {
    // wrangler resolves `--outdir` from the config's directory: an absolute path keeps each bundle here.
    const script = bundleWorker(resolve(`.bench/micro-${i}`), ['--env', 'dev', '--config', resolve(tree, 'wrangler.toml'), resolve(tree, 'scripts/bench/cpu-worker/worker.ts')])
    servers.push(await startWorker({ script, label: `cpu worker (${tree})`, bindings: {}, quota: true }))
  }
  /** Microseconds of workerd CPU a call of `target`, less the upstream's own. */
  const perCall = async (server: ServedWorker, target: string) => {
    const run = async (query: string) => {
      const before = cpuNs(server.workerdPid)
      const res = await fetch(`${server.url}/loop?${query}`)
      const body = (await res.json()) as { status: number }
      if (res.status !== 200 || body.status !== 200) throw new Error(`cpu worker: ${query} answered ${res.status}/${body.status}`)
      return cpuNs(server.workerdPid) - before
    }
    const upstream = await run(`target=upstream&n=${calls}&cache=off`)
    return ((await run(`target=${target}&n=${calls}&cache=off`)) - upstream) / calls / 1000
  }
  const targets = servers.flatMap((server, i) => [
    { name: `podgate (${trees[i]})`, server, target: 'gateway' },
    { name: `least gateway (in ${trees[i]})`, server, target: 'least' },
  ])
  for (const t of targets) for (let i = 0; i < 3; i++) await perCall(t.server, t.target)
  const values = new Map<string, number[]>(targets.map((t) => [t.name, []]))
  for (let round = 0; round < rounds; round++) for (const t of targets) values.get(t.name)!.push(await perCall(t.server, t.target))
  console.log(`CPU a JSON call inside workerd, no HTTP (${rounds} loops of ${calls} calls): median [min, max]`)
  for (const [name, list] of values) {
    const sorted = list.sort((a, b) => a - b)
    console.log(`  ${name}: ${sorted[Math.floor(sorted.length / 2)]!.toFixed(1)} µs [${sorted[0]!.toFixed(1)}, ${sorted.at(-1)!.toFixed(1)}]`)
  }
} finally {
  for (const server of servers) await server.stop().catch(() => undefined)
}
