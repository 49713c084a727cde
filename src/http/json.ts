/**
 * Lenient JSON reading for text that may not be JSON (upstream bodies, stream events, error fields):
 * one helper where each reader had its own try/catch.
 */

/** `text` parsed, or undefined when it is not JSON (which never parses to undefined). */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}
