/**
 * workers/composed.ts in workerd with the test's bindings: the app's own requests and its session login,
 * shared by the composition tests and the CSRF tests.
 */
import { createExecutionContext, env, waitOnExecutionContext } from 'cloudflare:test'
import app from '../workers/composed.ts'

const appEnv = { ...env, APP_SESSION_SECRET: 'test_session_secret_0123456789abcdef' }

/** Calls the composed app at https://app.example, with a session cookie when given. */
export async function callComposed(path: string, init: RequestInit = {}, cookie?: string): Promise<Response> {
  const headers = new Headers(init.headers)
  if (cookie) headers.set('cookie', cookie)
  const ctx = createExecutionContext()
  const res = await app.fetch(new Request(`https://app.example${path}`, { ...init, headers }), appEnv, ctx)
  await waitOnExecutionContext(ctx)
  return res
}

/** Signs `user` in; the whole `Set-Cookie` header (for its attributes) and the cookie to send back. */
export async function loginComposed(user: string): Promise<{ status: number; setCookie: string; cookie: string }> {
  const res = await callComposed('/login', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ user }) })
  const setCookie = res.headers.get('set-cookie') ?? ''
  return { status: res.status, setCookie, cookie: setCookie.split(';')[0]! }
}
