/**
 * Schemas a Worker may never use in an isolate's life (admin routes, token minting, the native surface)
 * are built on their first use, not when the module loads: building a zod schema costs time at startup,
 * on every cold start, whether or not a request ever needs it.
 */

/** `build()` once, on the first call; the same value after. */
export function lazily<T>(build: () => T): () => T {
  let built: T | undefined
  return () => (built ??= build())
}
