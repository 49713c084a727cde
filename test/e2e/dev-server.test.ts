/**
 * The README's path, for real: podgate under `wrangler dev` (workerd) with the HTTP emulator, an
 * admin-created key, and the official `openai` client over the network.
 */
import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startPodgate } from '../../scripts/lib/podgate-server.ts'
import type { PodgateServer } from '../../scripts/lib/podgate-server.ts'

let server: PodgateServer

beforeAll(async () => {
  server = await startPodgate()
})
afterAll(async () => {
  await server?.close()
})

describe('podgate under wrangler dev', () => {
  it.each(['chat-openai', 'chat-classic', 'chat-current'])('%s streams over real HTTP and leaves no job running', async (model) => {
    const { key } = await server.createKey()
    const openai = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 })
    const messages = [{ role: 'user' as const, content: `e2e ${model}` }]
    const full = await openai.chat.completions.create({ model, messages, max_tokens: 32 })
    let streamed = ''
    for await (const chunk of await openai.chat.completions.create({ model, messages, max_tokens: 32, stream: true })) {
      streamed += chunk.choices[0]?.delta.content ?? ''
    }
    expect(streamed).toBe(full.choices[0]?.message.content)
    expect(server.emulator?.activeJobs()).toEqual([])
  })
})
