/**
 * `npm run dev` with a config mistake in wrangler.toml [env.dev.vars] (a model's mode misspelt): the Worker
 * refuses every request with its ConfigError, so the dev script must say so and stop, not poll /healthz for
 * two minutes (the same error logged five times a second) and then print "ready".
 */
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { freePort } from '../../scripts/lib/podgate-server.ts'
import { devCheckout, ROOT, runDevToExit } from './dev-checkout.ts'

describe('npm run dev with a config the Worker refuses', () => {
  it('names the problem once and stops, without calling the server ready', { timeout: 90_000 }, async () => {
    const dir = devCheckout('dev-config', ['wrangler.toml'])
    const toml = readFileSync(join(ROOT, 'wrangler.toml'), 'utf8')
    const broken = toml.replace('"endpointId": "vllmcurrent" }], "mode": "native"', '"endpointId": "vllmcurrent" }], "mode": "nativ"')
    expect(broken).not.toBe(toml)
    writeFileSync(join(dir, 'wrangler.toml'), broken)
    const { code, output } = await runDevToExit(dir, { PORT: String(await freePort()), EMULATOR_PORT: String(await freePort()), INSPECTOR_PORT: String(await freePort()), RUNPOD_API_KEY: '' })
    expect(output).not.toContain('[podgate] ready on')
    expect(output).toMatch(/models\.chat-current\.mode/)
    expect(output).toMatch(/\[podgate\] the Worker does not start/)
    expect(output.match(/GET \/healthz 500/g)?.length ?? 0).toBeLessThanOrEqual(1)
    expect(code).not.toBe(0)
  })
})
