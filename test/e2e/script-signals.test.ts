/**
 * `npm test`, `npm run load`, `npm run bench`, `npm run bench:cache` and `npm run deploy` stopped by a SIGTERM to npm alone (a process manager, an
 * IDE's "stop", `kill <pid>`): as `npm run dev` (dev-signals.test.ts), nothing they started may outlive
 * them: no vitest or its workers (nor what a test started), no wrangler, no workerd on its ports.
 */
import { execFileSync, spawnSync } from 'node:child_process'
import { chmodSync, mkdirSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { alive, devCheckout, npmRun, ROOT } from './dev-checkout.ts'

const groups: number[] = []
const seen = new Set<number>()

afterAll(() => {
  // Whatever a failed run left behind: npm's group, then every process seen under it (some start groups of their own).
  for (const pid of [...groups.map((g) => -g), ...seen]) {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {
      // already gone
    }
  }
})

/** Every process under `pid` (by parent), with its command line. */
function descendants(pid: number): { pid: number; args: string }[] {
  const rows = execFileSync('ps', ['-eo', 'pid=,ppid=,args='], { encoding: 'utf8' }).trim().split('\n').map((line) => {
    const [p, pp, ...args] = line.trim().split(/\s+/)
    return { pid: Number(p), ppid: Number(pp), args: args.join(' ') }
  })
  const found: { pid: number; args: string }[] = []
  const stack = [pid]
  while (stack.length > 0) {
    const parent = stack.pop()!
    for (const row of rows) if (row.ppid === parent) (found.push({ pid: row.pid, args: row.args }), stack.push(row.pid))
  }
  for (const row of found) seen.add(row.pid)
  return found
}

async function until(check: () => boolean, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (check()) return true
    await new Promise((r) => setTimeout(r, 200))
  }
  return check()
}

/** Starts `npm run <args>`, waits for a process matching `ready` under it, SIGTERMs npm alone, and expects every process under it gone. */
async function stopsEverything(dir: string, args: string[], ready: RegExp, env: Record<string, string> = {}): Promise<void> {
  const { npm, output } = npmRun(dir, args, groups, env)
  expect(await until(() => descendants(npm.pid!).some((p) => ready.test(p.args)), 60_000), `nothing matching ${ready} started:\n${output()}`).toBe(true)
  // Let it settle into what it runs (a second workerd, a test's own child).
  await new Promise((r) => setTimeout(r, 1_000))
  const started = descendants(npm.pid!)
  npm.kill('SIGTERM')
  expect(await until(() => !started.some((p) => alive(p.pid)), 15_000), `still running after SIGTERM to npm:\n${started.filter((p) => alive(p.pid)).map((p) => `  ${p.pid} ${p.args}`).join('\n')}`).toBe(true)
}

describe('SIGTERM to npm alone', () => {
  it('npm run deploy: wrangler deploy stops with it (nothing goes out after a stop)', { timeout: 90_000 }, async () => {
    // node_modules as the checkout's, but with a wrangler that is still deploying when npm is stopped.
    const dir = devCheckout('deploy-signals', ['node_modules'])
    mkdirSync(join(dir, 'node_modules/.bin'), { recursive: true })
    for (const name of readdirSync(join(ROOT, 'node_modules'))) if (name !== '.bin') symlinkSync(join(ROOT, 'node_modules', name), join(dir, 'node_modules', name))
    writeFileSync(join(dir, 'node_modules/.bin/wrangler'), '#!/bin/sh\nsleep 60\n')
    chmodSync(join(dir, 'node_modules/.bin/wrangler'), 0o755)
    await stopsEverything(dir, ['deploy', '--', '--dry-run'], /wrangler deploy/)
  })

  it.each(['test', 'test:e2e'])('npm run %s: vitest, its workers and a process a test started all stop', { timeout: 90_000 }, async (script) => {
    const dir = devCheckout('test-signals')
    for (const name of ['vitest.config.ts', 'vitest.e2e.config.ts']) symlinkSync(join(ROOT, name), join(dir, name))
    mkdirSync(join(dir, 'test/e2e'), { recursive: true })
    symlinkSync(join(ROOT, 'test/global-setup.ts'), join(dir, 'test/global-setup.ts'))
    // A test that started a server of its own (as the e2e tests start wrangler dev) and is still running.
    writeFileSync(join(dir, 'test/e2e/fixture-hang.test.ts'), [
      "import { spawn } from 'node:child_process'",
      "import { it } from 'vitest'",
      "it('hangs', { timeout: 120_000 }, async () => {",
      "  spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000) // podgate-fixture-sleeper'], { stdio: 'ignore' })",
      '  await new Promise((r) => setTimeout(r, 110_000))',
      '})',
      '',
    ].join('\n'))
    await stopsEverything(dir, [script, '--', 'fixture-'], /podgate-fixture-sleeper/)
  })

  it('npm run load: wrangler and workerd stop', { timeout: 90_000 }, async () => {
    await stopsEverything(devCheckout('load-signals'), ['load', '--', '--requests', '4', '--rounds', '3'], /workerd/)
  })

  it('npm run bench: the Workers it started stop', { timeout: 90_000 }, async () => {
    await stopsEverything(devCheckout('bench-signals'), ['bench'], /workerd/, { BENCH_CPU_ONLY: '50' })
  })

  it('npm run bench:cache: the wrangler dev it started stops', { timeout: 90_000 }, async () => {
    // Slow tokens: still running when stopped.
    await stopsEverything(devCheckout('bench-cache-signals'), ['bench:cache'], /workerd/, { CACHE_BENCH_TOKEN_MS: '200' })
  })
})

describe('run-group (npm test, npm run deploy)', () => {
  it('exits with the command\'s status, and 128+n when a signal alone killed the command, as a shell does', () => {
    const run = (script: string) => spawnSync(process.execPath, [join(ROOT, 'scripts/lib/run-group.ts'), 'sh', '-c', script], { stdio: 'ignore', timeout: 30_000 }).status
    expect(run('exit 3')).toBe(3)
    expect(run('kill -TERM $$')).toBe(143)
    expect(run('kill -KILL $$')).toBe(137)
  })
})
