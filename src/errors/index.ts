/**
 * podgate's one request-time error type.
 *
 * Every step of the request path throws `GatewayError`; one `onError` turns it into the format of the
 * surface that was called (OpenAI error JSON, Runpod-style JSON, or an SSE `error` event). The code is
 * the contract: the HTTP status and OpenAI `type` are derived from it, so a code never drifts from its
 * status across surfaces.
 */

export type GatewayErrorCode =
  | 'invalid_json'
  | 'invalid_request'
  | 'unsupported_media_type'
  | 'payload_too_large'
  | 'invalid_api_key'
  | 'missing_api_key'
  | 'permission_denied'
  | 'model_not_found'
  | 'not_found'
  | 'job_not_found'
  | 'route_not_found'
  | 'method_not_allowed'
  | 'rate_limited'
  | 'upstream_rate_limited'
  | 'upstream_error'
  | 'upstream_timeout'
  | 'upstream_unavailable'
  | 'service_unavailable'
  | 'internal_error'

/** The OpenAI error `type` values podgate emits. */
export type OpenAIErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'rate_limit_error'
  | 'api_error'

/** Each code's `[status, OpenAI type]`: pairs, not objects, as the deployed Worker's bundle is smaller so. */
const CODE_TABLE: Record<GatewayErrorCode, readonly [status: number, type: OpenAIErrorType]> = {
  invalid_json: [400, 'invalid_request_error'],
  invalid_request: [400, 'invalid_request_error'],
  unsupported_media_type: [415, 'invalid_request_error'],
  payload_too_large: [413, 'invalid_request_error'],
  invalid_api_key: [401, 'authentication_error'],
  missing_api_key: [401, 'authentication_error'],
  permission_denied: [403, 'permission_error'],
  model_not_found: [404, 'invalid_request_error'],
  not_found: [404, 'not_found_error'],
  /** The upstream no longer knows the job (expired, or purged): the caller's job is gone. */
  job_not_found: [404, 'not_found_error'],
  /** The upstream has no such route or endpoint: podgate's config is wrong, not the caller's request. */
  route_not_found: [502, 'api_error'],
  method_not_allowed: [405, 'invalid_request_error'],
  rate_limited: [429, 'rate_limit_error'],
  upstream_rate_limited: [429, 'rate_limit_error'],
  upstream_error: [502, 'api_error'],
  upstream_timeout: [504, 'api_error'],
  upstream_unavailable: [503, 'api_error'],
  service_unavailable: [503, 'api_error'],
  internal_error: [500, 'api_error'],
}

/** The message of the failure a call ends with when its caller went away: not the upstream's failure, never logged as one. */
export const CALLER_GONE = 'The caller went away.'

export interface GatewayErrorOptions {
  /** The request field at fault, in OpenAI's `param` style (`messages[0].content`). */
  param?: string
  /** Extra response headers, e.g. `Retry-After` or `WWW-Authenticate`. */
  headers?: Record<string, string>
  /** Overrides the status derived from the code (e.g. a vLLM 400 passed through as 400). */
  status?: number
  cause?: unknown
}

export class GatewayError extends Error {
  override readonly name = 'GatewayError'
  // Declared, not defined: the constructor sets each, and a definition would repeat their names in the bundle.
  declare readonly code: GatewayErrorCode
  declare readonly status: number
  declare readonly type: OpenAIErrorType
  declare readonly param: string | null
  declare readonly headers: Record<string, string>

  constructor(code: GatewayErrorCode, message: string, options: GatewayErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause })
    const [status, type] = CODE_TABLE[code]
    this.code = code
    this.status = options.status ?? status
    this.type = type
    this.param = options.param ?? null
    // Its own copy: a stage adds its headers to an error that passes through it (the quota's).
    this.headers = { ...options.headers }
  }

  /**
   * The error as OpenAI error JSON. Hono's default `onError` answers with `getResponse()`, so `apiKeyAuth`
   * and `adminAuth` refuse with their own status (401, 403, 404) in a Hono app that has no podgate
   * `onError`, rather than with a 500.
   */
  getResponse(): Response {
    return Response.json(openAIErrorBody(this), { status: this.status, headers: this.headers })
  }
}

/**
 * `new GatewayError('invalid_request', message, options)`: the code of most refusals of a request, written
 * once here instead of at each of its forty-odd uses (the deployed Worker is smaller for it).
 *
 * @example
 * throw invalidRequest("'n' must be at most 8", { param: 'n' })
 */
export function invalidRequest(message: string, options?: GatewayErrorOptions): GatewayError {
  return new GatewayError('invalid_request', message, options)
}

/**
 * `new GatewayError('upstream_error', message, options)`: the code of most failures of a call to the model,
 * written once here instead of at each of its sixty-odd uses (the deployed Worker is smaller for it).
 *
 * @example
 * throw upstreamError('The model worker returned no output.')
 */
export function upstreamError(message: string, options?: GatewayErrorOptions): GatewayError {
  return new GatewayError('upstream_error', message, options)
}

/** `text` cut to `max` characters, with an ellipsis where it was cut. */
export function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}…` : text
}

/** The status podgate answers for `code`, for docs and tests. */
export function statusOf(code: GatewayErrorCode): number {
  return CODE_TABLE[code][0]
}

/**
 * Every code with its status and OpenAI type (docs/api.md's error table lists the codes podgate answers with).
 * Built from the table where it is imported: the Worker does not, and its bundle leaves it out (pure).
 */
export const ERROR_CODES = /* @__PURE__ */ Object.fromEntries(
  /* @__PURE__ */ Object.entries(CODE_TABLE).map(([code, [status, type]]) => [code, { status, type }]),
) as Record<GatewayErrorCode, { status: number; type: OpenAIErrorType }>

/**
 * Turns anything thrown into a GatewayError. Unknown errors become `internal_error` with a generic
 * message: their text may hold upstream URLs or secrets, so it is never shown to the caller.
 */
export function toGatewayError(error: unknown): GatewayError {
  if (error instanceof GatewayError) return error
  return new GatewayError('internal_error', 'podgate hit an unexpected error. It has been logged.', {
    cause: error,
  })
}

/**
 * Anthropic's error `type` for `error`, for `/v1/messages` (its SDKs read it). It follows the status where
 * Anthropic's differ from OpenAI's: every 404 is `not_found_error` (an unknown model too), a 413
 * `request_too_large`, a 504 `timeout_error`.
 */
export function anthropicType(error: GatewayError): string {
  return ({ 404: 'not_found_error', 413: 'request_too_large', 504: 'timeout_error' } as Record<number, string>)[error.status] ?? error.type
}

/** OpenAI's error body: `{"error":{"message","type","param","code"}}`. */
export function openAIErrorBody(error: GatewayError): {
  error: { message: string; type: OpenAIErrorType; param: string | null; code: GatewayErrorCode }
} {
  return { error: { message: error.message, type: error.type, param: error.param, code: error.code } }
}
