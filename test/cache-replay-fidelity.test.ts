/**
 * Differential check of cache replay: for each upstream shape and each kind of answer, a HIT and a
 * coalesced twin are compared with the live answer they replay, field by field (JSON) and event by event
 * (SSE). Only what docs/caching.md declares may differ: `id` and `created`, the `x-podgate-cache` and `Age`
 * headers, a cross-form replay's chunk boundaries, and the fields the other form cannot carry (listed where
 * they are allowed below).
 */
import { describe, expect, it } from 'vitest'
import { authed, harness, MODEL_NAMES, readSSE } from './helpers.ts'

type Json = Record<string, unknown>

/** The answer with every `id` and `created` blanked: each answer has its own (tool-call ids too). */
function blank(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(blank)
  if (typeof value !== 'object' || value === null) return value
  return Object.fromEntries(Object.entries(value).map(([name, v]) => [name, name === 'id' || name === 'created' ? 'x' : blank(v)]))
}

/** A stream's choices put together as a client does (text and lists appended, tool calls by index), and its usage. */
function reassemble(events: unknown[]): { choices: Json[]; usage: unknown; done: boolean } {
  const choices: Json[] = []
  let usage: unknown
  const merge = (target: Json, source: Json) => {
    for (const [name, value] of Object.entries(source)) {
      const current = target[name]
      if (value === null || value === undefined) target[name] ??= null
      else if (name === 'tool_calls' && Array.isArray(value)) {
        const calls = (Array.isArray(current) ? current : (target[name] = [])) as Json[]
        for (const call of value as Json[]) {
          const at = calls.find((c) => c.index === call.index)
          if (at) merge(at, call)
          else calls.push(structuredClone(call))
        }
      } else if (typeof value === 'string' && typeof current === 'string' && name !== 'role' && name !== 'finish_reason') target[name] = current + value
      else if (Array.isArray(value) && Array.isArray(current)) target[name] = [...current, ...value]
      else if (typeof value === 'object' && typeof current === 'object' && current !== null) merge(current as Json, value as Json)
      else target[name] = structuredClone(value)
    }
  }
  for (const event of events) {
    if (typeof event !== 'object' || event === null) continue
    const { choices: list, usage: u } = event as { choices: Json[]; usage?: unknown }
    if (list.length === 0) usage = u
    for (const { index, ...rest } of list) merge((choices[index as number] ??= {}), rest)
  }
  return { choices, usage, done: events.at(-1) === '[DONE]' }
}

const tool = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }
const CHAT: Record<string, Json> = {
  text: {},
  'n > 1': { n: 2, seed: 5, temperature: 0.7 },
  'tool calls': { tools: [tool] },
  'a named tool': { tools: [tool], tool_choice: { type: 'function', function: { name: 'get_weather' } } },
  'a required tool': { tools: [tool], tool_choice: 'required' },
  reasoning: { chat_template_kwargs: { enable_thinking: true } },
  logprobs: { logprobs: true, top_logprobs: 2 },
  'json output': { response_format: { type: 'json_object' } },
  'a stop sequence': { stop: ['a'] },
  'a length finish': { max_tokens: 3 },
}
const COMPLETION: Record<string, Json> = { text: {}, 'echo and logprobs': { echo: true, logprobs: 2 }, 'n > 1': { n: 2, seed: 3, temperature: 0.5 } }
const USAGE = { stream: true, stream_options: { include_usage: true } }

const cases = [
  ...MODEL_NAMES.flatMap((model) => Object.entries(CHAT).map(([name, extra]) => ({ model, route: '/v1/chat/completions', name, extra }))),
  ...MODEL_NAMES.flatMap((model) => Object.entries(COMPLETION).map(([name, extra]) => ({ model, route: '/v1/completions', name, extra }))),
]

