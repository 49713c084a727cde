/**
 * Short-lived tokens: minted by an app's backend with a secret key (`POST /v1/tokens`), handed to a
 * browser, verified without a KV read of their own.
 *
 * Format: `pg_tk_<base64url(JSON claims)>.<base64url(HMAC-SHA256)>`, the MAC taken over everything
 * before the dot with the `podgate/token/v1` key derived from the signing secret (src/crypto/signing.ts).
 * The claims name the parent key (`kid`) and the generation of its secret (`gen`, a prefix of the
 * secret's hash), so revoking or rotating the parent ends its tokens: the auth step reads the parent
 * through the key cache, as it reads keys.
 */
import * as z from 'zod/mini'
import { array } from '../zod/array.ts'
import { nullable } from '../zod/nullable.ts'
import { object } from '../zod/object.ts'
import { quotaPolicySchema } from '../quota/policy.ts'
import { lazily } from '../zod/lazily.ts'
import { int } from '../zod/numbers.ts'
import { optional } from '../zod/optional.ts'
import { invalidRequest } from '../errors/index.ts'
import { parseJson } from '../http/json.ts'
import type { QuotaPolicy } from '../quota/policy.ts'
import { base64url, encoder, fromBase64url, sign, signingKey, verify } from '../crypto/signing.ts'
import { number, string } from '../zod/scalars.ts'

const decoder = new TextDecoder()

export const TOKEN_PREFIX = 'pg_tk_'

/** Token sizes stay far below header limits; anything longer is not ours. */
const MAX_TOKEN_LENGTH = 4096

const claimsSchema = lazily(() => object({
  /** The claims' version: 1 (`verify` refuses any other). */
  v: number(),
  /** Token id, for logs and per-token quota counters. */
  jti: string(),
  /** Parent key id. */
  kid: string(),
  /** First 16 hex chars of the parent secret's SHA-256: a rotation ends the token. */
  gen: string(),
  /** Issued at / expires at, in seconds since the epoch. */
  iat: number().check(int()),
  exp: number().check(int()),
  models: nullable(array(string())),
  origin: nullable(string()),
  quota: nullable(quotaPolicySchema),
  /** The end user the token stands for, named by the minting backend; absent on tokens minted without one. */
  sub: optional(string()),
}))

export type TokenClaims = z.infer<ReturnType<typeof claimsSchema>>

export type TokenCheck =
  | { ok: true; claims: TokenClaims }
  | { ok: false; reason: 'malformed' | 'expired'; claims?: TokenClaims }

export interface TokenSignerOptions {
  /** The signing secret: `signingSecret`, else the Runpod API key. Never leaves the signer. */
  secret: string
}

export interface MintInput {
  tokenId: string
  keyId: string
  keyGeneration: string
  ttlSeconds: number
  /** The parent key's expiry (ms since the epoch; null: never): the token's `exp` is never later. */
  keyExpiresAt?: number | null
  models: string[] | null
  origin: string | null
  quota: QuotaPolicy | null
  /** The end user the token stands for (its cache scope); omitted when the backend names none. */
  subject?: string
}

export class TokenSigner {
  readonly #key: Promise<CryptoKey>

  constructor(options: TokenSignerOptions) {
    this.#key = signingKey(options.secret, 'podgate/token/v1')
  }

  async mint(input: MintInput, now: number = Date.now()): Promise<{ token: string; claims: TokenClaims }> {
    const iat = Math.floor(now / 1000)
    const claims: TokenClaims = {
      v: 1,
      jti: input.tokenId,
      kid: input.keyId,
      gen: input.keyGeneration,
      iat,
      // Whole seconds: rounded up, a token lives at least the ttl asked; rounded down, never past its key, so its `expiresAt` is when to refresh.
      exp: Math.min(Math.ceil(now / 1000) + input.ttlSeconds, Math.floor((input.keyExpiresAt ?? Infinity) / 1000)),
      models: input.models,
      origin: input.origin,
      quota: input.quota,
      sub: input.subject,
    }
    const body = TOKEN_PREFIX + base64url(encoder.encode(JSON.stringify(claims)))
    // `verify` refuses a longer token (body, '.', a 43-character MAC): never mint one that could not be used.
    if (body.length + 44 > MAX_TOKEN_LENGTH) throw invalidRequest(`This token would be longer than ${MAX_TOKEN_LENGTH} characters: name fewer models.`, { param: 'models' })
    return { token: `${body}.${await sign(await this.#key, body)}`, claims }
  }

  /** Checks the MAC before reading anything the token says, then its expiry. */
  async verify(token: string, now: number = Date.now()): Promise<TokenCheck> {
    const claims = await this.#claims(token)
    if (!claims) return { ok: false, reason: 'malformed' }
    if (claims.exp * 1000 <= now) return { ok: false, reason: 'expired', claims }
    return { ok: true, claims }
  }

  /** The claims of a well-formed token this signer signed, else `undefined`. */
  async #claims(token: string): Promise<TokenClaims | undefined> {
    const dot = token.lastIndexOf('.')
    if (!token.startsWith(TOKEN_PREFIX) || token.length > MAX_TOKEN_LENGTH || dot < 0) return undefined
    const body = token.slice(0, dot)
    if (!(await verify(await this.#key, body, token.slice(dot + 1)))) return undefined
    const bytes = fromBase64url(body.slice(TOKEN_PREFIX.length))
    const parsed = claimsSchema().safeParse(bytes && parseJson(decoder.decode(bytes)))
    return parsed.success && parsed.data.v === 1 ? parsed.data : undefined
  }
}
