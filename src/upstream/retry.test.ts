import { describe, expect, it } from 'vitest'
import { resilienceSchema } from '../config/schema.ts'
import { RetryPlan } from './retry.ts'
import type { Endpoint } from './runpod/client.ts'

const endpoint = (label: string): Endpoint => ({ base: `https://api.runpod.ai/v2/${label}`, label, mode: 'native', weight: 1, credential: { kind: 'runpod' } })

describe('RetryPlan.nextOther (the endpoint of a hedge)', () => {
  it('passes over an endpoint whose breaker is open; those passed over keep their turns, in order, for the retries', () => {
    const [a, b, c, d] = ['a', 'b', 'c', 'd'].map(endpoint) as [Endpoint, Endpoint, Endpoint, Endpoint]
    let open: Endpoint | undefined = b
    const breaker = { isOpen: (e: Endpoint) => e === open, success: () => undefined, failure: () => undefined }
    const resilience = resilienceSchema.parse({ retries: { attempts: 5 } })
    const plan = new RetryPlan({ endpoints: [a, b, c, d], resilience, breaker, deadline: Date.now() + 60_000 })
    expect(plan.next()).toBe(a)
    expect(plan.nextOther(a)).toBe(c)
    // `b`'s cool-down ended: a retry goes to an open one only while none is closed (the test below).
    open = undefined
    expect([plan.next(), plan.next(), plan.next()]).toEqual([b, d, a])
    expect(plan.next()).toBeUndefined()
  })

  it('passes over another entry of the endpoint it hedges (a model may list one endpoint twice)', () => {
    const [a, again] = [endpoint('a'), endpoint('a')]
    const breaker = { isOpen: () => false, success: () => undefined, failure: () => undefined }
    const plan = new RetryPlan({ endpoints: [a, again], resilience: resilienceSchema.parse({ retries: { attempts: 3 } }), breaker, deadline: Date.now() + 60_000 })
    expect(plan.next()).toBe(a)
    expect(plan.nextOther(a)).toBeUndefined()
  })
})

describe('RetryPlan.next', () => {
  it('passes over an endpoint whose breaker opened during the call while another is closed, and tries it when none is', () => {
    const [a, b, c] = ['a', 'b', 'c'].map(endpoint) as [Endpoint, Endpoint, Endpoint]
    const open = new Set<Endpoint>()
    const breaker = { isOpen: (e: Endpoint) => open.has(e), success: () => undefined, failure: () => undefined }
    const plan = new RetryPlan({ endpoints: [a, b, c], resilience: resilienceSchema.parse({ retries: { attempts: 6 } }), breaker, deadline: Date.now() + 60_000 })
    expect(plan.next()).toBe(a)
    open.add(a)
    expect([plan.next(), plan.next(), plan.next()]).toEqual([b, c, b])
    open.add(b).add(c)
    expect([plan.next(), plan.next()]).toEqual([a, c])
  })
})
