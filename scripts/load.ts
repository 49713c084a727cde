/**
 * `npm run load`: a bounded soak of podgate through `wrangler dev` against the Runpod emulator, on
 * loopback only.
 *
 * Sends N concurrent streams (default 240) across the three dev models with a fault mix (transient 503s
 * per endpoint, 429s, 500s, stalls, mid-stream failures, cold starts), then checks that every request
 * ended with the right answer (compared with the emulator's deterministic text) or the right error, that
 * no job is left running upstream, and that workerd's memory stayed flat. Prints a summary table and
 * exits non-zero on any wrong answer or leaked job.
 *
 *   npm run load [-- --requests 240 --rounds 4]
 */
import { spawn, execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { parseArgs } from 'node:util'
import { createParser } from 'eventsource-parser'
import { createRunpodEmulator, generateCompletion } from '../src/testing/index.ts'
import { serveNode } from './lib/serve-node.ts'

const { values } = parseArgs({ options: { requests: { type: 'string' }, rounds: { type: 'string' } } })
const REQUESTS = Math.min(Number(values.requests ?? 240), 1_000)
const ROUNDS = Math.min(Number(values.rounds ?? 4), 6)
const DEADLINE_MS = 60_000
const HOST = '127.0.0.1'
const MAX_TOKENS = 48

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
const TRANSIENT = 'upstream_error'
const SCENARIOS: Scenario[] = [
  { name: 'ok', directive: '', expect: 'full', weight: 40 },
  { name: 'cold start 1.5s', directive: '[[emulator:cold=1500]]', expect: 'full', weight: 10 },
  { name: 'slow tokens', directive: '[[emulator:delay=20,tokens=30]]', expect: 'full', weight: 10 },
  { name: '429', directive: '[[emulator:fault=http,status=429,retry_after=1]]', expect: 'error', codes: ['upstream_rate_limited', TRANSIENT], weight: 8 },
  { name: '500', directive: '[[emulator:fault=http,status=500]]', expect: 'error', codes: ['upstream_error'], weight: 8 },
  { name: 'stall', directive: '[[emulator:fault=stall,after=3,delay=10]]', expect: 'partial', codes: ['upstream_timeout'], weight: 8 },
  { name: 'mid-stream failure', directive: '[[emulator:fault=mid_stream,after=4,delay=10]]', expect: 'partial', codes: ['upstream_error'], weight: 8 },
  { name: 'job failed', directive: '[[emulator:fault=job_failed]]', expect: 'error', codes: ['upstream_error'], weight: 8 },
]
const MODELS = ['chat-openai', 'chat-classic', 'chat-current']
const RESILIENCE = { retries: { attempts: 3, baseDelayMs: 50, maxDelayMs: 500, budgetMs: 5_000 }, ttftBudgetMs: 5_000, timeouts: { firstTokenMs: 20_000, idleMs: 5_000, totalMs: 30_000 } }
const MODEL_CONFIG = {
  'chat-openai': { endpoints: [{ endpointId: 'vllmopenai' }, { endpointId: 'vllmopenaib' }], mode: 'openai', resilience: RESILIENCE },
  'chat-classic': { endpoints: [{ endpointId: 'vllmclassic' }, { endpointId: 'vllmclassicb' }], mode: 'native', resilience: RESILIENCE },
  'chat-current': { endpoints: [{ endpointId: 'vllmcurrent' }, { endpointId: 'vllmcurrentb' }], mode: 'native', resilience: RESILIENCE },
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.listen(0, HOST, () => {
      const address = server.address()
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))))
    })
  })
}

function rssKiB(pid: number): number {
  // workerd runs as a child of wrangler: sum the RSS of every workerd process under it.
  try {
    const out = execFileSync('ps', ['-eo', 'pid,ppid,rss,comm'], { encoding: 'utf8' })
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
    return rows.filter(([p, , , comm]) => tree.has(Number(p)) && comm?.includes('workerd')).reduce((sum, row) => sum + Number(row[2]), 0)
  } catch {
    return 0
  }
}

