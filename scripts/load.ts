/**
 * `npm run load`: a bounded soak of podgate through `wrangler dev` against the Runpod emulator, on
 * loopback only.
 *
 * Sends N concurrent streams (default 240) across the three dev models with a fault mix (transient 503s
 * per endpoint, 429s, 500s, stalls, mid-stream failures, cold starts), then checks that every request
 * ended with the right answer (compared with the emulator's deterministic text) or the right error, that
 * no job is left running upstream, and that the Worker's memory stayed flat: judged from heap snapshots
 * of its isolate taken through devtools after a forced GC (request contexts still alive, live heap), not
 * from RSS, which is printed for both workerd processes but also counts miniflare's storage simulators,
 * wrangler's proxy and pages the allocator keeps. Prints a summary table and exits non-zero on any wrong
 * answer, leaked job or memory that is not flat.
 *
 *   npm run load [-- --requests 240 --rounds 4]
 *
 * `LOAD_WRANGLER_LOG=file` keeps wrangler's output (the Worker's log lines); `LOAD_HEAP_SNAPSHOTS=dir` keeps
 * the Worker's heap snapshots.
 */
import { spawn, execFileSync } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdirSync, openSync, rmSync, writeFileSync } from 'node:fs'
import { request as httpRequest } from 'node:http'
import type { Duplex } from 'node:stream'
import { parseArgs } from 'node:util'
import { createParser } from 'eventsource-parser'
import { createRunpodEmulator, generateCompletion } from '../src/testing/index.ts'
import { freePort } from './lib/podgate-server.ts'
import { serveNode } from './lib/serve-node.ts'

const USAGE = 'usage: npm run load [-- --requests 240 --rounds 4]  (requests 1-1000 per round, rounds 1-6)'
/** `--name`'s value as a whole number from 1 up (at most `max`), else the default; anything else stops the script before it starts. */
function count(values: Record<string, string | undefined>, name: string, fallback: number, max: number): number {
  const text = values[name] ?? String(fallback)
  // Not Number(): '' and ' ' are 0, and NaN or 0 ran a soak of nothing that passed.
  if (/^\d+$/.test(text) && Number(text) >= 1) return Math.min(Number(text), max)
  console.error(`load: --${name} ${text}: give a whole number from 1 to ${max}\n${USAGE}`)
  process.exit(2)
}
let values: Record<string, string | undefined>
try {
  ;({ values } = parseArgs({ options: { requests: { type: 'string' }, rounds: { type: 'string' } } }))
} catch (error) {
  console.error(`load: ${error instanceof Error ? error.message : String(error)}\n${USAGE}`)
  process.exit(2)
}
const REQUESTS = count(values, 'requests', 240, 1_000)
const ROUNDS = count(values, 'rounds', 4, 6)
const DEADLINE_MS = 60_000
const HOST = '127.0.0.1'
const MAX_TOKENS = 48
/** Growth in request contexts alive after a GC between the first and last reading: the rounds' `waitUntil` stragglers. */
const MAX_CONTEXT_GROWTH = 2
/** Live heap growth between the first and last reading, in KiB: code V8 compiles late, caches filling up. */
const MAX_HEAP_GROWTH_KIB = 4 * 1024

/** What a request is made to do, and what a correct answer to it looks like. */
interface Scenario {
  name: string
  directive: string
  /** `full`: the whole deterministic text and [DONE]; `partial`: a prefix of it and an error event with one of `codes`; `error`: an error with one of `codes` (HTTP, or an event on a stream opened with keep-alives only). */
  expect: 'full' | 'partial' | 'error'
  /** Error codes that are correct. */
  codes?: string[]
  weight: number
}

