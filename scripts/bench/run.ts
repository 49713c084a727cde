/**
 * `npm run bench`: podgate against direct calls, the workerd floor and Portkey's gateway, on loopback,
 * in one run.
 *
 * Starts a fixed-latency upstream (`upstream.ts`), podgate's deploy bundle and the pass-through floor
 * Worker each in its own workerd (`workers.ts`), the bench-only CPU Worker (`cpu-worker/`), and Portkey
 * (`portkey.ts`, skipped with a note if it cannot be installed); measures cold starts (`cold-start.ts`),
 * then round-robin across targets so drift hits all alike, then the feature rows (`features.ts`); writes
 * BENCHMARKS.md, docs/bench.svg and `.bench/results.json`. Options (env): BENCH_QUICK=1 for a short smoke run;
 * BENCH_CPU_ONLY=N runs only the CPU microbenchmark, N batches (15 when N is 1), and prints it;
 * BENCH_COLD_ONLY=N only the cold starts, N each (11 when N is 1).
 * BENCH_HOPS_ONLY=floor,pipe,gateway (a list of stream shapes, see scripts/bench/cpu-worker; `tee-gather:1` sets a shape's `min`) prices only those and prints them, with BENCH_HOPS_REPS repetitions (default 5), BENCH_HOPS_EVENTS events per stream (default 2000), BENCH_HOPS_GAP ms between events (default 0), BENCH_HOPS_CONCURRENCY streams at once (default 1) and, with BENCH_HOPS_MEMORY=1, each one's memory growth over a 10 MB stream.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { cpus, loadavg, release, totalmem } from 'node:os'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { measureColdStart } from './cold-start.ts'
import { measureBenchFeatures, measureEmulatorFeatures } from './features.ts'
import { percentile, roundRobin, sampleRss, summarize, timeJson, timeStream } from './measure.ts'
import type { Target } from './measure.ts'
import { portkeyHeaders, startPortkey } from './portkey.ts'
import type { Portkey } from './portkey.ts'
import { cpuNs, running } from './processes.ts'
import { renderChart, renderMarkdown } from './report.ts'
import type { Results } from './report.ts'
import { startUpstream } from './upstream.ts'
import { chatBody } from './wire.ts'
import { bundleWorker, leastHonoScript, startFloor, startLeastGateways, startPodgate, startWorker } from './workers.ts'
import type { ServedWorker } from './workers.ts'

const quick = process.env.BENCH_QUICK === '1'
/** The stream shapes a full run prices, and the ones it also prices at a model's pace. */
const HOP_MODES = ['floor', 'identity', 'timer', 'relay', 'relay-nobatch', 'timer-relay', 'native-pipe', 'tee-watch', 'js-writer', 'tee-pipe', 'pipe-tee', 'tee-pipe-drain', 'tee-pipe-idle', 'tee-gather', 'tee-deflate', 'tee-tick', 'pipe', 'pipe-nofirst', 'pipe-waituntil', 'floor-wait', 'floor-wait-early', 'gateway', 'gateway-nousage']
const PACED_HOP_MODES = ['floor', 'tee-pipe-idle', 'tee-tick', 'pipe', 'gateway', 'relay-nobatch', 'relay', 'gateway-nousage']
/** The shapes of the 64-streams row's load: what the tee and the caller's IdentityTransformStream cost apart and together. */
const CONCURRENT_HOP_MODES = ['floor', 'native-pipe', 'tee-native-tick', 'tee-tick', 'pipe', 'gateway']

const log = (message: string) => console.log(`[bench] ${message}`)
const readJson = (path: string) => JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>

mkdirSync('.bench', { recursive: true })
// wrangler dev would load the developer's .dev.vars; the bench gets an empty env file instead.
writeFileSync('.bench/empty.env', '')
const stoppers: Array<() => Promise<void>> = []
const stopAll = async () => {
  for (const stop of stoppers.splice(0).reverse()) await stop().catch(() => {})
  for (const spawned of [...running]) await spawned.stop().catch(() => {})
}
// A SIGTERM to npm alone (a process manager's or IDE's "stop") reaches only this script (`exec node`): it
// stops the Workers and processes it started as Ctrl-C does.
for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143], ['SIGHUP', 129]] as const) {
  process.on(signal, () => {
    // Signal every child group at once first: the orderly stop below may not get to finish.
    for (const spawned of running) {
      if (spawned.child.pid !== undefined) {
        try {
          process.kill(-spawned.child.pid, 'SIGTERM')
        } catch {
          // already gone
        }
      }
    }
    void stopAll().then(() => process.exit(code))
  })
}

