// The least a gateway can do, for `npm run bench:latency`: lower bounds of a gateway's added latency
// over the workerd floor (scripts/bench/passthrough-worker.js), with none of podgate's code. Each shape
// (`?shape=`) adds one thing podgate cannot leave out on top of the previous one:
//   `parse`  reads the caller's JSON body (to check the key's access to the model, to normalize it and
//            to validate it) and sends it on, then returns the upstream's response as is;
//   `usage`  also learns the usage: a JSON answer is read and sent again, a stream is teed and the
//            copy read to its end (in `waitUntil`), so the quota can be settled from real tokens;
//   `first`  (streams) also waits for the upstream's first chunk before answering, so that a stream
//            failing before its first token can still be failed over or answered with a real status.
// The key check is one in-memory Map lookup, as podgate's is once the key is cached in the isolate.
const KEYS = new Map([['bench', { models: ['bench'] }]])

export default {
  async fetch(request, env, ctx) {
    const url = new URL(request.url)
    const shape = url.searchParams.get('shape') ?? 'parse'
    const key = KEYS.get((request.headers.get('authorization') ?? '').slice('Bearer '.length))
    if (!key) return Response.json({ error: { message: 'unknown key' } }, { status: 401 })
    const body = await request.json()
    if (typeof body?.model !== 'string' || !key.models.includes(body.model)) return Response.json({ error: { message: 'bad model' } }, { status: 400 })
    const res = await fetch(`${env.UPSTREAM}${url.pathname}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
    if (shape === 'parse') return res
    if (!body.stream) {
      const answer = await res.json()
      ctx.waitUntil(Promise.resolve(answer.usage))
      return Response.json(answer, { status: res.status })
    }
    let first
    if (shape === 'first') {
      const reader = res.body.getReader()
      first = await reader.read()
      reader.releaseLock()
    }
    // The copy is read chunk by chunk: reading it whole (`new Response(copy).text()`) holds the caller's
    // branch back until the stream ends here (workerd 2026-08: the tee then pulls for the bulk read), and
    // the caller got its first event 22 ms late on a 20-event stream. The caller's branch is piped into
    // an identity stream, as podgate's pipe does.
    const [caller, copy] = res.body.tee()
    ctx.waitUntil((async () => {
      const reader = copy.getReader()
      while (!(await reader.read()).done);
    })())
    const { readable, writable } = new IdentityTransformStream()
    if (first && !first.done) {
      const writer = writable.getWriter()
      writer.write(first.value).catch(() => undefined)
      writer.releaseLock()
    }
    ctx.waitUntil(caller.pipeTo(writable))
    return new Response(readable, { status: res.status, headers: res.headers })
  },
}
