/**
 * Strict quotas: one Durable Object per key (`QuotaObject`) decides every admission for that key,
 * so enforcement is exact and atomic under any concurrency, at the price of one Durable Object call
 * per reservation and per settle.
 *
 * The object itself is in `durable-object.ts` (`podgate/durable-objects`).
 */
import type { QuotaUsage } from './limits.ts'
import type { QuotaObject } from './durable-object.ts'
import type { QuotaStore, ReserveInput, ReserveResult, SettleInput } from './store.ts'

/**
 * The `QuotaStore` over `QuotaObject`s: one object per key, found by name.
 *
 * @example
 * // wrangler.toml: [[durable_objects.bindings]] name = "PODGATE_QUOTA", class_name = "QuotaObject"
 * // and export { QuotaObject } from 'podgate/durable-objects' in the Worker's main module.
 * const store = new StrictQuotaStore(env.PODGATE_QUOTA)
 */
export class StrictQuotaStore implements QuotaStore {
  readonly kind = 'strict'
  readonly #namespace: DurableObjectNamespace<QuotaObject>

  constructor(namespace: DurableObjectNamespace<QuotaObject>) {
    this.#namespace = namespace
  }

  async settle(input: SettleInput): Promise<void> {
    const { reservation } = input
    const tokens = input.tokens - reservation.tokens
    const requests = input.release ? -1 : 0
    if (tokens === 0 && requests === 0 && reservation.lease === undefined) return
    await this.#stub(reservation.keyId).settle({ ...reservation, tokens, requests, job: input.job })
  }

  async reserve(input: ReserveInput): Promise<ReserveResult> {
    const result = await this.#stub(input.keyId).reserve({ policy: input.policy, cost: input.cost, now: input.now })
    if (!result.ok) return result
    const reservation = { keyId: input.keyId, minute: result.usage.minute, day: result.usage.day, tokens: input.cost.tokens, stream: input.cost.stream, lease: result.lease }
    return { ok: true, reservation, usage: result.usage }
  }

  async usage(input: { keyId: string; now: number }): Promise<QuotaUsage> {
    return this.#stub(input.keyId).usage({ now: input.now })
  }

  #stub(keyId: string) {
    return this.#namespace.get(this.#namespace.idFromName(keyId))
  }
}