if (process.argv.includes('--report')) {
  // Re-render BENCHMARKS.md and the chart from the last run (after editing NOTES.md or report.ts).
  writeReport(JSON.parse(readFileSync('.bench/results.json', 'utf8')) as Results)
} else {
  try {
    await main()
  } finally {
    await stopAll()
  }
}

function writeReport(results: Results): void {
  mkdirSync('docs', { recursive: true })
  writeFileSync('docs/bench.svg', renderChart(results))
  const notesPath = 'scripts/bench/NOTES.md'
  writeFileSync('BENCHMARKS.md', renderMarkdown(results, existsSync(notesPath) ? readFileSync(notesPath, 'utf8') : ''))
}

async function main(): Promise<void> {
  const started = Date.now()
  const loadBefore = loadavg()[0]!

  log('bundling the Worker as `wrangler deploy` ships it (wrangler.toml sets minify)')
  const bundle = measureBundle()

  const upstream = await startUpstream()
  stoppers.push(upstream.close)
  log(`upstream on ${upstream.url}`)
  if (process.env.BENCH_COLD_ONLY) {
    const starts = Number(process.env.BENCH_COLD_ONLY) > 1 ? Number(process.env.BENCH_COLD_ONLY) : 11
    const cold = await measureColdStart({ script: bundle.script, upstreamUrl: upstream.url, starts })
    const row = (c: typeof cold.podgate) => `ready ${c.readyMs.toFixed(1)} ms, first ${c.firstMs.toFixed(1)} ms, second ${c.secondMs.toFixed(1)} ms, total ${c.totalMs.toFixed(1)} ms`
    log(`cold start, podgate: ${row(cold.podgate)}`)
    log(`cold start, floor: ${row(cold.floor)}`)
    log(`cold start: ${(cold.podgate.totalMs / cold.floor.totalMs).toFixed(2)}× the floor (median of ${starts} starts each)`)
    return
  }
  if (process.env.BENCH_CPU_ONLY) {
    const worker = await startCpuWorker()
    const cpu = await measureCpu(worker.url, worker.workerdPid, Number(process.env.BENCH_CPU_ONLY) > 1 ? Number(process.env.BENCH_CPU_ONLY) : 15)
    const ms = (row: { p50: number; p90: number }) => `p50 ${row.p50.toFixed(3)} ms, p90 ${row.p90.toFixed(3)} ms`
    const us = (row: { p50: number; p90: number }) => `p50 ${row.p50.toFixed(1)} µs, p90 ${row.p90.toFixed(1)} µs`
    log(`typical JSON call (cache miss and store): ${ms(cpu.requestMs)}`)
    log(`JSON call the cache skips: ${ms(cpu.uncacheableMs)}`)
    log(`JSON call answered from cache: ${ms(cpu.cacheHitMs)}`)
    log(`streamed call, 10 events: ${ms(cpu.streamRequestMs)}; per relayed event: ${us(cpu.eventUs)}`)
    return
  }
  if (process.env.BENCH_HOPS_ONLY) {
    const worker = await startCpuWorker()
    const hops = await measureHops(worker.url, worker.workerdPid, `${upstream.url}/v1/chat/completions`, Number(process.env.BENCH_HOPS_REPS ?? 5))
    if (process.env.BENCH_HOPS_MEMORY) {
      for (let round = 0; round < 3; round++) {
        for (const mode of process.env.BENCH_HOPS_ONLY.split(',')) {
          const sampler = sampleRss(worker.workerdPid)
          const target: Target = { name: mode, url: `${worker.url}/hop?mode=${mode}&events=10000&bytes=1000&upstream=${encodeURIComponent(`${upstream.url}/v1/chat/completions`)}`, headers: {} }
          const run = await timeStream(target, '')
          const { first, peak } = sampler.stop()
          log(`memory ${mode}: ${((peak - first) / 2 ** 20).toFixed(1)} MiB growth over ${(run.bytes / 1e6).toFixed(1)} MB (${first / 2 ** 20 | 0} MiB before)`)
        }
      }
    }
    const floorHop = hops.find((hop) => hop.mode === 'floor')
    for (const hop of hops) {
      const ratio = floorHop ? `, ${(hop.eventUs / floorHop.eventUs).toFixed(2)}× the floor's CPU, ${(hop.eventsPerSecond / floorHop.eventsPerSecond).toFixed(2)}× its rate` : ''
      log(`${hop.mode}: ${hop.eventUs.toFixed(1)} µs/event, ${hop.eventsPerSecond.toFixed(0)} events/s, first byte p50 ${hop.firstByteMs?.toFixed(2)} ms${ratio}`)
    }
    return
  }

  const starts = quick ? 3 : 11
  log(`cold start: ${starts} fresh workerd processes each for podgate and the floor, to the first answer`)
  const coldStart = await measureColdStart({ script: bundle.script, upstreamUrl: upstream.url, starts })

  log('starting podgate, the CPU bench Worker and the floor (Miniflare), and Portkey')
  const portkeyStarting = startPortkey()
  portkeyStarting.catch(() => {})
  // One at a time: each Worker's workerd process is told apart by when it appeared.
  const podgate = await startPodgate({ script: bundle.script, runpodBaseUrl: `${upstream.url}/v2` })
  stoppers.push(podgate.stop)
  const podgateKey = await podgate.createKey()
  log(`podgate on ${podgate.url} (workerd pid ${podgate.workerdPid})`)
  const cpuWorker = await startCpuWorker()
  const floor = await startFloor(upstream.url)
  stoppers.push(floor.stop)
  log(`passthrough Worker (the workerd floor) on ${floor.url} (workerd pid ${floor.workerdPid})`)
  const least = await startLeastGateways(upstream.url)
  stoppers.push(least.stop)
  log(`least gateways (no podgate code; the featured one is a target of every row) on ${least.plain.url}, ${least.hono.url}, ${least.featured.url}`)
  const [portkeyResult] = await Promise.allSettled([portkeyStarting])
  let portkey: Portkey | undefined
  let portkeyNote: string | undefined
  if (portkeyResult.status === 'fulfilled') {
    portkey = portkeyResult.value
  } else {
    portkeyNote = `Portkey could not be installed or started: ${String((portkeyResult.reason as Error)?.message ?? portkeyResult.reason).split('\n')[0]}`
    log(portkeyNote)
  }

  const targets: Target[] = [
    { name: 'direct', url: `${upstream.url}/v1/chat/completions`, headers: { authorization: 'Bearer bench' } },
    { name: 'workerd', url: `${floor.url}/v1/chat/completions`, headers: { authorization: 'Bearer bench' }, pid: floor.workerdPid },
    { name: 'podgate', url: `${podgate.url}/v1/chat/completions`, headers: { authorization: `Bearer ${podgateKey}` }, pid: podgate.workerdPid },
    // The bound beside podgate in its own rows: the least Hono gateway with each feature of these rows at its least.
    { name: 'least', url: `${least.featured.url}/featured/v1/chat/completions`, headers: { authorization: 'Bearer bench' }, pid: least.featured.workerdPid },
  ]
  if (portkey) {
    targets.push({ name: 'portkey', url: `${portkey.url}/v1/chat/completions`, headers: portkeyHeaders(upstream.url), pid: portkey.process.child.pid })
  }
  const model = 'bench'

  // Warm every path (isolate compile, key cache, connection pools) before anything counts.
  for (let i = 0; i < 20; i++) {
    for (const t of targets) {
      await timeJson(t, chatBody(model))
      await timeStream(t, chatBody(model, { events: 5, first: 0, gap: 0 }, true))
    }
  }
  const stages = await podgateStages(targets.find((t) => t.name === 'podgate')!)

  // Every call below is the typical chat call: sampled (temperature 0.7, no seed), as chat traffic is, so podgate's
  // cache stage runs and lets it through without a lookup. Deterministic calls (lookup, miss, store) have their rows in features.ts.
  const jsonN = quick ? 60 : 400
  log(`JSON latency: ${jsonN} calls per target, round-robin`)
  const json = await roundRobin(targets, jsonN, (t) => timeJson(t, chatBody(model, { first: 10 })))

  const streamN = quick ? 15 : 60
  log(`stream latency: ${streamN} streams of 100 events per target, round-robin`)
  const stream = await roundRobin(targets, streamN, (t) => timeStream(t, chatBody(model, { events: 100, first: 10, gap: 1 }, true)))
  for (const t of targets) {
    const wrong = stream.values[t.name]!.find((s) => s.events < 100)
    if (wrong) throw new Error(`${t.name}: a 100-event stream arrived with ${wrong.events} events`)
  }

  const throughputReps = quick ? 1 : 5
  log(`streaming throughput: 1 and 64 concurrent streams, as fast as the upstream writes, ${throughputReps * 3} and ${throughputReps} repetitions`)
  const throughput = await measureThroughput(targets, throughputReps)

  log('memory: peak resident memory while relaying a 1 MB and then a 10 MB stream, each workerd target in fresh processes')
  const memory = await measureMemory(targets.find((t) => t.name === 'portkey'), async () => {
    const fresh = await startPodgate({ script: bundle.script, runpodBaseUrl: `${upstream.url}/v2`, label: 'podgate (memory)' })
    return { served: fresh, key: await fresh.createKey() }
  }, upstream.url)

  log('CPU inside workerd: request-path microbenchmark')
  const cpu = await measureCpu(cpuWorker.url, cpuWorker.workerdPid, quick ? 5 : 15)
  log('CPU inside workerd: stream shapes over HTTP')
  const hops = await measureHops(cpuWorker.url, cpuWorker.workerdPid, `${upstream.url}/v1/chat/completions`, quick ? 2 : 4)
  log('CPU inside workerd: stream shapes at one event per ms')
  const pacedHops = await measureHops(cpuWorker.url, cpuWorker.workerdPid, `${upstream.url}/v1/chat/completions`, quick ? 2 : 5, { modes: PACED_HOP_MODES, events: 100, gap: 1, concurrency: 1 })
  log('CPU inside workerd: stream shapes, 64 streams at once')
  const concurrentHops = await measureHops(cpuWorker.url, cpuWorker.workerdPid, `${upstream.url}/v1/chat/completions`, quick ? 2 : 4, { modes: CONCURRENT_HOP_MODES, events: 500, gap: 0, concurrency: 64 })

  log('feature rows: strict quota store, cache hits, against the floor')
  const benchFeatures = await measureBenchFeatures({ podgate, floor, least, key: podgateKey, calls: quick ? 40 : 200, streams: quick ? 10 : 40 })

  // Stop this run's servers before the emulator rows and the cache bench, which start their own.
  await stopAll()
  log('feature rows over the Runpod emulator: tools and logprobs, the native /run + /stream path')
  const emulatorFeatures = await measureEmulatorFeatures({ script: bundle.script, calls: quick ? 40 : 200, streams: quick ? 10 : 40, reps: quick ? 2 : 5, tokens: 2000 })
  const cacheBench = await runCacheBenchIfPresent()

  const results: Results = {
    date: new Date().toISOString(),
    durationS: 0,
    quick,
    machine: { cores: cpus().length, cpu: cpus()[0]?.model.trim() ?? 'unknown', memoryGiB: totalmem() / 2 ** 30, kernel: release(), loadBefore },
    versions: {
      node: process.version,
      wrangler: String(readJson('node_modules/wrangler/package.json').version),
      workerd: String(readJson('node_modules/workerd/package.json').version),
      podgate: String(readJson('package.json').version),
      portkey: portkey?.version,
    },
    portkeyNote,
    features: { ...detectFeatures(cpu.stages), http: stages },
    coldStart,
    featureRows: {
      ...benchFeatures,
      json: { ...benchFeatures.json, ...prefixed('emulator: ', emulatorFeatures.json) },
      first: { ...benchFeatures.first, ...prefixed('emulator: ', emulatorFeatures.first) },
      native: emulatorFeatures.native,
    },
    json: summarize(json.values, (v) => v),
    jsonCpu: json.cpuPerCall,
    streamFirst: summarize(stream.values, (v) => v.firstByte),
    streamLast: summarize(stream.values, (v) => v.lastByte),
    streamCpu: stream.cpuPerCall,
    throughput,
    memory,
    cpu,
    hops,
    pacedHops,
    concurrentHops,
    cacheBench,
    bundle: { raw: bundle.raw, gzip: bundle.gzip, minify: bundle.minify, inputs: bundle.inputs, portkeyGzip: portkeyBundleGzip() },
  }
  results.durationS = (Date.now() - started) / 1000
  writeFileSync('.bench/results.json', JSON.stringify(results, null, 2))
  writeReport(results)
  log(`done in ${results.durationS.toFixed(0)} s: BENCHMARKS.md, docs/bench.svg, .bench/results.json`)
}

