import { describe, expect, it } from 'vitest'
import { resolveConfig } from '../config/resolve.ts'
import { resolveModels } from '../routing/models.ts'
import type { ResolvedModel } from '../routing/models.ts'
import { createJobSealer } from './job-id.ts'

function model(endpointIds: string[]): ResolvedModel {
  const config = resolveConfig({
    models: { m: { endpoints: endpointIds.map((endpointId) => ({ endpointId })), mode: 'native' } },
    runpod: { apiKey: 'rp_key' },
  })
  return resolveModels(config).get('m')!
}

describe('sealed job ids', () => {
  const sealer = createJobSealer('a-signing-secret-of-at-least-32-characters')
  const served = model(['aaa', 'bbb'])
  const endpoint = served.endpoints[1]!

  it('open what seal made, for the same key and model', async () => {
    const id = await sealer.seal({ kind: 'completion', endpoint, upstreamId: 'job-1-u1' }, { model: served, keyId: 'key_1' })
    expect(id).toMatch(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/)
    expect(await sealer.open(id, { model: served, keyId: 'key_1' })).toEqual({ kind: 'completion', endpoint, upstreamId: 'job-1-u1' })
  })

  it('refuse another key, another secret, and an endpoint list that changed since', async () => {
    const id = await sealer.seal({ kind: 'chat', endpoint, upstreamId: 'job-2' }, { model: served, keyId: 'key_1' })
    await expect(sealer.open(id, { model: served, keyId: 'key_2' })).rejects.toMatchObject({ code: 'not_found' })
    await expect(createJobSealer('another-secret-of-at-least-32-characters!').open(id, { model: served, keyId: 'key_1' })).rejects.toMatchObject({ code: 'not_found' })
    await expect(sealer.open(id, { model: model(['bbb', 'aaa']), keyId: 'key_1' })).rejects.toMatchObject({ code: 'not_found' })
    await expect(sealer.open(id, { model: model(['aaa']), keyId: 'key_1' })).rejects.toMatchObject({ code: 'not_found' })
  })

  it('refuse another spelling of the same signature (its last character has two spare bits)', async () => {
    const id = await sealer.seal({ kind: 'chat', endpoint, upstreamId: 'job-3' }, { model: served, keyId: 'key_1' })
    const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
    const respelled = id.slice(0, -1) + B64[B64.indexOf(id.at(-1)!) ^ 2]
    await expect(sealer.open(respelled, { model: served, keyId: 'key_1' })).rejects.toMatchObject({ code: 'not_found' })
  })
})
