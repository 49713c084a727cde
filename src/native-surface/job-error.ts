/**
 * What a caller may see of a failed job's `error`: runpod-python reports a handler exception as a JSON
 * string with `error_type`, `error_message` and `error_traceback` (plus host and worker ids). JSON
 * answers keep Runpod's shape, a string of that JSON, with only the type and the message in it: the
 * traceback (file paths, code, internals) stays upstream, as on the job SSE and OpenAI surfaces.
 */
import { isRecord, parseJson } from '../http/json.ts'

import { TRACEBACK } from '../streaming/vllm.ts'

/**
 * @example
 * publicJobError('{"error_message":"boom","error_traceback":"Traceback ..."}') // '{"error_message":"boom"}'
 */
export function publicJobError(error: unknown): unknown {
  if (typeof error === 'string') {
    const parsed = error.startsWith('{') ? parseJson(error) : undefined
    return isRecord(parsed) ? JSON.stringify(publicFields(parsed)) : error.replace(TRACEBACK, '')
  }
  if (isRecord(error)) return publicFields(error)
  return error
}

function publicFields(record: Record<string, unknown>): Record<string, unknown> {
  if (!('error_traceback' in record) && !('error_message' in record)) return record
  const out: Record<string, unknown> = {}
  for (const name of PUBLIC_FIELDS) if (record[name] !== undefined) out[name] = record[name]
  return out
}

const PUBLIC_FIELDS = ['error_type', 'error_message'] as const

/** A job-shaped answer with its `error`, if any, made public. */
export function withPublicError<T extends { error?: unknown }>(job: T): T {
  return job.error == null ? job : { ...job, error: publicJobError(job.error) }
}
