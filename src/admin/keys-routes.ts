/**
 * Operator API for keys: create and rotate (the secret is shown once, in that response), list, get,
 * update scopes, revoke. Responses never carry a secret or its hash.
 */
// optional-fields first: the bundler lays modules out in import order, and this one gzips smaller.
import { Hono } from 'hono/tiny'
import * as z from 'zod/mini'
import type { Context } from 'hono'
import { invalidRequest } from '../errors/index.ts'
import { quotaPolicySchema } from '../quota/policy.ts'
import type { KeyRecord, KeyStore } from '../auth/keys.ts'
import { lazily } from '../zod/lazily.ts'
import { positiveInt } from '../zod/numbers.ts'
import { oneOf } from '../zod/one-of.ts'
import { nullable } from '../zod/nullable.ts'
import { refine } from '../zod/refine.ts'
import type { QuotaPolicy } from '../quota/policy.ts'
import { publicKeyView, routeKey } from '../auth/keys.ts'
import { optionalFields } from '../zod/optional-fields.ts'
import { recordOf } from '../zod/records.ts'
import { readJsonBody } from '../http/body.ts'
import { withDefault } from '../zod/with-default.ts'
import { strictObject } from '../zod/object.ts'
import { string } from '../zod/scalars.ts'
import { maxLength, minLength } from '../zod/bounds.ts'
import { array } from '../zod/array.ts'
import { parseRequest } from '../normalize/zod-errors.ts'
import { canonicalOrigins, originSchema } from '../auth/origins.ts'
import type { GatewayEnv } from '../types.ts'

const scopeFields = lazily(() => ({
  name: string().check(minLength(1), maxLength(100)),
  models: nullable(array(string().check(minLength(1), maxLength(128))).check(minLength(1), maxLength(256))),
  origins: array(originSchema()).check(maxLength(100)),
  metadata: recordOf(string().check(maxLength(512))).check(refine((m: Record<string, string>) => Object.keys(m).every((key, i) => i < 50 && key.length <= 64), 'must have at most 50 keys, of at most 64 characters')),
  quota: nullable(quotaPolicySchema),
  expiresAt: nullable(positiveInt()),
}))

function checkScopes(input: { models?: string[] | null; expiresAt?: number | null }, options: KeysRoutesOptions): void {
  const unknown = input.models?.find((m) => !options.models.has(m))
  if (unknown !== undefined) throw invalidRequest(`Unknown model '${unknown.slice(0, 128)}': configure it first.`, { param: 'models' })
  if (input.expiresAt != null && input.expiresAt <= Date.now()) {
    throw invalidRequest('expiresAt is in the past: give a future time in ms since the epoch, or null for never.', { param: 'expiresAt' })
  }
}

export const createKeySchema = lazily(() => {
  const fields = scopeFields()
  // Every scope optional but the name; the fields keep their order.
  return strictObject({
    ...optionalFields(fields),
    name: fields.name,
    kind: withDefault(oneOf(['secret', 'publishable']), 'secret'),
  })
})

export const updateKeySchema = lazily(() => strictObject(optionalFields(scopeFields())))

export interface KeysRoutesOptions {
  store: (c: Context<GatewayEnv>) => KeyStore
  models: ReadonlySet<string>
  maxBodyBytes: number
  /** Refuses (400) a key quota this gateway cannot enforce (`strict` with no Durable Object). */
  checkQuota?: (c: Context<GatewayEnv>, quota: QuotaPolicy | null | undefined) => void
}

/** A key body, checked: its `name` trimmed first (a name of spaces is empty), no `metadata.__proto__`, its origins in canonical spelling. */
async function parseKeyBody<S extends z.ZodMiniType<{ origins?: string[] | undefined }>>(schema: S, request: Request, maxBodyBytes: number): Promise<z.output<S>> {
  const body = await readJsonBody(request, maxBodyBytes)
  const record = body as { name?: unknown; metadata?: unknown } | null
  if (typeof record?.name === 'string') record.name = record.name.trim()
  // The schema's output leaves out a JSON `__proto__` key, unnamed: refuse it by name instead.
  if (Object.hasOwn(Object(record?.metadata), '__proto__')) throw invalidRequest("'metadata.__proto__' is not allowed.", { param: 'metadata.__proto__' })
  const input = parseRequest(schema, body)
  if (input.origins) input.origins = canonicalOrigins(input.origins)
  return input
}

