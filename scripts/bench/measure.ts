/**
 * Client-side measurements: one timed call (JSON or SSE), percentiles, and a resident-memory sampler.
 * Timings use `performance.now()` in the runner; each call reads its body to the end.
 */
import { rssBytes } from './processes.ts'

export interface Target {
  /** `workerd`: a bare pass-through Worker, the floor any Worker on this runtime pays. */
  name: 'direct' | 'workerd' | 'podgate' | 'portkey'
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
}

export async function timeStream(target: Target, body: string): Promise<StreamTiming> {
  const started = performance.now()
  const res = await fetch(target.url, { method: 'POST', headers: { ...target.headers, 'content-type': 'application/json' }, body })
  if (res.status !== 200 || !res.body) throw new Error(`${target.name}: HTTP ${res.status}: ${(await res.text()).slice(0, 300)}`)
  let firstByte = 0
  let events = 0
  let bytes = 0
  let endedWithNewline = false
  const decoder = new TextDecoder()
  const reader = res.body.getReader()
  for (;;) {
    const { done, value: chunk } = await reader.read()
    if (done) break
    const text = decoder.decode(chunk, { stream: true })
    if (firstByte === 0 && text.includes('data:')) firstByte = performance.now() - started
    bytes += chunk.byteLength
    // Events end with a blank line; count the separators, including one split across chunks.
    if (endedWithNewline && text.startsWith('\n')) events++
    events += text.split('\n\n').length - 1
    endedWithNewline = text.endsWith('\n') && !text.endsWith('\n\n')
  }
  return { firstByte, lastByte: performance.now() - started, events, bytes }
}

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN
  const sorted = [...values].sort((a, b) => a - b)
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))
  return sorted[rank]!
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
