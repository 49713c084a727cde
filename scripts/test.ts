/**
 * `npm test`: the workerd suite (vitest + @cloudflare/vitest-plugin), then the end-to-end suite on
 * Node (real `wrangler dev`, browsers, SDKs). Extra arguments go to both runs (e.g. a file filter).
 */
import { spawnSync } from 'node:child_process'

const extra = process.argv.slice(2)
const env = { ...process.env, WRANGLER_SEND_METRICS: 'false' }
for (const config of ['vitest.config.ts', 'vitest.e2e.config.ts']) {
  const result = spawnSync('vitest', ['run', '--config', config, '--passWithNoTests', ...extra], { stdio: 'inherit', env })
  if (result.status !== 0) process.exit(result.status ?? 1)
}
