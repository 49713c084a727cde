/**
 * Starts podgate the way a user does, `wrangler dev --env dev`, on a spare loopback port, in front of
 * a Runpod emulator served over HTTP. Used by the end-to-end tests (browsers, real clients, the
 * packed package), the load run and the benchmarks.
 */
import { spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { createRunpodEmulator } from '../../src/testing/index.ts'
import type { EmulatorOptions, RunpodEmulator } from '../../src/testing/index.ts'
import { serveNode } from './serve-node.ts'

export interface PodgateServerOptions {
  /** Extra `--var NAME:value` settings for the Worker (e.g. PODGATE_MODELS as JSON). */
  vars?: Record<string, string>
  /** Options for the emulator; ignored when `upstreamUrl` is given. */
  emulator?: EmulatorOptions
  /** Point podgate at this Runpod-shaped base URL (…/v2) instead of starting an emulator. */
  upstreamUrl?: string
  /** Wrangler config file. Default `wrangler.toml`. */
  config?: string
  /** Wrangler environment. Default `dev`. */
  env?: string
  /** Milliseconds to wait for the Worker to answer. Default 60000. */
  startTimeoutMs?: number
}

export interface PodgateServer {
  url: string
  adminToken: string
  emulator: RunpodEmulator | undefined
  emulatorUrl: string | undefined
  worker: ChildProcess
  /** Creates an API key through the admin API and returns it with its id. */
  createKey(body?: Record<string, unknown>): Promise<{ id: string; key: string }>
  close(): Promise<void>
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      const port = typeof address === 'object' && address ? address.port : 0
      server.close(() => resolve(port))
    })
  })
}

/**
 * A port picked free can be taken by another process before wrangler binds it (several e2e files
 * start servers at once), so a start that loses that race is tried again on new ports.
 */
export async function startPodgate(options: PodgateServerOptions = {}): Promise<PodgateServer> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(options)
    } catch (error) {
      if (attempt >= 3 || !/address already in use|EADDRINUSE/i.test(String(error))) throw error
    }
  }
}

async function startOnce(options: PodgateServerOptions): Promise<PodgateServer> {
  let emulator: RunpodEmulator | undefined
  let emulatorServer: { url: string; close(): Promise<void> } | undefined
  let upstream = options.upstreamUrl
  if (!upstream) {
    emulator = createRunpodEmulator(options.emulator)
    const em = emulator
    emulatorServer = await serveNode((request) => em.fetch(request), { port: 0, host: '127.0.0.1' })
    upstream = `${emulatorServer.url}/v2`
  }
  const port = await freePort()
  // Two wrangler dev processes at once would both try the default inspector port (9229).
  const inspectorPort = await freePort()
  const adminToken = `e2e_admin_${crypto.randomUUID().replaceAll('-', '')}`
  const vars: Record<string, string> = {
    RUNPOD_API_KEY: 'e2e-runpod-key-not-secret',
    RUNPOD_BASE_URL: upstream,
    PODGATE_ADMIN_TOKEN: adminToken,
    ...options.vars,
  }
  // Local KV, cache and Durable Object state of this start alone: removed by close().
  const persistTo = `.wrangler/e2e-${port}`
  const args = ['dev', '--config', options.config ?? 'wrangler.toml', '--env', options.env ?? 'dev', '--ip', '127.0.0.1', '--port', String(port), '--inspector-port', String(inspectorPort), '--show-interactive-dev-session=false', '--log-level', 'warn', '--persist-to', persistTo]
  for (const [name, value] of Object.entries(vars)) args.push('--var', `${name}:${value}`)
  const worker = spawn('wrangler', args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } })
  let output = ''
  worker.stdout?.on('data', (d: Buffer) => (output += d.toString()))
  worker.stderr?.on('data', (d: Buffer) => (output += d.toString()))
  const url = `http://127.0.0.1:${port}`

  const close = async () => {
    if (worker.exitCode === null) {
      const exited = new Promise((resolve) => worker.once('exit', resolve))
      worker.kill('SIGTERM')
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))])
      if (worker.exitCode === null) worker.kill('SIGKILL')
    }
    rmSync(persistTo, { recursive: true, force: true })
    await emulatorServer?.close()
  }

  const deadline = Date.now() + (options.startTimeoutMs ?? 60_000)
  for (;;) {
    if (worker.exitCode !== null) {
      await close()
      throw new Error(`wrangler dev exited with ${worker.exitCode}:\n${output.slice(-2000)}`)
    }
    try {
      const res = await fetch(`${url}/healthz`)
      if (res.ok) break
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await close()
      throw new Error(`podgate did not start within the timeout:\n${output.slice(-2000)}`)
    }
    await new Promise((r) => setTimeout(r, 150))
  }

  return {
    url,
    adminToken,
    emulator,
    emulatorUrl: emulatorServer?.url,
    worker,
    async createKey(body = { name: 'e2e' }) {
      const res = await fetch(`${url}/admin/keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      })
      if (res.status !== 201) throw new Error(`createKey: ${res.status} ${await res.text()}`)
      return (await res.json()) as { id: string; key: string }
    },
    close,
  }
}