/**
 * Resident memory growth while one stream of 1 MB and then one of 10 MB (1 KB events) are relayed and
 * read, for each workerd target in a process of its own started for it: in a process that served the
 * rounds before, a stream that buffered the whole answer could reuse pages those rounds had grown and
 * read as flat. Two fresh processes per target; the smaller growth of each size is kept, so a one-off
 * heap expansion in one process is noise while an answer held in memory shows in both. Portkey (a Node
 * process the run cannot cheaply restart) is read in its running process, twice per size, the smaller kept.
 */
async function measureMemory(portkey: Target | undefined, freshPodgate: () => Promise<{ served: ServedWorker; key: string }>, upstreamUrl: string): Promise<Results['memory']> {
  const memory: Results['memory'] = {}
  const body = (size: number) => chatBody('bench', { events: size * 1000, bytes: 1000, first: 0, gap: 0 }, true)
  const measure = async (t: Target & { pid: number }) => {
    // A few small streams first: the isolate's first requests (compiling, KV) are not the stream's memory.
    for (let i = 0; i < 5; i++) await timeStream(t, body(0.01))
    for (const size of [1, 10]) {
      const sampler = sampleRss(t.pid)
      const run = await timeStream(t, body(size))
      const { first, peak } = sampler.stop()
      if (run.bytes < size * 1_000_000) throw new Error(`${t.name}: the ${size} MB stream arrived short (${run.bytes} bytes)`)
      const entry = (memory[t.name] ??= {})
      const key = size === 1 ? 'oneMb' : 'tenMb'
      const previous = entry[key]
      if (!previous || peak - first < previous.peak - previous.before) entry[key] = { before: first, peak, bytes: run.bytes }
    }
  }
  for (let round = 0; round < 2; round++) {
    const starts: Array<() => Promise<{ target: Target & { pid: number }; stop: () => Promise<void> }>> = [
      async () => {
        const floor = await startFloor(upstreamUrl, { label: 'floor (memory)' })
        return { target: { name: 'workerd', url: `${floor.url}/v1/chat/completions`, headers: { authorization: 'Bearer bench' }, pid: floor.workerdPid }, stop: floor.stop }
      },
      async () => {
        const { served, key } = await freshPodgate()
        return { target: { name: 'podgate', url: `${served.url}/v1/chat/completions`, headers: { authorization: `Bearer ${key}` }, pid: served.workerdPid }, stop: served.stop }
      },
      async () => {
        const least = await startWorker({ script: leastHonoScript(), label: 'least gateway (memory)', bindings: { UPSTREAM: upstreamUrl } })
        return { target: { name: 'least', url: `${least.url}/featured/v1/chat/completions`, headers: { authorization: 'Bearer bench' }, pid: least.workerdPid }, stop: least.stop }
      },
    ]
    for (const start of starts) {
      const { target, stop } = await start()
      try {
        await measure(target)
      } finally {
        await stop()
      }
    }
    if (portkey?.pid !== undefined) await measure({ ...portkey, pid: portkey.pid })
  }
  return memory
}

