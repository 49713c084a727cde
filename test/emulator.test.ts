/**
 * The Runpod + worker-vllm emulator against the wire facts of shared/runpod-api.md: op shapes, the
 * time-driven job lifecycle (fake clock), the three native output shapes, the OpenAI route, faults,
 * directives and the control API. Runs in workerd, in-process.
 */
import { createParser } from 'eventsource-parser'
import { describe, expect, it } from 'vitest'
import { createRunpodEmulator } from '../src/testing/index.ts'
import type { EmulatorOptions, RunpodEmulator } from '../src/testing/index.ts'

type Json = Record<string, unknown>
interface ChatChunk {
  object?: string
  choices: { index: number; delta?: { role?: string; content?: string }; text?: string; finish_reason: string | null }[]
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number }
}
interface StreamBody {
  id: string
  status: string
  stream: { output: unknown }[]
}

const BASE = 'http://emulator.test'

/** An emulator on a fake clock, with small request helpers. */
function setup(options: EmulatorOptions = {}) {
  const clock = { t: 1_700_000_000_000 }
  const emulator = createRunpodEmulator({ now: () => clock.t, ...options })
  const send = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
    emulator.fetch(
      new Request(`${BASE}${path}`, {
        method,
        headers: { 'content-type': 'application/json', ...headers },
        body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
      }),
    )
  const json = async <T = Json>(method: string, path: string, body?: unknown): Promise<T> => {
    const res = await send(method, path, body)
    expect(res.status, `${method} ${path}`).toBe(200)
    return (await res.json()) as T
  }
  const run = async (endpoint: string, input: Json, extra: Json = {}) =>
    (await json<{ id: string; status: string }>('POST', `/v2/${endpoint}/run`, { input, ...extra })).id
  const status = (endpoint: string, id: string) => json('GET', `/v2/${endpoint}/status/${id}`)
  const stream = (endpoint: string, id: string) => json<StreamBody>('GET', `/v2/${endpoint}/stream/${id}?wait=0`)
  return { emulator, clock, send, json, run, status, stream }
}

const chat = (content: string) => [{ role: 'user', content }]

/** Every `data:` payload of an SSE text. */
function sseData(text: string): string[] {
  const data: string[] = []
  const parser = createParser({ onEvent: (event) => data.push(event.data) })
  parser.feed(text)
  return data
}

/** The text of choice `index` in SSE chunk payloads (chat deltas or completion text). */
function sseText(payloads: string[], index = 0): string {
  let text = ''
  for (const payload of payloads) {
    if (payload === '[DONE]') continue
    for (const choice of (JSON.parse(payload) as ChatChunk).choices) {
      if (choice.index === index) text += choice.delta?.content ?? choice.text ?? ''
    }
  }
  return text
}

/** Drains /stream until the job is terminal and returns every item. */
async function drain(h: ReturnType<typeof setup>, endpoint: string, id: string): Promise<unknown[]> {
  const items: unknown[] = []
  for (let i = 0; i < 1000; i++) {
    const body = await h.stream(endpoint, id)
    items.push(...body.stream.map((s) => s.output))
    if (['COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT'].includes(body.status)) return items
    h.clock.t += 5
  }
  throw new Error('job never ended')
}

/** The non-streaming answer of a chat on the current (OpenAI JSON) shape. */
async function currentText(h: ReturnType<typeof setup>, input: Json): Promise<string> {
  const body = await h.json<{ output: { choices: { message: { content: string } }[] }[] }>('POST', '/v2/vllmcurrent/runsync', { input })
  return body.output[0]?.choices[0]?.message.content ?? ''
}

describe('native ops', () => {
  it('answers every op in Runpod shapes, with and without the /v2 prefix', async () => {
    const h = setup()
    const input = { messages: chat('Hello') }
    const id = await h.run('vllmcurrent', input)
    expect(id).toMatch(/^[0-9a-f-]+-u1$/)
    const done = await h.json('GET', `/vllmcurrent/status/${id}`)
    expect(done).toMatchObject({ id, status: 'COMPLETED', delayTime: 0, executionTime: 0 })
    expect(Array.isArray(done.output)).toBe(true)
    expect(await h.json('POST', `/v2/vllmcurrent/status/${id}`)).toMatchObject({ id, status: 'COMPLETED' })

    const sync = await h.json('POST', '/v2/vllmcurrent/runsync?wait=1000', { input })
    expect(sync).toMatchObject({ status: 'COMPLETED', output: [{ object: 'chat.completion' }] })
    expect(String(sync.id)).toMatch(/^sync-/)
    expect(await h.json('GET', `/v2/vllmcurrent/status-sync/${id}?wait=10`)).toMatchObject({ status: 'COMPLETED' })
    expect(await h.json('POST', `/v2/vllmcurrent/stream/${id}?wait=0`)).toMatchObject({ id, status: 'COMPLETED' })

    expect(await h.json('POST', `/v2/vllmcurrent/cancel/${id}`, {})).toEqual({ id, status: 'COMPLETED' })
    expect(await h.json('POST', '/v2/vllmcurrent/purge-queue', {})).toEqual({ removed: 0, status: 'completed' })
    const health = await h.json('GET', '/v2/vllmcurrent/health')
    expect(health).toMatchObject({
      jobs: { completed: 2, failed: 0, inProgress: 0, inQueue: 0, retried: 0 },
      workers: { idle: 1, running: 0, throttled: 0, initializing: 0, ready: 1 },
    })
  })

  it('answers 404 to unknown jobs and other endpoints, 400 to bad bodies', async () => {
    const h = setup()
    expect((await h.send('GET', '/v2/vllmcurrent/status/nope')).status).toBe(404)
    const id = await h.run('vllmcurrent', { prompt: 'x' })
    expect((await h.send('GET', `/v2/other/status/${id}`)).status).toBe(404)
    const bad = await h.send('POST', '/v2/vllmcurrent/run', '{not json')
    expect(bad.status).toBe(400)
    expect(await bad.text()).toMatch(/JSON/)
    expect((await h.send('POST', '/v2/vllmcurrent/run', { nope: 1 })).status).toBe(400)
    expect((await h.send('POST', `/v2/vllmcurrent/retry/${id}`)).status).toBe(400)
  })

  it('fails a job whose input has neither messages, prompt nor openai_route', async () => {
    const h = setup()
    for (const endpoint of ['vllmclassic', 'vllmcurrent']) {
      const body = await h.json('POST', `/v2/${endpoint}/runsync`, { input: { hello: 'world' } })
      expect(body.status).toBe('FAILED')
      expect(typeof body.error).toBe('string')
    }
  })
})

