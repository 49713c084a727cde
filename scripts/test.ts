/**
 * `npm test`: the workerd suite (vitest + @cloudflare/vitest-plugin), then the end-to-end suite on
 * Node (real `wrangler dev`, browsers, SDKs). Extra arguments go to both runs (e.g. a file filter).
 * Ends with one plain `Tests: N passed, N failed` line over both suites.
 */
import { mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { runGroup } from './lib/run-group.ts'

export interface VitestReport {
  numPassedTests: number
  numFailedTests: number
  testResults: Array<{ status: string; assertionResults: Array<{ status: string }> }>
}

/** One suite's part of the summary line, from its JSON report (none: the run ended without one) and exit status. */
export function countRun(report: VitestReport | undefined, status: number | null): { passed: number; failed: number } {
  if (!report) return { passed: 0, failed: 1 } // the run ended without a report: a failure, never nothing
  // A file that fails to load (a throwing import or beforeAll) runs no test: count it as one failure.
  let failed = report.numFailedTests + report.testResults.filter((file) => file.status === 'failed' && !file.assertionResults.some((test) => test.status === 'failed')).length
  // Vitest fails a run on an unhandled error (a throw in a timer, a rejection nobody awaited) that its
  // report does not record: its tests all passed, so "0 failed" would contradict the exit code.
  if (status !== 0 && failed === 0) failed = 1
  return { passed: report.numPassedTests, failed }
}

// Run as a script (also through a symlinked checkout, where argv[1] is not the real path).
if (process.argv[1] !== undefined && import.meta.filename === realpathSync(process.argv[1])) {
  const extra = process.argv.slice(2)
  const env = { ...process.env, WRANGLER_SEND_METRICS: 'false' }
  const reports = mkdtempSync(join(tmpdir(), 'podgate-test-'))
  // Also when a signal ends the run (runGroup exits).
  process.on('exit', () => rmSync(reports, { recursive: true, force: true }))
  let passed = 0
  let failed = 0
  let status = 0
  for (const config of ['vitest.config.ts', 'vitest.e2e.config.ts']) {
    const outputFile = join(reports, `${config}.json`)
    const exit = await runGroup('vitest', ['run', '--config', config, '--passWithNoTests', '--reporter=default', '--reporter=json', `--outputFile.json=${outputFile}`, ...extra], env)
    let report: VitestReport | undefined
    try {
      report = JSON.parse(readFileSync(outputFile, 'utf8')) as VitestReport
    } catch {
      // no report: counted by countRun
    }
    const counted = countRun(report, exit)
    passed += counted.passed
    failed += counted.failed
    if (exit !== 0) status = exit ?? 1
  }
  console.log(`Tests: ${passed} passed, ${failed} failed`)
  process.exit(status !== 0 ? status : failed > 0 ? 1 : 0)
}
