/**
 * `npm run deploy`: deploys wrangler.toml's top-level (production) Worker, after refusing a config that
 * was never edited: the placeholder endpoint id or KV namespace id (a `--dry-run` only warns). Extra
 * arguments go to wrangler (`npm run deploy -- --dry-run --outdir /tmp/x`); `-- --config <file>` checks
 * and deploys another config (`workers/composed.wrangler.toml`).
 */
import { spawnSync } from 'node:child_process'
import { readFileSync, realpathSync } from 'node:fs'

const PLACEHOLDERS: [text: string, fix: string][] = [
  ['your0endpoint0id', 'put your Runpod endpoint id in PODGATE_MODELS under [vars]'],
  ['00000000000000000000000000000000', 'create the namespace with `npx wrangler kv namespace create PODGATE_KV` and put its id under [[kv_namespaces]]'],
]

/** The top-level part of a wrangler.toml (before the first `[env.*]` table), without comments. */
export function topLevel(toml: string): string {
  const end = toml.search(/^\[+env\./m)
  return (end === -1 ? toml : toml.slice(0, end)).split('\n').filter((line) => !/^\s*#/.test(line)).join('\n')
}

/** What still needs editing before a deploy, as messages (empty: ready). */
export function placeholderProblems(toml: string, file = 'wrangler.toml'): string[] {
  const top = topLevel(toml)
  return PLACEHOLDERS.filter(([text]) => top.includes(text)).map(([text, fix]) => `${file} still holds the placeholder "${text}": ${fix}.`)
}

// Run as a script (also through a symlinked checkout, where argv[1] is not the real path).
if (process.argv[1] !== undefined && import.meta.filename === realpathSync(process.argv[1])) {
  const args = process.argv.slice(2)
  const configAt = args.indexOf('--config')
  const config = configAt >= 0 ? args[configAt + 1]! : 'wrangler.toml'
  const problems = placeholderProblems(readFileSync(config, 'utf8'), config)
  if (problems.length > 0 && !args.includes('--dry-run')) {
    console.error(`[podgate] not deploying:\n  ${problems.join('\n  ')}\n  (README "Deploy in five steps")`)
    process.exit(1)
  }
  // A dry run uploads nothing: it only bundles, so the shipped placeholders may stay for it.
  for (const problem of problems) console.warn(`[podgate] --dry-run: ${problem}`)
  // `--env=""` names the top-level environment: without it wrangler warns that [env.dev] exists.
  const result = spawnSync('wrangler', ['deploy', '--env=', ...args], { stdio: 'inherit', env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } })
  process.exit(result.status ?? 1)
}
