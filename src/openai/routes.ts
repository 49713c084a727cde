/**
 * The OpenAI-compatible surface: `POST /chat/completions`, `POST /completions`, `POST /embeddings`,
 * `GET /models`, and vLLM's other routes (`POST /responses`, `/messages`, `/rerank`, ...), served at
 * `/v1` (model from the body) and at Runpod's own URL shape
 * `/v2/<model>/openai/v1` (model from the path). Each call flows one way:
 * body -> model + scope -> normalize -> pipeline stages -> upstream.
 */
import { Hono } from 'hono/tiny'
import { invalidRequest } from '../errors/index.ts'
import { readJsonBody } from '../http/body.ts'
import { assertJsonObject, COHERE_ROUTES, normalizeChatRequest, normalizeCompletionRequest, normalizeEmbeddingRequest, normalizeRouteRequest, VLLM_ROUTES } from '../normalize/index.ts'
import type { NormalizedRequest, RequestKind } from '../normalize/index.ts'
import { composeStages, createCompletionContext } from '../pipeline/index.ts'
import type { ModelTable, ResolvedModel } from '../routing/models.ts'
import { modelFor } from '../routing/models.ts'
import type { CompletionHandler, CompletionStage } from '../pipeline/index.ts'
import type { Context } from 'hono'
import type { ModelConfig } from '../config/schema.ts'
import type { GatewayEnv } from '../types.ts'

/** `byBody`, on the `/v2` mount: also serve vLLM's `/v2/rerank` and `/v2/embed` (Cohere's v2 API), the model from the body. */
function surface(options: OpenAIRoutesOptions, resolve: ModelResolver, prefix: string, byBody?: ModelResolver): Hono<GatewayEnv> {
  const app = new Hono<GatewayEnv>()
  const run = composeStages(options.stages, options.dispatch)
  const runRoute = options.routeStages ? composeStages(options.routeStages, options.dispatch) : run

  async function complete(c: Context<GatewayEnv>, normalize: Normalize, serve = run, modelOf = resolve): Promise<Response> {
    const body = await readJsonBody(c.req.raw, options.maxBodyBytes, true)
    assertJsonObject(body)
    const model = modelOf(c, body)
    return serve(createCompletionContext(c, normalize(body, model.config, model.alias), model))
  }

  app.post(`${prefix}/chat/completions`, (c) => complete(c, NORMALIZE.chat))
  app.post(`${prefix}/completions`, (c) => complete(c, NORMALIZE.completion))
  app.post(`${prefix}/embeddings`, (c) => complete(c, NORMALIZE.embedding))
  // vLLM's other routes: the body goes to the same route upstream as the caller wrote it.
  for (const [name, route] of Object.entries(VLLM_ROUTES)) {
    app.post(`${prefix}/${name}`, (c) => complete(c, (body, config, alias) => normalizeRouteRequest(body, config, alias, route), runRoute))
  }
  if (byBody) for (const route of COHERE_ROUTES) app.post(route.path.slice(3), (c) => complete(c, (body, config, alias) => normalizeRouteRequest(body, config, alias, route), runRoute, byBody))

  // The models the key may use, or one of them as listed (the OpenAI SDK's `models.retrieve`). An id not listed
  // is refused as a call naming it (404, 403): `modelFor` returns only for a listed one, so it never answers.
  // `/v2/<model>/openai/v1/models`: the path's model, refused (404, 403) as the path's other routes refuse it;
  // any other id is a 404. `{.+}`: an id with a slash (no alias has one) is a 404 `model_not_found`, not no route.
  // With `anthropic-version` (Anthropic's SDKs send it on every call), Anthropic's shapes: one page, no more.
  app.get(`${prefix}/models/:id{.+}?`, (c) => {
    const principal = c.get('principal')
    const only = c.req.param('model')
    const id = c.req.param('id')
    const anthropic = c.req.header('anthropic-version')
    const data = (only === undefined ? [...options.models.keys()].filter((alias) => principal.models?.includes(alias) ?? true) : [modelFor(options.models, only, principal).alias])
      .map((id) => ({ id, ...(anthropic ? { type: 'model', display_name: id, created_at: new Date(0).toISOString() } : { object: 'model', created: 0, owned_by: 'podgate' }) }))
    return c.json(id ? (data.find((model) => model.id === id) ?? modelFor(only ? new Map() : options.models, id, principal)) : { data, ...(anthropic ? { has_more: false, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null } : { object: 'list' }) })
  })

  return app
}

export interface OpenAIRoutesOptions {
  models: ModelTable
  maxBodyBytes: number
  /** Stages every completion passes through, in order (quota, cache, ...). */
  stages: readonly CompletionStage[]
  /** Stages of vLLM's other routes (`/responses`, `/rerank`, ...). Default: `stages`. */
  routeStages?: readonly CompletionStage[]
  /** The last handler: serves the request upstream. */
  dispatch: CompletionHandler
}

type Normalize = (body: Record<string, unknown>, model: ModelConfig, alias: string) => NormalizedRequest

const NORMALIZE: Record<RequestKind, Normalize> = {
  chat: normalizeChatRequest,
  completion: normalizeCompletionRequest,
  embedding: normalizeEmbeddingRequest,
}

/** `/v1/*`: the model is the body's `model`, a podgate alias. */
export function openaiRoutes(options: OpenAIRoutesOptions): Hono<GatewayEnv> {
  return surface(options, bodyModel(options.models), '')
}

/**
 * `/v2/<model>/openai/v1/*` (mount at `/v2`): Runpod's URL shape, which `@runpod/ai-sdk-provider` and
 * clients pointed at `api.runpod.ai` use. The path names the model; the body's `model` may be that
 * alias or its served model name. Also `/v2/rerank` and `/v2/embed`, vLLM's Cohere v2 API, the model from the body.
 */
export function runpodOpenAIRoutes(options: OpenAIRoutesOptions): Hono<GatewayEnv> {
  return surface(options, (c, body) => {
    const model = modelFor(options.models, c.req.param('model'), c.get('principal'))
    // A null model is vLLM's default (its `model` is optional): the path's model, as when left out.
    if (body.model != null && body.model !== model.alias && body.model !== model.servedModelName) {
      const named = typeof body.model === 'string' ? `'${body.model.slice(0, 128)}'` : `a ${typeof body.model}`
      throw invalidRequest(`The body's model ${named} is not the model this URL serves: send '${model.alias}'${model.servedModelName === model.alias ? '' : ` or '${model.servedModelName}'`}.`, { param: 'model' })
    }
    // The normalizer reads the alias; the upstream body gets the served name as on `/v1`.
    body.model = model.alias
    return model
  }, '/:model/openai/v1', bodyModel(options.models))
}

type ModelResolver = (c: Context<GatewayEnv>, body: Record<string, unknown>) => ResolvedModel

/** The model the body's `model` names (a podgate alias), if the caller may use it. */
const bodyModel = (models: ModelTable): ModelResolver => (c, body) => modelFor(models, body.model, c.get('principal'))
