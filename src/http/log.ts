/**
 * Structured log lines with secrets scrubbed. Every line podgate writes goes through here, so the
 * Runpod key, the admin token and any presented API key can never reach Workers Logs.
 */
import { CREDENTIAL_PATTERN } from '../auth/keys.ts'
import { CALLER_GONE } from '../errors/index.ts'
import type { GatewayError } from '../errors/index.ts'
import { waitUntilOf } from './context.ts'
import type { Context } from 'hono'
import type { CompletionStage } from '../pipeline/index.ts'

export type LogLine = Record<string, unknown>
/** Called at once with each line; may be async (never awaited: held by `waitUntil` where podgate has the request). One that throws or rejects loses that line only. */
export type LogSink = (line: string) => void

export interface LoggerOptions {
  /** Exact strings to scrub (the Runpod key, the admin token). */
  secrets: string[]
  /** Where lines go. Default `console.log`. */
  sink?: LogSink
}

/** Writes a line; resolves (never rejects) once an async sink is done with it, for `waitUntil` to hold. */
export type Log = (line: LogLine) => Promise<unknown>

/**
 * What a failure's cause says: an Error's name and message; anything else thrown (a host hook may throw
 * a string or an object) as its text or JSON, or, when JSON cannot spell it (circular, a BigInt), its type.
 */
function causeOf(cause: unknown): string | undefined {
  try {
    return cause instanceof Error ? `${cause.name}: ${cause.message}` : typeof cause == 'string' || cause === undefined ? cause : (JSON.stringify(cause) ?? String(cause))
  } catch {
    return typeof cause
  }
}

export function createLogger(options: LoggerOptions): Log {
  const scrub = secretScrubber(options.secrets)
  const sink = options.sink ?? ((line: string) => console.log(line))
  return function log(line: LogLine) {
    // A sink that throws, or is async and rejects, loses its line, never the answer (nor leaves a rejection unhandled).
    return new Promise((resolve) => resolve(sink(scrub(JSON.stringify(line)).replace(CREDENTIAL_PATTERN, (found) => `${found.slice(0, 6)}[redacted]`)))).catch(() => undefined)
  }
}

/**
 * Replaces each secret in a text with `[redacted]`, as written or as JSON spells it. Secrets shorter than
 * 8 characters are left alone: they would match ordinary text.
 *
 * @example
 * secretScrubber(['rp_0123456789'])('key rp_0123456789') // 'key [redacted]'
 */
export function secretScrubber(secrets: readonly string[]): (text: string) => string {
  // Also as JSON spells it: a log line is JSON, where a secret's `"`, `\` or tab is escaped.
  const known = secrets.filter((secret) => secret.length >= 8).flatMap((secret) => [secret, JSON.stringify(secret).slice(1, -1)])
  return (text) => {
    for (const secret of known) text = text.replaceAll(secret, '[redacted]')
    return text
  }
}

/**
 * Writes a failure's one log line (which request, call and model, and what went wrong; never a secret:
 * the logger scrubs) when it is one: a 5xx, or Runpod refusing podgate for its rate limit (the operator's
 * capacity signal), before the answer began or after. A caller's own 4xx writes none, nor a caller who
 * left (no failure of podgate's or Runpod's).
 */
export function logFailure(log: Log, c: Context, error: GatewayError): void {
  if ((error.status >= 500 && error.message !== CALLER_GONE) || error.code === 'upstream_rate_limited')
    waitUntilOf(c)(log({ level: 'error', request_id: c.get('requestId'), status: error.status, path: `${c.req.method} ${c.req.path}`, model: c.get('model'), code: error.code, message: error.message, cause: causeOf(error.cause) }))
}

/**
 * The first completion stage: names the call's model for the failure lines, and logs a call that failed
 * after its answer began (a stream cut, stalled or refused upstream, Runpod's rate limit): past its 200 no
 * `onError` sees it.
 * A failure `onError` logs (thrown before the answer) is not logged twice, and a caller who left or a
 * revoked key (no 5xx) is not logged. A coalesced twin's is, under its own request id, as onError logs a
 * JSON twin's: its caller's id finds its line.
 */
export function lateFailureLog(log: Log): CompletionStage {
  return async function lateFailures(ctx, next) {
    ctx.c.set('model', ctx.model.alias)
    const response = await next(ctx)
    void ctx.outcome.then((outcome) => {
      if (!outcome.ok) logFailure(log, ctx.c, outcome.error)
    })
    return response
  }
}

/**
 * `logCalls`: one `info` line per completion call once it settled (after a stream's last byte), failures
 * and refusals included (a failure keeps its `error` line too): who, which model, status, cache status,
 * tokens (`estimated` when podgate counted them) and `ms` from the request's start. Registered only when on.
 */
export function callLog(log: Log): CompletionStage {
  return async function callLine(ctx, next) {
    const { c, request } = ctx
    const { keyId, tokenId } = c.get('principal')
    let response: Response | undefined
    try {
      return (response = await next(ctx))
    } finally {
      waitUntilOf(c)(
        ctx.outcome.then((o) => {
          const usage = o.usage ?? o.estimate
          // What the call was, not what its header promised: a twin that asked on its own (its leader left)
          // made a call of its own; a twin whose caller left before its answer has no header.
          const cache = response?.headers.get('x-podgate-cache')
          // A caller who left is no failure of the upstream's: nginx's 499 (client closed request), no code.
          const gone = !o.ok && o.error.message === CALLER_GONE
          return log({
            level: 'info',
            message: 'call',
            request_id: c.get('requestId'),
            key_id: keyId,
            token_id: tokenId,
            model: ctx.model.alias,
            path: `${c.req.method} ${c.req.path}`,
            stream: request.stream,
            status: o.ok ? response?.status : gone ? 499 : o.error.status,
            code: o.ok || gone ? undefined : o.error.code,
            cache: o.cached ? (cache ?? 'COALESCED') : cache === 'COALESCED' ? 'MISS' : cache,
            prompt_tokens: o.usage ? usage?.prompt_tokens : o.estimate && request.estimate.promptTokens,
            completion_tokens: usage?.completion_tokens,
            estimated: !o.usage && !!o.estimate,
            ms: Date.now() - c.get('start')!,
          })
        }),
      )
    }
  }
}
