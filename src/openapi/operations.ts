/**
 * What each podgate route does, for the OpenAPI document: one entry per `METHOD /path` (Hono path
 * syntax, relative to where the gateway is mounted). Request bodies are JSON Schemas generated from the
 * same zod schemas that validate requests, so the document cannot drift from what podgate accepts.
 *
 * A route mounted in `createGateway` without an entry here is still listed (the document is built from
 * the app's own route table) but `test/openapi.test.ts` fails until it is described.
 */
import * as z from 'zod/mini'
import { createKeySchema, updateKeySchema } from '../admin/keys-routes.ts'
import { mintTokenSchema } from '../auth/token-routes.ts'
import { purgeSchema } from '../cache/routes.ts'
import { chatCompletionRequestSchema, completionRequestSchema, embeddingRequestSchema } from '../normalize/schemas.ts'
import { VLLM_ROUTES } from '../normalize/route.ts'

export type Security = 'key' | 'admin' | 'none'

export interface OperationSpec {
  summary: string
  description?: string
  tag: 'OpenAI' | 'Admin' | 'Meta' | 'Runpod native' | 'Auth' | 'Usage'
  security: Security
  /** Name of a request-body schema in `components.schemas`. */
  requestBody?: string
  /** The body may be left out (every field of it is optional). */
  optionalBody?: boolean
  /** Name of the 2xx response schema in `components.schemas`; a bare object when unset. */
  response?: string
  /** HTTP status of success. Default 200. */
  status?: number
  /** The operation may answer with `text/event-stream` when the body asks for `stream: true`. */
  streams?: boolean
  /** What that event stream carries. Default: OpenAI chunks as `data:` events, ending with `data: [DONE]`. */
  events?: string
  /** Query parameters and headers the route reads (path parameters come from the path). */
  parameters?: Parameter[]
  /** A minted token may also come as `?access_token=` (the `accessToken` scheme). */
  tokenInUrl?: boolean
  /** The success body is `text/html`. */
  html?: boolean
}

/** A query parameter or header of an operation, as OpenAPI writes it. */
export interface Parameter {
  name: string
  in: 'query' | 'header'
  description: string
  schema: Record<string, unknown>
}

const WAIT: Parameter = { name: 'wait', in: 'query', description: 'How long to wait for the job to finish, in ms (clamped to Runpod\'s bounds); default `runpod.runsyncWaitMs`.', schema: { type: 'string', pattern: '^[0-9]+$' } }
const DETACH: Parameter = { name: 'detach', in: 'query', description: '`true`: an event stream whose caller leaves does not cancel the job.', schema: { type: 'string', enum: ['true', 'false'] } }
const LAST_EVENT_ID: Parameter = { name: 'Last-Event-ID', in: 'header', description: 'Resume an event stream after the `output` events already received (EventSource sends it).', schema: { type: 'string', pattern: '^[0-9]{1,9}$' } }
const ACCESS_TOKEN: Parameter = { name: 'access_token', in: 'query', description: 'A minted token (pg_tk_), for EventSource, which sends no headers; only with `Accept: text/event-stream`. Never a key.', schema: { type: 'string' } }

/** The job event stream (src/native-surface/job-events.ts, docs/native-surface.md). */
const JOB_EVENTS =
  'Job events with `Accept: text/event-stream`: `status` on each state change, `output` per stream item (`id:` the items sent so far, for `Last-Event-ID`), then `done` or `error` (last), or `pause` (reconnect to resume).'

