/**
 * `npm run dev` with RUNPOD_API_KEY set: no emulator, the Worker calls RUNPOD_BASE_URL (api.runpod.ai
 * unless set) with that key, the key appears in none of its output, and the file that carried it to
 * wrangler (never the command line) is gone when it stops. Set in `.dev.vars` instead (as
 * docs/development.md allows), the dev server still gets an admin token, so `npm run keys` works.
 */
import { spawnSync } from 'node:child_process'
import { createServer } from 'node:http'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { freePort } from '../../scripts/lib/podgate-server.ts'
import { readDevVars } from '../../scripts/lib/dev-state.ts'
import { devCheckout, listening, spawnDev } from './dev-checkout.ts'

/** A stand-in for api.runpod.ai that records what it was sent. */
async function fakeRunpod(): Promise<{ url: string; seen: string[]; close(): Promise<void> }> {
  const seen: string[] = []
  const upstream = createServer((req, res) => {
    seen.push(`${req.method} ${req.url} ${req.headers.authorization}`)
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: 'job1', status: 'COMPLETED', output: [{ choices: [{ tokens: ['hi'] }], usage: { input: 1, output: 1 } }] }))
  })
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r))
  const url = `http://127.0.0.1:${(upstream.address() as { port: number }).port}/v2`
  return { url, seen, close: () => new Promise((r) => upstream.close(() => r())) }
}

/** scripts/dev.ts in a checkout of its own (with `devVars` as its .dev.vars, if given), until `use` is done. */
async function withDev(env: Record<string, string | undefined>, devVars: string | undefined, use: (dev: { dir: string; port: number; emulatorPort: number }) => Promise<void>): Promise<{ dir: string; output: string }> {
  const dir = devCheckout('dev-key')
  if (devVars !== undefined) writeFileSync(join(dir, '.dev.vars'), devVars)
  const [port, emulatorPort] = [await freePort(), await freePort()]
  const { dev, output } = spawnDev(dir, { PORT: String(port), EMULATOR_PORT: String(emulatorPort), INSPECTOR_PORT: String(await freePort()), ...env })
  const exited = new Promise<number | null>((r) => dev.once('exit', r))
  try {
    for (let i = 0; !output().includes('[podgate] ready on'); i++) {
      if (dev.exitCode !== null || i > 600) throw new Error(`npm run dev did not start:\n${output().slice(-2000)}`)
      await new Promise((r) => setTimeout(r, 100))
    }
    await use({ dir, port, emulatorPort })
  } finally {
    dev.kill('SIGTERM')
    await exited
  }
  return { dir, output: output() }
}

async function chat(port: number, key: string): Promise<void> {
  await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'chat-current', messages: [{ role: 'user', content: 'hi' }] }),
  }).then((res) => res.text())
}

const runpodKey = () => `rpa_devtest${crypto.randomUUID().replaceAll('-', '')}`

describe('npm run dev with RUNPOD_API_KEY', () => {
  it('uses the key against RUNPOD_BASE_URL, prints it nowhere and leaves no copy of it behind', { timeout: 90_000 }, async () => {
    const key = runpodKey()
    const upstream = await fakeRunpod()
    try {
      const { dir, output } = await withDev({ RUNPOD_API_KEY: key, RUNPOD_BASE_URL: upstream.url }, undefined, async ({ dir, port, emulatorPort }) => {
        expect(await listening(emulatorPort)).toBe(false)
        const admin = readDevVars(dir).PODGATE_ADMIN_TOKEN
        const created = await fetch(`http://127.0.0.1:${port}/admin/keys`, { method: 'POST', headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' }, body: '{"name":"t"}' })
        await chat(port, ((await created.json()) as { key: string }).key)
        expect(upstream.seen[0]).toMatch(new RegExp(`^POST /v2/vllmcurrent/run(sync)? Bearer ${key}$`))
        expect(readFileSync(join(dir, '.wrangler/dev-secrets.env'), 'utf8')).toContain(key)
      })
      expect(output).not.toContain(key)
      expect(existsSync(join(dir, '.wrangler/dev-secrets.env'))).toBe(false)
    } finally {
      await upstream.close()
    }
  })

  it('set in a .dev.vars written by hand: npm run keys still finds an admin token', { timeout: 90_000 }, async () => {
    const key = runpodKey()
    const upstream = await fakeRunpod()
    try {
      const { output } = await withDev({ RUNPOD_API_KEY: undefined, RUNPOD_BASE_URL: upstream.url, PODGATE_ADMIN_TOKEN: undefined, PODGATE_URL: undefined }, `RUNPOD_API_KEY="${key}"\n`, async ({ dir, port }) => {
        const created = spawnSync(process.execPath, ['scripts/keys.ts', 'create', '--name', 'me'], { cwd: dir, encoding: 'utf8', timeout: 30_000, env: { ...process.env, PODGATE_ADMIN_TOKEN: '', PODGATE_URL: '' } })
        expect(created.status, created.stderr).toBe(0)
        await chat(port, (JSON.parse(created.stdout) as { key: string }).key)
        expect(upstream.seen[0]).toMatch(new RegExp(`Bearer ${key}$`))
        expect(readFileSync(join(dir, '.dev.vars'), 'utf8')).toContain(`RUNPOD_API_KEY="${key}"`)
      })
      expect(output).not.toContain(key)
    } finally {
      await upstream.close()
    }
  })
})
