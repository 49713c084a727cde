/**
 * The first zod issue as a GatewayError with OpenAI's `param` path style (`messages[0].content`), in
 * zod's own English words: for the admin, token and cache-purge bodies. (The completion surfaces word
 * their errors themselves: src/normalize/zod-errors.ts.)
 */
import type * as z from 'zod/mini'
import { GatewayError } from '../errors/index.ts'
import { ENGLISH } from '../zod/english.ts'

export function paramPath(path: readonly PropertyKey[]): string | undefined {
  let out = ''
  for (const part of path) out += typeof part === 'number' ? `[${part}]` : out === '' ? String(part) : `.${String(part)}`
  return out === '' ? undefined : out
}

/**
 * Parses `body` with `schema`, or throws the `invalid_request` GatewayError of its first issue.
 *
 * @example
 * const input = parseBody(purgeSchema, await readJsonBody(c.req.raw, maxBodyBytes))
 */
export function parseBody<S extends z.ZodMiniType>(schema: S, body: unknown): z.output<S> {
  const parsed = schema.safeParse(body, ENGLISH)
  if (parsed.success) return parsed.data
  throw zodToGatewayError(parsed.error)
}

function zodToGatewayError(error: z.core.$ZodError): GatewayError {
  const issue = error.issues[0]
  if (!issue) return new GatewayError('invalid_request', 'The request body is invalid.')
  const param = paramPath(issue.path)
  const message = param ? `Invalid '${param}': ${issue.message}` : `Invalid request: ${issue.message}`
  return new GatewayError('invalid_request', message, param === undefined ? {} : { param })
}