export const OPERATIONS: Record<string, OperationSpec> = {
  'GET /healthz': { summary: 'Liveness', tag: 'Meta', security: 'none', response: 'Health' },
  'GET /openapi.json': { summary: 'This OpenAPI 3.1 document', tag: 'Meta', security: 'none' },
  'GET /playground': { summary: 'The browser playground (only when the `playground` option is on)', tag: 'Meta', security: 'none', html: true },
  'POST /v1/chat/completions': {
    summary: 'Create a chat completion',
    description: 'OpenAI-compatible. `stream: true` answers with Server-Sent Events; `stream_options.include_usage` adds a usage chunk.',
    tag: 'OpenAI',
    security: 'key',
    requestBody: 'ChatCompletionRequest',
    response: 'ChatCompletion',
    streams: true,
  },
  'POST /v1/completions': {
    summary: 'Create a completion from a raw prompt',
    tag: 'OpenAI',
    security: 'key',
    requestBody: 'CompletionRequest',
    response: 'Completion',
    streams: true,
  },
  'POST /v1/embeddings': {
    summary: 'Create embeddings',
    description: 'OpenAI-compatible; `encoding_format`, `dimensions` and any other field pass through to the endpoint.',
    tag: 'OpenAI',
    security: 'key',
    requestBody: 'EmbeddingRequest',
  },
  'GET /v1/models': { summary: 'List the models this key may use', tag: 'OpenAI', security: 'key', response: 'ModelList' },
  'GET /v1/models/:id': { summary: 'One model this key may use, as the list shows it (404 `model_not_found`, or 403 if this key may not use it)', tag: 'OpenAI', security: 'key', response: 'Model' },
  'POST /v2/:model/openai/v1/chat/completions': {
    summary: 'Create a chat completion (Runpod\'s URL shape)',
    description: 'Serves what `POST /v1/chat/completions` serves, for the model in the path. The body\'s `model` may be the alias or the served model name.',
    tag: 'OpenAI',
    security: 'key',
    requestBody: 'ChatCompletionRequest',
    response: 'ChatCompletion',
    streams: true,
  },
  'POST /v2/:model/openai/v1/completions': { summary: 'Create a completion (Runpod\'s URL shape)', tag: 'OpenAI', security: 'key', requestBody: 'CompletionRequest', response: 'Completion', streams: true },
  'POST /v2/:model/openai/v1/embeddings': { summary: 'Create embeddings (Runpod\'s URL shape)', tag: 'OpenAI', security: 'key', requestBody: 'EmbeddingRequest' },
  'GET /v2/:model/openai/v1/models': { summary: 'The model of the path (403 if this key may not use it; Runpod\'s URL shape)', tag: 'OpenAI', security: 'key', response: 'ModelList' },
  'GET /v2/:model/openai/v1/models/:id': { summary: 'The model of the path, if `id` names it (else 404; 403 if this key may not use it; Runpod\'s URL shape)', tag: 'OpenAI', security: 'key', response: 'Model' },
  'POST /v1/tokens': {
    summary: 'Mint a short-lived token from a secret key',
    description: 'For an app\'s backend: the token (pg_tk_) may be handed to a browser. Its scope can only narrow the key\'s.',
    tag: 'Auth',
    security: 'key',
    requestBody: 'MintTokenRequest',
    optionalBody: true,
    response: 'Token',
    status: 201,
  },
  'GET /v1/usage': { summary: 'Usage and remaining quota of the calling credential', tag: 'Usage', security: 'key' },
  'POST /v2/:model/run': { summary: 'Start a job (Runpod-native)', tag: 'Runpod native', security: 'key', requestBody: 'NativeRunRequest', response: 'NativeJob' },
  'POST /v2/:model/runsync': { summary: 'Run a job and wait for its result (Runpod-native)', tag: 'Runpod native', security: 'key', requestBody: 'NativeRunRequest', response: 'NativeJob' },
  'GET /v2/:model/status/:id': { summary: 'Job status and output', tag: 'Runpod native', security: 'key', response: 'NativeJob' },
  'POST /v2/:model/status/:id': { summary: 'Job status and output', tag: 'Runpod native', security: 'key', response: 'NativeJob' },
  'GET /v2/:model/status-sync/:id': { summary: 'Job status, waiting for completion', tag: 'Runpod native', security: 'key', response: 'NativeJob', parameters: [WAIT] },
  'POST /v2/:model/status-sync/:id': { summary: 'Job status, waiting for completion', tag: 'Runpod native', security: 'key', response: 'NativeJob', parameters: [WAIT] },
  'GET /v2/:model/stream/:id': {
    summary: 'Job output so far; as Server-Sent Events with `Accept: text/event-stream`',
    description: 'A minted token may be sent as `?access_token=` here (EventSource sends no headers).',
    tag: 'Runpod native',
    security: 'key',
    response: 'NativeJob',
    streams: true,
    events: JOB_EVENTS,
    parameters: [ACCESS_TOKEN, DETACH, LAST_EVENT_ID],
    tokenInUrl: true,
  },
  'POST /v2/:model/stream/:id': { summary: 'Job output so far; as Server-Sent Events with `Accept: text/event-stream`', tag: 'Runpod native', security: 'key', response: 'NativeJob', streams: true, events: JOB_EVENTS, parameters: [DETACH, LAST_EVENT_ID] },
  'POST /v2/:model/cancel/:id': { summary: 'Cancel a job', tag: 'Runpod native', security: 'key', response: 'NativeJob' },
  'POST /v2/:model/retry/:id': { summary: 'Retry a failed or timed-out job', tag: 'Runpod native', security: 'key', response: 'NativeJob' },
  'POST /v2/:model/purge-queue': { summary: 'Purge the queue (refused: podgate shares endpoints between keys)', tag: 'Runpod native', security: 'key' },
  'GET /v2/:model/health': { summary: 'Endpoint health (workers and jobs)', tag: 'Runpod native', security: 'key' },
  'POST /admin/keys': { summary: 'Create an API key (the key is shown once)', tag: 'Admin', security: 'admin', requestBody: 'CreateKeyRequest', response: 'CreatedKey', status: 201 },
  'GET /admin/keys': {
    summary: 'List key records',
    tag: 'Admin',
    security: 'admin',
    response: 'KeyList',
    parameters: [
      { name: 'limit', in: 'query', description: 'Records asked per page, 1 to 1000 (a page holds at most 300); default 100.', schema: { type: 'integer', minimum: 1, maximum: 1000 } },
      { name: 'cursor', in: 'query', description: 'The `cursor` of the previous page.', schema: { type: 'string' } },
    ],
  },
  'GET /admin/keys/:id': { summary: 'Get a key record', tag: 'Admin', security: 'admin', response: 'KeyRecord' },
  'PATCH /admin/keys/:id': { summary: 'Update a key\'s scope (models, origins, quota, expiry, metadata)', tag: 'Admin', security: 'admin', requestBody: 'UpdateKeyRequest', response: 'KeyRecord' },
  'POST /admin/keys/:id/rotate': { summary: 'Rotate a key: a new secret, same id (shown once)', tag: 'Admin', security: 'admin', response: 'CreatedKey' },
  'DELETE /admin/keys/:id': { summary: 'Revoke a key', tag: 'Admin', security: 'admin', response: 'KeyRecord' },
  'GET /admin/keys/:id/usage': { summary: 'A key\'s usage and remaining quota', tag: 'Usage', security: 'admin' },
  'POST /admin/cache/purge': { summary: 'Purge cached answers of a model and/or a key', tag: 'Admin', security: 'admin', requestBody: 'PurgeCacheRequest' },
}

