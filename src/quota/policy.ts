/**
 * Quota policy: the limits a key (or a model / gateway default) carries. Stored on key records.
 *
 * Windows are fixed and aligned to the clock: a minute window is one UTC clock minute, a day window
 * one UTC day. Counters belong to the key; a model default only sets the limit used when that model
 * is called.
 */
import * as z from 'zod/mini'
import { oneOf } from '../zod/one-of.ts'
import { positiveInt } from '../zod/numbers.ts'
import { optional } from '../zod/optional.ts'
import { strictObject } from '../zod/object.ts'
import { boolean } from '../zod/scalars.ts'

/** Control calls a key may make per minute when no layer sets `controlPerMinute`. */
export const DEFAULT_CONTROL_PER_MINUTE = 600

/** A limit: a positive integer (described for the OpenAPI document in src/openapi/descriptions.ts). */
const limit = () => optional(positiveInt())

export const quotaPolicySchema = strictObject({
  requestsPerMinute: limit(),
  requestsPerDay: limit(),
  tokensPerMinute: limit(),
  tokensPerDay: limit(),
  maxConcurrentStreams: limit(),
  controlPerMinute: limit(),
  strict: optional(boolean()),
})

export type QuotaPolicy = z.infer<typeof quotaPolicySchema>

/** Which store enforces a policy: `kv` (approximate, no coordination) or `strict` (a Durable Object per key). */
export const quotaStoreKindSchema = oneOf(['kv', 'strict'])
export type QuotaStoreKind = z.infer<typeof quotaStoreKindSchema>

/**
 * The effective policy, field by field: the key's own limits win over the model's defaults, which win
 * over the gateway's. Returns null when no limit applies, so the caller can skip quota work entirely.
 */
export function effectivePolicy(...layers: (QuotaPolicy | null | undefined)[]): QuotaPolicy | null {
  const merged: Record<string, unknown> = {}
  for (const layer of layers) {
    if (!layer) continue
    for (const name of Object.keys(layer)) {
      const value = (layer as Record<string, unknown>)[name]
      if (value !== undefined) merged[name] = value
    }
  }
  return hasLimits(merged) ? merged : null
}

/** Whether a completion has limits to count (`controlPerMinute` counts control calls only, never completions). */
export function hasLimits(policy: QuotaPolicy): boolean {
  return (
    policy.requestsPerMinute !== undefined ||
    policy.requestsPerDay !== undefined ||
    policy.tokensPerMinute !== undefined ||
    policy.tokensPerDay !== undefined ||
    policy.maxConcurrentStreams !== undefined
  )
}
