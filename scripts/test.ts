/**
 * `npm test`: the workerd suite (vitest + @cloudflare/vitest-plugin), then the end-to-end suite on
 * Node (real `wrangler dev`, browsers, SDKs). Extra arguments go to both runs (e.g. a file filter).
 * Ends with one plain `Tests: N passed, N failed` line over both suites.
 */
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

interface VitestReport {
  numPassedTests: number
  numFailedTests: number
  testResults: Array<{ status: string; assertionResults: Array<{ status: string }> }>
}

const extra = process.argv.slice(2)
const env = { ...process.env, WRANGLER_SEND_METRICS: 'false' }
const reports = mkdtempSync(join(tmpdir(), 'podgate-test-'))
let passed = 0
let failed = 0
let status = 0
for (const config of ['vitest.config.ts', 'vitest.e2e.config.ts']) {
  const outputFile = join(reports, `${config}.json`)
  const result = spawnSync('vitest', ['run', '--config', config, '--passWithNoTests', '--reporter=default', '--reporter=json', `--outputFile.json=${outputFile}`, ...extra], { stdio: 'inherit', env })
  try {
    const report = JSON.parse(readFileSync(outputFile, 'utf8')) as VitestReport
    passed += report.numPassedTests
    // A file that fails to load (a throwing import or beforeAll) runs no test: count it as one failure.
    failed += report.numFailedTests + report.testResults.filter((file) => file.status === 'failed' && !file.assertionResults.some((test) => test.status === 'failed')).length
  } catch {
    failed += 1 // the run ended without a report: count it as a failure, never as nothing
  }
  if (result.status !== 0) status = result.status ?? 1
}
rmSync(reports, { recursive: true, force: true })
console.log(`Tests: ${passed} passed, ${failed} failed`)
process.exit(status !== 0 ? status : failed > 0 ? 1 : 0)
