/**
 * Runpod's own JavaScript SDK (`runpod-sdk`, unchanged) through podgate's native surface: podgate under
 * `wrangler dev` in front of the HTTP emulator, the SDK pointed at `<podgate>/v2` with a podgate key
 * and a model alias as its endpoint id. It runs on Node because the SDK reads its own package.json
 * through `createRequire`, which workerd does not offer.
 */
import runpodSdk from 'runpod-sdk'
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

const chat = (content: string, stream = false) => ({
  input: { messages: [{ role: 'user', content }], sampling_params: { max_tokens: 24 }, stream },
})

describe('runpod-sdk against podgate', () => {
  it.each(['chat-classic', 'chat-current'])('%s: run, status, stream, runSync, cancel, health', async (model) => {
    const { key } = await server.createKey()
    const endpoint = runpodSdk(key, { baseUrl: `${server.url}/v2` }).endpoint(model)
    if (!endpoint) throw new Error('no endpoint')

    const queued = await endpoint.run(chat(`sdk ${model} [[emulator:tokens=20]]`, true))
    expect(queued.status).toBe('IN_QUEUE')
    expect(typeof queued.id).toBe('string')

    const items: unknown[] = []
    for await (const item of endpoint.stream(queued.id)) items.push(item)
    expect(items.length).toBeGreaterThan(0)
    const status = await endpoint.status(queued.id)
    expect(status).toMatchObject({ id: queued.id, status: 'COMPLETED', completed: true, succeeded: true })
    // The SDK yields each `stream[i]` as is: `{output}` items, the same ones /status aggregates.
    expect(items).toEqual((status as { output: unknown[] }).output.map((output) => ({ output })))

    const sync = await endpoint.runSync(chat(`sync ${model} [[emulator:tokens=8]]`))
    expect(sync).toMatchObject({ status: 'COMPLETED', completed: true, succeeded: true })
    expect(sync.output).toHaveLength(1)

    // A cold job outlives runsync's wait: the SDK then follows it with status-sync.
    const cold = await endpoint.runSync(chat(`cold ${model} [[emulator:cold=1500,tokens=4]]`), 1000)
    expect(cold).toMatchObject({ status: 'COMPLETED', succeeded: true })

    const stalled = await endpoint.run(chat('stall [[emulator:fault=stall]]', true))
    const cancelled = await endpoint.cancel(stalled.id)
    expect(cancelled).toMatchObject({ id: stalled.id, status: 'CANCELLED' })

    const health = await endpoint.health()
    expect(health.jobs.completed).toBeGreaterThanOrEqual(2)
    expect(typeof health.workers.idle).toBe('number')
    expect(server.emulator?.activeJobs()).toEqual([])
  })

  it('a job id is worth nothing to another key', async () => {
    const owner = await server.createKey()
    const other = await server.createKey({ name: 'other' })
    const mine = runpodSdk(owner.key, { baseUrl: `${server.url}/v2` }).endpoint('chat-classic')
    const theirs = runpodSdk(other.key, { baseUrl: `${server.url}/v2` }).endpoint('chat-classic')
    if (!mine || !theirs) throw new Error('no endpoint')
    const job = await mine.run(chat('private [[emulator:tokens=3]]'))
    await expect(theirs.status(job.id)).rejects.toMatchObject({ response: { status: 404 } })
    await expect(theirs.cancel(job.id)).rejects.toMatchObject({ response: { status: 404 } })
    expect(await mine.statusSync(job.id, 5000)).toMatchObject({ status: 'COMPLETED' })
  })
})
