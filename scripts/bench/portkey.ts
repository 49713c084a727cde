/**
 * Portkey's open-source gateway as a side-by-side peer: installed into `.bench/portkey` (git-ignored,
 * outside podgate's dependencies) and started on loopback. See `../../../shared/peers/portkey.md`.
 */
import { execFileSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { freePort, start, waitForHttp } from './processes.ts'
import type { Spawned } from './processes.ts'

const PREFIX = resolve('.bench/portkey')
const ENTRY = join(PREFIX, 'node_modules/@portkey-ai/gateway/build/start-server.js')

export interface Portkey {
  url: string
  version: string
  process: Spawned
}

/** Installs Portkey once; later runs reuse the install. Throws with npm's message when it fails. */
export function installPortkey(): void {
  if (existsSync(ENTRY)) return
  mkdirSync(PREFIX, { recursive: true })
  // With @hono/node-server newer than 1.13.5 its streaming path fails (`TypeError: immutable`, Portkey issue #1389).
  writeFileSync(
    join(PREFIX, 'package.json'),
    JSON.stringify({ name: 'podgate-bench-portkey', private: true, dependencies: { '@portkey-ai/gateway': '*' }, overrides: { '@hono/node-server': '1.13.5' } }, null, 2),
  )
  execFileSync('npm', ['install', '--prefix', PREFIX, '--no-audit', '--no-fund', '--loglevel=error'], { stdio: 'pipe', timeout: 180_000 })
}

export async function startPortkey(): Promise<Portkey> {
  installPortkey()
  const port = await freePort()
  const version = (JSON.parse(readFileSync(join(PREFIX, 'node_modules/@portkey-ai/gateway/package.json'), 'utf8')) as { version: string }).version
  const proc = start(process.execPath, ['--require', resolve('scripts/bench/loopback-preload.cjs'), ENTRY, `--port=${port}`, '--headless'])
  const url = `http://127.0.0.1:${port}`
  await waitForHttp(`${url}/`, proc, 60_000)
  return { url, version, process: proc }
}

/** The headers that make Portkey proxy to an OpenAI-compatible host; it forwards the bearer as is. */
export function portkeyHeaders(upstreamUrl: string): Record<string, string> {
  return { 'x-portkey-provider': 'openai', 'x-portkey-custom-host': `${upstreamUrl}/v1`, authorization: 'Bearer bench' }
}