/**
 * Events per second the client receives, upstream writing as fast as the socket takes it: 1 stream of
 * 2000 events and 64 concurrent streams of 500, each target in turn, median over the repetitions.
 */
async function measureThroughput(targets: Target[], reps: number): Promise<Results['throughput']> {
  const rates: Record<string, { one: number[]; many: number[] }> = {}
  // One stream takes tens of ms, so its median needs more samples than 64 streams' (each a batch of 64):
  // three single-stream rounds per 64-stream round, every target once in each.
  for (let rep = 0; rep < reps * 3; rep++) {
    for (const concurrency of rep % 3 === 0 ? [1, 64] : [1]) {
      const events = concurrency === 1 ? 2000 : 500
      for (const t of targets) {
        const t0 = performance.now()
        const runs = await Promise.all(Array.from({ length: concurrency }, () => timeStream(t, chatBody('bench', { events, first: 0, gap: 0 }, true))))
        const seconds = (performance.now() - t0) / 1000
        const received = runs.reduce((sum, r) => sum + r.events, 0)
        const entry = (rates[t.name] ??= { one: [], many: [] })
        entry[concurrency === 1 ? 'one' : 'many'].push(received / seconds)
      }
    }
  }
  const throughput: Results['throughput'] = {}
  for (const [name, { one, many }] of Object.entries(rates)) throughput[name] = { one: percentile(one, 50), many: percentile(many, 50) }
  return throughput
}

