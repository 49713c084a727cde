/**
 * Operator API for keys: create (the key is shown once), list, get, revoke.
 */
import { Hono } from 'hono'
import { z } from 'zod'
import { publicKeyView } from '../auth/keys.ts'
import { quotaPolicySchema } from '../quota/policy.ts'
import type { KeyStore } from '../auth/keys.ts'
import { GatewayError } from '../errors/index.ts'
import { readJsonBody } from '../http/body.ts'
import { zodToGatewayError } from '../http/zod-error.ts'
import type { GatewayEnv } from '../types.ts'
import type { Context } from 'hono'

export const createKeySchema = z
  .object({
    name: z.string().trim().min(1).max(100).describe('A label for people: who or what uses the key.'),
    models: z.array(z.string().min(1).max(128)).max(256).nullable().optional().describe('Model aliases the key may use; omit or null for all.'),
    metadata: z.record(z.string().max(64), z.string().max(512)).optional().describe('Free-form string pairs for the operator.'),
    quota: quotaPolicySchema.nullable().optional().describe('Limits for this key; omit for the gateway defaults.'),
  })
  .strict()

export interface KeysRoutesOptions {
  store: (c: Context<GatewayEnv>) => KeyStore
  models: ReadonlySet<string>
  maxBodyBytes: number
}

const KEY_ID = /^key_[A-Za-z0-9]{16}$/

export function keysRoutes(options: KeysRoutesOptions): Hono<GatewayEnv> {
  const app = new Hono<GatewayEnv>()

  app.post('/', async (c) => {
    const parsed = createKeySchema.safeParse(await readJsonBody(c.req.raw, options.maxBodyBytes))
    if (!parsed.success) throw zodToGatewayError(parsed.error)
    const unknown = parsed.data.models?.find((m) => !options.models.has(m))
    if (unknown !== undefined) throw new GatewayError('invalid_request', `Unknown model '${unknown.slice(0, 128)}': configure it first.`, { param: 'models' })
    const { record, key } = await options.store(c).create(parsed.data)
    return c.json({ ...publicKeyView(record), key }, 201)
  })

  app.get('/', async (c) => {
    const limit = Math.min(Number(c.req.query('limit') ?? 100) || 100, 1000)
    const page = await options.store(c).list({ cursor: c.req.query('cursor'), limit })
    return c.json({ object: 'list', data: page.keys.map(publicKeyView), cursor: page.cursor })
  })

  app.get('/:id', async (c) => {
    const record = await findKey(c, options)
    return c.json(publicKeyView(record))
  })

  app.delete('/:id', async (c) => {
    const id = c.req.param('id')
    const record = KEY_ID.test(id) ? await options.store(c).revoke(id) : null
    if (!record) throw new GatewayError('not_found', 'No key has that id.')
    return c.json({ ...publicKeyView(record), revoked: true })
  })

  return app
}

async function findKey(c: Context<GatewayEnv>, options: KeysRoutesOptions) {
  const id = c.req.param('id') ?? ''
  const record = KEY_ID.test(id) ? await options.store(c).get(id) : null
  if (!record) throw new GatewayError('not_found', 'No key has that id.')
  return record
}
