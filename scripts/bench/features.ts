/**
 * Issue 14 item 6: rows for what the main runs do not exercise, each against the floor in one
 * round-robin: the strict (Durable Object) quota store, answers from the cache (JSON, and SSE replay),
 * a request with tools and logprobs, and the native `/run` + `/stream` upstream path.
 *
 * The first group runs on the main servers (podgate and the floor over the bench upstream). The
 * second needs answers a canned upstream cannot give (tool calls, logprobs, Runpod jobs), so it runs
 * over the Runpod emulator (`podgate/testing`, served from this process on loopback) with its own
 * podgate and its own floor.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { createRunpodEmulator } from '../../src/testing/index.ts'
import { serveNode } from '../lib/serve-node.ts'
import { percentile, roundRobin, summarize, timeStream } from './measure.ts'
import type { StreamTiming, Target } from './measure.ts'
import type { Percentiles } from './report.ts'
import { cpuNs } from './processes.ts'
import { chatBody, typicalChat } from './wire.ts'
import { BENCH_QUOTA, startFloor, startPodgate } from './workers.ts'
import type { LeastGateways, ServedPodgate, ServedWorker } from './workers.ts'

/** One target of a feature round: where it goes, and the body it sends each time. */
interface Probe extends Target {
  body: () => string
  /** The `x-podgate-cache` every answer must carry (the row is only valid if the stage did what it says). */
  cache?: string
}

export interface FeatureResults {
  calls: number
  streams: number
  /** Per probe name: JSON latency, stream first and last byte. */
  json: Record<string, Percentiles>
  first: Record<string, Percentiles>
  last: Record<string, Percentiles>
  /** The store `GET /v1/usage` reported for the strict key after its rounds, and the requests it counted today. */
  strictStore: { store: string; requests: number }
  native: { reps: number; tokens: number; runs: Record<string, NativeRun> }
}

/** Medians over the repetitions. CPU is undefined for the emulator itself (it runs in the bench's own node process). */
export interface NativeRun {
  events: number
  tokens: number
  eventsPerSecond: number
  tokensPerSecond: number
  /** workerd CPU per received event, µs. */
  cpuPerEventUs: number | undefined
  cpuPerTokenUs: number | undefined
}

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'find_books',
      description: 'Search the shop catalogue.',
      parameters: { type: 'object', properties: { genre: { type: 'string' }, max_pages: { type: 'integer' } }, required: ['genre'] },
    },
  },
]
/** The tools-and-logprobs request: what an agent sends when it also wants token probabilities. */
const TOOLS_AND_LOGPROBS = { tools: TOOLS, tool_choice: 'auto', logprobs: true, top_logprobs: 2 }

/**
 * The rows over the main servers. Targets and the bodies they send (JSON calls: upstream answers after
 * 10 ms as in the main table; streams: 10 events, the first after 10 ms, for the first byte):
 * the floor; the floor with an upstream that answers at once (what a cache hit competes with); podgate
 * with a new deterministic call (`typicalChat`'s seed: lookup, miss, store) on the KV quota store and on
 * the strict store; podgate with the call the cache
 * skips; podgate answering from its cache; and the least gateways (scripts/bench/least-gateway/), the lower
 * bounds of what any gateway on this stack adds, with none of podgate's code.
 */
