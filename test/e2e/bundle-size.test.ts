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
  it('is under 64 KiB gzipped, on zod/mini with no zod locale, and no __name wrappers', { timeout: 60_000 }, () => {
    const metafile = join(outdir, 'meta.json')
    // No `--minify`: the artifact must be minified because wrangler.toml says so, as on a real deploy.
    const args = ['wrangler', 'deploy', '--dry-run', '--outdir', outdir, '--metafile', metafile, '--env=']
    const result = spawnSync('npx', args, { cwd: ROOT, encoding: 'utf8', timeout: 90_000, env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } })
    expect(result.status, `${result.stdout}\n${result.stderr}`).toBe(0)

    const scripts = readdirSync(outdir).filter((name) => name.endsWith('.js'))
    expect(scripts).toEqual(['podgate.js'])
    const code = readFileSync(join(outdir, 'podgate.js'))
    // 150 KiB when `import { z } from 'zod'` kept every zod locale; 76.5 KiB with zod classic once the
    // playground and the OpenAPI generator left the production entry; 60.0 KiB (wrangler's own gzip
    // figure) since every schema is `zod/mini`; 64.7 KiB with the review fixes of 2026-11-23, 62.4 KiB
    // on `hono/tiny` (one PatternRouter instead of the RegExpRouter and TrieRouter); 65.0 KiB with vLLM's
    // other routes, 63.6 KiB once the admin and config errors were worded as request errors are, without
    // zod's English locale, 63.9 KiB with the fixes of their stream endings, 62.4 KiB once zod's record,
    // partial, enum and regex checks left the Worker (below). Issue 14's target is 64 KiB.
    expect(gzipSync(code).length).toBeLessThan(64 * 1024)
    const meta = JSON.parse(readFileSync(metafile, 'utf8')) as Metafile
    const inputs = Object.values(meta.outputs).flatMap((output) => (output.entryPoint ? Object.keys(output.inputs) : []))
    expect(inputs.some((path) => path.endsWith('src/gateway.ts'))).toBe(true)
    // `hono/tiny` everywhere: Hono's default SmartRouter (RegExpRouter + TrieRouter) would add ~2.4 KiB.
    const honoRouters = inputs.filter((path) => /node_modules\/hono\/dist\/router\//.test(path)).map((path) => path.replace(/.*\/dist\/router\//, ''))
    expect(honoRouters).toEqual(['pattern-router/router.js'])
    // Classic zod's methods bring its JSON Schema generator along (~25 KiB gzipped): schemas import
    // `zod/mini`, and only the dev tools (`/openapi.json`) call `z.toJSONSchema`.
    const zodModules = inputs.filter((path) => path.includes('node_modules/zod/')).map((path) => path.replace(/.*zod\//, ''))
    expect(zodModules.filter((path) => path.startsWith('v4/classic/') || path.includes('json-schema'))).toEqual([])
    // zod/mini loads no locale, and podgate words every issue itself (src/normalize/zod-errors.ts): no
    // locale ships, never the locales index, which re-exports all 40-odd.
    expect(zodModules.filter((path) => path.includes('locales/'))).toEqual([])
    // zod's record, enum and regex schemas and its partial are left out (~1.3 KiB gzipped): src/zod/ has
    // smaller stand-ins (records.ts, one-of.ts, optional-fields.ts; a pattern is a `refine()`). A zod schema
    // class keeps its name (`$constructor("$ZodRecord", ...)`), so a name found here is a class shipped. `z.int()`
    // is src/zod/numbers.ts's `int()` check (~300 B gzipped), `z.refine` src/zod/refine.ts's (~180 B), `z.union`
    // src/zod/union.ts's `union()` (~190 B), `z.boolean()` src/zod/scalars.ts's (~40 B), `z._default` src/zod/with-default.ts's
    // `withDefault()` (~140 B), `z.nullable` src/zod/nullable.ts's (~40 B),
    // `z.optional` src/zod/optional.ts's (~120 B), `z.object`, `z.strictObject`, `z.looseObject` and `z.catchall`
    // src/zod/object.ts's (~940 B), `z.string()`, `z.number()`, `z.unknown()` and `z.never()` src/zod/scalars.ts's
    // (~310 B with the boolean's), `z.minimum`, `z.maximum`, `z.gt`, `z.positive`, `z.minLength` and `z.maxLength`
    // src/zod/bounds.ts's (~150 B), `z.array` src/zod/array.ts's (~160 B).
    expect(code.toString('utf8').match(/"\$Zod(?:Record|Enum|CheckRegex|CheckStringFormat|CheckNumberFormat|Custom|Union|Boolean|Default|Nullable|Optional|Object|String|Number|Unknown|Never|CheckLessThan|CheckGreaterThan|CheckMaxLength|CheckMinLength|Array)"/g)).toBeNull()
    expect(code.toString('utf8')).not.toContain('cannot be used on tuple schemas')
    // src/normalize/zod-errors.ts has no wording for an `invalid_format` issue or an exact length (`exact: true`):
    // no check shipped raises one (zod's string formats and regex, includes/startsWith/endsWith, case checks,
    // `z.length`). A schema that brings such a check must bring its wording back.
    expect(code.toString('utf8')).not.toMatch(/invalid_format|exact:/)
    // wrangler.toml's `keep_names = false`. Wrangler's default defines esbuild's `__name` helper, minified
    // to `var s=(e,t)=>X(e,"name",{value:t,configurable:!0})`, and calls it for every function and class.
    expect(code.toString('utf8')).not.toMatch(/"name",\{value:[\w$]+,configurable:!0\}/)
  })
})
