/**
 * Field descriptions of the request schemas, for the OpenAPI document only. They are registered in zod's
 * global registry (where `z.toJSONSchema` reads them) when the document is first built, so the
 * production Worker, which serves no document, does not ship their text (about 3 KB, issue 14's bundle
 * budget). A description names its field by path (`messages[].content[].type`); a path that no longer
 * exists in its schema throws when the document is built, so a stale one fails `test/openapi.test.ts`.
 * A description may carry JSON Schema keywords too, for a constraint the schema checks in code (a refine,
 * or src/zod/one-of.ts, which `z.toJSONSchema` cannot show) where zod's own would ship more code in the Worker.
 */
import * as z from 'zod/mini'
import { createKeySchema, updateKeySchema } from '../admin/keys-routes.ts'
import { mintTokenSchema, SUB_PATTERN } from '../auth/token-routes.ts'
import { purgeSchema } from '../cache/routes.ts'
import { chatCompletionRequestSchema, completionRequestSchema, embeddingRequestSchema } from '../normalize/index.ts'
import { quotaPolicySchema } from '../quota/policy.ts'

/** Path (`''` the schema itself, `a.b` a field, `a[]` an array's item) -> description, or it with JSON Schema keywords. */
type Descriptions = Record<string, string | { description: string; [keyword: string]: unknown }>

const READ_FIELDS: Descriptions = {
  model: 'The podgate model alias (or, under `/v2/<model>/openai/v1`, the served model name).',
  stream: 'Answer with server-sent events.',
  stream_options: 'Streaming options; only allowed with `stream: true`. Other members (`continuous_usage_stats`) pass through.',
  'stream_options.include_usage': 'Send a final chunk with token usage, when the upstream reports it (not a current worker-vllm\'s native shorthand stream). As in vLLM, true when left out of a `stream_options` object; null is false.',
  max_tokens: "Most tokens to generate. Capped per model; defaults to the model's configured default.",
  max_completion_tokens: 'Alias of `max_tokens`. If both are sent they must be equal.',
  n: "How many choices to generate (at most the model's `maxChoices`).",
  best_of: 'vLLM: generate this many sequences and return the best `n` (at least `n`, at most `maxChoices`). Charged in the reservation.',
  temperature: "Sampling temperature, at least 0 (podgate's only check: the endpoint's vLLM applies its own upper bound, 2 in current releases). `0` makes the answer cacheable.",
  // Checked in code (normalize/schemas.ts): integers past 2^53 arrive as the caller wrote them.
  seed: { description: 'Seed for reproducible sampling; makes the answer cacheable. Any 64-bit integer.', type: ['integer', 'null'], format: 'int64' },
  user: 'An end-user identifier. Forwarded; never part of a cache key.',
}

const MESSAGES: Descriptions = {
  messages: 'The conversation so far.',
  'messages[]': 'A message, forwarded unchanged (`tool_calls`, `tool_call_id`, `name`, `reasoning` included).',
  'messages[].role': "Any role the model's chat template knows: system, developer, user, assistant, tool, ...",
  'messages[].content': 'A string, content parts, or null (an assistant message with `tool_calls`).',
  'messages[].content[]': 'A content part, forwarded unchanged.',
  'messages[].content[].type': '`text`, `image_url`, `input_audio`, `audio_url`, `video_url`, ... : any type vLLM serves (vLLM infers it when left out).',
}

const TEXT_OR_TOKENS = (what: string) => `The ${what}: a string, strings, token ids, or arrays of token ids.`

const KEY_SCOPE: Descriptions = {
  name: 'A label for people: who or what uses the key.',
  models: 'Model aliases the key may use; null for all.',
  origins: 'Browser origins the key may be used from, e.g. https://app.example.com.',
  metadata: { description: 'Free-form string pairs for the operator.', maxProperties: 50, propertyNames: { type: 'string', maxLength: 64 } },
  quota: 'Limits for this key; null for the gateway defaults.',
  expiresAt: 'When the key stops working, in ms since the epoch; null for never.',
}