export async function measureBenchFeatures(options: { podgate: ServedPodgate; floor: ServedWorker; least: LeastGateways; key: string; calls: number; streams: number }): Promise<Omit<FeatureResults, 'native'>> {
  const { podgate, floor, key, least } = options
  const strictKey = await podgate.createKey({ ...BENCH_QUOTA, strict: true })
  const json = { first: 10 }
  const stream = { events: 10, first: 10, gap: 1 }
  const instantStream = { events: 100, first: 0, gap: 0 }
  const at = (server: ServedWorker, bearer: string) => ({ url: `${server.url}/v1/chat/completions`, headers: { authorization: `Bearer ${bearer}` } })
  // Seed 0 marks the one request that is meant to hit: stored once below, then answered from the cache.
  const hitJson = chatBody('bench', json, false, { seed: 0 })
  const hitStream = chatBody('bench', instantStream, true, { seed: 0 })
  for (const body of [hitJson, hitStream]) await storeAnswer(`${podgate.url}/v1/chat/completions`, key, body)

  const jsonProbes: Probe[] = [
    { name: 'floor', ...at(floor, 'bench'), body: () => typicalChat('bench', json) },
    { name: 'floor, instant upstream', ...at(floor, 'bench'), body: () => typicalChat('bench', { first: 0 }) },
    { name: 'podgate', ...at(podgate, key), body: () => typicalChat('bench', json), cache: 'MISS' },
    { name: 'podgate, strict quota', ...at(podgate, strictKey), body: () => typicalChat('bench', json), cache: 'MISS' },
    { name: 'podgate, cache skipped', ...at(podgate, key), body: () => chatBody('bench', json), cache: 'BYPASS' },
    { name: 'podgate, cache hit', ...at(podgate, key), body: () => hitJson, cache: 'HIT' },
    { name: 'least gateway, Hono', ...at(least.hono, 'bench'), body: () => typicalChat('bench', json) },
    { name: 'least gateway, Hono, each feature at its least', url: `${least.featured.url}/featured/v1/chat/completions`, headers: { authorization: 'Bearer bench' }, body: () => typicalChat('bench', json) },
  ]
  const streamProbes: Probe[] = [
    { name: 'floor', ...at(floor, 'bench'), body: () => typicalChat('bench', stream, true) },
    { name: 'floor, instant upstream', ...at(floor, 'bench'), body: () => typicalChat('bench', instantStream, true) },
    { name: 'podgate', ...at(podgate, key), body: () => typicalChat('bench', stream, true), cache: 'MISS' },
    { name: 'podgate, strict quota', ...at(podgate, strictKey), body: () => typicalChat('bench', stream, true), cache: 'MISS' },
    { name: 'podgate, cache skipped', ...at(podgate, key), body: () => chatBody('bench', stream, true), cache: 'BYPASS' },
    { name: 'podgate, cache hit', ...at(podgate, key), body: () => hitStream, cache: 'HIT' },
    { name: 'least gateway, answers at once', url: `${least.plain.url}/v1/chat/completions?shape=usage`, headers: { authorization: 'Bearer bench' }, body: () => typicalChat('bench', stream, true) },
    { name: 'least gateway, waits for the first chunk', url: `${least.plain.url}/v1/chat/completions?shape=first`, headers: { authorization: 'Bearer bench' }, body: () => typicalChat('bench', stream, true) },
    { name: 'least gateway, Hono, each feature at its least', url: `${least.featured.url}/featured/v1/chat/completions`, headers: { authorization: 'Bearer bench' }, body: () => typicalChat('bench', stream, true) },
  ]
  const jsonRun = await roundRobin(jsonProbes, options.calls, (t) => probeJson(t as Probe))
  const streamRun = await roundRobin(streamProbes, options.streams, (t) => probeStream(t as Probe))

  const usage = await fetch(`${podgate.url}/v1/usage`, { headers: { authorization: `Bearer ${strictKey}` } })
  const report = (await usage.json()) as { store?: string | null; windows?: { day?: { requests?: number } } | null }
  return {
    calls: options.calls,
    streams: options.streams,
    json: summarize(jsonRun.values, (v) => v),
    first: summarize(streamRun.values, (v) => v.firstByte),
    last: summarize(streamRun.values, (v) => v.lastByte),
    strictStore: { store: String(report.store), requests: report.windows?.day?.requests ?? 0 },
  }
}

/**
 * The rows over the Runpod emulator: a request with tools and logprobs (JSON and streamed, and the same
 * call without them for reference), and streaming throughput of the native `/run` + `/stream` path.
 */
