// For scripts/bench/miss-probe.ts: the floor (forward, answer the upstream's body) plus one write in
// `waitUntil`, to price what a write started beside the answer costs the answer in Miniflare:
// `?put=cache` (Cache API), `kv`, `kv-later` (the KV write started 3 ms after the answer), or none.
export default {
  async fetch(request, env, ctx) {
    const url = new URL(request.url)
    const upstream = await fetch(`${env.UPSTREAM}${url.pathname}`, { method: request.method, headers: request.headers, body: request.body })
    const text = await upstream.text()
    const put = url.searchParams.get('put')
    if (put === 'cache') ctx.waitUntil(caches.default.put(`https://cache.example/${crypto.randomUUID()}`, new Response(text, { headers: { 'cache-control': 'max-age=300' } })))
    if (put === 'kv') ctx.waitUntil(env.PODGATE_KV.put(crypto.randomUUID(), text, { expirationTtl: 300 }))
    if (put === 'kv-later') ctx.waitUntil(new Promise((resolve) => setTimeout(resolve, 3)).then(() => env.PODGATE_KV.put(crypto.randomUUID(), text, { expirationTtl: 300 })))
    return new Response(text, upstream)
  },
}
