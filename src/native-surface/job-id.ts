/**
 * Job ids as the native surface hands them out: the upstream job id, the endpoint that runs it and what
 * kind of input started it, sealed to the model alias and the calling key. Status, stream and cancel
 * calls therefore need no storage, and a caller can only ever reach its own jobs.
 *
 * Format: `base64url(payload).base64url(HMAC-SHA256(k, alias \n keyId \n endpoint base \n payload))`,
 * payload `v1:<kind>:<endpoint index>:<upstream id>`, then a job's quota reservation as JSON while its first
 * terminal poll is to correct it (`held`), `k` the `podgate/job/v1` signing key. The alias,
 * key id and endpoint are bound by the MAC, not written in the id: another key, another model, a
 * reordered endpoint list or a changed byte all fail the same check and get the same 404.
 * The upstream id is readable in the payload; it grants nothing without podgate's Runpod key.
 */
import { GatewayError } from '../errors/index.ts'
import { base64url, encoder, fromBase64url, sign, signingKey, verify } from '../crypto/signing.ts'
import type { ResolvedModel } from '../routing/models.ts'
import { assertJobId } from '../upstream/runpod/client.ts'
import type { Endpoint } from '../upstream/runpod/client.ts'
import type { CompletionContext } from '../pipeline/index.ts'

/** What the job's input was: worker-vllm chat or completion (text can be extracted), or passthrough. */
export type JobKind = 'chat' | 'completion' | 'raw'
const decoder = new TextDecoder()

export interface JobRef {
  kind: JobKind
  endpoint: Endpoint
  /** The id Runpod knows the job by. Never shown to callers except inside the sealed id. */
  upstreamId: string
  /** The quota reservation of a job that was still running when submitted (and its prompt estimate, `p`). */
  held?: CompletionContext['job']
}

export interface JobBinding {
  model: ResolvedModel
  /** The calling key (tokens share their parent key's id, so they see the parent's jobs). */
  keyId: string
}

/** Checked before any decoding: anything else in a path (`/`, `%2F`, newlines, `..`) is refused at once. */
const SEALED_ID = /^[A-Za-z0-9_-]{8,400}\.[A-Za-z0-9_-]{43}$/
const PAYLOAD = /^v1:([cpr]):(\d{1,2}):([A-Za-z0-9_-]{1,128})({.*})?$/
const KIND_CODE: Record<JobKind, string> = { chat: 'c', completion: 'p', raw: 'r' }
const CODE_KIND: Record<string, JobKind> = { c: 'chat', p: 'completion', r: 'raw' }

function bound(payload: string, endpoint: Endpoint, binding: JobBinding): string {
  return `${binding.model.alias}\n${binding.keyId}\n${endpoint.base}\n${payload}`
}

/** The one answer for every id that does not open: nothing tells a forged id from another caller's. */
export function jobNotFound(): GatewayError {
  return new GatewayError('not_found', 'No such job: the id is unknown, expired, or belongs to another key or model.')
}

export interface JobSealer {
  seal(ref: JobRef, binding: JobBinding): Promise<string>
  /** Opens an id for this caller and model, or throws the one `not_found` error. */
  open(id: string, binding: JobBinding): Promise<JobRef>
}

/**
 * @example
 * const jobs = createJobSealer(config.signingSecret ?? config.runpod.apiKey)
 * const id = await jobs.seal({ kind: 'chat', endpoint, upstreamId: job.id }, { model, keyId })
 * const ref = await jobs.open(c.req.param('id'), { model, keyId })
 */
export function createJobSealer(secret: string): JobSealer {
  const key = () => signingKey(secret, 'podgate/job/v1')
  return {
    async seal(ref, binding) {
      const index = binding.model.endpoints.indexOf(ref.endpoint)
      // An endpoint the model does not list is refused as an id that cannot be Runpod's is.
      assertJobId(index < 0 ? '' : ref.upstreamId)
      const payload = `v1:${KIND_CODE[ref.kind]}:${index}:${ref.upstreamId}${JSON.stringify(ref.held) ?? ''}`
      const signature = await sign(await key(), bound(payload, ref.endpoint, binding))
      return `${base64url(encoder.encode(payload))}.${signature}`
    },
    async open(id, binding) {
      if (!SEALED_ID.test(id)) throw jobNotFound()
      const dot = id.indexOf('.')
      const bytes = fromBase64url(id.slice(0, dot))
      const match = bytes ? PAYLOAD.exec(decoder.decode(bytes)) : null
      const endpoint = match ? binding.model.endpoints[Number(match[2])] : undefined
      if (!match || !endpoint) throw jobNotFound()
      const payload = match[0]
      if (!(await verify(await key(), bound(payload, endpoint, binding), id.slice(dot + 1)))) throw jobNotFound()
      return { kind: CODE_KIND[match[1]!]!, endpoint, upstreamId: match[3]!, held: match[4] && JSON.parse(match[4]) }
    },
  }
}
