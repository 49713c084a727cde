/**
 * Turns one bench run into BENCHMARKS.md and an SVG chart. Everything is relative to the same run's
 * direct calls; absolute numbers are context. The hand-written notes in `NOTES.md` (the analysis of
 * what a run showed) are appended as they are.
 */

export interface Percentiles {
  p50: number
  p99: number
  n: number
}

export interface MemoryRun {
  before: number
  peak: number
  bytes: number
}

export interface Results {
  date: string
  durationS: number
  quick: boolean
  machine: { cores: number; cpu: string; memoryGiB: number; kernel: string; loadBefore: number }
  versions: { node: string; wrangler: string; workerd: string; podgate: string; portkey: string | undefined }
  portkeyNote: string | undefined
  features: { auth: boolean; quota: boolean; cache: boolean }
  json: Record<string, Percentiles>
  /** Process CPU ms per call over HTTP, whole process (runtime, HTTP, outbound fetch included). */
  jsonCpu: Record<string, number>
  streamFirst: Record<string, Percentiles>
  streamLast: Record<string, Percentiles>
  streamCpu: Record<string, number>
  throughput: Record<string, { one?: number; many?: number }>
  memory: Record<string, { oneMb?: MemoryRun; tenMb?: MemoryRun }>
  cpu: {
    batches: number
    jsonPerBatch: number
    /** The typical call: cacheable and new, so the cache looks up, misses, and stores. */
    requestMs: { p50: number; p90: number }
    uncacheableMs: { p50: number; p90: number }
    cacheHitMs: { p50: number; p90: number }
    streamRequestMs: { p50: number; p90: number }
    eventUs: { p50: number; p90: number }
    /** The SSE relay alone (no gateway around it), per event. */
    relayEventUs: { p50: number; p90: number }
    /** An empty TransformStream piped the same way, per event: one stream hop in workerd. */
    hopEventUs: { p50: number; p90: number }
    clock: { cpuMs: number; clockMs: number }
    /** The last responses' `x-podgate-cache` (miss run, hit run) and `ratelimit-policy` headers. */
    stages: { cacheMiss: string; cacheHit: string; quota: string }
  }
  /** workerd CPU per event over real HTTP, per stream shape (`hop` in the CPU Worker). */
  hops: Array<{ mode: string; eventUs: number; eventsPerSecond: number }>
  /** scripts/bench/cache.ts's own rendering of its run, when the tree has it. */
  cacheBench?: string | undefined
  bundle: { raw: number; gzip: number; inputs: Array<{ name: string; bytes: number }>; portkeyGzip?: number | undefined }
}

