/**
 * The first zod issue as a GatewayError with OpenAI's `param` path style (`messages[0].content`).
 */
import type { z } from 'zod'
import { GatewayError } from '../errors/index.ts'

export function paramPath(path: readonly PropertyKey[]): string | undefined {
  let out = ''
  for (const part of path) out += typeof part === 'number' ? `[${part}]` : out === '' ? String(part) : `.${String(part)}`
  return out === '' ? undefined : out
}

export function zodToGatewayError(error: z.ZodError): GatewayError {
  const issue = error.issues[0]
  if (!issue) return new GatewayError('invalid_request', 'The request body is invalid.')
  const param = paramPath(issue.path)
  const message = param ? `Invalid '${param}': ${issue.message}` : `Invalid request: ${issue.message}`
  return new GatewayError('invalid_request', message, param === undefined ? {} : { param })
}
