/**
 * `npm run deploy`: deploys the top-level Worker without wrangler's "Multiple environments" warning,
 * refuses the shipped placeholders (a dry run only warns), and uploads a bundle without the dev tools.
 */
import { spawnSync } from 'node:child_process'
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { unstable_readConfig } from 'wrangler'
import { configProblems, OPTION_VARS, optionVars, placeholderProblems } from '../../scripts/deploy.ts'

const ROOT = resolve(import.meta.dirname, '../..')
const outdir = mkdtempSync(join(tmpdir(), 'podgate-deploy-'))
afterAll(() => rmSync(outdir, { recursive: true, force: true }))
const fakeWrangler = join(outdir, 'bin')
mkdirSync(fakeWrangler)
writeFileSync(join(fakeWrangler, 'wrangler'), '#!/bin/sh\necho "fake wrangler ran: $*"\n')
chmodSync(join(fakeWrangler, 'wrangler'), 0o755)

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

  it('the composed example (workers/composed.wrangler.toml) ships minified and without keep_names, as wrangler.toml does', { timeout: 90_000 }, () => {
    const out = join(outdir, 'composed')
    const result = spawnSync(process.execPath, ['scripts/deploy.ts', '--dry-run', '--config', 'workers/composed.wrangler.toml', '--outdir', out], { cwd: ROOT, encoding: 'utf8', timeout: 90_000, env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } })
    expect(result.status, `${result.stdout}\n${result.stderr}`).toBe(0)
    const js = readFileSync(join(out, 'composed.js'), 'utf8')
    // Unminified, the bundle is thousands of lines with comments; with keep_names, every function is wrapped in __name(fn, "name").
    expect(js.split('\n').length).toBeLessThan(100)
    expect(js).not.toMatch(/__name\(/)
    const shipped = unstable_readConfig({ config: join(ROOT, 'wrangler.toml') }, { hideWarnings: true })
    const composed = unstable_readConfig({ config: join(ROOT, 'workers/composed.wrangler.toml') }, { hideWarnings: true })
    expect({ minify: composed.minify, keep_names: composed.keep_names }).toEqual({ minify: shipped.minify, keep_names: shipped.keep_names })
  })

  it('a real deploy with the placeholders stops before wrangler runs', () => {
    const result = spawnSync('node', ['scripts/deploy.ts'], { cwd: ROOT, encoding: 'utf8', env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } })
    expect(result.status).toBe(1)
    expect(result.stderr).toMatch(/not deploying:[\s\S]*your0endpoint0id/)
    expect(result.stdout).not.toMatch(/wrangler/)
  })

  // wrangler (yargs) reads `--dry-run false` and a later `--no-dry-run` as a real deploy; the check took
  // any `--dry-run` in the arguments for a dry run, and let the placeholders through to that deploy.
  it('checks a deploy whatever its spelling of --dry-run: only one wrangler reads as a dry run skips the refusal', () => {
    const run = (args: string[]) => spawnSync(process.execPath, ['scripts/deploy.ts', ...args], { cwd: ROOT, encoding: 'utf8', env: { ...process.env, PATH: `${fakeWrangler}:${process.env.PATH}`, WRANGLER_SEND_METRICS: 'false' } })
    for (const args of [['--dry-run', 'false'], ['--dry-run=false'], ['--dry-run', '--no-dry-run'], ['--dryRun', 'false']]) {
      const result = run(args)
      expect(result.stdout, args.join(' ')).not.toMatch(/fake wrangler ran/)
      expect(result.status).toBe(1)
      expect(result.stderr).toMatch(/not deploying:[\s\S]*your0endpoint0id/)
    }
    for (const args of [['--dry-run'], ['--dry-run', 'true'], ['--dry-run=true'], ['--dry-run', '--outdir', outdir]]) {
      const result = run(args)
      expect(result.status, `${args.join(' ')}\n${result.stderr}`).toBe(0)
      expect(result.stderr).toMatch(/--dry-run: .*your0endpoint0id/)
      expect(result.stdout).toContain(`fake wrangler ran: deploy --env= ${args.join(' ')}`)
    }
  })

  // `npm run deploy -- --help` printed podgate's placeholder refusal instead of wrangler's help.
  it('passes --help and -h straight to wrangler, with no checks; what wrangler deploys on is checked', () => {
    const run = (args: string[]) => spawnSync(process.execPath, ['scripts/deploy.ts', ...args], { cwd: ROOT, encoding: 'utf8', env: { ...process.env, PATH: `${fakeWrangler}:${process.env.PATH}`, WRANGLER_SEND_METRICS: 'false' } })
    for (const args of [['--help'], ['-h'], ['--dry-run', 'false', '--help'], ['--config', 'no-such.toml', '-h']]) {
      const result = run(args)
      expect(result.stderr, args.join(' ')).not.toMatch(/not deploying|--dry-run:/)
      expect(result.status).toBe(0)
      expect(result.stdout).toContain(`fake wrangler ran: deploy ${args.join(' ')}`)
    }
    // `wrangler deploy --version` (and -v) deploys, as do `--help false` and a later `--no-help`.
    for (const args of [['--version'], ['-v'], ['--help', 'false'], ['--help=false'], ['-h', '--no-help']]) {
      const result = run(args)
      expect(result.stdout, args.join(' ')).not.toMatch(/fake wrangler ran/)
      expect(result.status).toBe(1)
      expect(result.stderr).toMatch(/not deploying:[\s\S]*your0endpoint0id/)
    }
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

describe('npm run deploy: a config every request would fail on', () => {
  const shipped = readFileSync(join(ROOT, 'wrangler.toml'), 'utf8')
  // The shipped file with both placeholders replaced, as step 1 and 2 of the README leave it.
  const edited = shipped.replace('your0endpoint0id', 'abc123xyz').replace('id = "00000000000000000000000000000000"', 'id = "4f1c0ffee4f1c0ffee4f1c0ffee4f1c0"')
  const at = edited.indexOf('\n[env.dev]\n') + 1
  const [top, dev] = [edited.slice(0, at), edited.slice(at)]
  const models = /PODGATE_MODELS = '''[\s\S]*?'''\n/
  const broken: Record<string, [toml: string, problem: RegExp]> = {
    'no models': [top.replace(models, ''), /no models/],
    'PODGATE_MODELS that is no JSON': [top.replace('"mode": "openai",', '"mode": "openai"'), /PODGATE_MODELS is not valid JSON/],
    'a field the schema refuses': [top.replace('"mode": "openai",', '"mode": "opnai",'), /models\.llama-3\.1-8b\.mode/],
    'no PODGATE_KV binding': [top.replace(/\[\[kv_namespaces\]\]\nbinding = "PODGATE_KV"\nid = "\w+"\n/, ''), /binds no KV namespace as PODGATE_KV/],
    'the playground in the production Worker': [top.replace('[vars]\n', '[vars]\nPODGATE_PLAYGROUND = "true"\n'), /playground/],
  }
  // Absolute, so the file can live in a scratch directory.
  const config = (toml: string) => toml.replace('main = "workers/podgate.ts"', `main = "${join(ROOT, 'workers/podgate.ts')}"`)
  const write = (name: string, toml: string) => {
    const file = join(outdir, `${name.replaceAll(' ', '-')}.toml`)
    writeFileSync(file, config(toml))
    return file
  }

  it('finds nothing in the edited shipped config, its [env.dev] or the composed example with a real endpoint id', () => {
    expect(configProblems(unstable_readConfig({ config: write('edited', edited) }, { hideWarnings: true }))).toEqual([])
    expect(configProblems(unstable_readConfig({ config: write('edited', edited), env: 'dev' }, { hideWarnings: true }))).toEqual([])
    const composed = readFileSync(join(ROOT, 'workers/composed.wrangler.toml'), 'utf8').replace('your0endpoint0id', 'abc123xyz').replace('main = "composed.ts"', `main = "${join(ROOT, 'workers/composed.ts')}"`)
    expect(configProblems(unstable_readConfig({ config: write('composed', composed) }, { hideWarnings: true }))).toEqual([])
  })

  it.each(Object.entries(broken))('refuses %s, before wrangler runs', (name, [toml, problem]) => {
    const file = write(name, toml + dev)
    expect(configProblems(unstable_readConfig({ config: file }, { hideWarnings: true }), file)).toEqual([expect.stringMatching(problem)])
    // A wrangler that only says it ran: a deploy the check let through must not reach Cloudflare from a test.
    const result = spawnSync(process.execPath, ['scripts/deploy.ts', '--config', file], { cwd: ROOT, encoding: 'utf8', env: { ...process.env, PATH: `${fakeWrangler}:${process.env.PATH}`, WRANGLER_SEND_METRICS: 'false' } })
    expect(result.stdout).not.toMatch(/fake wrangler ran/)
    expect(result.status).toBe(1)
    expect(result.stderr).toMatch(/not deploying:/)
    expect(result.stderr).toMatch(problem)
  })

  it('leaves a file wrangler cannot read (bad TOML, an unknown --env) to wrangler, which says what is wrong', () => {
    const env = { ...process.env, PATH: `${fakeWrangler}:${process.env.PATH}`, WRANGLER_SEND_METRICS: 'false' }
    for (const args of [['--config', write('bad-toml', `${top}[vars\n`)], ['--config', write('edited', edited), '--env', 'staging']]) {
      const result = spawnSync(process.execPath, ['scripts/deploy.ts', ...args], { cwd: ROOT, encoding: 'utf8', env })
      expect(result.stderr).not.toMatch(/^\s+at /m)
      expect(result.stdout).toMatch(/fake wrangler ran/)
    }
  })

  // Each run reads the config through wrangler (3-7 s on a loaded host): eight runs outlast the default timeout.
  const runDeploy = (file: string, args: string[]) =>
    spawnSync(process.execPath, ['scripts/deploy.ts', '--config', file, ...args], { cwd: ROOT, encoding: 'utf8', env: { ...process.env, PATH: `${fakeWrangler}:${process.env.PATH}`, WRANGLER_SEND_METRICS: 'false' } })
  const validModels = `PODGATE_MODELS:${JSON.stringify({ m: { endpoints: [{ endpointId: 'abc123xyz' }] } })}`

  it('checks the variables wrangler deploys: a --var KEY:VALUE, in each of its spellings, that every request would fail on is refused', () => {
    const run = runDeploy
    const good = write('var-good', edited)
    // Refused: what the Worker would refuse at its first request, given on the command line.
    for (const [args, problem] of [
      [['--var', 'PODGATE_PLAYGROUND:true'], /playground/],
      [['--var=PODGATE_MODELS:{"m":'], /PODGATE_MODELS is not valid JSON/],
      [['--var', 'APP_MODE:x:y', 'PODGATE_MODELS:{}', '--dry-run'], /no models|models/],
      [['--var', `PODGATE_MODELS:{"m":{"endpoints":[{"endpointId":"your0endpoint0id"}]}}`], /your0endpoint0id/],
    ] as [string[], RegExp][]) {
      const result = run(good, args)
      const dry = args.includes('--dry-run')
      expect(result.status, `${args.join(' ')}\n${result.stderr}`).toBe(dry ? 0 : 1)
      expect(result.stderr).toMatch(problem)
      if (!dry) expect(result.stdout).not.toMatch(/fake wrangler ran/)
    }
  }, 180_000)

  it('checks the variables wrangler deploys: a valid --var overrides the file\'s missing or placeholder [vars], and goes to wrangler unchanged', () => {
    const run = runDeploy
    const valid = validModels
    // Let through: the file's own models are missing or still the placeholder, the command line's are valid.
    const noModels = write('var-no-models', top.replace(models, '') + dev)
    const placeholder = write('var-placeholder', shipped.replace('id = "00000000000000000000000000000000"', 'id = "4f1c0ffee4f1c0ffee4f1c0ffee4f1c0"'))
    for (const [file, args] of [[noModels, ['--var', valid]], [noModels, [`--var=${valid}`]], [placeholder, ['--var', 'APP_MODE:on', valid]], [noModels, ['--var', 'PODGATE_MODELS:{}', '--var', valid]]] as [string, string[]][]) {
      const result = run(file, args)
      expect(result.stderr, args.join(' ')).not.toMatch(/not deploying|placeholder/)
      expect(result.status).toBe(0)
      expect(result.stdout).toContain(`fake wrangler ran: deploy --env= --config ${file} ${args.join(' ')}`)
    }
  }, 180_000)

  it("reads the Worker's option variables from PodgateWorkerEnv, less its secrets: a variable added there is read as absent, not as a set secret", () => {
    const source = readFileSync(join(ROOT, 'src/config/env.ts'), 'utf8')
    expect([...OPTION_VARS].sort()).toEqual(['PODGATE_CONFIG', 'PODGATE_KV', 'PODGATE_MODELS', 'PODGATE_PLAYGROUND', 'PODGATE_QUOTA', 'PODGATE_QUOTA_CONFIG', 'PODGATE_TOKEN_MAX_TTL', 'RUNPOD_BASE_URL'])
    const added = source.replace('export interface PodgateWorkerEnv {\n', "export interface PodgateWorkerEnv {\n  PODGATE_NEW_OPTION?: string\n  'PODGATE_QUOTED'?: string\n")
    expect(added).not.toBe(source)
    expect(optionVars(added)).toEqual(new Set([...OPTION_VARS, 'PODGATE_NEW_OPTION', 'PODGATE_QUOTED']))
    // A source it cannot find the interface in is an error, not an empty list (every variable a secret).
    expect(() => optionVars(source.replace('PodgateWorkerEnv {', 'RenamedEnv {'))).toThrow(/PodgateWorkerEnv/)
  })

  // A secret under [vars] (or given as --var) was deployed as a plain-text variable: in the repo and on Cloudflare's dashboard.
  it('refuses a secret set as a plain-text variable ([vars] or --var), naming `wrangler secret put`, never its value; a dry run warns', () => {
    const secret = 'sk-live-never-printed-0123456789'
    const base = { main: join(ROOT, 'workers/podgate.ts'), kv_namespaces: [{ binding: 'PODGATE_KV' }], durable_objects: { bindings: [] } }
    const models = JSON.stringify({ m: { endpoints: [{ endpointId: 'abc123xyz' }] } })
    const proxied = JSON.stringify({ m: { endpoints: [{ url: 'https://proxy.example.com/v2/abc', apiKeyEnv: 'WORKER_KEY' }] } })
    for (const [vars, name] of [
      [{ PODGATE_MODELS: models, RUNPOD_API_KEY: secret }, 'RUNPOD_API_KEY'],
      [{ PODGATE_MODELS: models, PODGATE_ADMIN_TOKEN: secret }, 'PODGATE_ADMIN_TOKEN'],
      [{ PODGATE_MODELS: models, PODGATE_SIGNING_SECRET: secret }, 'PODGATE_SIGNING_SECRET'],
      // An endpoint's own key, named by apiKeyEnv.
      [{ PODGATE_MODELS: proxied, WORKER_KEY: secret }, 'WORKER_KEY'],
      // Also beside a config the Worker refuses for another reason.
      [{ PODGATE_MODELS: '{"m":', PODGATE_ADMIN_TOKEN: secret }, 'PODGATE_ADMIN_TOKEN'],
    ] as [Record<string, string>, string][]) {
      const problems = configProblems({ ...base, vars }, 'app.toml')
      expect(problems, name).toContainEqual(expect.stringMatching(new RegExp(`^app\\.toml: ${name} is a secret.*\\[vars\\].*--var.*\`npx wrangler secret put ${name}\``)))
      expect(problems.join('\n')).not.toContain(secret)
    }
    expect(configProblems({ ...base, vars: { PODGATE_MODELS: models, APP_MODE: 'on' } })).toEqual([])
    const file = write('secret-in-vars', edited.replace('[vars]\n', `[vars]\nRUNPOD_API_KEY = "${secret}"\n`))
    for (const [config, args] of [[file, []], [write('edited', edited), ['--var', `PODGATE_ADMIN_TOKEN:${secret}`]], [file, ['--dry-run']]] as [string, string[]][]) {
      const result = runDeploy(config, args)
      const dry = args.includes('--dry-run')
      expect(result.stderr, args.join(' ')).toMatch(new RegExp(`${dry ? '--dry-run: ' : 'not deploying:[\\s\\S]*'}.*is a secret.*wrangler secret put (RUNPOD_API_KEY|PODGATE_ADMIN_TOKEN)`))
      expect(result.stderr).not.toContain(secret)
      expect(result.status).toBe(dry ? 0 : 1)
      if (!dry) expect(result.stdout).not.toMatch(/fake wrangler ran/)
    }
  }, 180_000)

  it('a dry run only warns', () => {
    const file = write('dry-no-models', top.replace(models, '') + dev)
    const result = spawnSync(process.execPath, ['scripts/deploy.ts', '--config', file, '--dry-run'], { cwd: ROOT, encoding: 'utf8', env: { ...process.env, PATH: `${fakeWrangler}:${process.env.PATH}`, WRANGLER_SEND_METRICS: 'false' } })
    expect(result.status).toBe(0)
    expect(result.stderr).toMatch(/--dry-run: .*no models/)
    expect(result.stdout).toMatch(/fake wrangler ran: deploy --env= --config \S+ --dry-run/)
  })
})
