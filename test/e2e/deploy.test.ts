/**
 * `npm run deploy`: deploys the top-level Worker without wrangler's "Multiple environments" warning,
 * refuses the shipped placeholders (a dry run only warns), and uploads a bundle without the dev tools.
 */
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { placeholderProblems } from '../../scripts/deploy.ts'

const ROOT = resolve(import.meta.dirname, '../..')
const outdir = mkdtempSync(join(tmpdir(), 'podgate-deploy-'))
afterAll(() => rmSync(outdir, { recursive: true, force: true }))

describe('npm run deploy', () => {
  it('refuses a wrangler.toml that still holds the placeholder endpoint or KV id, and only those', () => {
    const shipped = readFileSync(join(ROOT, 'wrangler.toml'), 'utf8')
    expect(placeholderProblems(shipped)).toEqual([
      expect.stringMatching(/"your0endpoint0id": put your Runpod endpoint id/),
      expect.stringMatching(/"0{32}": create the namespace with `npx wrangler kv namespace create PODGATE_KV`/),
    ])
    const edited = shipped.replace('your0endpoint0id', 'abc123xyz').replace('id = "00000000000000000000000000000000"', 'id = "4f1c0ffee4f1c0ffee4f1c0ffee4f1c0"')
    // [env.dev] keeps its own ids; comments may mention the placeholder.
    expect(placeholderProblems(edited)).toEqual([])
  })

  it('checks the environment that is deployed: --env <name> reads [env.<name>] tables, the top level reads the others', () => {
    const shipped = readFileSync(join(ROOT, 'wrangler.toml'), 'utf8')
    expect(placeholderProblems(shipped, 'wrangler.toml', 'dev')).toEqual([])
    const staging = `${shipped.replace('your0endpoint0id', 'abc123xyz').replace('id = "00000000000000000000000000000000"', 'id = "4f1c0ffee4f1c0ffee4f1c0ffee4f1c0"')}
[env.staging.vars]
PODGATE_MODELS = '{"m":{"endpoints":[{"endpointId":"your0endpoint0id"}]}}'
`
    expect(placeholderProblems(staging)).toEqual([])
    expect(placeholderProblems(staging, 'wrangler.toml', 'staging')).toEqual([expect.stringMatching(/"your0endpoint0id"/)])
  })

  it('checks the file wrangler deploys, in any of its spellings of --config', () => {
    for (const args of [['--config=workers/composed.wrangler.toml'], ['-c', 'workers/composed.wrangler.toml']]) {
      const result = spawnSync('node', ['scripts/deploy.ts', ...args], { cwd: ROOT, encoding: 'utf8', env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } })
      expect(result.status).toBe(1)
      // It read wrangler.toml: an edited wrangler.toml would have let the composed app's placeholders through.
      expect(result.stderr).toMatch(/not deploying:\n  workers\/composed\.wrangler\.toml still holds the placeholder "your0endpoint0id"/)
    }
  })

  it('passes --env on to wrangler alone (a second --env was refused: "expects a single value")', { timeout: 90_000 }, () => {
    const out = join(outdir, 'dev')
    const result = spawnSync('npm', ['run', 'deploy', '--', '--dry-run', '--env', 'dev', '--outdir', out], { cwd: ROOT, encoding: 'utf8', timeout: 90_000 })
    const output = `${result.stdout}\n${result.stderr}`
    expect(result.status, output).toBe(0)
    expect(output).not.toMatch(/placeholder/)
    expect(readdirSync(out)).toContain('dev.js')
  })

  it('a real deploy with the placeholders stops before wrangler runs', () => {
    const result = spawnSync('node', ['scripts/deploy.ts'], { cwd: ROOT, encoding: 'utf8', env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } })
    expect(result.status).toBe(1)
    expect(result.stderr).toMatch(/not deploying:[\s\S]*your0endpoint0id/)
    expect(result.stdout).not.toMatch(/wrangler/)
  })

  it('a dry run bundles the top-level Worker with no environment warning and without the playground or OpenAPI generator', { timeout: 90_000 }, () => {
    const metafile = join(outdir, 'meta.json')
    const result = spawnSync('npm', ['run', 'deploy', '--', '--dry-run', '--outdir', outdir, '--metafile', metafile], { cwd: ROOT, encoding: 'utf8', timeout: 90_000 })
    const output = `${result.stdout}\n${result.stderr}`
    expect(result.status, output).toBe(0)
    expect(output).not.toMatch(/Multiple environments/)
    expect(output).toMatch(/--dry-run: exiting now/)
    expect(readdirSync(outdir)).toContain('podgate.js')
    const meta = JSON.parse(readFileSync(metafile, 'utf8')) as { inputs: Record<string, unknown> }
    const inputs = Object.keys(meta.inputs)
    expect(inputs.some((path) => path.endsWith('src/gateway.ts'))).toBe(true)
    expect(inputs.filter((path) => /src\/(playground|openapi)\//.test(path))).toEqual([])
  })
})
