/**
 * Runpod's OpenAI-compatible route, `/{endpointId}/openai/<vLLM path>`: chat/completions,
 * completions, responses, messages (in their dialects, see dialects.ts), the utility routes
 * (embeddings, count_tokens, rerank, score, classify, pooling, tokenize, detokenize) and models,
 * answered as vLLM would: JSON bodies, real SSE paced by the endpoint's cold start and token delay,
 * vLLM's refusals, and faults that break the body.
 */

import type { Context, Hono } from 'hono'
import type { ContentfulStatusCode } from 'hono/utils/http-status'
import { readJsonBody, recordBody, sleep } from './context.ts'
import type { EmulatorContext, EmulatorEnv } from './context.ts'
import { DIALECTS } from './dialects.ts'
import type { GenerationRoute } from './dialects.ts'
import { parseDirectives } from './directives.ts'
import { httpFaultResponse, requestFault } from './faults.ts'
import { endpointOp } from './middleware.ts'
import { actingFault, complete, DEFAULT_MODEL_NAME, errorDialect, inBandError, modelList, refusalBody, sseEvent, wrongModel } from './openai-format.ts'
import type { TimedEvent } from './openai-format.ts'
import { servedRefusal } from './requests.ts'
import type { Refusal } from './requests.ts'
import { queuedResponse, responsesStore } from './responses-format.ts'
import type { Fault, JsonObject } from './types.ts'
import { answerUtility, utilityTexts } from './utility-routes.ts'
import type { UtilityRoute } from './utility-routes.ts'

/** How long a stalled request hangs before it is given up, like Runpod's default executionTimeout. */
const STALL_LIMIT_MS = 600_000
const MAX_BODY_BYTES = 20 * 1024 * 1024
const GENERATION_ROUTES = Object.keys(DIALECTS) as GenerationRoute[]
const UTILITY_ROUTES: readonly UtilityRoute[] = [
  '/v1/embeddings', '/v1/messages/count_tokens', '/v1/rerank', '/v1/score', '/classify', '/pooling', '/tokenize', '/detokenize',
]

export function registerOpenAIRoutes(api: Hono<EmulatorEnv>, context: EmulatorContext): void {
  for (const route of GENERATION_ROUTES) {
    api.post(`/:endpointId/openai${route}`, endpointOp(context, 'openai'), (c) => generation(c, context, route))
  }
  for (const route of UTILITY_ROUTES) {
    api.post(`/:endpointId/openai${route}`, endpointOp(context, 'openai'), (c) => utility(c, context, route))
  }
  api.get('/:endpointId/openai/v1/models', endpointOp(context, 'openai'), (c) => {
    const model = context.endpoints.behaviour(c.req.param('endpointId')).servedModelName ?? DEFAULT_MODEL_NAME
    return c.json(modelList(model, Math.floor(context.now() / 1000)))
  })
}

/** Answers a refusal in the route's error dialect, with its status. */
function refuse(c: Context<EmulatorEnv>, route: string, refusal: Omit<Refusal, 'dialect'>): Response {
  return c.json(refusalBody({ ...refusal, dialect: errorDialect(route) }), refusal.status as ContentfulStatusCode)
}

