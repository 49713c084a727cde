import { bundleWorker, startWorker } from './workers.ts'
import { startUpstream } from './upstream.ts'
const upstream = await startUpstream()
const script = bundleWorker('.bench/cpu-bundle', ['--env', 'dev', 'scripts/bench/cpu-worker/worker.ts'])
const server = await startWorker({ script, label: 'cpu worker', bindings: {}, quota: true })
for (const q of (process.env.HOPS ?? 'tee-tick').split(' ')) {
  const res = await fetch(`${server.url}/hop?mode=${q}&upstream=${encodeURIComponent(`${upstream.url}/v1/chat/completions`)}`)
  const text = await res.text()
  console.log(q, text.length, JSON.stringify(text.slice(-80)))
}
await new Promise((r) => setTimeout(r, 500))
console.log(await (await fetch(`${server.url}/hop?mode=stats`)).text())
await server.stop(); await upstream.close()
