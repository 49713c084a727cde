/**
 * The emulator's HTTP surface: the call recorder, the control API under `/__emulator`, and the
 * endpoint routes mounted both under `/v2` and at the root (gateways configure either base URL).
 */

import { Hono } from 'hono'
import * as z from 'zod'
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
const afterTokens = z.number().int().min(0)
const faultSchema = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('http'),
    status: z.number().int().min(200).max(599),
    times: z.number().int().min(0).optional(),
    ops: z.array(opSchema).optional(),
    retryAfter: z.number().min(0).optional(),
  }),
  z.object({ kind: z.literal('stall'), afterTokens }),
  z.object({ kind: z.literal('job_failed') }),
  z.object({ kind: z.literal('mid_stream'), afterTokens }),
])
const ms = z.number().min(0).optional()
/** `null` clears an optional field (`fault`, `servedModelName`). */
export const configureBodySchema = z.object({
  endpointId: z.string().min(1),
  behaviour: z.strictObject({
    generation: z.enum(['classic', 'current']).optional(),
    servedModelName: z.string().nullish().transform((v) => v ?? undefined),
    coldStartMs: ms,
    warmForMs: ms,
    queueDelayMs: ms,
    tokenDelayMs: ms,
    retentionMs: ms,
    runsyncRetentionMs: ms,
    fault: faultSchema.nullish().transform((v) => v ?? undefined),
    mangleUtf8: z.boolean().optional(),
    enableAutoToolChoice: z.boolean().optional(),
    maxLogprobs: z.number().int().min(0).optional(),
    reasoningFields: z.array(z.enum(['reasoning', 'reasoning_content'])).optional(),
    embeddingDimensions: z.number().int().min(1).max(8192).optional(),
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
    const parsed = configureBodySchema.safeParse(await c.req.json().catch(() => undefined))
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
