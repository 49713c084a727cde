/**
 * Types of the Runpod Serverless + worker-vllm emulator: the public options and views, and the shapes
 * its modules hand each other. The wire formats themselves are described in shared/runpod-api.md.
 */

/** worker-vllm output generation: `classic` is <= v2.23 (token batches), `current` is >= v2.24 (raw SSE). */
export type WorkerGeneration = 'classic' | 'current'

/** What a request to the emulator was, as recorded in {@link EmulatorCall}. */
export type EmulatorOp =
  | 'run'
  | 'runsync'
  | 'status'
  | 'status-sync'
  | 'stream'
  | 'cancel'
  | 'retry'
  | 'purge-queue'
  | 'health'
  | 'openai'
  | 'control'
  | 'unknown'

export type JobStatus = 'IN_QUEUE' | 'IN_PROGRESS' | 'COMPLETED' | 'FAILED' | 'CANCELLED' | 'TIMED_OUT'

/** A failure to inject, per endpoint ({@link EndpointBehaviour.fault}) or per request (a directive). */
export type Fault =
  /** Answer `status` with an opaque text body to matching ops; `times` limits it to the first N matches. */
  | { kind: 'http'; status: number; times?: number; ops?: readonly EmulatorOp[]; retryAfter?: number }
  /** The job stays IN_PROGRESS after `afterTokens` tokens and never ends (until cancel or a timeout). */
  | { kind: 'stall'; afterTokens: number }
  /** The job goes FAILED before producing any output. */
  | { kind: 'job_failed' }
  /** `afterTokens` tokens, then the job fails (native: an error item; OpenAI route: the body errors). */
  | { kind: 'mid_stream'; afterTokens: number }
  /**
   * `afterTokens` tokens, then vLLM's in-band error event and `[DONE]` on the 200 (a chat or completions
   * stream: how vLLM reports an engine that died mid-generation); anything else fails as `mid_stream`.
   */
  | { kind: 'error_event'; afterTokens: number }

/** How one emulated endpoint behaves. Every field has a default; see {@link DEFAULT_BEHAVIOUR}. */
export interface EndpointBehaviour {
  /** Output shape of the emulated worker-vllm. Default: `classic` if the endpoint id contains "classic", else `current`. */
  generation: WorkerGeneration
  /** When set, OpenAI-route requests naming another `model` get vLLM's 404 error JSON. Default: unset. */
  servedModelName?: string
  /** IN_QUEUE time of a job on a cold endpoint (no worker up). Default 0. */
  coldStartMs: number
  /** How long a worker stays up after the job it started on. Default 60 000. */
  warmForMs: number
  /** IN_QUEUE time on a warm endpoint. Default 0. */
  queueDelayMs: number
  /** Time per generated token once IN_PROGRESS. Default 0: every token exists at once. */
  tokenDelayMs: number
  /** A fault applied to every job and request of the endpoint. Default: none. */
  fault?: Fault
  /**
   * The endpoint's execution timeout setting: a job running longer ends TIMED_OUT. A job's own
   * `policy.executionTimeout` overrides it. Default 600 000 (Runpod's).
   */
  executionTimeoutMs: number
  /**
   * The endpoint's job TTL setting, counted from the job's submission (queue and run): a job still queued
   * then ends TIMED_OUT; one a worker took is removed, running or done, and every op on it answers 404
   * (Runpod: "TTL is a hard limit"). A job's own `policy.ttl` overrides it. Default 24 h (Runpod's).
   */
  ttlMs: number
  /** How long results are kept after a `/run` job ends. Default 30 min. */
  retentionMs: number
  /** How long results are kept after a `/runsync` job ends. Default 60 s. */
  runsyncRetentionMs: number
  /**
   * Current generation only: decode each cut of the SSE bytes on its own, turning a split multibyte
   * character into U+FFFD as the real worker does. Default false: cuts move to character boundaries.
   */
  mangleUtf8: boolean
  /**
   * Whether the endpoint's vLLM was started with `--enable-auto-tool-choice --tool-call-parser`
   * (worker-vllm: ENABLE_AUTO_TOOL_CHOICE, TOOL_CALL_PARSER). When false, tools with an "auto" (or
   * absent) `tool_choice` get vLLM's 400. Default true.
   */
  enableAutoToolChoice: boolean
  /** vLLM's `--max-logprobs`: more `top_logprobs` / `logprobs` / `prompt_logprobs` is a 400. Default 20. */
  maxLogprobs: number
  /**
   * The delta / message keys reasoning text goes under: `reasoning` (current vLLM), `reasoning_content`
   * (up to ~v0.11), or both (the versions in between). Default both.
   */
  reasoningFields: ReadonlyArray<'reasoning' | 'reasoning_content'>
  /** Length of embedding vectors when the request names no `dimensions`. Default 384. */
  embeddingDimensions: number
  /**
   * vLLM's `VLLM_ENABLE_RESPONSES_API_STORE=1`: `/v1/responses` keeps each answer (`store`, default true)
   * on the worker that wrote it, for a later `previous_response_id`; a worker that goes cold loses them.
   * Default false, vLLM's: `store` is dropped, `background` is a 400, every `previous_response_id` a 404.
   */
  responsesStore: boolean
  /**
   * Older vLLM: a `/v1/messages` stream ends with `data: [DONE]` after `message_stop`. Default false:
   * current vLLM's Anthropic route (`entrypoints/anthropic/serving.py`) ends with `message_stop`.
   */
  messagesDone: boolean
  /**
   * Classic generation only: worker-vllm's `RAW_OPENAI_OUTPUT` (v2.23.0 `engine.py`). When false, an
   * `openai_route` job's chat or completions stream yields lists of the parsed chunk objects (no
   * `[DONE]`) instead of SSE text. Default true, the worker's default.
   */
  rawOpenAIOutput: boolean
  /** The status a running job reports: Runpod's `IN_PROGRESS`, or `RUNNING`, which its API also uses. Default `IN_PROGRESS`. */
  runningStatus: 'IN_PROGRESS' | 'RUNNING'
  /**
   * Runpod's per-endpoint rate limits (requests per 10 s and at once, per op; `rate-limits.ts`), scaled:
   * past them, HTTP 429. 1 is Runpod's numbers, 0.01 a hundredth (at least 1). Default 0: no limits.
   */
  rateLimitScale: number
}

