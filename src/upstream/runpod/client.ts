/**
 * Typed calls for every Runpod Serverless endpoint operation (runpod-api.md §1).
 *
 * Owns: building upstream URLs from validated config (never from caller input), putting the Runpod key
 * in the `Authorization` header and nowhere else, timeouts and cancellation through `AbortSignal`, and
 * turning upstream failures into `GatewayError`s whose text holds no URL, key or upstream body secret.
 */
import { CALLER_GONE, GatewayError, upstreamError } from '../../errors/index.ts'
import type { EndpointConfig } from '../../config/schema.ts'
import { isRefusalStatus, refusalError, routeNotFound, upstreamRefusal } from '../../streaming/vllm.ts'
import { parseJson } from '../../http/json.ts'
import { secretScrubber } from '../../http/log.ts'

export type JobState = 'IN_QUEUE' | 'IN_PROGRESS' | 'RUNNING' | 'COMPLETED' | 'FAILED' | 'CANCELLED' | 'TIMED_OUT'

const TERMINAL: ReadonlySet<string> = new Set(['COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT'])

export function isTerminal(status: string): boolean {
  return TERMINAL.has(status)
}

export interface JobStatus {
  id: string
  status: JobState
  delayTime?: number
  executionTime?: number
  output?: unknown
  error?: unknown
  retries?: number
  workerId?: string
}

export interface JobStream {
  id?: string
  status: JobState
  stream: { output: unknown }[]
  error?: unknown
}

export interface EndpointHealth {
  jobs: Record<string, number>
  workers: Record<string, number>
}

/** A resolved upstream endpoint: where its job API lives and a label that is safe to log. */
export interface Endpoint {
  /** Base URL of the endpoint's job API, no trailing slash: `https://api.runpod.ai/v2/abc123`. */
  base: string
  /** Endpoint id, or host of a URL-configured endpoint. Safe for logs; never shown to callers. */
  label: string
  mode: 'openai' | 'native'
  weight: number
  /**
   * The bearer podgate sends: `runpod` (the client's Runpod key; endpoint ids), the endpoint's own
   * `apiKey` (a `url:` endpoint whose config names one), or none (any other `url:` endpoint).
   */
  credential: EndpointCredential
}

export type EndpointCredential = { kind: 'runpod' } | { kind: 'own'; apiKey: string } | { kind: 'none' }

export interface RunpodClientOptions {
  /** The Runpod API key. */
  apiKey: string
  /** Default timeout for each call, in ms, on top of any caller signal. */
  timeoutMs: number
  /** Injected fetch (tests, service bindings). Default: global `fetch`. */
  fetch?: typeof fetch
}

export interface CallOptions {
  signal?: AbortSignal
  /** Overrides the client's timeout for this call (e.g. a long poll). */
  timeoutMs?: number
  /** The timeout covers only the wait for response headers, not the body: for relayed streams. */
  headersTimeoutOnly?: boolean
}

/** Resolves an endpoint config against Runpod's base URL. Config was validated at startup. */
export function resolveEndpoint(config: EndpointConfig, runpodBaseUrl: string, defaultMode: 'openai' | 'native'): Endpoint {
  const mode = config.mode ?? defaultMode
  if ('endpointId' in config) {
    return { base: `${runpodBaseUrl.replace(/\/+$/, '')}/${config.endpointId}`, label: config.endpointId, mode, weight: config.weight, credential: { kind: 'runpod' } }
  }
  const url = new URL(config.url)
  // A URL is any server: it gets the Runpod key only if its config hands it that key by name.
  const credential: EndpointCredential = config.apiKey === undefined ? { kind: 'none' } : { kind: 'own', apiKey: config.apiKey }
  return { base: config.url.replace(/\/+$/, ''), label: url.host, mode, weight: config.weight, credential }
}

/** The path of an upstream URL: keys travel in headers only, and the query is left out anyway. */
function upstreamPath(url: string): string {
  try {
    return new URL(url).pathname.slice(0, 300)
  } catch {
    return ''
  }
}

/**
 * A call to Runpod's API that queues a job and broke off without an answer: the job may be queued, and a
 * dropped connection does not cancel it (runpod-api.md §1), so the failure is not one to retry, as a
 * timed-out one is not: a second try could run the job twice, the first with no id to cancel. (workerd
 * reports a refused connection and a dropped one alike; Runpod's API does not refuse connections, while
 * a `url:` endpoint, such as a local server that is down, does: its failures are still failed over.)
 */