export async function measureEmulatorFeatures(options: { script: string; calls: number; streams: number; reps: number; tokens: number }): Promise<{ json: Record<string, Percentiles>; first: Record<string, Percentiles>; native: FeatureResults['native'] }> {
  const emulator = createRunpodEmulator()
  const served = await serveNode((request) => emulator.fetch(request), { port: 0, host: '127.0.0.1' })
  const stops: Array<() => Promise<void>> = [served.close]
  try {
    const podgate = await startPodgate({
      script: options.script,
      runpodBaseUrl: `${served.url}/v2`,
      label: 'podgate (emulator)',
      models: {
        'chat-openai': { endpoints: [{ endpointId: 'vllmopenai' }], mode: 'openai' },
        'chat-current': { endpoints: [{ endpointId: 'vllmcurrent' }], mode: 'native' },
        'chat-classic': { endpoints: [{ endpointId: 'vllmclassic' }], mode: 'native' },
      },
    })
    stops.unshift(podgate.stop)
    const floor = await startFloor(served.url, { label: 'floor (emulator)' })
    stops.unshift(floor.stop)
    const key = await podgate.createKey()
    const viaPodgate = { url: `${podgate.url}/v1/chat/completions`, headers: { authorization: `Bearer ${key}` } }
    // The floor relays the emulator's OpenAI route: the same vLLM answer, with no gateway work at all.
    const viaFloor = { url: `${floor.url}/v2/vllmopenai/openai/v1/chat/completions`, headers: { authorization: 'Bearer bench' } }

    const probes = (stream: boolean): Probe[] => [
      { name: 'floor', ...viaFloor, body: () => typicalChat('chat-openai', {}, stream) },
      { name: 'podgate', ...viaPodgate, body: () => typicalChat('chat-openai', {}, stream), cache: 'MISS' },
      { name: 'floor, tools + logprobs', ...viaFloor, body: () => typicalChat('chat-openai', {}, stream, TOOLS_AND_LOGPROBS) },
      { name: 'podgate, tools + logprobs', ...viaPodgate, body: () => typicalChat('chat-openai', {}, stream, TOOLS_AND_LOGPROBS), cache: 'MISS' },
    ]
    await checkToolAnswer(viaPodgate)
    const jsonRun = await roundRobin(probes(false), options.calls, (t) => probeJson(t as Probe))
    const streamRun = await roundRobin(probes(true), options.streams, (t) => probeStream(t as Probe))

    const long = (model: string) => withDirective(typicalChat(model, {}, true, { max_tokens: options.tokens + 64 }), `[[emulator:tokens=${options.tokens}]]`)
    const nativeTargets: Array<Target & { body: () => string; tokens?: number }> = [
      { name: 'emulator, OpenAI route (direct)', url: `${served.url}/v2/vllmopenai/openai/v1/chat/completions`, headers: {}, body: () => long('chat-openai') },
      { name: 'floor, relaying the OpenAI route', ...viaFloor, pid: floor.workerdPid, body: () => long('chat-openai') },
      { name: 'podgate, OpenAI route', ...viaPodgate, pid: podgate.workerdPid, body: () => long('chat-openai') },
      // worker-vllm >= 2.24 asks vLLM for no usage on a shorthand stream, so podgate relays none: its token count is the directive's.
      { name: 'podgate, native /run + /stream (worker-vllm ≥ 2.24)', ...viaPodgate, pid: podgate.workerdPid, body: () => long('chat-current'), tokens: options.tokens },
      { name: 'podgate, native /run + /stream (worker-vllm ≤ 2.23)', ...viaPodgate, pid: podgate.workerdPid, body: () => long('chat-classic') },
    ]
    const native = await measureNative(nativeTargets, options.reps)
    return { json: summarize(jsonRun.values, (v) => v), first: summarize(streamRun.values, (v) => v.firstByte), native: { reps: options.reps, tokens: options.tokens, runs: native } }
  } finally {
    for (const stop of stops) await stop().catch(() => {})
  }
}

/**
 * Each target streams one long answer per repetition, round-robin. Rates are per event the client
 * received and per completion token (worker-vllm ≤ 2.23 sends tokens in growing batches, which podgate
 * relays as one event each, so its events carry several tokens). CPU: the serving workerd's CPU from the
 * request until 100 ms after the body ended (so the cache write the answer triggers counts).
 */