/** A request whose last attempt met a transient per-endpoint 503 (see the round set-up) ends with it, correctly. */
const TRANSIENT = 'service_unavailable'
const SCENARIOS: Scenario[] = [
  { name: 'ok', directive: '', expect: 'full', weight: 40 },
  { name: 'cold start 1.5s', directive: '[[emulator:cold=1500]]', expect: 'full', weight: 10 },
  { name: 'slow tokens', directive: '[[emulator:delay=20,tokens=30]]', expect: 'full', weight: 10 },
  { name: '429', directive: '[[emulator:fault=http,status=429,retry_after=1]]', expect: 'error', codes: ['upstream_rate_limited', TRANSIENT], weight: 8 },
  { name: '500', directive: '[[emulator:fault=http,status=500]]', expect: 'error', codes: ['upstream_error', TRANSIENT], weight: 8 },
  { name: 'stall', directive: '[[emulator:fault=stall,after=3,delay=10]]', expect: 'partial', codes: ['upstream_timeout'], weight: 8 },
  { name: 'mid-stream failure', directive: '[[emulator:fault=mid_stream,after=4,delay=10]]', expect: 'partial', codes: ['upstream_error'], weight: 8 },
  { name: 'job failed', directive: '[[emulator:fault=job_failed]]', expect: 'error', codes: ['upstream_error', TRANSIENT], weight: 8 },
]
const MODELS = ['chat-openai', 'chat-classic', 'chat-current']
const RESILIENCE = { retries: { attempts: 3, baseDelayMs: 50, maxDelayMs: 500, budgetMs: 5_000 }, ttftBudgetMs: 5_000, timeouts: { firstTokenMs: 20_000, idleMs: 5_000, totalMs: 30_000 } }
const MODEL_CONFIG = {
  'chat-openai': { endpoints: [{ endpointId: 'vllmopenai' }, { endpointId: 'vllmopenaib' }], mode: 'openai', resilience: RESILIENCE },
  'chat-classic': { endpoints: [{ endpointId: 'vllmclassic' }, { endpointId: 'vllmclassicb' }], mode: 'native', resilience: RESILIENCE },
  'chat-current': { endpoints: [{ endpointId: 'vllmcurrent' }, { endpointId: 'vllmcurrentb' }], mode: 'native', resilience: RESILIENCE },
}


/** RSS of the workerd processes under wrangler, in KiB: the one running the Worker, and wrangler's own proxy. */
function rssKiB(pid: number): { worker: number; proxy: number } {
  try {
    const out = execFileSync('ps', ['-eo', 'pid,ppid,rss,args'], { encoding: 'utf8' })
    const rows = out.trim().split('\n').slice(1).map((line) => line.trim().split(/\s+/))
    const children = new Map<number, number[]>()
    for (const [p, pp] of rows) children.set(Number(pp), [...(children.get(Number(pp)) ?? []), Number(p)])
    const tree = new Set<number>()
    const stack = [pid]
    while (stack.length > 0) {
      const next = stack.pop()!
      tree.add(next)
      stack.push(...(children.get(next) ?? []))
    }
    const sum = { worker: 0, proxy: 0 }
    for (const [p, , kib, command, ...args] of rows) {
      if (!tree.has(Number(p)) || !command?.endsWith('workerd')) continue
      // wrangler starts two: the Worker's (with miniflare's KV and Cache simulators) takes the inspector.
      sum[args.some((a) => a.startsWith('--inspector-addr')) ? 'worker' : 'proxy'] += Number(kib)
    }
    return sum
  } catch {
    return { worker: 0, proxy: 0 }
  }
}

/**
 * A devtools session over a bare WebSocket. Built on `node:http` because wrangler's inspector proxy
 * wants an `Origin` header that the WHATWG WebSocket cannot set. Enough of RFC 6455 for a short session.
 */