async function generation(c: Context<EmulatorEnv>, context: EmulatorContext, route: GenerationRoute): Promise<Response> {
  const endpointId = c.req.param('endpointId') ?? ''
  const dialect = DIALECTS[route]
  const body = await readJsonBody(c.req.raw, MAX_BODY_BYTES)
  recordBody(context, { endpointId, op: 'openai', url: c.req.url, body })
  if (!body.ok) return refuse(c, route, { status: body.status, type: 'BadRequestError', message: body.message })
  const parsed = dialect.parse(body.value)
  if (!parsed.ok) return refuse(c, route, { status: 400, type: 'BadRequestError', message: parsed.message })
  let request = parsed.request

  const behaviour = context.endpoints.behaviour(endpointId)
  const served = behaviour.servedModelName
  const misnamed = wrongModel({ served, model: request.model, route })
  if (misnamed) return refuse(c, route, misnamed)
  const fault = actingFault(requestFault(request.directives, behaviour), request.stream, route)
  if (fault?.kind === 'http') return httpFaultResponse(fault)
  const refusal = servedRefusal(request, behaviour)
  if (refusal) return refuse(c, route, refusal)

  const now = context.now()
  const queueMs = context.endpoints.admit(endpointId, now, request.directives.coldStartMs) - now
  // `/v1/responses` reads and writes the store of the worker that took the request.
  const stored = context.endpoints.storedResponses(endpointId)
  const store = route === '/v1/responses' ? responsesStore(body.value as JsonObject, behaviour.responsesStore, stored) : undefined
  if (store && !store.ok) {
    await sleep(queueMs, c.req.raw.signal)
    return c.json(store.error, store.status as ContentfulStatusCode)
  }
  if (store?.ok && typeof (body.value as JsonObject).previous_response_id === 'string') {
    const expanded = dialect.parse(store.body)
    if (expanded.ok) request = expanded.request
  }
  const delayMs = request.directives.tokenDelayMs ?? behaviour.tokenDelayMs
  const completion = complete(request)
  const meta = {
    id: dialect.id(crypto.randomUUID().replaceAll('-', '')),
    created: Math.floor(now / 1000),
    model: served ?? request.model ?? DEFAULT_MODEL_NAME,
    reasoningFields: behaviour.reasoningFields,
    messagesDone: behaviour.messagesDone,
  }
  context.endpoints.keepWarm(endpointId, now + queueMs + completion.steps * delayMs)
  // vLLM stores the finished answer (a background one at once, as `queued`, then finished); a failed one never.
  if (store?.ok && store.conversation && !fault) stored.set(meta.id, [...store.conversation, { role: 'assistant', content: completion.choices[0]?.text ?? '' }])
  if (store?.ok && store.background && !request.stream) {
    await sleep(queueMs, c.req.raw.signal)
    return c.json(queuedResponse(completion, meta))
  }
  const signal = c.req.raw.signal
  const cutoff = fault && 'afterTokens' in fault ? Math.min(fault.afterTokens, completion.steps) : undefined

  if (fault?.kind === 'job_failed') {
    await sleep(queueMs, signal)
    return refuse(c, route, { status: 500, type: 'InternalServerError', message: 'Emulated handler failure (fault=job_failed).' })
  }
  if (request.stream) {
    const events = dialect.events(completion, meta)
    const onCancel = () => {
      const record = c.get('call')?.record
      if (record) record.streamCancelled = true
    }
    const stream = paceEvents(events, { queueMs, delayMs, fault, cutoff, onCancel })
    return new Response(stream, { headers: { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' } })
  }
  if (fault?.kind === 'stall') {
    await sleep(STALL_LIMIT_MS, signal)
    return refuse(c, route, { status: 500, type: 'InternalServerError', message: 'Emulated stall (fault=stall) ran into the execution timeout.' })
  }
  await sleep(queueMs + (cutoff ?? completion.steps) * delayMs, signal)
  if (fault?.kind === 'mid_stream') {
    return refuse(c, route, { status: 500, type: 'InternalServerError', message: `Emulated worker failure after ${cutoff ?? 0} tokens (fault=mid_stream).` })
  }
  return c.json(dialect.json(completion, meta))
}

/** A route that generates nothing: the cold start and HTTP faults apply, stalls and mid-stream faults do not. */
async function utility(c: Context<EmulatorEnv>, context: EmulatorContext, route: UtilityRoute): Promise<Response> {
  const endpointId = c.req.param('endpointId') ?? ''
  const body = await readJsonBody(c.req.raw, MAX_BODY_BYTES)
  recordBody(context, { endpointId, op: 'openai', url: c.req.url, body })
  if (!body.ok) return refuse(c, route, { status: body.status, type: 'BadRequestError', message: body.message })
  const behaviour = context.endpoints.behaviour(endpointId)
  const model = (body.value as { model?: unknown } | null)?.model
  const served = behaviour.servedModelName
  const misnamed = wrongModel({ served, model, route })
  if (misnamed) return refuse(c, route, misnamed)
  const directives = parseDirectives(utilityTexts(route, body.value))
  const fault = requestFault(directives, behaviour)
  if (fault?.kind === 'http') return httpFaultResponse(fault)
  const now = context.now()
  await sleep(context.endpoints.admit(endpointId, now, directives.coldStartMs) - now, c.req.raw.signal)
  const result = answerUtility(route, body.value, {
    model: served ?? (typeof model === 'string' ? model : DEFAULT_MODEL_NAME),
    idSuffix: crypto.randomUUID().replaceAll('-', ''),
    created: Math.floor(now / 1000),
    embeddingDimensions: behaviour.embeddingDimensions,
  })
  return result.ok ? c.json(result.body) : c.json(refusalBody(result.refusal), result.refusal.status as ContentfulStatusCode)
}

/**
 * The SSE body, one pull per generation step: the first pull waits out the queue, later ones the
 * token delay. After `cutoff` a stall hangs, a mid-stream failure errors the body (no `[DONE]`), and an
 * in-band error event is sent and the body ends.
 */
function paceEvents(
  events: readonly TimedEvent[],
  options: { queueMs: number; delayMs: number; fault: Fault | undefined; cutoff: number | undefined; onCancel?: () => void },
): ReadableStream<Uint8Array> {
  const { cutoff, fault } = options
  let kept = cutoff === undefined ? events : events.filter((e) => e.step <= cutoff && e.kind === 'chunk')
  if (fault?.kind === 'error_event') kept = [...kept, ...inBandError(cutoff ?? 0)]
  const groups: TimedEvent[][] = []
  for (const event of kept) {
    const last = groups.at(-1)
    if (last && last[0]?.step === event.step) last.push(event)
    else groups.push([event])
  }

  const encoder = new TextEncoder()
  const cancelled = new AbortController()
  let index = 0
  let previousStep = 0
  let queued = true
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        if (queued) {
          queued = false
          await sleep(options.queueMs, cancelled.signal)
        }
        const group = groups[index]
        if (group) {
          const step = group[0]?.step ?? previousStep
          await sleep((step - previousStep) * options.delayMs, cancelled.signal)
          if (cancelled.signal.aborted) return
          index++
          previousStep = step
          controller.enqueue(encoder.encode(group.map((e) => sseEvent(e)).join('')))
          return
        }
        if (fault?.kind === 'mid_stream') {
          controller.error(new Error(`Emulated worker failure after ${cutoff ?? 0} tokens (fault=mid_stream)`))
        } else if (fault?.kind === 'stall') {
          await sleep(STALL_LIMIT_MS, cancelled.signal)
          if (!cancelled.signal.aborted) controller.error(new Error('Emulated stall ran into the execution timeout'))
        } else {
          controller.close()
        }
      },
      cancel() {
        cancelled.abort()
        options.onCancel?.()
      },
    },
    // Nothing is produced before the client reads, so delays happen on the client's clock.
    { highWaterMark: 0 },
  )
}
