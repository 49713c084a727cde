/**
 * In-memory stand-ins for Workers KV and the Cache API, for the CPU bench only. In production a KV
 * or cache operation is I/O that the Worker waits on, not CPU it is billed for; locally, miniflare
 * simulates both inside the same workerd process, so their CPU would be counted as podgate's.
 * These keep only podgate's own work (serializing, hashing, deciding) in the measurement.
 */

interface Entry {
  value: string
  metadata: unknown
}

export function memoryKv(): KVNamespace {
  const entries = new Map<string, Entry>()
  const kv = {
    async get(key: string, type?: string | { type?: string }) {
      const entry = entries.get(key)
      if (!entry) return null
      const kind = typeof type === 'string' ? type : (type?.type ?? 'text')
      return kind === 'json' ? JSON.parse(entry.value) : entry.value
    },
    async getWithMetadata(key: string, type?: string | { type?: string }) {
      const entry = entries.get(key)
      return { value: entry ? await kv.get(key, type) : null, metadata: entry?.metadata ?? null }
    },
    async put(key: string, value: string, options?: { metadata?: unknown }) {
      entries.set(key, { value: String(value), metadata: options?.metadata ?? null })
    },
    async delete(key: string) {
      entries.delete(key)
    },
    async list(options: { prefix?: string; limit?: number } = {}) {
      const keys = [...entries]
        .filter(([name]) => name.startsWith(options.prefix ?? ''))
        .slice(0, options.limit ?? 1000)
        .map(([name, entry]) => ({ name, metadata: entry.metadata ?? undefined }))
      return { keys, list_complete: true, cacheStatus: null }
    },
  }
  return kv as unknown as KVNamespace
}

export function memoryCache(): Cache {
  const entries = new Map<string, { body: string; headers: Headers; status: number }>()
  const url = (request: RequestInfo | URL) => (typeof request === 'string' ? request : request instanceof URL ? request.href : request.url)
  const cache = {
    async match(request: RequestInfo | URL) {
      const entry = entries.get(url(request))
      return entry ? new Response(entry.body, { status: entry.status, headers: entry.headers }) : undefined
    },
    async put(request: RequestInfo | URL, response: Response) {
      entries.set(url(request), { body: await response.text(), headers: new Headers(response.headers), status: response.status })
    },
    async delete(request: RequestInfo | URL) {
      return entries.delete(url(request))
    },
  }
  return cache as unknown as Cache
}
