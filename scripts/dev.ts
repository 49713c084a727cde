/**
 * `npm run dev`: podgate on http://127.0.0.1:8787 (or $PORT) through `wrangler dev`, with local KV.
 *
 * Without a RUNPOD_API_KEY (in the environment or .dev.vars) it also starts the built-in Runpod
 * emulator on 127.0.0.1:8788 ($EMULATOR_PORT) and points the Worker at it. On first run it writes
 * .dev.vars with a random admin token (git-ignored), or adds one to a .dev.vars that has none; while it runs, .wrangler/podgate-dev.json holds its
 * URL, so `npm run keys` works without flags. It prints how to create an API key. A port already taken
 * (an earlier `npm run dev` still running, another project's `wrangler dev`) stops it before anything
 * starts, with the variable that picks another.
 */
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { appendFileSync, chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { createRunpodEmulator } from '../src/testing/index.ts'
import { clearDevUrl, readDevVars, writeDevUrl } from './lib/dev-state.ts'
import { serveNode } from './lib/serve-node.ts'

const host = '127.0.0.1'
const port = portFrom('PORT', 8787, 1)
const emulatorPort = portFrom('EMULATOR_PORT', 8788, 0)

/** `$variable` as a port, else the default. 0 (any free port) only for the emulator, whose URL is read back: podgate's is built from PORT. */
function portFrom(variable: string, fallback: number, min: number): number {
  const text = process.env[variable] || String(fallback)
  const wanted = Number(text)
  if (Number.isInteger(wanted) && wanted >= min && wanted < 65536) return wanted
  console.error(`[podgate] ${variable}=${text} is not a port: use ${min}-65535, e.g. ${variable}=${fallback + 10} npm run dev`)
  process.exit(1)
}

/**
 * Stops the script when `port` is taken. Found later, it would be worse: the health check below would take
 * the other server for this one and print "ready", and the emulator would die with a bare EADDRINUSE.
 */
async function requireFreePort(wanted: number, variable: string): Promise<void> {
  const taken = await new Promise<boolean>((resolve) => {
    const probe = createServer()
    probe.once('error', () => resolve(true))
    probe.listen(wanted, host, () => probe.close(() => resolve(false)))
  })
  if (!taken) return
  console.error(`[podgate] ${host}:${wanted} is taken (an earlier \`npm run dev\` still running?): stop it, or pick another port with ${variable}, e.g. ${variable}=${wanted + 10} npm run dev`)
  process.exit(1)
}

const adminTokenLine = () => `PODGATE_ADMIN_TOKEN="${randomBytes(24).toString('hex')}"\n`
if (!existsSync('.dev.vars')) {
  writeFileSync('.dev.vars', `# Local secrets for \`npm run dev\` (git-ignored).\n${adminTokenLine()}`, { mode: 0o600 })
  console.log('[podgate] wrote .dev.vars with a random PODGATE_ADMIN_TOKEN')
} else if (!readDevVars('.').PODGATE_ADMIN_TOKEN) {
  // A .dev.vars written by hand (e.g. only RUNPOD_API_KEY): without a token there is no admin API, and
  // `npm run keys` could never create the first key.
  const text = readFileSync('.dev.vars', 'utf8')
  appendFileSync('.dev.vars', `${text === '' || text.endsWith('\n') ? '' : '\n'}${adminTokenLine()}`)
  console.log('[podgate] added a random PODGATE_ADMIN_TOKEN to .dev.vars')
}
const devVars = readDevVars('.')
const realKey = process.env.RUNPOD_API_KEY ?? devVars.RUNPOD_API_KEY
await requireFreePort(port, 'PORT')
if (!realKey) await requireFreePort(emulatorPort, 'EMULATOR_PORT')
const args = ['dev', '--env', 'dev', '--ip', host, '--port', String(port), '--show-interactive-dev-session=false', '--env-file', '.dev.vars']
// Two dev servers at once (e.g. the docs test next to yours) would both want the default inspector port.
if (process.env.INSPECTOR_PORT) args.push('--inspector-port', process.env.INSPECTOR_PORT)
let closeEmulator: (() => Promise<void>) | undefined
/** Carries a real RUNPOD_API_KEY to wrangler while it runs; removed when it stops (wrangler re-reads it on a reload). */
const SECRETS_FILE = '.wrangler/dev-secrets.env'

if (realKey) {
  // Secrets never go on a command line (visible in `ps`): a git-ignored env file carries them.
  mkdirSync('.wrangler', { recursive: true })
  writeFileSync(SECRETS_FILE, `RUNPOD_API_KEY="${realKey}"\n`, { mode: 0o600 })
  chmodSync(SECRETS_FILE, 0o600)
  args.push('--env-file', SECRETS_FILE, '--var', `RUNPOD_BASE_URL:${process.env.RUNPOD_BASE_URL ?? 'https://api.runpod.ai/v2'}`)
  console.log('[podgate] RUNPOD_API_KEY is set: using real Runpod endpoints (edit PODGATE_MODELS in wrangler.toml [env.dev.vars])')
} else {
  const emulator = createRunpodEmulator()
  const server = await serveNode((request) => emulator.fetch(request), { port: emulatorPort, host })
  closeEmulator = server.close
  args.push('--var', 'RUNPOD_API_KEY:emulator-no-secret', '--var', `RUNPOD_BASE_URL:${server.url}/v2`)
  console.log(`[podgate] no RUNPOD_API_KEY in the environment or .dev.vars: Runpod emulator on ${server.url} (endpoints vllmopenai, vllmclassic, vllmcurrent)`)
}

const wrangler = spawn('wrangler', args, { stdio: 'inherit', env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } })
const wranglerExited = new Promise<void>((resolve) => wrangler.once('exit', () => resolve()))

