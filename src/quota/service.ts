/**
 * The quota service a gateway builds once: which policy applies to a call, and which store enforces it.
 * Shared by the pipeline stage and the usage routes so both answer from the same policy and store.
 */
import type { Context } from 'hono'
import { ConfigError } from '../config/resolve.ts'
import { invalidRequest } from '../errors/index.ts'
import type { GatewayEnv, HookContext } from '../types.ts'
import { KvQuotaStore } from './kv-store.ts'
import { DEFAULT_CONTROL_PER_MINUTE, effectivePolicy } from './policy.ts'
import type { QuotaPolicy, QuotaStoreKind } from './policy.ts'
import type { QuotaStore } from './store.ts'
import { StrictQuotaStore } from './strict-store.ts'
import type { QuotaObject } from './durable-object.ts'

export interface QuotaServiceOptions {
  /** Gateway-wide default limits (the lowest layer). Default: none. */
  defaults?: QuotaPolicy
  /** Default limits per model alias (above the gateway's, below the key's). Their `strict` is not read: a key's counters live in one store. */
  models?: ReadonlyMap<string, QuotaPolicy>
  /** The store for policies that do not set `strict`. Default `kv`. */
  store?: QuotaStoreKind
  /** KV namespace of the KV store. */
  kv: (c: HookContext) => KVNamespace
  /** Durable Object namespace of the strict store. Default: the `PODGATE_QUOTA` binding. `c` has your app's bindings. */
  objects?: (c: HookContext) => DurableObjectNamespace<QuotaObject> | undefined
  /** KV store flush and list interval, in ms. Default 1000. */
  flushIntervalMs?: number
  /** Clock deciding windows. Default `Date.now`. */
  now?: () => number
  /** Told when KV refuses the KV store's counter writes (see `KvQuotaStoreOptions.onWriteError`). Default: nothing. */
  onWriteError?: (error: unknown) => unknown
}

/** A control-call limit: a policy that always names `controlPerMinute`. */
export type ControlPolicy = QuotaPolicy & { controlPerMinute: number }

export interface QuotaService {
  now: () => number
  /** The store of a policy that does not set `strict` is the strict one (`quota.store`). */
  strict: boolean
  /**
   * The limits for a key calling `model` (or the key's own view when no model), or null when none apply.
   * `token`: `keyPolicy` is a token's own quota, which only narrows its key's (held to the layers below
   * by the key's own count): of those layers, only the store (`strict`) applies to it.
   */
  policyFor(keyPolicy: QuotaPolicy | null, model?: string, token?: boolean): QuotaPolicy | null
  /**
   * The limit on a key's control calls (to `model`, when the call names one): `controlPerMinute` from
   * the same layers, default 600, always set. Its store is the key's (strict when the key's policy is).
   */
  controlPolicy(keyPolicy: QuotaPolicy | null, model?: string): ControlPolicy
  storeFor(c: Context<GatewayEnv>, policy: QuotaPolicy): QuotaStore
}

/**
 * Refuses, as the caller's input, a quota whose store this gateway cannot run: `strict: true` with no
 * Durable Object bound. Checked where a key or token is given its quota, so the mistake is a 400 there
 * rather than a 500 on every later call. (A gateway strict by default has no calls then: `strictByDefault`.)
 */
export function assertEnforceable(service: QuotaService, c: Context<GatewayEnv>, policy: QuotaPolicy | null | undefined, param: string): void {
  if (!policy?.strict) return
  try {
    service.storeFor(c, policy)
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error
    throw invalidRequest("This gateway enforces no strict quotas: it has no Durable Object for them (QuotaObject bound as PODGATE_QUOTA). Set 'strict': false, or bind one.", { param: `${param}.strict` })
  }
}

export function createQuotaService(options: QuotaServiceOptions): QuotaService {
  const now = options.now ?? Date.now
  const gatewayStrict = options.store === 'strict'
  const objects = options.objects ?? defaultObjects
  // One KV shard per namespace per isolate: its counters are this isolate's share of every key's usage.
  const kvStores = new WeakMap<KVNamespace, KvQuotaStore>()
  const strictStores = new WeakMap<DurableObjectNamespace<QuotaObject>, StrictQuotaStore>()
  const hasDefaults = options.defaults !== undefined || (options.models?.size ?? 0) > 0
  // A model's limits, not its `strict`: a key's counters are in one store whatever model it calls.
  const modelLayer = (model = ''): QuotaPolicy => ({ ...options.models?.get(model), strict: undefined })

  return {
    now,
    strict: gatewayStrict,
    policyFor(keyPolicy, model, token) {
      // The common unlimited case: no merge, no allocation.
      if (!keyPolicy && !hasDefaults) return null
      const policy = effectivePolicy(options.defaults, modelLayer(model), keyPolicy)
      return token && policy ? effectivePolicy({ strict: policy.strict }, keyPolicy) : policy
    },
    controlPolicy(keyPolicy, model) {
      const layers = [options.defaults, modelLayer(model), keyPolicy]
      let limit = DEFAULT_CONTROL_PER_MINUTE
      let strict: boolean | undefined
      for (const layer of layers) {
        if (layer?.controlPerMinute !== undefined) limit = layer.controlPerMinute
        if (layer?.strict !== undefined) strict = layer.strict
      }
      return strict === undefined ? { controlPerMinute: limit } : { controlPerMinute: limit, strict }
    },
    storeFor(c, policy) {
      if (policy.strict ?? gatewayStrict) {
        const namespace = objects(c)
        if (!namespace) {
          throw new ConfigError('podgate: a strict quota needs a Durable Object: bind QuotaObject as PODGATE_QUOTA in wrangler.toml (docs/quotas.md), or pass `quota: { objects }` to createGateway.')
        }
        let store = strictStores.get(namespace)
        if (!store) strictStores.set(namespace, (store = new StrictQuotaStore(namespace)))
        return store
      }
      const kv = options.kv(c)
      let store = kvStores.get(kv)
      if (!store) kvStores.set(kv, (store = new KvQuotaStore(kv, { now, flushIntervalMs: options.flushIntervalMs, onWriteError: options.onWriteError })))
      return store
    },
  }
}

function defaultObjects(c: Context<GatewayEnv>): DurableObjectNamespace<QuotaObject> | undefined {
  return c.env?.PODGATE_QUOTA
}

/**
 * Whether `quota` (a gateway's options, checked or not yet) makes the strict store the default: `store:
 * 'strict'`, or `strict: true` in `defaults` (a model's `strict` is not read). Such a gateway with no Durable
 * Object is refused whole: by optionsFromEnv at startup, by createGateway at each call.
 */
export function strictByDefault(quota: { store?: unknown; defaults?: { strict?: unknown } } | undefined): boolean {
  return quota?.store === 'strict' || quota?.defaults?.strict === true
}