/** The stages podgate's typical call passed through, from its answer's headers: the report says what was on. */
async function podgateStages(target: Target): Promise<Results['features']['http']> {
  const res = await fetch(target.url, { method: 'POST', headers: { ...target.headers, 'content-type': 'application/json' }, body: chatBody('bench', { first: 0 }) })
  await res.arrayBuffer()
  const cache = res.headers.get('x-podgate-cache') ?? 'none'
  const quota = res.headers.get('ratelimit-policy') ?? 'none'
  if (res.status !== 200 || cache !== 'BYPASS' || quota === 'none') throw new Error(`podgate's typical call should pass the cache stage (BYPASS: sampled) and count quota; it answered ${res.status}, cache ${cache}, quota ${quota}`)
  return { cache, quota }
}

function prefixed<T>(prefix: string, table: Record<string, T>): Record<string, T> {
  return Object.fromEntries(Object.entries(table).map(([name, value]) => [`${prefix}${name}`, value]))
}

async function startCpuWorker() {
  const script = bundleWorker('.bench/cpu-bundle', ['--env', 'dev', 'scripts/bench/cpu-worker/worker.ts'])
  const server = await startWorker({ script, label: 'cpu worker', bindings: {}, quota: true })
  stoppers.push(server.stop)
  log(`CPU bench Worker on ${server.url} (workerd pid ${server.workerdPid})`)
  return server
}

