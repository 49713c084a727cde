/**
 * `podgate/durable-objects`: the Durable Object classes a podgate Worker must export from its main
 * module. Kept apart from `podgate` because they import `cloudflare:workers`, which only Workers have.
 *
 * @example
 * // your Worker's main module
 * export { QuotaObject } from 'podgate/durable-objects'
 */
export { QuotaObject, STREAM_LEASE_MS } from './quota/durable-object.ts'
