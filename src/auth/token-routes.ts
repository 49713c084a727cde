/**
 * `POST /v1/tokens`: an app's backend trades its secret key for a short-lived token a browser may hold.
 * Every field of its body is optional, so is the body: an absent or empty one takes every default.
 *
 * The token's scope can only narrow the key's: a subset of its models, optionally one origin and a
 * quota of its own, for at most `tokens.maxTtlSeconds` and never past the key's own `expiresAt` (a key that
 * would cap a token at under a second to live mints none: 401, as an expired key gets).
 */
import { Hono } from 'hono/tiny'
import type { Context } from 'hono'
import * as z from 'zod/mini'
import { GatewayError, invalidRequest } from '../errors/index.ts'
import { readJsonBody } from '../http/body.ts'
import { parseRequest } from '../normalize/zod-errors.ts'
import { quotaPolicySchema } from '../quota/policy.ts'
import type { QuotaPolicy } from '../quota/policy.ts'
import type { GatewayEnv } from '../types.ts'
import { lazily } from '../zod/lazily.ts'
import { positiveInt } from '../zod/numbers.ts'
import { refused } from './api-key-auth.ts'
import { refine } from '../zod/refine.ts'
import { generateTokenId } from './keys.ts'
import { canonicalOrigin, originSchema } from './origins.ts'
import type { TokenSigner } from './tokens.ts'
import { optional } from '../zod/optional.ts'
import { strictObject } from '../zod/object.ts'
import { string } from '../zod/scalars.ts'
import { maxLength, minLength } from '../zod/bounds.ts'
import { array } from '../zod/array.ts'

export function tokenRoutes(options: TokenRoutesOptions): Hono<GatewayEnv> {
  const app = new Hono<GatewayEnv>()
  const defaultTtl = Math.min(options.defaultTtlSeconds, options.maxTtlSeconds)

  app.post('/', async (c) => {
    const principal = c.get('principal')
    if (principal.credential !== 'secret') {
      throw new GatewayError('permission_denied', 'Only a secret key can mint tokens: call POST /v1/tokens from your backend, not from a browser.')
    }
    const input = parseRequest(mintTokenSchema(), await readJsonBody(c.req.raw, options.maxBodyBytes, false, {}))
    const ttlSeconds = input.ttlSeconds ?? defaultTtl
    if (ttlSeconds > options.maxTtlSeconds) {
      throw invalidRequest(`ttlSeconds may be at most ${options.maxTtlSeconds} (the gateway's tokens.maxTtlSeconds).`, { param: 'ttlSeconds' })
    }
    for (const model of input.models ?? []) {
      if (!options.models.has(model)) throw new GatewayError('model_not_found', `The model '${model}' does not exist.`, { param: 'models' })
      if (principal.models !== null && !principal.models.includes(model)) {
        throw new GatewayError('permission_denied', `Your key may not use the model '${model}', so neither may its tokens.`, { param: 'models' })
      }
    }
    options.checkQuota?.(c, input.quota)
    // A token's expiry is whole seconds, never past its key's: a key about to expire would mint it dead, or dying.
    const keyExpiresAt = principal.keyExpiresAt
    if (keyExpiresAt !== null && keyExpiresAt - (keyExpiresAt % 1000) < Date.now() + 1000) {
      throw refused(`This API key expires at ${new Date(keyExpiresAt).toISOString()}, too soon for a token: extend its expiresAt.`)
    }
    // Minted before it counts: a token too long to use is refused as input, and counts nothing.
    const { token, claims } = await options.signer.mint({
      tokenId: generateTokenId(),
      keyId: principal.keyId,
      keyGeneration: principal.keyGeneration,
      ttlSeconds,
      keyExpiresAt: principal.keyExpiresAt,
      models: input.models ? [...new Set(input.models)] : null,
      origin: input.origin === undefined ? null : (canonicalOrigin(input.origin) ?? input.origin),
      quota: input.quota ?? null,
      subject: input.sub,
    })
    const counted = (await options.countControl?.(c)) ?? {}
    return c.json(
      { object: 'token', id: claims.jti, token, keyId: claims.kid, models: claims.models, origin: claims.origin, quota: claims.quota, sub: claims.sub ?? null, expiresAt: claims.exp * 1000 },
      201,
      { ...counted, 'cache-control': 'no-store' },
    )
  })

  return app
}

/** A token's `sub` (checked as code, not `z.regex`: the OpenAPI document shows it as `pattern`, src/openapi/descriptions.ts). */
export const SUB_PATTERN = /^[\x21-\x7e]{1,128}$/

export const mintTokenSchema = lazily(() => strictObject({
  models: optional(array(string().check(minLength(1), maxLength(128))).check(minLength(1), maxLength(256))),
  origin: optional(originSchema()),
  ttlSeconds: optional(positiveInt()),
  quota: optional(quotaPolicySchema),
  sub: optional(string().check(refine((sub: string) => SUB_PATTERN.test(sub), 'must be 1-128 printable ASCII characters without spaces, e.g. your user id'))),
}))

export interface TokenRoutesOptions {
  signer: TokenSigner
  /** Configured model aliases. */
  models: ReadonlySet<string>
  maxBodyBytes: number
  /** Longest lifetime, in seconds. */
  maxTtlSeconds: number
  /** Lifetime when none is asked for, in seconds. */
  defaultTtlSeconds: number
  /**
   * Counts the mint against the key's control calls once the request is known to be good (a 429 over
   * the limit); returns the headers to answer with. Default: nothing counted.
   */
  countControl?: (c: Context<GatewayEnv>) => Promise<Record<string, string>>
  /** Refuses (400) a token quota this gateway cannot enforce (`strict` with no Durable Object). */
  checkQuota?: (c: Context<GatewayEnv>, quota: QuotaPolicy | undefined) => void
}
