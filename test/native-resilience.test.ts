/**
 * Native jobs under Runpod's own limits (runpod-api.md §1): a job outlives the call that queued it and
 * stops only when cancelled, every op is rate-limited (`/cancel` the most), and `/stream` is a long poll
 * that hands out each item once. Found by an independent review; each case failed before its fix.
 */
import { env } from 'cloudflare:test'
import { createParser } from 'eventsource-parser'
import type { EventSourceMessage } from 'eventsource-parser'
import { describe, expect, it, vi } from 'vitest'
import type { GatewayOptions } from '../src/index.ts'
import { createRunpodEmulator } from '../src/testing/index.ts'
import { droppingFetch, harness, heldFetch, MODELS, readSome, readSSE, RUNPOD_KEY, streamedText } from './helpers.ts'
import type { Harness } from './helpers.ts'

const post = (key: string, body: unknown, extra: RequestInit = {}): RequestInit => ({
  method: 'POST',
  headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
  body: JSON.stringify(body),
  ...extra,
})
const chat = (model: string, content: string, extra: Record<string, unknown> = {}) => ({ model, max_tokens: 1000, messages: [{ role: 'user', content }], ...extra })
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** A streamed worker-vllm job started on `model` through podgate's `/v2` surface: its id. */
async function startStreamJob(h: Harness, key: string, model: string, content: string, maxTokens: number): Promise<string> {
  const res = await h.fetch(`/v2/${model}/run`, post(key, { input: { messages: [{ role: 'user', content }], stream: true, sampling_params: { max_tokens: maxTokens } } }))
  return ((await res.json()) as { id: string }).id
}