const GATEWAYS = ['podgate', 'portkey'] as const
/** Serving processes with a row in the CPU and memory tables: the pass-through Worker and the gateways. */
const SERVERS = ['workerd', ...GATEWAYS] as const
const ms = (value: number | undefined) => (value === undefined || Number.isNaN(value) ? 'n/a' : `${value.toFixed(2)} ms`)
const kib = (bytes: number | undefined) => (bytes === undefined ? 'n/a' : `${(bytes / 1024).toFixed(1)} KiB`)
const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`
const ratio = (value: number | undefined, base: number | undefined) => (value === undefined || !base ? 'n/a' : `${(value / base).toFixed(3)}×`)

function added(table: Record<string, Percentiles>, name: string, p: 'p50' | 'p99'): number | undefined {
  const target = table[name]
  const direct = table.direct
  return target && direct ? target[p] - direct[p] : undefined
}

/** Memory counts as flat when the 10 MB stream's peak grows at most 4 MiB past the 1 MB stream's. */
export const FLAT_SLACK = 4 * 2 ** 20

function memoryGrowth(run: { oneMb?: MemoryRun; tenMb?: MemoryRun } | undefined) {
  if (!run?.oneMb || !run.tenMb) return undefined
  return { one: run.oneMb.peak - run.oneMb.before, ten: run.tenMb.peak - run.tenMb.before }
}

interface Check {
  name: string
  measured: string
  limit: string
  met: boolean | undefined
}

export function checks(r: Results): Check[] {
  const jsonAdded = added(r.json, 'podgate', 'p50')
  const firstAdded = added(r.streamFirst, 'podgate', 'p50')
  const pkJson = added(r.json, 'portkey', 'p50')
  const pkFirst = added(r.streamFirst, 'portkey', 'p50')
  const growth = memoryGrowth(r.memory.podgate)
  return [
    { name: 'Added p50 latency, JSON', measured: ms(jsonAdded), limit: '≤ 1 ms', met: jsonAdded === undefined ? undefined : jsonAdded <= 1 },
    { name: 'Added p50 time to first byte, stream', measured: ms(firstAdded), limit: '≤ 2 ms', met: firstAdded === undefined ? undefined : firstAdded <= 2 },
    {
      name: 'Added p50 latency vs Portkey, JSON',
      measured: pkJson === undefined ? 'Portkey not run' : `${ms(jsonAdded)} vs ${ms(pkJson)}`,
      limit: '≤ ½ of Portkey',
      met: pkJson === undefined || jsonAdded === undefined ? undefined : jsonAdded <= Math.max(pkJson, 0) / 2,
    },
    {
      name: 'Added p50 first byte vs Portkey, stream',
      measured: pkFirst === undefined ? 'Portkey not run' : `${ms(firstAdded)} vs ${ms(pkFirst)}`,
      limit: '≤ ½ of Portkey',
      met: pkFirst === undefined || firstAdded === undefined ? undefined : firstAdded <= Math.max(pkFirst, 0) / 2,
    },
    { name: 'CPU per typical request (p50)', measured: ms(r.cpu.requestMs.p50), limit: '≤ 1 ms', met: r.cpu.requestMs.p50 <= 1 },
    { name: 'CPU per relayed event (p50)', measured: `${r.cpu.eventUs.p50.toFixed(1)} µs`, limit: '≤ 20 µs', met: r.cpu.eventUs.p50 <= 20 },
    { name: 'Worker bundle, minified + gzipped', measured: kib(r.bundle.gzip), limit: '≤ 64 KiB', met: r.bundle.gzip <= 64 * 1024 },
    {
      name: 'Memory flat while streaming (10 MB vs 1 MB peak growth)',
      measured: growth ? `${mib(growth.ten)} vs ${mib(growth.one)}` : 'n/a',
      limit: `10 MB ≤ 1 MB + ${mib(FLAT_SLACK)}`,
      met: growth ? growth.ten <= growth.one + FLAT_SLACK : undefined,
    },
  ]
}

export function renderMarkdown(r: Results, notes: string): string {
  const names = ['direct', ...SERVERS].filter((n) => r.json[n])
  const label = (n: string) => (n === 'workerd' ? 'workerd floor (pass-through Worker)' : n)
  const verdict = (met: boolean | undefined) => (met === undefined ? 'not measured' : met ? '**met**' : '**missed**')
  const lines: string[] = []
  lines.push('# Benchmarks', '')
  lines.push(`<!-- Generated by \`npm run bench\` (scripts/bench/run.ts). Edit scripts/bench/NOTES.md, not this file. -->`, '')
  lines.push(
    `Run ${r.date}${r.quick ? ' (BENCH_QUICK: short smoke run, numbers are rough)' : ''}, ${r.durationS.toFixed(0)} s. ` +
      `Machine: ${r.machine.cores} cores, ${r.machine.cpu}, ${r.machine.memoryGiB.toFixed(1)} GiB, Linux ${r.machine.kernel}; ` +
      `1-minute load average before the run ${r.machine.loadBefore.toFixed(2)}.`,
    '',
  )
  lines.push(
    `Versions: podgate ${r.versions.podgate}, wrangler ${r.versions.wrangler}, workerd ${r.versions.workerd}, ` +
      `node ${r.versions.node} (runner, upstream and Portkey), Portkey gateway ${r.versions.portkey ?? 'not run'}.`,
    '',
  )
  if (r.portkeyNote) lines.push(`> ${r.portkeyNote}`, '')
  lines.push(
    `Request-path stages in the CPU bench: API-key auth (KV record behind the in-isolate key cache)` +
      `; quota: ${r.features.quota ? `on (the bench key's policy, 1,000,000 requests/min and 10⁹ tokens/day, never refuses; \`ratelimit-policy: ${r.cpu.stages.quota}\`)` : 'off (no quota stage answered in this tree)'}` +
      `; cache: ${r.features.cache ? `on (typical call: \`x-podgate-cache: ${r.cpu.stages.cacheMiss}\`; repeated call: \`${r.cpu.stages.cacheHit}\`)` : 'off (no cache stage answered in this tree)'}. ` +
      'The latency runs over HTTP send a request the cache skips (temperature 0.7, no seed), because Portkey has no cache to compare.',
    '',
  )
  lines.push('![podgate and Portkey against direct calls](docs/bench.svg)', '')

  lines.push('## Targets', '', '| Target | Measured | Limit | Result |', '|---|---|---|---|')
  for (const c of checks(r)) lines.push(`| ${c.name} | ${c.measured} | ${c.limit} | ${verdict(c.met)} |`)
  lines.push('')
  if (r.json.workerd) {
    const over = (table: Record<string, Percentiles>) => (table.podgate && table.workerd ? table.podgate.p50 - table.workerd.p50 : undefined)
    lines.push(
      `For scale, a Worker that does nothing but forward (the workerd floor) adds ${ms(added(r.json, 'workerd', 'p50'))} p50 to a JSON call and ` +
        `${ms(added(r.streamFirst, 'workerd', 'p50'))} to a stream's first byte on this machine; podgate adds ${ms(over(r.json))} and ${ms(over(r.streamFirst))} on top of that floor.`,
      '',
    )
  }

  lines.push('## Latency, non-streaming chat call', '')
  lines.push('Upstream answers after a fixed 10 ms. Sequential calls, round-robin across targets.', '')
  lines.push('| Target | p50 | p99 | added p50 | added p99 | p50 vs direct |', '|---|---|---|---|---|---|')
  for (const n of names) {
    const t = r.json[n]!
    lines.push(`| ${label(n)} | ${ms(t.p50)} | ${ms(t.p99)} | ${n === 'direct' ? '—' : ms(added(r.json, n, 'p50'))} | ${n === 'direct' ? '—' : ms(added(r.json, n, 'p99'))} | ${ratio(t.p50, r.json.direct?.p50)} |`)
  }
  lines.push('')

  lines.push('## Streamed chat call, 100 events', '')
  lines.push('Upstream sends its head at once, the first event after 10 ms, then one event per ~1 ms. First byte = first body bytes carrying an event.', '')
  lines.push('| Target | first byte p50 | first byte p99 | added first byte p50 | last byte p50 | last byte p99 | added last byte p50 |', '|---|---|---|---|---|---|---|')
  for (const n of names) {
    const f = r.streamFirst[n]!
    const l = r.streamLast[n]!
    const d = n === 'direct'
    lines.push(`| ${label(n)} | ${ms(f.p50)} | ${ms(f.p99)} | ${d ? '—' : ms(added(r.streamFirst, n, 'p50'))} | ${ms(l.p50)} | ${ms(l.p99)} | ${d ? '—' : ms(added(r.streamLast, n, 'p50'))} |`)
  }
  lines.push('')

  lines.push('## Streaming throughput', '')
  lines.push('Events per second received by the client, upstream writing as fast as the socket takes it (best of the repetitions). 1 stream of 2000 events; 64 concurrent streams of 500 events.', '')
  lines.push('| Target | 1 stream | vs direct | 64 streams | vs direct |', '|---|---|---|---|---|')
  for (const n of names) {
    const t = r.throughput[n] ?? {}
    const d = r.throughput.direct ?? {}
    lines.push(`| ${label(n)} | ${t.one?.toFixed(0) ?? 'n/a'} ev/s | ${ratio(t.one, d.one)} | ${t.many?.toFixed(0) ?? 'n/a'} ev/s | ${ratio(t.many, d.many)} |`)
  }
  lines.push('')

  lines.push('## CPU', '')
  lines.push(
    `Request-path microbenchmark in workerd (scripts/bench/cpu-worker): \`createGateway(...).fetch\` in a loop with the real ExecutionContext, ` +
      `against an in-process upstream that answers at once, with KV and the Cache API as in-memory stand-ins (in production their operations are I/O, not the Worker's CPU; locally miniflare would simulate them inside workerd); workerd's CPU time (all threads, /proc schedstat) around each loop, minus the same loop against the upstream alone. ` +
      `${r.cpu.batches} batches of ${r.cpu.jsonPerBatch} requests; percentiles are over batch means.`,
    '',
  )
  lines.push('| Measure | p50 | p90 |', '|---|---|---|')
  lines.push(`| **Typical chat call** (JSON, cacheable, new): auth, quota, cache lookup (miss), upstream call, cache store | ${ms(r.cpu.requestMs.p50)} | ${ms(r.cpu.requestMs.p90)} |`)
  lines.push(`| Chat call the cache skips (temperature 0.7, no seed): auth, quota, upstream call | ${ms(r.cpu.uncacheableMs.p50)} | ${ms(r.cpu.uncacheableMs.p90)} |`)
  lines.push(`| Chat call answered from cache (hit) | ${ms(r.cpu.cacheHitMs.p50)} | ${ms(r.cpu.cacheHitMs.p90)} |`)
  lines.push(`| Streamed chat call with 10 events | ${ms(r.cpu.streamRequestMs.p50)} | ${ms(r.cpu.streamRequestMs.p90)} |`)
  lines.push(`| Per relayed stream event (slope 10 → 1000 events) | ${r.cpu.eventUs.p50.toFixed(1)} µs | ${r.cpu.eventUs.p90.toFixed(1)} µs |`)
  lines.push(`| For scale: one empty TransformStream hop in workerd, piped the same way | ${r.cpu.hopEventUs.p50.toFixed(1)} µs | ${r.cpu.hopEventUs.p90.toFixed(1)} µs |`)
  lines.push(`| The SSE relay alone (src/streaming/openai-relay.ts, piped without the gateway) | ${r.cpu.relayEventUs.p50.toFixed(1)} µs | ${r.cpu.relayEventUs.p90.toFixed(1)} µs |`)
  lines.push('')
  if (r.hops.length > 0) {
    const shapes: Record<string, string> = {
      floor: 'upstream response returned as is (no JS stream stage)',
      identity: 'one empty TransformStream',
      timer: 'a pull-based ReadableStream racing each read against a setTimeout (the idle-timeout shape of src/upstream/openai-route.ts)',
      relay: 'the SSE relay (src/streaming/openai-relay.ts)',
      'timer-relay': 'both (the OpenAI route before the revocation wrapper stopped being a stage)',
      'native-pipe': 'native pipeTo into an IdentityTransformStream, JavaScript writes only after the end',
      'tee-watch': 'a tee: one branch returned natively, JavaScript reads the other per chunk',
      'tee-pipe': 'a tee: one branch piped into an IdentityTransformStream (closed by JavaScript after the end), JavaScript reads the other',
      pipe: 'the native pipe (src/streaming/openai-pipe.ts: a tee, one branch returned, JavaScript keeps the tail of the other), as podgate streams when no byte needs changing',
      'pipe-tee': 'native pipeTo into an IdentityTransformStream, its readable tee-d: one branch returned, JavaScript reads the other',
      gateway: 'podgate whole (createGateway: key auth, quota, cache lookup, logging), streaming through the native pipe',
      'floor-signal': 'upstream response returned as is, fetched with an AbortSignal',
      'pipe-signal': 'the native pipe, fetched with an AbortSignal',
      'floor-rewrap': 'upstream response returned as is, re-wrapped three times (new Response(body, response))',
      'pipe-rewrap': 'the native pipe, re-wrapped three times',
      'js-writer': 'JavaScript reads each chunk and writes it into an IdentityTransformStream',
    }
    lines.push(
      'The same streams over real HTTP: a 2000-event stream from the bench upstream relayed by the CPU bench Worker through one shape at a time, ' +
        'workerd process CPU per event (every chunk arrives in its own event-loop turn here, unlike the in-process loop above):',
      '',
      '| Stream shape | CPU per event | events/s |',
      '|---|---|---|',
    )
    for (const h of r.hops) lines.push(`| ${shapes[h.mode] ?? h.mode} | ${h.eventUs.toFixed(1)} µs | ${h.eventsPerSecond.toFixed(0)} |`)
    lines.push('')
  }
  const frozen = r.cpu.clock.clockMs < r.cpu.clock.cpuMs / 4
  lines.push(
    `workerd's clock during a loop of ${r.cpu.clock.cpuMs.toFixed(0)} ms of CPU advanced ${r.cpu.clock.clockMs} ms: ` +
      (frozen ? 'it does not advance during synchronous CPU work here, so in-Worker timing would read zero; hence process CPU time.' : 'it advances locally, but process CPU time is used anyway so the two measurement paths agree.'),
    '',
  )
  lines.push('Whole-process CPU per call over HTTP during the latency runs (context: includes the runtime, HTTP parsing and the outbound fetch, which Workers does not bill as the Worker\'s CPU):', '')
  lines.push('| Target | per JSON call | per 100-event stream |', '|---|---|---|')
  for (const n of SERVERS) if (r.jsonCpu[n] !== undefined) lines.push(`| ${label(n)} (${n === 'portkey' ? 'node' : 'workerd'}) | ${ms(r.jsonCpu[n])} | ${ms(r.streamCpu[n])} |`)
  lines.push('')

  lines.push('## Memory while streaming', '')
  lines.push('Resident memory of the serving process, sampled every 10 ms while one stream of 1 KB events is relayed and read; each size runs twice, alternating, and the smaller growth is kept.', '')
  lines.push('| Target | before | peak, 1 MB stream | growth | peak, 10 MB stream | growth |', '|---|---|---|---|---|---|')
  for (const n of SERVERS) {
    const m = r.memory[n]
    if (!m?.oneMb || !m.tenMb) continue
    lines.push(`| ${label(n)} | ${mib(m.oneMb.before)} | ${mib(m.oneMb.peak)} | ${mib(m.oneMb.peak - m.oneMb.before)} | ${mib(m.tenMb.peak)} | ${mib(m.tenMb.peak - m.tenMb.before)} |`)
  }
  lines.push('')

  if (r.cacheBench) {
    lines.push('## Answer cache', '')
    lines.push('From scripts/bench/cache.ts (its own podgate under `wrangler dev` with the real local Cache API and KV, over the Runpod emulator), run after the servers above stopped:', '')
    lines.push(r.cacheBench.trim(), '')
  }

  lines.push('## Bundle', '')
  lines.push(
    `\`wrangler deploy --dry-run --env=""\` (wrangler.toml sets \`minify = true\`): ${kib(r.bundle.raw)} minified, **${kib(r.bundle.gzip)} gzipped** (gzip -9). ` +
      `Portkey's Node build (build/start-server.js, gzip -9): ${kib(r.bundle.portkeyGzip)}.`,
    '',
  )
  if (r.bundle.inputs.length > 0) {
    lines.push('Largest contributors to the minified bundle (esbuild metafile, before gzip):', '', '| Input | Minified |', '|---|---|')
    for (const input of r.bundle.inputs) lines.push(`| ${input.name} | ${kib(input.bytes)} |`)
    lines.push('')
  }

  lines.push('## How to run', '')
  lines.push(
    '```sh',
    'npm run bench                 # a few minutes; writes BENCHMARKS.md, docs/bench.svg, .bench/results.json',
    'BENCH_QUICK=1 npm run bench   # short smoke run',
    '```',
    '',
    'Everything runs on 127.0.0.1: a fixed-latency OpenAI-compatible upstream on node:http (scripts/bench/upstream.ts, also on Runpod\'s ' +
      '`/v2/<endpointId>/openai/v1/*` path); podgate\'s Worker exactly as `wrangler deploy --dry-run` bundles it, served by Miniflare ' +
      '(one workerd process; `wrangler dev` would add a proxy hop in front of the Worker and reload whenever src/ changes) with ' +
      '`RUNPOD_BASE_URL` pointed at the upstream, local KV and the quota Durable Object; a pass-through Worker in the same workerd version (the floor); ' +
      'the CPU bench Worker (scripts/bench/cpu-worker); and Portkey\'s open-source gateway installed into `.bench/portkey` ' +
      '(git-ignored; `@hono/node-server` pinned to 1.13.5) with a preload that pins it to loopback. ' +
      'The first run needs the npm registry for Portkey; without it the run completes without the Portkey column and says why. ' +
      '`node scripts/bench/run.ts --report` re-renders this file and the chart from `.bench/results.json`.',
    '',
    'On a shared or busy machine the absolute numbers move; the ratios against direct calls of the same run, measured round-robin, move much less.',
    '',
  )
  if (notes.trim()) lines.push(notes.trim(), '')
  return lines.join('\n')
}

