/**
 * API keys: generation, hashing, and their records in Workers KV.
 *
 * A key is shown once, at creation or rotation; KV only ever holds its SHA-256. Storage schema
 * (docs/storage.md):
 *   `key:<id>`          -> KeyRecord (JSON), the operator's view and what is enforced, looked up by id (and by
 *                          tokens' parent check, and by a key's lookup once its hash named the id)
 *   `keyhash:<sha256>`  -> KeyRecord (JSON), looked up by the presented key's hash: names the id, and serves as
 *                          the record only while `key:<id>` holds another secret (a rotation raced)
 *   `revoked:<id>`      -> { revokedAt }: the revocation tombstone. Written first by a revoke, never
 *                          removed or overwritten by anything else.
 *   `retired:<sha256>`  -> { retiredAt, hash, hint }: a rotated-away secret's tombstone, naming the secret
 *                          that replaced it. Written first by a rotate, never removed, written by nothing else.
 * KV has no compare-and-swap and the last write wins, so a PATCH or rotate racing a revoke can write the
 * record back with `revokedAt: null`, and one racing a rotate can write back the old secret's hash. Every
 * read therefore also checks the tombstones: a revoked key stays revoked, a retired secret stays
 * refused, and a record holding a retired hash is read with the secret that replaced it. Two PATCHes at
 * once can leave the two records different; a key obeys `key:<id>`, as its tokens and the admin API do.
 * A lookup that misses the in-isolate cache (bounded, with a TTL) does four KV reads (three by id) in two
 * round trips; steady-state traffic does none. Revocation, rotation and scope changes take effect within KV's propagation delay
 * (up to ~60 s) plus `keyCacheTtlMs` (at once in the isolate that made them).
 */

import type { QuotaPolicy } from '../quota/policy.ts'
import { sha256Hex } from '../crypto/sha256.ts'
import { GatewayError } from '../errors/index.ts'
import type { Context } from 'hono'
import type { GatewayEnv } from '../types.ts'

/** A key id as podgate mints them: anything else names no key, and is not looked up. */
const KEY_ID = /^key_[A-Za-z0-9]{16}$/

/** Secret keys, for servers. */
export const KEY_PREFIX = 'pg_sk_'
/** Publishable keys, for web pages: they work only from their allowed origins. */
export const PUBLISHABLE_KEY_PREFIX = 'pg_pk_'
/** Every credential podgate issues starts `pg_` + two letters + `_`: what the logger scrubs. */
export const CREDENTIAL_PATTERN = /pg_(?:sk|pk|tk)_[A-Za-z0-9._-]+/g
const KEY_BODY_LENGTH = 32
const ID_PREFIX = 'key_'

export type KeyKind = 'secret' | 'publishable'
/** What the caller presented: a key of either kind, or a token minted from a secret key. */
export type CredentialKind = KeyKind | 'token'

export interface KeyRecord {
  id: string
  name: string
  kind: KeyKind
  /** Model aliases the key may use; null means all. */
  models: string[] | null
  /**
   * Browser origins (`https://app.example.com`) the key may be used from. Publishable keys need at
   * least one; a secret key with none is refused whenever a request carries an `Origin`.
   */
  origins: string[]
  metadata: Record<string, string>
  /** Limits for this key; null means the gateway's defaults. */
  quota: QuotaPolicy | null
  createdAt: number
  /** Last change of scopes or secret (ms since epoch). */
  updatedAt: number
  /** After this instant (ms since epoch) the key is refused; null: never. */
  expiresAt: number | null
  revokedAt: number | null
  /** SHA-256 hex of the key. Never the key itself. */
  hash: string
  /** The first characters of the key, to help people recognise it in lists. */
  hint: string
}

