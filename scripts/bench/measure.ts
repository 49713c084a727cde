/**
 * Client-side measurements: one timed call (JSON or SSE), percentiles, and a resident-memory sampler.
 * Timings use `performance.now()` in the runner; each call reads its body to the end.
 */
import { cpuNs, rssBytes } from './processes.ts'
import type { Percentiles } from './report.ts'

export interface Target {
  /**
   * In the main runs `direct`, `workerd` (a bare pass-through Worker, the floor any Worker on this
   * runtime pays), `podgate` or `portkey`; the feature rows name their own.
   */
  name: string
  url: string
  headers: Record<string, string>
  /** The process serving it, when its CPU and memory can be read. */
  pid?: number
}

export async function timeJson(target: Target, body: string): Promise<number> {
  const started = performance.now()
  const res = await fetch(target.url, { method: 'POST', headers: { ...target.headers, 'content-type': 'application/json' }, body })
  const text = await res.text()
  const ms = performance.now() - started
  if (res.status !== 200) throw new Error(`${target.name}: HTTP ${res.status}: ${text.slice(0, 300)}`)
  return ms
}

export interface StreamTiming {
  /** ms to the first body bytes carrying an SSE event. */
  firstByte: number
  /** ms to the end of the body. */
  lastByte: number
  events: number
  bytes: number
  /** `completion_tokens` of the last usage the stream carried (when one chunk held it whole). */
  completionTokens: number | undefined
}

/** `onHeaders` sees the response head before the body is read (to check which stages answered). */
export async function timeStream(target: Target, body: string, onHeaders?: (headers: Headers) => void): Promise<StreamTiming> {
  const started = performance.now()
  const res = await fetch(target.url, { method: 'POST', headers: { ...target.headers, 'content-type': 'application/json' }, body })
  if (res.status !== 200 || !res.body) throw new Error(`${target.name}: HTTP ${res.status}: ${(await res.text()).slice(0, 300)}`)
  onHeaders?.(res.headers)
  let firstByte = 0
  let events = 0
  let bytes = 0
  let endedWithNewline = false
  let completionTokens: number | undefined
  const decoder = new TextDecoder()
  const reader = res.body.getReader()
  for (;;) {
    const { done, value: chunk } = await reader.read()
    if (done) break
    const text = decoder.decode(chunk, { stream: true })
    if (firstByte === 0 && text.includes('data:')) firstByte = performance.now() - started
    if (text.includes('"completion_tokens"')) {
      const found = text.match(/"completion_tokens":\d+/g)
      if (found) completionTokens = Number(found[found.length - 1]!.slice('"completion_tokens":'.length))
    }
    bytes += chunk.byteLength
    // Events end with a blank line; count the separators, including one split across chunks.
    if (endedWithNewline && text.startsWith('\n')) events++
    events += text.split('\n\n').length - 1
    endedWithNewline = text.endsWith('\n') && !text.endsWith('\n\n')
  }
  return { firstByte, lastByte: performance.now() - started, events, bytes, completionTokens }
}

export interface RoundRobin<T> {
  values: Record<string, T[]>
  /**
   * ms of process CPU per call, for targets served by a process no other target in the run uses: the
   * whole process over blocks of rounds (so work it does after answering, such as `waitUntil`, counts),
   * divided by the calls in the block, median over the blocks.
   */
  cpuPerCall: Record<string, number>
}

/** `n` rounds, each calling every target once in a rotating order, so drift on the machine hits all alike. */
export async function roundRobin<T>(targets: Target[], n: number, call: (t: Target) => Promise<T>, blocks = 5): Promise<RoundRobin<T>> {
  const values: Record<string, T[]> = {}
  const pids = new Map<number, string[]>()
  for (const t of targets) if (t.pid !== undefined) pids.set(t.pid, [...(pids.get(t.pid) ?? []), t.name])
  const owned = [...pids].filter(([, names]) => names.length === 1).map(([pid, names]) => ({ pid, name: names[0]! }))
  const perBlock: Record<string, number[]> = {}
  const size = Math.max(1, Math.floor(n / blocks))
  for (let start = 0; start < n; start += size) {
    const rounds = Math.min(size, n - start)
    const before = owned.map((o) => cpuNs(o.pid))
    for (let i = start; i < start + rounds; i++) {
      for (let j = 0; j < targets.length; j++) {
        const t = targets[(i + j) % targets.length]!
        ;(values[t.name] ??= []).push(await call(t))
      }
    }
    owned.forEach((o, k) => (perBlock[o.name] ??= []).push((cpuNs(o.pid) - before[k]!) / rounds / 1e6))
  }
  const cpuPerCall: Record<string, number> = {}
  for (const [name, list] of Object.entries(perBlock)) cpuPerCall[name] = percentile(list, 50)
  return { values, cpuPerCall }
}

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN
  const sorted = [...values].sort((a, b) => a - b)
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))
  return sorted[rank]!
}

/** p50 and p99 per target of one measure picked from each call's value. */
export function summarize<T>(values: Record<string, T[]>, pick: (value: T) => number): Record<string, Percentiles> {
  const out: Record<string, Percentiles> = {}
  for (const [name, list] of Object.entries(values)) {
    const ms = list.map(pick)
    out[name] = { p50: percentile(ms, 50), p99: percentile(ms, 99), n: ms.length }
  }
  return out
}

/** Samples a process's RSS every `everyMs` until stopped; returns the peak and the first sample. */
export function sampleRss(pid: number, everyMs = 10): { stop(): { first: number; peak: number; samples: number } } {
  const first = rssBytes(pid)
  let peak = first
  let samples = 1
  const timer = setInterval(() => {
    try {
      peak = Math.max(peak, rssBytes(pid))
      samples++
    } catch {
      // the process went away; the run reports what it has
    }
  }, everyMs)
  return {
    stop: () => {
      clearInterval(timer)
      peak = Math.max(peak, rssBytes(pid))
      return { first, peak, samples: samples + 1 }
    },
  }
}