export const DEFAULT_BEHAVIOUR: Omit<EndpointBehaviour, 'generation'> = {
  coldStartMs: 0,
  warmForMs: 60_000,
  queueDelayMs: 0,
  tokenDelayMs: 0,
  executionTimeoutMs: 600_000,
  ttlMs: 24 * 60 * 60_000,
  retentionMs: 30 * 60_000,
  runsyncRetentionMs: 60_000,
  mangleUtf8: false,
  enableAutoToolChoice: true,
  maxLogprobs: 20,
  reasoningFields: ['reasoning', 'reasoning_content'],
  embeddingDimensions: 384,
  responsesStore: false,
  messagesDone: false,
  rawOpenAIOutput: true,
  runningStatus: 'IN_PROGRESS',
  rateLimitScale: 0,
}

export interface EmulatorOptions {
  /** When set, every endpoint op requires `Authorization: Bearer <apiKey>` (else 401). Control routes never do. */
  apiKey?: string
  /** Behaviour per endpoint id, over `defaults` and the id convention. */
  endpoints?: Record<string, Partial<EndpointBehaviour>>
  /** Behaviour of every endpoint, under `endpoints`. */
  defaults?: Partial<EndpointBehaviour>
  /** The emulator's clock (ms). Default `Date.now`. Job state is a pure function of it. */
  now?: () => number
  /** Upper bound of every long-poll `wait` (ms). Default 10 000. */
  maxWaitMs?: number
  /** How many calls `calls` keeps (the oldest go first), so long load runs stay bounded. Default 100 000. */
  maxCalls?: number
}

/** One request the emulator received. */
export interface EmulatorCall {
  method: string
  /** Path without the query string. */
  path: string
  endpointId: string | null
  op: EmulatorOp
  jobId?: string
  status: number
  authorized: boolean
  at: number
  /** An OpenAI-route stream the client stopped reading before its end (it cancelled the body, or hung up). */
  streamCancelled?: true
}

/** One request body an endpoint received, see {@link RunpodEmulator.lastRequest}. */
export interface EmulatorRequestRecord {
  op: EmulatorOp
  /** Path without the query string. */
  path: string
  /** The parsed JSON body; undefined when it was not JSON. */
  body: unknown
  at: number
}

/** A read-only snapshot of a job at the emulator's current time. */
export interface EmulatorJobView {
  id: string
  endpointId: string
  status: JobStatus
  /** The op that created the job. */
  via: 'run' | 'runsync'
  /** The job's `input`, as received. */
  input: unknown
  createdAt: number
  /** When the current attempt leaves IN_QUEUE. */
  startAt: number
  /** When the job reached its terminal status, if it has. */
  endedAt?: number
  retries: number
  /** Stream items produced so far, and how many `/stream` calls have handed out. */
  itemsProduced: number
  itemsDelivered: number
  error?: string
}

export interface RunpodEmulator {
  /** The whole HTTP surface. */
  fetch(request: Request): Promise<Response>
  /** Every request received, in order (the latest `maxCalls`). */
  readonly calls: EmulatorCall[]
  /** Forget jobs, calls, warm workers and consumed `times` of HTTP faults. */
  reset(): void
  /** Jobs not in a terminal state. */
  activeJobs(): EmulatorJobView[]
  job(id: string): EmulatorJobView | undefined
  /**
   * The last request body an endpoint received: an OpenAI-route body as sent, or a `/run` / `/runsync`
   * body (`{ input, ... }`). Lets tests assert exactly what reached the upstream.
   */
  lastRequest(endpointId: string): EmulatorRequestRecord | undefined
  /** Change an endpoint's behaviour from now on (merged over its current behaviour). */
  configure(endpointId: string, behaviour: Partial<EndpointBehaviour>): void
}

/** A JSON value, the type of every stream item and output. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue }
export type JsonObject = { [key: string]: JsonValue }
