import { describe, expect, it } from 'vitest'
import { GatewayError } from '../errors/index.ts'
import { composeStages, createCompletionContext } from './index.ts'
import type { CompletionOutcome, CompletionStage } from './index.ts'
import type { Context } from 'hono'
import type { GatewayEnv } from '../types.ts'
import type { NormalizedRequest } from '../normalize/types.ts'
import type { ResolvedModel } from '../routing/models.ts'

const request = { kind: 'chat', model: 'm', stream: false, includeUsage: false, sampling: { max_tokens: 8 } } as NormalizedRequest
const model = { alias: 'm' } as ResolvedModel
const c = {} as Context<GatewayEnv>

/** A stage that records how the request settled, and throws after the answer when `failAfter`. */
function observer(seen: CompletionOutcome[], failAfter = false): CompletionStage {
  return async (ctx, next) => {
    void ctx.outcome.then((o) => seen.push(o))
    const response = await next(ctx)
    if (failAfter) throw new Error('stage failed after the answer')
    return response
  }
}

describe('composeStages', () => {
  it('settles the outcome when a later stage refuses, so an earlier reservation is released', async () => {
    const seen: CompletionOutcome[] = []
    const reserve = observer(seen)
    const refuse: CompletionStage = () => {
      throw new GatewayError('rate_limited', 'over quota')
    }
    const run = composeStages([reserve, refuse], async () => new Response('never'))
    await expect(run(createCompletionContext(c, request, model))).rejects.toThrow('over quota')
    await Promise.resolve()
    expect(seen).toHaveLength(1)
    expect(seen[0]).toMatchObject({ ok: false, producedOutput: false, refused: true, error: { code: 'rate_limited' } })
  })

  it('a dispatcher that throws without settling is not a refusal: the request may have gone upstream', async () => {
    const seen: CompletionOutcome[] = []
    const run = composeStages([observer(seen)], async () => {
      throw new GatewayError('upstream_unavailable', 'down')
    })
    await expect(run(createCompletionContext(c, request, model))).rejects.toThrow('down')
    await Promise.resolve()
    expect(seen[0]).toMatchObject({ ok: false, producedOutput: false })
    expect(seen[0]).not.toHaveProperty('refused', true)
  })

  it('keeps the first settlement when the dispatcher settles and a stage throws afterwards', async () => {
    const seen: CompletionOutcome[] = []
    const observe = observer(seen, true)
    const run = composeStages([observe], async (ctx) => {
      ctx.settle({ ok: true, usage: undefined })
      return new Response('ok')
    })
    await expect(run(createCompletionContext(c, request, model))).rejects.toThrow('stage failed')
    await Promise.resolve()
    expect(seen).toEqual([{ ok: true, usage: undefined }])
  })

  it('a stage that throws after the dispatcher answered is no refusal: the stream may still be running upstream', async () => {
    const seen: CompletionOutcome[] = []
    const observe = observer(seen, true)
    // A stream's dispatcher answers at once and settles only at the stream's end.
    const run = composeStages([observe], async () => new Response('streaming'))
    await expect(run(createCompletionContext(c, request, model))).rejects.toThrow('stage failed')
    await Promise.resolve()
    expect(seen[0]).toMatchObject({ ok: false })
    expect(seen[0]).not.toHaveProperty('refused', true)
  })

  it("starts every stage's warm reads before the first stage runs", async () => {
    const events: string[] = []
    const stage = (name: string, warm: boolean): CompletionStage => {
      const run: CompletionStage = async (ctx, next) => {
        events.push(`${name} runs`)
        return next(ctx)
      }
      if (warm) run.warm = () => void events.push(`${name} warms`)
      return run
    }
    const run = composeStages([stage('quota', false), stage('cache', true)], async () => {
      events.push('dispatch')
      return new Response('ok')
    })
    await run(createCompletionContext(c, request, model))
    expect(events).toEqual(['cache warms', 'quota runs', 'cache runs', 'dispatch'])
  })
})
