/**
 * The OpenAI-compatible surface: `POST /chat/completions`, `POST /completions`, `GET /models`.
 * Each call flows one way: body -> model + scope -> normalize -> endpoint -> upstream mode.
 */
import { Hono } from 'hono'
import type { Context } from 'hono'
import { readJsonBody } from '../http/body.ts'
import { assertJsonObject, normalizeChatRequest, normalizeCompletionRequest } from '../normalize/index.ts'
import { modelFor, pickEndpoint } from '../routing/models.ts'
import type { ModelTable } from '../routing/models.ts'
import type { ResolvedOptions } from '../config/schema.ts'
import type { RunpodClient } from '../upstream/runpod/client.ts'
import { nativeCompletion } from '../upstream/native.ts'
import { openaiRouteCompletion } from '../upstream/openai-route.ts'
import type { TokenUsage } from '../upstream/types.ts'
import type { GatewayEnv } from '../types.ts'
import { waitUntilOf } from '../http/context.ts'

export interface OpenAIRoutesOptions {
  models: ModelTable
  client: RunpodClient
  runpod: ResolvedOptions['runpod']
  maxBodyBytes: number
  /** Called once per completed answer with its real usage (quotas, logs). */
  onUsage?: (c: Context<GatewayEnv>, usage: TokenUsage) => void
}

export function openaiRoutes(options: OpenAIRoutesOptions): Hono<GatewayEnv> {
  const app = new Hono<GatewayEnv>()

  async function complete(c: Context<GatewayEnv>, kind: 'chat' | 'completion'): Promise<Response> {
    const body = await readJsonBody(c.req.raw, options.maxBodyBytes)
    assertJsonObject(body)
    const model = modelFor(options.models, body.model, c.get('principal'))
    const request = kind === 'chat' ? normalizeChatRequest(body, model.config, model.alias) : normalizeCompletionRequest(body, model.config, model.alias)
    const endpoint = pickEndpoint(model)
    const onUsage = options.onUsage
    const call = {
      client: options.client,
      runpod: options.runpod,
      model,
      endpoint,
      request,
      signal: c.req.raw.signal,
      waitUntil: waitUntilOf(c),
      onUsage: onUsage ? (usage: TokenUsage) => onUsage(c, usage) : undefined,
    }
    return endpoint.mode === 'openai' ? openaiRouteCompletion(call) : nativeCompletion(call)
  }

  app.post('/chat/completions', (c) => complete(c, 'chat'))
  app.post('/completions', (c) => complete(c, 'completion'))

  app.get('/models', (c) => {
    const allowed = c.get('principal').models
    const data = [...options.models.keys()]
      .filter((alias) => allowed === null || allowed.includes(alias))
      .map((id) => ({ id, object: 'model', created: 0, owned_by: 'podgate' }))
    return c.json({ object: 'list', data })
  })

  return app
}
