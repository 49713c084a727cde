/**
 * `npm run bench:cache` runs and prints its table also from a checkout reached through a symlink (macOS's
 * /tmp, a linked home directory), where Node's argv[1] is not the module's real path.
 */
import { spawnSync } from 'node:child_process'
import { describe, expect, it } from 'vitest'
import { devCheckout } from './dev-checkout.ts'

describe('npm run bench:cache', () => {
  it('runs from a symlinked checkout: a short run prints its hit ratio', { timeout: 120_000 }, () => {
    const env = { ...process.env, WRANGLER_SEND_METRICS: 'false', CACHE_BENCH_REQUESTS: '12', CACHE_BENCH_PROMPTS: '3', CACHE_BENCH_CONCURRENCY: '2' }
    const result = spawnSync(process.execPath, ['scripts/bench/cache.ts'], { cwd: devCheckout('bench-cache'), encoding: 'utf8', timeout: 110_000, env })
    expect(result.status, result.stderr).toBe(0)
    expect(result.stdout).toMatch(/hit ratio \(HIT \+ COALESCED\): [\d.]+%/)
  })
})