async function devtools(url: string): Promise<{ call: (method: string) => Promise<Record<string, unknown>>; close: () => void; snapshot: () => string }> {
  const socket = await new Promise<Duplex>((resolve, reject) => {
    const req = httpRequest(url.replace(/^ws/, 'http'), {
      headers: { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': randomBytes(16).toString('base64'), origin: 'http://localhost' },
    })
    req.on('upgrade', (_res, upgraded: Duplex, head: Buffer) => {
      if (head.length > 0) upgraded.unshift(head)
      resolve(upgraded)
    })
    req.on('response', (res) => reject(new Error(`devtools answered ${res.statusCode}`)))
    req.on('error', reject)
    req.end()
  })
  const replies = new Map<number, (result: Record<string, unknown>) => void>()
  let closed = (_error: Error) => undefined as void
  const ended = new Promise<never>((_, reject) => (closed = reject))
  ended.catch(() => undefined)
  const chunks: string[] = []
  let buffer = Buffer.alloc(0)
  let message = Buffer.alloc(0)
  socket.on('data', (chunk: Buffer) => {
    buffer = Buffer.concat([buffer, chunk])
    for (;;) {
      if (buffer.length < 2) return
      const fin = (buffer[0]! & 0x80) !== 0
      let length = buffer[1]! & 0x7f
      let offset = 2
      if ((buffer[0]! & 0x0f) > 2) {
        if (buffer.length < 2 + length) return
        // Closed (wrangler's proxy takes one client at a time, 1013 for the next): fail now, to retry.
        if ((buffer[0]! & 0x0f) === 8) closed(new Error(`devtools closed the session (${length >= 2 ? buffer.readUInt16BE(2) : 'no code'})`))
        // A ping: nothing to answer for a session this short.
        buffer = buffer.subarray(2 + length)
        continue
      }
      if (length === 126) [length, offset] = [buffer.length >= 4 ? buffer.readUInt16BE(2) : Infinity, 4]
      else if (length === 127) [length, offset] = [buffer.length >= 10 ? Number(buffer.readBigUInt64BE(2)) : Infinity, 10]
      if (buffer.length < offset + length) return
      message = Buffer.concat([message, buffer.subarray(offset, offset + length)])
      buffer = buffer.subarray(offset + length)
      if (!fin) continue
      const parsed = JSON.parse(message.toString('utf8')) as { id?: number; method?: string; params?: { chunk?: string }; result?: Record<string, unknown> }
      message = Buffer.alloc(0)
      if (parsed.method === 'HeapProfiler.addHeapSnapshotChunk') chunks.push(parsed.params?.chunk ?? '')
      if (parsed.id !== undefined) replies.get(parsed.id)?.(parsed.result ?? {})
    }
  })
  socket.on('error', () => undefined)
  // Far from the ids wrangler's proxy uses for its own messages to the runtime.
  let id = 1_000_000
  const frame = (opcode: number, payload: Buffer) => {
    const mask = randomBytes(4)
    const header = payload.length < 126 ? Buffer.from([0x80 | opcode, 0x80 | payload.length]) : Buffer.from([0x80 | opcode, 0x80 | 126, payload.length >> 8, payload.length & 0xff])
    socket.write(Buffer.concat([header, mask, payload.map((byte, i) => byte ^ mask[i % 4]!)]))
  }
  return {
    call(method) {
      const reply = new Promise<Record<string, unknown>>((resolve) => replies.set(++id, resolve))
      frame(1, Buffer.from(JSON.stringify({ id, method })))
      return Promise.race([reply, ended, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`${method} timed out`)), method === 'HeapProfiler.takeHeapSnapshot' ? 30_000 : 3_000))])
    },
    // A close frame, not only a dropped socket: the proxy frees its one client slot when it sees it.
    close() {
      frame(8, Buffer.from([0x03, 0xe8]))
      socket.end()
    },
    snapshot: () => chunks.splice(0).join(''),
  }
}

interface HeapReading {
  /** Live JS heap after a forced GC, in KiB. */
  usedKiB: number
  /** Request contexts (workerd `ExecutionContext`s) still alive after it: each is a request's state kept past its end. */
  contexts: number
}

/**
 * The Worker isolate's heap after a full GC, asked through devtools (`--inspector-port`). RSS alone cannot
 * tell a leak from V8 and the allocator keeping freed pages, from miniflare's storage in the same process,
 * or from wrangler's proxy; a heap snapshot can: once every request and its `waitUntil` work has ended, no
 * request context may survive a GC. `LOAD_HEAP_SNAPSHOTS=dir` keeps the snapshots for devtools.
 */
async function readHeap(inspectorPort: number, label: string): Promise<HeapReading | undefined> {
  // wrangler's inspector proxy drops what a new session sends before it has reached the runtime: try again.
  for (let attempt = 1; attempt <= 2; attempt++) {
    const reading = await readHeapOnce(inspectorPort, label, attempt === 2)
    if (reading) return reading
    await new Promise((r) => setTimeout(r, 1_000))
  }
  return undefined
}