/**
 * CPU per request and per relayed event, from workerd's own CPU time around whole loops: each
 * batch runs the gateway loop and the same loop against the fake upstream alone (or nothing, for
 * cache hits, which never reach it), and the difference is podgate's. Per event: the slope between
 * 10-event and 1000-event streams.
 */
async function measureCpu(url: string, pid: number, batches: number): Promise<Results['cpu']> {
  const stages = { cacheMiss: '', cacheHit: '', quota: '' }
  const run = async (query: string) => {
    const before = cpuNs(pid)
    const res = await fetch(`${url}/loop?${query}`)
    if (res.status !== 200) throw new Error(`cpu worker: ${query} answered ${res.status}: ${await res.text()}`)
    const body = (await res.json()) as { status: number; clockMs: number; cacheStatus: string | null; quotaPolicy: string | null }
    const ns = cpuNs(pid) - before
    if (body.status !== 200) throw new Error(`cpu worker: ${query}: the gateway answered ${body.status}`)
    if (query.includes('target=gateway&') && query.includes('cache=miss')) stages.cacheMiss = body.cacheStatus ?? 'none'
    if (query.includes('target=gateway&') && query.includes('cache=hit')) stages.cacheHit = body.cacheStatus ?? 'none'
    if (query.includes('target=gateway&')) stages.quota = body.quotaPolicy ?? 'none'
    return { ns, clockMs: body.clockMs }
  }
  const jsonN = 200
  const shortN = 50
  const longN = 10
  const loop = (target: string, n: number, rest: string) => run(`target=${target}&n=${n}&${rest}`)
  for (const target of ['gateway', 'relay', 'identity', 'upstream', 'log', 'noop']) {
    await loop(target, 50, 'cache=miss')
    await loop(target, 50, 'cache=hit')
    await loop(target, 20, 'stream=1&events=1000')
  }
  const miss: number[] = []
  const off: number[] = []
  const hit: number[] = []
  const streamShort: number[] = []
  const perEvent: number[] = []
  const relayEvent: number[] = []
  const hopEvent: number[] = []
  const logLines: number[] = []
  let clock = { cpuMs: 0, clockMs: 0 }
  for (let b = 0; b < batches; b++) {
    const upJson = await loop('upstream', jsonN, 'cache=miss')
    const gwMiss = await loop('gateway', jsonN, 'cache=miss')
    const gwOff = await loop('gateway', jsonN, 'cache=off')
    const noop = await loop('noop', jsonN, 'cache=hit')
    const gwHit = await loop('gateway', jsonN, 'cache=hit')
    const logLine = await loop('log', jsonN, 'cache=hit')
    const upShort = await loop('upstream', shortN, 'stream=1&events=10')
    const gwShort = await loop('gateway', shortN, 'stream=1&events=10')
    const upLong = await loop('upstream', longN, 'stream=1&events=1000')
    const gwLong = await loop('gateway', longN, 'stream=1&events=1000')
    const relayShort = await loop('relay', shortN, 'stream=1&events=10')
    const relayLong = await loop('relay', longN, 'stream=1&events=1000')
    const identityShort = await loop('identity', shortN, 'stream=1&events=10')
    const identityLong = await loop('identity', longN, 'stream=1&events=1000')
    miss.push((gwMiss.ns - upJson.ns) / jsonN / 1e6)
    off.push((gwOff.ns - upJson.ns) / jsonN / 1e6)
    hit.push((gwHit.ns - noop.ns) / jsonN / 1e6)
    logLines.push((logLine.ns - noop.ns) / jsonN / 1e3)
    const short = (gwShort.ns - upShort.ns) / shortN
    const long = (gwLong.ns - upLong.ns) / longN
    streamShort.push(short / 1e6)
    perEvent.push((long - short) / 990 / 1e3)
    relayEvent.push(((relayLong.ns - upLong.ns) / longN - (relayShort.ns - upShort.ns) / shortN) / 990 / 1e3)
    hopEvent.push(((identityLong.ns - upLong.ns) / longN - (identityShort.ns - upShort.ns) / shortN) / 990 / 1e3)
    clock = { cpuMs: gwMiss.ns / 1e6, clockMs: gwMiss.clockMs }
  }
  const p = (values: number[]) => ({ p50: percentile(values, 50), p90: percentile(values, 90) })
  return { batches, jsonPerBatch: jsonN, requestMs: p(miss), uncacheableMs: p(off), cacheHitMs: p(hit), streamRequestMs: p(streamShort), eventUs: p(perEvent), relayEventUs: p(relayEvent), hopEventUs: p(hopEvent), logLineUs: p(logLines), clock, stages }
}

