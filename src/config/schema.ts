/**
 * The zod schemas of podgate's configuration: the single source of the config types.
 *
 * Parsed once at startup by `resolveConfig`; a mistake throws `ConfigError` naming the field and the fix.
 */
import * as z from 'zod/mini'
import { int, intIn, positiveInt } from '../zod/numbers.ts'
import { oneOf } from '../zod/one-of.ts'
import { optionalFields } from '../zod/optional-fields.ts'
import { recordOf } from '../zod/records.ts'
import { refine } from '../zod/refine.ts'
import { union } from '../zod/union.ts'
import { withDefault, withFieldDefaults } from '../zod/with-default.ts'
import { quotaPolicySchema, quotaStoreKindSchema } from '../quota/policy.ts'
import { cacheConfigSchema, modelCacheSchema } from '../cache/config.ts'
import { optional } from '../zod/optional.ts'
import { strictObject } from '../zod/object.ts'
import { boolean, number, string } from '../zod/scalars.ts'
import { gt, maxLength, maximum, minLength, minimum, positive } from '../zod/bounds.ts'
import { array } from '../zod/array.ts'

/** Runpod endpoint ids are lowercase alphanumerics (runpod-api.md §1). */
export const ENDPOINT_ID_PATTERN = /^[a-z0-9]{1,64}$/

/** Model aliases: what callers send as `model` and what appears in `/v2/{model}/...` paths. */
export const MODEL_ALIAS_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/

export const upstreamModeSchema = oneOf(['openai', 'native'])

/** `localhost`, 127.0.0.0/8 or `[::1]`: plain http there never leaves the machine. */
function isLoopbackUrl(url: string): boolean {
  const host = new URL(url).hostname
  return host === 'localhost' || host.endsWith('.localhost') || host === '[::1]' || /^127(\.\d{1,3}){3}$/.test(host)
}

export type UpstreamMode = z.infer<typeof upstreamModeSchema>

/** Sampling parameters in worker-vllm's names (runpod-api.md §2); used for per-model defaults. */
export const samplingDefaultsSchema = strictObject(
  optionalFields({
    temperature: number().check(minimum(0)),
    top_p: number().check(gt(0), maximum(1)),
    top_k: number().check(int(), minimum(-1)),
    min_p: number().check(minimum(0), maximum(1)),
    max_tokens: positiveInt(),
    min_tokens: number().check(int(), minimum(0)),
    presence_penalty: number().check(minimum(-2), maximum(2)),
    frequency_penalty: number().check(minimum(-2), maximum(2)),
    repetition_penalty: number().check(gt(0)),
    seed: number().check(int()),
    stop: union([string(), array(string()).check(maxLength(16))]),
  }),
)
export type SamplingDefaults = z.infer<typeof samplingDefaultsSchema>