describe('job lifecycle on a fake clock', () => {
  it('goes IN_QUEUE -> IN_PROGRESS -> COMPLETED from cold start and token delay, then stays warm', async () => {
    const h = setup({ endpoints: { slow: { coldStartMs: 1000, tokenDelayMs: 10, warmForMs: 5000 } } })
    const id = await h.run('slow', { prompt: 'count [[emulator:tokens=20]]', sampling_params: { max_tokens: 50 } })
    expect(await h.status('slow', id)).toEqual({ id, status: 'IN_QUEUE' })
    h.clock.t += 999
    expect((await h.status('slow', id)).status).toBe('IN_QUEUE')
    h.clock.t += 1
    expect(await h.status('slow', id)).toMatchObject({ status: 'IN_PROGRESS', delayTime: 1000 })
    h.clock.t += 199
    expect((await h.status('slow', id)).status).toBe('IN_PROGRESS')
    h.clock.t += 1
    expect(await h.status('slow', id)).toMatchObject({ status: 'COMPLETED', delayTime: 1000, executionTime: 200 })
    expect(h.emulator.activeJobs()).toEqual([])

    // The worker is warm now: no queue time...
    const warm = await h.run('slow', { prompt: 'again' })
    expect((await h.status('slow', warm)).status).toBe('IN_PROGRESS')
    // ...until it has idled for warmForMs.
    h.clock.t += 60_000
    const cold = await h.run('slow', { prompt: 'later' })
    expect((await h.status('slow', cold)).status).toBe('IN_QUEUE')
    expect((await h.json('GET', '/v2/slow/health')).workers).toMatchObject({ initializing: 1 })
  })

  it('long-polls /runsync and /status-sync until the job ends or the wait runs out', async () => {
    const h = setup({ now: Date.now, endpoints: { paced: { tokenDelayMs: 5 } } })
    const started = Date.now()
    const sync = await h.json('POST', '/v2/paced/runsync?wait=5000', { input: { prompt: 'x [[emulator:tokens=10]]' } })
    expect(sync.status).toBe('COMPLETED')
    expect(Date.now() - started).toBeLessThan(2000)

    const stalled = await h.json('POST', '/v2/paced/runsync?wait=50', { input: { prompt: 'x [[emulator:fault=stall]]' } })
    expect(stalled).toEqual({ id: stalled.id, status: 'IN_PROGRESS', delayTime: 0, workerId: 'emulator-paced' })
    expect((await h.json('GET', `/v2/paced/status-sync/${String(stalled.id)}?wait=20`)).status).toBe('IN_PROGRESS')
  })

  it("applies the endpoint's execution timeout and job TTL settings, which a job's own policy overrides", async () => {
    const h = setup({ endpoints: { vllmcurrent: { executionTimeoutMs: 1_000 }, vllmclassic: { coldStartMs: 10_000, ttlMs: 2_000 } } })
    const stuck = await h.run('vllmcurrent', { prompt: '[[emulator:fault=stall]]' })
    const longer = await h.run('vllmcurrent', { prompt: '[[emulator:fault=stall]]' }, { policy: { executionTimeout: 3_000 } })
    // The TTL counts from submission, the queue included: a job no worker took by then never runs.
    const queued = await h.run('vllmclassic', { prompt: 'x' })
    const kept = await h.run('vllmclassic', { prompt: 'x' }, { policy: { ttl: 60_000 } })
    h.clock.t += 1_000
    expect((await h.status('vllmcurrent', stuck)).status).toBe('TIMED_OUT')
    expect((await h.status('vllmcurrent', longer)).status).toBe('IN_PROGRESS')
    h.clock.t += 1_000
    expect((await h.status('vllmclassic', queued)).status).toBe('TIMED_OUT')
    expect((await h.status('vllmclassic', kept)).status).toBe('IN_QUEUE')
    h.clock.t += 1_000
    expect((await h.status('vllmcurrent', longer)).status).toBe('TIMED_OUT')
  })

  it('removes a job whose TTL runs out after a worker took it, running or done: every op on it answers 404 (Runpod docs, "TTL is a hard limit")', async () => {
    const h = setup({ endpoints: { paced: { tokenDelayMs: 100 } } })
    const running = await h.run('paced', { prompt: '[[emulator:fault=stall,after=3]]' }, { policy: { ttl: 2_000 } })
    const done = await h.run('paced', { prompt: '[[emulator:tokens=5]]' }, { policy: { ttl: 2_000 } })
    h.clock.t += 1_999
    expect((await h.status('paced', running)).status).toBe('IN_PROGRESS')
    expect((await h.status('paced', done)).status).toBe('COMPLETED')
    h.clock.t += 1
    for (const id of [running, done]) {
      for (const [method, op] of [['GET', 'status'], ['POST', 'status'], ['GET', 'status-sync'], ['GET', 'stream'], ['POST', 'cancel']] as const) {
        expect((await h.send(method, `/v2/paced/${op}/${id}?wait=0`)).status, `${method} ${op}`).toBe(404)
      }
    }
    expect(h.emulator.job(running)).toBeUndefined()
  })

  it('ends a long poll that was waiting when the job was removed at its TTL with 404', async () => {
    const h = setup({ now: Date.now, maxWaitMs: 5_000 })
    for (const op of ['status-sync', 'stream']) {
      const id = await h.run('vllmcurrent', { prompt: '[[emulator:fault=stall,after=1]]' }, { policy: { ttl: 300 } })
      // The items that exist already, so the long poll below has nothing to answer before the TTL.
      expect((await h.send('GET', `/v2/vllmcurrent/stream/${id}?wait=0`)).status).toBe(200)
      const started = Date.now()
      expect((await h.send('GET', `/v2/vllmcurrent/${op}/${id}?wait=5000`)).status, op).toBe(404)
      expect(Date.now() - started, op).toBeLessThan(2_000)
    }
  })

  it('honours policy.executionTimeout and keeps results for the retention time only', async () => {
    const h = setup()
    const stuck = await h.run('vllmcurrent', { prompt: '[[emulator:fault=stall]]' }, { policy: { executionTimeout: 5000 } })
    h.clock.t += 4999
    expect((await h.status('vllmcurrent', stuck)).status).toBe('IN_PROGRESS')
    h.clock.t += 1
    expect(await h.status('vllmcurrent', stuck)).toMatchObject({ status: 'TIMED_OUT', executionTime: 5000 })

    const kept = await h.run('vllmcurrent', { prompt: 'a' })
    const sync = String((await h.json('POST', '/v2/vllmcurrent/runsync', { input: { prompt: 'b' } })).id)
    h.clock.t += 60_000
    expect((await h.send('GET', `/v2/vllmcurrent/status/${sync}`)).status).toBe(404)
    expect((await h.send('GET', `/v2/vllmcurrent/status/${kept}`)).status).toBe(200)
    h.clock.t += 30 * 60_000
    expect((await h.send('GET', `/v2/vllmcurrent/status/${kept}`)).status).toBe(404)
    expect(h.emulator.job(kept)).toBeUndefined()
  })
})

