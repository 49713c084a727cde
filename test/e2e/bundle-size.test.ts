/**
 * The deployed Worker's size: exactly the artifact `wrangler deploy` uploads (wrangler.toml's top level,
 * which sets `minify = true`; no flag here beyond `--outdir`, `--metafile` and `--env=""`) stays small.
 * A bigger bundle is a slower cold start on every new isolate.
 */
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { gzipSync } from 'node:zlib'
import { afterAll, describe, expect, it } from 'vitest'

const ROOT = resolve(import.meta.dirname, '../..')
const outdir = mkdtempSync(join(tmpdir(), 'podgate-bundle-'))

afterAll(() => rmSync(outdir, { recursive: true, force: true }))

interface Metafile {
  outputs: Record<string, { entryPoint?: string, inputs: Record<string, { bytesInOutput: number }> }>
}

describe('the production Worker bundle', () => {
  it('is under 80 KiB gzipped, with no zod locale but English and no __name wrappers', { timeout: 60_000 }, () => {
    const metafile = join(outdir, 'meta.json')
    // No `--minify`: the artifact must be minified because wrangler.toml says so, as on a real deploy.
    const args = ['wrangler', 'deploy', '--dry-run', '--outdir', outdir, '--metafile', metafile, '--env=']
    const result = spawnSync('npx', args, { cwd: ROOT, encoding: 'utf8', timeout: 90_000, env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } })
    expect(result.status, `${result.stdout}\n${result.stderr}`).toBe(0)

    const scripts = readdirSync(outdir).filter((name) => name.endsWith('.js'))
    expect(scripts).toEqual(['podgate.js'])
    const code = readFileSync(join(outdir, 'podgate.js'))
    // 150 KiB when `import { z } from 'zod'` kept every zod locale; 76.3 KiB (wrangler's own gzip figure)
    // since the playground and the OpenAPI generator left the production entry. Issue 14's target is
    // 64 KiB: zod classic (~25 KiB gzipped, with its JSON-Schema code) is what stands in the way; lower
    // this ceiling to 64 KiB when the request-path schemas move to `zod/mini`.
    expect(gzipSync(code).length).toBeLessThan(80 * 1024)
    // `import { z } from 'zod'` reaches zod's namespace object, which re-exports all 40-odd locales:
    // schemas must `import * as z from 'zod'`, which esbuild can shake.
    const meta = JSON.parse(readFileSync(metafile, 'utf8')) as Metafile
    const inputs = Object.values(meta.outputs).flatMap((output) => (output.entryPoint ? Object.keys(output.inputs) : []))
    expect(inputs.some((path) => path.endsWith('src/gateway.ts'))).toBe(true)
    expect(inputs.filter((path) => path.includes('zod/v4/locales/')).map((path) => path.replace(/.*zod\//, ''))).toEqual(['v4/locales/en.js'])
    // wrangler.toml's `keep_names = false`. Wrangler's default defines esbuild's `__name` helper, minified
    // to `var s=(e,t)=>X(e,"name",{value:t,configurable:!0})`, and calls it for every function and class.
    expect(code.toString('utf8')).not.toMatch(/"name",\{value:[\w$]+,configurable:!0\}/)
  })
})