/** An absolute http(s) URL a credential may be sent to: plain `http://` only to loopback. */
const httpUrl = string().check(
  // `abort`: the loopback test below parses the URL, so it runs only on one that parsed.
  // No query, fragment or space: the job API's paths (`/run`, `/stream/{id}`) are appended to it. A scheme is case-insensitive.
  refine((u: string) => /^https?:\/\/[^?#\s]*$/i.test(u) && URL.canParse(u), 'must be an absolute http(s) URL, with no query or fragment', true),
  refine(
    (u: string) => /^https:/i.test(u) || isLoopbackUrl(u),
    'uses plain http:// to a host that is not loopback: use https://, or http://127.0.0.1 / http://localhost for a local server',
  ),
)

const endpointBase = {
  /** `openai` uses Runpod's `/openai/v1/*` route; `native` uses `/run` + `/stream/{id}` and `/runsync`. Default: the model's `mode`, else `openai`. */
  mode: optional(upstreamModeSchema),
  /** Relative share of traffic among a model's endpoints. Default 1. */
  weight: withDefault(number().check(positive()), 1),
}

export const endpointSchema = union([
  strictObject({
    /** A Runpod Serverless endpoint id, e.g. `abc123xyz`. */
    endpointId: string().check(refine((id: string) => ENDPOINT_ID_PATTERN.test(id), 'must be a Runpod endpoint id: lowercase letters and digits only')),
    ...endpointBase,
  }),
  strictObject({
    /** A full base URL for a job API, e.g. `http://127.0.0.1:8000` (runpod-python's local server). Plain `http://` only to loopback. */
    url: httpUrl,
    /** The bearer sent to this URL (a secret: pass it from your environment). Default: none. The Runpod key is never sent to a `url:` endpoint unless given here. */
    apiKey: optional(string().check(minLength(1, { message: 'is empty: set the secret it is read from' }))),
    ...endpointBase,
  }),
])
export type EndpointInput = z.input<typeof endpointSchema>

/** How a model's requests survive upstream failures (docs/failure-behaviour.md). */
export const resilienceSchema = strictObject({
  /** Attempts before the first byte, across the model's endpoints. */
  retries: withFieldDefaults(
    strictObject({
      /** Tries in all, the first included. Default 3. */
      attempts: withDefault(intIn(1, 10), 3),
      /** First backoff ceiling; each retry doubles it (full jitter). Default 200. */
      baseDelayMs: withDefault(intIn(0, 60_000), 200),
      /** Largest backoff. Default 2000. */
      maxDelayMs: withDefault(intIn(0, 300_000), 2_000),
      /** No retry starts later than this after the request began; a longer `Retry-After` is not waited for. Default 10000. */
      budgetMs: withDefault(intIn(0, 600_000), 10_000),
    }),
  ),
  /** Native streams: how long podgate holds the response for a first token before a hedge (or an early 200 with keep-alives). Default 10000. */
  ttftBudgetMs: withDefault(intIn(0, 600_000), 10_000),
  /** Native streams: past `ttftBudgetMs` with the job still queued, start the request on another endpoint too; the first to answer wins, the other is cancelled. Default false. */
  hedge: withDefault(boolean(), false),
  timeouts: withFieldDefaults(
    strictObject({
      /** No first token by then: cancel upstream, 504 (or an SSE error once the stream is open). Default 120000. */
      firstTokenMs: withDefault(positiveInt(3_600_000), 120_000),
      /** Longest silence between chunks once output began. Default 60000. */
      idleMs: withDefault(positiveInt(3_600_000), 60_000),
      /** Longest call in all, retries and their backoff included. Default 600000. */
      totalMs: withDefault(positiveInt(3_600_000), 600_000),
    }),
  ),
  /** Per-isolate circuit breaker per endpoint. */
  breaker: withFieldDefaults(
    strictObject({
      /** Consecutive failures that open the breaker. Default 3. */
      failures: withDefault(intIn(1, 100), 3),
      /** How long an open endpoint is skipped. Default 30000. */
      cooldownMs: withDefault(intIn(0, 3_600_000), 30_000),
    }),
  ),
})
export type ResilienceConfig = z.output<typeof resilienceSchema>

export const modelSchema = strictObject({
  /** One or more endpoints that serve this model. */
  endpoints: array(endpointSchema).check(minLength(1, { message: 'needs at least one endpoint' }), maxLength(16)),
  /** Default upstream mode for endpoints that do not set one. Default `openai`. */
  mode: withDefault(upstreamModeSchema, 'openai'),
  /** The model name vLLM serves (sent upstream as `model` on the OpenAI route). Default: the alias. */
  servedModelName: optional(string().check(minLength(1), maxLength(256))),
  /** Default sampling parameters, applied where the caller sends none. */
  defaults: withDefault(samplingDefaultsSchema, {}),
  /** Largest `max_tokens` a caller may ask for; larger asks get a 400. Default 4096. */
  maxTokensCap: withDefault(positiveInt(), 4096),
  /** `max_tokens` used when the caller sends none. Default: `defaults.max_tokens`, else 512 (never above the cap). */
  defaultMaxTokens: optional(positiveInt()),
  /** Largest `n` a caller may ask for. Default 4. */
  maxChoices: withDefault(positiveInt(16), 4),
  /** `chat` models accept `messages` (`/chat/completions`), `completion` models `prompt` (`/completions`), `embedding` models `input` (`/embeddings`); all three by default (vLLM refuses what the served model cannot do). */
  kinds: withDefault(array(oneOf(['chat', 'completion', 'embedding'])).check(minLength(1)), ['chat', 'completion', 'embedding']),
  /** Native surface (`/v2/{model}/run`): send the job `input` unchanged, for handlers other than worker-vllm. Default false: the input must be worker-vllm's and is normalized and capped. */
  passthrough: withDefault(boolean(), false),
  /** Retries, failover, cold-start hedging, timeouts and breaker. Default: see `resilienceSchema`. */
  resilience: withFieldDefaults(resilienceSchema),
  /** Default quota limits when this model is called (above `quota.defaults`, below a key's own). Default: none. */
  quota: optional(quotaPolicySchema),
  /** This model's cache settings (docs/caching.md). Default: the gateway's `cache`. */
  cache: optional(modelCacheSchema),
})
export type ModelInput = z.input<typeof modelSchema>

export const quotaConfigSchema = strictObject({
  /** Limits for every key that sets none of its own (the lowest layer). Default: none. */
  defaults: optional(quotaPolicySchema),
  /** Store for policies that do not set `strict`: `kv` (approximate) or `strict` (a Durable Object per key). Default `kv`. */
  store: withDefault(quotaStoreKindSchema, 'kv'),
  /** KV store: least time between writes of one isolate's counters, and how long a listed total is reused, in ms. Default 1000. */
  flushIntervalMs: withDefault(intIn(1000, 60_000), 1000),
})

export const gatewayOptionsSchema = strictObject({
  /** Model alias -> model config. At least one. */
  models: recordOf(modelSchema).check(refine((m: object) => Object.keys(m).length > 0, 'needs at least one model')),
  runpod: strictObject({
    /** The Runpod API key. Sent only in the `Authorization` header upstream, never logged or returned. */
    apiKey: string().check(minLength(1, { message: 'is empty: set the RUNPOD_API_KEY secret' })),
    /** Base URL of Runpod's endpoint API, which gets the Runpod key: https, or plain http to loopback (the emulator). Default `https://api.runpod.ai/v2`. */
    baseUrl: withDefault(httpUrl, 'https://api.runpod.ai/v2'),
    /**
     * The longest wait for one try's upstream answer, in ms, in either mode: a JSON answer whole (from a
     * native endpoint: its job, `/run` to the last poll), a stream's response headers or native `/run`. A
     * retry gets it afresh; `resilience.timeouts.totalMs` bounds the whole call. Also the timeout of each
     * other upstream call (a long poll's: its `?wait=` plus a margin). Default 120000.
     */
    timeoutMs: withDefault(positiveInt(), 120_000),
    /** `?wait=` for native `/runsync`, in ms (1000..300000). Default 90000. */
    runsyncWaitMs: withDefault(intIn(1000, 300_000), 90_000),
    /** Long-poll `?wait=` sent on native `/stream/{id}`, in ms. Default 10000. */
    streamWaitMs: withDefault(intIn(0, 300_000), 10_000),
    /** Most upstream polls one job event stream (`/v2/{model}/stream/{id}` as SSE) makes before it pauses; Workers cap subrequests per request (50 Free, 10,000 Paid). Default 900. */
    maxPollsPerStream: withDefault(intIn(1, 9_000), 900),
  }),
  /** Secret for signed browser tokens and job ids (32+ chars). Default: derived from the Runpod key. */
  signingSecret: optional(string().check(minLength(32, { message: 'must be at least 32 characters: e.g. `openssl rand -hex 32`' }))),
  /** Bearer token for `/admin/*`. Admin routes answer 404 when unset. */
  adminToken: optional(string().check(minLength(16, { message: 'must be at least 16 characters' }))),
  /**
   * Largest accepted request body, in bytes. Default 10 MiB, Runpod's own limit on `/run` (20 MB on
   * `/runsync`): room for images as base64 `image_url` parts. A request holds a few times its body in the
   * isolate's memory (128 MB) while podgate parses and forwards it.
   */
  maxBodyBytes: withDefault(positiveInt(20 * 1024 * 1024), 10 * 1024 * 1024),
  /** How long a key lookup is cached in the isolate, in ms. Bounds revocation delay on top of KV's. Default 10000. */
  keyCacheTtlMs: withDefault(intIn(0, 60_000), 10_000),
  /** Short-lived browser tokens minted with `POST /v1/tokens` (docs/keys-and-browsers.md). */
  tokens: withFieldDefaults(
    strictObject({
      /** Longest lifetime a token may be minted with, in seconds. Default 3600. */
      maxTtlSeconds: withDefault(intIn(60, 86_400), 3600),
      /** Lifetime when the mint request names none, in seconds (never above the max). Default 600. */
      defaultTtlSeconds: withDefault(intIn(1, 86_400), 600),
    }),
  ),
  /** CORS on `/v1/*` and `/v2/*` (docs/keys-and-browsers.md). */
  cors: withFieldDefaults(
    strictObject({
      /** How long browsers may cache a preflight answer, in seconds. Default 600. */
      maxAgeSeconds: withDefault(intIn(0, 86_400), 600),
    }),
  ),
  /**
   * How streams from the OpenAI route are relayed (docs/passthrough.md "How streams are relayed"). A
   * stream whose bytes need no change is piped natively through workerd; one that needs a change (the
   * `model` name, the usage chunk) goes through a JavaScript relay that costs several times the CPU per chunk.
   */
  streaming: withFieldDefaults(
    strictObject({
      /** Write the caller's alias as `model` in every streamed chunk when the endpoint serves another name (`servedModelName`); false keeps that name, in live, cached and coalesced streams alike. JSON answers carry the alias either way. Default true. */
      rewriteModel: withDefault(boolean(), true),
      /** `requested`: the usage chunk (which podgate always asks vLLM for, to settle quotas) reaches only callers that asked with `stream_options.include_usage`, as in OpenAI's API. `always`: every stream ends with it. Default `requested`. */
      usage: withDefault(oneOf(['requested', 'always']), 'requested'),
    }),
  ),
  /** Serve the browser playground at `GET /playground` (a dev tool: leave it off in production). Default false. */
  playground: withDefault(boolean(), false),
  /** One `info` log line per completion call, once it settled: key, model, status, cache status, tokens, duration (docs/api.md "Errors"). Default false. */
  logCalls: withDefault(boolean(), false),
  /** Quotas (docs/quotas.md). Default: no limits unless a key or model sets some. */
  quota: optional(quotaConfigSchema),
  /** Caching of answers (docs/caching.md). Default: on for deterministic requests, per key. */
  // Every field at its default when left out.
  cache: withFieldDefaults(cacheConfigSchema),
})
export type GatewayOptionsInput = z.input<typeof gatewayOptionsSchema>
export type ResolvedOptions = z.output<typeof gatewayOptionsSchema>
export type ModelConfig = z.output<typeof modelSchema>
export type EndpointConfig = z.output<typeof endpointSchema>
