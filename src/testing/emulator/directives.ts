/**
 * Per-request directives. Headers do not survive a gateway, prompt text does, so a test steers one
 * request by writing `[[emulator:key=value,key=value]]` anywhere in the prompt or a message (on
 * `/v1/responses` also `instructions` and input items, on `/v1/messages` also `system`; on the routes
 * that generate nothing, any string of the body, `input` only on embeddings).
 *
 * Keys: `fault=http|stall|job_failed|mid_stream|error_event`, `status=500` (http), `retry_after=2` (http, seconds),
 * `after=5` (tokens before stall/mid_stream/error_event), `tokens=100` (exact length), `cold=2000` (ms IN_QUEUE),
 * `delay=5` (ms per token), `mangle=1` (split multibyte characters become U+FFFD),
 * `auto_tool_choice=0` (this request meets a vLLM started without `--enable-auto-tool-choice`).
 */

import type { Fault } from './types.ts'

export interface Directives {
  fault?: Fault
  tokens?: number
  coldStartMs?: number
  tokenDelayMs?: number
  mangleUtf8?: boolean
  /** Overrides the endpoint's `enableAutoToolChoice` for this request. */
  autoToolChoice?: boolean
}

const DIRECTIVE = /\[\[emulator:([^\]]*)\]\]/g
const DEFAULT_AFTER_TOKENS = 2

/**
 * Reads every directive in the given texts; a later key overrides an earlier one. Unknown keys and
 * malformed values are ignored, so a typo degrades to default behaviour instead of a failing request.
 *
 * @example
 * parseDirectives(['Hi [[emulator:fault=mid_stream,after=3]]']) // { fault: { kind: 'mid_stream', afterTokens: 3 } }
 */
export function parseDirectives(texts: readonly string[]): Directives {
  const values = new Map<string, string>()
  for (const text of texts) {
    if (!text.includes('[[emulator:')) continue
    for (const match of text.matchAll(DIRECTIVE)) {
      for (const pair of (match[1] ?? '').split(',')) {
        const [key, value] = pair.split('=', 2).map((part) => part.trim())
        if (key && value !== undefined) values.set(key.toLowerCase(), value)
      }
    }
  }

  const directives: Directives = {}
  const tokens = count(values.get('tokens'))
  if (tokens !== undefined) directives.tokens = tokens
  const cold = count(values.get('cold'))
  if (cold !== undefined) directives.coldStartMs = cold
  const delay = count(values.get('delay'))
  if (delay !== undefined) directives.tokenDelayMs = delay
  const mangle = values.get('mangle')
  if (mangle !== undefined) directives.mangleUtf8 = mangle === '1' || mangle === 'true'
  const autoTools = values.get('auto_tool_choice')
  if (autoTools !== undefined) directives.autoToolChoice = autoTools === '1' || autoTools === 'true' || autoTools === 'on'
  const fault = toFault(values)
  if (fault) directives.fault = fault
  return directives
}

function toFault(values: Map<string, string>): Fault | undefined {
  const afterTokens = count(values.get('after')) ?? DEFAULT_AFTER_TOKENS
  switch (values.get('fault')) {
    case 'http': {
      const status = count(values.get('status'))
      const retryAfter = count(values.get('retry_after'))
      return {
        kind: 'http',
        status: status !== undefined && status >= 200 && status <= 599 ? status : 500,
        ...(retryAfter !== undefined ? { retryAfter } : {}),
      }
    }
    case 'stall':
      return { kind: 'stall', afterTokens }
    case 'job_failed':
      return { kind: 'job_failed' }
    case 'mid_stream':
    case 'error_event':
      return { kind: values.get('fault') as 'mid_stream' | 'error_event', afterTokens }
    default:
      return undefined
  }
}

function count(value: string | undefined): number | undefined {
  if (value === undefined || !/^\d+$/.test(value)) return undefined
  return Number(value)
}
