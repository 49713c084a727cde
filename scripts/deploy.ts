/**
 * `npm run deploy`: deploys wrangler.toml's top-level (production) Worker, after refusing a config that
 * was never edited (the placeholder endpoint id or KV namespace id) or that every request would fail on:
 * no PODGATE_KV binding, or variables the Worker refuses at its first request (no models, JSON that does
 * not parse, a field the schema refuses), or that sets a secret as a plain-text variable. A `--dry-run`
 * only warns. Extra arguments go to wrangler (`npm run deploy -- --dry-run --outdir /tmp/x`; `-- --help`
 * unchecked); `-- --config <file>` checks and deploys another config (`workers/composed.wrangler.toml`),
 * `-- --env <name>` that environment, with the `--var KEY:VALUE` given over its [vars], as wrangler
 * deploys them.
 */
import { existsSync, readFileSync, realpathSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'
import { unstable_readConfig } from 'wrangler'
import { runGroup } from './lib/run-group.ts'

/**
 * The Worker's own start, run here on Node. Imported by a name TypeScript does not follow: these modules
 * are typed for workerd (KVNamespace, ...), which the scripts' Node typecheck has no declarations of.
 */
const [{ ConfigError, createGateway }, { optionsFromEnv }, { SECRET_FIELDS }] = (await Promise.all(['../src/index.ts', '../src/worker.ts', '../src/config/env.ts'].map((m) => import(m)))) as [
  { ConfigError: new () => Error; createGateway: (options: object) => unknown },
  { optionsFromEnv: (env: object) => object },
  { SECRET_FIELDS: readonly (readonly [field: string, variable: string])[] },
]

const PLACEHOLDERS: [text: string, fix: string][] = [
  ['your0endpoint0id', 'put your Runpod endpoint id in PODGATE_MODELS under [vars]'],
  ['00000000000000000000000000000000', 'create the namespace with `npx wrangler kv namespace create PODGATE_KV` and put its id under [[kv_namespaces]]'],
]

/**
 * The part of a wrangler.toml that `wrangler deploy` reads for `env` (the top level when none): the lines
 * of its tables, without comments. A table after an `[env.*]` one that names no env is top-level again.
 */
export function envPart(toml: string, env?: string): string {
  let table = ''
  return toml.split('\n').filter((line) => {
    const header = /^\s*\[\[?\s*([\w.-]+)\s*\]\]?\s*(#.*)?$/.exec(line)
    if (header) table = header[1]!
    if (/^\s*#/.test(line)) return false
    return env ? table === `env.${env}` || table.startsWith(`env.${env}.`) : !table.startsWith('env.')
  }).join('\n')
}

/** What still needs editing before a deploy, as messages (empty: ready). */
export function placeholderProblems(toml: string, file = 'wrangler.toml', env?: string): string[] {
  const part = envPart(toml, env)
  return PLACEHOLDERS.filter(([text]) => part.includes(text)).map(([text, fix]) => `${file} still holds the placeholder "${text}": ${fix}.`)
}

/** What `configProblems` reads of a wrangler config (as wrangler resolves it for one environment). */
export interface DeployedConfig {
  main?: string | undefined
  vars: Record<string, unknown>
  kv_namespaces: readonly { binding: string }[]
  durable_objects: { bindings: readonly { name: string }[] }
}

/** Stands in for the secrets (RUNPOD_API_KEY, an endpoint's apiKeyEnv...): they are not in the file. */
const SECRET_STAND_IN = 'deploy-check-stand-in-for-a-secret-0123456789'
/**
 * The variables and bindings the Worker reads as options (absent from the file, they are absent, not
 * secrets), from `source` (src/config/env.ts): the fields of `PodgateWorkerEnv`, which types every `env.X`
 * the Worker reads (a new one does not typecheck until it is there), less the secrets `optionsFromEnv`
 * reads by `SECRET_FIELDS`. Derived, so a variable added to the Worker is never taken for a set secret.
 */
export function optionVars(source: string): Set<string> {
  const file = ts.createSourceFile('env.ts', source, ts.ScriptTarget.Latest)
  const env = file.statements.find((s): s is ts.InterfaceDeclaration => ts.isInterfaceDeclaration(s) && s.name.text === 'PodgateWorkerEnv')
  if (!env) throw new Error('scripts/deploy.ts: src/config/env.ts declares no interface PodgateWorkerEnv')
  const secrets = new Set(SECRET_FIELDS.map(([, variable]) => variable))
  return new Set(env.members.flatMap((m) => (m.name && (ts.isIdentifier(m.name) || ts.isStringLiteral(m.name)) && !secrets.has(m.name.text) ? [m.name.text] : [])))
}
export const OPTION_VARS = optionVars(readFileSync(fileURLToPath(new URL('../src/config/env.ts', import.meta.url)), 'utf8'))

/**
 * What in the config would make the deployed Worker answer every request with a 500, as messages (empty:
 * it starts): no PODGATE_KV binding, or what the Worker's own start (`optionsFromEnv`, `createGateway`)
 * refuses in its variables; and a secret it reads (RUNPOD_API_KEY, PODGATE_ADMIN_TOKEN,
 * PODGATE_SIGNING_SECRET, an endpoint's apiKeyEnv) set as a plain-text variable. Its value is never shown.
 */
export function configProblems(config: DeployedConfig, file = 'wrangler.toml'): string[] {
  const problems: string[] = []
  if (!config.kv_namespaces.some((kv) => kv.binding === 'PODGATE_KV')) {
    problems.push(`${file} binds no KV namespace as PODGATE_KV: every request would fail. Add [[kv_namespaces]] with binding = "PODGATE_KV" (README "Deploy in five steps").`)
  }
  const bound: Record<string, unknown> = { PODGATE_KV: {}, ...(config.durable_objects.bindings.some((b) => b.name === 'PODGATE_QUOTA') ? { PODGATE_QUOTA: {} } : {}) }
  // Every name the Worker reads that is no option variable is a secret's: these, and what apiKeyEnv names.
  const secrets = new Set<string>(SECRET_FIELDS.map(([, variable]) => variable))
  const env = new Proxy(config.vars, {
    get: (vars, name) => {
      if (typeof name !== 'string') return undefined
      if (!OPTION_VARS.has(name)) secrets.add(name)
      return Object.hasOwn(vars, name) ? vars[name] : Object.hasOwn(bound, name) ? bound[name] : OPTION_VARS.has(name) ? undefined : SECRET_STAND_IN
    },
  })
  try {
    // As createPodgateWorker starts: the production entry has no playground page, so it refuses PODGATE_PLAYGROUND.
    const playground = String(config.vars.PODGATE_PLAYGROUND) === 'true' && /workers[\\/]podgate\.ts$/.test(config.main ?? '')
    createGateway({ ...optionsFromEnv(env), ...(playground ? { playground } : {}) })
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error
    problems.push(`${file}: the Worker would answer every request with a 500: ${error.message.replace(/^podgate: /, '')}`)
  }
  for (const name of secrets) {
    if (Object.hasOwn(config.vars, name)) problems.push(`${file}: ${name} is a secret, but as a plain-text variable ([vars] or --var) it would sit in the file and show on Cloudflare's dashboard: remove it and run \`npx wrangler secret put ${name}\`.`)
  }
  return problems
}

/** The value of wrangler's option `--name`/`-x` in any of its spellings (`--name v`, `--name=v`, `-x v`). */
export function optionValue(args: readonly string[], name: string, short: string): string | undefined {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!
    if (arg === `--${name}` || arg === `-${short}`) return args[i + 1]
    if (arg.startsWith(`--${name}=`)) return arg.slice(name.length + 3)
  }
  return undefined
}

/** What yargs (wrangler's parser) takes for a negative number, not a flag. */
const NEGATIVE = /^-+([0-9]+([eE][+-]?[0-9]+)?|[0-9]*\.[0-9]+([eE][+-]?[0-9]+)?)$/

/**
 * The variables `wrangler deploy --var KEY:VALUE` sets over the config's [vars], read as wrangler reads
 * them: `--var K:V`, `--var=K:V`, several values after one `--var` (up to the next flag), `--var` given
 * again, the value after the first `:` (`K:a:b` is `a:b`), the last of a key given twice; none after `--`.
 */
export function cliVars(args: readonly string[]): Record<string, string> {
  const vars: Record<string, string> = {}
  for (let i = 0; i < args.length && args[i] !== '--'; i++) {
    const arg = args[i]!
    if (arg !== '--var' && !arg.startsWith('--var=')) continue
    const values = arg === '--var' ? [] : [arg.slice('--var='.length)]
    while (i + 1 < args.length && !(args[i + 1]!.startsWith('-') && !NEGATIVE.test(args[i + 1]!))) values.push(args[++i]!)
    for (const value of values) {
      const [key, ...rest] = value.split(':')
      vars[key!] = rest.join(':')
    }
  }
  return vars
}

/**
 * Whether wrangler (yargs) reads the boolean flag `names` in `args` as set: its last spelling not followed
 * by `false`, or `=true`; `--dry-run false`, `--dry-run=false` and a later `--no-dry-run` leave it unset.
 * In doubt, false: the config is then checked as for a deploy.
 */
function flagSet(args: readonly string[], names: readonly string[], negations: readonly string[]): boolean {
  let set = false
  for (let i = 0; i < args.length && args[i] !== '--'; i++) {
    const [flag, value] = args[i]!.split(/=(.*)/s) as [string, string | undefined]
    if (negations.includes(flag)) set = false
    else if (names.includes(flag)) set = value !== undefined ? value === 'true' : args[i + 1] !== 'false'
  }
  return set
}

/** Whether wrangler reads `args` as a dry run (`--dry-run`, `--dryRun`). */
export const isDryRun = (args: readonly string[]): boolean => flagSet(args, ['--dry-run', '--dryRun'], ['--no-dry-run', '--noDryRun'])

// Run as a script (also through a symlinked checkout, where argv[1] is not the real path).
if (process.argv[1] !== undefined && import.meta.filename === realpathSync(process.argv[1])) {
  const args = process.argv.slice(2)
  // wrangler's help deploys nothing: passed on unchecked (the check answered `--help` with its refusal).
  // Not `--version`: `wrangler deploy --version` (4.164) deploys.
  if (flagSet(args, ['--help', '-h'], ['--no-help'])) {
    process.exit((await runGroup('wrangler', ['deploy', ...args], { ...process.env, WRANGLER_SEND_METRICS: 'false' }, { terminal: true })) ?? 1)
  }
  // wrangler's own spellings (`--config=f`, `-c f`): the file checked must be the file deployed.
  const config = optionValue(args, 'config', 'c') ?? 'wrangler.toml'
  const env = optionValue(args, 'env', 'e')
  if (!existsSync(config)) {
    console.error(`[podgate] not deploying: no config file ${config}`)
    process.exit(1)
  }
  // `--var` overrides [vars] in what is deployed: the file's PODGATE_MODELS (and its placeholder) is not, the command line's is.
  const vars = cliVars(args)
  const problems = placeholderProblems(readFileSync(config, 'utf8'), config, env || undefined).filter((problem) => !(Object.hasOwn(vars, 'PODGATE_MODELS') && problem.includes(`"${PLACEHOLDERS[0]![0]}"`)))
  // The placeholders come first: the Worker would refuse them too, with the same fix.
  if (problems.length === 0) {
    let read: DeployedConfig | undefined
    try {
      read = unstable_readConfig({ config, env: env || undefined }, { hideWarnings: true })
    } catch {
      // A file wrangler cannot read (bad TOML, an unknown --env): wrangler refuses it below with its own words.
    }
    if (read) problems.push(...configProblems({ ...read, vars: { ...read.vars, ...vars } }, config))
  }
  if (problems.length > 0 && !isDryRun(args)) {
    console.error(`[podgate] not deploying:\n  ${problems.join('\n  ')}\n  (README "Deploy in five steps")`)
    process.exit(1)
  }
  // A dry run uploads nothing: it only bundles, so the shipped placeholders (and a config in the making) may stay for it.
  for (const problem of problems) console.warn(`[podgate] --dry-run: ${problem}`)
  // `--env=""` names the top-level environment: without it wrangler warns that [env.dev] exists. A second
  // --env would be refused ("expects a single value"), so one given is passed on alone.
  // The stop signal forwarded: a SIGTERM to npm alone (CI, an IDE's "stop") stops wrangler too. At a terminal
  // wrangler keeps it, to ask before it overrides what the dashboard changed.
  process.exit((await runGroup('wrangler', ['deploy', ...(env === undefined ? ['--env='] : []), ...args], { ...process.env, WRANGLER_SEND_METRICS: 'false' }, { terminal: true })) ?? 1)
}
