/**
 * Shared by the `npm run dev` tests: a checkout of this repo of its own for each run (links to the tree;
 * its own `.wrangler`, `.dev.vars` and, when left out of the links, `wrangler.toml`), and scripts/dev.ts
 * started in it with its output collected. The checkouts are removed after the importing file's tests.
 */
import { spawn } from 'node:child_process'
import type { ChildProcess, ChildProcessByStdio } from 'node:child_process'
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs'
import { createConnection } from 'node:net'
import type { Readable } from 'node:stream'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll } from 'vitest'

export const ROOT = resolve(import.meta.dirname, '../..')
const LINKED = ['node_modules', 'package.json', 'wrangler.toml', 'tsconfig.json', 'src', 'workers', 'scripts']
const dirs: string[] = []
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
})

/** A new checkout, `leaveOut` not linked (to write a file of the test's own in its place). */
export function devCheckout(name: string, leaveOut: string[] = []): string {
  const dir = mkdtempSync(join(tmpdir(), `podgate-${name}-`))
  dirs.push(dir)
  for (const file of LINKED) if (!leaveOut.includes(file)) symlinkSync(join(ROOT, file), join(dir, file))
  return dir
}

/** scripts/dev.ts started in `dir` (with `env` over this process's, an undefined value unset), its output so far in `output()`. */
export function spawnDev(dir: string, env: Record<string, string | undefined>): { dev: ChildProcessByStdio<null, Readable, Readable>; output: () => string } {
  const fullEnv = { ...process.env, ...env }
  for (const name of Object.keys(fullEnv)) if (fullEnv[name] === undefined) delete fullEnv[name]
  const dev = spawn(process.execPath, ['scripts/dev.ts'], { cwd: dir, env: fullEnv, stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  dev.stdout.on('data', (d: Buffer) => (output += d.toString()))
  dev.stderr.on('data', (d: Buffer) => (output += d.toString()))
  return { dev, output: () => output }
}

/** scripts/dev.ts run in `dir` until it exits by itself (SIGTERM after 60 s): its exit code and output. */
export async function runDevToExit(dir: string, env: Record<string, string | undefined>): Promise<{ code: number | null; output: string }> {
  const { dev, output } = spawnDev(dir, env)
  const stopAfter = setTimeout(() => dev.kill('SIGTERM'), 60_000)
  const code = await new Promise<number | null>((r) => dev.once('exit', r))
  clearTimeout(stopAfter)
  return { code, output: output() }
}

/** Whether something accepts connections on 127.0.0.1:`port`. */
export const listening = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = createConnection({ port, host: '127.0.0.1' })
    socket.once('connect', () => (socket.destroy(), resolve(true)))
    socket.once('error', () => resolve(false))
  })

/** `npm run <args>` in a process group of its own (its id goes in `groups`, for the file's `afterAll` to kill), its output kept. */
export function npmRun(dir: string, args: string[], groups: number[], env: Record<string, string> = {}): { npm: ChildProcess; output: () => string } {
  const npm = spawn('npm', ['run', ...args], { cwd: dir, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true })
  groups.push(npm.pid!)
  let output = ''
  npm.stdout!.on('data', (d: Buffer) => (output += d.toString()))
  npm.stderr!.on('data', (d: Buffer) => (output += d.toString()))
  return { npm, output: () => output }
}

/** Whether a process with this id still runs. */
export const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}
