/**
 * `GET /openapi.json`: a valid-looking OpenAPI 3.1 document that lists every route the gateway mounts,
 * with request bodies generated from the zod schemas that validate them. Also: the playground route is
 * mounted only when the `playground` option is on, and neither is mounted unless passed in as `extras`
 * (the production Worker leaves both out of its bundle).
 */
import { Hono } from 'hono'
import { describe, expect, it } from 'vitest'
import * as z from 'zod'
import { chatCompletionRequestSchema, completionRequestSchema } from '../src/normalize/schemas.ts'
import { documentedRoutes, openApiHandler } from '../src/openapi/document.ts'
import { playgroundHandler } from '../src/playground/page.ts'
import type { GatewayOptions } from '../src/index.ts'
import { OPERATIONS } from '../src/openapi/operations.ts'
import { ADMIN_TOKEN, authed, chatBody, harness } from './helpers.ts'

type Doc = {
  openapi: string
  info: { title: string; version: string }
  servers: { url: string }[]
  paths: Record<string, Record<string, { operationId?: string; responses: Record<string, unknown>; parameters?: { name: string; in: string }[]; requestBody?: unknown; security?: unknown[] }>>
  components: { schemas: Record<string, Record<string, unknown>>; securitySchemes: Record<string, unknown> }
}

const extras = { openapi: openApiHandler, playground: playgroundHandler }
/** The gateway as the dev Worker builds it: with the OpenAPI and playground extras. */
const devHarness = (overrides: Partial<GatewayOptions> = {}) => harness({ extras, ...overrides })

async function fetchDoc(h = devHarness()): Promise<Doc> {
  const res = await h.fetch('/openapi.json')
  expect(res.status).toBe(200)
  expect(res.headers.get('content-type')).toContain('application/json')
  return (await res.json()) as Doc
}

function refs(value: unknown, out: string[] = []): string[] {
  if (Array.isArray(value)) for (const v of value) refs(v, out)
  else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      if (k === '$ref' && typeof v === 'string') out.push(v)
      else refs(v, out)
    }
  }
  return out
}

