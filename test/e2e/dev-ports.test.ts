/**
 * `npm run dev` when one of its ports is taken, as it is for a newcomer whose first `npm run dev` still
 * runs in another terminal, or who has another project's `wrangler dev` on 8787: it must say which
 * variable picks another port and stop, not print "ready" for the other server or a bare EADDRINUSE.
 */
import { spawn, spawnSync } from 'node:child_process'
import { createServer } from 'node:http'
import type { Server } from 'node:http'
import { afterAll, describe, expect, it } from 'vitest'
import { freePort } from '../../scripts/lib/podgate-server.ts'
import { devCheckout, ROOT, runDevToExit } from './dev-checkout.ts'

const servers: Server[] = []

afterAll(async () => {
  await Promise.all(servers.map((server) => new Promise((r) => server.close(r))))
})

/** Another podgate already listening on a port: it answers `/healthz` as a running `npm run dev` does. */
async function occupiedPort(): Promise<number> {
  const port = await freePort()
  const server = createServer((req, res) => res.writeHead(req.url === '/healthz' ? 200 : 404, { 'content-type': 'application/json' }).end('{"ok":true}'))
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r))
  servers.push(server)
  return port
}

/** Runs scripts/dev.ts in a checkout of its own until it exits (at most 60 s), with its output. */
async function runDev(ports: { PORT: number; EMULATOR_PORT: number }): Promise<{ code: number | null; output: string }> {
  return runDevToExit(devCheckout('dev-ports'), { PORT: String(ports.PORT), EMULATOR_PORT: String(ports.EMULATOR_PORT), INSPECTOR_PORT: String(await freePort()), RUNPOD_API_KEY: '' })
}

describe('npm run dev on a port that is taken', () => {
  it('PORT taken: names PORT and stops, without calling the other server ready', { timeout: 70_000 }, async () => {
    const { code, output } = await runDev({ PORT: await occupiedPort(), EMULATOR_PORT: await freePort() })
    expect(output).not.toContain('[podgate] ready on')
    expect(output).toMatch(/\bPORT=\d+ npm run dev/)
    expect(code).not.toBe(0)
  })

  it("EMULATOR_PORT taken: names EMULATOR_PORT and stops, without Node's stack trace", { timeout: 70_000 }, async () => {
    const { code, output } = await runDev({ PORT: await freePort(), EMULATOR_PORT: await occupiedPort() })
    expect(output).toMatch(/EMULATOR_PORT=\d+ npm run dev/)
    expect(output).not.toMatch(/^\s+at /m)
    expect(code).not.toBe(0)
  })
})

describe('npm run emulator on a port that is taken, or with a flag it does not know', () => {
  const emulator = (args: string[]) => spawnSync(process.execPath, ['scripts/emulator.ts', ...args], { cwd: ROOT, encoding: 'utf8', timeout: 20_000, env: { ...process.env, EMULATOR_PORT: '' } })

  it('names the port and the flag that picks another, without a stack trace', { timeout: 30_000 }, async () => {
    const port = await occupiedPort()
    const { status, stderr } = emulator(['--port', String(port)])
    expect(stderr).toMatch(new RegExp(`127\\.0\\.0\\.1:${port} is taken.*--port`))
    expect(stderr).not.toMatch(/^\s+at /m)
    expect(status).toBe(1)
  })

  // `EMULATOR_PORT=` was read as port 0, a random one, and `EMULATOR_HOST=` as every interface.
  it('an empty EMULATOR_PORT or EMULATOR_HOST counts as unset: 127.0.0.1:8788, as documented', { timeout: 30_000 }, async () => {
    const child = spawn(process.execPath, ['scripts/emulator.ts'], { cwd: ROOT, env: { ...process.env, EMULATOR_PORT: '', EMULATOR_HOST: '' } })
    let output = ''
    child.stdout.on('data', (d) => (output += d))
    child.stderr.on('data', (d) => (output += d))
    // Listening (or 8788 taken by a running `npm run dev`): either way it asked for the default.
    let poll: NodeJS.Timeout | undefined
    await new Promise<void>((resolve) => {
      child.once('exit', () => resolve())
      poll = setInterval(() => /Runpod emulator on|is taken/.test(output) && resolve(), 50)
    })
    clearInterval(poll)
    child.kill('SIGTERM')
    expect(output).toMatch(/Runpod emulator on http:\/\/127\.0\.0\.1:8788\/v2|127\.0\.0\.1:8788 is taken/)
  })

  it('an unknown flag prints the usage, without a stack trace', { timeout: 30_000 }, () => {
    const { status, stderr } = emulator(['--prot', '9000'])
    expect(stderr).toMatch(/Unknown option '--prot'/)
    expect(stderr).toMatch(/usage: node scripts\/emulator\.ts/)
    expect(stderr).not.toMatch(/^\s+at /m)
    expect(status).toBe(2)
  })
})

describe('npm run dev with a port that is no port', () => {
  it.each([['PORT', 'abc'], ['PORT', '0'], ['EMULATOR_PORT', '70000']])('%s=%s: names the variable and stops, without a stack trace', { timeout: 70_000 }, async (variable, value) => {
    const ports = { PORT: await freePort(), EMULATOR_PORT: await freePort() }
    const { code, output } = await runDev({ ...ports, [variable]: value } as unknown as { PORT: number; EMULATOR_PORT: number })
    expect(output).toMatch(new RegExp(`${variable}=${value} is not a port`))
    expect(output).not.toMatch(/^\s+at /m)
    expect(output).not.toContain('[podgate] ready on')
    expect(code).not.toBe(0)
  })
})
