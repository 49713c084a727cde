/**
 * What `npm run dev` leaves for the other scripts in its directory: `.dev.vars` (the admin token) and
 * `.wrangler/podgate-dev.json` (the URL it serves on, so `npm run keys` finds a `PORT=...` dev server).
 */
import { existsSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { parseEnv } from 'node:util'

const STATE_FILE = join('.wrangler', 'podgate-dev.json')

/**
 * `.dev.vars` as NAME -> value, read as wrangler reads it (dotenv: 'single', "double" or unquoted values,
 * `# comments`, `export NAME=`), so the token the scripts send is the one the Worker was given.
 */
export function readDevVars(dir: string): Record<string, string> {
  const file = join(dir, '.dev.vars')
  if (!existsSync(file)) return {}
  return parseEnv(readFileSync(file, 'utf8')) as Record<string, string>
}

/** The URL of the dev server started from `dir`, while it runs. */
export function readDevUrl(dir: string): string | undefined {
  const file = join(dir, STATE_FILE)
  if (!existsSync(file)) return undefined
  try {
    const { url, pid } = JSON.parse(readFileSync(file, 'utf8')) as { url?: unknown; pid?: unknown }
    // A dev server that died without cleaning up leaves a stale file: ignore it.
    if (typeof pid === 'number') process.kill(pid, 0)
    return typeof url === 'string' ? url : undefined
  } catch {
    return undefined
  }
}

export function writeDevUrl(dir: string, url: string): void {
  mkdirSync(join(dir, '.wrangler'), { recursive: true })
  writeFileSync(join(dir, STATE_FILE), JSON.stringify({ url, pid: process.pid }))
}

export function clearDevUrl(dir: string): void {
  rmSync(join(dir, STATE_FILE), { force: true })
}