async function measureNative(targets: Array<Target & { body: () => string; tokens?: number }>, reps: number): Promise<Record<string, NativeRun>> {
  const samples = new Map<string, Array<{ seconds: number; cpuNs: number | undefined; events: number; tokens: number }>>()
  for (let rep = 0; rep <= reps; rep++) {
    for (const t of targets) {
      const before = t.pid === undefined ? 0 : cpuNs(t.pid)
      const started = performance.now()
      const run = await timeStream(t, t.body())
      const seconds = (performance.now() - started) / 1000
      await sleep(100)
      if (rep === 0) continue // warm-up
      // A target whose answer reports no usage says how many tokens it asked for (`tokens`); it must still arrive whole.
      const tokens = t.tokens !== undefined && run.events > t.tokens ? t.tokens : run.completionTokens
      if (tokens === undefined || tokens < 100) throw new Error(`${t.name}: the long stream arrived with ${run.events} events, usage ${run.completionTokens} tokens`)
      const used = t.pid === undefined ? undefined : cpuNs(t.pid) - before
      samples.set(t.name, [...(samples.get(t.name) ?? []), { seconds, cpuNs: used, events: run.events, tokens }])
    }
  }
  const out: Record<string, NativeRun> = {}
  for (const [name, list] of samples) {
    const median = (pick: (s: (typeof list)[number]) => number) => percentile(list.map(pick), 50)
    const measured = list.every((s) => s.cpuNs !== undefined)
    out[name] = {
      events: median((s) => s.events),
      tokens: median((s) => s.tokens),
      eventsPerSecond: median((s) => s.events / s.seconds),
      tokensPerSecond: median((s) => s.tokens / s.seconds),
      cpuPerEventUs: measured ? median((s) => s.cpuNs! / s.events / 1e3) : undefined,
      cpuPerTokenUs: measured ? median((s) => s.cpuNs! / s.tokens / 1e3) : undefined,
    }
  }
  return out
}

async function probeJson(probe: Probe): Promise<number> {
  const started = performance.now()
  const res = await fetch(probe.url, { method: 'POST', headers: { ...probe.headers, 'content-type': 'application/json' }, body: probe.body() })
  await res.arrayBuffer()
  const ms = performance.now() - started
  if (res.status !== 200) throw new Error(`${probe.name}: HTTP ${res.status}`)
  checkCache(probe, res.headers.get('x-podgate-cache'))
  return ms
}

function probeStream(probe: Probe): Promise<StreamTiming> {
  return timeStream(probe, probe.body(), (headers) => checkCache(probe, headers.get('x-podgate-cache')))
}

function checkCache(probe: Probe, status: string | null): void {
  if (probe.cache !== undefined && status !== probe.cache) throw new Error(`${probe.name}: expected x-podgate-cache ${probe.cache}, got ${status}`)
}

/** Sends `body` until podgate answers it from the cache: the first call stores it (in `waitUntil`). */
async function storeAnswer(url: string, key: string, body: string): Promise<void> {
  for (let i = 0; i < 50; i++) {
    const res = await fetch(url, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body })
    await res.arrayBuffer()
    if (res.headers.get('x-podgate-cache') === 'HIT') return
    await sleep(50)
  }
  throw new Error('podgate never answered the repeated request from its cache')
}

/** The tools row is only meaningful if the answer really is a tool call with logprobs. */
async function checkToolAnswer(target: { url: string; headers: Record<string, string> }): Promise<void> {
  const res = await fetch(target.url, { method: 'POST', headers: { ...target.headers, 'content-type': 'application/json' }, body: typicalChat('chat-openai', {}, false, TOOLS_AND_LOGPROBS) })
  const body = (await res.json()) as { choices?: Array<{ message?: { tool_calls?: unknown[] }; logprobs?: unknown }> }
  const choice = body.choices?.[0]
  if (res.status !== 200 || !choice?.message?.tool_calls?.length || choice.logprobs == null) throw new Error(`tools + logprobs: podgate answered ${res.status} ${JSON.stringify(body).slice(0, 300)}`)
}

function withDirective(body: string, directive: string): string {
  const parsed = JSON.parse(body) as { messages: Array<{ content: string }> }
  parsed.messages[parsed.messages.length - 1]!.content += ` ${directive}`
  return JSON.stringify(parsed)
}

