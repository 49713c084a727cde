/**
 * Issue 15, M6 / item 8: the Runpod API key goes to Runpod endpoints only. A `url:` endpoint gets the
 * bearer its config names (`apiKey`, from a secret) or none, and plain http to a non-loopback host is
 * refused when the gateway is built.
 */
import { describe, expect, it } from 'vitest'
import { ConfigError, createGateway } from '../../src/index.ts'
import { optionsFromEnv } from '../../workers/env.ts'
import { authed, chatBody, harness, RUNPOD_KEY } from '../helpers.ts'

/** A local handler server that answers every job at once and records the Authorization it was sent. */
function recordingUpstream() {
  const seen: (string | null)[] = []
  const fetch = async (input: RequestInfo | URL, init?: RequestInit) => {
    const request = new Request(input, init)
    seen.push(request.headers.get('authorization'))
    return Response.json({ id: 'local-1', status: 'COMPLETED', output: [{ choices: [{ tokens: ['hi'] }], usage: { input: 1, output: 1 } }] })
  }
  return { fetch, seen }
}

describe('M6: url: endpoints and the Runpod key', () => {
  it('upstream-M6-no-runpod-key: a url: endpoint without apiKey is sent no Authorization at all', async () => {
    const upstream = recordingUpstream()
    const h = harness({ models: { local: { endpoints: [{ url: 'https://worker.example.com' }], mode: 'native' } }, fetch: upstream.fetch })
    const { key } = await h.createKey()
    expect((await h.fetch('/v1/chat/completions', authed(key, chatBody('local')))).status).toBe(200)
    expect(upstream.seen).toEqual([null])
  })

  it('upstream-M6-own-key: a url: endpoint with apiKey gets that bearer, never the Runpod key', async () => {
    const upstream = recordingUpstream()
    const h = harness({ models: { local: { endpoints: [{ url: 'http://127.0.0.1:8000', apiKey: 'local_worker_secret' }], mode: 'native' } }, fetch: upstream.fetch })
    const { key } = await h.createKey()
    expect((await h.fetch('/v1/chat/completions', authed(key, chatBody('local')))).status).toBe(200)
    expect(upstream.seen).toEqual(['Bearer local_worker_secret'])
    expect(upstream.seen.join()).not.toContain(RUNPOD_KEY)
  })

  it('upstream-M6-plain-http: plain http:// to a non-loopback host is refused at config load with the fix named', () => {
    const build = (url: string) => () => createGateway({ models: { m: { endpoints: [{ url }] } }, runpod: { apiKey: RUNPOD_KEY } })
    expect(build('http://worker.example.com:8000')).toThrow(ConfigError)
    expect(build('http://10.0.0.5')).toThrow(/plain http:\/\/ to a host that is not loopback: use https:\/\//)
    for (const ok of ['http://127.0.0.1:8000', 'http://localhost:8000', 'http://[::1]:8000', 'https://worker.example.com']) expect(build(ok)).not.toThrow()
  })

  it('upstream-M6-worker-secret: the Worker reads a url: endpoint key from the secret its apiKeyEnv names', () => {
    const models = JSON.stringify({ local: { endpoints: [{ url: 'https://worker.example.com', apiKeyEnv: 'LOCAL_WORKER_KEY' }] } })
    const env = { PODGATE_KV: {} as KVNamespace, RUNPOD_API_KEY: RUNPOD_KEY, PODGATE_MODELS: models }
    const options = optionsFromEnv({ ...env, LOCAL_WORKER_KEY: 'from_a_secret' } as typeof env)
    expect(options.models.local?.endpoints).toEqual([{ url: 'https://worker.example.com', apiKey: 'from_a_secret' }])
    expect(() => optionsFromEnv(env)).toThrow(/LOCAL_WORKER_KEY.*wrangler secret put LOCAL_WORKER_KEY/)
  })
})