describe('/stream', () => {
  it('returns only the items produced since the previous call, always as an array', async () => {
    const h = setup({ endpoints: { vllmclassic: { coldStartMs: 100, tokenDelayMs: 10 } } })
    const id = await h.run('vllmclassic', { prompt: 'p [[emulator:tokens=13]]', stream: true })
    expect(await h.stream('vllmclassic', id)).toEqual({ id, status: 'IN_QUEUE', stream: [] })
    h.clock.t += 100 + 10 // first token
    const first = await h.stream('vllmclassic', id)
    expect(first.status).toBe('IN_PROGRESS')
    expect(first.stream).toHaveLength(1)
    expect((await h.stream('vllmclassic', id)).stream).toEqual([])
    h.clock.t += 30 // tokens 2..4: the second batch (3 tokens)
    expect((await h.stream('vllmclassic', id)).stream).toHaveLength(1)
    h.clock.t += 1000
    const rest = await h.stream('vllmclassic', id)
    expect(rest.status).toBe('COMPLETED')
    expect(rest.stream).toHaveLength(1) // the last 9 tokens
    expect(await h.stream('vllmclassic', id)).toEqual({ id, status: 'COMPLETED', stream: [] })
  })

  it('answers the last items IN_PROGRESS to a poll that was waiting when the job ended: the end is posted after them', async () => {
    const h = setup()
    const ends = [['p [[emulator:tokens=5,cold=50]]', 'COMPLETED'], ['p [[emulator:tokens=5,cold=50,fault=mid_stream,after=3]]', 'FAILED']]
    for (const endpoint of ['vllmclassic', 'vllmcurrent']) {
      for (const [prompt, end] of ends) {
        const id = await h.run(endpoint, { prompt, stream: true })
        const page = h.json<StreamBody>('GET', `/v2/${endpoint}/stream/${id}?wait=5000`)
        // The poll's way to its wait holds no I/O: it waits on the queued job by now. The job then runs whole at once.
        await new Promise((resolve) => setTimeout(resolve, 10))
        h.clock.t += 50
        const last = await page
        expect(last.status).toBe('IN_PROGRESS')
        expect(last.stream.length).toBeGreaterThan(0)
        expect(await h.stream(endpoint, id)).toEqual({ id, status: end, stream: [] })
        // A poll that comes after the end gets the items and the end together.
        const late = await h.run(endpoint, { prompt, stream: true })
        h.clock.t += 50
        const page2 = await h.stream(endpoint, late)
        expect(page2.status).toBe(end)
        expect(page2.stream.length).toBeGreaterThan(0)
      }
    }
  })

  it('returns as soon as an item exists instead of waiting the whole long poll', async () => {
    const h = setup({ now: Date.now, endpoints: { paced: { tokenDelayMs: 30, generation: 'classic' } } })
    const id = await h.run('paced', { prompt: 'p [[emulator:tokens=3]]', stream: true })
    const started = Date.now()
    const body = await h.json<StreamBody>('GET', `/v2/paced/stream/${id}?wait=5000`)
    expect(body.stream).toHaveLength(1)
    expect(Date.now() - started).toBeLessThan(1000)
  })
})

