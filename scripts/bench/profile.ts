/**
 * `npm run bench:profile`: CPU profiles of podgate's request path and stream relay inside workerd, and
 * a summary of where the time goes (`.bench/profiles/summary.md`, also printed).
 *
 * Method, per scenario, in two passes so the profilers do not distort each other:
 * 1. `perf record -g` over the whole workerd process (`native-profile.ts`), with V8 naming its code in a
 *    perf map. Every on-CPU sample is charged to its leaf (V8, streams, HTTP, GC, kernel…) and to the
 *    nearest JavaScript frame: a function of podgate's bundle, mapped through the source map to src/;
 *    Miniflare's own Workers (its entry Worker and the local KV / Cache API / Durable Object
 *    simulations); or no JavaScript at all (the runtime moving bytes). This is the summary.
 * 2. V8's sampling profiler through workerd's inspector (`inspector.ts`, Miniflare's `inspectorPort`,
 *    i.e. workerd's `--inspector-addr`) in the Worker's isolate, saved as `<scenario>.cpuprofile` for
 *    Chrome DevTools. It samples wall-clock time, so over HTTP it also counts time the isolate spent
 *    waiting inside a native call; without perf, its summary (`cpu-profile.ts`) stands in, with that caveat.
 *
 * Scenarios (all by default; name some to run those): `http-json`, `http-json-bypass`, `http-stream`, `http-stream-cacheable`
 * (podgate's bundle over HTTP from the bench upstream on loopback, served as `npm run bench` serves it but
 * not minified, so functions keep their names), `floor-json`, `floor-stream` (the pass-through Worker
 * under the same load), `least-json-bypass`, `least-stream-paced`, `least-stream-64` (the least featured gateway,
 * scripts/bench/least-gateway/hono.ts, under the same loads), `micro-json`, `micro-json-bypass`, `micro-stream` (the CPU
 * bench Worker's in-process loop, in-memory KV and cache). `--seconds=N` per pass (default 4); `--gap=N` ms between
 * steps (default 0: back to back; the bench's rounds call each process once per 15-100 ms); `--interleave`, a call to
 * a floor and to a least gateway of their own before each step (the bench's rounds); `--first=N`, the upstream's
 * delay for a JSON call (default 0; the latency rows' is 10 ms); `PROFILE_INTERVAL_US=N`,
 * the V8 profiler's sampling interval (default 250 µs). Profiling slows workerd: read shares, not times.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { bundleResolver, summarizeProfile } from './cpu-profile.ts'
import type { ProfileSummary } from './cpu-profile.ts'
import { startProfiling } from './inspector.ts'
import { timeJson, timeStream } from './measure.ts'
import type { Target } from './measure.ts'
import { PERF_V8_FLAGS, perfAvailable, readPerfStacks, startPerf, stopPerf } from './native-profile.ts'
import type { Owner, StackProfile } from './native-profile.ts'
import { cpuNs, freePort } from './processes.ts'
import { startUpstream } from './upstream.ts'
import { chatBody, typicalChat } from './wire.ts'

/** What the bench upstream is asked to send (events, pacing). */
type Traffic = Parameters<typeof chatBody>[1]
import { bundleWorker, startFloor, startPodgate, startWorker } from './workers.ts'
import type { ServedWorker } from './workers.ts'

const OUT = '.bench/profiles'

interface Scenario {
  name: string
  what: string
  server: 'podgate' | 'floor' | 'least' | 'micro'
  unit: 'request' | 'event'
  /** Against the served Worker: a step of work that returns how many units it did. */
  work(served: Served): () => Promise<number>
}

interface Served {
  server: ServedWorker
  inspectorPort: number
  /** The script it runs, whose source map names the functions. */
  bundle: string
  /** The API key to call it with. */
  key: string
}

interface Pass {
  units: number
  cpuUs: number
}

const args = process.argv.slice(2)
const seconds = Number(args.find((a) => a.startsWith('--seconds='))?.split('=')[1] ?? 4)
/** ms between steps (`--gap=`): at the bench's rate (one call per 15-100 ms) each call finds the CPU's caches cold. Default 0. */
const gapMs = Number(args.find((a) => a.startsWith('--gap='))?.split('=')[1] ?? 0)
/**
 * `--interleave`: before each step, one JSON call to a floor and one to a least featured gateway, each in a
 * workerd of its own, as the bench's rounds interleave their targets: the profiled Worker's calls then find
 * the CPU's caches as those rounds leave them (its CPU alone is measured).
 */
const interleave = args.includes('--interleave')
/** `--first=N`: the bench upstream answers a JSON call after N ms (default 0; the latency rows' is 10). */
const firstMs = Number(args.find((a) => a.startsWith('--first='))?.split('=')[1] ?? 0)
const chosen = args.filter((a) => !a.startsWith('--'))
const log = (message: string) => console.log(`[profile] ${message}`)
const withPerf = perfAvailable()
// Read by Miniflare when it starts workerd: V8 then names its JIT code for perf.
if (withPerf) process.env.MINIFLARE_WORKERD_V8_FLAGS = PERF_V8_FLAGS