describe('a replay looks like the live answer it replays', () => {
  it.each(cases)('$model $route, $name: HIT, cross-form HIT and coalesced twins', async ({ model, route, extra }) => {
    const h = harness()
    const keys = await Promise.all([1, 2, 3, 4].map(async () => (await h.createKey()).key))
    const body = (content: string, more: Json = {}) => JSON.stringify(route === '/v1/completions'
      ? { model, prompt: content, temperature: 0, max_tokens: 16, ...extra, ...more }
      : { model, messages: [{ role: 'user', content }], temperature: 0, max_tokens: 24, ...extra, ...more })
    const call = async (key: string, text: string) => {
      const res = await h.fetch(route, authed(key, text))
      return res
    }
    const status = (res: Response) => res.headers.get('x-podgate-cache')
    const sameHeaders = (live: Response, replay: Response) => {
      expect(replay.headers.get('content-type')).toBe(live.headers.get('content-type'))
      for (const name of ['ratelimit', 'ratelimit-policy']) expect(replay.headers.has(name), name).toBe(live.headers.has(name))
    }
    const content = 'replay fidelity [[emulator:delay=5]]'

    // The same form: a JSON HIT is the live JSON, a stream HIT the live stream, event for event.
    const [jsonKey, streamKey, twinKey, otherKey] = keys as [string, string, string, string]
    const liveJsonRes = await call(jsonKey, body(content))
    const liveJson = (await liveJsonRes.json()) as Json
    await h.settle()
    const jsonHit = await call(jsonKey, body(content))
    expect(status(jsonHit)).toBe('HIT')
    sameHeaders(liveJsonRes, jsonHit)
    expect(blank(await jsonHit.json())).toEqual(blank(liveJson))

    const liveStreamRes = await call(streamKey, body(content, USAGE))
    const liveStream = await readSSE(liveStreamRes)
    await h.settle()
    const streamHit = await call(streamKey, body(content, USAGE))
    expect(status(streamHit)).toBe('HIT')
    sameHeaders(liveStreamRes, streamHit)
    expect(blank(await readSSE(streamHit))).toEqual(blank(liveStream))

    // The other form, from each entry. A JSON replay of a stream leaves out what no chunk carried: the
    // reasoning keys (their names vary by vLLM version), the null fields only vLLM's JSON writes
    // (`prompt_logprobs`, `token_ids`, `service_tier`, `kv_transfer_params`, usage's `prompt_tokens_details`...),
    // and usage a current worker's shorthand stream never reported. A stream replay of JSON has its own chunk boundaries,
    // and the usage JSON has where a shorthand stream has none: it reassembles to the live stream.
    const expectedJson = (replayed: Json) => {
      const expected = structuredClone(liveJson) as { choices: Json[]; usage: unknown; prompt_logprobs?: unknown }
      const dropNulls = (object: Json, names: string[]) => {
        for (const name of names) if (object[name] === null) delete object[name]
      }
      for (const choice of expected.choices as Json[]) {
        if (choice.message) dropNulls(choice.message as Json, ['reasoning', 'reasoning_content'])
        dropNulls(choice, ['prompt_logprobs', 'token_ids', 'prompt_token_ids'])
      }
      dropNulls(expected as Json, ['prompt_logprobs', 'prompt_token_ids', 'service_tier', 'system_fingerprint', 'kv_transfer_params'])
      if (expected.usage) dropNulls(expected.usage as Json, ['prompt_tokens_details'])
      if (model === 'chat-current' && replayed.usage === null) expected.usage = null
      return blank(expected)
    }
    const expectedStream = (replayed: unknown[]) => {
      const expected = reassemble(liveStream)
      if (model === 'chat-current' && expected.usage === undefined) expected.usage = reassemble(replayed).usage
      return blank(expected)
    }
    const jsonFromStream = await call(streamKey, body(content))
    expect(status(jsonFromStream)).toBe('HIT')
    sameHeaders(liveJsonRes, jsonFromStream)
    const replayedJson = (await jsonFromStream.json()) as Json
    expect(blank(replayedJson)).toEqual(expectedJson(replayedJson))
    const streamFromJson = await call(jsonKey, body(content, USAGE))
    expect(status(streamFromJson)).toBe('HIT')
    sameHeaders(liveStreamRes, streamFromJson)
    const replayedStream = await readSSE(streamFromJson)
    expect(blank(reassemble(replayedStream))).toEqual(expectedStream(replayedStream))

    // Coalesced twins, led by a stream and by a JSON call: the same form is the leader's answer, the other
    // form as from the cache.
    for (const [leaderKey, stream] of [[twinKey, true], [otherKey, false]] as const) {
      const forms = stream ? [USAGE, USAGE, {}] : [{}, {}, USAGE]
      const [leader, same, other] = await Promise.all(forms.map((form) => call(leaderKey, body(content, form))))
      expect([leader!, same!, other!].map(status)).toEqual(['MISS', 'COALESCED', 'COALESCED'])
      if (stream) {
        const [led, twin] = await Promise.all([readSSE(leader!), readSSE(same!)])
        expect(blank(twin)).toEqual(blank(led))
        expect(blank(led)).toEqual(blank(liveStream))
        const json = (await other!.json()) as Json
        expect(blank(json)).toEqual(expectedJson(json))
      } else {
        const [led, twin] = await Promise.all([leader!.json(), same!.json()])
        expect(blank(twin)).toEqual(blank(led))
        expect(blank(led)).toEqual(blank(liveJson))
        const events = await readSSE(other!)
        expect(blank(reassemble(events))).toEqual(expectedStream(events))
      }
      await h.settle()
    }
  })
})
