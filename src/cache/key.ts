/**
 * The canonical cache key: model alias + kind + every field podgate forwards (tools, tool_choice,
 * response_format, logprobs, template kwargs, content parts, unknown fields: the whole body), as stable
 * JSON, hashed with SHA-256. How the answer is delivered (`stream`, `stream_options`) and who asked
 * (`user`) are left out, so one entry serves every form of the same question (but see `cacheKey` for
 * the bodies whose forms differ, and streams with usage on every chunk). The scope and the purge
 * generation are folded in, so entries never cross scopes and a purge changes every key at once.
 */
import { sha256Hex } from '../crypto/sha256.ts'
import { invalidRequest } from '../errors/index.ts'
import { isRawJSON } from '../http/body.ts'
import { FRAMING_FIELDS } from '../normalize/reads.ts'
import type { NormalizedRequest } from '../normalize/types.ts'

/** The KV prefix of one scope's entries, or of one model's entries within a scope. */
export function kvPrefix(scope: string, model?: string): string {
  return model === undefined ? `cache:${scope}:` : `cache:${scope}:${model}:`
}

export interface CacheKeyInput {
  request: NormalizedRequest
  /** `key:<keyId>` or `shared`: whose entries these are. */
  scope: string
  /** The purge generation of this model and scope (see `GenerationCache`). */
  generation: string
}

export interface CacheKey {
  /** Hex SHA-256 of the canonical request. */
  hash: string
  /** The KV key: `cache:<scope>:<model>:<hash>`, so a scope (or scope + model) is one list prefix. */
  kvKey: string
  /** A synthetic URL for the Cache API, which keys by URL. */
  url: string
}

const MAX_DEPTH = 1000

/**
 * @example
 * const key = await cacheKey({ request: ctx.request, scope: 'key:key_abc', generation: '0.0.0' })
 */
export async function cacheKey(input: CacheKeyInput): Promise<CacheKey> {
  const { request, scope, generation } = input
  const canonical = stableJson({
    v: 2,
    scope,
    generation,
    model: request.model,
    kind: request.kind,
    body: keyedFields(request.body),
    // The two forms of an answer differ in more than their framing when the body asks for prompt logprobs
    // (a JSON answer holds them, vLLM refuses them in a stream) or token ids (`return_token_ids`: the
    // prompt's ids at the top of a JSON body, on a stream's first chunks): then the forms never share an
    // entry, and each replays exactly what it recorded (left out otherwise, so other keys are unchanged).
    stream: request.stream && (request.body.prompt_logprobs != null || request.body.return_token_ids) ? true : undefined,
    // vLLM puts usage on every chunk of a stream that asks for it (podgate forwards the switch only when
    // usage is asked for, as vLLM honours it; vLLM reads any value but false and null as yes): such streams keep entries of
    // their own, so the others never get that usage and they always get it (a falsy value, or none, keys
    // as absent, so other keys are unchanged).
    continuous: (request.includeUsage && (request.body.stream_options as { continuous_usage_stats?: unknown } | undefined)?.continuous_usage_stats) || undefined,
  })
  const hash = await sha256Hex(canonical)
  const model = encodeURIComponent(request.model)
  return { hash, kvKey: `${kvPrefix(scope, request.model)}${hash}`, url: `https://podgate-cache.invalid/${encodeURIComponent(scope)}/${model}/${hash}` }
}

const FRAMING: ReadonlySet<string> = new Set(FRAMING_FIELDS)

/** The forwarded body without its framing fields; `model` is the alias (the served name is config). */
function keyedFields(body: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const [name, value] of Object.entries(body)) if (!FRAMING.has(name) && name !== 'model') out[name] = value
  return out
}

/**
 * JSON with object keys sorted at every level and `undefined` members left out. A value nested deeper
 * than MAX_DEPTH is the caller's error (400), not a stack overflow (500). vLLM's server parses bodies
 * with Python's `json`, which gives up before that depth (Python's recursion limit, 1000 frames), so no
 * request an endpoint could serve is refused.
 */
export function stableJson(value: unknown, depth = 0): string {
  // A wide integer the body reader kept raw (http/body.ts) keys as its digits, as it goes upstream; an
  // undefined array item writes null, as JSON.stringify does.
  if (value === null || typeof value !== 'object' || isRawJSON(value)) return JSON.stringify(value) ?? 'null'
  if (depth >= MAX_DEPTH) throw invalidRequest(`JSON nested over ${MAX_DEPTH} levels deep.`)
  if (Array.isArray(value)) return `[${value.map((item) => stableJson(item, depth + 1)).join(',')}]`
  const record = value as Record<string, unknown>
  const members: string[] = []
  for (const name of Object.keys(record).sort()) {
    const member = record[name]
    if (member !== undefined) members.push(`${JSON.stringify(name)}:${stableJson(member, depth + 1)}`)
  }
  return `{${members.join(',')}}`
}
