/**
 * The deployable podgate Worker: wires wrangler.toml vars and secrets to the library, nothing more.
 * The gateway is built on the first request (bindings only exist then) and reused by the isolate.
 */
import type { Hono } from 'hono'
import { createGateway } from '../src/index.ts'
import type { GatewayEnv } from '../src/index.ts'
import { optionsFromEnv } from './env.ts'
import type { PodgateWorkerEnv } from './env.ts'

// The strict quota store's Durable Object class: wrangler.toml binds it as PODGATE_QUOTA.
export { QuotaObject } from '../src/durable-objects.ts'

let gateway: Hono<GatewayEnv> | undefined

export default {
  fetch(request, env, ctx) {
    gateway ??= createGateway(optionsFromEnv(env))
    return gateway.fetch(request, env, ctx)
  },
} satisfies ExportedHandler<PodgateWorkerEnv>
