/**
 * `npm run dev` with a config mistake in wrangler.toml [env.dev.vars] (a model's mode misspelt): the Worker
 * refuses every request with its ConfigError, so the dev script must say so and stop, not poll /healthz for
 * two minutes (the same error logged five times a second) and then print "ready".
 */
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { freePort } from '../../scripts/lib/podgate-server.ts'

const ROOT = resolve(import.meta.dirname, '../..')
const dirs: string[] = []
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
})

describe('npm run dev with a config the Worker refuses', () => {
  it('names the problem once and stops, without calling the server ready', { timeout: 90_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'podgate-dev-config-'))
    dirs.push(dir)
    for (const name of ['node_modules', 'package.json', 'tsconfig.json', 'src', 'workers', 'scripts']) symlinkSync(join(ROOT, name), join(dir, name))
    const toml = readFileSync(join(ROOT, 'wrangler.toml'), 'utf8')
    const broken = toml.replace('"endpointId": "vllmcurrent" }], "mode": "native"', '"endpointId": "vllmcurrent" }], "mode": "nativ"')
    expect(broken).not.toBe(toml)
    writeFileSync(join(dir, 'wrangler.toml'), broken)
    const env = { ...process.env, PORT: String(await freePort()), EMULATOR_PORT: String(await freePort()), INSPECTOR_PORT: String(await freePort()), RUNPOD_API_KEY: '' }
    const dev = spawn(process.execPath, ['scripts/dev.ts'], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let output = ''
    dev.stdout.on('data', (d: Buffer) => (output += d.toString()))
    dev.stderr.on('data', (d: Buffer) => (output += d.toString()))
    const stopAfter = setTimeout(() => dev.kill('SIGTERM'), 60_000)
    const code = await new Promise<number | null>((r) => dev.once('exit', r))
    clearTimeout(stopAfter)
    expect(output).not.toContain('[podgate] ready on')
    expect(output).toMatch(/models\.chat-current\.mode/)
    expect(output).toMatch(/\[podgate\] the Worker does not start/)
    expect(output.match(/GET \/healthz 500/g)?.length ?? 0).toBeLessThanOrEqual(1)
    expect(code).not.toBe(0)
  })
})
