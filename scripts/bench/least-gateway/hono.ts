/**
 * The least gateway of scripts/bench/least-gateway/plain.js on the stack podgate is built with: a Hono
 * app whose one route checks the key in a middleware (a Map lookup) and validates the chat body with
 * podgate's own zod/mini schema (`chatCompletionRequestSchema`), then forwards it and answers with the
 * upstream's JSON read whole (its usage), or a stream as plain.js's `first` shape does (the first chunk
 * awaited, the rest teed, the copy read to its end). What it adds over the plain shapes is what Hono and
 * the schema cost by themselves; what podgate adds over it is podgate's own features (`npm run bench:latency`).
 */
import { Hono } from 'hono'
import { chatCompletionRequestSchema } from '../../../src/normalize/schemas.ts'

interface Env {
  UPSTREAM: string
}

const KEYS = new Map([['bench', { models: ['bench'] }]])

const app = new Hono<{ Bindings: Env; Variables: { models: string[] } }>()
app.use('/v1/*', async (c, next) => {
  const key = KEYS.get((c.req.header('authorization') ?? '').slice('Bearer '.length))
  if (!key) return c.json({ error: { message: 'unknown key' } }, 401)
  c.set('models', key.models)
  await next()
})
app.post('/v1/chat/completions', async (c) => {
  const parsed = chatCompletionRequestSchema.safeParse(await c.req.json())
  if (!parsed.success || !c.var.models.includes(parsed.data.model)) return c.json({ error: { message: 'bad request' } }, 400)
  const res = await fetch(`${c.env.UPSTREAM}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(parsed.data) })
  if (parsed.data.stream && res.body) {
    const reader = res.body.getReader()
    const first = await reader.read()
    reader.releaseLock()
    const [caller, copy] = res.body.tee()
    c.executionCtx.waitUntil((async () => {
      const rest = copy.getReader()
      while (!(await rest.read()).done);
    })())
    const { readable, writable } = new IdentityTransformStream()
    if (!first.done) {
      const writer = writable.getWriter()
      writer.write(first.value).catch(() => undefined)
      writer.releaseLock()
    }
    c.executionCtx.waitUntil(caller.pipeTo(writable))
    return new Response(readable, { status: res.status, headers: res.headers })
  }
  const answer = await res.json()
  return c.json(answer as object, res.status as 200)
})

export default app
// wrangler.toml's [env.dev] binds the strict quota store's Durable Object, which the bundle must export.
export { QuotaObject } from '../../../src/durable-objects.ts'