/** What the rest of the request path knows about the caller. */
export interface Principal {
  keyId: string
  name: string
  /** The kind of the key (for a token: of its parent key). */
  kind: KeyKind
  /** What was presented. */
  credential: CredentialKind
  /** Model aliases allowed (for a token: its scope within the parent's); null means all. */
  models: string[] | null
  /** The key's limits (for a token: the parent key's; counters belong to the key). */
  quota: QuotaPolicy | null
  /** For a token, its id (`tok_...`); null otherwise. */
  tokenId: string | null
  /**
   * For a token minted with its own limits: those limits, counted under `tokenId` on top of the key's
   * own. Null otherwise.
   */
  tokenQuota: QuotaPolicy | null
  /** For a token, when it expires (ms since the epoch): an open stream ends then. Null otherwise. */
  tokenExpiresAt: number | null
  /** When the key (for a token: its parent key) expires, in ms since the epoch; null: never. */
  keyExpiresAt: number | null
  /** A prefix of the key secret's hash: names the secret's generation in minted tokens, reveals nothing. */
  keyGeneration: string
  /**
   * For a token minted with a `sub`: the end user it stands for, as the minting backend named them.
   * Cached answers are kept per subject (docs/security.md). Null otherwise.
   */
  subject: string | null
}

function randomBase62(length: number): string {
  // Rejection sampling keeps every character uniform (256 is not a multiple of 62).
  let out = ''
  while (out.length < length) {
    const bytes = crypto.getRandomValues(new Uint8Array(length * 2))
    for (const b of bytes) {
      // b % 62 is a digit, then A-Z, then a-z: char codes 48-57, 65-90 and 97-122.
      const i = b % 62
      if (b < 248 && out.length < length) out += String.fromCharCode(i + (i < 10 ? 48 : i < 36 ? 55 : 61))
    }
  }
  return out
}

export function generateKey(kind: KeyKind = 'secret'): string {
  return (kind === 'publishable' ? PUBLISHABLE_KEY_PREFIX : KEY_PREFIX) + randomBase62(KEY_BODY_LENGTH)
}

export function generateKeyId(): string {
  return ID_PREFIX + randomBase62(16)
}

export function generateTokenId(): string {
  return 'tok_' + randomBase62(16)
}

/** True when `text` has the shape of a podgate key (either kind); says nothing of its validity. */
export function isKeyShaped(text: string): boolean {
  return (text.startsWith(KEY_PREFIX) || text.startsWith(PUBLISHABLE_KEY_PREFIX)) && text.length === KEY_PREFIX.length + KEY_BODY_LENGTH
}

/** Compares two secrets in time independent of where they differ (both are hashed to equal length first). */
export async function timingSafeEqualText(a: string, b: string): Promise<boolean> {
  const encoder = new TextEncoder()
  const [da, db] = await Promise.all([
    crypto.subtle.digest('SHA-256', encoder.encode(a)),
    crypto.subtle.digest('SHA-256', encoder.encode(b)),
  ])
  const x = new Uint8Array(da)
  const y = new Uint8Array(db)
  let diff = 0
  for (let i = 0; i < x.length; i++) diff |= (x[i] ?? 0) ^ (y[i] ?? 0)
  return diff === 0
}

export function toPrincipal(record: KeyRecord): Principal {
  return { keyId: record.id, name: record.name, kind: record.kind, credential: record.kind, models: record.models, quota: record.quota ?? null, tokenId: null, tokenQuota: null, tokenExpiresAt: null, keyExpiresAt: record.expiresAt, keyGeneration: keyGeneration(record), subject: null }
}

export function keyGeneration(record: KeyRecord): string {
  return record.hash.slice(0, 16)
}

/** A record as older podgate versions stored it gets today's defaults for the fields they lacked. */
function upgrade(record: KeyRecord): KeyRecord {
  return { ...record, origins: record.origins ?? [], expiresAt: record.expiresAt ?? null, updatedAt: record.updatedAt ?? record.createdAt }
}