describe('GET /openapi.json', () => {
  it('is an OpenAPI 3.1 document, served without auth', async () => {
    const doc = await fetchDoc()
    expect(doc.openapi).toBe('3.1.0')
    expect(doc.info.title).toBe('podgate')
    expect(doc.servers).toEqual([{ url: '/' }])
    expect(Object.keys(doc.components.securitySchemes).sort()).toEqual(['accessToken', 'adminToken', 'apiKey'])
    for (const [path, item] of Object.entries(doc.paths)) {
      expect(path.startsWith('/')).toBe(true)
      expect(path).not.toMatch(/:/)
      const declared = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1])
      for (const [method, op] of Object.entries(item)) {
        expect(['get', 'post', 'put', 'patch', 'delete']).toContain(method)
        expect(Object.keys(op.responses).length).toBeGreaterThan(0)
        expect(op.operationId).toMatch(/^[a-z]+[A-Za-z0-9]*$/)
        expect((op.parameters ?? []).filter((p) => p.in === 'path').map((p) => p.name)).toEqual(declared)
      }
    }
    const operationIds = Object.values(doc.paths).flatMap((item) => Object.values(item).map((op) => op.operationId))
    expect(new Set(operationIds).size).toBe(operationIds.length)
  })

  it('lists every route the gateway mounts, each described', async () => {
    const h = devHarness({ playground: true })
    const doc = await fetchDoc(h)
    const mounted = documentedRoutes(h.app.routes)
    expect(mounted.length).toBeGreaterThanOrEqual(9)
    const undescribed = mounted.filter((r) => !OPERATIONS[`${r.method} ${r.path}`]).map((r) => `${r.method} ${r.path}`)
    expect(undescribed, 'routes without an entry in src/openapi/operations.ts').toEqual([])
    const listed = Object.entries(doc.paths).flatMap(([path, item]) => Object.keys(item).map((m) => `${m.toUpperCase()} ${path}`)).sort()
    expect(listed).toEqual(mounted.map((r) => `${r.method} ${r.path.replace(/:(\w+)/g, '{$1}')}`).sort())
    expect(listed).toContain('POST /v1/chat/completions')
    expect(listed).toContain('DELETE /admin/keys/{id}')
    expect(listed).toContain('GET /v1/models/{id}')
    expect(listed).toContain('GET /playground')
  })

  it('has no stale descriptions: every entry in operations.ts is a route some configuration mounts', () => {
    const h = devHarness({ playground: true })
    const mounted = new Set(documentedRoutes(h.app.routes).map((r) => `${r.method} ${r.path}`))
    expect(Object.keys(OPERATIONS).filter((id) => !mounted.has(id))).toEqual([])
  })

  it('request bodies are the validating zod schemas, and every $ref resolves', async () => {
    const doc = await fetchDoc()
    const { $schema: _a, ...chat } = z.toJSONSchema(chatCompletionRequestSchema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>
    const { $schema: _b, ...completion } = z.toJSONSchema(completionRequestSchema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>
    expect(doc.components.schemas.ChatCompletionRequest).toEqual(chat)
    expect(doc.components.schemas.CompletionRequest).toEqual(completion)
    const chatSchema = doc.components.schemas.ChatCompletionRequest as { required: string[]; properties: Record<string, unknown> }
    expect(chatSchema.required).toEqual(expect.arrayContaining(['model', 'messages']))
    expect(JSON.stringify(chatSchema.properties.max_tokens)).toContain('"minimum":1')
    const op = doc.paths['/v1/chat/completions']?.post
    expect(op?.requestBody).toEqual({ required: true, content: { 'application/json': { schema: { $ref: '#/components/schemas/ChatCompletionRequest' } } } })
    expect(op?.security).toEqual([{ apiKey: [] }])
    // Every field of a mint is optional, so is its body.
    expect(doc.paths['/v1/tokens']?.post?.requestBody).toMatchObject({ required: false })
    expect(doc.paths['/admin/keys']?.post?.security).toEqual([{ adminToken: [] }])
    expect(doc.paths['/healthz']?.get?.security).toEqual([])
    for (const ref of refs(doc)) {
      const name = ref.replace('#/components/schemas/', '')
      expect(ref.startsWith('#/components/schemas/') && doc.components.schemas[name], `unresolved ${ref}`).toBeTruthy()
    }
  })

  it('describes the fields (src/openapi/descriptions.ts), nested ones and shared schemas included', async () => {
    const doc = await fetchDoc()
    const schemas = doc.components.schemas as Record<string, unknown>
    const chat = JSON.stringify(schemas.ChatCompletionRequest)
    expect(chat).toContain('An OpenAI chat completion request.')
    expect(chat).toContain('Answer with server-sent events.')
    expect(chat).toContain('Send a final chunk with token usage')
    expect(chat).toContain('A message, forwarded unchanged')
    expect(chat).toContain('any type vLLM serves')
    expect(JSON.stringify(schemas.CompletionRequest)).toContain('`0` only with `echo: true`')
    // An answer whose upstream reported no usage carries `usage: null` (a current worker's native shorthand).
    for (const answer of ['ChatCompletion', 'Completion']) {
      expect((schemas[answer] as { properties: { usage: unknown } }).properties.usage).toEqual({ oneOf: [{ $ref: '#/components/schemas/Usage' }, { type: 'null' }] })
    }
    expect(JSON.stringify(schemas)).toContain('Requests per UTC clock minute.')
    // Constraints the schemas check in code (a refine, oneOf) are shown as JSON Schema keywords all the same.
    const properties = (name: string) => (schemas[name] as { properties: Record<string, Record<string, unknown>> }).properties
    expect(properties('CreateKeyRequest').kind).toMatchObject({ type: 'string', enum: ['secret', 'publishable'], default: 'secret' })
    expect(properties('MintTokenRequest').sub).toMatchObject({ type: 'string', pattern: '^[\\x21-\\x7e]{1,128}$' })
    expect(properties('ChatCompletionRequest').seed).toMatchObject({ type: ['integer', 'null'], format: 'int64' })
    for (const name of ['CreateKeyRequest', 'UpdateKeyRequest']) {
      expect(properties(name).metadata).toMatchObject({ type: 'object', propertyNames: { type: 'string', maxLength: 64 }, additionalProperties: { type: 'string', maxLength: 512 } })
    }
  })

  it('the documented request schema accepts what the gateway accepts and rejects what it rejects', async () => {
    const h = devHarness()
    const { key } = await h.createKey()
    const ok = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'hi', { max_tokens: 1 })))
    expect(ok.status).toBe(200)
    const bad = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', 'hi', { max_tokens: 0 })))
    expect(bad.status).toBe(400)
    expect(chatCompletionRequestSchema.safeParse(JSON.parse(chatBody('chat-openai', 'hi', { max_tokens: 0 }))).success).toBe(false)
    expect(chatCompletionRequestSchema.safeParse(JSON.parse(chatBody('chat-openai', 'hi', { max_tokens: 1 }))).success).toBe(true)
  })

  it("documents the native job body's bounds and null-only fields as the route checks them", async () => {
    const h = devHarness()
    const { key } = await h.createKey()
    const doc = (await (await h.fetch('/openapi.json')).json()) as { components: { schemas: Record<string, { properties: Record<string, { type?: string; properties?: Record<string, { minimum?: number; maximum?: number }> }> }> } }
    const run = doc.components.schemas.NativeRunRequest!.properties
    const status = async (body: object) => (await h.fetch('/v2/chat-classic/run', authed(key, JSON.stringify({ input: { prompt: 'hi' }, ...body })))).status
    for (const name of ['webhook', 'webhookV2', 's3Config']) {
      expect(run[name]?.type).toBe('null')
      expect(await status({ [name]: null })).toBe(200)
      expect(await status({ [name]: 'https://example.com/hook' })).toBe(400)
    }
    for (const field of ['executionTimeout', 'ttl']) {
      const { minimum, maximum } = run.policy!.properties![field]!
      expect(await status({ policy: { [field]: minimum } })).toBe(200)
      expect(await status({ policy: { [field]: minimum! - 1 } })).toBe(400)
      expect(await status({ policy: { [field]: maximum! + 1 } })).toBe(400)
    }
  })

  // Found in review: KeyRecord typed the record's times as strings (they are ms numbers) and left out
  // kind, origins, quota, updatedAt and expiresAt; Token left out the mint answer's quota and sub.
  it('the documented answers are what podgate sends: key records (created, listed, revoked) and a minted token', async () => {
    const h = devHarness()
    const doc = await fetchDoc(h)
    // The document's schema with its $refs inlined, as zod reads it; every field sent must be documented.
    const inline = (value: unknown): unknown => {
      if (Array.isArray(value)) return value.map(inline)
      if (!value || typeof value !== 'object') return value
      const { $ref, ...rest } = value as Record<string, unknown>
      if (typeof $ref === 'string') return inline(doc.components.schemas[$ref.replace('#/components/schemas/', '')])
      return Object.fromEntries(Object.entries(rest).map(([k, v]) => [k, inline(v)]))
    }
    const documented = (name: string, answer: Record<string, unknown>) => {
      const schema = inline(doc.components.schemas[name]) as { properties?: Record<string, unknown>; allOf?: { properties?: Record<string, unknown> }[] }
      const fields = new Set(Object.keys({ ...schema.properties, ...Object.assign({}, ...(schema.allOf ?? []).map((s) => s.properties)) }))
      expect(Object.keys(answer).filter((field) => !fields.has(field)), `${name}: fields sent but not documented`).toEqual([])
      const parsed = z.fromJSONSchema(schema as z.core.JSONSchema.JSONSchema).safeParse(answer)
      expect(parsed.success, `${name}: ${JSON.stringify(parsed.error?.issues)}`).toBe(true)
    }
    const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }
    const created = (await (await h.fetch('/admin/keys', { method: 'POST', headers: admin, body: JSON.stringify({ name: 'doc', origins: ['https://app.example.com'], quota: { requestsPerMinute: 5 }, expiresAt: Date.now() + 86_400_000 }) })).json()) as { id: string; key: string } & Record<string, unknown>
    documented('CreatedKey', created)
    const minted = await h.fetch('/v1/tokens', authed(created.key, JSON.stringify({ sub: 'user-1', quota: { requestsPerMinute: 2 }, origin: 'https://app.example.com' })))
    expect(minted.status).toBe(201)
    documented('Token', (await minted.json()) as Record<string, unknown>)
    const listed = (await (await h.fetch('/admin/keys', { headers: admin })).json()) as Record<string, unknown>
    documented('KeyList', listed)
    documented('KeyRecord', (await (await h.fetch(`/admin/keys/${created.id}`, { headers: admin })).json()) as Record<string, unknown>)
    documented('KeyRecord', (await (await h.fetch(`/admin/keys/${created.id}`, { method: 'DELETE', headers: admin })).json()) as Record<string, unknown>)
  })

  // Found in review: every operation's errors were documented in OpenAI's shape, but the native job
  // routes answer Runpod's ({"error": "<message>", "code"}) and the Anthropic route Anthropic's.
  it("documents each route's errors in the shape that route answers them", async () => {
    const h = devHarness()
    const doc = await fetchDoc(h)
    const checked = new Set<string>()
    for (const [path, ops] of Object.entries(doc.paths)) {
      if (!path.startsWith('/v1/') && !path.startsWith('/v2/')) continue
      for (const [method, op] of Object.entries(ops)) {
        const ref = ((op.responses.default as { content: Record<string, { schema: { $ref: string } }> }).content['application/json']!.schema.$ref)
        const schema = doc.components.schemas[ref.replace('#/components/schemas/', '')]!
        // No credential: a 401 in the route's own error format.
        const res = await h.fetch(path.replace('{model}', 'chat-classic').replace('{id}', 'abc'), { method: method.toUpperCase() })
        expect(res.status, `${method} ${path}`).toBe(401)
        const parsed = z.fromJSONSchema(schema as z.core.JSONSchema.JSONSchema).safeParse(await res.json())
        expect(parsed.success, `${method} ${path}: ${JSON.stringify(parsed.error?.issues)}`).toBe(true)
        checked.add(ref)
      }
    }
    expect(checked.size).toBe(3)
  })

  // Found in review: every streaming operation's text/event-stream was described as OpenAI chunks ending
  // with `data: [DONE]`, the job event stream and vLLM's passed-through streams (Anthropic's events) included.
  it('describes each event stream as the route writes it', async () => {
    const h = devHarness()
    const doc = await fetchDoc(h)
    const events = (path: string, method: string) =>
      ((doc.paths[path]?.[method] as { responses: Record<string, { content?: Record<string, { schema: { description: string } }> }> }).responses['200']!.content!['text/event-stream']!.schema.description)
    const { key } = await h.createKey()
    const job = (await (await h.fetch('/v2/chat-classic/run', authed(key, JSON.stringify({ input: { prompt: 'Hi', sampling_params: { max_tokens: 8 } } })))).json()) as { id: string }
    const stream = await h.fetch(`/v2/chat-classic/stream/${job.id}`, { headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream' } })
    const sent = [...(await stream.text()).matchAll(/^event: (\w+)$/gm)].map((m) => m[1]!)
    expect(sent).toEqual(expect.arrayContaining(['output', 'done']))
    for (const method of ['get', 'post']) {
      const described = events('/v2/{model}/stream/{id}', method)
      expect(described).not.toContain('[DONE]')
      for (const name of new Set(sent)) expect(described, `${method}: event ${name}`).toContain(`\`${name}\``)
    }
    // vLLM's other routes stream what the endpoint writes (Anthropic's events on /v1/messages).
    for (const path of ['/v1/messages', '/v2/{model}/openai/v1/messages']) expect(events(path, 'post')).not.toContain('[DONE]')
    expect(events('/v1/chat/completions', 'post')).toContain('data: [DONE]')
  })

  // Found in review: the routes' query parameters (and the job stream's Last-Event-ID) were in no
  // operation's parameters, so a client generated from the document could not send them.
  it('declares the query parameters and headers the routes read', async () => {
    const h = devHarness()
    const doc = await fetchDoc(h)
    const declared = (path: string, method: string) => (doc.paths[path]?.[method]?.parameters ?? []).filter((p) => p.in !== 'path').map((p) => `${p.in}:${p.name}`)
    const { key } = await h.createKey()
    // Each is read by its route: a malformed value is refused by name.
    for (const method of ['GET', 'POST']) {
      const res = await h.fetch('/v2/chat-classic/status-sync/abc?wait=soon', { method, headers: { authorization: `Bearer ${key}` } })
      expect(((await res.json()) as { error: string }).error).toMatch(/'wait' must be/)
      expect(declared('/v2/{model}/status-sync/{id}', method.toLowerCase())).toEqual(['query:wait'])
    }
    const resumed = await h.fetch('/v2/chat-classic/stream/abc', { headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream', 'last-event-id': 'x' } })
    expect(((await resumed.json()) as { error: string }).error).toMatch(/Last-Event-ID must be/)
    expect(declared('/v2/{model}/stream/{id}', 'get')).toEqual(['query:access_token', 'query:detach', 'header:Last-Event-ID'])
    expect(declared('/v2/{model}/stream/{id}', 'post')).toEqual(['query:detach', 'header:Last-Event-ID'])
    const admin = { authorization: `Bearer ${ADMIN_TOKEN}` }
    expect(((await (await h.fetch('/admin/keys?limit=0', { headers: admin })).json()) as { error: { param: string } }).error.param).toBe('limit')
    expect(declared('/admin/keys', 'get')).toEqual(['query:limit', 'query:cursor'])
    // A minted token is accepted in the URL there only, with the stream's own security.
    expect(doc.paths['/v2/{model}/stream/{id}']?.get?.security).toEqual([{ apiKey: [] }, { accessToken: [] }])
    expect(doc.components.securitySchemes.accessToken).toMatchObject({ type: 'apiKey', in: 'query', name: 'access_token' })
  })

  it('names the mount point in servers when podgate is mounted under a prefix', async () => {
    const h = devHarness()
    const host = new Hono().route('/ai', h.app)
    const res = await host.request('/ai/openapi.json')
    expect(res.status).toBe(200)
    const doc = (await res.json()) as Doc
    expect(doc.servers).toEqual([{ url: '/ai' }])
    expect(doc.paths['/v1/models']).toBeDefined()
  })
})

describe('GET /playground', () => {
  it('is not mounted unless the playground option is on', async () => {
    const res = await devHarness().fetch('/playground')
    expect(res.status).toBe(404)
  })

  it('neither dev tool is mounted without extras (the production Worker), and playground: true without the page fails at startup', async () => {
    expect((await harness().fetch('/openapi.json')).status).toBe(404)
    expect(() => harness({ playground: true })).toThrow(/extras: \{ playground: playgroundHandler \}/)
  })

  it('serves one self-contained HTML page whose CSP allows only its own script', async () => {
    const res = await devHarness({ playground: true }).fetch('/playground')
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8')
    const csp = res.headers.get('content-security-policy') ?? ''
    expect(csp).toMatch(/script-src 'sha256-[A-Za-z0-9+/]+=*'/)
    expect(csp).toContain("connect-src 'self'")
    const html = await res.text()
    const script = /<script>([\s\S]*)<\/script>/.exec(html)?.[1] ?? ''
    const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(script))
    expect(csp).toContain(`'sha256-${btoa(String.fromCharCode(...new Uint8Array(digest)))}'`)
    expect(html).not.toMatch(/src=["']https?:/)
  })
})
