/**
 * The `QuotaStore` contract every quota backend implements (`KvQuotaStore`, `StrictQuotaStore`).
 *
 * A request is admitted by `reserve` (one request plus its token estimate, and a stream slot when it
 * streams) and later `settle`d with the tokens it really used: the difference is refunded or charged
 * to the windows it was reserved in, and its stream slot is freed; a request that never went upstream is
 * taken back whole (`release`). A refused reservation changes nothing.
 */
import type { QuotaPolicy, QuotaStoreKind } from './policy.ts'
import type { LimitName, QuotaCost, QuotaUsage } from './limits.ts'

export interface Reservation {
  keyId: string
  /** The windows the reservation was counted in; settling corrects those, even after they rolled over. */
  minute: number
  day: number
  tokens: number
  stream: boolean
  /** The strict store's stream lease, freed on settle (or when it expires, should settle never come). */
  lease?: string
}

export interface ReserveInput {
  keyId: string
  policy: QuotaPolicy
  cost: QuotaCost
  /** Epoch ms deciding the windows. */
  now: number
  /**
   * Runs work after the response (`executionCtx.waitUntil`). Default: fire and forget. Without it, the
   * KV store also waits for every re-read of other shards' counts instead of running it in the background.
   */
  background?: (promise: Promise<unknown>) => void
}

export type ReserveResult =
  /** `usage` includes this reservation. */
  | { ok: true; reservation: Reservation; usage: QuotaUsage }
  /** `usage` is what the store saw when it refused. */
  | { ok: false; exceeded: LimitName; usage: QuotaUsage }

export interface SettleInput {
  reservation: Reservation
  /** The tokens the request finally counts for (0 refunds the whole reservation). */
  tokens: number
  /** `true`: the request never went upstream (a later stage refused it), so its request is taken back too. */
  release?: boolean
  /** A job's upstream id: its correction is made once (the KV store: as docs/quotas.md says), a repeat changes nothing. */
  job?: string
  background?: (promise: Promise<unknown>) => void
}

export interface QuotaStore {
  readonly kind: QuotaStoreKind
  reserve(input: ReserveInput): Promise<ReserveResult>
  settle(input: SettleInput): Promise<void>
  usage(input: { keyId: string; now: number }): Promise<QuotaUsage>
}
