/**
 * `POST /v1/tokens`: an app's backend trades its secret key for a short-lived token a browser may hold.
 *
 * The token's scope can only narrow the key's: a subset of its models, optionally one origin and a
 * quota of its own, for at most `tokens.maxTtlSeconds`.
 */
import { Hono } from 'hono'
import * as z from 'zod'
import { GatewayError } from '../errors/index.ts'
import { readJsonBody } from '../http/body.ts'
import { zodToGatewayError } from '../http/zod-error.ts'
import { quotaPolicySchema } from '../quota/policy.ts'
import type { GatewayEnv } from '../types.ts'
import { generateTokenId } from './keys.ts'
import { originSchema } from './origins.ts'
import type { TokenSigner } from './tokens.ts'

export const mintTokenSchema = z
  .object({
    models: z.array(z.string().min(1).max(128)).min(1).max(256).optional().describe("Model aliases the token may use, within the key's; omit for all of the key's."),
    origin: originSchema.optional().describe('The one browser origin the token works from; omit for any.'),
    ttlSeconds: z.number().int().positive().optional().describe('Lifetime in seconds, at most `tokens.maxTtlSeconds`; default `tokens.defaultTtlSeconds`.'),
    quota: quotaPolicySchema.optional().describe("Limits of the token's own, on top of the key's."),
    sub: z
      .string()
      .regex(/^[\x21-\x7e]{1,128}$/, { message: 'must be 1-128 printable ASCII characters without spaces, e.g. your user id' })
      .optional()
      .describe('The end user the token is for (your user id). Cached answers are kept per sub, so two users of one key never read each other\'s; without it the token shares the key\'s cache.'),
  })
  .strict()

export interface TokenRoutesOptions {
  signer: TokenSigner
  /** Configured model aliases. */
  models: ReadonlySet<string>
  maxBodyBytes: number
  /** Longest lifetime, in seconds. */
  maxTtlSeconds: number
  /** Lifetime when none is asked for, in seconds. */
  defaultTtlSeconds: number
}

export function tokenRoutes(options: TokenRoutesOptions): Hono<GatewayEnv> {
  const app = new Hono<GatewayEnv>()
  const defaultTtl = Math.min(options.defaultTtlSeconds, options.maxTtlSeconds)

  app.post('/', async (c) => {
    const principal = c.get('principal')
    if (principal.credential !== 'secret') {
      throw new GatewayError('permission_denied', 'Only a secret key can mint tokens: call POST /v1/tokens from your backend, not from a browser.')
    }
    const parsed = mintTokenSchema.safeParse(await readJsonBody(c.req.raw, options.maxBodyBytes))
    if (!parsed.success) throw zodToGatewayError(parsed.error)
    const input = parsed.data
    const ttlSeconds = input.ttlSeconds ?? defaultTtl
    if (ttlSeconds > options.maxTtlSeconds) {
      throw new GatewayError('invalid_request', `ttlSeconds may be at most ${options.maxTtlSeconds} (the gateway's tokens.maxTtlSeconds).`, { param: 'ttlSeconds' })
    }
    for (const model of input.models ?? []) {
      if (!options.models.has(model)) throw new GatewayError('model_not_found', `The model '${model}' does not exist.`, { param: 'models' })
      if (principal.models !== null && !principal.models.includes(model)) {
        throw new GatewayError('permission_denied', `Your key may not use the model '${model}', so neither may its tokens.`, { param: 'models' })
      }
    }
    const { token, claims } = await options.signer.mint({
      tokenId: generateTokenId(),
      keyId: principal.keyId,
      keyGeneration: principal.keyGeneration,
      ttlSeconds,
      models: input.models ? [...new Set(input.models)] : null,
      origin: input.origin ?? null,
      quota: input.quota ?? null,
      ...(input.sub === undefined ? {} : { subject: input.sub }),
    })
    return c.json(
      { object: 'token', id: claims.jti, token, keyId: claims.kid, models: claims.models, origin: claims.origin, quota: claims.quota, sub: claims.sub ?? null, expiresAt: claims.exp * 1000 },
      201,
      { 'cache-control': 'no-store' },
    )
  })

  return app
}
