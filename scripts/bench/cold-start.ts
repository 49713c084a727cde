/**
 * Cold start (issue 14 item 5): the time from starting a fresh workerd, the way the bench starts every
 * Worker (`startWorker`: a new Miniflare, so a new workerd process), to the first successful answer,
 * for podgate and for the pass-through floor, alternating which goes first, several times.
 *
 * The first request is the typical chat call (JSON, cacheable and new) against an upstream that answers
 * at once, so the upstream's own time does not pad both sides. podgate's API key is created once in a
 * persisted KV directory that every fresh podgate starts from, as a deployed Worker finds its keys in
 * KV; the floor starts from the same kind of directory.
 */
import { rmSync } from 'node:fs'
import { percentile } from './measure.ts'
import type { Target } from './measure.ts'
import { timeJson } from './measure.ts'
import { typicalChat } from './wire.ts'
import { startFloor, startPodgate } from './workers.ts'
import type { ServedWorker } from './workers.ts'

export interface ColdStartSummary {
  /** Median ms from constructing Miniflare to its listener answering: spawn, config, script compile and top-level evaluation. */
  readyMs: number
  /** Median ms of the first request after that: the Worker's work done once, on its first request. */
  firstMs: number
  /** Median ms of the second request, for comparison. */
  secondMs: number
  /** Median of ready + first per start: what the target compares. */
  totalMs: number
}

export interface ColdStartResult {
  starts: number
  podgate: ColdStartSummary
  floor: ColdStartSummary
}

interface Sample {
  readyMs: number
  firstMs: number
  secondMs: number
}

export async function measureColdStart(options: { script: string; upstreamUrl: string; starts: number }): Promise<ColdStartResult> {
  const podgateState = '.bench/cold-start/podgate'
  const floorState = '.bench/cold-start/floor'
  rmSync('.bench/cold-start', { recursive: true, force: true })
  const startPodgateHere = () => startPodgate({ script: options.script, runpodBaseUrl: `${options.upstreamUrl}/v2`, persistTo: podgateState, label: 'podgate (cold start)' })
  const seeding = await startPodgateHere()
  let key: string
  try {
    key = await seeding.createKey()
  } finally {
    await seeding.stop()
  }

  const samples: Record<'podgate' | 'floor', Sample[]> = { podgate: [], floor: [] }
  const once = async (which: 'podgate' | 'floor') => {
    const server: ServedWorker = which === 'podgate' ? await startPodgateHere() : await startFloor(options.upstreamUrl, { persistTo: floorState, label: 'floor (cold start)' })
    try {
      const target: Target = { name: which === 'podgate' ? 'podgate' : 'workerd', url: `${server.url}/v1/chat/completions`, headers: { authorization: `Bearer ${which === 'podgate' ? key : 'bench'}` } }
      const firstMs = await timeJson(target, typicalChat('bench', { first: 0 }))
      const secondMs = await timeJson(target, typicalChat('bench', { first: 0 }))
      samples[which].push({ readyMs: server.readyMs, firstMs, secondMs })
    } finally {
      await server.stop()
    }
  }
  for (let i = 0; i < options.starts; i++) {
    for (const which of i % 2 === 0 ? (['podgate', 'floor'] as const) : (['floor', 'podgate'] as const)) await once(which)
  }
  return { starts: options.starts, podgate: summarize(samples.podgate), floor: summarize(samples.floor) }
}

function summarize(samples: Sample[]): ColdStartSummary {
  const median = (pick: (s: Sample) => number) => percentile(samples.map(pick), 50)
  return {
    readyMs: median((s) => s.readyMs),
    firstMs: median((s) => s.firstMs),
    secondMs: median((s) => s.secondMs),
    totalMs: median((s) => s.readyMs + s.firstMs),
  }
}
