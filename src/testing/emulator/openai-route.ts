/**
 * Runpod's OpenAI-compatible route, `/{endpointId}/openai/v1/*` (chat/completions, completions,
 * embeddings, models), answered as vLLM would: JSON bodies, real SSE paced by the endpoint's cold start
 * and token delay, vLLM's refusals, and faults that break the body.
 */

import type { Context, Hono } from 'hono'
import { readJsonBody, recordBody, sleep } from './context.ts'
import type { EmulatorContext, EmulatorEnv } from './context.ts'
import { httpFaultResponse, requestFault } from './faults.ts'
import { endpointOp } from './middleware.ts'
import { complete, completionEvents, completionId, completionJson, DEFAULT_MODEL_NAME, modelList, sseEvent, vllmError } from './openai-format.ts'
import type { TimedEvent } from './openai-format.ts'
import { embeddingsResponse } from './embeddings.ts'
import { embeddingTexts, parseOpenAIBody, servedRefusal } from './requests.ts'
import { parseDirectives } from './directives.ts'
import type { Fault } from './types.ts'

/** How long a stalled request hangs before it is given up, like Runpod's default executionTimeout. */
const STALL_LIMIT_MS = 600_000
const MAX_BODY_BYTES = 20 * 1024 * 1024

export function registerOpenAIRoutes(api: Hono<EmulatorEnv>, context: EmulatorContext): void {
  api.post('/:endpointId/openai/v1/chat/completions', endpointOp(context, 'openai'), (c) => completions(c, context, 'chat'))
  api.post('/:endpointId/openai/v1/completions', endpointOp(context, 'openai'), (c) => completions(c, context, 'completion'))
  api.post('/:endpointId/openai/v1/embeddings', endpointOp(context, 'openai'), (c) => embeddings(c, context))
  api.get('/:endpointId/openai/v1/models', endpointOp(context, 'openai'), (c) => {
    const model = context.endpoints.behaviour(c.req.param('endpointId')).servedModelName ?? DEFAULT_MODEL_NAME
    return c.json(modelList(model, Math.floor(context.now() / 1000)))
  })
}

async function completions(c: Context<EmulatorEnv>, context: EmulatorContext, kind: 'chat' | 'completion'): Promise<Response> {
  const endpointId = c.req.param('endpointId') ?? ''
  const body = await readJsonBody(c.req.raw, MAX_BODY_BYTES)
  recordBody(context, { endpointId, op: 'openai', url: c.req.url, body })
  if (!body.ok) return c.json(vllmError(body.message, 'BadRequestError', body.status), body.status)
  const parsed = parseOpenAIBody(kind, body.value)
  if (!parsed.ok) return c.json(vllmError(parsed.message, 'BadRequestError', 400), 400)
  const request = parsed.request

  const behaviour = context.endpoints.behaviour(endpointId)
  const served = behaviour.servedModelName
  if (served !== undefined && request.model !== undefined && request.model !== served) {
    return c.json(vllmError(`The model \`${request.model}\` does not exist.`, 'NotFoundError', 404), 404)
  }
  const fault = requestFault(request.directives, behaviour)
  if (fault?.kind === 'http') return httpFaultResponse(fault)
  const refusal = servedRefusal(request, behaviour)
  if (refusal) return c.json(vllmError(refusal.message, refusal.type, refusal.status), refusal.status as 400)

  const now = context.now()
  const queueMs = context.endpoints.admit(endpointId, now, request.directives.coldStartMs) - now
  const delayMs = request.directives.tokenDelayMs ?? behaviour.tokenDelayMs
  const completion = complete(request)
  const meta = {
    id: completionId(kind, crypto.randomUUID().replaceAll('-', '')),
    created: Math.floor(now / 1000),
    model: served ?? request.model ?? DEFAULT_MODEL_NAME,
    reasoningFields: behaviour.reasoningFields,
  }
  context.endpoints.keepWarm(endpointId, now + queueMs + completion.steps * delayMs)
  const signal = c.req.raw.signal
  const cutoff = fault?.kind === 'stall' || fault?.kind === 'mid_stream' ? Math.min(fault.afterTokens, completion.steps) : undefined

  if (fault?.kind === 'job_failed') {
    await sleep(queueMs, signal)
    return c.json(vllmError('Emulated handler failure (fault=job_failed).', 'InternalServerError', 500), 500)
  }
  if (request.stream) {
    const events = completionEvents(completion, meta, request.includeUsage)
    const onCancel = () => {
      const record = c.get('call')?.record
      if (record) record.streamCancelled = true
    }
    const stream = paceEvents(events, { queueMs, delayMs, fault, cutoff, onCancel })
    return new Response(stream, { headers: { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' } })
  }
  if (fault?.kind === 'stall') {
    await sleep(STALL_LIMIT_MS, signal)
    return c.json(vllmError('Emulated stall (fault=stall) ran into the execution timeout.', 'InternalServerError', 500), 500)
  }
  await sleep(queueMs + (cutoff ?? completion.steps) * delayMs, signal)
  if (fault?.kind === 'mid_stream') {
    return c.json(vllmError(`Emulated worker failure after ${cutoff ?? 0} tokens (fault=mid_stream).`, 'InternalServerError', 500), 500)
  }
  return c.json(completionJson(completion, meta))
}

async function embeddings(c: Context<EmulatorEnv>, context: EmulatorContext): Promise<Response> {
  const endpointId = c.req.param('endpointId') ?? ''
  const body = await readJsonBody(c.req.raw, MAX_BODY_BYTES)
  recordBody(context, { endpointId, op: 'openai', url: c.req.url, body })
  if (!body.ok) return c.json(vllmError(body.message, 'BadRequestError', body.status), body.status)
  const behaviour = context.endpoints.behaviour(endpointId)
  const model = typeof (body.value as { model?: unknown }).model === 'string' ? (body.value as { model: string }).model : undefined
  const served = behaviour.servedModelName
  if (served !== undefined && model !== undefined && model !== served) {
    return c.json(vllmError(`The model \`${model}\` does not exist.`, 'NotFoundError', 404), 404)
  }
  const directives = parseDirectives(embeddingTexts(body.value))
  const fault = requestFault(directives, behaviour)
  if (fault?.kind === 'http') return httpFaultResponse(fault)
  const now = context.now()
  await sleep(context.endpoints.admit(endpointId, now, directives.coldStartMs) - now, c.req.raw.signal)
  const result = embeddingsResponse(body.value, {
    model: served ?? model ?? DEFAULT_MODEL_NAME,
    defaultDimensions: behaviour.embeddingDimensions,
    id: `embd-${crypto.randomUUID().replaceAll('-', '')}`,
    created: Math.floor(now / 1000),
  })
  if (!result.ok) return c.json(vllmError(result.refusal.message, result.refusal.type, result.refusal.status), result.refusal.status as 400)
  return c.json(result.body)
}

/**
 * The SSE body, one pull per generation step: the first pull waits out the queue, later ones the
 * token delay. After `cutoff` a stall hangs and a mid-stream failure errors the body (no `[DONE]`).
 */
function paceEvents(
  events: readonly TimedEvent[],
  options: { queueMs: number; delayMs: number; fault: Fault | undefined; cutoff: number | undefined; onCancel?: () => void },
): ReadableStream<Uint8Array> {
  const { cutoff, fault } = options
  const kept = cutoff === undefined ? events : events.filter((e) => e.step <= cutoff && e.kind === 'chunk')
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
          controller.enqueue(encoder.encode(group.map((e) => sseEvent(e.data)).join('')))
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
