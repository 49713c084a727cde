/**
 * The Hono environment podgate's app and middleware share.
 */
import type { Principal } from './auth/keys.ts'

/** Bindings the Worker provides. All optional: injectable through `GatewayOptions` instead. */
export interface GatewayBindings {
  PODGATE_KV?: KVNamespace
}

export interface GatewayVariables {
  /** Unique per request; sent back as `x-request-id` and in every log line. */
  requestId: string
  /** The authenticated caller, set by `apiKeyAuth`. */
  principal: Principal
}

export interface GatewayEnv {
  Bindings: GatewayBindings
  Variables: GatewayVariables
}
