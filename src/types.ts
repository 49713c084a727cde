/**
 * The Hono environment podgate's app and middleware share.
 */
import type { Context } from 'hono'
import type { Principal } from './auth/keys.ts'
import type { QuotaObject } from './quota/durable-object.ts'

/** Bindings the Worker provides. All optional: injectable through `GatewayOptions` instead. */
export interface GatewayBindings {
  PODGATE_KV?: KVNamespace
  /** The strict quota store's Durable Object (`QuotaObject`). */
  PODGATE_QUOTA?: DurableObjectNamespace<QuotaObject>
}

export interface GatewayVariables {
  /** Unique per request; sent back as `x-request-id` and in every log line. */
  requestId: string
  /** The authenticated caller, set by `apiKeyAuth`. */
  principal: Principal
  /** The model alias a completion call names, once its pipeline runs: for the log line of its failure. */
  model?: string
  /** When the request came in (`Date.now()`), set only when `logCalls` is on: its call line's `ms`. */
  start?: number
}

export interface GatewayEnv {
  Bindings: GatewayBindings
  Variables: GatewayVariables
}

/**
 * The context a hook of podgate's options gets (`kv`, `quota.objects`, `apiKeyAuth`'s `store`): the
 * request's, in your app, so `c.env` holds your app's bindings under their own names (`c.env.APP_KV`).
 */
export type HookContext = Context<{ Bindings: any; Variables: GatewayVariables }>
