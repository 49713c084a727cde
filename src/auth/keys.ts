/**
 * API keys: generation, hashing, and their records in Workers KV.
 *
 * A key is shown once, at creation; KV only ever holds its SHA-256. Storage schema (docs/storage.md):
 *   `key:<id>`        -> KeyRecord (JSON), the operator's view, looked up by id
 *   `keyhash:<sha256>` -> KeyRecord (JSON), the hot-path view, looked up by the presented key's hash
 * Both are written together; the hot path does one KV read, and an in-isolate cache (bounded, with a
 * TTL) makes steady-state traffic do none. Revocation therefore takes effect within KV's propagation
 * delay (up to ~60 s) plus `keyCacheTtlMs`.
 */

import type { QuotaPolicy } from '../quota/policy.ts'

export const KEY_PREFIX = 'pg_sk_'
const KEY_BODY_LENGTH = 32
const ID_PREFIX = 'key_'
const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

export type KeyKind = 'secret'

export interface KeyRecord {
  id: string
  name: string
  kind: KeyKind
  /** Model aliases the key may use; null means all. */
  models: string[] | null
  metadata: Record<string, string>
  /** Limits for this key; null means the gateway's defaults. */
  quota: QuotaPolicy | null
  createdAt: number
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
  kind: KeyKind
  models: string[] | null
  quota: QuotaPolicy | null
}

function randomBase62(length: number): string {
  // Rejection sampling keeps every character uniform (256 is not a multiple of 62).
  let out = ''
  while (out.length < length) {
    const bytes = crypto.getRandomValues(new Uint8Array(length * 2))
    for (const b of bytes) {
      if (b < 248 && out.length < length) out += BASE62[b % 62]
    }
  }
  return out
}

export function generateKey(): string {
  return KEY_PREFIX + randomBase62(KEY_BODY_LENGTH)
}

export function generateKeyId(): string {
  return ID_PREFIX + randomBase62(16)
}

const HEX: string[] = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'))

export async function sha256Hex(text: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text)))
  let hex = ''
  for (const b of digest) hex += HEX[b]
  return hex
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
  return { keyId: record.id, name: record.name, kind: record.kind, models: record.models, quota: record.quota ?? null }
}

/** The operator's view of a key: everything but the hash. */
export function publicKeyView(record: KeyRecord): Omit<KeyRecord, 'hash'> {
  const { hash: _hash, ...view } = record
  return view
}

export interface KeyStoreOptions {
  /** In-isolate cache TTL for lookups by hash, in ms. 0 disables it. */
  cacheTtlMs: number
  /** Most entries the in-isolate cache holds. Default 1000. */
  cacheSize?: number
}

interface CacheEntry {
  record: KeyRecord | null
  expires: number
}

/** One cache per KV namespace per isolate, so several gateways over one namespace share it. */
const caches = new WeakMap<KVNamespace, Map<string, CacheEntry>>()

export class KeyStore {
  readonly #kv: KVNamespace
  readonly #ttl: number
  readonly #size: number
  readonly #cache: Map<string, CacheEntry>

  constructor(kv: KVNamespace, options: KeyStoreOptions) {
    this.#kv = kv
    this.#ttl = options.cacheTtlMs
    this.#size = options.cacheSize ?? 1000
    let cache = caches.get(kv)
    if (!cache) caches.set(kv, (cache = new Map()))
    this.#cache = cache
  }

  /** The live (unrevoked) record for a presented key, or null. */
  async lookup(key: string): Promise<KeyRecord | null> {
    if (!key.startsWith(KEY_PREFIX) || key.length !== KEY_PREFIX.length + KEY_BODY_LENGTH) return null
    const hash = await sha256Hex(key)
    const now = Date.now()
    const cached = this.#cache.get(hash)
    if (cached && cached.expires > now) return cached.record
    const record = await this.#kv.get<KeyRecord>(`keyhash:${hash}`, 'json')
    const live = record && record.revokedAt === null ? record : null
    if (this.#ttl > 0) {
      if (this.#cache.size >= this.#size) {
        const oldest = this.#cache.keys().next()
        if (!oldest.done) this.#cache.delete(oldest.value)
      }
      this.#cache.set(hash, { record: live, expires: now + this.#ttl })
    }
    return live
  }

  async create(input: { name: string; models?: string[] | null; metadata?: Record<string, string>; quota?: QuotaPolicy | null }): Promise<{ record: KeyRecord; key: string }> {
    const key = generateKey()
    const record: KeyRecord = {
      id: generateKeyId(),
      name: input.name,
      kind: 'secret',
      models: input.models ?? null,
      metadata: input.metadata ?? {},
      quota: input.quota ?? null,
      createdAt: Date.now(),
      revokedAt: null,
      hash: await sha256Hex(key),
      hint: key.slice(0, KEY_PREFIX.length + 4),
    }
    await this.#write(record)
    return { record, key }
  }

  get(id: string): Promise<KeyRecord | null> {
    return this.#kv.get<KeyRecord>(`key:${id}`, 'json')
  }

  async list(options: { cursor?: string; limit?: number } = {}): Promise<{ keys: KeyRecord[]; cursor: string | null }> {
    const page = await this.#kv.list({ prefix: 'key:', cursor: options.cursor, limit: options.limit ?? 100 })
    const records = await Promise.all(page.keys.map((k) => this.#kv.get<KeyRecord>(k.name, 'json')))
    return { keys: records.filter((r): r is KeyRecord => r !== null), cursor: page.list_complete ? null : page.cursor }
  }

  /** Marks a key revoked. Returns the updated record, or null when the id is unknown. */
  async revoke(id: string): Promise<KeyRecord | null> {
    const record = await this.get(id)
    if (!record) return null
    if (record.revokedAt !== null) return record
    const revoked = { ...record, revokedAt: Date.now() }
    await this.#write(revoked)
    this.#cache.delete(record.hash)
    return revoked
  }

  async #write(record: KeyRecord): Promise<void> {
    const json = JSON.stringify(record)
    await Promise.all([this.#kv.put(`key:${record.id}`, json), this.#kv.put(`keyhash:${record.hash}`, json)])
  }
}
