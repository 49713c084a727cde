/**
 * `npm run keys -- <command>`: manages podgate keys through the admin API of a running podgate (the
 * local dev server or a deployed Worker), by URL.
 *
 *   create --name <n> [--kind secret|publishable] [--models a,b|all] [--origins https://x,https://y]
 *          [--expires 30d|12h|<ISO date>|never] [--metadata k=v ...] [--quota '{"requestsPerMinute":10}']
 *   list
 *   get <id>
 *   update <id> [--name ...] [--models ...] [--origins ...] [--expires ...] [--metadata ...] [--quota ...|null]
 *   rotate <id>     a new secret, same id; the old secret stops working
 *   revoke <id>
 *
 * Every command takes --url (default $PODGATE_URL, else the `npm run dev` running from this directory,
 * else http://127.0.0.1:$PORT, PORT defaulting to 8787) and --admin-token (default $PODGATE_ADMIN_TOKEN,
 * else, for a loopback URL, the one `npm run dev` wrote to .dev.vars). Output is JSON on stdout; a secret
 * appears only for create and rotate.
 */
import { realpathSync } from 'node:fs'
import { parseArgs } from 'node:util'
import { readDevUrl, readDevVars } from './lib/dev-state.ts'

const COMMANDS = ['create', 'list', 'get', 'update', 'rotate', 'revoke'] as const
const isCommand = (name: string | undefined): name is (typeof COMMANDS)[number] => (COMMANDS as readonly (string | undefined)[]).includes(name)

const USAGE = `usage: npm run keys -- <${COMMANDS.join('|')}> [id] [options]
  --url <podgate URL>        default $PODGATE_URL, else the running \`npm run dev\`, else http://127.0.0.1:$PORT (8787)
  --admin-token <token>      default $PODGATE_ADMIN_TOKEN, else .dev.vars (for a local URL)
  --name <label>  --kind secret|publishable  --models a,b|all  --origins https://a,https://b
  --expires 30d|12h|90m|<ISO date>|never  --metadata key=value (repeatable)  --quota <JSON>|null
  --help, -h                 this text`

export class UsageError extends Error {}

/** `30d`, `12h`, `90m`, an ISO date, or `never` -> ms since the epoch (null for never). */
export function parseExpiry(text: string, now: number = Date.now()): number | null {
  if (text === 'never') return null
  const relative = /^(\d+)([dhm])$/.exec(text)
  if (relative) return now + Number(relative[1]) * { d: 86_400_000, h: 3_600_000, m: 60_000 }[relative[2] as 'd' | 'h' | 'm']
  // ISO dates only: Date.parse also takes '7' or 'May 5' and reads them as 2001.
  const at = /^\d{4}-\d{2}-\d{2}/.test(text) ? Date.parse(text) : NaN
  if (Number.isNaN(at)) throw new UsageError(`--expires '${text}': use 30d, 12h, 90m, an ISO date or never`)
  return at
}

function list(text: string): string[] {
  return text.split(',').map((s) => s.trim()).filter(Boolean)
}

type Flags = { [name: string]: string | boolean | string[] | undefined }

/** The admin API body for create/update, from the flags given (absent flags are left out). */
export function bodyFromFlags(flags: Flags, command: 'create' | 'update'): Record<string, unknown> {
  const body: Record<string, unknown> = {}
  if (typeof flags.name === 'string') body.name = flags.name
  if (typeof flags.kind === 'string') {
    if (command === 'update') throw new UsageError('--kind cannot change: create a new key instead')
    body.kind = flags.kind
  }
  if (typeof flags.models === 'string') body.models = flags.models === 'all' ? null : list(flags.models)
  if (typeof flags.origins === 'string') body.origins = list(flags.origins)
  if (typeof flags.expires === 'string') body.expiresAt = parseExpiry(flags.expires)
  if (Array.isArray(flags.metadata)) {
    const metadata: Record<string, string> = {}
    for (const pair of flags.metadata) {
      const eq = pair.indexOf('=')
      if (eq < 1) throw new UsageError(`--metadata '${pair}': use key=value`)
      metadata[pair.slice(0, eq)] = pair.slice(eq + 1)
    }
    body.metadata = metadata
  }
  if (typeof flags.quota === 'string') {
    try {
      body.quota = JSON.parse(flags.quota)
    } catch {
      throw new UsageError(`--quota must be JSON, e.g. '{"requestsPerMinute":10}', or null`)
    }
  }
  if (command === 'create' && body.name === undefined) throw new UsageError('create needs --name')
  return body
}

export interface KeysCliIO {
  env: Record<string, string | undefined>
  out: (text: string) => void
  err: (text: string) => void
  fetch: typeof fetch
  /** Where `npm run dev` ran (its .dev.vars and URL file), for the defaults. Default: none are read. */
  devDir?: string
}

