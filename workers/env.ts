/**
 * The Worker's environment -> gateway options. The code lives in the library (`podgate/worker`,
 * src/config/env.ts) so apps that mount podgate read the same variables; see docs/configuration.md.
 */
export { optionsFromEnv, PLACEHOLDER_ENDPOINT_ID } from '../src/worker.ts'
export type { PodgateWorkerEnv } from '../src/worker.ts'
