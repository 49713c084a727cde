/**
 * `GET /openapi.json`: an OpenAPI 3.1 document of the gateway, built from the app's own route table
 * (so every mounted route is listed) and the operation descriptions in `operations.ts`.
 *
 * Built once per isolate, on first request: `z.toJSONSchema` is not free and the request path is
 * CPU-metered.
 */
import type { Context } from 'hono'
import { formatForPath } from '../http/respond.ts'
import type { GatewayEnv } from '../types.ts'
import { registerDescriptions } from './descriptions.ts'
import { OPERATIONS, RESPONSE_SCHEMAS, requestSchemas } from './operations.ts'
import type { OperationSpec } from './operations.ts'

/** The part of Hono's `RouterRoute` the document needs. */
export interface RouteEntry {
  method: string
  path: string
}

export interface OpenApiDocumentOptions {
  /** The gateway app's routes (`app.routes`); middleware (`ALL`, wildcards) is skipped. */
  routes: readonly RouteEntry[]
  /** `info.version`. Default `0.1.0`. */
  version?: string
}

export type OpenApiDocument = Record<string, unknown> & { paths: Record<string, Record<string, unknown>> }

/** A route's errors, in the shape its surface answers them (src/http/respond.ts): OpenAI's, Runpod's or Anthropic's. */
const ERROR_RESPONSES = {
  openai: errorResponse('Error', "An error in OpenAI's shape"),
  runpod: errorResponse('RunpodError', "An error in Runpod's shape"),
  anthropic: errorResponse('AnthropicError', "An error in Anthropic's shape"),
}

function errorResponse(schema: string, description: string) {
  return { description, content: { 'application/json': { schema: { $ref: `#/components/schemas/${schema}` } } } }
}

/**
 * The routes a document lists: real endpoints, not middleware. A parameter's pattern is left out
 * (`:id{.+}` is `:id`), and a route with an optional last parameter (`/models/:id?`) is two paths.
 */
export function documentedRoutes(routes: readonly RouteEntry[]): RouteEntry[] {
  const seen = new Set<string>()
  const out: RouteEntry[] = []
  for (const route of routes) {
    if (route.method === 'ALL' || route.path.includes('*')) continue
    const path = route.path.replace(/(:\w+)\{[^}]*\}/g, '$1')
    for (const p of path.endsWith('?') ? [path.replace(/\/[^/]+$/, ''), path.slice(0, -1)] : [path]) {
      const id = `${route.method} ${p}`
      if (seen.has(id)) continue
      seen.add(id)
      out.push({ method: route.method, path: p })
    }
  }
  return out
}

/**
 * @example
 * const doc = buildOpenApiDocument({ routes: createGateway(options).routes })
 */
export function buildOpenApiDocument(options: OpenApiDocumentOptions): OpenApiDocument {
  registerDescriptions()
  const paths: OpenApiDocument['paths'] = {}
  for (const route of documentedRoutes(options.routes)) {
    const spec = OPERATIONS[`${route.method} ${route.path}`]
    const path = route.path.replace(/:([A-Za-z0-9_]+)/g, '{$1}')
    paths[path] ??= {}
    paths[path][route.method.toLowerCase()] = operation(route, spec)
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'podgate',
      version: options.version ?? '0.1.0',
      description: 'An OpenAI-compatible gateway in front of Runpod Serverless vLLM endpoints.',
    },
    paths,
    components: {
      schemas: { ...requestSchemas(), ...RESPONSE_SCHEMAS },
      securitySchemes: {
        apiKey: { type: 'http', scheme: 'bearer', description: 'A podgate credential: a secret key (`pg_sk_...`), a publishable key (`pg_pk_...`) or a minted token (`pg_tk_...`).' },
        adminToken: { type: 'http', scheme: 'bearer', description: 'The operator\'s admin token.' },
        accessToken: { type: 'apiKey', in: 'query', name: 'access_token', description: 'A minted token (`pg_tk_...`) in the URL, on GET event streams only (EventSource sends no headers).' },
      },
    },
  }
}

function operation(route: RouteEntry, spec: OperationSpec | undefined): Record<string, unknown> {
  const errors = ERROR_RESPONSES[formatForPath(route.path)]
  const params: unknown[] = [...route.path.matchAll(/:([A-Za-z0-9_]+)/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }))
  if (spec?.parameters) params.push(...spec.parameters)
  if (!spec) return { operationId: operationId(route), summary: `${route.method} ${route.path}`, ...(params.length ? { parameters: params } : {}), responses: { default: errors } }
  const schema = spec.response ? { $ref: `#/components/schemas/${spec.response}` } : { type: 'object' }
  const content: Record<string, unknown> = spec.html ? { 'text/html': { schema: { type: 'string' } } } : { 'application/json': { schema } }
  if (spec.streams) content['text/event-stream'] = { schema: { type: 'string', description: spec.events ?? 'OpenAI chunks as `data:` events, ending with `data: [DONE]`.' } }
  return {
    operationId: operationId(route),
    summary: spec.summary,
    ...(spec.description ? { description: spec.description } : {}),
    tags: [spec.tag],
    security: spec.security === 'key' ? [{ apiKey: [] }, ...(spec.tokenInUrl ? [{ accessToken: [] }] : [])] : spec.security === 'admin' ? [{ adminToken: [] }] : [],
    ...(params.length ? { parameters: params } : {}),
    ...(spec.requestBody
      ? { requestBody: { required: !spec.optionalBody, content: { 'application/json': { schema: { $ref: `#/components/schemas/${spec.requestBody}` } } } } }
      : {}),
    responses: { [String(spec.status ?? 200)]: { description: spec.summary, content }, default: errors },
  }
}

function operationId(route: RouteEntry): string {
  const words = route.path.split(/[^A-Za-z0-9]+/).filter(Boolean)
  return [route.method.toLowerCase(), ...words.map((w) => w[0]!.toUpperCase() + w.slice(1))].join('')
}

/**
 * The `/openapi.json` handler for a gateway app. `servers` points at wherever the app is mounted,
 * derived from the request path, so the same document works under `/` and under `/ai`.
 *
 * @example
 * app.get('/openapi.json', openApiHandler({ routes: () => app.routes }))
 */
export function openApiHandler(options: { routes: () => readonly RouteEntry[] }) {
  let document: OpenApiDocument | undefined
  return function openApi(c: Context<GatewayEnv>): Response {
    document ??= buildOpenApiDocument({ routes: options.routes() })
    const base = c.req.path.slice(0, -'/openapi.json'.length)
    return c.json({ ...document, servers: [{ url: base || '/' }] })
  }
}