// Once: the wrangler it stops exits too, and that exit must not replace the first reason's code.
let stopping: Promise<void> | undefined
const stop = (code: number) =>
  (stopping ??= (async () => {
    clearDevUrl('.')
    wrangler.kill('SIGTERM')
    rmSync(SECRETS_FILE, { force: true })
    // Exit only once wrangler has (it stops workerd first), so the port is free when this process is gone.
    const stuck = setTimeout(() => wrangler.kill('SIGKILL'), 5_000)
    await Promise.all([wranglerExited, closeEmulator?.()])
    clearTimeout(stuck)
    process.exit(code)
  })())

const base = `http://${host}:${port}`
void (async () => {
  // Polled until the Worker answers at all: an answer that is no 200 is the Worker refusing its config
  // (wrangler logged the ConfigError above), which polling on would only log again five times a second.
  let status: number | undefined
  for (let i = 0; i < 600 && status === undefined; i++) {
    try {
      const res = await fetch(`${base}/healthz`)
      await res.body?.cancel()
      status = res.status
    } catch {
      await new Promise((r) => setTimeout(r, 200)) // not up yet
    }
  }
  if (status !== 200) {
    console.error(status === undefined
      ? `[podgate] the Worker does not start: nothing answered on ${base} within 2 minutes (see wrangler's output above).`
      : `[podgate] the Worker does not start: GET /healthz answered ${status}; its error is above (a mistake in wrangler.toml [env.dev.vars]?). Fix it and run \`npm run dev\` again.`)
    await stop(1)
    return
  }
  writeDevUrl('.', base)
  console.log(`
[podgate] ready on ${base}
  create a key:  npm run keys -- create --name me      (reads .dev.vars and this URL)
  then chat:     curl -sN ${base}/v1/chat/completions -H "authorization: Bearer <key>" -H "content-type: application/json" \\
                   -d '{"model":"chat-current","messages":[{"role":"user","content":"Hello"}],"stream":true}'
  models: chat-openai (OpenAI route), chat-classic (native, classic worker-vllm), chat-current (native, current worker-vllm),
          embed-openai (embeddings, OpenAI route)
  playground:    ${base}/playground  with a key for its origin: npm run keys -- create --name playground --origins ${base}
  OpenAPI:       ${base}/openapi.json
`)
})()

wrangler.on('exit', (code) => void stop(code ?? 0))
process.on('SIGINT', () => void stop(0))
process.on('SIGTERM', () => void stop(0))