const COLORS: Record<string, string> = { workerd: '#93c5fd', podgate: '#f38020', portkey: '#6b7280' }

/** Two panels: added latency (ms, p50; the p99s are in the tables) and throughput relative to direct calls. */
export function renderChart(r: Results): string {
  const width = 760
  const rowH = 22
  const left = 230
  const barMax = width - left - 160
  const out: string[] = []
  let y = 30
  const panel = (title: string, rows: Array<{ label: string; values: Array<{ name: string; value: number | undefined }> }>, unit: string, scale: number) => {
    out.push(`<text x="10" y="${y}" font-size="15" font-weight="bold">${title}</text>`)
    y += 14
    for (const row of rows) {
      out.push(`<text x="10" y="${y + 15}" font-size="12">${row.label}</text>`)
      for (const v of row.values) {
        if (v.value === undefined || Number.isNaN(v.value)) continue
        const w = Math.max(1, (Math.max(0, v.value) / scale) * barMax)
        out.push(`<rect x="${left}" y="${y + 3}" width="${w.toFixed(1)}" height="${rowH - 6}" fill="${COLORS[v.name.split(' ')[0]!]}"/>`)
        out.push(`<text x="${(left + w + 6).toFixed(1)}" y="${y + 15}" font-size="11">${v.name} ${v.value.toFixed(2)}${unit}</text>`)
        y += rowH
      }
      y += 6
    }
    y += 18
  }
  const latencyRows = [
    { label: 'JSON call, added p50', table: r.json },
    { label: 'Stream first byte, added p50', table: r.streamFirst },
    { label: 'Stream last byte, added p50', table: r.streamLast },
  ].map((row) => ({ label: row.label, values: SERVERS.map((name) => ({ name: name === 'workerd' ? 'workerd floor' : name, value: added(row.table, name, 'p50') })) }))
  const maxLatency = Math.max(1, ...latencyRows.flatMap((row) => row.values.map((v) => v.value ?? 0)))
  panel('Latency added over a direct call (ms, lower is better)', latencyRows, ' ms', maxLatency)
  const tp = (name: string, key: 'one' | 'many') => {
    const value = r.throughput[name]?.[key]
    const direct = r.throughput.direct?.[key]
    return value !== undefined && direct ? value / direct : undefined
  }
  const throughputRows = [
    { label: 'Stream events/s, 1 stream', values: SERVERS.map((name) => ({ name: name === 'workerd' ? 'workerd floor' : name, value: tp(name, 'one') })) },
    { label: 'Stream events/s, 64 streams', values: SERVERS.map((name) => ({ name: name === 'workerd' ? 'workerd floor' : name, value: tp(name, 'many') })) },
  ]
  const maxRatio = Math.max(1, ...throughputRows.flatMap((row) => row.values.map((v) => v.value ?? 0)))
  panel('Streaming throughput relative to direct (1.00 = no loss, higher is better)', throughputRows, '×', maxRatio)
  out.push(`<text x="10" y="${y}" font-size="11" fill="#555">${escapeXml(`npm run bench, ${r.date.slice(0, 16)}Z, ${r.machine.cores} cores ${r.machine.cpu}; podgate ${r.versions.podgate} in workerd ${r.versions.workerd}, Portkey ${r.versions.portkey ?? 'not run'}`)}</text>`)
  y += 12
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${y}" viewBox="0 0 ${width} ${y}" font-family="system-ui, sans-serif">\n<rect width="100%" height="100%" fill="#fff"/>\n${out.join('\n')}\n</svg>\n`
}

function escapeXml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
}