/** Job `id` followed as Server-Sent Events (`GET /v2/{model}/stream/{id}`) to its end. */
async function jobEvents(h: Harness, key: string, model: string, id: string): Promise<EventSourceMessage[]> {
  const events: EventSourceMessage[] = []
  createParser({ onEvent: (event) => events.push(event) }).feed(await (await h.fetch(`/v2/${model}/stream/${id}`, { headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream' } })).text())
  return events
}

describe('native streams: polls', () => {
  it('a long answer on a current worker stays within the poll budget: polls are paced, not one per item', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const h = harness({ runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', maxPollsPerStream: 45 } }, emulator)
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', post(key, chat('chat-current', 'long [[emulator:tokens=300,delay=10]]', { stream: true })))
    const events = await readSSE(res)
    expect(events.at(-1)).toBe('[DONE]')
    const polls = emulator.calls.filter((call) => call.op === 'stream').length
    // ~3 s of output at one poll per 200 ms; one poll per item would be hundreds (and over the budget of 45).
    expect(polls).toBeLessThanOrEqual(30)
  })

  it('a streamed completion of several prompts is paced for all their tokens, and stays within the poll budget', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const h = harness({ runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', maxPollsPerStream: 45 } }, emulator)
    const { key } = await h.createKey()
    // Four prompts of 100 tokens each (an `openai_route` job): 400 events to come, where max_tokens is 300.
    const prompt = ['a [[emulator:tokens=100,delay=10]]', 'b', 'c', 'd']
    const res = await h.fetch('/v1/completions', post(key, { model: 'chat-current', prompt, max_tokens: 300, stream: true }))
    const events = await readSSE(res)
    expect(events.at(-1)).toBe('[DONE]')
    expect(emulator.calls.filter((call) => call.op === 'stream').length).toBeLessThanOrEqual(45)
  })

  it('an answer the budget covers a poll a token is not paced: its tokens reach the caller as they come', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const h = harness({}, emulator)
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', post(key, chat('chat-current', 'short [[emulator:tokens=40,delay=15]]', { stream: true, max_tokens: 100 })))
    expect((await readSSE(res)).at(-1)).toBe('[DONE]')
    // About a poll an item; paced at 200 ms the 600 ms answer would take a handful.
    expect(emulator.calls.filter((call) => call.op === 'stream').length).toBeGreaterThanOrEqual(20)
  })

  it('one refused poll (429) does not end a healthy OpenAI stream: it is asked again', async () => {
    const h = harness()
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', post(key, chat('chat-classic', 'x [[emulator:tokens=200,delay=20]]', { stream: true, max_tokens: 300 })))
    const reader = res.body!.getReader()
    const decoder = new TextDecoder()
    let text = ''
    let refused = false
    for (;;) {
      const { value, done } = await reader.read()
      if (done) break
      text += decoder.decode(value, { stream: true })
      if (!refused && text.length > 500) {
        refused = true
        h.emulator.configure('vllmclassic', { fault: { kind: 'http', status: 429, ops: ['stream'], times: 1 } })
      }
    }
    expect(refused).toBe(true)
    expect(h.emulator.calls.some((call) => call.op === 'stream' && call.status === 429)).toBe(true)
    expect(text.trim().split('\n\n').at(-1)).toBe('data: [DONE]')
  })

  /**
   * A Runpod whose `count`th `/stream` answer is lost on its way back (a proxy's 502 after Runpod handed
   * out the page): the items it held are gone for good, and podgate asks the poll again.
   */
  function losingPage(emulator: ReturnType<typeof createRunpodEmulator>, count: number): GatewayOptions['fetch'] {
    let polls = 0
    return async (input, init) => {
      const request = new Request(input, init)
      const response = await emulator.fetch(request)
      if (!new URL(request.url).pathname.includes('/stream/') || ++polls !== count) return response
      await response.text()
      return new Response('<html>502 Bad Gateway</html>', { status: 502, headers: { 'content-type': 'text/html' } })
    }
  }

  it.each(['chat-classic', 'chat-current'])('%s: a poll asked again after a 5xx whose page was lost upstream does not end a cut answer as whole', async (model) => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const h = harness({ fetch: losingPage(emulator, 3) }, emulator)
    const { key } = await h.createKey()
    const events = await readSSE(await h.fetch('/v1/chat/completions', post(key, chat(model, 'lost [[emulator:tokens=30,delay=20]]', { stream: true, max_tokens: 60 }))))
    expect(emulator.calls.some((call) => call.op === 'stream' && call.status === 200)).toBe(true)
    expect(events).not.toContain('[DONE]')
    expect(events.at(-1)).toMatchObject({ error: { code: 'upstream_error' } })
  })

  it.each(['chat-classic', 'chat-current'])('%s: a job event stream whose poll lost a page behind a 5xx ends with an error, not done', async (model) => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const h = harness({ fetch: losingPage(emulator, 3), runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', streamWaitMs: 300 } }, emulator)
    const { key } = await h.createKey()
    const id = await startStreamJob(h, key, model, 'lost [[emulator:tokens=30,delay=20]]', 60)
    const events = await jobEvents(h, key, model, id)
    expect(emulator.calls.some((call) => call.op === 'stream' && call.status === 200)).toBe(true)
    expect(events.at(-1)?.event).toBe('error')
    expect(JSON.parse(events.at(-1)!.data)).toMatchObject({ status: 'COMPLETED', code: 'upstream_error', error: expect.stringContaining('/status') })
  })

  it.each(['chat-classic', 'chat-current'])('%s: a job event stream whose page was lost behind a 5xx mid-job, long before the end, ends with an error, not done', async (model) => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const h = harness({ fetch: losingPage(emulator, 2), runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', streamWaitMs: 100 } }, emulator)
    const { key } = await h.createKey()
    const id = await startStreamJob(h, key, model, 'lost [[emulator:tokens=80,delay=20]]', 100)
    const events = await jobEvents(h, key, model, id)
    // The refused poll's page was not the last: a later poll brought the job's end.
    const sent = events.filter((event) => event.event === 'output').length
    const saved = (await (await h.fetch(`/v2/${model}/status/${id}`, { headers: { authorization: `Bearer ${key}` } })).json()) as { output: unknown[] }
    expect(sent).toBeGreaterThan(0)
    expect(sent).toBeLessThan(saved.output.length)
    expect(emulator.calls.filter((call) => call.op === 'stream' && call.status === 200).length).toBeGreaterThan(3)
    expect(events.at(-1)?.event).toBe('error')
  })

  /**
   * `losingPage`, and then the poll after the job's terminal page that held items breaks (no status): the
   * answer's rest comes from the saved output, which the lost page shifted.
   */
  function losingPageThenCut(emulator: ReturnType<typeof createRunpodEmulator>, count: number): GatewayOptions['fetch'] {
    const lose = losingPage(emulator, count)!
    let cutNext = false
    return async (input, init) => {
      const request = new Request(input, init)
      const stream = new URL(request.url).pathname.includes('/stream/')
      if (stream && cutNext) {
        cutNext = false
        throw new TypeError('network connection lost')
      }
      const response = await lose(request)
      if (stream && response.status === 200) {
        const page = (await response.clone().json()) as { status: string; stream: unknown[] }
        cutNext = ['COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT'].includes(page.status) && page.stream.length > 0
      }
      return response
    }
  }

  it.each(['chat-classic', 'chat-current'])('%s: a page lost behind a 5xx, then a cut after the terminal page: the job event stream ends with an error, not a shifted replay and done', async (model) => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const h = harness({ fetch: losingPageThenCut(emulator, 2), runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', streamWaitMs: 100 } }, emulator)
    const { key } = await h.createKey()
    const id = await startStreamJob(h, key, model, 'lost [[emulator:tokens=80,delay=20]]', 100)
    const events = await jobEvents(h, key, model, id)
    expect(events.filter((event) => event.event === 'output').length).toBeGreaterThan(0)
    expect(events.at(-1)?.event).toBe('error')
  })

  // The current worker hands out one item a token, so a late poll finds the job's end with items in its page
  // every time; the classic worker's growing batches make that a matter of timing. `saved` is the same code for both.
  it('a page lost behind a 5xx, then a cut after the terminal page: the OpenAI stream ends with an error, not a shifted replay and [DONE]', async () => {
    const model = 'chat-current'
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const losing = losingPageThenCut(emulator, 2)!
    // Each poll arrives late, so the job's last page is its terminal one and holds items.
    let cut = false
    const late: GatewayOptions['fetch'] = async (input, init) => {
      if (new URL(new Request(input, init).url).pathname.includes('/stream/')) await new Promise((resolve) => setTimeout(resolve, 150))
      return losing(input, init).catch((error: unknown) => {
        cut = true
        throw error
      })
    }
    const h = harness({ fetch: late, runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', streamWaitMs: 100 } }, emulator)
    const { key } = await h.createKey()
    const events = await readSSE(await h.fetch('/v1/chat/completions', post(key, chat(model, 'lost [[emulator:tokens=80,delay=20]]', { stream: true, max_tokens: 100 }))))
    expect(cut).toBe(true)
    expect(streamedText(events).length).toBeGreaterThan(0)
    expect(events).not.toContain('[DONE]')
    expect(events.at(-1)).toMatchObject({ error: { code: 'upstream_error' } })
  })

  it('a poll asked again after a 429 (nothing handed out) still ends whole', async () => {
    const h = harness()
    const { key } = await h.createKey()
    h.emulator.configure('vllmcurrent', { fault: { kind: 'http', status: 429, ops: ['stream'], times: 2 } })
    const events = await readSSE(await h.fetch('/v1/chat/completions', post(key, chat('chat-current', 'ok [[emulator:tokens=30,delay=20]]', { stream: true, max_tokens: 60 }))))
    expect(events.at(-1)).toBe('[DONE]')
    expect(streamedText(events).split(' ')).toHaveLength(30)
    // Runpod refuses a 429 before it hands anything out: no check of the saved output is paid for it.
    expect(h.emulator.calls.filter((call) => call.op === 'status')).toEqual([])
  })

  it('a job event stream whose poll was refused with a 429 (nothing handed out) ends with done, with no check of the saved output', async () => {
    const h = harness({ runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', streamWaitMs: 300 } })
    const { key } = await h.createKey()
    const id = await startStreamJob(h, key, 'chat-current', 'x [[emulator:tokens=30,delay=20]]', 40)
    h.emulator.configure('vllmcurrent', { fault: { kind: 'http', status: 429, ops: ['stream'], times: 2 } })
    const events = await jobEvents(h, key, 'chat-current', id)
    expect(h.emulator.calls.some((call) => call.op === 'stream' && call.status === 429)).toBe(true)
    expect(events.at(-1)?.event).toBe('done')
    expect(h.emulator.calls.filter((call) => call.op === 'status')).toEqual([])
  })

  it('one refused poll (503) does not end a job event stream', async () => {
    const h = harness({ runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', streamWaitMs: 300 } })
    const { key } = await h.createKey()
    const { id } = (await (await h.fetch('/v2/chat-current/run', post(key, { input: { messages: [{ role: 'user', content: 'x [[emulator:tokens=200,delay=20]]' }], stream: true, sampling_params: { max_tokens: 300 } } }))).json()) as { id: string }
    const res = await h.fetch(`/v2/chat-current/stream/${id}`, { headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream' } })
    const reader = res.body!.getReader()
    const events: EventSourceMessage[] = []
    const parser = createParser({ onEvent: (event) => events.push(event) })
    const decoder = new TextDecoder()
    let refused = false
    for (;;) {
      const { value, done } = await reader.read()
      if (done) break
      parser.feed(decoder.decode(value, { stream: true }))
      if (!refused && events.filter((event) => event.event === 'output').length >= 3) {
        refused = true
        h.emulator.configure('vllmcurrent', { fault: { kind: 'http', status: 503, ops: ['stream'], times: 1 } })
      }
    }
    expect(h.emulator.calls.some((call) => call.op === 'stream' && call.status === 503)).toBe(true)
    expect(events.at(-1)?.event).toBe('done')
  })

  it('a job event stream whose poll (503, nothing lost) and then whose check of the saved output (429) were each refused once still ends with done', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const refused = new Set<string>()
    const fetch: GatewayOptions['fetch'] = async (input, init) => {
      const request = new Request(input, init)
      const op = /\/(stream|status)\//.exec(new URL(request.url).pathname)?.[1]
      if (op === undefined || refused.has(op)) return emulator.fetch(request)
      refused.add(op)
      return op === 'stream' ? new Response('unavailable', { status: 503 }) : new Response('rate limited', { status: 429 })
    }
    const h = harness({ fetch, runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', streamWaitMs: 300 } }, emulator)
    const { key } = await h.createKey()
    const id = await startStreamJob(h, key, 'chat-current', 'x [[emulator:tokens=30,delay=20]]', 40)
    const events = await jobEvents(h, key, 'chat-current', id)
    expect([...refused].sort()).toEqual(['status', 'stream'])
    expect(events.at(-1)?.event).toBe('done')
    const saved = (await (await h.fetch(`/v2/chat-current/status/${id}`, { headers: { authorization: `Bearer ${key}` } })).json()) as { output: unknown[] }
    expect(events.filter((event) => event.event === 'output')).toHaveLength(saved.output.length)
  })

  it('one refused /status poll (429) does not end a resumed job event stream: it is asked again', async () => {
    const h = harness()
    const { key } = await h.createKey()
    const { id } = (await (await h.fetch('/v2/chat-classic/run', post(key, { input: { messages: [{ role: 'user', content: 'x [[emulator:tokens=30,delay=30]]' }], stream: true, sampling_params: { max_tokens: 40 } } }))).json()) as { id: string }
    h.emulator.configure('vllmclassic', { fault: { kind: 'http', status: 429, ops: ['status'], times: 1 } })
    const res = await h.fetch(`/v2/chat-classic/stream/${id}`, { headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream', 'last-event-id': '1' } })
    const events: EventSourceMessage[] = []
    const parser = createParser({ onEvent: (event) => events.push(event) })
    parser.feed(await res.text())
    expect(h.emulator.calls.some((call) => call.op === 'status' && call.status === 429)).toBe(true)
    expect(events.at(-1)?.event).toBe('done')
  })

  it.each(['openai stream', 'job event stream'])('refused polls asked again count within the poll budget, never past it, and a job event stream then pauses (%s)', async (surface) => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY, endpoints: { vllmcurrent: { fault: { kind: 'http', status: 429, ops: ['stream'] } } } })
    const h = harness({ runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', maxPollsPerStream: 2 } }, emulator)
    const { key } = await h.createKey()
    const content = 'x [[emulator:tokens=5]]'
    if (surface === 'openai stream') {
      await (await h.fetch('/v1/chat/completions', post(key, chat('chat-current', content, { stream: true })))).text()
    } else {
      const { id } = (await (await h.fetch('/v2/chat-current/run', post(key, { input: { messages: [{ role: 'user', content }], stream: true } }))).json()) as { id: string }
      const events = await (await h.fetch(`/v2/chat-current/stream/${id}`, { headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream' } })).text()
      // The job goes on: the caller is told to reconnect (EventSource does), not that it failed.
      expect(events).toContain('event: pause')
      expect(events).not.toContain('event: error')
    }
    await h.settle()
    // Every poll Runpod refused was a subrequest: asking again must not make 2 polls 4 or more.
    expect(emulator.calls.filter((call) => call.op === 'stream').length).toBe(2)
  })

  /** A Runpod that hands out at most 2 items a `/stream` page, reporting the job's status even while items wait. */
  function pagedStream(emulator: ReturnType<typeof createRunpodEmulator>): GatewayOptions['fetch'] {
    const held = new Map<string, unknown[]>()
    return async (input, init) => {
      const request = new Request(input, init)
      const response = await emulator.fetch(request)
      const job = /\/stream\/([^/?]+)/.exec(new URL(request.url).pathname)?.[1]
      if (!job) return response
      const page = (await response.json()) as { stream: unknown[] }
      const items = [...(held.get(job) ?? []), ...page.stream]
      held.set(job, items.slice(2))
      return Response.json({ ...page, stream: items.slice(0, 2) })
    }
  }

  it.each(['openai stream', 'job event stream'])('a terminal /stream page that is not the last loses no output: podgate polls on, as runpod-python does (%s)', async (surface) => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const h = harness({ fetch: pagedStream(emulator) }, emulator)
    const { key } = await h.createKey()
    const content = 'paged [[emulator:tokens=40]]'
    if (surface === 'openai stream') {
      const events = await readSSE(await h.fetch('/v1/chat/completions', post(key, chat('chat-classic', content, { stream: true, max_tokens: 100, stream_options: { include_usage: true } }))))
      expect(events.at(-1)).toBe('[DONE]')
      // Classic items carry the cumulative usage: a cut answer would report the tokens of its first page (1 + 3).
      expect((events.at(-2) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(40)
      return
    }
    const { id } = (await (await h.fetch('/v2/chat-classic/run', post(key, { input: { messages: [{ role: 'user', content }], stream: true, sampling_params: { max_tokens: 100 } } }))).json()) as { id: string }
    const events: EventSourceMessage[] = []
    const parser = createParser({ onEvent: (event) => events.push(event) })
    parser.feed(await (await h.fetch(`/v2/chat-classic/stream/${id}`, { headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream' } })).text())
    const status = (await (await h.fetch(`/v2/chat-classic/status/${id}`, post(key, {}))).json()) as { output: unknown[] }
    expect(events.at(-1)?.event).toBe('done')
    expect(events.filter((event) => event.event === 'output')).toHaveLength(status.output.length)
    expect(status.output.length).toBeGreaterThan(2)
  })

  it.each([
    ['', 0],
    // Runpod refuses a follow-up poll (its /stream rate limit): a 429 hands out nothing, so it is asked
    // again; the caller cannot, having been told the job ended.
    [' (Runpod refused the poll after it once)', 1],
    // Refused more often than podgate asks (4 tries): the page is answered as a running job's, so the
    // caller polls again for the rest, rather than told the job ended without them.
    [' (Runpod refused the poll after it five times)', 5],
  ])("a JSON /stream poll that meets a terminal page that is not the last answers the job's last items: runpod-sdk stops at the first terminal page%s", async (_name, refuse) => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const paged = pagedStream(emulator)!
    let refusals = refuse
    const h = harness({
      fetch: async (input, init) => {
        const request = new Request(input, init)
        // A follow-up poll (no `?wait=`, which every first poll of a call has).
        const followUp = request.url.includes('/stream/') && !request.url.includes('wait=')
        if (followUp && refusals > 0) {
          refusals--
          return Response.json({ error: 'rate limited' }, { status: 429, headers: { 'retry-after': '0' } })
        }
        return paged(request)
      },
    }, emulator)
    const { key } = await h.createKey()
    const id = await startStreamJob(h, key, 'chat-classic', 'paged [[emulator:tokens=40]]', 100)
    const get = { headers: { authorization: `Bearer ${key}` } }
    // runpod-sdk's `stream()`: GET /stream/{id} until a terminal status, yielding every page's items.
    const items: unknown[] = []
    for (let polls = 0; polls < 50; polls++) {
      const page = (await (await h.fetch(`/v2/chat-classic/stream/${id}`, get)).json()) as { status: string; stream: { output: unknown }[] }
      expect(Object.keys(page).sort()).toEqual(['id', 'status', 'stream'])
      items.push(...page.stream.map((item) => item.output))
      if (['COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT'].includes(page.status)) break
    }
    const status = (await (await h.fetch(`/v2/chat-classic/status/${id}`, get)).json()) as { status: string; output: unknown[] }
    expect(status.status).toBe('COMPLETED')
    expect(items).toEqual(status.output)
    expect(refusals).toBe(0)
  })

  /**
   * A Runpod whose terminal page holds a job's last item (each earlier page keeps its newest back), and
   * that holds the poll after the terminal page until `release`.
   */
  function terminalPageHeld(emulator: ReturnType<typeof createRunpodEmulator>) {
    const items = new Map<string, unknown[]>()
    let release!: () => void
    const released = new Promise<void>((resolve) => (release = resolve))
    let asked!: () => void
    const followUpAsked = new Promise<void>((resolve) => (asked = resolve))
    const fetch: GatewayOptions['fetch'] = async (input, init) => {
      const request = new Request(input, init)
      const job = /\/stream\/([^/?]+)/.exec(new URL(request.url).pathname)?.[1]
      if (!job) return emulator.fetch(request)
      if (items.get(job)?.length === 0) {
        asked()
        await released
        return Response.json({ id: job, status: 'COMPLETED', stream: [] })
      }
      const page = (await (await emulator.fetch(request)).json()) as { status: string; stream: unknown[] }
      const held = [...(items.get(job) ?? []), ...page.stream]
      if (page.status !== 'COMPLETED') {
        items.set(job, held.slice(-1))
        return Response.json({ ...page, stream: held.slice(0, -1) })
      }
      items.set(job, [])
      return Response.json({ ...page, stream: held })
    }
    return { fetch, release, followUpAsked }
  }

  it.each([['openai stream', 20], ['job event stream', 20], ['openai stream', 0], ['job event stream', 0]])("a terminal page's items reach the caller before the poll after it answers (%s, %i ms a token)", async (surface, delay) => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const upstream = terminalPageHeld(emulator)
    const h = harness({ fetch: upstream.fetch }, emulator)
    const { key } = await h.createKey()
    // With no delay the job is done by the first poll: its terminal page is its only one, and the first output.
    const content = `last [[emulator:tokens=12,delay=${delay}]]`
    let res: Response
    if (surface === 'openai stream') {
      res = await h.fetch('/v1/chat/completions', post(key, chat('chat-classic', content, { stream: true, max_tokens: 100 })))
    } else {
      const { id } = (await (await h.fetch('/v2/chat-classic/run', post(key, { input: { messages: [{ role: 'user', content }], stream: true, sampling_params: { max_tokens: 100 } } }))).json()) as { id: string }
      res = await h.fetch(`/v2/chat-classic/stream/${id}`, { headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream' } })
    }
    const events: EventSourceMessage[] = []
    const parser = createParser({ onEvent: (event) => events.push(event) })
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader()
    const reading = (async () => {
      for (let next = await reader.read(); !next.done; next = await reader.read()) parser.feed(next.value)
    })()
    // What the caller has of the answer: the content deltas, or the job's output items.
    const answer = () => events.filter((event) => (surface === 'openai stream' ? event.data.includes('"content":"') : event.event === 'output')).map((event) => event.data).join('')
    await upstream.followUpAsked
    await vi.waitFor(() => expect(answer()).not.toBe(''))
    await pause(100)
    const before = answer()
    upstream.release()
    await reading
    expect(answer()).toBe(before)
    expect(surface === 'openai stream' ? events.at(-1)?.data : events.at(-1)?.event).toBe(surface === 'openai stream' ? '[DONE]' : 'done')
  })

  /**
   * A Runpod whose first COMPLETED `/stream` page that holds several items keeps back the job's last 3;
   * the poll after it breaks, and with `expired` its `/status` is a 404 (the result expired).
   */
  function lastItemsLost(emulator: ReturnType<typeof createRunpodEmulator>, options: { breaks: boolean; expired?: boolean }): GatewayOptions['fetch'] {
    let cut = false
    return async (input, init) => {
      const request = new Request(input, init)
      const path = new URL(request.url).pathname
      if (options.expired && path.includes('/status/')) return new Response('job not found', { status: 404 })
      if (!path.includes('/stream/')) return emulator.fetch(request)
      if (cut && options.breaks) throw new TypeError('Network connection lost.')
      const page = (await (await emulator.fetch(request)).json()) as { status: string; stream: unknown[] }
      if (cut) return Response.json({ ...page, stream: [] })
      if (page.status === 'COMPLETED' && page.stream.length > 3) {
        cut = true
        page.stream.splice(-3)
      }
      return Response.json(page)
    }
  }

  /** The text of choice 0 of a classic worker's finished job, from the emulator itself. */
  async function jobText(emulator: ReturnType<typeof createRunpodEmulator>, jobId: string): Promise<string> {
    const res = await emulator.fetch(new Request(`http://emulator.test/v2/vllmclassic/status/${jobId}`, { method: 'POST', headers: { authorization: `Bearer ${RUNPOD_KEY}` } }))
    const { output } = (await res.json()) as { output: { choices: { tokens: string[] }[] }[] }
    return output.map((item) => item.choices[0]!.tokens.join('')).join('')
  }

  /** Follows a classic job through `surface`; its text, and its last event ('[DONE]', or the job events' name). */
  async function followClassic(h: ReturnType<typeof harness>, surface: string, content: string): Promise<{ text: string; last: string | undefined; usage: number | undefined }> {
    const { key } = await h.createKey()
    if (surface === 'openai stream') {
      const events = await readSSE(await h.fetch('/v1/chat/completions', post(key, chat('chat-classic', content, { stream: true, max_tokens: 100, stream_options: { include_usage: true } }))))
      const usage = (events.at(-2) as { usage?: { completion_tokens: number } } | undefined)?.usage?.completion_tokens
      return { text: streamedText(events), last: events.at(-1) === '[DONE]' ? '[DONE]' : 'error', usage }
    }
    const { id } = (await (await h.fetch('/v2/chat-classic/run', post(key, { input: { messages: [{ role: 'user', content }], stream: true, sampling_params: { max_tokens: 100 } } }))).json()) as { id: string }
    await pause(50)
    const events: EventSourceMessage[] = []
    const parser = createParser({ onEvent: (event) => events.push(event) })
    parser.feed(await (await h.fetch(`/v2/chat-classic/stream/${id}`, { headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream' } })).text())
    const text = events.filter((event) => event.event === 'output').map((event) => (JSON.parse(event.data) as { text: string }).text).join('')
    const last = events.at(-1)
    const usage = last?.event === 'done' ? (JSON.parse(last.data) as { usage: { completion_tokens: number } }).usage.completion_tokens : undefined
    return { text, last: last?.event, usage }
  }

  const cuts = [['openai stream', 'breaks'], ['openai stream', 'has no room in the poll budget'], ['job event stream', 'breaks'], ['job event stream', 'has no room in the poll budget']]
  it.each(cuts)("a terminal page's follow-up poll that fails or cannot be made does not end a cut answer as whole: the job's saved output brings the rest (%s, the follow-up %s)", async (surface, followUp) => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const breaks = followUp === 'breaks'
    const h = harness({ fetch: lastItemsLost(emulator, { breaks }), runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', ...(breaks ? {} : { maxPollsPerStream: 1 }) } }, emulator)
    const answer = await followClassic(h, surface, 'cut [[emulator:tokens=30]]')
    const jobId = emulator.calls.find((call) => call.op === 'run')!.jobId!
    expect(answer.text).toBe(await jobText(emulator, jobId))
    expect(answer.last).toBe(surface === 'openai stream' ? '[DONE]' : 'done')
    // Classic items carry the cumulative usage: a cut answer would report its first items' count.
    expect(answer.usage).toBe(30)
  })

  it.each(['openai stream', 'job event stream'])("a cut answer whose job's saved output is gone too ends with an error, never as a whole answer (%s)", async (surface) => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const h = harness({ fetch: lastItemsLost(emulator, { breaks: true, expired: true }) }, emulator)
    const answer = await followClassic(h, surface, 'cut [[emulator:tokens=30]]')
    expect(answer.last).toBe('error')
    expect(answer.text.length).toBeGreaterThan(0)
  })

  it('a local server that forgets a streamed job (FAILED "Job ID not found" on the next poll) still ends the answer COMPLETED', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const streamed = new Set<string>()
    const h = harness({
      fetch: async (input, init) => {
        const request = new Request(input, init)
        const job = /\/stream\/([^/?]+)/.exec(new URL(request.url).pathname)?.[1]
        if (job && streamed.has(job)) return Response.json({ id: job, status: 'FAILED', error: 'Job ID not found' })
        const response = await emulator.fetch(request)
        if (!job) return response
        const page = (await response.json()) as { status: string }
        if (page.status === 'COMPLETED') streamed.add(job)
        return Response.json(page)
      },
    }, emulator)
    const { key } = await h.createKey()
    const events = await readSSE(await h.fetch('/v1/chat/completions', post(key, chat('chat-current', 'local [[emulator:tokens=9]]', { stream: true, max_tokens: 100 }))))
    expect(events.at(-1)).toBe('[DONE]')
  })

  it('a job that FAILED reports the handler\'s message on a stream as it does on a JSON answer', async () => {
    const h = harness()
    const { key } = await h.createKey()
    const content = 'x [[emulator:fault=job_failed]]'
    const json = (await (await h.fetch('/v1/chat/completions', post(key, chat('chat-classic', content)))).json()) as { error: { message: string } }
    const streamed = await h.fetch('/v1/chat/completions', post(key, chat('chat-classic', content, { stream: true })))
    expect(streamed.status).toBe(502)
    const body = (await streamed.json()) as { error: { message: string } }
    expect(json.error.message).toContain('Emulated')
    expect(body.error.message).toBe(json.error.message)
  })
})

describe('native jobs: cancels', () => {
  it.each(['openai stream', 'job event stream'])('a cancel Runpod refuses (429) is sent again: no job runs for nobody (%s)', async (surface) => {
    const h = harness()
    const { key } = await h.createKey()
    const content = 'forever [[emulator:tokens=400,delay=25]]'
    let res: Response
    if (surface === 'openai stream') {
      res = await h.fetch('/v1/chat/completions', post(key, chat('chat-current', content, { stream: true })))
    } else {
      const { id } = (await (await h.fetch('/v2/chat-current/run', post(key, { input: { messages: [{ role: 'user', content }], stream: true, sampling_params: { max_tokens: 1000 } } }))).json()) as { id: string }
      res = await h.fetch(`/v2/chat-current/stream/${id}`, { headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream' } })
    }
    const reader = await readSome(res, 300)
    h.emulator.configure('vllmcurrent', { fault: { kind: 'http', status: 429, ops: ['cancel'], times: 1, retryAfter: 1 } })
    await reader.cancel()
    await h.settle()
    const cancels = h.emulator.calls.filter((call) => call.op === 'cancel').map((call) => call.status)
    expect(cancels).toEqual([429, 200])
    expect(h.emulator.activeJobs()).toEqual([])
  })

  it('a non-streamed request on a native model cancels its job when the caller leaves (a real HTTP upstream)', async () => {
    const base = env.RUNPOD_BASE_URL.replace(/\/v2$/, '')
    const models: GatewayOptions['models'] = { orphan: { endpoints: [{ endpointId: 'orphanclassic' }], mode: 'native' } }
    const h = harness({ models, runpod: { apiKey: RUNPOD_KEY, baseUrl: env.RUNPOD_BASE_URL }, fetch: undefined })
    const { key } = await h.createKey()
    const jobs = async () => ((await (await fetch(`${base}/__emulator/jobs`)).json()) as Array<{ endpointId: string }>).filter((job) => job.endpointId === 'orphanclassic')
    const abort = new AbortController()
    const answered = h.fetch('/v1/chat/completions', post(key, chat('orphan', 'long-http [[emulator:tokens=400,delay=25]]'), { signal: abort.signal })).catch((error: unknown) => error)
    for (let i = 0; i < 50 && (await jobs()).length === 0; i++) await pause(50)
    expect(await jobs()).toHaveLength(1)
    abort.abort()
    await answered
    await h.settle()
    for (let i = 0; i < 40 && (await jobs()).length > 0; i++) await pause(50)
    expect(await jobs()).toEqual([])
    const calls = (await (await fetch(`${base}/__emulator/calls`)).json()) as Array<{ op: string; endpointId: string | null }>
    expect(calls.filter((call) => call.endpointId === 'orphanclassic' && call.op === 'cancel')).toHaveLength(1)
  })

  it('a streamed request whose caller left while /run was out still cancels the job /run queued', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    let runArrived!: () => void
    const arrived = new Promise<void>((resolve) => (runArrived = resolve))
    const h = harness({
      fetch: async (input, init) => {
        const request = new Request(input, init)
        const answer = await emulator.fetch(request)
        if (/\/run$/.test(new URL(request.url).pathname)) {
          runArrived()
          await pause(300)
        }
        return answer
      },
    }, emulator)
    const { key } = await h.createKey()
    const abort = new AbortController()
    const answered = h.fetch('/v1/chat/completions', post(key, chat('chat-current', 'x [[emulator:tokens=400,delay=25]]', { stream: true }), { signal: abort.signal })).catch((error: unknown) => error)
    await arrived
    abort.abort()
    await answered
    await h.settle()
    expect(emulator.calls.filter((call) => call.op === 'cancel')).toHaveLength(1)
    expect(emulator.activeJobs()).toEqual([])
  })

  for (const via of ['run', 'runsync'] as const) {
    it(`a /v2 ${via} still out at runpod.timeoutMs is answered 504 then, and the job it queued is cancelled once it answers`, async () => {
      const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
      // Runpod answers on demand: once the caller has its answer, or after 10 s at the latest.
      const { fetch: held, release, queued } = heldFetch(emulator, via)
      // A runsync's first leg waits `wait` (1 s here) and 5 s more before podgate gives up on it.
      const runpod = { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2', timeoutMs: 500 }
      const h = harness({ models: { m: { endpoints: [{ endpointId: 'solo' }], mode: 'native' } }, runpod, fetch: held }, emulator)
      const { key } = await h.createKey()
      const order: string[] = []
      const fallback = setTimeout(() => (order.push(`/${via} answered`), release()), 10_000)
      const path = via === 'run' ? '/v2/m/run' : '/v2/m/runsync?wait=1000'
      const started = Date.now()
      const res = await h.fetch(path, post(key, { input: { messages: [{ role: 'user', content: 'x [[emulator:tokens=400,delay=25]]' }], sampling_params: { max_tokens: 1000 } } }))
      order.push(`caller answered ${res.status}`)
      // Then: a run at runpod.timeoutMs (0.5 s), a runsync at its first leg's wait and 5 s (6 s), not sooner.
      const elapsed = Date.now() - started
      expect(elapsed).toBeGreaterThanOrEqual(via === 'run' ? 500 : 6_000)
      expect(elapsed).toBeLessThan(via === 'run' ? 5_000 : 9_000)
      clearTimeout(fallback)
      release()
      expect(order).toEqual(['caller answered 504'])
      await Promise.all(queued)
      await h.settle()
      expect(emulator.calls.filter((c) => c.op === via)).toHaveLength(1)
      expect(emulator.calls.filter((c) => c.op === 'cancel')).toHaveLength(1)
      expect(emulator.activeJobs()).toEqual([])
    })
  }

  it('a /run whose connection broke is not sent again: the job may be queued, and a second would run it twice', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const h = harness({
      models: { two: { endpoints: [{ endpointId: 'vllmclassic' }, { endpointId: 'vllmclassic2' }], mode: 'native' } },
      fetch: droppingFetch(emulator, (path) => /\/run$/.test(path)),
    }, emulator)
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', post(key, chat('two', 'x [[emulator:tokens=50,delay=20]]', { max_tokens: 100 })))
    expect(res.status).toBe(502)
    await h.settle()
    expect(emulator.calls.filter((call) => call.op === 'run' || call.op === 'runsync')).toHaveLength(1)
  })
})

describe('native jobs: refused polls and late failures', () => {
  it('a refused /status-sync poll (429) is asked again: the healthy job is neither cancelled nor run twice', async () => {
    const h = harness()
    const { key } = await h.createKey()
    h.emulator.configure('vllmclassic', { fault: { kind: 'http', status: 429, ops: ['status-sync'], times: 1 } })
    const res = await h.fetch('/v1/chat/completions', post(key, { model: 'chat-classic', max_tokens: 100, messages: [{ role: 'user', content: 'x [[emulator:tokens=40,delay=10]]' }] }))
    expect(res.status).toBe(200)
    await res.text()
    await h.settle()
    expect(h.emulator.calls.filter((c) => c.op === 'status-sync' && c.status === 429)).toHaveLength(1)
    expect(h.emulator.calls.filter((c) => c.op === 'cancel')).toHaveLength(0)
    expect(h.emulator.calls.filter((c) => c.op === 'run')).toHaveLength(1)
  })

  it('a Runpod that answers each /status-sync wait at once, still running, is not asked in a tight loop until the deadline', async () => {
    const ops: string[] = []
    const h = harness({
      models: { m: { endpoints: [{ endpointId: 'vllmclassic' }], mode: 'native', resilience: { timeouts: { totalMs: 3_000 } } } },
      fetch: async (input, init) => {
        const op = new URL(new Request(input, init).url).pathname.split('/')[3]!
        ops.push(op)
        return Response.json({ id: 'job-1', status: op === 'run' ? 'IN_QUEUE' : op === 'cancel' ? 'CANCELLED' : 'IN_PROGRESS' })
      },
    })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', post(key, chat('m', 'x')))
    expect(res.status).toBe(504)
    await h.settle()
    // Two seconds of waits (the last second is left for the answer): paced as `/status` polls are, a few calls.
    expect(ops.filter((op) => op === 'status-sync').length).toBeLessThanOrEqual(6)
    expect(ops.filter((op) => op === 'cancel')).toHaveLength(1)
  })

  const polling = [['JSON', 'refused 4 times (503)'], ['stream', 'refused 4 times (429)'], ['stream', 'broken']]
  it.each(polling)('a job whose polls fail is not cancelled and run again: the request fails, the job is run once (%s answer, poll %s)', async (answer, poll) => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    const stream = answer === 'stream'
    const broken = poll === 'broken'
    const op = stream ? 'stream' : 'status-sync'
    const h = harness(broken ? { fetch: droppingFetch(emulator, (path) => path.includes('/stream/')) } : {}, emulator)
    if (!broken) emulator.configure('vllmclassic', { fault: { kind: 'http', status: stream ? 429 : 503, ops: [op], times: 4 } })
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', post(key, chat('chat-classic', 'x [[emulator:tokens=30,delay=20]]', { stream, max_tokens: 40 })))
    await res.text()
    await h.settle()
    expect(res.status).not.toBe(200)
    expect(emulator.calls.filter((c) => c.op === 'run')).toHaveLength(1)
    expect(emulator.calls.filter((c) => c.op === op)).toHaveLength(broken ? 1 : 4)
    // podgate gave up on the job: it is cancelled, not left running.
    expect(emulator.calls.filter((c) => c.op === 'cancel')).toHaveLength(1)
  })

  // One endpoint cold past both budgets whose job then FAILED: the other endpoint of the same mode still answers.
  const models: GatewayOptions['models'] = {
    two: { endpoints: [{ endpointId: 'coldbadclassic', weight: 1_000_000 }, { endpointId: 'goodclassic', weight: 0.000001 }], mode: 'native', resilience: { retries: { budgetMs: 300 }, ttftBudgetMs: 300 } },
  }
  for (const stream of [true, false]) {
    it(`a job that FAILED after a cold start longer than the retry budget runs on the model's other endpoint (stream: ${stream})`, async () => {
      const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY, endpoints: { coldbadclassic: { coldStartMs: 800, fault: { kind: 'job_failed' } } } })
      const h = harness({ models }, emulator)
      const { key } = await h.createKey()
      const res = await h.fetch('/v1/chat/completions', post(key, { model: 'two', max_tokens: 50, stream, messages: [{ role: 'user', content: 'x [[emulator:tokens=5]]' }] }))
      const text = await res.text()
      await h.settle()
      expect(res.status).toBe(200)
      expect(emulator.calls.filter((c) => c.op === 'run').map((c) => c.endpointId)).toEqual(['coldbadclassic', 'goodclassic'])
      if (stream) expect(text.trim().endsWith('data: [DONE]')).toBe(true)
    })
  }

  for (const stream of [true, false]) {
    it(`a job someone else CANCELLED before any output is not run again: the caller gets the error, and no tokens are charged (stream: ${stream})`, async () => {
      const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY, endpoints: { coldbadclassic: { coldStartMs: 800 } } })
      const h = harness({ models }, emulator)
      const { key } = await h.createKey({ name: 'cancelled', quota: { tokensPerDay: 100_000 } })
      const answer = h.fetch('/v1/chat/completions', post(key, { model: 'two', max_tokens: 50, stream, messages: [{ role: 'user', content: 'x [[emulator:tokens=5]]' }] }))
      let job: string | undefined
      for (let i = 0; i < 50 && !job; i++) {
        await pause(20)
        job = emulator.calls.find((c) => c.op === 'run')?.jobId
      }
      // An operator cancels the queued job in Runpod's console (or Runpod does).
      const cancelled = await emulator.fetch(new Request(`http://emulator.test/v2/coldbadclassic/cancel/${job}`, { method: 'POST', headers: { authorization: `Bearer ${RUNPOD_KEY}` } }))
      expect(((await cancelled.json()) as { status: string }).status).toBe('CANCELLED')
      const res = await answer
      const text = await res.text()
      await h.settle()
      expect(emulator.calls.filter((c) => c.op === 'run').map((c) => c.endpointId)).toEqual(['coldbadclassic'])
      // Past ttftBudgetMs a stream is open: the error comes as its last event, in OpenAI's format.
      if (stream && res.status === 200) expect(text).toContain('"code":"upstream_error"')
      else expect(res.status).toBe(502)
      expect(text).toContain('cancelled upstream')
      const usage = (await (await h.fetch('/v1/usage', { headers: { authorization: `Bearer ${key}` } })).json()) as { windows: { day: { tokens: number } } }
      expect(usage.windows.day.tokens).toBe(0)
    })
  }

  it('a job that COMPLETED with a stream podgate could not read is not run again: it ran to the end, and a second run bills it twice', async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })
    // A handler that returns its answer instead of yielding it: `/stream` carries nothing, the job COMPLETED.
    const h = harness({
      fetch: async (input, init) => {
        const request = new Request(input, init)
        const response = await emulator.fetch(request)
        if (!/\/stream\//.test(new URL(request.url).pathname)) return response
        return Response.json({ ...((await response.json()) as object), stream: [] })
      },
    }, emulator)
    const { key } = await h.createKey()
    const res = await h.fetch('/v1/chat/completions', post(key, chat('chat-classic', 'x [[emulator:tokens=5]]', { stream: true })))
    expect(res.status).toBe(502)
    await h.settle()
    expect(emulator.calls.filter((c) => c.op === 'run')).toHaveLength(1)
  })
})

describe('native jobs that TIMED_OUT upstream', () => {
  const models: GatewayOptions['models'] = {
    two: { endpoints: [{ endpointId: 'slowclassic', weight: 1_000_000 }, { endpointId: 'spareclassic', weight: 0.000001 }], mode: 'native' },
  }
  const ask = (h: ReturnType<typeof harness>, key: string, content: string, stream: boolean) =>
    h.fetch('/v1/chat/completions', post(key, { model: 'two', max_tokens: 50, stream, messages: [{ role: 'user', content }] }))

  for (const stream of [true, false]) {
    it(`one that waited in the queue past its TTL never ran: the model's other endpoint runs it (stream: ${stream})`, async () => {
      // The endpoint's job TTL setting: podgate sends no policy of its own, which would override it.
      const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY, endpoints: { slowclassic: { coldStartMs: 2_000, ttlMs: 300 } } })
      const h = harness({ models }, emulator)
      const { key } = await h.createKey()
      const res = await ask(h, key, 'x [[emulator:tokens=5]]', stream)
      const text = await res.text()
      await h.settle()
      expect(res.status).toBe(200)
      expect(emulator.calls.filter((c) => c.op === 'run').map((c) => c.endpointId)).toEqual(['slowclassic', 'spareclassic'])
      if (stream) expect(text.trim().endsWith('data: [DONE]')).toBe(true)
    })

    it(`one that ran past its endpoint's execution timeout is not run again: a second run bills it again, and would time out as well (stream: ${stream})`, async () => {
      const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY, defaults: { executionTimeoutMs: 300 } })
      const h = harness({ models }, emulator)
      const { key } = await h.createKey({ name: 'timed-out', quota: { tokensPerDay: 100_000 } })
      const res = await ask(h, key, 'x [[emulator:fault=stall,after=0]]', stream)
      const text = await res.text()
      await h.settle()
      expect(res.status).toBe(504)
      expect(text).toContain('"code":"upstream_timeout"')
      expect(text).toContain('timed out upstream')
      expect(emulator.calls.filter((c) => c.op === 'run').map((c) => c.endpointId)).toEqual(['slowclassic'])
      // The job ended upstream: there is nothing to cancel.
      expect(emulator.calls.filter((c) => c.op === 'cancel')).toHaveLength(0)
    })

    it(`one that ran past its endpoint's execution timeout still counts against the endpoint's breaker (stream: ${stream})`, async () => {
      const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY, endpoints: { slowclassic: { executionTimeoutMs: 300 } } })
      const breaking: GatewayOptions['models'] = { two: { ...models.two!, resilience: { breaker: { failures: 2, cooldownMs: 60_000 } } } }
      const h = harness({ models: breaking }, emulator)
      const { key } = await h.createKey()
      for (let i = 0; i < 2; i++) expect((await ask(h, key, `x${i} [[emulator:fault=stall,after=0]]`, stream)).status).toBe(504)
      // Its breaker open, the endpoint that timed out twice in a row is tried last.
      const res = await ask(h, key, 'x [[emulator:tokens=5]]', stream)
      await res.text()
      await h.settle()
      expect(res.status).toBe(200)
      expect(emulator.calls.filter((c) => c.op === 'run').map((c) => c.endpointId)).toEqual(['slowclassic', 'slowclassic', 'spareclassic'])
    })

    it(`one Runpod removed at its TTL while it ran (its polls answer 404) is an upstream timeout, not a 404 job_not_found, and is not run again (stream: ${stream})`, async () => {
      // Runpod's TTL is a hard limit: a running job is removed, and a 404 reads to an OpenAI client as a missing model.
      const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY, endpoints: { slowclassic: { ttlMs: 400, tokenDelayMs: 50 } } })
      const h = harness({ models }, emulator)
      const { key } = await h.createKey()
      const res = await ask(h, key, 'x [[emulator:tokens=40]]', stream)
      const text = await res.text()
      await h.settle()
      // A stream had sent output when its job went: it ends with the error event.
      expect(res.status).toBe(stream ? 200 : 504)
      expect(text).not.toContain('job_not_found')
      expect(text).toContain('"code":"upstream_timeout"')
      expect(emulator.calls.filter((c) => c.op === 'run').map((c) => c.endpointId)).toEqual(['slowclassic'])
    })
  }

  it("a job Runpod removed at its TTL still answers the native surface's 404 job_not_found on /status", async () => {
    const emulator = createRunpodEmulator({ apiKey: RUNPOD_KEY, endpoints: { slowclassic: { ttlMs: 300, tokenDelayMs: 50 } } })
    const h = harness({ models }, emulator)
    const { key } = await h.createKey()
    const id = await startStreamJob(h, key, 'two', 'x [[emulator:tokens=40]]', 50)
    await pause(600)
    const res = await h.fetch(`/v2/two/status/${id}`, { headers: { authorization: `Bearer ${key}` } })
    expect(res.status).toBe(404)
    expect(await res.text()).toContain('"code":"job_not_found"')
    await h.settle()
  })
})

describe("under Runpod's own rate limits (the emulator's rateLimitScale)", () => {
  it("a burst past one endpoint's /run limits fails over to the next: every call, JSON or stream, answers whole", async () => {
    // The weights make the limited endpoint the first pick of every call.
    const models: GatewayOptions['models'] = { ...MODELS, pair: { endpoints: [{ endpointId: 'vllmcurrent', weight: 1e6 }, { endpointId: 'vllmclassic', weight: 1e-6 }], mode: 'native' } }
    const h = harness({ models })
    // 0.003 of Runpod's numbers: /run 3 per 10 s and 1 at once.
    h.emulator.configure('vllmcurrent', { rateLimitScale: 0.003 })
    const { key } = await h.createKey()
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => h.fetch('/v1/chat/completions', post(key, chat('pair', `burst ${i} [[emulator:tokens=5]]`, { max_tokens: 10, stream: i % 2 === 0 })))))
    expect(answers.map((res) => res.status)).toEqual(Array(8).fill(200))
    for (const [i, res] of answers.entries()) {
      if (i % 2 === 0) expect((await readSSE(res)).at(-1)).toBe('[DONE]')
      else expect(((await res.json()) as { choices: { finish_reason: string }[] }).choices[0]!.finish_reason).toBe('stop')
    }
    const runs = h.emulator.calls.filter((call) => call.op === 'run')
    expect(runs.some((call) => call.endpointId === 'vllmcurrent' && call.status === 429)).toBe(true)
    expect(runs.some((call) => call.endpointId === 'vllmclassic' && call.status === 200)).toBe(true)
  })
})
