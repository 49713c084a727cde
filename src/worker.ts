/**
 * `podgate/worker`: what the shipped Worker (`workers/podgate.ts`) is made of, so an app that mounts
 * podgate reads the same variables and secrets, or ships the same Worker from its own repository.
 *
 * @example
 * import { env } from 'cloudflare:workers'
 * import { Hono } from 'hono'
 * import { createGateway } from 'podgate'
 * import { optionsFromEnv, type PodgateWorkerEnv } from 'podgate/worker'
 *
 * const app = new Hono<{ Bindings: PodgateWorkerEnv }>()
 * app.route('/ai', createGateway(optionsFromEnv(env as unknown as PodgateWorkerEnv)))
 */
import type { Hono } from 'hono'
import { createGateway } from './gateway.ts'
import type { GatewayExtras } from './gateway.ts'
import { optionsFromEnv } from './config/env.ts'
import type { PodgateWorkerEnv } from './config/env.ts'
import type { GatewayEnv } from './types.ts'

export { optionsFromEnv, PLACEHOLDER_ENDPOINT_ID } from './config/env.ts'
export type { PodgateWorkerEnv } from './config/env.ts'

export interface PodgateWorkerOptions {
  /** Dev tools to mount (see `GatewayOptions.extras`). Default: none. */
  extras?: GatewayExtras
}

/**
 * The podgate Worker's handler: builds the gateway from `env` on the first request (bindings exist
 * only then) and reuses it for the isolate's life.
 *
 * @example
 * // your Worker's main module: the same Worker as podgate's own
 * export { QuotaObject } from 'podgate/durable-objects'
 * export default createPodgateWorker()
 */
export function createPodgateWorker(options: PodgateWorkerOptions = {}): ExportedHandler<PodgateWorkerEnv> {
  let gateway: Hono<GatewayEnv> | undefined
  return {
    fetch(request, env, ctx) {
      if (!gateway) {
        // optionsFromEnv refuses a strict quota with no PODGATE_QUOTA binding: this Worker's strict store.
        gateway = createGateway({
          ...optionsFromEnv(env),
          extras: options.extras,
          // Without `extras.playground` (the production entry) this refuses to start: a dev tool stays in dev.
          ...(String(env.PODGATE_PLAYGROUND) === 'true' ? { playground: true } : {}),
        })
      }
      return gateway.fetch(request, env, ctx)
    },
  }
}
