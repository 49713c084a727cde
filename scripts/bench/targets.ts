/**
 * Issue 14's limits, one line each, checked against one bench run: the measured value, the limit and
 * whether it was met. A line whose inputs were not measured (Portkey did not run) says so instead of
 * passing.
 */
import type { MemoryRun, Percentiles, Results } from './report.ts'

export interface Check {
  name: string
  measured: string
  limit: string
  met: boolean | undefined
  /**
   * For a target against the floor: what the least gateway that does what podgate must do there reads in
   * the same run (no podgate code; scripts/bench/least-gateway/ and the CPU Worker's shapes), so a missed
   * line says whether the limit is within reach on this runtime at all.
   */
  bound?: string
}

/** Memory counts as flat when the 10 MB stream's peak grows at most 4 MiB past the 1 MB stream's. */
export const FLAT_SLACK = 4 * 2 ** 20

export const ms = (value: number | undefined) => (value === undefined || Number.isNaN(value) ? 'n/a' : `${value.toFixed(2)} ms`)
export const kib = (bytes: number | undefined) => (bytes === undefined ? 'n/a' : `${(bytes / 1024).toFixed(1)} KiB`)
export const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`
const times = (value: number | undefined, base: number | undefined) => (value === undefined || !base ? undefined : value / base)
const x = (value: number | undefined) => (value === undefined ? 'n/a' : `${value.toFixed(2)}×`)
const rate = (value: number | undefined) => (value === undefined ? 'n/a' : `${Math.round(value).toLocaleString('en-US')} ev/s`)

/** p50 (or p99) of `name` minus the same of `base` in one table of the same run. */
export function over(table: Record<string, Percentiles>, name: string, base: string, p: 'p50' | 'p99' = 'p50'): number | undefined {
  const target = table[name]
  const reference = table[base]
  return target && reference ? target[p] - reference[p] : undefined
}

function memoryGrowth(run: { oneMb?: MemoryRun; tenMb?: MemoryRun } | undefined) {
  if (!run?.oneMb || !run.tenMb) return undefined
  return { one: run.oneMb.peak - run.oneMb.before, ten: run.tenMb.peak - run.tenMb.before }
}

const atMost = (value: number | undefined, limit: number) => (value === undefined ? undefined : value <= limit)
const atLeast = (value: number | undefined, limit: number) => (value === undefined ? undefined : value >= limit)
const below = (value: number | undefined, other: number | undefined) => (value === undefined || other === undefined ? undefined : value < other)

/**
 * The least stream shape that keeps podgate's promises (`tee-tick`: a tee, one branch piped into the
 * caller's IdentityTransformStream so an error event can follow a cut answer, the other read every 50 ms
 * so memory stays flat and the tail tells `[DONE]` and the usage), against the floor in the same shapes table.
 */
function leastStream(hops: Results['hops'] | undefined, of: 'eventsPerSecond' | 'eventUs'): string {
  const share = leastShare(hops, of)
  return share === undefined ? 'not measured' : `${x(share)} (\`tee-tick\` shape)`
}

function leastShare(hops: Results['hops'] | undefined, of: 'eventsPerSecond' | 'eventUs'): number | undefined {
  const floor = hops?.find((h) => h.mode === 'floor')
  const least = hops?.find((h) => h.mode === 'tee-tick')
  return floor && least ? least[of] / floor[of] : undefined
}

/** The least Hono gateway's added p50 over the floor in the feature rows (`probe`), when they ran. */
function leastLatency(r: Results, table: 'json' | 'first', probe: string): string {
  const f = r.featureRows
  return f ? `${ms(over(f[table], probe, 'floor'))} (${probe})` : 'not measured'
}

/** What the least featured gateway (`least`, a target of the same rows as podgate) reads in the row itself, before `rest`. */
function sameRow(value: string | undefined, rest: string): string {
  return value === undefined ? rest : `**${value}** (least gateway, this row); ${rest}`
}

