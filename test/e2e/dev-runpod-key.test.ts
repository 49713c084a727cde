/**
 * `npm run dev` with RUNPOD_API_KEY set: no emulator, the Worker calls RUNPOD_BASE_URL (api.runpod.ai
 * unless set) with that key, the key appears in none of its output, and the file that carried it to
 * wrangler (never the command line) is gone when it stops.
 */
import { spawn } from 'node:child_process'
import { createServer } from 'node:http'
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs'
import { createConnection } from 'node:net'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { freePort } from '../../scripts/lib/podgate-server.ts'
import { readDevVars } from '../../scripts/lib/dev-state.ts'

const ROOT = resolve(import.meta.dirname, '../..')
const dirs: string[] = []
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
})

const listening = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = createConnection({ port, host: '127.0.0.1' })
    socket.once('connect', () => (socket.destroy(), resolve(true)))
    socket.once('error', () => resolve(false))
  })

describe('npm run dev with RUNPOD_API_KEY', () => {
  it('uses the key against RUNPOD_BASE_URL, prints it nowhere and leaves no copy of it behind', { timeout: 90_000 }, async () => {
    const runpodKey = `rpa_devtest${crypto.randomUUID().replaceAll('-', '')}`
    // A stand-in for api.runpod.ai that records what it was sent.
    const seen: string[] = []
    const upstream = createServer((req, res) => {
      seen.push(`${req.method} ${req.url} ${req.headers.authorization}`)
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: 'job1', status: 'COMPLETED', output: [{ choices: [{ tokens: ['hi'] }], usage: { input: 1, output: 1 } }] }))
    })
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r))
    const upstreamPort = (upstream.address() as { port: number }).port

    const dir = mkdtempSync(join(tmpdir(), 'podgate-dev-key-'))
    dirs.push(dir)
    for (const name of ['node_modules', 'package.json', 'wrangler.toml', 'tsconfig.json', 'src', 'workers', 'scripts']) symlinkSync(join(ROOT, name), join(dir, name))
    const [port, emulatorPort] = [await freePort(), await freePort()]
    const env = { ...process.env, PORT: String(port), EMULATOR_PORT: String(emulatorPort), INSPECTOR_PORT: String(await freePort()), RUNPOD_API_KEY: runpodKey, RUNPOD_BASE_URL: `http://127.0.0.1:${upstreamPort}/v2` }
    const dev = spawn(process.execPath, ['scripts/dev.ts'], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let output = ''
    dev.stdout.on('data', (d: Buffer) => (output += d.toString()))
    dev.stderr.on('data', (d: Buffer) => (output += d.toString()))
    const exited = new Promise<number | null>((r) => dev.once('exit', r))
    try {
      for (let i = 0; !output.includes('[podgate] ready on'); i++) {
        if (dev.exitCode !== null || i > 600) throw new Error(`npm run dev did not start:\n${output.slice(-2000)}`)
        await new Promise((r) => setTimeout(r, 100))
      }
      expect(await listening(emulatorPort)).toBe(false)
      const admin = readDevVars(dir).PODGATE_ADMIN_TOKEN
      const created = await fetch(`http://127.0.0.1:${port}/admin/keys`, { method: 'POST', headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' }, body: '{"name":"t"}' })
      const { key } = (await created.json()) as { key: string }
      await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'chat-current', messages: [{ role: 'user', content: 'hi' }] }),
      }).then((res) => res.text())
      expect(seen[0]).toMatch(new RegExp(`^POST /v2/vllmcurrent/run(sync)? Bearer ${runpodKey}$`))
      expect(readFileSync(join(dir, '.wrangler/dev-secrets.env'), 'utf8')).toContain(runpodKey)
    } finally {
      dev.kill('SIGTERM')
      await exited
      await new Promise((r) => upstream.close(r))
    }
    expect(output).not.toContain(runpodKey)
    expect(existsSync(join(dir, '.wrangler/dev-secrets.env'))).toBe(false)
  })
})