async function readHeapOnce(inspectorPort: number, label: string, report: boolean): Promise<HeapReading | undefined> {
  try {
    const targets = (await (await fetch(`http://${HOST}:${inspectorPort}/json`)).json()) as { webSocketDebuggerUrl?: string }[]
    const url = targets.find((t) => t.webSocketDebuggerUrl)?.webSocketDebuggerUrl
    if (!url) return undefined
    const session = await devtools(url)
    try {
      await session.call('HeapProfiler.collectGarbage')
      const usage = await session.call('Runtime.getHeapUsage')
      await session.call('HeapProfiler.takeHeapSnapshot')
      const text = session.snapshot()
      if (process.env.LOAD_HEAP_SNAPSHOTS) writeFileSync(`${process.env.LOAD_HEAP_SNAPSHOTS}/${label}.heapsnapshot`, text)
      const snapshot = JSON.parse(text) as { snapshot: { meta: { node_fields: string[] } }; nodes: number[]; strings: string[] }
      const fields = snapshot.snapshot.meta.node_fields
      const nameAt = fields.indexOf('name')
      const context = snapshot.strings.indexOf('workerd / ExecutionContext')
      let contexts = 0
      for (let i = nameAt; i < snapshot.nodes.length; i += fields.length) if (snapshot.nodes[i] === context) contexts++
      return typeof usage.usedSize === 'number' ? { usedKiB: Math.round(usage.usedSize / 1024), contexts } : undefined
    } finally {
      session.close()
    }
  } catch (error) {
    if (report) console.error(`load: reading the Worker heap failed: ${String(error)}`)
    return undefined
  }
}

const emulator = createRunpodEmulator({ maxCalls: 50_000 })
const upstream = await serveNode((request) => emulator.fetch(request), { port: 0, host: HOST, onError: () => undefined })
const port = await freePort()
const inspectorPort = await freePort()
const adminToken = randomBytes(24).toString('hex')
mkdirSync('.wrangler', { recursive: true })
writeFileSync('.wrangler/load.env', `PODGATE_ADMIN_TOKEN="${adminToken}"\n`, { mode: 0o600 })
// Bundle once and serve that file: `wrangler dev` would otherwise rebuild (and restart, dropping every
// open stream) whenever a source file changes during the run.
/** What runs now (the bundling, then wrangler dev): stopped by `shutdown`, also on a signal. */
let child: ChildProcess = spawn('wrangler', ['deploy', '--dry-run', '--env', 'dev', '--outdir', '.wrangler/load-build'], { stdio: 'ignore', env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } })
const build = child
let stopping: Promise<never> | undefined

/** Stops wrangler (and its workerd) and waits for it, so nothing is left on the ports, then exits with `code`. Once. */
function shutdown(code: number): Promise<never> {
  return (stopping ??= (async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve))
      child.kill('SIGTERM')
      const stuck = setTimeout(() => child.kill('SIGKILL'), 5_000)
      await exited
      clearTimeout(stuck)
    }
    await upstream.close()
    rmSync('.wrangler/load.env', { force: true })
    rmSync('.wrangler/load-state', { recursive: true, force: true })
    rmSync('.wrangler/load-build', { recursive: true, force: true })
    process.exit(code)
  })())
}
// A signal to npm alone (a process manager's or IDE's "stop") reaches only this script (`exec node`): it stops wrangler too.
for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143], ['SIGHUP', 129]] as const) process.on(signal, () => void shutdown(code))
if ((await new Promise<number | null>((resolve) => build.on('exit', resolve))) !== 0) {
  console.error('load: bundling the Worker failed (wrangler deploy --dry-run)')
  await shutdown(2)
}
const wrangler = child = spawn('wrangler', [
  'dev', '.wrangler/load-build/dev.js', '--no-bundle', '--env', 'dev', '--ip', HOST, '--port', String(port), '--inspector-port', String(inspectorPort), '--show-interactive-dev-session=false',
  '--env-file', '.wrangler/load.env', '--persist-to', '.wrangler/load-state',
  '--var', 'RUNPOD_API_KEY:emulator-no-secret', '--var', `RUNPOD_BASE_URL:${upstream.url}/v2`,
  '--var', `PODGATE_MODELS:${JSON.stringify(MODEL_CONFIG)}`,
], { stdio: ['ignore', process.env.LOAD_WRANGLER_LOG ? openSync(process.env.LOAD_WRANGLER_LOG, 'w') : 'ignore', 'inherit'], env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } })
const base = `http://${HOST}:${port}`

