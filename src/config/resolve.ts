/**
 * Validates gateway options once, at startup. A mistake throws `ConfigError` whose message names the
 * offending field and what to do, so an operator fixes it from the first deploy log line.
 */
import { invalidRequestFromIssues, safeParseWorded } from '../normalize/zod-errors.ts'
import { gatewayOptionsSchema, MODEL_ALIAS_PATTERN } from './schema.ts'
import type { GatewayOptionsInput, ResolvedOptions } from './schema.ts'

export class ConfigError extends Error {
  override readonly name = 'ConfigError'
}

export function resolveConfig(input: GatewayOptionsInput): ResolvedOptions {
  // Worded as request errors are: each names its field (`'runpod.timeoutMs' must be at most ...`).
  const parsed = safeParseWorded(gatewayOptionsSchema, input)
  if (!parsed.success) {
    const lines = parsed.error.issues.slice(0, 5).map((issue) => invalidRequestFromIssues([issue], true).message)
    throw new ConfigError(`podgate: invalid options. Fix these fields:\n  - ${lines.join('\n  - ')}`)
  }
  // The input's keys: the schema's output leaves out a `__proto__` (an own key of parsed JSON), unnamed.
  for (const alias of Object.keys(input.models)) {
    if (!MODEL_ALIAS_PATTERN.test(alias)) {
      throw new ConfigError(
        `podgate: invalid options. Fix these fields:\n  - models.${alias}: a model alias must start with a letter or digit and use only letters, digits, '.', '_', ':' and '-' (at most 128 characters)`,
      )
    }
  }
  return parsed.data
}
