/**
 * BENCHMARKS.md sections for cold start (issue 14 item 5) and the feature rows (item 6): each row
 * names what podgate did and what it is compared with, so a difference is never read against the
 * wrong baseline.
 */
import type { ColdStartResult } from './cold-start.ts'
import type { FeatureResults } from './features.ts'
import type { Percentiles } from './report.ts'
import { ms, over } from './targets.ts'

export function renderColdStart(lines: string[], c: ColdStartResult): void {
  lines.push('## Cold start', '')
  lines.push(
    `${c.starts} starts each, podgate and the floor alternating which goes first; medians. Each start constructs a new Miniflare (a new workerd process), as the bench starts every Worker, ` +
      "then sends the typical chat call (JSON, cacheable and new) to an upstream that answers at once, then a second one. podgate's key is in a persisted KV directory every start reads, as a deployed Worker finds its keys in KV.",
    '',
    '| Worker | ready: spawn → listening | first request | second request | ready + first request |',
    '|---|---|---|---|---|',
  )
  for (const [name, s] of [['workerd floor (pass-through Worker)', c.floor], ['podgate', c.podgate]] as const) {
    lines.push(`| ${name} | ${ms(s.readyMs)} | ${ms(s.firstMs)} | ${ms(s.secondMs)} | ${ms(s.totalMs)} |`)
  }
  lines.push(
    '',
    `"Ready" covers spawning workerd, loading its config, and compiling and evaluating the Worker's script (workerd evaluates the modules at startup): podgate's minus the floor's is ${ms(c.podgate.readyMs - c.floor.readyMs)}. ` +
      `Its first request costs ${ms(c.podgate.firstMs - c.podgate.secondMs)} more than its second (the floor's: ${ms(c.floor.firstMs - c.floor.secondMs)}): the work podgate does once, on the first request (building the gateway from the environment, the first KV reads, first runs of its code), ` +
      "and the first use of Miniflare's local KV and Cache simulations.",
    '',
  )
}

interface Row {
  label: string
  table: Record<string, Percentiles>
  podgate: string
  base: string
  baseLabel: string
}

