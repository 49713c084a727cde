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
  const url = liveRecord(dir)?.url
  return typeof url === 'string' ? url : undefined
}

/** What the state file holds, if the dev server that wrote it still runs. */
function liveRecord(dir: string): { url?: unknown; pid?: unknown; previous?: unknown } | undefined {
  const file = join(dir, STATE_FILE)
  if (!existsSync(file)) return undefined
  try {
    const record = JSON.parse(readFileSync(file, 'utf8')) as { url?: unknown; pid?: unknown; previous?: unknown }
    // A dev server that died without cleaning up leaves a stale file: ignore it.
    if (typeof record.pid === 'number') process.kill(record.pid, 0)
    return record
  } catch {
    return undefined
  }
}

/** Keeps the record of a dev server still running from `dir` (another PORT) as `previous`, for `clearDevUrl`. */
export function writeDevUrl(dir: string, url: string): void {
  mkdirSync(join(dir, '.wrangler'), { recursive: true })
  writeFileSync(join(dir, STATE_FILE), JSON.stringify({ url, pid: process.pid, previous: liveRecord(dir) }))
}

/**
 * This process's record goes, and the one it replaced comes back if that server still runs; another
 * running server's record stays (a second `npm run dev` that stopped before it was ready).
 */
export function clearDevUrl(dir: string): void {
  const record = liveRecord(dir)
  if (record !== undefined && record.pid !== process.pid) return
  const previous = record?.previous as { pid?: unknown } | undefined
  let alive = false
  try {
    alive = typeof previous?.pid === 'number' && process.kill(previous.pid, 0)
  } catch {
    // gone
  }
  if (alive) writeFileSync(join(dir, STATE_FILE), JSON.stringify(previous))
  else rmSync(join(dir, STATE_FILE), { force: true })
}
