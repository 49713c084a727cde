/**
 * Runs in Node before the workerd test pools start: serves a real Runpod emulator over HTTP on
 * loopback, so tests whose behaviour depends on a real upstream connection (stream relays, aborts,
 * long polls) exercise one. Its URL reaches the Worker as RUNPOD_BASE_URL (see vitest.config.ts).
 */
import type { TestProject } from 'vitest/node'
import { createRunpodEmulator } from '../src/testing/index.ts'
import { serveNode } from '../scripts/lib/serve-node.ts'

declare module 'vitest' {
  export interface ProvidedContext {
    emulatorUrl: string
  }
}

export default async function setup(project: TestProject) {
  const emulator = createRunpodEmulator()
  const server = await serveNode((request) => emulator.fetch(request), { port: 0, host: '127.0.0.1' })
  project.provide('emulatorUrl', server.url)
  return async () => {
    await server.close()
  }
}
