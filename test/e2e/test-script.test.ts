/**
 * `npm test`'s summary line (scripts/test.ts) agrees with its exit code: a test file that fails to load
 * and an unhandled error (which vitest's JSON report does not record) each count as a failure.
 */
import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'

const ROOT = resolve(import.meta.dirname, '../..')
const dirs: string[] = []
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
})

/** Runs scripts/test.ts in a checkout of its own whose e2e suite is `files`, filtered to them. */
function runTests(files: Record<string, string>): { status: number | null; summary: string | undefined } {
  const dir = mkdtempSync(join(tmpdir(), 'podgate-test-script-'))
  dirs.push(dir)
  for (const name of ['node_modules', 'package.json', 'wrangler.toml', 'tsconfig.json', 'src', 'workers', 'scripts', 'vitest.config.ts', 'vitest.e2e.config.ts']) symlinkSync(join(ROOT, name), join(dir, name))
  mkdirSync(join(dir, 'test/e2e'), { recursive: true })
  symlinkSync(join(ROOT, 'test/global-setup.ts'), join(dir, 'test/global-setup.ts'))
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, 'test/e2e', name), text)
  const result = spawnSync(process.execPath, ['scripts/test.ts', 'fixture-'], { cwd: dir, encoding: 'utf8', timeout: 120_000 })
  return { status: result.status, summary: /^Tests: .*$/m.exec(result.stdout)?.[0] }
}

describe('npm test: the summary line', () => {
  it('counts a test file that fails to load, and exits non-zero', { timeout: 150_000 }, () => {
    const { status, summary } = runTests({
      'fixture-ok.test.ts': "import { expect, it } from 'vitest'\nit('passes', () => expect(1).toBe(1))\n",
      'fixture-broken.test.ts': "import { expect, it } from 'vitest'\nit('never runs', () => { expect(1).toBe(1)\n",
    })
    expect(summary).toBe('Tests: 1 passed, 1 failed')
    expect(status).not.toBe(0)
  })

  it('counts an unhandled error its tests passed through, and exits non-zero', { timeout: 150_000 }, () => {
    const { status, summary } = runTests({
      'fixture-unhandled.test.ts': "import { expect, it } from 'vitest'\nit('passes', async () => { setTimeout(() => { throw new Error('late') }, 1); await new Promise((r) => setTimeout(r, 50)); expect(1).toBe(1) })\n",
    })
    expect(summary).toBe('Tests: 1 passed, 1 failed')
    expect(status).not.toBe(0)
  })
})
