/**
 * `npm run deploy`: deploys wrangler.toml's top-level (production) Worker, after refusing a config that
 * was never edited: the placeholder endpoint id or KV namespace id (a `--dry-run` only warns). Extra
 * arguments go to wrangler (`npm run deploy -- --dry-run --outdir /tmp/x`); `-- --config <file>` checks
 * and deploys another config (`workers/composed.wrangler.toml`), `-- --env <name>` that environment.
 */
import { spawnSync } from 'node:child_process'
import { readFileSync, realpathSync } from 'node:fs'

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

/** The value of wrangler's option `--name`/`-x` in any of its spellings (`--name v`, `--name=v`, `-x v`). */
export function optionValue(args: readonly string[], name: string, short: string): string | undefined {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!
    if (arg === `--${name}` || arg === `-${short}`) return args[i + 1]
    if (arg.startsWith(`--${name}=`)) return arg.slice(name.length + 3)
  }
  return undefined
}

// Run as a script (also through a symlinked checkout, where argv[1] is not the real path).
if (process.argv[1] !== undefined && import.meta.filename === realpathSync(process.argv[1])) {
  const args = process.argv.slice(2)
  // wrangler's own spellings (`--config=f`, `-c f`): the file checked must be the file deployed.
  const config = optionValue(args, 'config', 'c') ?? 'wrangler.toml'
  const env = optionValue(args, 'env', 'e')
  const problems = placeholderProblems(readFileSync(config, 'utf8'), config, env || undefined)
  if (problems.length > 0 && !args.includes('--dry-run')) {
    console.error(`[podgate] not deploying:\n  ${problems.join('\n  ')}\n  (README "Deploy in five steps")`)
    process.exit(1)
  }
  // A dry run uploads nothing: it only bundles, so the shipped placeholders may stay for it.
  for (const problem of problems) console.warn(`[podgate] --dry-run: ${problem}`)
  // `--env=""` names the top-level environment: without it wrangler warns that [env.dev] exists. A second
  // --env would be refused ("expects a single value"), so one given is passed on alone.
  const result = spawnSync('wrangler', ['deploy', ...(env === undefined ? ['--env='] : []), ...args], { stdio: 'inherit', env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } })
  process.exit(result.status ?? 1)
}
