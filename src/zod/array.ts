/**
 * `z.array` for podgate's lists, in `zod/mini`'s functional form: zod's array schema brings async items and
 * a memoizer's cycle support into the deployed Worker, which podgate's sync parses of JSON never use. It
 * parses as zod's does: a non-array is one `invalid_type` (expected `array`); an array longer than the
 * bound of one of its leading length checks (`maxLength`) is refused by that check alone, before any item
 * is parsed (zod's size cap: a million-item body costs no million parses); else each item in order, its
 * issues placed under its index (`abortEarly` stops at the first item that aborts). Its def is zod's
 * (`type: 'array'`, `element`), so `z.toJSONSchema` writes the same schema.
 */
import type * as z from 'zod/mini'
import { ZodMiniType } from 'zod/mini'
import { $constructor } from 'zod/v4/core'

const ArraySchema = $constructor<z.ZodMiniArray>('PodgateArray', (inst, def) => {
  ZodMiniType.init(inst, def)
  // zod's size caps: the leading checks of a length (a later check may rewrite the value), each with its upper bound.
  const caps: Array<[number, z.core.$ZodCheck<never>]> = []
  for (const check of def.checks ?? []) {
    const { check: kind, maximum, length, size } = check._zod.def as { check: string; maximum?: number; length?: number; size?: number }
    if (!/_(length|size)$|_equals$/.test(kind)) break
    const max = maximum ?? length ?? size ?? -1
    if (max >= 0) caps.push([max, check])
  }
  const element = def.element._zod
  inst._zod.parse = (payload, ctx) => {
    const input = payload.value
    if (!Array.isArray(input)) {
      payload.issues.push({ expected: 'array', code: 'invalid_type', input, inst })
      return payload
    }
    if (!ctx?.skipChecks && ctx?.direction !== 'backward') {
      for (const [max, check] of caps) {
        if (input.length > max && check._zod.def.when!(payload)) {
          const start = payload.issues.length
          check._zod.check(payload as z.core.ParsePayload<never>)
          // The value is still the raw input: no later check may read it. The issues are the array's, as zod marks them.
          const issues = payload.issues as Array<{ continue?: boolean; schema?: unknown }>
          issues[start]!.continue = false
          for (let i = start; i < issues.length; i++) issues[i]!.schema ??= inst
          return payload
        }
      }
    }
    const output: unknown[] = (payload.value = Array(input.length))
    for (let i = 0; i < input.length; i++) {
      const result = element.run({ value: input[i], issues: [] }, ctx) as z.core.ParsePayload & { aborted?: boolean }
      const { issues } = result
      for (const issue of issues) payload.issues.push({ ...issue, path: [i, ...(issue.path ?? [])] })
      output[i] = result.value
      if (ctx?.abortEarly && issues.length && (result.aborted || issues.some((issue) => issue.continue !== true))) break
    }
    return payload
  }
})

/**
 * A list of `element`s (`z.array(element)`).
 *
 * @example
 * const stop = array(string()).check(maxLength(16))
 */
export function array<T extends z.core.SomeType>(element: T): z.ZodMiniArray<T> {
  return new ArraySchema({ type: 'array', element: element as unknown as z.core.$ZodType }) as unknown as z.ZodMiniArray<T>
}