/**
 * The answer-cache bench (`scripts/bench/cache.ts`, owned by the cache work) when the tree has it: its
 * default workload, rendered as it renders itself. Loaded by path so this runner works without it.
 */
async function runCacheBenchIfPresent(): Promise<string | undefined> {
  const path = './cache.ts'
  if (!existsSync(join('scripts/bench', path))) return undefined
  log('answer cache: scripts/bench/cache.ts')
  try {
    const cache = (await import(path)) as {
      runCacheBench(options: Record<string, number>): Promise<unknown>
      renderCacheBench(result: unknown): string
    }
    const result = await cache.runCacheBench({ requests: quick ? 100 : 300, prompts: 100, zipfS: 1.1, concurrency: 8, tokenDelayMs: 2 })
    return cache.renderCacheBench(result)
  } catch (error) {
    return `The cache bench failed: ${String((error as Error)?.message ?? error).split('\n')[0]}`
  }
}

interface HopRun {
  modes: string[]
  /** The stream's length; a short one prices the first byte. */
  events: number
  /** ms between the upstream's events (0: as fast as the socket takes them). */
  gap: number
  /** That many streams of the shape at once; rates and CPU are their sums. */
  concurrency: number
}

/** A run as BENCH_HOPS_ONLY, BENCH_HOPS_EVENTS (2000), BENCH_HOPS_GAP (0) and BENCH_HOPS_CONCURRENCY (1) say. */
function hopRunFromEnv(): HopRun {
  return {
    modes: process.env.BENCH_HOPS_ONLY ? process.env.BENCH_HOPS_ONLY.split(',') : HOP_MODES,
    events: Number(process.env.BENCH_HOPS_EVENTS ?? 2000),
    gap: Number(process.env.BENCH_HOPS_GAP ?? 0),
    concurrency: Number(process.env.BENCH_HOPS_CONCURRENCY ?? 1),
  }
}

/**
 * workerd CPU per relayed event over real HTTP for each stream shape (see `hop` in the CPU Worker),
 * round-robin, the median over the repetitions (one warm-up round first).
 */