describe('classic worker-vllm output', () => {
  it('streams token batches growing 1, 3, 9, 27, 50 with cumulative usage', async () => {
    const h = setup()
    const input = { prompt: 'grow [[emulator:tokens=120]]', sampling_params: { max_tokens: 500 }, stream: true }
    const items = (await drain(h, 'vllmclassic', await h.run('vllmclassic', input))) as {
      choices: { tokens: string[] }[]
      usage: { input: number; output: number }
    }[]
    expect(items.map((i) => i.choices[0]?.tokens.length)).toEqual([1, 3, 9, 27, 50, 30])
    expect(items.map((i) => i.usage.output)).toEqual([1, 4, 13, 40, 90, 120])
    const streamed = items.flatMap((i) => i.choices[0]?.tokens ?? []).join('')

    const sync = await h.json<{ output: { choices: { tokens: string[] }[]; usage: { output: number } }[] }>(
      'POST',
      '/v2/vllmclassic/runsync',
      { input: { ...input, stream: false } },
    )
    expect(sync.output).toHaveLength(1)
    expect(sync.output[0]?.choices[0]?.tokens).toEqual([streamed])
    expect(sync.output[0]?.usage.output).toBe(120)
  })

  it('honours batch params and n (one choices entry per n, counted together)', async () => {
    const h = setup()
    const input = {
      prompt: 'n [[emulator:tokens=6]]',
      sampling_params: { n: 2 },
      stream: true,
      min_batch_size: 2,
      batch_size_growth_factor: 2,
      max_batch_size: 4,
    }
    const items = (await drain(h, 'vllmclassic', await h.run('vllmclassic', input))) as { choices: { tokens: string[] }[] }[]
    expect(items.every((i) => i.choices.length === 2)).toBe(true)
    expect(items.map((i) => i.choices[0]!.tokens.length + i.choices[1]!.tokens.length)).toEqual([2, 4, 4, 2])
    const texts = [0, 1].map((c) => items.flatMap((i) => i.choices[c]?.tokens ?? []).join(''))
    expect(texts[0]).not.toEqual(texts[1])
  })

  it('streams whole SSE events in growing batches for OpenAI passthrough input', async () => {
    const h = setup()
    const openai_input = { model: 'm', messages: chat('pass [[emulator:tokens=20]]'), stream: true }
    const items = await drain(h, 'vllmclassic', await h.run('vllmclassic', { openai_route: '/v1/chat/completions', openai_input }))
    expect(items.every((i) => typeof i === 'string' && i.startsWith('data: ') && i.endsWith('\n\n'))).toBe(true)
    const perItem = (items as string[]).map((i) => sseData(i).length)
    // 1 role chunk + 20 token chunks + [DONE] = 22 events.
    expect(perItem).toEqual([1, 3, 9, 9])
    const payloads = sseData((items as string[]).join(''))
    expect(payloads.at(-1)).toBe('[DONE]')
    expect(payloads.some((p) => p.includes('"usage"'))).toBe(false)

    const sync = await h.json<{ output: { choices: { message: { content: string } }[] }[] }>('POST', '/v2/vllmclassic/runsync', {
      input: { openai_route: '/v1/chat/completions', openai_input: { ...openai_input, stream: false } },
    })
    expect(sync.output[0]?.choices[0]?.message.content).toBe(sseText(payloads))
  })

  it('with rawOpenAIOutput false (RAW_OPENAI_OUTPUT=0), streams lists of the chunk objects instead, no [DONE], batched as events are', async () => {
    const raw = setup()
    const listed = setup({ endpoints: { vllmclassic: { rawOpenAIOutput: false } } })
    const openai_input = { model: 'm', messages: chat('pass [[emulator:tokens=20]]'), stream: true }
    const text = await drain(raw, 'vllmclassic', await raw.run('vllmclassic', { openai_route: '/v1/chat/completions', openai_input }))
    const items = (await drain(listed, 'vllmclassic', await listed.run('vllmclassic', { openai_route: '/v1/chat/completions', openai_input }))) as Json[][]
    expect(items.every((i) => Array.isArray(i) && i.every((chunk) => chunk.object === 'chat.completion.chunk'))).toBe(true)
    // engine.py skips `[DONE]` before counting a batch: 21 chunks in batches of 1, 3, 9, then the 8 left.
    expect(items.map((i) => i.length)).toEqual([1, 3, 9, 8])
    const payloads = sseData((text as string[]).join(''))
    expect(items.flat()).toHaveLength(payloads.length - 1)
    expect(sseText(items.flat().map((chunk) => JSON.stringify(chunk)))).toBe(sseText(payloads))
    // Not streamed, the answer is the same JSON either way.
    const body = { input: { openai_route: '/v1/chat/completions', openai_input: { ...openai_input, stream: false } } }
    const sync = await listed.json<{ output: { object: string }[] }>('POST', '/v2/vllmclassic/runsync', body)
    expect(sync.output[0]?.object).toBe('chat.completion')
  })

  it('ends FAILED with the repr of its engine\'s catch-all error item on a mid-stream failure, the item itself not streamed (runpod-python)', async () => {
    const h = setup()
    const id = await h.run('vllmclassic', { prompt: 'x [[emulator:fault=mid_stream,after=5,tokens=30]]', stream: true })
    const items = (await drain(h, 'vllmclassic', id)) as Json[]
    const tokens = items.flatMap((i) => (i as { choices: { tokens: string[] }[] }).choices[0]?.tokens ?? [])
    expect(tokens).toHaveLength(5)
    // engine.py's vLLMEngine.generate yields `{"error": create_error_response(str(e)).model_dump()}` for any
    // exception of a generation: vLLM's whole error body, stamped BadRequestError / 400 whatever the cause.
    expect(await h.status('vllmclassic', id)).toMatchObject({
      status: 'FAILED',
      error: "{'error': {'message': 'Emulated worker failure after 5 tokens (fault=mid_stream). EngineCore encountered an issue. See stack trace (above) for the root cause.', 'type': 'BadRequestError', 'param': None, 'code': 400}}",
    })
  })
})