function queuedMaybe(error: unknown, endpoint: Endpoint): never {
  if (endpoint.credential.kind === 'runpod' && error instanceof GatewayError && error.code === 'upstream_unavailable') {
    // Its cause is the network's own error, for the log line (the wrapped one would only repeat this message).
    throw upstreamError('The connection to the upstream broke while it queued the job; the job may be running, so podgate does not start it again.', { cause: error.cause })
  }
  throw error
}

/** Job ids reach upstream URLs, so they are checked here even though podgate mints the ids callers see. */
const JOB_ID_PATTERN = /^[A-Za-z0-9_-]{1,128}$/

/** Operations on one job: a 404 there may mean the job is gone rather than a wrong route. */
const JOB_OPS = /^(status|status-sync|stream|cancel|retry)\//

export function assertJobId(id: string): string {
  if (!JOB_ID_PATTERN.test(id)) throw upstreamError('The upstream returned an invalid job id.')
  return id
}

export class RunpodClient {
  readonly #apiKey: string
  readonly #timeoutMs: number
  readonly #fetch: typeof fetch

  constructor(options: RunpodClientOptions) {
    this.#apiKey = options.apiKey
    this.#timeoutMs = options.timeoutMs
    this.#fetch = options.fetch ?? ((input, init) => fetch(input, init))
  }

  /** `POST /run`: queue a job. Returns `{id, status}`. */
  run(endpoint: Endpoint, body: unknown, options: CallOptions = {}): Promise<JobStatus> {
    return this.#json(endpoint, 'run', body, options).then(asJobStatus, (error: unknown) => queuedMaybe(error, endpoint))
  }

