/**
 * Where a new isolate's first request goes: a fresh workerd with podgate's deploy bundle per sample
 * (its key already in persisted KV, as a deployed Worker finds it), then one request of a kind and a
 * second one, timed from the client. Each kind adds one piece of first-request work to the one before:
 * `healthz` (building the gateway from the environment, the router's first match), `models` (+ the key's
 * first KV read), `sampled` (+ the quota's first KV list and the first upstream call), `typical` (+ the
 * cache: the purge generations, the Cache API and KV lookups, the store).
 *
 * Usage: `npx node scripts/bench/first-requests.ts [starts]` (default 5 starts per kind).
 * `--profile[=kind]` (default `typical`): instead, V8's sampling profiler in the Worker's isolate over
 * that kind's first request, summed over the starts (the bundle not minified, so functions keep their
 * names), each start's profile saved as `.bench/first-requests/<kind>-<n>.cpuprofile`. Wall-clock samples: time the isolate waited inside a native call counts as that call's.
 */
import { rmSync, writeFileSync } from 'node:fs'
import { bundleResolver, summarizeProfile } from './cpu-profile.ts'
import { startProfiling } from './inspector.ts'
import { percentile } from './measure.ts'
import { freePort } from './processes.ts'
import { startUpstream } from './upstream.ts'
import { chatBody, typicalChat } from './wire.ts'
import { bundleWorker, startPodgate } from './workers.ts'

const args = process.argv.slice(2)
const profiled = args.find((arg) => arg.startsWith('--profile'))?.replace(/^--profile=?/, '') ?? undefined
const starts = Number(args.find((arg) => !arg.startsWith('--')) ?? 5)
const script = bundleWorker('.bench/first-requests/bundle', ['--env=', ...(profiled === undefined ? [] : ['--minify=false'])])
const upstream = await startUpstream()
const state = '.bench/first-requests/state'
rmSync(state, { recursive: true, force: true })
const start = (inspectorPort?: number) =>
  startPodgate({ script, runpodBaseUrl: `${upstream.url}/v2`, persistTo: state, label: 'first requests', ...(inspectorPort === undefined ? {} : { inspectorPort }) })
const seeding = await start()
const key = await seeding.createKey()
await seeding.stop()

const chat = (body: string) => (url: string) => fetch(`${url}/v1/chat/completions`, { method: 'POST', body, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' } })
const kinds: Record<string, (url: string) => Promise<Response>> = {
  healthz: (url) => fetch(`${url}/healthz`),
  models: (url) => fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${key}` } }),
  sampled: chat(chatBody('bench', { first: 0 })),
  typical: chat(typicalChat('bench', { first: 0 })),
}
const timed = async (send: () => Promise<Response>) => {
  const started = performance.now()
  const res = await send()
  await res.arrayBuffer()
  if (res.status !== 200) throw new Error(`first requests: HTTP ${res.status}`)
  return performance.now() - started
}

if (profiled !== undefined) {
  const kind = profiled || 'typical'
  const send = kinds[kind]
  if (!send) throw new Error(`first requests: no kind ${kind} (${Object.keys(kinds).join(', ')})`)
  const modules = new Map<string, number>()
  const functions = new Map<string, number>()
  const firsts: number[] = []
  let busy = 0
  for (let i = 0; i < starts; i++) {
    const inspectorPort = await freePort()
    const server = await start(inspectorPort)
    try {
      const recording = await startProfiling(inspectorPort, { isolate: 'core:user:', samplingIntervalUs: 50 })
      firsts.push(await timed(() => send(server.url)))
      const profile = (await recording.stop()).get('core:user:')
      if (!profile) throw new Error('the inspector listed no core:user: isolate')
      writeFileSync(`.bench/first-requests/${kind}-${i}.cpuprofile`, JSON.stringify(profile))
      const summary = summarizeProfile(profile, bundleResolver(script), 40)
      busy += summary.busyUs
      for (const m of summary.modules) modules.set(m.module, (modules.get(m.module) ?? 0) + m.us)
      for (const f of summary.functions) functions.set(`${f.name} ${f.where}`, (functions.get(`${f.name} ${f.where}`) ?? 0) + f.us)
    } finally {
      await server.stop()
    }
  }
  await upstream.close()
  const per = (us: number) => `${(us / starts / 1000).toFixed(2)} ms`
  console.log(`${kind}: first ${percentile(firsts, 50).toFixed(1)} ms (median of ${starts}, profiled), isolate busy ${per(busy)} per start`)
  console.log('by module (self time, mean per start):')
  for (const [module, us] of [...modules].sort((a, b) => b[1] - a[1]).slice(0, 20)) console.log(`  ${per(us).padStart(9)}  ${module}`)
  console.log('by function:')
  for (const [name, us] of [...functions].sort((a, b) => b[1] - a[1]).slice(0, 30)) console.log(`  ${per(us).padStart(9)}  ${name}`)
  process.exit(0)
}

const samples: Record<string, { ready: number[]; first: number[]; second: number[] }> = {}
for (let i = 0; i < starts; i++) {
  for (const [kind, send] of Object.entries(kinds)) {
    const server = await start()
    try {
      const first = await timed(() => send(server.url))
      const second = await timed(() => send(server.url))
      const row = (samples[kind] ??= { ready: [], first: [], second: [] })
      row.ready.push(server.readyMs)
      row.first.push(first)
      row.second.push(second)
    } finally {
      await server.stop()
    }
  }
}
await upstream.close()
const ms = (values: number[]) => `${percentile(values, 50).toFixed(1)} ms`
for (const [kind, row] of Object.entries(samples)) console.log(`${kind.padEnd(8)} ready ${ms(row.ready)}, first ${ms(row.first)}, second ${ms(row.second)} (median of ${starts})`)
process.exit(0)
