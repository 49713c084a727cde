/**
 * The emulator's HTTP surface: the call recorder, the control API under `/__emulator`, and the
 * endpoint routes mounted both under `/v2` and at the root (gateways configure either base URL).
 */

import { Hono } from 'hono'
import * as z from 'zod/mini'
import { ENGLISH } from '../../zod/english.ts'
import type { EmulatorContext, EmulatorEnv } from './context.ts'
import { viewJob } from './jobs.ts'
import { recordCalls } from './middleware.ts'
import { registerNativeRoutes } from './native-routes.ts'
import { registerOpenAIRoutes } from './openai-route.ts'
import type { EmulatorJobView, EndpointBehaviour } from './types.ts'

export interface ControlHooks {
  reset(): void
  activeJobs(): EmulatorJobView[]
  configure(endpointId: string, behaviour: Partial<EndpointBehaviour>): void
}

const opSchema = z.enum([
  'run', 'runsync', 'status', 'status-sync', 'stream', 'cancel', 'retry', 'purge-queue', 'health', 'openai', 'control', 'unknown',
])
const afterTokens = z.number().check(z.int(), z.minimum(0))
const faultSchema = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('http'),
    status: z.number().check(z.int(), z.minimum(200), z.maximum(599)),
    times: z.optional(z.number().check(z.int(), z.minimum(0))),
    ops: z.optional(z.array(opSchema)),
    retryAfter: z.optional(z.number().check(z.minimum(0))),
  }),
  z.object({ kind: z.literal('stall'), afterTokens }),
  z.object({ kind: z.literal('job_failed') }),
  z.object({ kind: z.literal('mid_stream'), afterTokens }),
  z.object({ kind: z.literal('error_event'), afterTokens }),
])
const ms = z.optional(z.number().check(z.minimum(0)))
/** `null` clears an optional field (`fault`, `servedModelName`): it arrives as undefined. */
const cleared = <T extends z.core.$ZodType>(schema: T) => z.pipe(z.nullish(schema), z.transform((v: z.output<T> | null | undefined) => v ?? undefined))
export const configureBodySchema = z.object({
  endpointId: z.string().check(z.minLength(1)),
  behaviour: z.strictObject({
    generation: z.optional(z.enum(['classic', 'current'])),
    servedModelName: cleared(z.string()),
    coldStartMs: ms,
    warmForMs: ms,
    queueDelayMs: ms,
    tokenDelayMs: ms,
    executionTimeoutMs: ms,
    ttlMs: ms,
    retentionMs: ms,
    runsyncRetentionMs: ms,
    fault: cleared(faultSchema),
    mangleUtf8: z.optional(z.boolean()),
    enableAutoToolChoice: z.optional(z.boolean()),
    maxLogprobs: z.optional(z.number().check(z.int(), z.minimum(0))),
    reasoningFields: z.optional(z.array(z.enum(['reasoning', 'reasoning_content']))),
    embeddingDimensions: z.optional(z.number().check(z.int(), z.minimum(1), z.maximum(8192))),
    messagesDone: z.optional(z.boolean()),
    rawOpenAIOutput: z.optional(z.boolean()),
    runningStatus: z.optional(z.enum(['IN_PROGRESS', 'RUNNING'])),
    rateLimitScale: z.optional(z.number().check(z.minimum(0))),
  }),
})

export function createEmulatorApp(context: EmulatorContext, hooks: ControlHooks): Hono<EmulatorEnv> {
  const app = new Hono<EmulatorEnv>()
  app.use(recordCalls(context))

  const control = new Hono<EmulatorEnv>()
  control.use(async function markControl(c, next) {
    c.set('call', { op: 'control', endpointId: null, authorized: true })
    await next()
  })
  control.get('/calls', (c) => c.json(context.calls))
  control.post('/reset', (c) => {
    hooks.reset()
    c.set('call', { op: 'control', endpointId: null, authorized: true, forget: true })
    return c.json({ ok: true })
  })
  control.get('/jobs', (c) => c.json(hooks.activeJobs()))
  control.get('/last-request/:endpointId', (c) => {
    const last = context.lastRequests.get(c.req.param('endpointId'))
    return last ? c.json(last) : c.json({ error: 'no request on that endpoint yet' }, 404)
  })
  control.get('/jobs/:jobId', (c) => {
    const job = context.jobs.get(c.req.param('jobId'), context.now())
    return job ? c.json(viewJob(job, context.now())) : c.json({ error: 'no such job' }, 404)
  })
  control.post('/configure', async (c) => {
    const parsed = configureBodySchema.safeParse(await c.req.json().catch(() => undefined), ENGLISH)
    if (!parsed.success) return c.json({ error: z.prettifyError(parsed.error) }, 400)
    // Absent keys stay absent (unchanged); a key sent as null arrives as undefined and clears the field.
    hooks.configure(parsed.data.endpointId, parsed.data.behaviour)
    return c.json({ ok: true })
  })
  app.route('/__emulator', control)

  const api = new Hono<EmulatorEnv>()
  registerNativeRoutes(api, context)
  registerOpenAIRoutes(api, context)
  app.route('/v2', api)
  app.route('/', api)

  app.notFound((c) => c.text('Not Found', 404))
  app.onError((error, c) => c.text(`Internal Server Error: ${error.message}`, 500))
  return app
}