for (let i = 0; ; i++) {
  if (i > 300) {
    console.error('load: wrangler dev did not come up within 60 s')
    await shutdown(2)
  }
  try {
    if ((await fetch(`${base}/healthz`)).ok) break
  } catch {
    // not up yet
  }
  await new Promise((r) => setTimeout(r, 200))
}

const created = await fetch(`${base}/admin/keys`, { method: 'POST', headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' }, body: '{"name":"load"}' })
if (created.status !== 201) {
  console.error(`load: creating a key failed with ${created.status}`)
  await shutdown(2)
}
const { key } = (await created.json()) as { key: string }

interface Result {
  scenario: string
  model: string
  ok: boolean
  why?: string
  ms: number
}

async function one(index: number, round: number): Promise<Result> {
  let pick = (index * 7919 + round * 104729) % SCENARIOS.reduce((s, c) => s + c.weight, 0)
  const scenario = SCENARIOS.find((s) => (pick -= s.weight) < 0)!
  const model = MODELS[index % MODELS.length]!
  const content = `load ${round}-${index} ${scenario.directive}`
  const started = Date.now()
  const result = (ok: boolean, why?: string): Result => ({ scenario: scenario.name, model, ok, why, ms: Date.now() - started })
  const expected = generateCompletion({ messages: [{ role: 'user', content }], maxTokens: MAX_TOKENS, tokens: /tokens=(\d+)/.exec(scenario.directive)?.[1] ? Number(/tokens=(\d+)/.exec(scenario.directive)![1]) : undefined }).text
  try {
    const res = await fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content }], stream: true, max_tokens: MAX_TOKENS }),
      signal: AbortSignal.timeout(45_000),
    })
    if (res.status !== 200) {
      const body = (await res.json().catch(() => ({}))) as { error?: { code?: string } }
      if (scenario.expect === 'error' && scenario.codes?.includes(body.error?.code ?? '')) return result(true)
      return result(false, `HTTP ${res.status} ${body.error?.code}`)
    }
    let text = ''
    let done = false
    let error: string | undefined
    let afterEnd = false
    const parser = createParser({
      onEvent(event) {
        if (done || error) afterEnd = true
        if (event.data === '[DONE]') return void (done = true)
        const data = JSON.parse(event.data) as { error?: { code: string }; choices?: { delta?: { content?: string } }[] }
        if (data.error) error = data.error.code
        else text += data.choices?.[0]?.delta?.content ?? ''
      },
    })
    const decoder = new TextDecoder()
    const reader = res.body!.getReader()
    for (let next = await reader.read(); !next.done; next = await reader.read()) parser.feed(decoder.decode(next.value, { stream: true }))
    if (afterEnd) return result(false, 'events after the end')
    if (scenario.expect === 'full') return done && !error && text === expected ? result(true) : result(false, `full answer expected; done=${done} error=${error} textMatches=${text === expected}`)
    // Held past the TTFT budget, a stream opens with keep-alives; a failure before output is then an error event.
    if (scenario.expect === 'error') return !done && text === '' && scenario.codes?.includes(error ?? '') ? result(true) : result(false, `error ${scenario.codes} expected; done=${done} error=${error}`)
    if (scenario.expect === 'partial') {
      return !done && scenario.codes?.includes(error ?? '') && expected.startsWith(text) && text.length > 0 ? result(true) : result(false, `partial answer expected; done=${done} error=${error}`)
    }
    return result(false, 'unreachable')
  } catch (cause) {
    return result(false, `transport: ${String(cause)}`)
  }
}

const workerdPid = wrangler.pid!
const rss = [rssKiB(workerdPid)]
// The isolate's heap is read after each round but the first, which warms it up.
const heap: (HeapReading | undefined)[] = []
const results: Result[] = []
const begun = Date.now()
for (let round = 0; round < ROUNDS && Date.now() - begun < DEADLINE_MS; round++) {
  // Transient per-endpoint failures: the first calls of each round fail once and must be retried.
  emulator.configure('vllmopenai', { fault: { kind: 'http', status: 503, times: 10, ops: ['openai'] } })
  emulator.configure('vllmcurrent', { fault: { kind: 'http', status: 503, times: 10, ops: ['run'] } })
  results.push(...(await Promise.all(Array.from({ length: REQUESTS }, (_, i) => one(i, round)))))
  rss.push(rssKiB(workerdPid))
  // wrangler's devtools proxy drops the first session's messages: that one only attaches it.
  if (round === 0) await readHeapOnce(inspectorPort, 'attach', false)
  else heap.push(await readHeap(inspectorPort, `round-${round + 1}`))
}
const elapsed = Date.now() - begun