// vLLM's other routes: bodies in vLLM's own formats, forwarded as written (docs/passthrough.md).
for (const [name, route] of Object.entries(VLLM_ROUTES)) {
  const description = `Forwarded to vLLM's \`${route.path}\` as written, \`model\` rewritten to the served name${route.generates ? `; \`${route.generates.maxField}\` is capped per model and set to its default when absent. \`stream: true\` answers with vLLM's Server-Sent Events` : ''}.${name.startsWith('messages') ? ' Errors use Anthropic\'s shape; the key may be sent as `x-api-key`.' : ''}`
  const events = "vLLM's own events for this route, as the endpoint writes them (Anthropic's on `/v1/messages`)."
  const spec: OperationSpec = { summary: `vLLM ${route.path}`, description, tag: 'OpenAI', security: 'key', ...(route.generates ? { streams: true, events } : {}) }
  OPERATIONS[`POST /v1/${name}`] = spec
  OPERATIONS[`POST /v2/:model/openai/v1/${name}`] = { ...spec, summary: `${spec.summary} (Runpod's URL shape)` }
}
OPERATIONS['POST /v2/rerank'] = {
  summary: 'vLLM /v2/rerank (Cohere v2)',
  description: "Forwarded to vLLM's `/v2/rerank` as written, `model` (a podgate alias) rewritten to the served name; vLLM answers it as `/v1/rerank`.",
  tag: 'OpenAI',
  security: 'key',
}
OPERATIONS['POST /v2/embed'] = {
  summary: 'vLLM /v2/embed (Cohere v2)',
  description: "Forwarded to vLLM's `/v2/embed` (vLLM since spring 2026) as written, `model` (a podgate alias) rewritten to the served name; its `max_tokens` truncates the input and is not capped.",
  tag: 'OpenAI',
  security: 'key',
}