async function findKey(c: Context<GatewayEnv>, options: KeysRoutesOptions): Promise<KeyRecord> {
  return routeKey(c, (id) => options.store(c).get(id))
}

export function keysRoutes(options: KeysRoutesOptions): Hono<GatewayEnv> {
  const app = new Hono<GatewayEnv>()

  app.post('/', async (c) => {
    const input = await parseKeyBody(createKeySchema(), c.req.raw, options.maxBodyBytes)
    checkScopes(input, options)
    options.checkQuota?.(c, input.quota)
    if (input.kind === 'publishable' && !input.origins?.length) {
      throw invalidRequest('A publishable key needs at least one origin: it works only from the origins it lists.', { param: 'origins' })
    }
    const { record, key } = await options.store(c).create(input)
    return c.json({ ...publicKeyView(record), key }, 201, { 'cache-control': 'no-store' })
  })

  app.get('/', async (c) => {
    const limit = Number(c.req.query('limit') ?? 100)
    if (!(Number.isInteger(limit) && limit > 0 && limit <= 1000)) throw invalidRequest('limit must be a whole number from 1 to 1000.', { param: 'limit' })
    const cursor = c.req.query('cursor')
    const page = await options.store(c).list({ cursor, limit }).catch((error: unknown) => {
      // Workers KV refuses a cursor it never issued with a 4xx (`KV LIST failed: 400 ...`): the cursor is the
      // one part of the list the caller wrote. Its 429 and 5xx, and any KV GET's failure, stay 500s.
      throw cursor && /LIST failed: 4(?!29)/.test(String(error)) ? invalidRequest('cursor is not one this list gave.', { param: 'cursor' }) : error
    })
    return c.json({ object: 'list', data: page.keys.map(publicKeyView), cursor: page.cursor })
  })

  app.get('/:id', async (c) => {
    const record = await findKey(c, options)
    return c.json(publicKeyView(record))
  })

  app.patch('/:id', async (c) => {
    const input = await parseKeyBody(updateKeySchema(), c.req.raw, options.maxBodyBytes)
    if (!Object.keys(input).length) throw invalidRequest('Nothing to change: name a field to update.')
    const record = await findLiveKey(c, options)
    checkScopes(input, options)
    options.checkQuota?.(c, input.quota)
    if (record.kind === 'publishable' && input.origins?.length === 0) {
      throw invalidRequest('A publishable key needs at least one origin.', { param: 'origins' })
    }
    return c.json(publicKeyView(await options.store(c).update(record, input)))
  })

  app.post('/:id/rotate', async (c) => {
    const record = await findLiveKey(c, options)
    const rotated = await options.store(c).rotate(record)
    if (!rotated) {
      throw invalidRequest('Another rotation of this key won the race: its new secret is in force, and this one was not issued. Rotate again if you do not hold that secret.')
    }
    return c.json({ ...publicKeyView(rotated.record), key: rotated.key }, 200, { 'cache-control': 'no-store' })
  })

  app.delete('/:id', async (c) => {
    const record = await routeKey(c, (id) => options.store(c).revoke(id))
    return c.json({ ...publicKeyView(record), revoked: true })
  })

  return app
}

/** Revoked keys stay revoked: their scopes and secret can no longer change. */
async function findLiveKey(c: Context<GatewayEnv>, options: KeysRoutesOptions): Promise<KeyRecord> {
  const record = await findKey(c, options)
  if (record.revokedAt !== null) throw invalidRequest('This key is revoked; create a new one.')
  return record
}
