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
  const secrets = options.secrets.filter((s) => s.length >= 8)
  const sink = options.sink ?? ((line: string) => console.log(line))
  return function log(line: LogLine): void {
    let text = JSON.stringify(line)
    for (const secret of secrets) text = text.replaceAll(secret, '[redacted]')
    sink(text.replace(CREDENTIAL_PATTERN, (found) => `${found.slice(0, 6)}[redacted]`))
  }
}
