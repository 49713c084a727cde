/**
 * `npm run keys`: the CLI drives the admin API of a real podgate (wrangler dev) by URL.
 */
import { execFile } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startPodgate } from '../../scripts/lib/podgate-server.ts'
import type { PodgateServer } from '../../scripts/lib/podgate-server.ts'
import { runKeysCli } from '../../scripts/keys.ts'
import { clearDevUrl, readDevUrl, writeDevUrl } from '../../scripts/lib/dev-state.ts'
import { serveNode } from '../../scripts/lib/serve-node.ts'

let server: PodgateServer

beforeAll(async () => {
  server = await startPodgate()
})
afterAll(async () => {
  await server?.close()
})

async function keys(...argv: string[]): Promise<{ code: number; out: string; err: string; json: unknown }> {
  let out = ''
  let err = ''
  const code = await runKeysCli(argv, { env: { PODGATE_ADMIN_TOKEN: server.adminToken, PODGATE_URL: server.url }, out: (t) => (out += t), err: (t) => (err += t), fetch })
  let json: unknown = null
  try {
    json = JSON.parse(out)
  } catch {
    // not every outcome prints JSON
  }
  return { code, out, err, json }
}

function models(key: string, origin?: string): Promise<Response> {
  return fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${key}`, ...(origin ? { origin } : {}) } })
}

describe('npm run keys', () => {
  it('create, get, update, rotate, list and revoke, each visible on the API', async () => {
    const created = await keys('create', '--name', 'cli-web', '--kind', 'publishable', '--origins', 'https://app.example.com', '--models', 'chat-openai', '--expires', '30d', '--metadata', 'team=web', '--quota', '{"requestsPerMinute":30}')
    expect(created.code).toBe(0)
    expect(created.err).toMatch(/shown only now/)
    const record = created.json as { id: string; key: string; expiresAt: number }
    expect(record).toMatchObject({ name: 'cli-web', kind: 'publishable', origins: ['https://app.example.com'], models: ['chat-openai'], metadata: { team: 'web' }, quota: { requestsPerMinute: 30 } })
    expect(record.key).toMatch(/^pg_pk_/)
    expect(record.expiresAt).toBeGreaterThan(Date.now() + 29 * 86_400_000)
    expect((await models(record.key, 'https://app.example.com')).status).toBe(200)

    const updated = await keys('update', record.id, '--origins', 'https://other.example.com', '--models', 'all', '--expires', 'never')
    expect(updated.code).toBe(0)
    expect(updated.json).toMatchObject({ id: record.id, origins: ['https://other.example.com'], models: null, expiresAt: null })
    expect((await keys('get', record.id)).json).toMatchObject({ id: record.id, origins: ['https://other.example.com'] })

    const rotated = await keys('rotate', record.id)
    expect(rotated.code).toBe(0)
    const fresh = (rotated.json as { key: string }).key
    expect(fresh).toMatch(/^pg_pk_/)
    expect((await models(fresh, 'https://other.example.com')).status).toBe(200)
    expect((await models(record.key, 'https://other.example.com')).status).toBe(401)

    const listed = await keys('list')
    expect(listed.code).toBe(0)
    expect((listed.json as { id: string }[]).map((k) => k.id)).toContain(record.id)
    expect(listed.out).not.toContain(fresh)

    const revoked = await keys('revoke', record.id)
    expect(revoked.json).toMatchObject({ id: record.id, revoked: true })
    expect((await models(fresh, 'https://other.example.com')).status).toBe(401)
  })

  // Rotating keeps the key's expiry: an expired key's new secret is refused like the old one was.
  it('rotating an expired key says that its new secret does not work until its expiry moves', async () => {
    const created = await keys('create', '--name', 'soon', '--expires', new Date(Date.now() + 1_500).toISOString())
    expect(created.code).toBe(0)
    const { id } = created.json as { id: string }
    await new Promise((resolve) => setTimeout(resolve, 1_600))
    const rotated = await keys('rotate', id)
    expect(rotated.code).toBe(0)
    expect(rotated.err).toMatch(new RegExp(`expired at .*update ${id} --expires`))
    expect((await models((rotated.json as { key: string }).key)).status).toBe(401)
    const fresh = await keys('rotate', id)
    await keys('update', id, '--expires', '1d')
    expect((await keys('rotate', id)).err).not.toMatch(/expired/)
    expect(fresh.err).toMatch(/expired/)
  })

  it('fails clearly: API refusals, usage mistakes, a wrong token', async () => {
    const refused = await keys('create', '--name', 'x', '--kind', 'publishable')
    expect(refused.code).toBe(1)
    expect(refused.err).toMatch(/400: A publishable key needs at least one origin/)
    const usage = await keys('create')
    expect(usage.code).toBe(2)
    expect(usage.err).toMatch(/create needs --name/)
    expect((await keys('frobnicate')).err).toMatch(/unknown command/)
    const help = await keys('--help')
    expect(help.code).toBe(0)
    expect(help.out).toMatch(/^usage: npm run keys/)
    expect((await keys('get', 'key_AAAAAAAAAAAAAAAA')).err).toMatch(/404/)
    let err = ''
    const code = await runKeysCli(['list', '--url', server.url, '--admin-token', 'wrong-token-0123456789'], { env: {}, out: () => {}, err: (t) => (err += t), fetch })
    expect(code).toBe(1)
    expect(err).toMatch(/401/)
  })

  it('refuses a second key id instead of acting on the first alone', async () => {
    const a = (await keys('create', '--name', 'one')).json as { id: string }
    const b = (await keys('create', '--name', 'two')).json as { id: string }
    const revoke = await keys('revoke', a.id, b.id)
    expect(revoke.code).toBe(2)
    expect(revoke.err).toMatch(/one key id/)
    // Neither was revoked.
    expect(((await keys('get', a.id)).json as { revokedAt: unknown }).revokedAt).toBeNull()
    expect(((await keys('get', b.id)).json as { revokedAt: unknown }).revokedAt).toBeNull()
  })

  it('refuses an --expires that is no duration and no ISO date, where Date.parse would read it as a year long past', async () => {
    for (const text of ['7', '12', 'May 5', 'x 1']) {
      const res = await keys('create', '--name', 'exp', '--expires', text)
      expect(res.code).toBe(2)
      expect(res.err).toMatch(/--expires/)
    }
    expect((await keys('create', '--name', 'exp', '--expires', '2099-01-01')).code).toBe(0)
  })

  it('says a --url that answers something other than podgate\'s JSON is not a podgate, and never prints the token', async () => {
    let err = ''
    const token = 'admin-token-never-printed-0123'
    const html = (async () => new Response('<!DOCTYPE html><html>a website</html>', { status: 200, headers: { 'content-type': 'text/html' } })) as typeof fetch
    const code = await runKeysCli(['list', '--url', 'https://www.example.com', '--admin-token', token], { env: {}, out: () => {}, err: (t) => (err += t), fetch: html })
    expect(code).toBe(1)
    expect(err).toMatch(/https:\/\/www\.example\.com.*not podgate's JSON/)
    expect(err).not.toContain(token)
  })

  it("says an error answer that is not podgate's JSON (a web site's 404 page) comes from no podgate, without printing the page", async () => {
    for (const [status, body] of [[404, '<!DOCTYPE html><html><title>Error response</title>a website</html>'], [404, '{"detail":"Not Found"}'], [500, '<html>Worker threw exception</html>']] as const) {
      let err = ''
      const page = (async () => new Response(body, { status })) as typeof fetch
      expect(await runKeysCli(['list', '--url', 'https://www.example.com', '--admin-token', 'some-admin-token-0123'], { env: {}, out: () => {}, err: (t) => (err += t), fetch: page })).toBe(1)
      expect(err).toMatch(new RegExp(`https://www\\.example\\.com.*${status}.*not podgate's JSON`))
      expect(err).not.toMatch(/<|detail|TypeError/)
      // A podgate that fails to start answers such a page too: the message says where to look.
      if (status === 500) expect(err).toContain('wrangler tail')
    }
  })

  it('says why every admin route is 404: a podgate with no admin token, or a --url that is not one', async () => {
    let err = ''
    const off = (async () => new Response(JSON.stringify({ error: { message: 'Not found.', code: 'not_found' } }), { status: 404 })) as typeof fetch
    expect(await runKeysCli(['list', '--url', 'https://podgate.example', '--admin-token', 'some-admin-token-0123'], { env: {}, out: () => {}, err: (t) => (err += t), fetch: off })).toBe(1)
    expect(err).toMatch(/404: Not found\..*PODGATE_ADMIN_TOKEN/)
    // A key id that is not there stays the API's own answer.
    expect((await keys('get', 'key_AAAAAAAAAAAAAAAA')).err).not.toMatch(/PODGATE_ADMIN_TOKEN/)
  })

  it('runs as `npm run keys` with the admin token from the environment', async () => {
    const { stdout } = await promisify(execFile)('npm', ['run', '--silent', 'keys', '--', 'create', '--name', 'from-npm', '--url', server.url], {
      env: { ...process.env, PODGATE_ADMIN_TOKEN: server.adminToken },
    })
    const record = JSON.parse(stdout) as { key: string }
    expect(record.key).toMatch(/^pg_sk_/)
    expect((await models(record.key)).status).toBe(200)
  })

  it('with no flags and no environment, finds what `npm run dev` left: .dev.vars and the URL it serves on', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'podgate-keys-dev-'))
    try {
      writeFileSync(join(dir, '.dev.vars'), `# written by npm run dev\nPODGATE_ADMIN_TOKEN="${server.adminToken}"\n`)
      mkdirSync(join(dir, '.wrangler'))
      // The pid of a live process: this one (the dev server's own pid in real use).
      writeFileSync(join(dir, '.wrangler', 'podgate-dev.json'), JSON.stringify({ url: server.url, pid: process.pid }))
      let out = ''
      const code = await runKeysCli(['create', '--name', 'from-dev-files'], { env: {}, out: (t) => (out += t), err: () => {}, fetch, devDir: dir })
      expect(code).toBe(0)
      expect((await models((JSON.parse(out) as { key: string }).key)).status).toBe(200)

      // The dev token is never sent to a non-local URL, even when .dev.vars has one.
      let err = ''
      const remote = await runKeysCli(['list', '--url', 'https://podgate.example.workers.dev'], { env: {}, out: () => {}, err: (t) => (err += t), fetch, devDir: dir })
      expect(remote).toBe(2)
      expect(err).toMatch(/no admin token/)
      // Running `npm run dev` would not help: its token is never sent there.
      expect(err.split('\n')[0]).not.toContain('npm run dev')
      expect(err).toContain('PODGATE_ADMIN_TOKEN')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('a second `npm run dev` from the same directory (another PORT), once it stops, leaves the first one\'s URL to `npm run keys`', () => {
    const dir = mkdtempSync(join(tmpdir(), 'podgate-keys-two-devs-'))
    try {
      // The first dev server, still running on PORT=8797 (another process: the test runner's parent).
      mkdirSync(join(dir, '.wrangler'))
      writeFileSync(join(dir, '.wrangler', 'podgate-dev.json'), JSON.stringify({ url: 'http://127.0.0.1:8797', pid: process.ppid }))
      // The second one stops before it is ready (a config mistake): the first one's URL stays.
      clearDevUrl(dir)
      expect(readDevUrl(dir)).toBe('http://127.0.0.1:8797')
      // The second one ready on 8807: keys talks to it while it runs, to the first again once it stopped.
      writeDevUrl(dir, 'http://127.0.0.1:8807')
      expect(readDevUrl(dir)).toBe('http://127.0.0.1:8807')
      clearDevUrl(dir)
      expect(readDevUrl(dir)).toBe('http://127.0.0.1:8797')
      // Alone, a dev server's stop leaves nothing behind.
      writeFileSync(join(dir, '.wrangler', 'podgate-dev.json'), JSON.stringify({ url: 'http://127.0.0.1:8797', pid: 2 ** 22 + 1 }))
      writeDevUrl(dir, 'http://127.0.0.1:8807')
      clearDevUrl(dir)
      expect(readDevUrl(dir)).toBeUndefined()
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  // The docs' block starts with `export PODGATE_ADMIN_TOKEN=...` (a deployed Worker's): that token wins over
  // .dev.vars, and a local `create` then failed with a bare "401: Invalid admin token.".
  it("a PODGATE_ADMIN_TOKEN in the environment that is not the dev server's: the 401 says .dev.vars holds another", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'podgate-keys-env-token-'))
    try {
      writeFileSync(join(dir, '.dev.vars'), `PODGATE_ADMIN_TOKEN="${server.adminToken}"\n`)
      const production = 'production-admin-token-0123456789'
      let err = ''
      const code = await runKeysCli(['create', '--name', 'env-token', '--url', server.url], { env: { PODGATE_ADMIN_TOKEN: production }, out: () => {}, err: (t) => (err += t), fetch, devDir: dir })
      expect(code).toBe(1)
      expect(err).toMatch(/401: Invalid admin token\..*PODGATE_ADMIN_TOKEN.*environment.*\.dev\.vars/)
      expect(err).not.toContain(production)
      expect(err).not.toContain(server.adminToken)
      // The same token in both: a 401 from elsewhere gets no such hint (here: a token given on the command line).
      err = ''
      await runKeysCli(['list', '--url', server.url, '--admin-token', production], { env: {}, out: () => {}, err: (t) => (err += t), fetch, devDir: dir })
      expect(err).toMatch(/401: Invalid admin token\.$/m)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('reads .dev.vars as wrangler does: a hand-edited token in single quotes, with a comment, is the one the Worker got', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'podgate-keys-dotenv-'))
    try {
      // The old reader kept the quotes (and an unquoted value's comment): the CLI sent another token, and got 401.
      for (const line of [`PODGATE_ADMIN_TOKEN='${server.adminToken}'`, `export PODGATE_ADMIN_TOKEN=${server.adminToken} # mine`]) {
        writeFileSync(join(dir, '.dev.vars'), `${line}\n`)
        let out = ''
        let err = ''
        const code = await runKeysCli(['create', '--name', 'hand-edited', '--url', server.url], { env: {}, out: (t) => (out += t), err: (t) => (err += t), fetch, devDir: dir })
        expect(code, err).toBe(0)
        expect((await models((JSON.parse(out) as { key: string }).key)).status).toBe(200)
      }
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

describe('npm run keys: mistakes caught before any request', () => {
  const cli = async (argv: string[], env: Record<string, string> = {}, answer?: Response) => {
    let err = ''
    const code = await runKeysCli(argv, { env, out: () => {}, err: (t) => (err += t), fetch: async () => answer ?? new Response('{}') })
    return { code, err }
  }
  it('a missing or unknown command prints the usage and exits 2, with or without an admin token', async () => {
    for (const env of [{}, { PODGATE_ADMIN_TOKEN: 'tok-0123456789abcdef' }] as Record<string, string>[]) {
      for (const argv of [[], ['lsit']]) {
        const { code, err } = await cli(argv, env)
        expect(code).toBe(2)
        expect(err).toContain('usage: npm run keys')
        expect(err).not.toContain('no admin token')
      }
    }
  })
  it('list against a 200 answer with no data array says so and exits 1, without a TypeError', async () => {
    for (const body of ['{"error":{"message":"x"}}', '[]', '{"data":"no"}']) {
      const { code, err } = await cli(['list', '--url', 'https://podgate.example', '--admin-token', 'tok-0123456789abcdef'], {}, new Response(body))
      expect(code).toBe(1)
      expect(err).toContain('not podgate')
      expect(err).not.toMatch(/TypeError|not iterable|undefined/)
      expect(err).not.toContain('tok-0123456789abcdef')
    }
  })
})

describe('npm run keys: a --url it cannot use, or cannot reach', () => {
  const cli = async (argv: string[], env: Record<string, string> = {}, fail?: Error) => {
    let err = ''
    let sent = 0
    const fetch = (async () => {
      sent++
      if (fail) throw fail
      return new Response('{"object":"list","data":[],"cursor":null}')
    }) as typeof globalThis.fetch
    const code = await runKeysCli(argv, { env, out: () => {}, err: (t) => (err += t), fetch })
    return { code, err, sent }
  }
  const token = 'admin-token-never-printed-0123'

  // Without a scheme the CLI said "cannot reach podgate ...: is it running (npm run dev)? Pass --url", to a
  // user who had passed --url; a loopback address without one was told to set the token of a deployed Worker.
  it('a URL without http:// or https:// is a usage mistake that names the flag or variable, and nothing is sent', async () => {
    for (const [argv, env, source] of [
      [['list', '--url', 'podgate.example.workers.dev', '--admin-token', token], {}, '--url'],
      [['list', '--url', '127.0.0.1:8787'], {}, '--url'],
      [['list', '--url', 'localhost:8787', '--admin-token', token], {}, '--url'],
      [['list'], { PODGATE_URL: 'podgate.example.workers.dev', PODGATE_ADMIN_TOKEN: token }, 'PODGATE_URL'],
    ] as [string[], Record<string, string>, string][]) {
      const { code, err, sent } = await cli(argv, env)
      expect(code, err).toBe(2)
      expect(sent).toBe(0)
      expect(err).toContain(`${source} '`)
      expect(err).toMatch(/https?:\/\//)
      expect(err).not.toMatch(/no admin token|npm run dev\)\?/)
      expect(err).not.toContain(token)
    }
  })

  // The cause (an unknown host, a refused connection, TLS) was dropped, and a deployed URL was asked whether `npm run dev` ran.
  it('a URL it cannot reach: says why, and asks about `npm run dev` only for a local URL', async () => {
    const dns = new TypeError('fetch failed', { cause: Object.assign(new Error('getaddrinfo ENOTFOUND podgate.example.workers.dev'), { code: 'ENOTFOUND' }) })
    const remote = await cli(['list', '--url', 'https://podgate.example.workers.dev', '--admin-token', token], {}, dns)
    expect(remote.code).toBe(1)
    expect(remote.err).toContain('cannot reach podgate at https://podgate.example.workers.dev')
    expect(remote.err).toContain('getaddrinfo ENOTFOUND podgate.example.workers.dev')
    expect(remote.err).not.toContain('npm run dev')
    expect(remote.err).not.toContain(token)
    const refused = new TypeError('fetch failed', { cause: Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:8787'), { code: 'ECONNREFUSED' }) })
    const local = await cli(['list', '--url', 'http://127.0.0.1:8787', '--admin-token', token], {}, refused)
    expect(local.code).toBe(1)
    expect(local.err).toContain('connect ECONNREFUSED 127.0.0.1:8787')
    expect(local.err).toContain('npm run dev')
  })
})

describe('npm run keys: plain http:// to another host', () => {
  // The admin token went over plain http to a LAN or remote host without a word: not refused (a LAN dev
  // setup), but said once, on stderr, before the call, and never with the token.
  it('warns once on stderr before the call, without the token; https and loopback are quiet', async () => {
    const token = 'admin-token-never-printed-0123'
    const run = async (argv: string[]) => {
      let err = ''
      const before: string[] = []
      const fetch = (async () => {
        before.push(err)
        return new Response('{"object":"list","data":[],"cursor":null}')
      }) as typeof globalThis.fetch
      const code = await runKeysCli([...argv, '--admin-token', token], { env: {}, out: () => {}, err: (t) => (err += `${t}\n`), fetch })
      return { code, err, before }
    }
    for (const url of ['http://192.168.1.20:8787', 'http://podgate.example.com']) {
      const { code, err, before } = await run(['list', '--url', url])
      expect(code, err).toBe(0)
      expect(before).toHaveLength(1)
      expect(before[0]).toMatch(new RegExp(`^keys: warning: .*${url.replaceAll('.', '\\.')}.*plain http://.*https://`))
      expect(err.split('\n').filter(Boolean)).toHaveLength(1)
      expect(err).not.toContain(token)
    }
    for (const url of ['https://podgate.example.com', 'http://127.0.0.1:8787', 'http://127.0.0.2:8787', 'http://localhost:8787', 'http://[::1]:8787']) {
      const { code, err } = await run(['list', '--url', url])
      expect(code, url).toBe(0)
      expect(err).toBe('')
    }
    // Nothing sent, nothing to warn about.
    const usage = await run(['get', '--url', 'http://192.168.1.20:8787'])
    expect(usage.code).toBe(2)
    expect(usage.before).toEqual([])
    expect(usage.err).not.toMatch(/warning/)
  })
})

describe('npm run keys: a --url that redirects', () => {
  // fetch followed it: a POST became a GET and, to another origin (http -> https), lost its Authorization,
  // so `create` printed "401: Invalid admin token." for a right token (or, same-origin, printed the key list).
  it('is named with where it redirects, and no call goes on to that address', async () => {
    const redirect = await serveNode((request) => new Response(null, { status: 301, headers: { location: server.url + new URL(request.url).pathname } }), { port: 0 })
    try {
      let out = ''
      let err = ''
      const code = await runKeysCli(['create', '--name', 'redirected', '--url', redirect.url, '--admin-token', server.adminToken], { env: {}, out: (t) => (out += t), err: (t) => (err += t), fetch })
      expect(code).toBe(1)
      expect(out).toBe('')
      expect(err).toContain(`${redirect.url} answered POST /admin/keys with a redirect (301) to ${server.url}/admin/keys`)
      expect(err).not.toContain(server.adminToken)
      expect(err).not.toMatch(/Invalid admin token/)
    } finally {
      await redirect.close()
    }
  })
})
