/**
 * Test harness: a gateway wired to an in-process Runpod emulator and miniflare's real KV, called
 * through `app.fetch` with a real ExecutionContext so `waitUntil` work can be awaited.
 */
import { createExecutionContext, env, waitOnExecutionContext } from 'cloudflare:test'
import { createParser } from 'eventsource-parser'
import type { Hono } from 'hono'
import { createGateway } from '../src/index.ts'
import type { GatewayEnv, GatewayOptions } from '../src/index.ts'
import { createRunpodEmulator } from '../src/testing/index.ts'
import type { RunpodEmulator } from '../src/testing/index.ts'

export const ADMIN_TOKEN = 'admin_test_token_0123456789abcdef'
export const RUNPOD_KEY = 'rp_test_key_never_leaks_0123456789'

export const MODELS: GatewayOptions['models'] = {
  'chat-openai': { endpoints: [{ endpointId: 'vllmopenai' }], mode: 'openai' },
  'chat-classic': { endpoints: [{ endpointId: 'vllmclassic' }], mode: 'native' },
  'chat-current': { endpoints: [{ endpointId: 'vllmcurrent' }], mode: 'native' },
  // Embeddings from Runpod's OpenAI route, and from a current worker-vllm through an openai_route job.
  'embed-openai': { endpoints: [{ endpointId: 'vllmopenai' }], mode: 'openai', kinds: ['embedding'] },
  'embed-current': { endpoints: [{ endpointId: 'vllmcurrent' }], mode: 'native', kinds: ['embedding'] },
}
/** The chat models, one per upstream shape. */
export const MODEL_NAMES = ['chat-openai', 'chat-classic', 'chat-current']
export const EMBEDDING_MODELS = ['embed-openai', 'embed-current']

export interface Harness {
  app: Hono<GatewayEnv>
  emulator: RunpodEmulator
  logs: string[]
  /** Calls the gateway and waits for its waitUntil work. */
  fetch(path: string, init?: RequestInit): Promise<Response>
  /** A fetch for clients (openai, runpod-sdk) whose base URL is http://podgate. */
  clientFetch: typeof fetch
  createKey(body?: Record<string, unknown>): Promise<{ id: string; key: string }>
  /** Lets waitUntil work (e.g. upstream cancels) finish. */
  settle(): Promise<void>
}

export function harness(overrides: Partial<GatewayOptions> = {}, emulator: RunpodEmulator = createRunpodEmulator({ apiKey: RUNPOD_KEY })): Harness {
  const logs: string[] = []
  const app = createGateway({
    models: MODELS,
    runpod: { apiKey: RUNPOD_KEY, baseUrl: 'https://emulator.test/v2' },
    adminToken: ADMIN_TOKEN,
    kv: () => env.PODGATE_KV,
    fetch: (input, init) => emulator.fetch(new Request(input, init)),
    logSink: (line) => logs.push(line),
    ...overrides,
  })
  const contexts: ExecutionContext[] = []
  const call = async (request: Request) => {
    const ctx = createExecutionContext()
    contexts.push(ctx)
    return app.fetch(request, env, ctx)
  }
  const h: Harness = {
    app,
    emulator,
    logs,
    fetch: (path, init) => call(new Request(`http://podgate${path}`, init)),
    clientFetch: ((input: RequestInfo | URL, init?: RequestInit) => call(new Request(input, init))) as typeof fetch,
    async createKey(body = { name: 'test' }) {
      const res = await h.fetch('/admin/keys', {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      })
      if (res.status !== 201) throw new Error(`createKey: ${res.status} ${await res.text()}`)
      return (await res.json()) as { id: string; key: string }
    },
    async settle() {
      await Promise.all(contexts.splice(0).map((ctx) => waitOnExecutionContext(ctx)))
    },
  }
  return h
}

/**
 * A fetch to the emulator whose first call to a matching path breaks after the emulator took it: the
 * connection to Runpod's API dropped once the request had arrived (its job may be running).
 */
export function droppingFetch(emulator: RunpodEmulator, matches: (path: string) => boolean): typeof fetch {
  let dropped = false
  return async (input, init) => {
    const request = new Request(input, init)
    const answer = emulator.fetch(request)
    if (!dropped && matches(new URL(request.url).pathname)) {
      dropped = true
      await answer
      throw new TypeError('Network connection lost.')
    }
    return answer
  }
}

