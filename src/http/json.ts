/**
 * Lenient JSON reading for text that may not be JSON (upstream bodies, stream events, error fields):
 * one helper where each reader had its own try/catch, and the one test for a JSON object.
 */

/** `text` parsed, or undefined when it is not JSON (which never parses to undefined). */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/** A JSON object: not null, not an array. */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}