describe('current worker-vllm output', () => {
  it('cuts raw SSE at arbitrary byte boundaries that reassemble exactly into the non-stream answer', async () => {
    const h = setup()
    const input = { messages: chat('Tell me something long [[emulator:tokens=60]]'), sampling_params: { max_tokens: 100 }, stream: true }
    const items = await drain(h, 'vllmcurrent', await h.run('vllmcurrent', input))
    expect(items.length).toBeGreaterThan(5)
    expect(items.every((i) => typeof i === 'string')).toBe(true)
    expect((items as string[]).some((i) => !i.endsWith('\n\n'))).toBe(true)
    const joined = (items as string[]).join('')
    expect(joined).not.toContain('\uFFFD')
    const payloads = sseData(joined)
    expect(payloads.at(-1)).toBe('[DONE]')
    // worker-vllm >= v2.24 posts `{...sampling_params, stream}`: no stream_options, so vLLM sends no usage chunk.
    const last = JSON.parse(payloads.at(-2) ?? '{}') as ChatChunk
    expect(last.choices[0]?.finish_reason).toBe('stop')
    expect(payloads.some((p) => p.includes('"usage"'))).toBe(false)
    expect(sseText(payloads)).toBe(await currentText(h, { ...input, stream: false }))
  })

  it('streams text_completion chunks for a prompt', async () => {
    const h = setup()
    const items = (await drain(h, 'vllmcurrent', await h.run('vllmcurrent', { prompt: 'p [[emulator:tokens=9]]', stream: true }))) as string[]
    const payloads = sseData(items.join(''))
    expect((JSON.parse(payloads[0] ?? '{}') as ChatChunk).object).toBe('text_completion')
    expect(sseText(payloads).split(' ')).toHaveLength(9)
  })

  it('turns split multibyte characters into U+FFFD only with mangleUtf8', async () => {
    const h = setup()
    const input = (mangle: string) => ({ prompt: `utf8 [[emulator:tokens=400${mangle}]]`, sampling_params: { max_tokens: 400 }, stream: true })
    for (let i = 0; i < 5; i++) {
      const exact = (await drain(h, 'vllmcurrent', await h.run('vllmcurrent', input('')))) as string[]
      expect(exact.join('')).not.toContain('\uFFFD')
    }
    // Cuts are seeded by the job id, so each job cuts differently. About 70% of these ~90 KB streams
    // have a cut inside a character: 40 jobs all missing is a ~1e-21 event.
    let mangled = 0
    for (let i = 0; i < 40 && mangled === 0; i++) {
      const items = (await drain(h, 'vllmcurrent', await h.run('vllmcurrent', input(',mangle=1')))) as string[]
      if (items.join('').includes('\uFFFD')) mangled++
    }
    expect(mangled).toBe(1)
  })

  it('ends FAILED with the repr of the error object item on a mid-stream failure, the item itself not streamed (runpod-python)', async () => {
    const h = setup()
    const id = await h.run('vllmcurrent', { messages: chat('[[emulator:fault=mid_stream,after=3]]'), stream: true })
    const items = await drain(h, 'vllmcurrent', id)
    expect(items.every((i) => typeof i === 'string')).toBe(true)
    const payloads = sseData((items as string[]).join(''))
    expect(payloads).not.toContain('[DONE]')
    expect(sseText(payloads).split(' ')).toHaveLength(3)
    expect(await h.status('vllmcurrent', id)).toMatchObject({
      status: 'FAILED',
      error: "{'message': 'Emulated worker failure after 3 tokens (fault=mid_stream).', 'type': 'worker_error', 'code': None}",
    })
  })
})

describe('deterministic generation', () => {
  it('gives the same answer in every shape, streamed or not', async () => {
    const h = setup()
    const messages = chat('What is the same? [[emulator:tokens=25]]')
    const sampling_params = { max_tokens: 50, seed: 7 }
    const classic = await h.json<{ output: { choices: { tokens: string[] }[] }[] }>('POST', '/v2/vllmclassic/runsync', {
      input: { messages, sampling_params },
    })
    const expected = classic.output[0]?.choices[0]?.tokens[0]
    expect(expected?.split(' ')).toHaveLength(25)
    expect(await currentText(h, { messages, sampling_params })).toBe(expected)

    const route = await h.send('POST', '/v2/vllmopenai/openai/v1/chat/completions', { model: 'm', messages, max_tokens: 50, seed: 7 })
    expect(((await route.json()) as { choices: { message: { content: string } }[] }).choices[0]?.message.content).toBe(expected)
    const streamed = await h.send('POST', '/v2/vllmopenai/openai/v1/chat/completions', { model: 'm', messages, max_tokens: 50, seed: 7, stream: true })
    expect(sseText(sseData(await streamed.text()))).toBe(expected)

    const other = await currentText(h, { messages, sampling_params: { ...sampling_params, seed: 8 } })
    expect(other).not.toBe(expected)
  })

  it('caps at max_tokens (finish length) and ends before a stop string (finish stop)', async () => {
    const h = setup()
    const capped = await h.json<{ choices: { text: string; finish_reason: string }[]; usage: Json }>('POST', '/vllmopenai/openai/v1/completions', {
      prompt: 'p [[emulator:tokens=30]]',
      max_tokens: 4,
    })
    expect(capped.choices[0]?.finish_reason).toBe('length')
    expect(capped.choices[0]?.text.split(' ')).toHaveLength(4)
    expect(capped.usage).toMatchObject({ completion_tokens: 4 })

    const full = capped.choices[0]?.text ?? ''
    const stop = full.split(' ')[2] ?? ''
    const stopped = await h.json<{ choices: { text: string; finish_reason: string }[] }>('POST', '/vllmopenai/openai/v1/completions', {
      prompt: 'p [[emulator:tokens=30]]',
      max_tokens: 4,
      stop: [` ${stop}`],
    })
    expect(stopped.choices[0]?.finish_reason).toBe('stop')
    expect(stopped.choices[0]?.text).toBe(full.slice(0, full.indexOf(` ${stop}`)))
  })
})