export function renderFeatureRows(lines: string[], f: FeatureResults): void {
  lines.push('## Feature rows', '')
  lines.push(
    `Each row is podgate doing one thing, against the floor in the same round-robin (${f.calls} JSON calls and ${f.streams} streams per target). ` +
      'Over the bench upstream: JSON calls answered after 10 ms, streams of 10 events (the first after 10 ms) for the first byte; the cache hits compare with the floor calling an upstream that answers at once, ' +
      'and their stored stream is 100 events, replayed against the floor relaying 100 events sent at once. ' +
      `The strict key's quota was counted by the \`${f.strictStore.store}\` store (${f.strictStore.requests} requests today, from its usage route).`,
    '',
    '| Row | podgate p50 | compared with | its p50 | podgate − it, p50 | podgate p99 | its p99 |',
    '|---|---|---|---|---|---|---|',
  )
  const floor10 = 'the floor, upstream 10 ms'
  const instant = 'the floor, upstream answering at once'
  const rows: Row[] = [
    { label: 'JSON: a new deterministic call (a `seed`: cache lookup, miss, store), KV quota store', table: f.json, podgate: 'podgate', base: 'floor', baseLabel: floor10 },
    { label: 'JSON: the same, **strict quota store** (Durable Object)', table: f.json, podgate: 'podgate, strict quota', base: 'floor', baseLabel: floor10 },
    { label: 'JSON: a call the cache skips (temperature 0.7, no seed: no lookup, no store)', table: f.json, podgate: 'podgate, cache skipped', base: 'floor', baseLabel: floor10 },
    { label: 'JSON: **cache HIT**', table: f.json, podgate: 'podgate, cache hit', base: 'floor, instant upstream', baseLabel: instant },
    { label: 'JSON: cache HIT', table: f.json, podgate: 'podgate, cache hit', base: 'floor', baseLabel: floor10 },
    { label: 'Stream first byte: a new deterministic call (lookup, miss, store), KV quota store', table: f.first, podgate: 'podgate', base: 'floor', baseLabel: floor10 },
    { label: 'Stream first byte: the same, **strict quota store**', table: f.first, podgate: 'podgate, strict quota', base: 'floor', baseLabel: floor10 },
    { label: 'Stream first byte: a call the cache skips', table: f.first, podgate: 'podgate, cache skipped', base: 'floor', baseLabel: floor10 },
    { label: 'Stream first byte: **cache HIT, SSE replay**', table: f.first, podgate: 'podgate, cache hit', base: 'floor, instant upstream', baseLabel: instant },
    { label: 'Stream last byte (100 events): **cache HIT, SSE replay**', table: f.last, podgate: 'podgate, cache hit', base: 'floor, instant upstream', baseLabel: instant },
    { label: '*Lower bound*, JSON: the least gateway on podgate\'s stack (Hono, podgate\'s chat schema in zod/mini, a key `Map`, the answer read for its usage), no podgate code', table: f.json, podgate: 'least gateway, Hono', base: 'floor', baseLabel: floor10 },
    { label: '*Lower bound*, JSON: the same with each feature podgate\'s rows run with at its least (a request id; the key found by its SHA-256 in a `Map`; minute and day counts checked, published to KV once a second, settled from the usage; the eight rate-limit fields; an upstream timeout; no cache, which the sampled calls of the target rows skip)', table: f.json, podgate: 'least gateway, Hono, each feature at its least', base: 'floor', baseLabel: floor10 },
    { label: '*Lower bound*, stream first byte: the least gateway that tees the stream for its usage and answers at once', table: f.first, podgate: 'least gateway, answers at once', base: 'floor', baseLabel: floor10 },
    { label: '*Lower bound*, stream first byte: the same, waiting for the first chunk before answering (as podgate does, to fail over)', table: f.first, podgate: 'least gateway, waits for the first chunk', base: 'floor', baseLabel: floor10 },
    { label: '*Lower bound*, stream first byte: the least Hono gateway waiting for the first chunk, with each feature at its least (as in the JSON row above)', table: f.first, podgate: 'least gateway, Hono, each feature at its least', base: 'floor', baseLabel: floor10 },
    { label: 'Emulator, JSON: typical call, no tools', table: f.json, podgate: 'emulator: podgate', base: 'emulator: floor', baseLabel: 'the floor relaying the emulator' },
    { label: 'Emulator, JSON: **tools + `tool_choice` + `logprobs`, `top_logprobs: 2`**', table: f.json, podgate: 'emulator: podgate, tools + logprobs', base: 'emulator: floor, tools + logprobs', baseLabel: 'the floor, same request' },
    { label: 'Emulator, stream first byte: typical call, no tools', table: f.first, podgate: 'emulator: podgate', base: 'emulator: floor', baseLabel: 'the floor relaying the emulator' },
    { label: 'Emulator, stream first byte: **tools + logprobs**', table: f.first, podgate: 'emulator: podgate, tools + logprobs', base: 'emulator: floor, tools + logprobs', baseLabel: 'the floor, same request' },
  ]
  for (const row of rows) {
    const podgate = row.table[row.podgate]
    const base = row.table[row.base]
    lines.push(`| ${row.label} | ${ms(podgate?.p50)} | ${row.baseLabel} | ${ms(base?.p50)} | ${ms(over(row.table, row.podgate, row.base))} | ${ms(podgate?.p99)} | ${ms(base?.p99)} |`)
  }
  lines.push(
    '',
    'A cache miss stores the answer from `waitUntil`. In Miniflare that write is not free for the answer beside it: KV and the Cache API are simulated in the same workerd process, ' +
      'and a floor that also writes its answer to either in `waitUntil` answers about 2.4 ms later (nothing when the write starts 3 ms after the answer; ' +
      '`npx node scripts/bench/miss-probe.ts`), so of what the miss rows add over the call the cache skips, the two writes are about 4.5 ms and the lookup, key and capture about 1 ms (scripts/bench/NOTES.md).',
    '',
    'The *lower bound* rows are no podgate feature: they are the least a gateway on this runtime does (scripts/bench/least-gateway/), ' +
      "so podgate's added latency reads against what the stack and the first-chunk wait cost by themselves (issue 14 item 3; scripts/bench/NOTES.md).",
    '',
    'The emulator rows run over the Runpod emulator (`podgate/testing`, on node:http in the bench process), through a podgate and a floor of their own; the floor posts to the emulator\'s OpenAI route ' +
      '(`/v2/vllmopenai/openai/v1/chat/completions`), podgate to its `chat-openai` model on the same endpoint. The tools request carries one function tool, `tool_choice: "auto"`, ' +
      '`logprobs: true` and `top_logprobs: 2`; the bench checks that podgate answers it with a tool call and logprobs.',
    '',
  )

  const n = f.native
  lines.push(
    '### The native `/run` + `/stream` path',
    '',
    `One streamed chat answer of ${n.tokens} tokens from the emulator (no delay per token), per target and repetition, ${n.reps} repetitions after a warm-up, medians. ` +
      "podgate's `chat-current` and `chat-classic` models are `mode: \"native\"`: podgate queues a job with `/run` and long-polls `/stream`, and rebuilds OpenAI chunks (a page's events go out as one write). " +
      "**What is compared**: the floor relays the emulator's OpenAI-route stream of the same answer (the same vLLM text, one event per token, with no job API in between), " +
      "so the floor row is what a Worker pays to pass that stream through, and podgate's OpenAI-route row is podgate relaying the very stream the floor relays. CPU is the serving workerd's, " +
      'from the request until 100 ms after the end (so the cache write counts), per event the client received and per completion token (worker-vllm ≤ 2.23 sends tokens in batches, which podgate relays as one event each).',
    '',
    '| Path | events | tokens | events/s | tokens/s | CPU per event | CPU per token |',
    '|---|---|---|---|---|---|---|',
  )
  const us = (value: number | undefined) => (value === undefined ? '— (runs in the bench process)' : `${value.toFixed(1)} µs`)
  for (const [name, run] of Object.entries(n.runs)) {
    lines.push(`| ${name} | ${run.events} | ${run.tokens} | ${Math.round(run.eventsPerSecond).toLocaleString('en-US')} | ${Math.round(run.tokensPerSecond).toLocaleString('en-US')} | ${us(run.cpuPerEventUs)} | ${us(run.cpuPerTokenUs)} |`)
  }
  lines.push('')
}