export function checks(r: Results): Check[] {
  const lines: Check[] = []
  for (const [key, label] of [['one', '1 stream'], ['many', '64 concurrent streams']] as const) {
    const podgate = r.throughput.podgate?.[key]
    const floor = r.throughput.workerd?.[key]
    const portkey = r.throughput.portkey?.[key]
    const share = times(podgate, floor)
    const hops = key === 'one' ? r.hops : r.concurrentHops
    const leastRate = r.throughput.least?.[key]
    const bound = sameRow(leastRate === undefined ? undefined : x(times(leastRate, floor)), `${leastStream(hops, 'eventsPerSecond')}`)
    lines.push({ name: `Streaming throughput, ${label}, against the floor`, measured: `${rate(podgate)} = ${x(share)} the floor's ${rate(floor)}`, limit: '≥ 0.8× the floor', met: atLeast(share, 0.8), bound })
    // The least shape's share of its own floor, applied to this row's floor: what it would relay here.
    const least = leastShare(hops, 'eventsPerSecond')
    lines.push({
      name: `Streaming throughput, ${label}, against Portkey`,
      measured: portkey === undefined ? 'Portkey not run' : `${rate(podgate)} vs ${rate(portkey)}`,
      limit: 'above Portkey',
      met: podgate === undefined || portkey === undefined ? undefined : podgate > portkey,
      bound: sameRow(leastRate === undefined ? undefined : rate(leastRate), least === undefined || floor === undefined ? 'not measured' : `≈ ${rate(least * floor)} (\`tee-tick\`'s share of the floor's ${rate(floor)})`),
    })
  }
  const streamCpu = times(r.streamCpu.podgate, r.streamCpu.workerd)
  const leastCpu = times(r.streamCpu.least, r.streamCpu.workerd)
  lines.push({
    name: 'Whole-process CPU per 100-event stream',
    measured: `${ms(r.streamCpu.podgate)} = ${x(streamCpu)} the floor's ${ms(r.streamCpu.workerd)}`,
    limit: '≤ 1.3× the floor',
    met: atMost(streamCpu, 1.3),
    bound: sameRow(leastCpu === undefined ? undefined : `${ms(r.streamCpu.least)} = ${x(leastCpu)}`, `${leastStream(r.pacedHops, 'eventUs')}, before any request path`),
  })
  lines.push({ name: 'CPU per typical JSON request (in-workerd microbenchmark, p50)', measured: ms(r.cpu.requestMs.p50), limit: '≤ 0.5 ms', met: r.cpu.requestMs.p50 <= 0.5 })
  for (const [table, label] of [[r.json, 'JSON call'], [r.streamFirst, "stream's first byte"]] as const) {
    const podgate = over(table, 'podgate', 'workerd')
    const portkey = over(table, 'portkey', 'direct')
    const least = over(table, 'least', 'workerd')
    const bound = sameRow(least === undefined ? undefined : ms(least), `feature rows: ${leastLatency(r, table === r.json ? 'json' : 'first', 'least gateway, Hono, each feature at its least')}`)
    lines.push({ name: `Added p50 latency above the floor, ${label}`, measured: `${ms(podgate)} (podgate − floor)`, limit: '≤ 0.3 ms', met: atMost(podgate, 0.3), bound })
    lines.push({
      name: `Added p50 latency, ${label}, against Portkey's`,
      measured: portkey === undefined ? 'Portkey not run' : `${ms(podgate)} (podgate − floor) vs ${ms(portkey)} (Portkey − direct)`,
      limit: "below Portkey's",
      met: below(podgate, portkey),
    })
  }
  lines.push({
    name: 'Bundle `wrangler deploy` ships (`--dry-run --outdir`, gzip -9)',
    measured: `${kib(r.bundle.gzip)}; wrangler.toml \`minify = true\`: ${r.bundle.minify ? 'yes' : 'no'}`,
    limit: '≤ 64 KiB, minified',
    met: r.bundle.gzip <= 64 * 1024 && r.bundle.minify,
  })
  const cold = times(r.coldStart?.podgate.totalMs, r.coldStart?.floor.totalMs)
  lines.push({
    name: `Cold start: fresh workerd to the first answer (median of ${r.coldStart?.starts ?? 0} starts)`,
    measured: `${ms(r.coldStart?.podgate.totalMs)} = ${x(cold)} the floor's ${ms(r.coldStart?.floor.totalMs)}`,
    limit: '≤ 1.5× the floor',
    met: atMost(cold, 1.5),
  })
  const growth = memoryGrowth(r.memory.podgate)
  lines.push({
    name: 'Memory flat while streaming (10 MB vs 1 MB peak growth)',
    measured: growth ? `${mib(growth.ten)} vs ${mib(growth.one)}` : 'n/a',
    limit: `10 MB ≤ 1 MB + ${mib(FLAT_SLACK)}`,
    met: growth ? growth.ten <= growth.one + FLAT_SLACK : undefined,
  })
  return lines
}
