/**
 * Checks for src/zod/'s stand-ins against zod's own schemas: the same parse (output or issues) for each
 * input, and the same JSON Schema for input and output. Test-only (the build leaves `__fixtures__` out).
 */
import { expect } from 'vitest'
import * as z from 'zod/mini'

/** Issues carry their input and zod's default wording, so a difference in either shows. */
const PARSE_CONTEXT = { error: () => 'default', reportInput: true }

/** A parse as data (`{ data }`) or as its issues (`{ issues }`), comparable as JSON. */
export function resultOf(schema: z.ZodMiniType, input: unknown): { data: unknown } | { issues: unknown[] } {
  const result = schema.safeParse(input, PARSE_CONTEXT)
  return result.success ? { data: result.data } : { issues: result.error.issues }
}

/** JSON of `value` that tells a member set to undefined from an absent one. */
function showUndefined(value: unknown): string {
  return JSON.stringify(value, (_key, member: unknown) => (member === undefined ? '<undefined>' : member))
}

/** Each of `ours` parses each of its inputs exactly as the same-placed schema of `theirs` does. */
export function expectSameParses(ours: Array<[z.ZodMiniType, unknown[]]>, theirs: Array<[z.ZodMiniType, unknown[]]>): void {
  ours.forEach(([schema, inputs], i) => {
    for (const input of inputs) expect(showUndefined(resultOf(schema, input)), `${i} ${JSON.stringify(input)}`).toBe(showUndefined(resultOf(theirs[i]![0], input)))
  })
}

/** Each of `ours` shows in JSON Schema, input and output, as the same-placed schema of `theirs` does. */
export function expectSameJsonSchemas(ours: Array<[z.ZodMiniType, unknown[]]>, theirs: Array<[z.ZodMiniType, unknown[]]>): void {
  ours.forEach(([schema], i) => {
    for (const io of ['input', 'output'] as const) expect(JSON.stringify(z.toJSONSchema(schema, { io })), `${i} ${io}`).toBe(JSON.stringify(z.toJSONSchema(theirs[i]![0], { io })))
  })
}