/** Whether a record is usable now: not revoked, not expired. */
export function isLive(record: KeyRecord, now: number = Date.now()): boolean {
  return record.revokedAt === null && (record.expiresAt === null || record.expiresAt > now)
}

/** What an operator may set at creation. */
export interface KeyInput {
  name: string
  kind?: KeyKind
  models?: string[] | null
  origins?: string[]
  metadata?: Record<string, string>
  quota?: QuotaPolicy | null
  expiresAt?: number | null
}

/** What an operator may change later (the kind never changes: mint a new key instead). */
export type KeyPatch = Partial<Omit<KeyInput, 'kind'>>

export interface KeyStoreOptions {
  /** In-isolate cache TTL for lookups, in ms. 0 disables it. */
  cacheTtlMs: number
  /** Most entries the in-isolate cache holds. Default 1000. */
  cacheSize?: number
}

interface CacheEntry {
  record: KeyRecord | null
  expires: number
}

/** An isolate's lookups over one KV namespace. */
interface KeyCache {
  entries: Map<string, CacheEntry>
  /** Bumped by every revoke, rotate and update here: a read that began before one is not kept. */
  forgets: number
}

/** What a rotate writes for the secret it retires. */
interface Retirement {
  retiredAt: number
  /** The secret that replaced it: its hash and hint. */
  hash: string
  hint: string
}

/** One cache per KV namespace per isolate, so several gateways over one namespace share it. */
const caches = new WeakMap<KVNamespace, KeyCache>()

/** The operator's view of a key: everything but the hash. */
export function publicKeyView(record: KeyRecord): Omit<KeyRecord, 'hash'> {
  const { hash: _hash, ...view } = record
  return view
}

/** Most retirements followed from one record: each is a rotation that raced a write of that record. */
const MAX_RETIREMENTS_FOLLOWED = 8

export class KeyStore {
  readonly #kv: KVNamespace
  readonly #ttl: number
  readonly #size: number
  readonly #cache: KeyCache

  constructor(kv: KVNamespace, options: KeyStoreOptions) {
    this.#kv = kv
    this.#ttl = options.cacheTtlMs
    this.#size = options.cacheSize ?? 1000
    let cache = caches.get(kv)
    if (!cache) caches.set(kv, (cache = { entries: new Map(), forgets: 0 }))
    this.#cache = cache
  }

  /**
   * The record for a presented key, or null when it is unknown, revoked or rotated away. Expiry is the
   * caller's to check (`isLive`), so an expired key can be told apart from an unknown one.
   */
  async lookup(key: string): Promise<KeyRecord | null> {
    if (!isKeyShaped(key)) return null
    const hash = await sha256Hex(key)
    return this.#cached(`keyhash:${hash}`, async () => {
      // The hash is known up front, so its retirement is read alongside its record: no added round trip.
      const [stored, retired] = await Promise.all([this.#kv.get<KeyRecord>(`keyhash:${hash}`, 'json'), this.#kv.get(`retired:${hash}`)])
      return retired === null ? this.#withTombstones(stored, hash) : null
    })
  }

  /** The unrevoked record with this id, through the same cache: how a token checks its parent key. */
  lookupById(id: string): Promise<KeyRecord | null> {
    return this.#cached(`key:${id}`, () => this.get(id))
  }

