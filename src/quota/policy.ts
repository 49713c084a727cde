/**
 * Quota policy: the limits a key (or a model / gateway default) carries. Stored on key records.
 */
import { z } from 'zod'

export const quotaPolicySchema = z
  .object({
    requestsPerMinute: z.number().int().positive().optional().describe('Requests per rolling minute window.'),
    requestsPerDay: z.number().int().positive().optional().describe('Requests per UTC day.'),
    tokensPerMinute: z.number().int().positive().optional().describe('Prompt + completion tokens per minute window.'),
    tokensPerDay: z.number().int().positive().optional().describe('Prompt + completion tokens per UTC day.'),
    maxConcurrentStreams: z.number().int().positive().optional().describe('Streams open at once.'),
    strict: z.boolean().optional().describe('Exact enforcement on a Durable Object instead of the KV store.'),
  })
  .strict()

export type QuotaPolicy = z.infer<typeof quotaPolicySchema>