mkdirSync(OUT, { recursive: true })
const upstream = await startUpstream()
try {
  await main()
} finally {
  await upstream.close()
}

async function main(): Promise<void> {
  if (!withPerf) log('perf is not installed: the summary comes from V8 profiles (wall-clock samples)')
  log('bundling podgate as `wrangler deploy` does, not minified (names for the profile), and the CPU bench Worker')
  const podgateBundle = bundleWorker(`${OUT}/podgate-bundle`, ['--env=', '--minify=false'])
  const microBundle = bundleWorker(`${OUT}/cpu-bundle`, ['--env', 'dev', 'scripts/bench/cpu-worker/worker.ts'])
  const leastBundle = bundleWorker(`${OUT}/least-bundle`, ['--env', 'dev', '--minify=false', 'scripts/bench/least-gateway/hono.ts'])
  // A fresh workerd per scenario: V8's perf map never forgets code it freed, and a later function at
  // the same address would be named after it.
  const serve = async (which: Scenario['server']): Promise<Served> => {
    const inspectorPort = await freePort()
    let key = 'bench'
    let server: ServedWorker
    if (which === 'podgate') {
      const podgate = await startPodgate({ script: podgateBundle, runpodBaseUrl: `${upstream.url}/v2`, inspectorPort })
      key = await podgate.createKey()
      server = podgate
    } else if (which === 'floor') {
      server = await startFloor(upstream.url, { inspectorPort })
    } else if (which === 'least') {
      server = await startWorker({ script: leastBundle, label: 'least gateway (Hono, featured)', bindings: { UPSTREAM: upstream.url }, inspectorPort })
    } else {
      server = await startWorker({ script: microBundle, label: 'cpu worker', bindings: {}, quota: true, inspectorPort })
    }
    const bundle = { podgate: podgateBundle, floor: 'scripts/bench/passthrough-worker.js', least: leastBundle, micro: microBundle }[which]
    return { server, inspectorPort, bundle, key }
  }

  // The least gateway is profiled on its `/featured` route: each feature of the bench's rows at its least.
  const at = (served: Served): Target => ({ name: 'profiled', url: `${served.server.url}${served.bundle === leastBundle ? '/featured' : ''}/v1/chat/completions`, headers: { authorization: `Bearer ${served.key}` } })
  const json = (body: () => string) => (served: Served) => async () => (await timeJson(at(served), body()), 1)
  const stream = (body: (scenario: Traffic, stream: boolean) => string, traffic: Traffic = { events: 2000, first: 0, gap: 0 }) => (served: Served) => async () =>
    (await timeStream(at(served), body(traffic, true))).events
  // The 64-streams throughput row's load: 64 streams of 500 events at once, as fast as the socket takes them.
  const concurrent = (served: Served) => async () => {
    const runs = await Promise.all(Array.from({ length: 64 }, () => timeStream(at(served), chatBody('bench', { events: 500, first: 0, gap: 0 }, true))))
    return runs.reduce((sum, run) => sum + run.events, 0)
  }
  // The target row's stream: 100 events 1 ms apart, the first after 10 ms (run.ts's stream latency round).
  const paced: Traffic = { events: 100, first: 10, gap: 1 }
  const sampled = (scenario: Traffic, isStream: boolean) => chatBody('bench', scenario, isStream)
  const cacheable = (scenario: Traffic, isStream: boolean) => typicalChat('bench', scenario, isStream)
  const loop = (query: string, units: number) => (served: Served) => async () => {
    const res = await fetch(`${served.server.url}/loop?${query}`)
    if (res.status !== 200) throw new Error(`cpu worker: ${res.status} ${await res.text()}`)
    await res.arrayBuffer()
    return units
  }
  const partners = interleave ? [await startFloor(upstream.url), await startWorker({ script: leastBundle, label: 'least gateway (interleaved)', bindings: { UPSTREAM: upstream.url } })] : []
  const partnerUrls = partners.map((p, i) => `${p.url}${i === 1 ? '/featured' : ''}/v1/chat/completions`)
  const interleaved = (step: () => Promise<number>) => async () => {
    for (const url of partnerUrls) await timeJson({ name: 'partner', url, headers: { authorization: 'Bearer bench' } }, chatBody('bench', { first: firstMs }))
    return step()
  }
  const all: Scenario[] = [
    { name: 'http-json', what: 'podgate over HTTP: the typical JSON call (cacheable and new: cache lookup, miss, store), one at a time, upstream answering at once', server: 'podgate', unit: 'request', work: json(() => typicalChat('bench', { first: 0 })) },
    { name: 'http-json-bypass', what: 'podgate over HTTP: a JSON call the cache skips (temperature 0.7, no seed), one at a time', server: 'podgate', unit: 'request', work: json(() => chatBody('bench', { first: firstMs })) },
    { name: 'http-stream', what: 'podgate over HTTP: the typical streamed call (sampled: the native pipe), 2000 events written as fast as the socket takes them, one stream at a time', server: 'podgate', unit: 'event', work: stream(sampled) },
    { name: 'http-stream-cacheable', what: 'podgate over HTTP: a cacheable streamed call (new seed: the cache captures it), 2000 events, one stream at a time', server: 'podgate', unit: 'event', work: stream(cacheable) },
    { name: 'http-stream-paced', what: 'podgate over HTTP: the typical streamed call at a model\'s pace (the target row\'s: 100 events 1 ms apart), one stream at a time', server: 'podgate', unit: 'event', work: stream(sampled, paced) },
    { name: 'floor-stream-paced', what: 'the floor under the load of http-stream-paced', server: 'floor', unit: 'event', work: stream(sampled, paced) },
    { name: 'http-stream-64', what: 'podgate over HTTP: the 64-streams throughput row\'s load, 64 sampled streams of 500 events at once', server: 'podgate', unit: 'event', work: concurrent },
    { name: 'floor-stream-64', what: 'the floor under the load of http-stream-64', server: 'floor', unit: 'event', work: concurrent },
    { name: 'least-json-bypass', what: 'the least featured gateway (scripts/bench/least-gateway/hono.ts, `/featured`) under the load of http-json-bypass', server: 'least', unit: 'request', work: json(() => chatBody('bench', { first: firstMs })) },
    { name: 'least-stream-paced', what: 'the least featured gateway under the load of http-stream-paced', server: 'least', unit: 'event', work: stream(sampled, paced) },
    { name: 'least-stream-64', what: 'the least featured gateway under the load of http-stream-64', server: 'least', unit: 'event', work: concurrent },
    { name: 'floor-json', what: 'the floor (pass-through Worker) under the load of http-json', server: 'floor', unit: 'request', work: json(() => typicalChat('bench', { first: 0 })) },
    { name: 'floor-stream', what: 'the floor under the load of http-stream', server: 'floor', unit: 'event', work: stream(sampled) },
    { name: 'micro-json', what: 'CPU bench loop: the typical JSON call through createGateway(...).fetch in process (in-memory KV and cache, an upstream answering at once), 100 per step', server: 'micro', unit: 'request', work: loop('target=gateway&n=100&cache=miss', 100) },
    { name: 'micro-json-bypass', what: 'CPU bench loop: a JSON call the cache skips (temperature 0.7, no seed) through createGateway(...).fetch in process, 100 per step: the request path of the latency rows without HTTP', server: 'micro', unit: 'request', work: loop('target=gateway&n=100', 100) },
    { name: 'micro-stream-short', what: 'CPU bench loop: streamed calls of 10 events through the gateway in process (the cost of a stream\'s request, not its events), 50 per step', server: 'micro', unit: 'request', work: loop('target=gateway&n=50&stream=1&events=10', 50) },
    // 1000 content events, then the stop chunk, the usage chunk and [DONE].
    { name: 'micro-stream', what: 'CPU bench loop: streamed calls of 1000 events through the gateway in process, 5 per step', server: 'micro', unit: 'event', work: loop('target=gateway&n=5&stream=1&events=1000', 5 * 1003) },
  ]
  const scenarios = all.filter((s) => chosen.length === 0 || chosen.includes(s.name))

  rmSync(`${OUT}/summary.md`, { force: true })
  const sections: string[] = [
    `# podgate CPU profiles (${new Date().toISOString()}, ${seconds} s per pass)`,
    '',
    withPerf ? `workerd ran with the V8 flags \`${PERF_V8_FLAGS}\` (names for perf; a little slower than usual).` : 'perf was not available: V8 profiles only.',
    '',
  ]
  for (const scenario of scenarios) {
    log(`${scenario.name}: ${scenario.what}`)
    const served = await serve(scenario.server)
    try {
      sections.push(...(await profileOne(scenario, served, partners.length ? interleaved(scenario.work(served)) : scenario.work(served))))
    } finally {
      await served.server.stop()
      rmSync(`/tmp/perf-${served.server.workerdPid}.map`, { force: true })
    }
  }
  for (const partner of partners) await partner.stop()
  const text = sections.join('\n')
  writeFileSync(`${OUT}/summary.md`, text)
  console.log(text)
}