  /** `POST /runsync?wait=`: the job's result, or a non-terminal status when the wait runs out. */
  runsync(endpoint: Endpoint, body: unknown, options: CallOptions & { waitMs?: number } = {}): Promise<JobStatus> {
    const path = options.waitMs === undefined ? 'runsync' : `runsync?wait=${options.waitMs}`
    const timeoutMs = (options.waitMs ?? this.#timeoutMs) + 5_000
    return this.#json(endpoint, path, body, { timeoutMs, ...options }).then(asJobStatus, (error: unknown) => queuedMaybe(error, endpoint))
  }

  /** `POST /status/{id}` (POST is accepted by the hosted API and by runpod-python's local server). */
  status(endpoint: Endpoint, id: string, options: CallOptions = {}): Promise<JobStatus> {
    return this.#json(endpoint, `status/${assertJobId(id)}`, undefined, options).then(asJobStatus)
  }

  /**
   * A JSON call to Runpod's OpenAI-compatible route, read whole under the call's timeout: the timer
   * covers the body too, so an upstream that stalls mid-body times out. Throws a GatewayError on a
   * non-2xx answer or a body that is not JSON.
   */
  openaiJson(endpoint: Endpoint, path: string, body: unknown, options: CallOptions = {}): Promise<unknown> {
    return this.#json(endpoint, `openai/v1${path}`, body, options).catch((error: unknown) => queuedMaybe(error, endpoint))
  }

  /** `POST /status-sync/{id}?wait=`: waits for the job server-side (undocumented, used by runpod-sdk). */
  statusSync(endpoint: Endpoint, id: string, options: CallOptions & { waitMs?: number } = {}): Promise<JobStatus> {
    const wait = options.waitMs === undefined ? '' : `?wait=${options.waitMs}`
    const timeoutMs = (options.waitMs ?? this.#timeoutMs) + 5_000
    return this.#json(endpoint, `status-sync/${assertJobId(id)}${wait}`, undefined, { timeoutMs, ...options }).then(asJobStatus)
  }

  /** `POST /stream/{id}?wait=`: a long poll returning the items produced since the previous call. */
  stream(endpoint: Endpoint, id: string, options: CallOptions & { waitMs?: number } = {}): Promise<JobStream> {
    const wait = options.waitMs ? `?wait=${options.waitMs}` : ''
    const timeoutMs = (options.waitMs ?? 0) + this.#timeoutMs
    return this.#json(endpoint, `stream/${assertJobId(id)}${wait}`, undefined, { timeoutMs, ...options }).then(asJobStream)
  }

  /** `POST /cancel/{id}`: stops the job (and its billing). */
  cancel(endpoint: Endpoint, id: string, options: CallOptions = {}): Promise<JobStatus> {
    return this.#json(endpoint, `cancel/${assertJobId(id)}`, {}, options).then(asJobStatus)
  }

  /** `POST /retry/{id}`: requeues a FAILED or TIMED_OUT job. */
  retry(endpoint: Endpoint, id: string, options: CallOptions = {}): Promise<JobStatus> {
    return this.#json(endpoint, `retry/${assertJobId(id)}`, {}, options).then(asJobStatus)
  }

  /** `GET /health`: queue and worker counts. */
  health(endpoint: Endpoint, options: CallOptions = {}): Promise<EndpointHealth> {
    return this.#json(endpoint, 'health', undefined, options, 'GET') as Promise<EndpointHealth>
  }

  /**
   * A call to Runpod's OpenAI-compatible route (`/openai/v1/...`). Returns the raw Response on 2xx so a
   * stream can be relayed as it arrives; throws a GatewayError otherwise. A JSON answer is cheaper read
   * with `openaiJson`, which needs no stream stage to end its timer.
   */
  async openai(endpoint: Endpoint, path: string, body: unknown, options: CallOptions = {}): Promise<Response> {
    // Runpod runs an OpenAI-route POST as a job, as it does `/run`: a broken connection is not retried either.
    const sent = this.#send(endpoint, `openai/v1${path}`, body, options, body === undefined ? 'GET' : 'POST')
    const { response, clear } = await (body === undefined ? sent : sent.catch((error: unknown) => queuedMaybe(error, endpoint)))
    if (!response.ok) {
      clear()
      throw await upstreamHttpError(response, { url: `${endpoint.base}/openai/v1${path}`, jobOp: false, secret: this.#bearer(endpoint) })
    }
    if (options.headersTimeoutOnly || !response.body) {
      clear()
      return response
    }
    // The timeout also covers reading the JSON body; its timer ends with the body, not after it.
    return new Response(response.body.pipeThrough(new TransformStream({ flush: clear })), response)
  }

  /** A call whose 2xx answer is JSON: POST unless `method` says otherwise, with `body` as JSON when defined. */
  async #json(endpoint: Endpoint, path: string, body: unknown, options: CallOptions, method?: string): Promise<unknown> {
    const { response, clear } = await this.#send(endpoint, path, body, options, method)
    try {
      if (!response.ok) throw await upstreamHttpError(response, { url: `${endpoint.base}/${path}`, jobOp: JOB_OPS.test(path), secret: this.#bearer(endpoint) })
      return await response.json()
    } catch (cause) {
      if (cause instanceof GatewayError) throw cause
      if (options.signal?.aborted) throw upstreamError(CALLER_GONE, { cause })
      throw upstreamError('The upstream answered with a body that is not JSON, or it broke off.', { cause })
    } finally {
      clear()
    }
  }

  /** Sends one call under a timeout; the caller ends the timer with `clear` once it has read what it needs. */
  async #send(endpoint: Endpoint, path: string, body: unknown, options: CallOptions, method = 'POST'): Promise<{ response: Response; clear: () => void }> {
    const timeout = new AbortController()
    const timer = setTimeout(() => timeout.abort(), options.timeoutMs ?? this.#timeoutMs)
    const signal = options.signal ? AbortSignal.any([options.signal, timeout.signal]) : timeout.signal
    const headers: Record<string, string> = { accept: 'application/json, text/event-stream' }
    const bearer = this.#bearer(endpoint)
    if (bearer !== undefined) headers.authorization = `Bearer ${bearer}`
    if (body !== undefined) headers['content-type'] = 'application/json'
    try {
      const response = await this.#fetch(`${endpoint.base}/${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal,
      })
      return { response, clear: () => clearTimeout(timer) }
    } catch (cause) {
      clearTimeout(timer)
      if (timeout.signal.aborted) throw new GatewayError('upstream_timeout', 'The upstream did not answer in time.', { cause })
      if (options.signal?.aborted) throw upstreamError(CALLER_GONE, { cause })
      throw new GatewayError('upstream_unavailable', 'The upstream could not be reached.', { cause })
    }
  }

  /** The key an endpoint's calls carry, if any. */
  #bearer(endpoint: Endpoint): string | undefined {
    return endpoint.credential.kind === 'runpod' ? this.#apiKey : endpoint.credential.kind === 'own' ? endpoint.credential.apiKey : undefined
  }
}

/**
 * Maps an upstream HTTP failure to a GatewayError. vLLM's own 400s (e.g. a prompt longer than the context)
 * are the caller's to fix, so their message passes through; auth and routing failures are the operator's,
 * so the caller only learns that the upstream refused podgate. The key the call carried (`secret`) is
 * taken out of the upstream's text first: a proxy or server that echoes request headers in its error
 * page would otherwise show it to the caller.
 */
export async function upstreamHttpError(response: Response, options: { url: string; jobOp: boolean; secret?: string | undefined }): Promise<GatewayError> {
  const raw = await response.text().catch(() => '')
  const text = options.secret ? secretScrubber([options.secret])(raw) : raw
  const status = response.status
  const retryAfter = response.headers.get('retry-after')
  const retryAfterSeconds = retryAfter && /^\d{1,6}$/.test(retryAfter) ? Number(retryAfter) : undefined
  const cause = new UpstreamStatus(status, retryAfterSeconds, upstreamPath(options.url))
  const headers: Record<string, string> = retryAfterSeconds === undefined ? {} : { 'retry-after': String(retryAfterSeconds) }
  if (status === 429) return new GatewayError('upstream_rate_limited', 'The model endpoint is rate limited. Retry shortly.', { headers, cause })
  // vLLM's 4xx (and a 4xx that worker-vllm wrapped, whatever status carried it) is the caller's to fix:
  // relayed with vLLM's status and message.
  const wrapped = upstreamRefusal(upstreamMessage(text) ?? '')
  if (wrapped) return wrapped
  // And vLLM's 404 for what the caller named (an unknown `previous_response_id`), typed invalid_request_error
  // (its unknown model, a NotFoundError, is the operator's).
  if (isRefusalStatus(status) || (status === 404 && text.includes('"invalid_request_error"'))) return refusalError(status, text)
  if (status === 401 || status === 403) {
    return upstreamError('The upstream refused podgate\'s credentials. The operator must check RUNPOD_API_KEY.', { cause })
  }
  if (status === 404) {
    // A web framework's route miss (FastAPI: `{"detail":"Not Found"}`) is a wrong URL even on a job op.
    if (options.jobOp && !isRouteMiss(text)) return new GatewayError('job_not_found', 'The upstream no longer knows this job: it expired or was removed.', { cause })
    return routeNotFound(cause)
  }
  // Runpod's 503 (no worker free, throttled) says "later": a 503 clients retry, after its Retry-After.
  if (status === 503) return new GatewayError('service_unavailable', 'The model endpoint has no capacity now. Retry later.', { headers, cause })
  // A proxy's timeout (504, Cloudflare's 524): the call reached what is behind it, which may still run its job.
  if (status === 504 || status === 524) return new GatewayError('upstream_timeout', 'The upstream did not answer in time.', { cause })
  return upstreamError(`The upstream failed with HTTP ${status}.`, { cause })
}

/**
 * The `cause` of an error made from an upstream HTTP answer: what retry logic needs (the status and
 * `Retry-After`) without parsing messages. Never shown to callers.
 */
export class UpstreamStatus extends Error {
  override readonly name = 'UpstreamStatus'
  declare readonly status: number
  declare readonly retryAfterSeconds: number | undefined

  /** `path` is the upstream URL's path (no host, no query) for the operator's log. */
  constructor(status: number, retryAfterSeconds: number | undefined, path = '') {
    super(`upstream HTTP ${status}${path ? ` at ${path}` : ''}`)
    this.status = status
    this.retryAfterSeconds = retryAfterSeconds
  }
}

function isRouteMiss(text: string): boolean {
  return (parseJson(text) as { detail?: unknown } | null | undefined)?.detail === 'Not Found'
}

/** Extracts vLLM's / OpenAI's error message from an error body, bounded in length. */
function upstreamMessage(text: string): string | undefined {
  const body = parseJson(text) as { message?: unknown; error?: { message?: unknown } | null } | null | undefined
  // `error` may be anything JSON holds: a primitive's (or null's) message reads as undefined.
  return typeof body?.message === 'string' ? body.message : typeof body?.error?.message === 'string' ? body.error.message : undefined
}

function asJobStatus(value: unknown): JobStatus {
  if (typeof value !== 'object' || value === null) throw upstreamError('The upstream answered with an unexpected job shape.')
  const job = value as Partial<JobStatus>
  if (typeof job.status !== 'string') throw upstreamError('The upstream answered without a job status.')
  if (typeof job.id !== 'string') throw upstreamError('The upstream answered without a job id.')
  return job as JobStatus
}

function asJobStream(value: unknown): JobStream {
  if (typeof value !== 'object' || value === null) throw upstreamError('The upstream answered with an unexpected stream shape.')
  const job = value as Partial<JobStream>
  if (typeof job.status !== 'string') throw upstreamError('The upstream stream answer has no status.')
  // runpod-sdk iterates `stream` unguarded; podgate tolerates its absence as "no new items".
  return { ...job, stream: Array.isArray(job.stream) ? job.stream : [] } as JobStream
}
