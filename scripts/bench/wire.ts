/**
 * The bench upstream's wire format, shared by the loopback HTTP upstream (`upstream.ts`) and the
 * in-workerd CPU bench (`cpu-worker/`): one place decides what a "typical" call and answer look like.
 *
 * The scenario travels in the last message's text (`bench:events=100,bytes=16,first=10,gap=1`) so the
 * same body works unchanged through direct calls, podgate and Portkey: gateways pass prompts through.
 */

export interface Scenario {
  /** SSE events with content (a final stop chunk, the usage chunk and `[DONE]` follow). Default 100. */
  events: number
  /** Characters of content per event. Default 16. */
  bytes: number
  /** Milliseconds before the JSON answer or the first event. Default 10. */
  first: number
  /** Milliseconds between events; 0 writes them as fast as the socket takes them. Default 1. */
  gap: number
}

const DEFAULTS: Scenario = { events: 100, bytes: 16, first: 10, gap: 1 }

export function scenarioPrompt(scenario: Partial<Scenario> = {}): string {
  const s = { ...DEFAULTS, ...scenario }
  return `bench:events=${s.events},bytes=${s.bytes},first=${s.first},gap=${s.gap}`
}

export function parseScenario(body: string): Scenario {
  const match = /bench:([a-z0-9=,]+)/.exec(body)
  const s = { ...DEFAULTS }
  if (!match) return s
  for (const pair of match[1]!.split(',')) {
    const [name, value] = pair.split('=')
    if (name && name in s && value !== undefined) s[name as keyof Scenario] = Number(value)
  }
  return s
}

/**
 * A typical chat request: a system prompt, a short exchange, sampling settings. About 1 KB. With its
 * `temperature: 0.7` and no `seed` it is not cacheable; `extra` can add a `seed` to make it so.
 */
export function chatBody(model: string, scenario: Partial<Scenario> = {}, stream = false, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    model,
    messages: [
      { role: 'system', content: 'You are a concise assistant for an online bookshop. Answer in two sentences at most. '.repeat(4) },
      { role: 'user', content: 'Which of your science fiction titles would suit a reader who liked Solaris and Roadside Picnic?' },
      { role: 'assistant', content: 'Try The Left Hand of Darkness and Blindsight: both treat the alien as truly unknowable.' },
      { role: 'user', content: `Anything shorter? ${scenarioPrompt(scenario)}` },
    ],
    max_tokens: 256,
    temperature: 0.7,
    top_p: 0.95,
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    ...extra,
  })
}

let seed = 0

/**
 * The typical call of the HTTP runs: `chatBody` with a `seed` no earlier call used. A seed makes the
 * request cacheable and a new one makes it unseen, so podgate's cache looks it up, misses, and stores
 * the answer, as it does for every cacheable request it has not answered yet. The other targets pass
 * the seed on unread. (Seed 0 stays free for requests that are meant to hit.)
 */
export function typicalChat(model: string, scenario: Partial<Scenario> = {}, stream = false, extra: Record<string, unknown> = {}): string {
  return chatBody(model, scenario, stream, { seed: ++seed, ...extra })
}

export function completionJson(model: string): string {
  return JSON.stringify({
    id: 'chatcmpl-bench',
    object: 'chat.completion',
    created: 1_700_000_000,
    model,
    choices: [{ index: 0, message: { role: 'assistant', content: 'Try Ted Chiang: Story of Your Life, then Exhalation.' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 180, completion_tokens: 14, total_tokens: 194 },
  })
}

/** One content event, `index` 0-based. */
export function contentEvent(model: string, index: number, bytes: number): string {
  const text = `${index % 10}`.repeat(bytes)
  return `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"${model}","choices":[{"index":0,"delta":{"content":"${text}"},"finish_reason":null}]}\n\n`
}

export function closingEvents(model: string, events: number): string {
  return (
    `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"${model}","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n` +
    `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"${model}","choices":[],"usage":{"prompt_tokens":180,"completion_tokens":${events},"total_tokens":${180 + events}}}\n\n` +
    'data: [DONE]\n\n'
  )
}
