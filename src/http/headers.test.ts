import { Hono } from 'hono'
import { describe, expect, it } from 'vitest'
import { setAnswerHeader, withHeaders } from './headers.ts'

// `Response.redirect` makes a response whose headers are immutable, as a `fetch` answer's are.
const immutable = () => Response.redirect('https://example.com/next', 302)

describe('withHeaders', () => {
  it('sets the headers on the same response when they can change', async () => {
    const response = new Response('hi', { headers: { 'content-type': 'text/plain' } })
    const out = withHeaders(response, { 'x-one': '1', 'x-two': '2' })
    expect(out).toBe(response)
    expect(Object.fromEntries(out.headers)).toEqual({ 'content-type': 'text/plain', 'x-one': '1', 'x-two': '2' })
    expect(await out.text()).toBe('hi')
  })

  it('copies a response whose headers are immutable, keeping its status and headers', () => {
    const response = immutable()
    expect(() => response.headers.set('x-probe', '1')).toThrow(TypeError)
    const out = withHeaders(response, { 'x-one': '1' })
    expect(out).not.toBe(response)
    expect(out.status).toBe(302)
    expect(out.headers.get('location')).toBe('https://example.com/next')
    expect(out.headers.get('x-one')).toBe('1')
  })
})

describe('setAnswerHeader', () => {
  function app(answer: () => Response) {
    const hono = new Hono()
    hono.use(async (c, next) => {
      await next()
      setAnswerHeader(c, 'x-request-id', 'r1')
      setAnswerHeader(c, 'vary', 'Origin', { append: true })
    })
    hono.get('/', () => answer())
    return hono
  }

  it('sets and appends on the handler\'s own response', async () => {
    const res = await app(() => new Response('ok', { headers: { vary: 'Accept' } })).request('/')
    expect(res.headers.get('x-request-id')).toBe('r1')
    expect(res.headers.get('vary')).toBe('Accept, Origin')
    expect(await res.text()).toBe('ok')
  })

  it('falls back to a copy when the response\'s headers are immutable', async () => {
    const res = await app(immutable).request('/')
    expect(res.status).toBe(302)
    expect(res.headers.get('location')).toBe('https://example.com/next')
    expect(res.headers.get('x-request-id')).toBe('r1')
    expect(res.headers.get('vary')).toBe('Origin')
  })
})
