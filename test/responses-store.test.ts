/**
 * `/v1/responses`' conversation state fields (`previous_response_id`, `store`, `background`, `include`,
 * `conversation`) through podgate and the Runpod emulator, which answers them as vLLM's
 * serving_responses.py does: they reach vLLM unchanged on both URL shapes, and vLLM's answers (its 404
 * for a response it does not hold, its 400 for `background` without a store) come back to the caller.
 * A stored response lives on the worker that wrote it: a later call finds it only on that worker.
 */
import { describe, expect, it } from 'vitest'
import { createRunpodEmulator } from '../src/testing/index.ts'
import { authed, harness, readSSE, RUNPOD_KEY } from './helpers.ts'

const PATHS = ['/v1/responses', '/v2/chat-openai/openai/v1/responses']
const ENDPOINT = 'vllmopenai'

async function setup(options: { store?: boolean; now?: () => number } = {}) {
  const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY, now: options.now, endpoints: { [ENDPOINT]: { responsesStore: options.store ?? false } } })
  const h = harness({}, emulator)
  const { key } = await h.createKey()
  const post = (path: string, body: Record<string, unknown>) => h.fetch(path, authed(key, JSON.stringify({ model: 'chat-openai', ...body })))
  const upstream = () => h.emulator.lastRequest(ENDPOINT)?.body as Record<string, unknown> | undefined
  return { h, post, upstream }
}

/** The final `response` of a stream (`response.completed`), or the JSON answer. */
async function answerOf(res: Response, stream: boolean): Promise<{ id: string; status: string; usage: { input_tokens: number } | null }> {
  if (!stream) return res.json()
  const events = (await readSSE(res)) as Array<{ type: string; response?: never }>
  return events.find((e) => e.type === 'response.completed')!.response!
}

describe('/v1/responses: state fields reach vLLM unchanged', () => {
  const fields = { store: false, background: false, include: ['message.output_text.logprobs'], conversation: 'conv_123', previous_response_id: null }
  for (const path of PATHS) {
    it.each([false, true])(`${path}, stream: %s`, async (stream) => {
      const { post, upstream } = await setup()
      const res = await post(path, { input: 'Hi', stream, ...fields })
      expect(res.status, await res.clone().text()).toBe(200)
      expect(upstream()).toMatchObject({ input: 'Hi', stream, ...fields })
    })
  }
})

describe('/v1/responses: a previous_response_id vLLM does not hold', () => {
  for (const path of PATHS) {
    it.each([false, true])(`${path}, stream: %s: the caller's 404 with vLLM's message, the id sent as written`, async (stream) => {
      const { post, upstream } = await setup()
      const res = await post(path, { input: 'Hi', stream, previous_response_id: 'resp_gone' })
      expect(res.status).toBe(404)
      expect(await res.json()).toMatchObject({ error: { type: 'invalid_request_error', message: "Response with id 'resp_gone' not found." } })
      expect(upstream()).toMatchObject({ previous_response_id: 'resp_gone', stream })
    })
  }
})

describe('/v1/responses: store and previous_response_id on a vLLM with its store on', () => {
  it.each([false, true])('a stored answer (stream: %s) continues on the same worker: the earlier turn is in the prompt', async (stream) => {
    const { post, upstream } = await setup({ store: true })
    const first = await answerOf(await post('/v1/responses', { input: 'My name is Ada.', stream }), stream)
    expect(first.id).toMatch(/^resp_/)
    const fresh = await (await post('/v1/responses', { input: 'What is my name?' })).json() as { usage: { input_tokens: number } }
    for (const path of PATHS) {
      const res = await post(path, { input: 'What is my name?', previous_response_id: first.id, stream })
      expect(res.status).toBe(200)
      expect(upstream()).toMatchObject({ previous_response_id: first.id })
      const next = await answerOf(res, stream)
      expect(next.status).toBe('completed')
      expect(next.usage!.input_tokens).toBeGreaterThan(fresh.usage.input_tokens)
    }
  })

  it('store: false keeps nothing, and a worker that went cold forgot what it stored: both a 404', async () => {
    let clock = 1_000_000
    const { post } = await setup({ store: true, now: () => clock })
    const unstored = await (await post('/v1/responses', { input: 'Hi', store: false })).json() as { id: string }
    expect((await post('/v1/responses', { input: 'Again', previous_response_id: unstored.id })).status).toBe(404)
    const stored = await (await post('/v1/responses', { input: 'Hi' })).json() as { id: string }
    expect((await post('/v1/responses', { input: 'Again', previous_response_id: stored.id })).status).toBe(200)
    clock += 10 * 60_000
    const res = await post('/v1/responses', { input: 'Again', previous_response_id: stored.id })
    expect(res.status).toBe(404)
    expect(await res.json()).toMatchObject({ error: { type: 'invalid_request_error', message: `Response with id '${stored.id}' not found.` } })
  })
})

describe('/v1/responses: background', () => {
  it.each([false, true])('on a vLLM without a store (its default), stream: %s: vLLM\'s 400, relayed', async (stream) => {
    const { post, upstream } = await setup()
    const res = await post('/v1/responses', { input: 'Hi', background: true, stream })
    expect(res.status).toBe(400)
    expect(await res.json()).toMatchObject({ error: { type: 'invalid_request_error', message: expect.stringContaining('does not support the background mode') } })
    expect(upstream()).toMatchObject({ background: true, stream })
  })

  it('with store: false: vLLM\'s 400, relayed', async () => {
    const { post } = await setup({ store: true })
    const res = await post('/v1/responses', { input: 'Hi', background: true, store: false })
    expect(res.status).toBe(400)
    expect(await res.json()).toMatchObject({ error: { type: 'invalid_request_error', message: 'background can only be used when `store` is true' } })
  })

  it('on a vLLM with its store on: vLLM\'s queued response, relayed; a later turn finds it on that worker', async () => {
    const { post } = await setup({ store: true })
    const res = await post('/v1/responses', { input: 'Hi', background: true })
    expect(res.status).toBe(200)
    const queued = await res.json() as { id: string; status: string; output: unknown[]; usage: unknown }
    expect(queued).toMatchObject({ status: 'queued', output: [], usage: null })
    expect((await post('/v1/responses', { input: 'Again', previous_response_id: queued.id })).status).toBe(200)
  })
})
