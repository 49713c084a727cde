/**
 * Structured log lines with secrets scrubbed. Every line podgate writes goes through here, so the
 * Runpod key, the admin token and any presented API key can never reach Workers Logs.
 */
import { CREDENTIAL_PATTERN } from '../auth/keys.ts'

export type LogLine = Record<string, unknown>
export type LogSink = (line: string) => void

export interface LoggerOptions {
  /** Exact strings to scrub (the Runpod key, the admin token). */
  secrets: string[]
  /** Where lines go. Default `console.log`. */
  sink?: LogSink
}

export function createLogger(options: LoggerOptions): (line: LogLine) => void {
  const scrub = secretScrubber(options.secrets)
  const sink = options.sink ?? ((line: string) => console.log(line))
  return function log(line: LogLine): void {
    sink(scrub(JSON.stringify(line)).replace(CREDENTIAL_PATTERN, (found) => `${found.slice(0, 6)}[redacted]`))
  }
}

/**
 * Replaces each secret in a text with `[redacted]`. Secrets shorter than 8 characters are left alone:
 * they would match ordinary text.
 *
 * @example
 * secretScrubber(['rp_0123456789'])('key rp_0123456789') // 'key [redacted]'
 */
export function secretScrubber(secrets: readonly string[]): (text: string) => string {
  const known = secrets.filter((secret) => secret.length >= 8)
  return (text) => {
    for (const secret of known) text = text.replaceAll(secret, '[redacted]')
    return text
  }
}
