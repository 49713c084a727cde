/**
 * The Workers a bench run serves, each in its own Miniflare (one workerd process, no file watching and
 * no proxy hop in front of the Worker: `wrangler dev` adds both, and rebuilds when anyone edits src/
 * mid-run), and the bundles they run: exactly what `wrangler deploy` would upload.
 */
import { execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { readdirSync, readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { Miniflare, convertV4MiniflareOptions } from 'miniflare'
import { findDescendant, freePort } from './processes.ts'

const WRANGLER = resolve('node_modules/.bin/wrangler')

export interface WorkerOptions {
  script: string
  bindings: Record<string, string>
  label: string
  /** Bind the strict quota store's Durable Object (`QuotaObject` in the script). Default false. */
  quota?: boolean
  /** Keep KV, the Cache API and Durable Objects in this directory across starts. Default: none kept. */
  persistTo?: string
  /** Open workerd's V8 inspector on this port (CPU profiles). Default: closed. */
  inspectorPort?: number
}

export interface ServedWorker {
  url: string
  /** The workerd process serving it, for CPU and memory readings. */
  workerdPid: number
  /** ms from constructing Miniflare (workerd not yet spawned) to its listener answering. */
  readyMs: number
  stop(): Promise<void>
}

/**
 * Starts one Worker. One at a time: its workerd process is told apart from the others by when it
 * appeared among this process's descendants.
 */
export async function startWorker(options: WorkerOptions): Promise<ServedWorker> {
  const before = new Set(workerdChildren())
  const port = await freePort()
  const started = performance.now()
  const mf = new Miniflare(convertV4MiniflareOptions({
    host: '127.0.0.1',
    port,
    ...(options.inspectorPort === undefined ? {} : { inspectorPort: options.inspectorPort, inspectorHost: '127.0.0.1' }),
    ...(options.persistTo === undefined ? {} : { resourcePersistencePath: options.persistTo }),
    modules: true,
    scriptPath: options.script,
    compatibilityDate: compatibilityDate(),
    compatibilityFlags: compatibilityFlags(),
    kvNamespaces: ['PODGATE_KV'],
    ...(options.quota ? { durableObjects: { PODGATE_QUOTA: { className: 'QuotaObject', useSQLite: true } } } : {}),
    bindings: options.bindings,
  }))
  const url = (await mf.ready).href.replace(/\/$/, '')
  const readyMs = performance.now() - started
  const workerdPid = workerdChildren().find((pid) => !before.has(pid))
  if (workerdPid === undefined) {
    await mf.dispose()
    throw new Error(`${options.label}: no workerd process started`)
  }
  return { url, workerdPid, readyMs, stop: () => mf.dispose() }
}

function workerdChildren(): number[] {
  const pids: number[] = []
  for (let pid = findDescendant(process.pid, 'workerd', []); pid !== undefined; pid = findDescendant(process.pid, 'workerd', pids)) pids.push(pid)
  return pids
}

function compatibilityDate(): string {
  return /^compatibility_date\s*=\s*"([^"]+)"/m.exec(readFileSync('wrangler.toml', 'utf8'))?.[1] ?? '2026-08-01'
}

/** wrangler.toml's top-level `compatibility_flags`, which the shipped Worker runs with. */
function compatibilityFlags(): string[] {
  const list = /^compatibility_flags\s*=\s*\[([^\]]*)\]/m.exec(readFileSync('wrangler.toml', 'utf8'))?.[1] ?? ''
  return [...list.matchAll(/"([^"]+)"/g)].map((m) => m[1]!)
}

/** `wrangler deploy --dry-run --outdir` with wrangler.toml's settings; returns the script's path. */
export function bundleWorker(outdir: string, extra: string[] = []): string {
  try {
    execFileSync(WRANGLER, ['deploy', '--dry-run', '--outdir', outdir, ...extra], { stdio: 'pipe', env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } })
  } catch (error) {
    const stderr = String((error as { stderr?: Buffer }).stderr ?? '').replace(/\x1b\[[0-9;]*m/g, '')
    throw new Error(`bundling with wrangler failed (does the tree build?):\n${stderr.slice(-3000)}`)
  }
  const script = readdirSync(outdir).find((file) => /\.m?js$/.test(file))
  if (!script) throw new Error(`wrangler wrote no script to ${outdir}`)
  return join(outdir, script)
}