describe('OpenAI route', () => {
  it('streams real SSE: role chunk, one chunk per token, finish_reason, usage only when asked, [DONE]', async () => {
    const h = setup()
    const body = { model: 'm', messages: chat('sse [[emulator:tokens=5]]'), stream: true }
    const res = await h.send('POST', '/v2/vllmopenai/openai/v1/chat/completions', body)
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/)
    const payloads = sseData(await res.text())
    expect(payloads).toHaveLength(1 + 5 + 1)
    const chunks = payloads.slice(0, -1).map((p) => JSON.parse(p) as ChatChunk)
    expect(chunks[0]?.choices[0]?.delta?.role).toBe('assistant')
    expect(chunks.every((c) => c.object === 'chat.completion.chunk')).toBe(true)
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe('stop')
    expect(payloads.at(-1)).toBe('[DONE]')

    const withUsage = await h.send('POST', '/v2/vllmopenai/openai/v1/chat/completions', { ...body, stream_options: { include_usage: true } })
    const usagePayloads = sseData(await withUsage.text())
    const usage = JSON.parse(usagePayloads.at(-2) ?? '{}') as ChatChunk
    expect(usage).toMatchObject({ choices: [], usage: { completion_tokens: 5 } })
    expect(usage.usage?.total_tokens).toBe((usage.usage?.prompt_tokens ?? 0) + 5)
    expect(sseText(usagePayloads)).toBe(sseText(payloads))
  })

  it('gives each of n choices its own text, the same streamed or not', async () => {
    const h = setup()
    const body = { model: 'm', messages: chat('two [[emulator:tokens=6]]'), n: 2 }
    const json = await h.json<{ choices: { index: number; message: { content: string } }[] }>('POST', '/vllmopenai/openai/v1/chat/completions', body)
    expect(json.choices.map((c) => c.index)).toEqual([0, 1])
    expect(json.choices[0]?.message.content).not.toBe(json.choices[1]?.message.content)
    const res = await h.send('POST', '/vllmopenai/openai/v1/chat/completions', { ...body, stream: true })
    const payloads = sseData(await res.text())
    expect([sseText(payloads, 0), sseText(payloads, 1)]).toEqual(json.choices.map((c) => c.message.content))
  })

  it('answers vLLM error JSON to bad input and to another model than the served one', async () => {
    const h = setup({ endpoints: { named: { servedModelName: 'meta/llama' } } })
    const missing = await h.send('POST', '/v2/named/openai/v1/chat/completions', { model: 'meta/llama' })
    expect(missing.status).toBe(400)
    expect(await missing.json()).toMatchObject({ error: { type: 'BadRequestError', param: null, code: 400 } })
    const badJson = await h.send('POST', '/v2/named/openai/v1/completions', '{')
    expect(badJson.status).toBe(400)
    const wrong = await h.send('POST', '/v2/named/openai/v1/chat/completions', { model: 'other', messages: chat('x') })
    expect(wrong.status).toBe(404)
    expect(await wrong.json()).toMatchObject({ error: { type: 'NotFoundError', code: 404 } })
    const models = await h.json<{ data: { id: string }[] }>('GET', '/v2/named/openai/v1/models')
    expect(models.data[0]?.id).toBe('meta/llama')
  })

  it('paces chunks by the token delay', async () => {
    const h = setup({ now: Date.now })
    const started = Date.now()
    const res = await h.send('POST', '/vllmopenai/openai/v1/completions', { prompt: '[[emulator:tokens=5,delay=40]]', stream: true })
    expect(Date.now() - started).toBeLessThan(100) // headers first; the waiting happens in the body
    await res.text()
    expect(Date.now() - started).toBeGreaterThanOrEqual(190)
  })
})

describe('faults', () => {
  it('answers an endpoint HTTP fault to matching ops for the first `times` requests', async () => {
    const h = setup({ endpoints: { flaky: { fault: { kind: 'http', status: 429, times: 2, ops: ['run'], retryAfter: 3 } } } })
    const body = { input: { prompt: 'x' } }
    const first = await h.send('POST', '/v2/flaky/run', body)
    expect(first.status).toBe(429)
    expect(first.headers.get('retry-after')).toBe('3')
    expect((await h.send('POST', '/v2/flaky/run', body)).status).toBe(429)
    expect((await h.send('POST', '/v2/flaky/runsync', body)).status).toBe(200) // op not listed
    expect((await h.send('POST', '/v2/flaky/run', body)).status).toBe(200)
  })

  it('answers a directive HTTP fault on native and OpenAI routes', async () => {
    const h = setup()
    const native = await h.send('POST', '/v2/vllmcurrent/run', { input: { prompt: '[[emulator:fault=http,status=503]]' } })
    expect(native.status).toBe(503)
    const route = await h.send('POST', '/v2/vllmcurrent/openai/v1/chat/completions', { messages: chat('[[emulator:fault=http,status=502]]') })
    expect(route.status).toBe(502)
    expect(h.emulator.activeJobs()).toEqual([])
  })

  it('stalls a job after N tokens until it is cancelled', async () => {
    const h = setup()
    const id = await h.run('vllmclassic', { prompt: '[[emulator:fault=stall,after=4]]', stream: true })
    const first = await h.stream('vllmclassic', id)
    expect(first.status).toBe('IN_PROGRESS')
    expect(first.stream.flatMap((s) => (s.output as { choices: { tokens: string[] }[] }).choices[0]?.tokens ?? [])).toHaveLength(4)
    h.clock.t += 100_000
    expect(await h.stream('vllmclassic', id)).toEqual({ id, status: 'IN_PROGRESS', stream: [] })
    expect(h.emulator.activeJobs().map((j) => j.id)).toEqual([id])
    expect(await h.json('POST', `/v2/vllmclassic/cancel/${id}`)).toEqual({ id, status: 'CANCELLED' })
    expect(h.emulator.activeJobs()).toEqual([])
  })

  it('fails a job before any output with job_failed, and a retry re-runs it', async () => {
    const h = setup({ endpoints: { broken: { fault: { kind: 'job_failed' } } } })
    const id = await h.run('broken', { prompt: 'x', stream: true })
    expect(await h.stream('broken', id)).toEqual({ id, status: 'FAILED', stream: [] })
    const failed = await h.status('broken', id)
    expect(typeof failed.error).toBe('string')
    expect(failed.output).toBeUndefined()

    h.emulator.configure('broken', { fault: undefined })
    expect(await h.json('POST', `/v2/broken/retry/${id}`)).toEqual({ id, status: 'IN_QUEUE' })
    expect(await h.status('broken', id)).toMatchObject({ status: 'COMPLETED', retries: 1 })
    expect((await h.json('GET', '/v2/broken/health')).jobs).toMatchObject({ completed: 1, retried: 1 })

    const route = await h.send('POST', '/v2/broken/openai/v1/completions', { prompt: '[[emulator:fault=job_failed]]' })
    expect(route.status).toBe(500)
  })

  it("reports job_failed as runpod-python reports a generator handler's exception (worker-vllm's handlers are generators)", async () => {
    const h = setup()
    for (const endpoint of ['vllmclassic', 'vllmcurrent']) {
      const id = await h.run(endpoint, { prompt: 'x [[emulator:fault=job_failed]]', stream: true })
      // rp_job.run_job_generator: `{"error": f"handler: {str(err)} \ntraceback: {traceback.format_exc()}"}`,
      // not run_job's JSON of error_type / error_message, which only a plain function handler gets.
      expect(await h.status(endpoint, id)).toMatchObject({
        status: 'FAILED',
        error: expect.stringMatching(/^handler: Emulated handler failure \(fault=job_failed\)\. \ntraceback: Traceback \(most recent call last\):\n[\s\S]*RuntimeError: Emulated handler failure \(fault=job_failed\)\.\n$/),
      })
    }
  })

  it('breaks the OpenAI SSE body after N tokens on mid_stream, with no [DONE]', async () => {
    const h = setup()
    const res = await h.send('POST', '/vllmopenai/openai/v1/chat/completions', {
      messages: chat('[[emulator:fault=mid_stream,after=3]]'),
      stream: true,
    })
    expect(res.status).toBe(200)
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader()
    let text = ''
    const error = await (async () => {
      for (;;) {
        const { done, value } = await reader.read()
        if (done) return undefined
        text += value
      }
    })().catch((e: unknown) => e)
    expect(error).toBeInstanceOf(Error)
    const payloads = sseData(text)
    expect(payloads).not.toContain('[DONE]')
    expect(payloads).toHaveLength(1 + 3)
  })
})