  async #cached(kvKey: string, read: () => Promise<KeyRecord | null>): Promise<KeyRecord | null> {
    const now = Date.now()
    const { entries } = this.#cache
    const cached = entries.get(kvKey)
    if (cached && cached.expires > now) return cached.record
    const forgets = this.#cache.forgets
    const stored = await read()
    const record = stored && stored.revokedAt === null ? stored : null
    // A revoke, rotate or update made here while the read was out may postdate what it read: that answer
    // serves its own request but is not kept, or it would outlive the change by up to `cacheTtlMs`.
    // Unknown keys are kept only while there is room: a flood of random ones never pushes out keys in use.
    if (this.#ttl > 0 && this.#cache.forgets === forgets && (record || entries.size < this.#size)) {
      if (entries.size >= this.#size) {
        const oldest = entries.keys().next()
        if (!oldest.done) entries.delete(oldest.value)
      }
      // Inserted now, so it expires no later than `cacheTtlMs` after the KV read: the cache never stretches
      // a revocation beyond that.
      entries.set(kvKey, { record, expires: now + this.#ttl })
    }
    return record
  }

  /**
   * The record as it stands, whatever a racing write left: upgraded, revoked when its tombstone says so,
   * and holding the current secret's hash when a rotation retired the one it holds. `liveHash`: a hash
   * already known not to be retired, `stored` being its `keyhash:` record: then `key:<id>` is read too
   * and wins while it holds that hash, since a PATCH's slow write of `keyhash:` can land after a later
   * PATCH's (KV has no compare-and-swap), and the key must obey what the operator and its tokens see.
   */
  async #withTombstones(stored: KeyRecord | null, liveHash?: string): Promise<KeyRecord | null> {
    if (!stored) return null
    const record = upgrade(stored)
    if (record.revokedAt !== null) return record
    const [tombstone, current] = await Promise.all([
      this.#kv.get<{ revokedAt: number }>(`revoked:${record.id}`, 'json'),
      record.hash === liveHash ? this.#kv.get<KeyRecord>(`key:${record.id}`, 'json').then((byId) => (byId?.hash === liveHash ? upgrade(byId) : record)) : this.#currentSecret(record),
    ])
    return tombstone ? { ...current, revokedAt: tombstone.revokedAt } : current
  }

  async get(id: string): Promise<KeyRecord | null> {
    return this.#withTombstones(await this.#kv.get<KeyRecord>(`key:${id}`, 'json'))
  }