/** JSON Schemas of request bodies, from the validating zod schemas (their input side: what callers send). */
export function requestSchemas(): Record<string, unknown> {
  const toSchema = (schema: z.core.$ZodType) => {
    const { $schema: _, ...json } = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>
    return json
  }
  return {
    ChatCompletionRequest: toSchema(chatCompletionRequestSchema),
    CompletionRequest: toSchema(completionRequestSchema),
    EmbeddingRequest: toSchema(embeddingRequestSchema),
    CreateKeyRequest: toSchema(createKeySchema()),
    UpdateKeyRequest: toSchema(updateKeySchema()),
    MintTokenRequest: toSchema(mintTokenSchema()),
    PurgeCacheRequest: toSchema(purgeSchema()),
  }
}

const usage = {
  type: 'object',
  properties: { prompt_tokens: { type: 'integer' }, completion_tokens: { type: 'integer' }, total_tokens: { type: 'integer' } },
}
/** A limit set (quota/policy.ts), as a key record or a mint answer shows it. */
const quota = { type: ['object', 'null'], additionalProperties: { type: ['integer', 'boolean'] } }
const epochMs = (description: string, nullable = false) => ({ type: nullable ? ['integer', 'null'] : 'integer', description })
const keyRecord = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    name: { type: 'string' },
    kind: { type: 'string', enum: ['secret', 'publishable'] },
    models: { type: ['array', 'null'], items: { type: 'string' } },
    origins: { type: 'array', items: { type: 'string' } },
    metadata: { type: 'object', additionalProperties: { type: 'string' } },
    quota,
    createdAt: epochMs('Epoch milliseconds.'),
    updatedAt: epochMs('Epoch milliseconds.'),
    expiresAt: epochMs('Epoch milliseconds; null for never.', true),
    revokedAt: epochMs('Epoch milliseconds; null while the key works.', true),
    hint: { type: 'string', description: 'The secret\'s first 10 characters, to recognise it.' },
    revoked: { const: true, description: 'Only on the answer to DELETE.' },
  },
  // Not `quota`: a record stored before keys had quotas has none (read as null).
  required: ['id', 'name', 'kind', 'models', 'origins', 'metadata', 'createdAt', 'updatedAt', 'expiresAt', 'revokedAt', 'hint'],
}

