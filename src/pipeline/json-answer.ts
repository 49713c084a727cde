/**
 * A JSON answer that goes down the pipeline with its parsed body: the dispatcher already holds the
 * object it serialized, so a stage that needs the body (the cache's capture) takes it from here instead
 * of reading the response back and parsing it a second time. A response made any other way, or rebuilt
 * by a stage on the way, has none, and such a stage reads its body as before.
 */

export interface JsonAnswer {
  /** The parsed body. Read only: the caller's bytes are `text`, already serialized. */
  readonly body: Record<string, unknown>
  /** The body as the caller receives it. */
  readonly text: string
}

// Keyed by the Response object, which the stages pass on unchanged until one rebuilds it.
const answers = new WeakMap<Response, JsonAnswer>()

/**
 * A 200 `application/json` response of `body`, serialized once, whose parsed body later stages can
 * read with `jsonAnswerOf`.
 *
 * @example
 * return jsonAnswerResponse({ id: 'chatcmpl-1', object: 'chat.completion', choices: [] })
 */
export function jsonAnswerResponse(body: Record<string, unknown>): Response {
  const text = JSON.stringify(body)
  const response = new Response(text, { headers: { 'content-type': 'application/json' } })
  answers.set(response, { body, text })
  return response
}

/** The parsed body of a response made by `jsonAnswerResponse`, or undefined for any other response. */
export function jsonAnswerOf(response: Response): JsonAnswer | undefined {
  return answers.get(response)
}