  /** `record` with the secret that replaced its own, when a rotation retired it (and so on down the chain). */
  async #currentSecret(record: KeyRecord): Promise<KeyRecord> {
    let current = record
    for (let i = 0; i < MAX_RETIREMENTS_FOLLOWED; i++) {
      const retired = await this.#kv.get<Retirement>(`retired:${current.hash}`, 'json')
      if (!retired) return current
      current = { ...current, hash: retired.hash, hint: retired.hint }
    }
    return current
  }

  /** A page of at most 300 records whatever `limit` asks: each costs three KV reads, and a Worker invocation may make 1,000. */
  async list(options: { cursor?: string; limit?: number } = {}): Promise<{ keys: KeyRecord[]; cursor: string | null }> {
    const page = await this.#kv.list({ prefix: 'key:', cursor: options.cursor, limit: Math.min(options.limit ?? 100, 300) })
    const records = await Promise.all(page.keys.map(async (k) => this.#withTombstones(await this.#kv.get<KeyRecord>(k.name, 'json'))))
    return { keys: records.filter((r): r is KeyRecord => r !== null), cursor: page.list_complete ? null : page.cursor }
  }

  /**
   * Changes a key's scopes; the caller has checked it is live. The secret's `keyhash:` entry is written
   * only once the hash is known not to be retired: a rotate that ran since `record` was read replaced
   * it, and the change goes to the new secret's entry (and `key:<id>` gets the new hash back).
   */
  async update(record: KeyRecord, patch: KeyPatch): Promise<KeyRecord> {
    const changes = Object.fromEntries(Object.entries(patch).filter(([, v]) => v !== undefined))
    const changed: KeyRecord = { ...record, ...changes, updatedAt: Date.now() }
    await this.#kv.put(`key:${record.id}`, JSON.stringify(changed))
    const updated = await this.#currentSecret(changed)
    await (updated.hash === changed.hash ? this.#kv.put(`keyhash:${updated.hash}`, JSON.stringify(updated)) : this.#write(updated))
    this.#forget(record, updated)
    return updated
  }

  /**
   * A new secret for the same id and scopes, or null when another rotation of the same secret got there
   * first (then nothing of this one works: rotate again). The old secret's tombstone comes first: from
   * then on it is refused whatever a racing write brings back, and its tokens stop too (`gen`).
   */
  async rotate(record: KeyRecord): Promise<{ record: KeyRecord; key: string } | null> {
    const retiredKey = `retired:${record.hash}`
    // `record` may have been read before another rotation: its secret is then retired already.
    if ((await this.#kv.get(retiredKey)) !== null) return null
    const key = generateKey(record.kind)
    const now = Date.now()
    const rotated: KeyRecord = { ...record, hash: await sha256Hex(key), hint: key.slice(0, KEY_PREFIX.length + 4), updatedAt: now }
    const retirement: Retirement = { retiredAt: now, hash: rotated.hash, hint: rotated.hint }
    await this.#kv.put(retiredKey, JSON.stringify(retirement))
    await this.#write(rotated)
    await this.#kv.delete(`keyhash:${record.hash}`)
    this.#forget(record, rotated)
    // Two rotations that passed the check at once both wrote the tombstone; the last one written names the
    // secret that stays. The other retires its own, naming that one, so exactly one new secret works.
    const winner = await this.#kv.get<Retirement>(retiredKey, 'json')
    if (winner && winner.hash !== rotated.hash) {
      await this.#kv.put(`retired:${rotated.hash}`, JSON.stringify({ ...winner, retiredAt: now } satisfies Retirement))
      await this.#kv.delete(`keyhash:${rotated.hash}`)
      this.#forget(rotated)
      return null
    }
    return { record: rotated, key }
  }

  /**
   * Marks a key revoked: its tombstone first (what every read obeys), then its records. Returns the
   * updated record, or null when the id is unknown.
   */
  async revoke(id: string): Promise<KeyRecord | null> {
    const record = await this.get(id)
    if (!record) return null
    if (record.revokedAt !== null) return record
    const revoked = { ...record, revokedAt: Date.now() }
    await this.#kv.put(`revoked:${id}`, JSON.stringify({ revokedAt: revoked.revokedAt }))
    await this.#write(revoked)
    this.#forget(record)
    return revoked
  }

  async create(input: KeyInput): Promise<{ record: KeyRecord; key: string }> {
    const kind = input.kind ?? 'secret'
    const key = generateKey(kind)
    const now = Date.now()
    const record: KeyRecord = {
      id: generateKeyId(),
      name: input.name,
      kind,
      models: input.models ?? null,
      origins: input.origins ?? [],
      metadata: input.metadata ?? {},
      quota: input.quota ?? null,
      createdAt: now,
      updatedAt: now,
      expiresAt: input.expiresAt ?? null,
      revokedAt: null,
      hash: await sha256Hex(key),
      hint: key.slice(0, KEY_PREFIX.length + 4),
    }
    await this.#write(record)
    return { record, key }
  }

  /** Drops this isolate's lookups of these records, and keeps reads still out from being cached. */
  #forget(...records: KeyRecord[]): void {
    this.#cache.forgets++
    for (const record of records) {
      this.#cache.entries.delete(`keyhash:${record.hash}`)
      this.#cache.entries.delete(`key:${record.id}`)
    }
  }

  async #write(record: KeyRecord): Promise<void> {
    const json = JSON.stringify(record)
    await Promise.all([this.#kv.put(`key:${record.id}`, json), this.#kv.put(`keyhash:${record.hash}`, json)])
  }
}

/** The key the route's `:id` names, read with `read` (a store's `get` or `revoke`): a 404 when there is none. */
export async function routeKey(c: Context<GatewayEnv>, read: (id: string) => Promise<KeyRecord | null>): Promise<KeyRecord> {
  const id = c.req.param('id') ?? ''
  const record = KEY_ID.test(id) ? await read(id) : null
  if (!record) throw new GatewayError('not_found', 'No key has that id.')
  return record
}
