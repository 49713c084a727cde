/**
 * Issue 15, L1 and item 11: what podgate says when the upstream fails reads true, and tells the caller
 * nothing the operator's worker should keep (a Python traceback), over HTTP through the gateway.
 */
import { describe, expect, it } from 'vitest'
import { createRunpodEmulator } from '../../src/testing/index.ts'
import { upstreamHttpError } from '../../src/upstream/runpod/client.ts'
import { authed, chatBody, harness, MODELS, RUNPOD_KEY } from '../helpers.ts'

const post = (key: string, body: unknown): RequestInit => authed(key, JSON.stringify(body))

describe('L1: JSON /status of a failed worker', () => {
  /** run_job's report of a plain function handler's exception; worker-vllm's generators get text (the emulator's). */
  const RUN_JOB_ERROR = JSON.stringify({
    error_type: "<class 'RuntimeError'>",
    error_message: 'Emulated handler failure (fault=job_failed).',
    error_traceback: 'Traceback (most recent call last):\n  File "handler.py", line 1, in handler\nRuntimeError: Emulated handler failure (fault=job_failed).\n',
    hostname: 'emulator',
    worker_id: 'emulator-worker',
    runpod_version: '1.12.0',
  })
  const handlers = {
    generator: { expected: (error: string) => expect(error).toBe('handler: Emulated handler failure (fault=job_failed).') },
    function: { expected: (error: string) => expect(JSON.parse(error)).toEqual({ error_type: "<class 'RuntimeError'>", error_message: 'Emulated handler failure (fault=job_failed).' }) },
  }

  it.each(Object.keys(handlers) as Array<keyof typeof handlers>)('upstream-L1 gives the handler message and type, never the traceback, on status, status-sync and runsync (a %s handler)', async (handler) => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const fetch = async (input: RequestInfo | URL, init?: RequestInit) => {
      const res = await emulator.fetch(new Request(input, init))
      if (handler === 'generator' || res.status !== 200) return res
      const body = (await res.json()) as { status?: string; error?: unknown }
      return Response.json(body.status === 'FAILED' ? { ...body, error: RUN_JOB_ERROR } : body)
    }
    const h = harness({ models: MODELS, fetch }, emulator)
    const { key } = await h.createKey()
    const input = { input: { messages: [{ role: 'user', content: 'x [[emulator:fault=job_failed]]' }] } }
    const run = (await (await h.fetch('/v2/chat-classic/run', post(key, input))).json()) as { id: string }
    const sync = await h.fetch('/v2/chat-classic/runsync', post(key, input))
    for (const res of [
      await h.fetch(`/v2/chat-classic/status/${run.id}`, authed(key)),
      await h.fetch(`/v2/chat-classic/status-sync/${run.id}`, authed(key)),
      sync,
    ]) {
      expect(res.status).toBe(200)
      const body = (await res.json()) as { status: string; error: string }
      expect(body.status).toBe('FAILED')
      handlers[handler].expected(body.error)
      expect(JSON.stringify(body)).not.toMatch(/Traceback|handler\.py|error_traceback|worker_id|hostname/)
    }
  })
})

/** A fake upstream answering every op with `answer`, recording the paths it was asked for. */
function fakeUpstream(answer: (path: string) => Response) {
  const paths: string[] = []
  const fetch = async (input: RequestInfo | URL, init?: RequestInit) => {
    const request = new Request(input, init)
    const path = new URL(request.url).pathname
    paths.push(path)
    return answer(path)
  }
  return { fetch, paths }
}