async function profileOne(scenario: Scenario, served: Served, step: () => Promise<number>): Promise<string[]> {
  const pid = served.server.workerdPid
  for (const end = performance.now() + 1000; performance.now() < end; ) await step() // warm-up: JIT, caches, pools
  let stacks: StackProfile | undefined
  let clean: Pass
  if (withPerf) {
    const data = `${OUT}/${scenario.name}.perf.data`
    const perf = startPerf(pid, data)
    await sleep(200) // perf attaches
    clean = await measure(step, pid)
    await stopPerf(perf)
    // Read now: the perf map that names the JavaScript goes when this workerd stops.
    stacks = readPerfStacks(data, classifier(served.bundle))
  } else {
    clean = await measure(step, pid)
  }
  const recording = await startProfiling(served.inspectorPort, { isolate: 'core:user:', ...(process.env.PROFILE_INTERVAL_US ? { samplingIntervalUs: Number(process.env.PROFILE_INTERVAL_US) } : {}) })
  const profiled = await measure(step, pid)
  const v8 = (await recording.stop()).get('core:user:')
  if (!v8) throw new Error('the inspector listed no core:user: isolate (the Worker under test)')
  writeFileSync(`${OUT}/${scenario.name}.cpuprofile`, JSON.stringify(v8))
  return render(scenario, clean, stacks ?? { profiled, summary: summarizeProfile(v8, bundleResolver(served.bundle)) })
}