describe('fault=error_event: vLLM\'s in-band error', () => {
  const inBand = expect.objectContaining({ error: { message: expect.stringContaining('EngineCore encountered an issue'), type: 'BadRequestError', param: null, code: 400 } })

  it('a chat stream on the OpenAI route: N tokens, the error event, then [DONE], and the body ends whole', async () => {
    const h = setup()
    const res = await h.send('POST', '/vllmopenai/openai/v1/chat/completions', { messages: chat('[[emulator:fault=error_event,after=3]]'), stream: true })
    expect(res.status).toBe(200)
    const payloads = sseData(await res.text())
    expect(payloads).toHaveLength(1 + 3 + 2)
    expect(JSON.parse(payloads.at(-2)!)).toEqual(inBand)
    expect(payloads.at(-1)).toBe('[DONE]')
  })

  it('a current worker\'s job relays it in its SSE text, and the job completes', async () => {
    const h = setup()
    const id = await h.run('vllmcurrent', { messages: chat('[[emulator:fault=error_event,after=3]]'), stream: true })
    const payloads = sseData(((await drain(h, 'vllmcurrent', id)) as string[]).join(''))
    expect(sseText(payloads.slice(0, -2)).split(' ')).toHaveLength(3)
    expect(JSON.parse(payloads.at(-2)!)).toEqual(inBand)
    expect(payloads.at(-1)).toBe('[DONE]')
    expect((await h.status('vllmcurrent', id)).status).toBe('COMPLETED')
  })

  it('a classic worker\'s openai_route job sends it as whole events in its items', async () => {
    const h = setup()
    const id = await h.run('vllmclassic', { openai_route: '/v1/completions', openai_input: { prompt: 'x [[emulator:fault=error_event,after=2]]', stream: true } })
    const payloads = sseData(((await drain(h, 'vllmclassic', id)) as string[]).join(''))
    expect(JSON.parse(payloads.at(-2)!)).toEqual(inBand)
    expect(payloads.at(-1)).toBe('[DONE]')
    expect((await h.status('vllmclassic', id)).status).toBe('COMPLETED')
  })

  it('where no SSE carries it (a classic native generation, no stream) it fails as mid_stream does', async () => {
    const h = setup()
    const id = await h.run('vllmclassic', { prompt: 'x [[emulator:fault=error_event,after=5,tokens=30]]', stream: true })
    await drain(h, 'vllmclassic', id)
    expect(await h.status('vllmclassic', id)).toMatchObject({ status: 'FAILED', error: expect.stringContaining("'code': 400") })
    const res = await h.send('POST', '/vllmopenai/openai/v1/chat/completions', { messages: chat('[[emulator:fault=error_event,after=3]]') })
    expect(res.status).toBe(500)
  })
})

describe('directives', () => {
  it('sets token count, cold start and token delay per request', async () => {
    const h = setup()
    const id = await h.run('vllmcurrent', { messages: chat('[[emulator:tokens=7,cold=500,delay=5]]'), stream: false })
    h.clock.t += 499
    expect((await h.status('vllmcurrent', id)).status).toBe('IN_QUEUE')
    h.clock.t += 1
    expect((await h.status('vllmcurrent', id)).status).toBe('IN_PROGRESS')
    h.clock.t += 35
    const done = await h.status('vllmcurrent', id)
    expect(done).toMatchObject({ status: 'COMPLETED', delayTime: 500, executionTime: 35 })
    expect(done.output).toMatchObject([{ usage: { completion_tokens: 7 } }])
  })
})

describe('cancel', () => {
  it('stops output: no item after the cancel, status CANCELLED', async () => {
    const h = setup({ endpoints: { vllmcurrent: { tokenDelayMs: 10 } } })
    const id = await h.run('vllmcurrent', { prompt: '[[emulator:tokens=40]]', stream: true })
    h.clock.t += 50
    const before = await h.stream('vllmcurrent', id)
    expect(before.stream.length).toBeGreaterThan(0)
    expect(await h.json('POST', `/v2/vllmcurrent/cancel/${id}`, {})).toEqual({ id, status: 'CANCELLED' })
    h.clock.t += 10_000
    expect(await h.stream('vllmcurrent', id)).toEqual({ id, status: 'CANCELLED', stream: [] })
    expect(h.emulator.job(id)).toMatchObject({ status: 'CANCELLED', itemsDelivered: before.stream.length })
  })

  it('purges queued jobs only', async () => {
    const h = setup({ endpoints: { queued: { coldStartMs: 5000 } } })
    const a = await h.run('queued', { prompt: 'a' })
    await h.run('queued', { prompt: 'b' })
    expect(await h.json('POST', '/v2/queued/purge-queue', {})).toEqual({ removed: 2, status: 'completed' })
    expect((await h.send('GET', `/v2/queued/status/${a}`)).status).toBe(404)
  })
})

