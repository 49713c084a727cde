/**
 * `z.union` for podgate's few unions, in `zod/mini`'s functional form: zod's union schema brings lazy
 * `optin`, `optout`, `values` and `pattern` members and an async path into the deployed Worker (~190
 * gzipped bytes) that podgate's unions (sync, of options that are neither optional nor defaulted) never use.
 * It parses as zod's does: the first option that passes wins, a lone option whose issues do not abort
 * stands (its issues are the field's), else the issue is zod's own `invalid_union` with every option's
 * issues. Its def is `z.union`'s (`type: 'union'`, `options`, a schema's `error`), so `z.toJSONSchema`
 * writes the same `anyOf`.
 */
import * as z from 'zod/mini'
import { ZodMiniType } from 'zod/mini'
import { $constructor } from 'zod/v4/core'

/**
 * One of `options` (`z.union(options, params)`); `params.error` words its `invalid_union` as a schema's
 * own message does.
 *
 * @example
 * const stop = z.optional(union([z.string(), z.array(z.string())]))
 */
export function union<const T extends readonly z.core.SomeType[]>(options: T, params?: { error: string }): z.ZodMiniUnion<T> {
  const def: z.core.$ZodUnionDef = { type: 'union', options: options as unknown as readonly z.core.$ZodType[] }
  if (params) def.error = () => params.error
  return new Union(def) as unknown as z.ZodMiniUnion<T>
}

const Union = $constructor<z.ZodMiniUnion>('PodgateUnion', (inst, def) => {
  ZodMiniType.init(inst, def)
  inst._zod.parse = (payload, ctx) => {
    const results: z.core.ParsePayload[] = []
    for (const option of def.options) {
      const result = option._zod.run({ value: payload.value, issues: [] }, ctx) as z.core.ParsePayload
      if (result.issues.length === 0) return result
      results.push(result)
    }
    const standing = results.filter((result) => !result.aborted && result.issues.every((issue) => issue.continue === true))
    if (standing.length === 1) return standing[0]!
    // Every option failed: each is parsed again, now for its issues in their final form (zod's own
    // finalizing is not reachable from here). A failure's cost only, and bounded.ts bounds a body's.
    payload.issues.push({
      code: 'invalid_union',
      input: payload.value,
      inst,
      errors: def.options.map((option) => (option as z.ZodMiniType).safeParse(payload.value, ctx as z.core.ParseContext<z.core.$ZodIssue>).error!.issues),
    })
    return payload
  }
})