describe('item 11: a 404 says which thing is missing', () => {
  it('upstream-route-not-found: a route the upstream lacks is route_not_found (502), logged with its path and no key', async () => {
    const upstream = fakeUpstream(() => Response.json({ detail: 'Not Found' }, { status: 404 }))
    const h = harness({ models: { local: { endpoints: [{ url: 'http://127.0.0.1:8000', apiKey: 'local_worker_secret_key' }], mode: 'native' } }, fetch: upstream.fetch })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('local')))
    expect(res.status).toBe(502)
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('route_not_found')
    const line = h.logs.find((l) => l.includes('route_not_found'))
    expect(line).toContain('/run')
    expect(h.logs.join('\n')).not.toContain('local_worker_secret_key')
    expect(h.logs.join('\n')).not.toContain(RUNPOD_KEY)
  })

  it('upstream-job-not-found: a job the upstream forgot is job_not_found (404) on /status', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const h = harness({
      models: MODELS,
      fetch: async (input, init) => {
        const request = new Request(input, init)
        // Runpod's answer for an expired job: a 404 with its own body on the job's path.
        if (new URL(request.url).pathname.includes('/status/')) return Response.json({ error: 'request does not exist' }, { status: 404 })
        return emulator.fetch(request)
      },
    }, emulator)
    const { key } = await h.createKey()
    const run = (await (await h.fetch('/v2/chat-classic/run', post(key, { input: { prompt: 'hi' } }))).json()) as { id: string }
    const res = await h.fetch(`/v2/chat-classic/status/${run.id}`, authed(key))
    expect(res.status).toBe(404)
    expect(await res.json()).toMatchObject({ code: 'job_not_found' })
  })
})

describe('item 11: runpod-python local server output, as the handler returned it', () => {
  const classic = { choices: [{ tokens: ['Hello there'] }], usage: { input: 3, output: 2 } }
  const completion = { id: 'x', object: 'chat.completion', created: 1, model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: 'Hello there' }, finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } }
  // A generator handler's yields, aggregated; a handler that returned one value; a generator that yields lists.
  const outputs: [string, unknown][] = [
    ['a list of classic items', [classic]],
    ['a bare classic dict', classic],
    ['a bare vLLM completion dict', completion],
    ['a list of lists (a generator yielding batches)', [[classic]]],
  ]
  for (const [name, output] of outputs) {
    it(`upstream-local-output: non-streaming chat over ${name} reads as one answer`, async () => {
      const upstream = fakeUpstream(() => Response.json({ id: 'local-1', status: 'COMPLETED', output }))
      const h = harness({ models: { local: { endpoints: [{ url: 'http://127.0.0.1:8000' }], mode: 'native' } }, fetch: upstream.fetch })
      const { key } = await h.createKey()
      const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('local')))
      const body = (await res.json()) as { choices: { message: { content: string } }[] }
      expect(res.status).toBe(200)
      expect(body.choices[0]?.message.content).toBe('Hello there')
      expect(upstream.paths).toEqual(['/run'])
    })
  }
})

describe('an upstream error page that quotes the request', () => {
  it('loses the key the call carried before it becomes the caller\'s message, even where no error handler runs (a stream\'s error event)', async () => {
    const page = new Response(`400 Bad Request: header authorization="Bearer ${RUNPOD_KEY}" not allowed`, { status: 400 })
    const error = await upstreamHttpError(page, { url: 'https://api.runpod.ai/v2/abc/stream/1', jobOp: true, secret: RUNPOD_KEY })
    expect(error.code).toBe('invalid_request')
    expect(error.message).toBe('400 Bad Request: header authorization="Bearer [redacted]" not allowed')
  })
})

describe('a generator handler that raised (worker-vllm\'s handlers are async generators)', () => {
  // runpod-python's run_job_generator reports the exception as one string, its traceback inside it.
  const error = 'handler: Unclosed connection \ntraceback: Traceback (most recent call last):\n  File "/src/handler.py", line 147, in handler\n    yield await resp.json(content_type=None)\njson.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)\n'
  it('upstream-generator-traceback: the OpenAI surface names the failure, never the traceback, JSON and stream', async () => {
    const upstream = fakeUpstream((path) => Response.json(path === '/run' ? { id: 'local-1', status: 'IN_QUEUE' } : { id: 'local-1', status: 'FAILED', error }))
    const h = harness({ models: { local: { endpoints: [{ url: 'http://127.0.0.1:8000' }], mode: 'native' } }, fetch: upstream.fetch })
    const { key } = await h.createKey()
    for (const stream of [false, true]) {
      const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('local', 'Say hello', { stream })))
      const text = await res.text()
      expect(res.status).toBe(502)
      expect(text).toContain('Unclosed connection')
      expect(text).not.toMatch(/Traceback|handler\.py|JSONDecodeError/)
    }
  })
})