const SCHEMAS: Array<[z.ZodMiniType, Descriptions]> = [
  [chatCompletionRequestSchema, { '': 'An OpenAI chat completion request. Fields podgate does not read are forwarded unchanged.', ...READ_FIELDS, ...MESSAGES }],
  [completionRequestSchema, {
    '': "An OpenAI (legacy) text completion request: `prompt`, or vLLM's `prompt_embeds`, or both. Fields podgate does not read (`echo`, `logprobs`, `prompt_embeds`, ...) are forwarded unchanged.",
    max_tokens: "Most tokens to generate. Capped per model; defaults to the model's configured default. `0` only with `echo: true`: vLLM then scores the prompt (its logprobs) without generating.",
    prompt: TEXT_OR_TOKENS('prompt'),
  }],
  [embeddingRequestSchema, {
    '': "An OpenAI embeddings request (`input`), or vLLM's chat form (`messages`). `encoding_format`, `dimensions` and any other field are forwarded unchanged.",
    input: TEXT_OR_TOKENS('input'),
    messages: 'vLLM: chat messages to embed instead of `input` (a multimodal embedding model takes image and audio parts this way).',
  }],
  [quotaPolicySchema, {
    requestsPerMinute: 'Requests per UTC clock minute.',
    requestsPerDay: 'Requests per UTC day.',
    tokensPerMinute: 'Prompt + completion tokens per UTC clock minute.',
    tokensPerDay: 'Prompt + completion tokens per UTC day.',
    maxConcurrentStreams: 'Streams open at once.',
    controlPerMinute: 'Control calls (job status, status-sync, JSON stream polls, cancel, health, purge-queue, token minting) per UTC clock minute. Default 600.',
    strict: 'Exact enforcement on a Durable Object instead of the KV store.',
  }],
  [createKeySchema(), {
    ...KEY_SCOPE,
    kind: { description: '`secret` (pg_sk_) for servers, `publishable` (pg_pk_) for web pages.', type: 'string', enum: ['secret', 'publishable'] },
  }],
  [updateKeySchema(), KEY_SCOPE],
  [mintTokenSchema(), {
    models: "Model aliases the token may use, within the key's; omit for all of the key's.",
    origin: 'The one browser origin the token works from; omit for any.',
    ttlSeconds: "Lifetime in seconds, at most `tokens.maxTtlSeconds`; default `tokens.defaultTtlSeconds`. Never past the key's `expiresAt`.",
    quota: "Limits of the token's own, on top of the key's.",
    sub: {
      description: "The end user the token is for (your user id). Cached answers are kept per sub, so two users of one key never read each other's; without it the token shares the key's cache.",
      pattern: SUB_PATTERN.source,
    },
  }],
  [purgeSchema(), {
    model: "A model alias: purge its answers (in every scope, or in keyId's).",
    keyId: 'A key id: purge the answers cached in its scope.',
  }],
]

let registered = false

/** Registers every description once per isolate; throws on a path its schema does not have. */
export function registerDescriptions(): void {
  if (registered) return
  for (const [schema, descriptions] of SCHEMAS) {
    for (const [path, meta] of Object.entries(descriptions)) z.globalRegistry.add(at(schema, path), typeof meta === 'string' ? { description: meta } : meta)
  }
  registered = true
}

interface Node {
  _zod: { def: { type: string; shape?: Record<string, Node>; element?: Node; innerType?: Node; options?: Node[] } }
}

/** The schema at `path` in `schema`: a field is the object's own member, an item the array's element. */
function at(schema: z.ZodMiniType, path: string): z.ZodMiniType {
  let node = schema as unknown as Node
  for (const step of path === '' ? [] : path.replace(/\[\]/g, '.[]').split('.')) {
    const next = find(node, (candidate) => (step === '[]' ? candidate._zod.def.element : candidate._zod.def.shape?.[step]))
    if (!next) throw new Error(`openapi descriptions: no '${path}' in its schema (at '${step}')`)
    node = next
  }
  return node as unknown as z.ZodMiniType
}

/** `pick` of `node`, or of what it wraps (optional, nullable, default, a union's options), breadth first. */
function find(node: Node, pick: (candidate: Node) => Node | undefined): Node | undefined {
  const queue = [node]
  for (let candidate = queue.shift(); candidate; candidate = queue.shift()) {
    const found = pick(candidate)
    if (found) return found
    const { innerType, options } = candidate._zod.def
    if (innerType) queue.push(innerType)
    if (options) queue.push(...options)
  }
  return undefined
}