const LOOPBACK = /^http:\/\/(127\.0\.0\.1|localhost|\[::1\])(:\d+)?$/
/** A loopback host name, as `new URL().hostname` gives it: plain http to it never leaves the machine. */
const LOOPBACK_HOST = /^(127(\.\d+){3}|localhost|\[::1\])$/

/** Runs one CLI invocation; returns the process exit code. */
export async function runKeysCli(argv: string[], io: KeysCliIO): Promise<number> {
  let parsed: ReturnType<typeof parse>
  try {
    parsed = parse(argv)
    if (parsed.values.help) {
      io.out(USAGE)
      return 0
    }
    const [command, id] = parsed.positionals
    if (parsed.positionals.length > 2) throw new UsageError(`${command} takes one key id: run it once per key`)
    // The command is checked before the token: a typo is a usage mistake whatever the environment.
    if (!isCommand(command)) throw new UsageError(command ? `unknown command '${command}'` : 'no command')
    const devUrl = io.devDir === undefined ? undefined : readDevUrl(io.devDir)
    // An empty variable counts as unset (`PORT= npm run keys`).
    const [source, given] = typeof parsed.values.url === 'string' ? ['--url', parsed.values.url] : io.env.PODGATE_URL ? ['PODGATE_URL', io.env.PODGATE_URL] : devUrl ? ['npm run dev', devUrl] : ['PORT', `http://127.0.0.1:${io.env.PORT || 8787}`]
    const url = given.replace(/\/+$/, '')
    // Without a scheme fetch fails as if nothing ran there, and a loopback address would miss the dev token.
    if (!/^https?:\/\/[^/]/.test(url) || !URL.canParse(url)) throw new UsageError(`${source} '${given}' is not a URL: use http(s)://host[:port], e.g. https://podgate.example.workers.dev or http://127.0.0.1:8787`)
    // The dev token goes only to a local server: never send it to a deployed Worker's URL.
    const devToken = io.devDir !== undefined && LOOPBACK.test(url) ? readDevVars(io.devDir).PODGATE_ADMIN_TOKEN : undefined
    const token = typeof parsed.values['admin-token'] === 'string' ? parsed.values['admin-token'] : io.env.PODGATE_ADMIN_TOKEN || devToken
    if (!token) {
      throw new UsageError(LOOPBACK.test(url)
        ? 'no admin token: pass --admin-token, set PODGATE_ADMIN_TOKEN, or run `npm run dev` once (it writes .dev.vars)'
        // .dev.vars' token goes only to a local server.
        : `no admin token for ${url}: pass --admin-token or set PODGATE_ADMIN_TOKEN to the token that Worker was given (\`wrangler secret put PODGATE_ADMIN_TOKEN\`)`)
    }
    // An exported PODGATE_ADMIN_TOKEN (a deployed Worker's) wins over .dev.vars: a 401 says so.
    const unauthorized = devToken && typeof parsed.values['admin-token'] !== 'string' && token !== devToken
      ? ' (the PODGATE_ADMIN_TOKEN of your environment was sent, not the other one in .dev.vars: unset it to use that)'
      : ''
    // Not refused (a LAN dev setup: `wrangler dev --ip 0.0.0.0`), but said, before the first call.
    const { protocol, hostname } = new URL(url)
    const warning = protocol === 'http:' && !LOOPBACK_HOST.test(hostname) ? `keys: warning: the admin token goes to ${url} over plain http://, readable on the network: use https:// unless it is your own LAN` : undefined
    const target: Target = { url, token, io, unauthorized, warning }
    const needsId = (): string => {
      if (!id) throw new UsageError(`${command} needs a key id (key_...)`)
      return encodeURIComponent(id)
    }
    let request: [method: string, path: string, body?: unknown]
    switch (command) {
      case 'create':
        request = ['POST', '/admin/keys', bodyFromFlags(parsed.values, 'create')]
        break
      case 'list':
        return await listAll(target)
      case 'get':
        request = ['GET', `/admin/keys/${needsId()}`]
        break
      case 'update':
        request = ['PATCH', `/admin/keys/${needsId()}`, bodyFromFlags(parsed.values, 'update')]
        break
      case 'rotate':
        request = ['POST', `/admin/keys/${needsId()}/rotate`]
        break
      case 'revoke':
        request = ['DELETE', `/admin/keys/${needsId()}`]
        break
    }
    const result = await call(target, ...request)
    if (result === null) return 1
    io.out(JSON.stringify(result, null, 2))
    const shown = result as { key?: unknown; kind?: unknown; expiresAt?: unknown }
    if (typeof shown.key === 'string') {
      // A publishable key is public by design (it works only from its origins); a secret key is not.
      io.err(shown.kind === 'publishable' ? 'The key is shown only now: put it in your page; it works only from its origins.' : 'The key is shown only now: store it as a secret.')
      // A rotation keeps the key's expiry: an expired key's new secret is refused as the old one was.
      if (typeof shown.expiresAt === 'number' && shown.expiresAt <= Date.now()) {
        io.err(`This key expired at ${new Date(shown.expiresAt).toISOString()}: its new secret is refused until you move its expiry (npm run keys -- update ${id} --expires 30d).`)
      }
    }
    return 0
  } catch (error) {
    if (error instanceof UsageError) {
      io.err(`keys: ${error.message}\n${USAGE}`)
      return 2
    }
    io.err(`keys: ${error instanceof Error ? error.message : String(error)}`)
    return 1
  }
}

