/**
 * `npm run bench:cache` (or `node scripts/bench/cache.ts` on Node 22+): podgate's answer cache under
 * a skewed workload. Starts podgate in workerd (`wrangler dev`, real Cache API and KV) over the Runpod
 * emulator on loopback, sends a Zipf-distributed stream of deterministic prompts (half JSON, half SSE)
 * from a few concurrent clients, and prints hit ratio and latency per cache status and form.
 *
 * Options (env): CACHE_BENCH_REQUESTS (default 300), CACHE_BENCH_PROMPTS (100), CACHE_BENCH_ZIPF_S
 * (1.1), CACHE_BENCH_CONCURRENCY (8), CACHE_BENCH_TOKEN_MS (emulated time per token, default 2).
 */
import { realpathSync } from 'node:fs'
import { startPodgate } from '../lib/podgate-server.ts'
import type { PodgateServer } from '../lib/podgate-server.ts'
import { SIGNALS } from '../lib/run-group.ts'

export interface CacheBenchOptions {
  requests: number
  prompts: number
  zipfS: number
  concurrency: number
  tokenDelayMs: number
}

export interface CacheBenchRow {
  status: string
  form: 'json' | 'sse'
  count: number
  p50Ms: number
  p95Ms: number
}

export interface CacheBenchResult {
  options: CacheBenchOptions
  hitRatio: number
  /** The share of requests a perfect cache of this workload could serve: 1 - distinct / total. */
  idealHitRatio: number
  upstreamJobs: number
  rows: CacheBenchRow[]
  elapsedMs: number
}

const MODEL = 'chat-current'

export async function runCacheBench(options: CacheBenchOptions): Promise<CacheBenchResult> {
  // A SIGTERM to npm alone (`exec node`: a process manager's or IDE's "stop") stops the wrangler dev it
  // started, also one still starting: that is stopped as soon as it is up.
  let server: PodgateServer | undefined
  let stopped: keyof typeof SIGNALS | undefined
  const stop = (signal: keyof typeof SIGNALS) => void (stopped = signal, server?.close().finally(() => process.exit(128 + SIGNALS[signal])))
  for (const signal of Object.keys(SIGNALS) as (keyof typeof SIGNALS)[]) process.once(signal, stop)
  server = await startPodgate({ emulator: { defaults: { tokenDelayMs: options.tokenDelayMs } } })
  // Stopped while it started: nothing more runs; the stop exits once it is down.
  if (stopped) await new Promise<never>(() => stop(stopped!))
  try {
    const { key } = await server.createKey({ name: 'cache-bench' })
    const sample = zipfSampler(options.prompts, options.zipfS, 42)
    const plan = Array.from({ length: options.requests }, (_, i) => ({ prompt: sample(), stream: i % 2 === 1 }))
    const samples: { status: string; form: 'json' | 'sse'; ms: number }[] = []
    let next = 0
    const started = performance.now()
    await Promise.all(
      Array.from({ length: options.concurrency }, async () => {
        while (next < plan.length) {
          const item = plan[next++]!
          const body = JSON.stringify({
            model: MODEL,
            messages: [{ role: 'user', content: `Question number ${item.prompt}: what is a cache?` }],
            temperature: 0,
            max_tokens: 32,
            ...(item.stream ? { stream: true } : {}),
          })
          const t0 = performance.now()
          const res = await fetch(`${server.url}/v1/chat/completions`, {
            method: 'POST',
            headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
            body,
          })
          await res.arrayBuffer()
          const ms = performance.now() - t0
          if (res.status !== 200) throw new Error(`bench request failed: ${res.status}`)
          samples.push({ status: res.headers.get('x-podgate-cache') ?? 'none', form: item.stream ? 'sse' : 'json', ms })
        }
      }),
    )
    const elapsedMs = performance.now() - started
    // The floor on this machine: a request podgate answers with no work (no auth, no cache, no upstream).
    const floor: number[] = []
    for (let i = 0; i < 50; i++) {
      const t0 = performance.now()
      await (await fetch(`${server.url}/healthz`)).arrayBuffer()
      floor.push(performance.now() - t0)
    }
    const distinct = new Set(plan.map((p) => p.prompt)).size
    const hits = samples.filter((s) => s.status === 'HIT' || s.status === 'COALESCED').length
    const upstreamJobs = server.emulator?.calls.filter((c) => c.op === 'run' || c.op === 'runsync').length ?? 0
    const groups = new Map<string, number[]>()
    for (const s of samples) {
      const name = `${s.status} ${s.form}`
      groups.set(name, [...(groups.get(name) ?? []), s.ms])
    }
    const rows = [...groups.entries()]
      .map(([name, values]) => {
        const [status = '', form] = name.split(' ')
        const sorted = values.sort((a, b) => a - b)
        return { status, form: form as 'json' | 'sse', count: sorted.length, p50Ms: quantile(sorted, 0.5), p95Ms: quantile(sorted, 0.95) }
      })
      .sort((a, b) => a.status.localeCompare(b.status) || a.form.localeCompare(b.form))
    // One client at a time: a hit against that floor, without queueing behind other clients.
    const sequentialHits: number[] = []
    for (let i = 0; i < 50; i++) {
      const t0 = performance.now()
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Question number 0: what is a cache?' }], temperature: 0, max_tokens: 32 }),
      })
      await res.arrayBuffer()
      if (res.headers.get('x-podgate-cache') === 'HIT') sequentialHits.push(performance.now() - t0)
    }
    const row = (status: string, values: number[]): CacheBenchRow => {
      const sorted = values.sort((a, b) => a - b)
      return { status, form: 'json', count: sorted.length, p50Ms: quantile(sorted, 0.5), p95Ms: quantile(sorted, 0.95) }
    }
    rows.push(row('HIT, one client', sequentialHits), row('floor: GET /healthz, one client', floor))
    return { options, hitRatio: hits / samples.length, idealHitRatio: 1 - distinct / plan.length, upstreamJobs, rows, elapsedMs }
  } finally {
    for (const signal of Object.keys(SIGNALS)) process.off(signal, stop)
    await server.close()
  }
}