// Cancels and timeouts run in waitUntil: give them a moment, then nothing may be running upstream.
await new Promise((r) => setTimeout(r, 3_000))
const leaked = emulator.activeJobs()
const cancels = emulator.calls.filter((c) => c.op === 'cancel').length

const rows = new Map<string, { n: number; ok: number; ms: number[] }>()
for (const r of results) {
  const row = rows.get(r.scenario) ?? { n: 0, ok: 0, ms: [] }
  row.n++
  if (r.ok) row.ok++
  row.ms.push(r.ms)
  rows.set(r.scenario, row)
}
const p = (ms: number[], q: number) => [...ms].sort((a, b) => a - b)[Math.min(ms.length - 1, Math.floor(ms.length * q))] ?? 0
console.log(`\npodgate load: ${results.length} streams (${REQUESTS} concurrent x ${ROUNDS} rounds) in ${(elapsed / 1000).toFixed(1)} s, models ${MODELS.join(', ')}\n`)
console.log(['scenario'.padEnd(20), 'requests', 'correct', 'wrong', 'p50 ms', 'p95 ms'].join('  '))
for (const [name, row] of rows) {
  console.log([name.padEnd(20), String(row.n).padStart(8), String(row.ok).padStart(7), String(row.n - row.ok).padStart(5), String(p(row.ms, 0.5)).padStart(6), String(p(row.ms, 0.95)).padStart(6)].join('  '))
}
const wrong = results.filter((r) => !r.ok)
const series = (values: (number | undefined)[]) => values.map((v) => v ?? '?').join(' -> ')
console.log(`\nwrong answers: ${wrong.length}   leaked jobs: ${leaked.length}   upstream cancels: ${cancels}   upstream calls: ${emulator.calls.length}`)
console.log(`RSS (KiB) before and after each round: Worker's workerd ${series(rss.map((r) => r.worker))}; wrangler's proxy workerd ${series(rss.map((r) => r.proxy))}`)
console.log(`Worker isolate after a forced GC, after rounds 2 to ${ROUNDS}: live JS heap (KiB) ${series(heap.map((h) => h?.usedKiB))}; request contexts still alive ${series(heap.map((h) => h?.contexts))}`)
for (const w of wrong.slice(0, 10)) console.log(`  wrong: ${w.scenario} on ${w.model}: ${w.why}`)
for (const job of leaked.slice(0, 10)) {
  const calls = emulator.calls.filter((c) => c.jobId === job.id).map((c) => `${c.op}:${c.status}`).join(' ')
  console.log(`  leaked: ${job.id} on ${job.endpointId} (${job.status}) ${JSON.stringify(job.input).slice(0, 120)} calls: ${calls}`)
}
// RSS is not the verdict: it counts miniflare's KV and Cache simulators, V8 and the allocator keeping freed
// pages, and (in the proxy) wrangler itself. The Worker's own memory is flat when, round after round, no
// more request state survives a GC (a few contexts are the round's last `waitUntil` work) and the live
// heap stays near where the warm-up left it.
const first = heap.find((h) => h !== undefined)
const last = heap.findLast((h) => h !== undefined)
const memoryFlat = ROUNDS < 3 || (first !== undefined && last !== undefined && first !== last && last.contexts - first.contexts <= MAX_CONTEXT_GROWTH && last.usedKiB - first.usedKiB <= MAX_HEAP_GROWTH_KIB)
if (!memoryFlat) {
  console.log(
    first && last && first !== last
      ? `Worker memory is not flat: request contexts alive after a GC went ${first.contexts} -> ${last.contexts} (at most +${MAX_CONTEXT_GROWTH}), live heap ${first.usedKiB} -> ${last.usedKiB} KiB (at most +${MAX_HEAP_GROWTH_KIB}); rerun with LOAD_HEAP_SNAPSHOTS=dir and compare the snapshots in devtools`
      : 'Worker memory could not be read through devtools (need two readings: --rounds 3 or more)',
  )
}
await shutdown(wrong.length === 0 && leaked.length === 0 && memoryFlat ? 0 : 1)
