/**
 * Issue 15, M5 / item 7 and L2: a caller who hangs up after its prompt reached the GPU pays for the
 * prompt (and any output the upstream reports), and an upstream that reports no usage is charged the
 * prompt estimate, not 0. The job is still cancelled upstream.
 */
import { describe, expect, it } from 'vitest'
import { authed, chatBody, harness, MODELS } from '../helpers.ts'
import type { Harness } from '../helpers.ts'

/** A fixed quota clock: these tests span a 3 s cold start, and a minute boundary inside one would move the charge. */
const QUOTA_CLOCK = { now: () => Date.UTC(2026, 0, 1, 12, 0, 30) }

/** The prompt is 400 characters: podgate's estimate is 100 tokens. */
const PROMPT = 'p'.repeat(400 - ' [[emulator:tokens=5,cold=3000]]'.length)

async function minuteTokens(h: Harness, key: string): Promise<number | undefined> {
  await h.settle()
  const usage = (await (await h.fetch('/v1/usage', authed(key))).json()) as { windows: { minute: { tokens: number } } | null }
  return usage.windows?.minute.tokens
}

describe('M5: a disconnect before the first output byte', () => {
  it('upstream-M5-native: a native stream dropped while its job is queued charges the prompt estimate and cancels the job', async () => {
    const h = harness({ models: { 'chat-classic': { ...MODELS['chat-classic']!, resilience: { ttftBudgetMs: 0 } } }, quota: QUOTA_CLOCK })
    const { key } = await h.createKey({ name: 'q', quota: { tokensPerMinute: 100_000, strict: true } })
    const content = `${PROMPT} [[emulator:tokens=5,cold=3000]]`
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-classic', content, { stream: true, max_tokens: 50 })))
    expect(res.status).toBe(200)
    const reader = res.body!.getReader()
    // The response opened at once (no TTFT hold): the first read is a keep-alive, no output yet.
    expect(new TextDecoder().decode((await reader.read()).value)).toBe(': keep-alive\n\n')
    await reader.cancel()
    expect(await minuteTokens(h, key)).toBe(100)
    expect(h.emulator.calls.filter((c) => c.op === 'cancel')).toHaveLength(1)
  })

  it('upstream-M5-openai-route: an OpenAI-route stream dropped before any event is read charges the prompt estimate', async () => {
    const h = harness({ quota: QUOTA_CLOCK })
    const { key } = await h.createKey({ name: 'q', quota: { tokensPerMinute: 100_000, strict: true } })
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('chat-openai', `${PROMPT} [[emulator:tokens=5,cold=3000]]`, { stream: true, max_tokens: 50 })))
    expect(res.status).toBe(200)
    await res.body!.cancel()
    const charged = await minuteTokens(h, key)
    // The prompt estimate, or the upstream's own count when it had reported one: never the refund of old.
    expect(charged).toBeGreaterThan(0)
    expect(charged).toBeLessThan(150)
  })
})

describe('L2: no usage from the upstream', () => {
  it('upstream-L2: an answer without usage settles prompt estimate + counted output, not prompt 0', async () => {
    const h = harness({
      models: { local: { endpoints: [{ url: 'http://127.0.0.1:8000' }], mode: 'native' } },
      // A handler that reports no usage: 3 generation steps, nothing else.
      fetch: async () => Response.json({ id: 'l-1', status: 'COMPLETED', output: [{ choices: [{ tokens: ['a', 'b', 'c'] }] }] }),
      quota: QUOTA_CLOCK,
    })
    const { key } = await h.createKey({ name: 'q', quota: { tokensPerMinute: 100_000, strict: true } })
    const res = await h.fetch('/v1/chat/completions', authed(key, chatBody('local', 'q'.repeat(400), { max_tokens: 50 })))
    expect(res.status).toBe(200)
    await res.text()
    expect(await minuteTokens(h, key)).toBe(100 + 3)
  })
})