/**
 * A fetch to the emulator that holds each call to a path ending in `/<op>` until `release()`: Runpod
 * answers it then, and queues its job then, whether or not podgate still waits for the answer (a fetch
 * aborted is not a job cancelled). `queued` holds the emulator's answers, to wait for before checking jobs.
 */
export function heldFetch(emulator: RunpodEmulator, op: string): { fetch: typeof fetch; release: () => void; queued: Promise<unknown>[] } {
  let release!: () => void
  const released = new Promise<void>((resolve) => (release = resolve))
  const queued: Promise<unknown>[] = []
  const held = (async (input: RequestInfo | URL, init?: RequestInit) => {
    const request = new Request(input, init)
    if (!new URL(request.url).pathname.endsWith(`/${op}`)) return emulator.fetch(request)
    const sent = new Request(request.url, { method: request.method, headers: request.headers, body: await request.text() })
    const answer = released.then(() => emulator.fetch(sent))
    queued.push(answer)
    const aborted = new Promise<never>((_, reject) => request.signal.addEventListener('abort', () => reject(request.signal.reason), { once: true }))
    return Promise.race([answer, aborted])
  }) as typeof fetch
  return { fetch: held, release, queued }
}

export function chatBody(model: string, content = 'Say hello', extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ model, messages: [{ role: 'user', content }], ...extra })
}

export function authed(key: string, body?: string): RequestInit {
  return {
    method: body === undefined ? 'GET' : 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body,
  }
}

/** Parses an SSE body into its data payloads (JSON objects, or the string '[DONE]'). */
export async function readSSE(response: Response): Promise<unknown[]> {
  const events: unknown[] = []
  const parser = createParser({ onEvent: (e) => events.push(e.data === '[DONE]' ? '[DONE]' : JSON.parse(e.data)) })
  parser.feed(await response.text())
  return events
}

/** Concatenates the content deltas (chat) or text (completion) of choice 0 from SSE payloads. */
export function streamedText(events: unknown[], index = 0): string {
  let text = ''
  for (const event of events) {
    if (typeof event !== 'object' || event === null) continue
    const choices = (event as { choices?: { index: number; delta?: { content?: string }; text?: string }[] }).choices ?? []
    for (const choice of choices) {
      if (choice.index !== index) continue
      text += choice.delta?.content ?? choice.text ?? ''
    }
  }
  return text
}

/** Reads a body until `bytes` arrived; returns its reader, still open (to cancel it as a caller who leaves). */
export async function readSome(res: Response, bytes: number): Promise<ReadableStreamDefaultReader<Uint8Array>> {
  const reader = res.body!.getReader()
  let got = 0
  while (got < bytes) {
    const { value, done } = await reader.read()
    if (done) throw new Error('the stream ended early')
    got += value.byteLength
  }
  return reader
}

export interface Upstream {
  fetch: typeof fetch
  /** Endpoint ids of the calls made, in order. */
  calls: string[]
}

/**
 * An upstream whose OpenAI-route stream is `pieces`, written one by one by test/global-setup.ts's replay
 * server: its body is the runtime's, as a fetch body is, so podgate pipes it natively. An `Error` ends
 * the pieces: the connection breaks there (only last). With `holdMs` the upstream keeps its connection
 * open that long after the last piece.
 */
export function scriptedUpstream(pieces: (endpoint: string) => Array<string | Error>, options: { holdMs?: number } = {}): Upstream {
  const calls: string[] = []
  const fetchFake = async (input: RequestInfo | URL, init?: RequestInit) => {
    const request = new Request(input, init)
    const endpoint = new URL(request.url).pathname.split('/')[2] ?? ''
    calls.push(endpoint)
    const queue = pieces(endpoint)
    const error = queue.at(-1) instanceof Error
    if (queue.slice(0, -1).some((piece) => piece instanceof Error)) throw new Error('scripted: an Error can only be the last piece')
    // fetch's own Response, not a new one around its body: podgate pipes natively only what fetch answered.
    return fetch(env.TEST_REPLAY_URL!, { method: 'POST', body: JSON.stringify({ pieces: error ? queue.slice(0, -1) : queue, error, ...options }) })
  }
  return { fetch: fetchFake as typeof fetch, calls }
}
