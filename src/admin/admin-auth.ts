/**
 * `adminAuth`: guards operator routes with the admin token, compared in constant time.
 * Without a configured token the admin surface does not exist (404), rather than being open.
 */
import type { MiddlewareHandler } from 'hono'
import { bearerCredential } from '../auth/api-key-auth.ts'
import { timingSafeEqualText } from '../auth/keys.ts'
import { GatewayError } from '../errors/index.ts'

export function adminAuth(options: { token: string | undefined }): MiddlewareHandler {
  const token = options.token
  return async function adminAuth(c, next) {
    if (!token) throw new GatewayError('not_found', 'Not found.')
    const presented = bearerCredential(c)
    if (!presented || !(await timingSafeEqualText(presented, token))) {
      throw new GatewayError('invalid_api_key', 'Invalid admin token.', { headers: { 'www-authenticate': 'Bearer realm="podgate-admin"' } })
    }
    await next()
  }
}
