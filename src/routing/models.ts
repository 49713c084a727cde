/**
 * Model aliases resolved once at startup: each alias with its endpoints, served name and a weighted
 * pick. Callers never influence an upstream URL beyond choosing a configured alias.
 */
import type { ModelConfig, ResolvedOptions } from '../config/schema.ts'
import { GatewayError, invalidRequest } from '../errors/index.ts'
import type { Principal } from '../auth/keys.ts'
import { resolveEndpoint } from '../upstream/runpod/client.ts'
import type { Endpoint } from '../upstream/runpod/client.ts'

export interface ResolvedModel {
  alias: string
  config: ModelConfig
  servedModelName: string
  /**
   * The `model` its streamed chunks carry, live, cached or coalesced: the alias, or the served name when
   * `streaming.rewriteModel` is off. JSON answers always carry the alias.
   */
  streamedModelName: string
  endpoints: Endpoint[]
  /** Running sum of endpoint weights, for a weighted pick. */
  cumulative: number[]
}

/**
 * The model table `nativeRoutes` routes by, from resolved options.
 *
 * @example
 * const config = resolveConfig(options)
 * app.route('/v2', nativeRoutes({ models: resolveModels(config), client, runpod: config.runpod, secret, maxBodyBytes: 1 << 20 }))
 */
export function resolveModels(options: ResolvedOptions): ModelTable {
  const table = new Map<string, ResolvedModel>()
  for (const [alias, config] of Object.entries(options.models)) {
    const endpoints = config.endpoints.map((e) => resolveEndpoint(e, options.runpod.baseUrl, config.mode))
    let sum = 0
    const cumulative = endpoints.map((e) => (sum += e.weight))
    const servedModelName = config.servedModelName ?? alias
    const streamedModelName = options.streaming.rewriteModel ? alias : servedModelName
    table.set(alias, { alias, config, servedModelName, streamedModelName, endpoints, cumulative })
  }
  return table
}

export type ModelTable = ReadonlyMap<string, ResolvedModel>

/**
 * The model's endpoints in the order a request tries them: a weighted pick first, then the others in
 * weighted random order; endpoints whose breaker is open are left out while any other's is closed (every
 * endpoint is tried when all are open).
 */
export function orderEndpoints(model: ResolvedModel, isOpen: (endpoint: Endpoint) => boolean, random: () => number = Math.random): Endpoint[] {
  const remaining = [...model.endpoints]
  const order: Endpoint[] = []
  while (remaining.length > 0) {
    const total = remaining.reduce((sum, e) => sum + e.weight, 0)
    let target = random() * total
    let index = remaining.findIndex((e) => (target -= e.weight) < 0)
    if (index === -1) index = remaining.length - 1
    order.push(remaining.splice(index, 1)[0]!)
  }
  // Each breaker read once: one whose cool-down ended between two reads would leave its endpoint out.
  // While one is closed the open ones are left out, so a retry goes to a closed one again, not to them.
  const open = new Set(order.filter(isOpen))
  return open.size < order.length ? order.filter((e) => !open.has(e)) : order
}

/** Looks up the alias a caller asked for and checks the caller may use it. */
export function modelFor(table: ModelTable, alias: unknown, principal: Principal): ResolvedModel {
  if (typeof alias !== 'string' || alias.length === 0) {
    throw invalidRequest("You must provide a model parameter: a string naming a podgate model.", { param: 'model' })
  }
  const model = table.get(alias)
  if (!model) {
    throw new GatewayError('model_not_found', `The model '${alias.slice(0, 128)}' does not exist. GET /v1/models lists the models your key may use.`, { param: 'model' })
  }
  if (principal.models !== null && !principal.models.includes(alias)) {
    throw new GatewayError('permission_denied', `Your key may not use the model '${alias}'.`, { param: 'model' })
  }
  return model
}