const emulator = createRunpodEmulator({ maxCalls: 50_000 })
const upstream = await serveNode((request) => emulator.fetch(request), { port: 0, host: HOST, onError: () => undefined })
const port = await freePort()
const adminToken = randomBytes(24).toString('hex')
mkdirSync('.wrangler', { recursive: true })
writeFileSync('.wrangler/load.env', `PODGATE_ADMIN_TOKEN="${adminToken}"\n`, { mode: 0o600 })
// Bundle once and serve that file: `wrangler dev` would otherwise rebuild (and restart, dropping every
// open stream) whenever a source file changes during the run.
const build = spawn('wrangler', ['deploy', '--dry-run', '--env', 'dev', '--outdir', '.wrangler/load-build'], { stdio: 'ignore', env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } })
if ((await new Promise<number | null>((resolve) => build.on('exit', resolve))) !== 0) {
  console.error('load: bundling the Worker failed (wrangler deploy --dry-run)')
  await upstream.close()
  process.exit(2)
}
const wrangler = spawn('wrangler', [
  'dev', '.wrangler/load-build/podgate.js', '--no-bundle', '--env', 'dev', '--ip', HOST, '--port', String(port), '--show-interactive-dev-session=false',
  '--env-file', '.wrangler/load.env', '--persist-to', '.wrangler/load-state',
  '--var', 'RUNPOD_API_KEY:emulator-no-secret', '--var', `RUNPOD_BASE_URL:${upstream.url}/v2`,
  '--var', `PODGATE_MODELS:${JSON.stringify(MODEL_CONFIG)}`,
], { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } })
const base = `http://${HOST}:${port}`

async function shutdown(code: number): Promise<never> {
  wrangler.kill('SIGTERM')
  await upstream.close()
  rmSync('.wrangler/load.env', { force: true })
  rmSync('.wrangler/load-state', { recursive: true, force: true })
  rmSync('.wrangler/load-build', { recursive: true, force: true })
  process.exit(code)
}

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
const rss: number[] = [rssKiB(workerdPid)]
const results: Result[] = []
const begun = Date.now()
for (let round = 0; round < ROUNDS && Date.now() - begun < DEADLINE_MS; round++) {
  // Transient per-endpoint failures: the first calls of each round fail once and must be retried.
  emulator.configure('vllmopenai', { fault: { kind: 'http', status: 503, times: 10, ops: ['openai'] } })
  emulator.configure('vllmcurrent', { fault: { kind: 'http', status: 503, times: 10, ops: ['run'] } })
  results.push(...(await Promise.all(Array.from({ length: REQUESTS }, (_, i) => one(i, round)))))
  rss.push(rssKiB(workerdPid))
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
// Round 1 warms the isolate up; after it, each round's RSS growth must not exceed the first one's: V8
// grows its heap lazily, so a leak shows as growth that keeps up or accelerates, a warm heap as growth that fades.
const deltas = rss.slice(2).map((value, i) => value - rss[i + 1]!)
const growth = (rss.at(-1) ?? 0) - (rss[1] ?? 0)
console.log(`\nwrong answers: ${wrong.length}   leaked jobs: ${leaked.length}   upstream cancels: ${cancels}   upstream calls: ${emulator.calls.length}`)
console.log(`workerd RSS (KiB) after each round: ${rss.join(' -> ')}; growth per round after warm-up: ${deltas.join(', ') || 'n/a'} (total ${growth})`)
for (const w of wrong.slice(0, 10)) console.log(`  wrong: ${w.scenario} on ${w.model}: ${w.why}`)
for (const job of leaked.slice(0, 10)) {
  const calls = emulator.calls.filter((c) => c.jobId === job.id).map((c) => `${c.op}:${c.status}`).join(' ')
  console.log(`  leaked: ${job.id} on ${job.endpointId} (${job.status}) ${JSON.stringify(job.input).slice(0, 120)} calls: ${calls}`)
}
const memoryFlat = deltas.length < 2 || deltas.at(-1)! <= Math.max(deltas[0]!, 16 * 1024)
if (!memoryFlat) console.log('workerd memory growth per round is not fading: a leak?')
await shutdown(wrong.length === 0 && leaked.length === 0 && memoryFlat ? 0 : 1)
