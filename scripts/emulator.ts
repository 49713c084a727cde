/**
 * Serves the Runpod Serverless + worker-vllm emulator over HTTP, for local development and load runs.
 *
 *   node scripts/emulator.ts [--port 8788] [--host 127.0.0.1] [--api-key KEY]
 *
 * Env: EMULATOR_PORT, EMULATOR_HOST, EMULATOR_API_KEY (flags win). Binds loopback unless told otherwise.
 */

import { parseArgs } from 'node:util'
import { createRunpodEmulator } from '../src/testing/index.ts'
import { serveNode } from './lib/serve-node.ts'

const USAGE = 'usage: node scripts/emulator.ts [--port 8788] [--host 127.0.0.1] [--api-key KEY]'
let values: { port?: string; host?: string; 'api-key'?: string; help?: boolean }
try {
  ;({ values } = parseArgs({
    options: {
      port: { type: 'string' },
      host: { type: 'string' },
      'api-key': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  }))
} catch (error) {
  console.error(`emulator: ${error instanceof Error ? error.message : String(error)}\n${USAGE}`)
  process.exit(2)
}

if (values.help) {
  console.log(USAGE)
  process.exit(0)
}

// An empty variable counts as unset (`EMULATOR_PORT= npm run emulator`): Number('') is 0, a random port.
const port = Number(values.port ?? (process.env.EMULATOR_PORT || 8788))
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`emulator: invalid port ${values.port ?? process.env.EMULATOR_PORT}; pass --port 0-65535`)
  process.exit(2)
}
const host = values.host ?? (process.env.EMULATOR_HOST || '127.0.0.1')
const apiKey = values['api-key'] ?? (process.env.EMULATOR_API_KEY || undefined)

const emulator = createRunpodEmulator({ apiKey })
const server = await serveNode((request) => emulator.fetch(request), { port, host }).catch((error: unknown) => {
  if ((error as { code?: unknown }).code !== 'EADDRINUSE') throw error
  console.error(`emulator: ${host}:${port} is taken (\`npm run dev\` runs one there): pick another with --port or EMULATOR_PORT`)
  process.exit(1)
})
console.log(
  `Runpod emulator on ${server.url}/v2 (${apiKey ? 'Bearer key required' : 'any key'}): ` +
    'endpoint ids containing "classic" act as worker-vllm <= v2.23, others as >= v2.24; ' +
    `control API at ${server.url}/__emulator/{calls,jobs,last-request/<endpoint>,reset,configure}; behaviour: docs/emulator.md`,
)

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    server.close().then(
      () => process.exit(0),
      () => process.exit(1),
    )
  })
}