/** The quota policy of the bench keys: high enough never to refuse, so the quota stage runs and limits nothing. */
export const BENCH_QUOTA = { requestsPerMinute: 1_000_000, tokensPerDay: 1_000_000_000 }

export interface PodgateOptions {
  script: string
  /** Runpod's base URL as podgate sees it (`…/v2`). */
  runpodBaseUrl: string
  /** PODGATE_MODELS. Default: `bench`, one endpoint on the OpenAI route. */
  models?: Record<string, unknown>
  label?: string
  persistTo?: string
  inspectorPort?: number
}

export interface ServedPodgate extends ServedWorker {
  adminToken: string
  /** Creates an API key through the admin API; `quota` is the key's policy. */
  createKey(quota?: Record<string, unknown>): Promise<string>
}

/** podgate's deploy bundle with its bindings: KV, the quota Durable Object, Runpod pointed at `runpodBaseUrl`. */
export async function startPodgate(options: PodgateOptions): Promise<ServedPodgate> {
  const adminToken = randomBytes(24).toString('hex')
  const server = await startWorker({
    script: options.script,
    label: options.label ?? 'podgate',
    quota: true,
    ...(options.persistTo === undefined ? {} : { persistTo: options.persistTo }),
    ...(options.inspectorPort === undefined ? {} : { inspectorPort: options.inspectorPort }),
    bindings: {
      RUNPOD_BASE_URL: options.runpodBaseUrl,
      RUNPOD_API_KEY: 'bench',
      PODGATE_MODELS: JSON.stringify(options.models ?? { bench: { endpoints: [{ endpointId: 'bench' }], mode: 'openai' } }),
      PODGATE_ADMIN_TOKEN: adminToken,
    },
  })
  const createKey = async (quota: Record<string, unknown> = BENCH_QUOTA) => {
    const res = await fetch(`${server.url}/admin/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'bench', quota }),
    })
    if (res.status !== 201) throw new Error(`${options.label ?? 'podgate'}: creating a bench key failed: ${res.status} ${await res.text()}`)
    return ((await res.json()) as { key: string }).key
  }
  return { ...server, adminToken, createKey }
}

/** The workerd floor: a Worker that forwards every request to `upstream` untouched. */
export function startFloor(upstream: string, options: { label?: string; persistTo?: string; inspectorPort?: number } = {}): Promise<ServedWorker> {
  return startWorker({
    script: 'scripts/bench/passthrough-worker.js',
    label: options.label ?? 'passthrough Worker',
    bindings: { UPSTREAM: upstream },
    ...(options.persistTo === undefined ? {} : { persistTo: options.persistTo }),
    ...(options.inspectorPort === undefined ? {} : { inspectorPort: options.inspectorPort }),
  })
}

export interface LeastGateways {
  /** scripts/bench/least-gateway/plain.js: shapes `parse`, `usage`, `first` (`?shape=`). */
  plain: ServedWorker
  /** scripts/bench/least-gateway/hono.ts, bundled as wrangler would: Hono, podgate's chat schema (zod/mini), a key Map. */
  hono: ServedWorker
  /** The same script in a process of its own, for its `/featured/` route (its CPU read apart from `hono`'s). */
  featured: ServedWorker
  stop(): Promise<void>
}

/**
 * The least gateways: lower bounds of what any gateway adds over the floor, with none of podgate's code
 * (`npm run bench:latency`, and the lower-bound feature rows of `npm run bench`).
 */
export async function startLeastGateways(upstream: string): Promise<LeastGateways> {
  const plain = await startWorker({ script: 'scripts/bench/least-gateway/plain.js', label: 'least gateway', bindings: { UPSTREAM: upstream } })
  try {
    const script = leastHonoScript()
    const hono = await startWorker({ script, label: 'least gateway (Hono)', bindings: { UPSTREAM: upstream } })
    let featured: ServedWorker
    try {
      featured = await startWorker({ script, label: 'least gateway (Hono, featured)', bindings: { UPSTREAM: upstream } })
    } catch (error) {
      await hono.stop()
      throw error
    }
    return { plain, hono, featured, stop: async () => void (await Promise.all([plain.stop(), hono.stop(), featured.stop()])) }
  } catch (error) {
    await plain.stop()
    throw error
  }
}

let leastHono: string | undefined

/** scripts/bench/least-gateway/hono.ts bundled as wrangler would, once per bench process. */
export function leastHonoScript(): string {
  return (leastHono ??= bundleWorker('.bench/least-hono', ['--env', 'dev', 'scripts/bench/least-gateway/hono.ts']))
}
