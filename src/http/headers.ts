/**
 * Headers added to an answer after its handler ran, without copying the Response. Copying is what
 * `new Response(response.body, response)` and Hono's `c.header` after `next()` do, each time: a new
 * Response and a copy of every header, per stage or middleware, on every request. podgate's own
 * responses have mutable headers and are changed in place; one whose headers are immutable (a `fetch`
 * answer returned as it is) is copied, once.
 */
import type { Context } from 'hono'

/**
 * `response` with `headers` set: the same object when its headers can change, else a copy.
 *
 * @example
 * return withHeaders(await next(ctx), { 'x-podgate-cache': 'BYPASS' })
 */
export function withHeaders(response: Response, headers: Readonly<Record<string, string>>): Response {
  try {
    setAll(response.headers, headers)
    return response
  } catch (error) {
    // Immutable headers refuse the first change, so none was made.
    if (!(error instanceof TypeError)) throw error
    const copy = new Response(response.body, response)
    setAll(copy.headers, headers)
    return copy
  }
}

/**
 * Sets (or with `append`, adds) a header on `c.res` in middleware, after `next()`: in place when the
 * answer's headers can change, else through `c.header`, which copies the answer.
 *
 * @example
 * await next()
 * setAnswerHeader(c, 'vary', 'Origin', { append: true })
 */
export function setAnswerHeader(c: Context, name: string, value: string, options?: { append?: boolean }): void {
  const { headers } = c.res
  try {
    if (options?.append) headers.append(name, value)
    else headers.set(name, value)
  } catch (error) {
    if (!(error instanceof TypeError)) throw error
    c.header(name, value, options)
  }
}

function setAll(target: Headers, headers: Readonly<Record<string, string>>): void {
  for (const name in headers) target.set(name, headers[name]!)
}