async function measureHops(url: string, pid: number, upstreamUrl: string, reps: number, run: HopRun = hopRunFromEnv()): Promise<Results['hops']> {
  const { modes, events, gap, concurrency } = run
  const runs = new Map<string, Array<{ eventUs: number; eventsPerSecond: number; firstByte: number }>>()
  for (let rep = 0; rep <= reps; rep++) {
    for (const mode of modes) {
      const before = cpuNs(pid)
      const started = performance.now()
      const target: Target = { name: 'podgate', url: `${url}/hop?mode=${mode.replace(':', '&min=')}&events=${events}&gap=${gap}&upstream=${encodeURIComponent(upstreamUrl)}`, headers: {} }
      const all = await Promise.all(Array.from({ length: concurrency }, () => timeStream(target, '')))
      const ns = cpuNs(pid) - before
      const seconds = (performance.now() - started) / 1000
      const received = all.reduce((sum, run) => sum + run.events, 0)
      if (received < events * concurrency) throw new Error(`stream shape ${mode}: ${received} of ${events * concurrency} events arrived`)
      if (rep === 0) continue // warm-up
      const list = runs.get(mode) ?? []
      list.push({ eventUs: ns / received / 1e3, eventsPerSecond: received / seconds, firstByte: percentile(all.map((run) => run.firstByte), 50) })
      runs.set(mode, list)
    }
  }
  return modes.map((mode) => {
    const list = runs.get(mode)!
    return {
      mode,
      eventUs: percentile(list.map((r) => r.eventUs), 50),
      eventsPerSecond: percentile(list.map((r) => r.eventsPerSecond), 50),
      firstByteMs: percentile(list.map((r) => r.firstByte), 50),
    }
  })
}

function measureBundle(): Results['bundle'] & { script: string } {
  const outdir = '.bench/bundle'
  const script = bundleWorker(outdir, ['--env=', '--metafile', join(outdir, 'bundle-meta.json')])
  let raw = 0
  let gzip = 0
  for (const file of readdirSync(outdir)) {
    if (!/\.(m?js|wasm)$/.test(file)) continue
    const path = join(outdir, file)
    raw += statSync(path).size
    gzip += gzipSync(readFileSync(path), { level: 9 }).byteLength
  }
  // The top-level `minify` (before the first table) is what a production `wrangler deploy` uses.
  const topLevel = readFileSync('wrangler.toml', 'utf8').split(/^\[/m)[0]!
  const minify = /^minify\s*=\s*true\s*$/m.test(topLevel)
  return { raw, gzip, minify, script, inputs: largestInputs(join(outdir, 'bundle-meta.json')) }
}

/** The bundle's biggest contributors by package, from esbuild's metafile (bytes in the minified output). */
function largestInputs(metafile: string): Array<{ name: string; bytes: number }> {
  if (!existsSync(metafile)) return []
  const meta = JSON.parse(readFileSync(metafile, 'utf8')) as { outputs: Record<string, { inputs: Record<string, { bytesInOutput: number }> }> }
  const byPackage = new Map<string, number>()
  for (const output of Object.values(meta.outputs)) {
    for (const [path, input] of Object.entries(output.inputs)) {
      const match = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path)
      const name = match ? match[1]! : path.replace(/^(src\/[^/]+|workers)\/.*$/, '$1')
      byPackage.set(name, (byPackage.get(name) ?? 0) + input.bytesInOutput)
    }
  }
  return [...byPackage].map(([name, bytes]) => ({ name, bytes })).sort((a, b) => b.bytes - a.bytes).slice(0, 12)
}

/** Portkey's Node build, gzipped the same way, for context (it is a Node server, not a Worker). */
function portkeyBundleGzip(): number | undefined {
  const build = '.bench/portkey/node_modules/@portkey-ai/gateway/build/start-server.js'
  return existsSync(build) ? gzipSync(readFileSync(build), { level: 9 }).byteLength : undefined
}

/** Which request-path stages ran in the CPU bench, from the headers its last responses carried. */
function detectFeatures(stages: Results['cpu']['stages']): Results['features'] {
  return {
    auth: true,
    quota: stages.quota !== 'none' && stages.quota !== '',
    cache: stages.cacheMiss !== 'none' && stages.cacheMiss !== '',
  }
}