function parse(argv: string[]) {
  try {
    return parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        url: { type: 'string' },
        'admin-token': { type: 'string' },
        name: { type: 'string' },
        kind: { type: 'string' },
        models: { type: 'string' },
        origins: { type: 'string' },
        expires: { type: 'string' },
        metadata: { type: 'string', multiple: true },
        quota: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    })
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error))
  }
}

/** Where the calls go, with what, and what a 401 adds to the API's message. */
interface Target {
  url: string
  token: string
  io: KeysCliIO
  unauthorized: string
  /** Printed before the first call, then cleared. */
  warning: string | undefined
}

/** One admin API call; prints the API's error and returns null when it refuses. */
async function call(target: Target, method: string, path: string, body?: unknown): Promise<unknown> {
  const { url, token, io, unauthorized, warning } = target
  if (warning) io.err(warning)
  target.warning = undefined
  let res: Response
  try {
    res = await io.fetch(url + path, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
      // Followed, a 301/302 turns a POST into a GET, and one to another origin (http -> https) drops the token.
      redirect: 'manual',
    })
  } catch (error) {
    // fetch's own message is "fetch failed"; why (an unknown host, a refused connection, TLS) is its cause.
    const cause = (error as { cause?: { message?: unknown; code?: unknown } }).cause
    const why = cause?.message || cause?.code || (error instanceof Error ? error.message : String(error))
    throw new Error(`cannot reach podgate at ${url} (${String(why).trim()}): ${LOOPBACK.test(url) ? 'is it running (npm run dev)? Pass --url for a deployed Worker.' : 'check the URL and your network.'}`)
  }
  if (res.status >= 300 && res.status < 400) throw new Error(`${url} answered ${method} ${path} with a redirect (${res.status}) to ${res.headers.get('location')}: pass the URL it redirects to as --url`)
  const text = await res.text()
  // A 5xx page may also be a podgate whose config stops it from starting (workerd's or Cloudflare's page, not JSON).
  const notPodgate = () => new Error(`${url} answered ${method} ${path} with ${res.status} but not podgate's JSON: is --url a podgate${res.status >= 500 ? ', and does it start (its log says why not: `npx wrangler tail`)' : ''}?`)
  if (!res.ok) {
    let message: unknown
    try {
      message = (JSON.parse(text) as { error: { message: unknown } }).error.message
    } catch {
      // no `error` object
    }
    // A web site's or a proxy's error page, not podgate's error JSON: named, not printed.
    if (typeof message !== 'string') throw notPodgate()
    // podgate answers every admin route 404 `Not found.` when it has no admin token; so does a URL that is no podgate.
    const hint = res.status === 404 && message === 'Not found.' ? ` (is ${url} a podgate with PODGATE_ADMIN_TOKEN set? Without one its admin API answers 404.)` : res.status === 401 ? unauthorized : ''
    io.err(`keys: ${method} ${path} -> ${res.status}: ${message.slice(0, 500)}${hint}`)
    return null
  }
  try {
    return JSON.parse(text)
  } catch {
    throw notPodgate()
  }
}

async function listAll(target: Target): Promise<number> {
  const { url, io } = target
  const keys: unknown[] = []
  let cursor: string | null = null
  do {
    const page = (await call(target, 'GET', `/admin/keys?limit=1000${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`)) as { data: unknown[]; cursor: string | null } | null
    if (page === null) return 1
    // A 200 from something that is not podgate's list (an error body, a proxy's page) has no data array.
    if (typeof page !== 'object' || !Array.isArray(page.data)) throw new Error(`${url} answered GET /admin/keys with a body that is not podgate's key list: is --url a podgate?`)
    keys.push(...page.data)
    cursor = page.cursor
  } while (cursor)
  io.out(JSON.stringify(keys, null, 2))
  return 0
}

// Run as a script (also through a symlinked checkout, where argv[1] is not the real path).
if (process.argv[1] !== undefined && import.meta.filename === realpathSync(process.argv[1])) {
  const code = await runKeysCli(process.argv.slice(2), {
    env: process.env,
    out: (text) => process.stdout.write(`${text}\n`),
    err: (text) => process.stderr.write(`${text}\n`),
    fetch,
    devDir: process.cwd(),
  })
  process.exitCode = code
}
