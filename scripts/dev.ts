/**
 * `npm run dev`: podgate on http://127.0.0.1:8787 through `wrangler dev`, with local KV.
 *
 * Without a RUNPOD_API_KEY (in the environment or .dev.vars) it also starts the built-in Runpod
 * emulator on 127.0.0.1:8788 and points the Worker at it. On first run it writes .dev.vars with a
 * random admin token (git-ignored) and prints how to create an API key.
 */
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { createRunpodEmulator } from '../src/testing/index.ts'
import { serveNode } from './lib/serve-node.ts'

const port = Number(process.env.PORT ?? 8787)
const emulatorPort = Number(process.env.EMULATOR_PORT ?? 8788)
const host = '127.0.0.1'

function readDevVars(): Record<string, string> {
  if (!existsSync('.dev.vars')) return {}
  const vars: Record<string, string> = {}
  for (const line of readFileSync('.dev.vars', 'utf8').split('\n')) {
    const match = /^\s*([A-Z0-9_]+)\s*=\s*"?([^"]*)"?\s*$/.exec(line)
    if (match) vars[match[1]!] = match[2]!
  }
  return vars
}

if (!existsSync('.dev.vars')) {
  writeFileSync('.dev.vars', `# Local secrets for \`npm run dev\` (git-ignored).\nPODGATE_ADMIN_TOKEN="${randomBytes(24).toString('hex')}"\n`, { mode: 0o600 })
  console.log('[podgate] wrote .dev.vars with a random PODGATE_ADMIN_TOKEN')
}
const devVars = readDevVars()
const adminToken = devVars.PODGATE_ADMIN_TOKEN ?? ''
const realKey = process.env.RUNPOD_API_KEY ?? devVars.RUNPOD_API_KEY
const args = ['dev', '--env', 'dev', '--ip', host, '--port', String(port), '--show-interactive-dev-session=false', '--env-file', '.dev.vars']
let closeEmulator: (() => Promise<void>) | undefined

if (realKey) {
  // Secrets never go on a command line (visible in `ps`): a git-ignored env file carries them.
  mkdirSync('.wrangler', { recursive: true })
  writeFileSync('.wrangler/dev-secrets.env', `RUNPOD_API_KEY="${realKey}"\n`, { mode: 0o600 })
  chmodSync('.wrangler/dev-secrets.env', 0o600)
  args.push('--env-file', '.wrangler/dev-secrets.env', '--var', `RUNPOD_BASE_URL:${process.env.RUNPOD_BASE_URL ?? 'https://api.runpod.ai/v2'}`)
  console.log('[podgate] RUNPOD_API_KEY is set: using real Runpod endpoints (edit PODGATE_MODELS in wrangler.toml [env.dev.vars])')
} else {
  const emulator = createRunpodEmulator()
  const server = await serveNode((request) => emulator.fetch(request), { port: emulatorPort, host })
  closeEmulator = server.close
  args.push('--var', 'RUNPOD_API_KEY:emulator-no-secret', '--var', `RUNPOD_BASE_URL:${server.url}/v2`)
  console.log(`[podgate] no RUNPOD_API_KEY: Runpod emulator on ${server.url} (endpoints vllmopenai, vllmclassic, vllmcurrent)`)
}

const wrangler = spawn('wrangler', args, { stdio: 'inherit', env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } })

const base = `http://${host}:${port}`
void (async () => {
  for (let i = 0; i < 600; i++) {
    try {
      const res = await fetch(`${base}/healthz`)
      if (res.ok) break
    } catch {
      // not up yet
    }
    await new Promise((r) => setTimeout(r, 200))
  }
  console.log(`
[podgate] ready on ${base}
  create a key:  curl -s -X POST ${base}/admin/keys -H "authorization: Bearer ${adminToken}" -H "content-type: application/json" -d '{"name":"me"}'
  then chat:     curl -s ${base}/v1/chat/completions -H "authorization: Bearer <key>" -H "content-type: application/json" \\
                   -d '{"model":"chat-openai","messages":[{"role":"user","content":"Hello"}]}'
  models: chat-openai (OpenAI route), chat-classic (native, classic worker-vllm), chat-current (native, current worker-vllm),
          embed-openai (embeddings, OpenAI route)
`)
})()

const stop = async (code: number) => {
  wrangler.kill('SIGTERM')
  await closeEmulator?.()
  process.exit(code)
}
wrangler.on('exit', (code) => void stop(code ?? 0))
process.on('SIGINT', () => void stop(0))
process.on('SIGTERM', () => void stop(0))