/** Response shapes podgate writes by hand (OpenAI's, trimmed to what podgate sends). */
export const RESPONSE_SCHEMAS: Record<string, unknown> = {
  Error: {
    type: 'object',
    properties: {
      error: {
        type: 'object',
        properties: { message: { type: 'string' }, type: { type: 'string' }, param: { type: ['string', 'null'] }, code: { type: 'string' } },
        required: ['message', 'type', 'code'],
      },
    },
    required: ['error'],
  },
  // The native job routes' errors (`/v2/{model}/run`, `status`, `stream`, ...), as Runpod words its own.
  RunpodError: {
    type: 'object',
    properties: { error: { type: 'string', description: 'The message.' }, code: { type: 'string' } },
    required: ['error', 'code'],
  },
  // `/v1/messages` (vLLM's Anthropic route): the shape Anthropic's SDKs read.
  AnthropicError: {
    type: 'object',
    properties: {
      type: { const: 'error' },
      error: { type: 'object', properties: { type: { type: 'string' }, message: { type: 'string' } }, required: ['type', 'message'] },
    },
    required: ['type', 'error'],
  },
  Health: { type: 'object', properties: { ok: { type: 'boolean' } } },
  Usage: usage,
  ChatCompletion: {
    type: 'object',
    properties: {
      id: { type: 'string' },
      object: { const: 'chat.completion' },
      created: { type: 'integer' },
      model: { type: 'string' },
      choices: {
        type: 'array',
        items: {
          type: 'object',
          properties: {
            index: { type: 'integer' },
            message: { type: 'object', properties: { role: { const: 'assistant' }, content: { type: ['string', 'null'] } } },
            finish_reason: { type: ['string', 'null'] },
          },
        },
      },
      // null when the upstream reported none (a current worker-vllm's native shorthand answer, replayed or not).
      usage: { oneOf: [{ $ref: '#/components/schemas/Usage' }, { type: 'null' }] },
    },
  },
  Completion: {
    type: 'object',
    properties: {
      id: { type: 'string' },
      object: { const: 'text_completion' },
      created: { type: 'integer' },
      model: { type: 'string' },
      choices: {
        type: 'array',
        items: { type: 'object', properties: { index: { type: 'integer' }, text: { type: 'string' }, finish_reason: { type: ['string', 'null'] } } },
      },
      // null when the upstream reported none (a current worker-vllm's native shorthand answer, replayed or not).
      usage: { oneOf: [{ $ref: '#/components/schemas/Usage' }, { type: 'null' }] },
    },
  },
  Model: { type: 'object', properties: { id: { type: 'string' }, object: { const: 'model' }, created: { type: 'integer' }, owned_by: { type: 'string' } } },
  ModelList: {
    type: 'object',
    properties: {
      object: { const: 'list' },
      data: { type: 'array', items: { $ref: '#/components/schemas/Model' } },
    },
  },
  KeyRecord: keyRecord,
  Token: {
    type: 'object',
    properties: {
      object: { const: 'token' },
      id: { type: 'string' },
      token: { type: 'string', description: 'The token (pg_tk_...): send it as `Authorization: Bearer`.' },
      keyId: { type: 'string' },
      models: { type: ['array', 'null'], items: { type: 'string' } },
      origin: { type: ['string', 'null'] },
      quota,
      sub: { type: ['string', 'null'] },
      expiresAt: epochMs('Epoch milliseconds.'),
    },
    required: ['object', 'id', 'token', 'keyId', 'models', 'origin', 'quota', 'sub', 'expiresAt'],
  },
  // The native body's zod schema is private to src/native-surface/input.ts (it validates in two steps,
  // envelope then worker-vllm input), so its outline is written here.
  NativeRunRequest: {
    type: 'object',
    properties: {
      input: { type: 'object', description: 'worker-vllm input: `messages` or `prompt`, `sampling_params`, `stream`.' },
      policy: {
        type: 'object',
        properties: {
          executionTimeout: { type: 'integer', minimum: 5_000, maximum: 604_800_000, description: 'ms' },
          ttl: { type: 'integer', minimum: 10_000, maximum: 604_800_000, description: 'ms' },
          lowPriority: { type: 'boolean' },
        },
        additionalProperties: false,
      },
      // Accepted only as null: Runpod would call them past podgate's keys and normalization.
      ...Object.fromEntries(['webhook', 'webhookV2', 's3Config'].map((name) => [name, { type: 'null', description: 'Not forwarded by podgate: follow the job with /status/{id} or /stream/{id}.' }])),
    },
    required: ['input'],
    additionalProperties: false,
  },
  NativeJob: {
    type: 'object',
    properties: { id: { type: 'string' }, status: { type: 'string' }, output: {}, error: { type: 'string' } },
  },
  CreatedKey: { allOf: [{ $ref: '#/components/schemas/KeyRecord' }, { type: 'object', properties: { key: { type: 'string', description: 'The secret key, shown only here.' } }, required: ['key'] }] },
  KeyList: { type: 'object', properties: { object: { const: 'list' }, data: { type: 'array', items: { $ref: '#/components/schemas/KeyRecord' } }, cursor: { type: ['string', 'null'] } } },
}
