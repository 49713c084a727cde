/**
 * What a refused request body costs podgate's validation (src/normalize/bounded.ts): bodies full of bad
 * items, and valid large ones, through the normalizers in Node, with the time and the process's RSS
 * after each. Run with a small heap to see whether one would take down an isolate:
 * `npx node --max-old-space-size=128 scripts/bench/refused-bodies.ts`.
 */
import { normalizeChatRequest, normalizeEmbeddingRequest } from '../../src/normalize/index.ts'
import { modelSchema } from '../../src/config/schema.ts'

const model = modelSchema.parse({ endpoints: [{ endpointId: 'bench' }] })
const time = (name: string, run: () => unknown) => {
  const started = performance.now()
  let answer = 'accepted'
  try {
    run()
  } catch (error) {
    answer = (error as Error).message.slice(0, 90)
  }
  console.log(`${name.padEnd(40)} ${(performance.now() - started).toFixed(0).padStart(5)} ms  RSS ${Math.round(process.memoryUsage().rss / 1e6)} MB  ${answer}`)
}
const ones = (n: number) => Array.from({ length: n }, () => 1)
time('10 messages × 100k bad parts', () => normalizeChatRequest({ model: 'm', messages: Array.from({ length: 10 }, () => ({ role: 'user', content: ones(100_000) })) }, model, 'm'))
time('100 messages × 9,000 parts, one bad', () => normalizeChatRequest({ model: 'm', messages: Array.from({ length: 100 }, () => ({ role: 'user', content: ['fine', 5, ...ones(9_000)] })) }, model, 'm'))
time('input: 9,999 strings, then a number', () => normalizeEmbeddingRequest({ model: 'm', input: [...Array.from({ length: 9_999 }, () => 'a'), 5] }, model, 'm'))
time('input: a million ids, the last a string', () => normalizeEmbeddingRequest({ model: 'm', input: [...ones(999_999), 'x'] }, model, 'm'))
time('input: a million valid ids', () => normalizeEmbeddingRequest({ model: 'm', input: ones(1_000_000) }, model, 'm'))
time('2,000 valid messages', () => normalizeChatRequest({ model: 'm', messages: Array.from({ length: 2_000 }, () => ({ role: 'user', content: 'hello' })) }, model, 'm'))