describe('auth, calls and control API', () => {
  it('requires the Bearer key on every op and records each call', async () => {
    const h = setup({ apiKey: 'rp_key' })
    const body = JSON.stringify({ input: { prompt: 'x' } })
    const denied = await h.emulator.fetch(new Request(`${BASE}/v2/e/run`, { method: 'POST', body }))
    expect(denied.status).toBe(401)
    const wrong = await h.emulator.fetch(new Request(`${BASE}/v2/e/openai/v1/models`, { headers: { authorization: 'Bearer nope' } }))
    expect(wrong.status).toBe(401)
    const ok = await h.emulator.fetch(new Request(`${BASE}/v2/e/run`, { method: 'POST', body, headers: { authorization: 'Bearer rp_key' } }))
    expect(ok.status).toBe(200)
    const { id } = (await ok.json()) as { id: string }
    await h.emulator.fetch(new Request(`${BASE}/nowhere`))

    expect(h.emulator.calls).toEqual([
      { method: 'POST', path: '/v2/e/run', endpointId: 'e', op: 'run', status: 401, authorized: false, at: h.clock.t },
      { method: 'GET', path: '/v2/e/openai/v1/models', endpointId: 'e', op: 'openai', status: 401, authorized: false, at: h.clock.t },
      { method: 'POST', path: '/v2/e/run', endpointId: 'e', op: 'run', jobId: id, status: 200, authorized: true, at: h.clock.t },
      { method: 'GET', path: '/nowhere', endpointId: null, op: 'unknown', status: 404, authorized: true, at: h.clock.t },
    ])
  })

  it('serves calls, jobs, configure and reset over HTTP', async () => {
    const h = setup()
    const configured = await h.send('POST', '/__emulator/configure', { endpointId: 'ctl', behaviour: { fault: { kind: 'stall', afterTokens: 0 } } })
    expect(configured.status).toBe(200)
    const id = await h.run('ctl', { prompt: 'x' })
    const jobs = await h.json<{ id: string; status: string }[]>('GET', '/__emulator/jobs')
    expect(jobs.map((j) => [j.id, j.status])).toEqual([[id, 'IN_PROGRESS']])
    const calls = await h.json<{ op: string }[]>('GET', '/__emulator/calls')
    expect(calls.map((c) => c.op)).toEqual(['control', 'run', 'control'])
    expect((await h.send('POST', '/__emulator/configure', { endpointId: 'ctl', behaviour: { nope: 1 } })).status).toBe(400)

    await h.json('POST', '/__emulator/reset')
    expect(h.emulator.calls).toEqual([])
    expect(h.emulator.activeJobs()).toEqual([])
    // Reset also drops configure overrides: the endpoint is back to defaults.
    const fresh = await h.json('POST', '/v2/ctl/runsync', { input: { prompt: 'x' } })
    expect(fresh.status).toBe('COMPLETED')
  })

  it('does not leak state between emulators', () => {
    const a: RunpodEmulator = createRunpodEmulator()
    const b = createRunpodEmulator()
    a.configure('x', { generation: 'classic' })
    expect(a.calls).not.toBe(b.calls)
  })
})

describe("Runpod's rate limits (rateLimitScale)", () => {
  it('refuse past the requests per 10 s of an op with 429, per endpoint and op, until the window moves on', async () => {
    // A hundredth of Runpod's numbers: /run 10 per 10 s, /cancel 1.
    const h = setup({ endpoints: { vllmcurrent: { rateLimitScale: 0.01 } } })
    const runs = []
    for (let i = 0; i < 11; i++) runs.push((await h.send('POST', '/v2/vllmcurrent/run', { input: { prompt: 'x' } })).status)
    expect(runs).toEqual([...Array(10).fill(200), 429])
    // Another op, and another endpoint, have buckets of their own.
    const id = await h.run('vllmclassic', { prompt: 'x' })
    expect((await h.send('GET', `/v2/vllmclassic/status/${id}`)).status).toBe(200)
    const job = h.emulator.calls.find((call) => call.endpointId === 'vllmcurrent' && call.op === 'run' && call.status === 200)!.jobId!
    expect((await h.send('POST', `/v2/vllmcurrent/cancel/${job}`, {})).status).toBe(200)
    const refused = await h.send('POST', `/v2/vllmcurrent/cancel/${job}`, {})
    expect(refused.status).toBe(429)
    expect(await refused.text()).toContain('rate limit')
    h.clock.t += 10_000
    expect((await h.send('POST', '/v2/vllmcurrent/run', { input: { prompt: 'x' } })).status).toBe(200)
    expect((await h.send('POST', `/v2/vllmcurrent/cancel/${job}`, {})).status).toBe(200)
  })

  it('refuse a request past the requests at once: a long poll holds its place while it waits', async () => {
    // 0.0025 of Runpod's: /status-sync 5 per 10 s, 1 at once.
    const h = setup({ endpoints: { vllmcurrent: { rateLimitScale: 0.0025 } } })
    const id = await h.run('vllmcurrent', { prompt: 'x [[emulator:fault=stall]]' })
    const waiting = h.send('GET', `/v2/vllmcurrent/status-sync/${id}?wait=1000`)
    await new Promise((resolve) => setTimeout(resolve, 20))
    expect((await h.send('GET', `/v2/vllmcurrent/status-sync/${id}?wait=0`)).status).toBe(429)
    await h.send('POST', `/v2/vllmcurrent/cancel/${id}`, {})
    expect((await waiting).status).toBe(200)
    expect((await h.send('GET', `/v2/vllmcurrent/status-sync/${id}?wait=0`)).status).toBe(200)
  })

  it('are off by default, and set at run time like every switch', async () => {
    const h = setup()
    for (let i = 0; i < 30; i++) expect((await h.send('POST', '/v2/vllmcurrent/run', { input: { prompt: 'x' } })).status).toBe(200)
    const configured = await h.send('POST', '/__emulator/configure', { endpointId: 'vllmcurrent', behaviour: { rateLimitScale: 0.001 } })
    expect(configured.status).toBe(200)
    expect((await h.send('POST', '/v2/vllmcurrent/run', { input: { prompt: 'x' } })).status).toBe(200)
    expect((await h.send('POST', '/v2/vllmcurrent/run', { input: { prompt: 'x' } })).status).toBe(429)
  })
})