/** Ranks 0..n-1 with P(k) proportional to 1 / (k+1)^s, from a seeded PRNG so runs compare. */
function zipfSampler(n: number, s: number, seed: number): () => number {
  const cumulative: number[] = []
  let total = 0
  for (let k = 0; k < n; k++) {
    total += 1 / (k + 1) ** s
    cumulative.push(total)
  }
  let state = seed >>> 0
  const random = () => {
    // mulberry32
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  return () => {
    const target = random() * total
    let lo = 0
    let hi = n - 1
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (cumulative[mid]! < target) lo = mid + 1
      else hi = mid
    }
    return lo
  }
}

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return 0
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!
}

export function renderCacheBench(result: CacheBenchResult): string {
  const { options } = result
  const lines = [
    `podgate cache bench: ${options.requests} requests, ${options.prompts} prompts, Zipf s=${options.zipfS}, ${options.concurrency} clients, ${options.tokenDelayMs} ms/token upstream`,
    '',
    '| cache | form | requests | p50 ms | p95 ms |',
    '|---|---|---:|---:|---:|',
    ...result.rows.map((r) => `| ${r.status} | ${r.form} | ${r.count} | ${r.p50Ms.toFixed(1)} | ${r.p95Ms.toFixed(1)} |`),
    '',
    `hit ratio (HIT + COALESCED): ${(result.hitRatio * 100).toFixed(1)}%  (ideal for this workload: ${(result.idealHitRatio * 100).toFixed(1)}%)`,
    `upstream jobs: ${result.upstreamJobs} for ${options.requests} requests; wall time ${(result.elapsedMs / 1000).toFixed(1)} s`,
  ]
  return lines.join('\n')
}

// Run as a script (also through a symlinked checkout, where argv[1] is not the real path: it ran nothing, exit 0).
if (process.argv[1] !== undefined && import.meta.filename === realpathSync(process.argv[1])) {
  const env = (name: string, fallback: number) => Number(process.env[name] ?? fallback)
  const result = await runCacheBench({
    requests: env('CACHE_BENCH_REQUESTS', 300),
    prompts: env('CACHE_BENCH_PROMPTS', 100),
    zipfS: env('CACHE_BENCH_ZIPF_S', 1.1),
    concurrency: env('CACHE_BENCH_CONCURRENCY', 8),
    tokenDelayMs: env('CACHE_BENCH_TOKEN_MS', 2),
  })
  console.log(renderCacheBench(result))
}
