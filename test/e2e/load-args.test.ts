/**
 * `npm run load -- --requests N --rounds R`: a count that is no positive whole number, or a flag it does
 * not know, is refused before anything starts (exit 2, with the usage), not run as a soak of nothing
 * that passes.
 */
import { spawnSync } from 'node:child_process'
import { describe, expect, it } from 'vitest'
import { devCheckout } from './dev-checkout.ts'

describe('npm run load: its arguments', () => {
  it.each([
    [['--requests', 'abc'], /--requests/],
    [['--requests', '0'], /--requests/],
    [['--requests=1k'], /--requests/],
    [['--rounds', '0'], /--rounds/],
    [['--rounds', '-2'], /--rounds/],
    [['--request', '10'], /--request/],
  ])('refuses %j before it starts', { timeout: 120_000 }, (args, problem) => {
    const result = spawnSync(process.execPath, ['scripts/load.ts', ...args], { cwd: devCheckout('load-args'), encoding: 'utf8', timeout: 110_000, env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } })
    expect(result.status, `${result.stdout}\n${result.stderr}`).toBe(2)
    expect(result.stderr).toMatch(problem)
    expect(result.stderr).toMatch(/usage: npm run load/)
    expect(result.stderr).not.toMatch(/^\s+at /m)
    expect(result.stdout).not.toMatch(/podgate load:/)
  })
})