/** Runs `step` for `seconds`: units done, and the workerd process's CPU over them. */
async function measure(step: () => Promise<number>, pid: number): Promise<Pass> {
  const before = cpuNs(pid)
  let units = 0
  for (const end = performance.now() + seconds * 1000; performance.now() < end; ) {
    units += await step()
    if (gapMs > 0) await sleep(gapMs)
  }
  return { units, cpuUs: (cpuNs(pid) - before) / 1e3 }
}

/** Owner of a JavaScript frame in the perf map: the Worker's bundle (mapped to src/), or Miniflare's Workers. */
function classifier(bundle: string): (name: string, script: string, line: number, column: number) => Owner {
  const resolve = bundleResolver(bundle)
  const file = bundle.split('/').pop()!
  return (name, script, line, column) => {
    if (script.endsWith(file)) {
      // The perf map counts lines and columns from 1, the inspector's call frames from 0.
      const source = resolve({ functionName: name, url: script, lineNumber: line - 1, columnNumber: column - 1 })
      return { owner: "the Worker's JavaScript (and the runtime work it calls)", name, ...(source ? { source } : {}) }
    }
    return { owner: "Miniflare's entry Worker and its local KV, Cache API and Durable Object simulations" }
  }
}

function render(scenario: Scenario, clean: Pass, profile: StackProfile | { profiled: Pass; summary: ProfileSummary }): string[] {
  const unit = scenario.unit
  const perUnit = clean.cpuUs / clean.units
  const us = (value: number) => `${value.toFixed(value < 10 ? 2 : 1)} µs`
  const pct = (share: number) => `${(share * 100).toFixed(1)}%`
  const lines = [`## ${scenario.name}`, '', `${scenario.what}. workerd process CPU: **${us(perUnit)} per ${unit}** (${clean.units} ${unit}s in ${seconds} s).`, '']
  const table = (title: string, rows: Array<{ name: string; share: number }>, limit = 14) => {
    lines.push(title, '', `| | share | per ${unit} |`, '|---|---|---|')
    for (const row of rows.slice(0, limit)) lines.push(`| ${row.name} | ${pct(row.share)} | ${us(row.share * perUnit)} |`)
    lines.push('')
  }
  if ('samples' in profile) {
    table(`Whose work (perf, ${profile.samples} samples, by the nearest JavaScript frame):`, profile.owners)
    table('What ran (leaf of each sample):', profile.leaves)
    if (profile.modules.length > 0) {
      table("The Worker's JavaScript by module (each sample charged to the nearest function of the bundle, with the native work it called synchronously):", profile.modules)
      lines.push('| function | where | share | per ' + unit + ' |', '|---|---|---|---|')
      for (const f of profile.functions) lines.push(`| ${f.name} | ${f.where} | ${pct(f.share)} | ${us(f.share * perUnit)} |`)
      lines.push('')
    }
    table('With no JavaScript on the stack, what ran:', profile.runtime, 8)
    return lines
  }
  const { summary: w, profiled } = profile
  lines.push(`V8 profile of the Worker's isolate (wall-clock samples; ${profiled.units} ${unit}s). Share of its busy samples:`, '', '| module | share |', '|---|---|')
  for (const m of w.modules.slice(0, 14)) lines.push(`| ${m.module} | ${pct(m.us / w.busyUs)} |`)
  lines.push('', '| function | where | share |', '|---|---|---|')
  for (const f of w.functions.slice(0, 20)) lines.push(`| ${f.name} | ${f.where} | ${pct(f.us / w.busyUs)} |`)
  lines.push('')
  return lines
}
