/**
 * `npm run dev` and `npm run emulator` stopped by a SIGTERM to npm (a process manager, an IDE's "stop",
 * `kill <pid>`): npm passes the signal to the shell that runs the script, and a shell that does not exec
 * its command (dash, Debian's and Ubuntu's /bin/sh) dies and leaves the script running, its servers still
 * on their ports and the next `npm run dev` refused with "port is taken".
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { freePort } from '../../scripts/lib/podgate-server.ts'
import { alive, devCheckout, listening, npmRun } from './dev-checkout.ts'

const groups: number[] = []

afterAll(() => {
  // Whatever a failed run left behind: each npm ran in a process group of its own.
  for (const group of groups) {
    try {
      process.kill(-group, 'SIGKILL')
    } catch {
      // already gone
    }
  }
})

const checkout = () => devCheckout('dev-signals')

async function until(check: () => boolean | Promise<boolean>, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (await check()) return true
    await new Promise((r) => setTimeout(r, 200))
  }
  return check()
}

describe('SIGTERM to npm', () => {
  it('npm run emulator: the emulator stops and frees its port', { timeout: 30_000 }, async () => {
    const port = await freePort()
    const { npm, output } = npmRun(checkout(), ['emulator', '--', '--port', String(port)], groups)
    expect(await until(() => output().includes('Runpod emulator on'), 15_000), output()).toBe(true)
    npm.kill('SIGTERM')
    expect(await until(async () => !(await listening(port)), 5_000), `port ${port} still served after SIGTERM`).toBe(true)
  })

  it('npm run dev: the dev script, wrangler and the emulator stop and free their ports', { timeout: 90_000 }, async () => {
    const [port, emulatorPort, inspectorPort] = [await freePort(), await freePort(), await freePort()]
    const dir = checkout()
    const { npm, output } = npmRun(dir, ['dev'], groups, { PORT: String(port), EMULATOR_PORT: String(emulatorPort), INSPECTOR_PORT: String(inspectorPort), RUNPOD_API_KEY: '' })
    expect(await until(() => output().includes('[podgate] ready on'), 60_000), output()).toBe(true)
    const { pid } = JSON.parse(readFileSync(join(dir, '.wrangler/podgate-dev.json'), 'utf8')) as { pid: number }
    npm.kill('SIGTERM')
    expect(await until(() => !alive(pid), 10_000), 'scripts/dev.ts still running after SIGTERM to npm').toBe(true)
    expect(await listening(port), `podgate port ${port} still served`).toBe(false)
    expect(await listening(emulatorPort), `emulator port ${emulatorPort} still served`).toBe(false)
  })
})
