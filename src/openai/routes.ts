/**
 * The OpenAI-compatible surface: `POST /chat/completions`, `POST /completions`, `GET /models`.
 * Each call flows one way: body -> model + scope -> normalize -> pipeline stages -> upstream.
 */
import { Hono } from 'hono'
import type { Context } from 'hono'
import { readJsonBody } from '../http/body.ts'
import { assertJsonObject, normalizeChatRequest, normalizeCompletionRequest } from '../normalize/index.ts'
import { composeStages, createCompletionContext } from '../pipeline/index.ts'
import type { CompletionHandler, CompletionStage } from '../pipeline/index.ts'
import { modelFor } from '../routing/models.ts'
import type { ModelTable } from '../routing/models.ts'
import type { GatewayEnv } from '../types.ts'

export interface OpenAIRoutesOptions {
  models: ModelTable
  maxBodyBytes: number
  /** Stages every completion passes through, in order (quota, cache, ...). */
  stages: readonly CompletionStage[]
  /** The last handler: serves the request upstream. */
  dispatch: CompletionHandler
}

export function openaiRoutes(options: OpenAIRoutesOptions): Hono<GatewayEnv> {
  const app = new Hono<GatewayEnv>()
  const run = composeStages(options.stages, options.dispatch)

  async function complete(c: Context<GatewayEnv>, kind: 'chat' | 'completion'): Promise<Response> {
    const body = await readJsonBody(c.req.raw, options.maxBodyBytes)
    assertJsonObject(body)
    const model = modelFor(options.models, body.model, c.get('principal'))
    const request = kind === 'chat' ? normalizeChatRequest(body, model.config, model.alias) : normalizeCompletionRequest(body, model.config, model.alias)
    return run(createCompletionContext(c, request, model))
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
