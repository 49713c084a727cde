/**
 * The published package is consumable: `npm run build`, `npm pack`, install the tarball into a scratch
 * Hono app under the OS temp dir (with the hono, zod, typescript and workers-types versions this repo
 * uses), typecheck an app that imports `podgate` and `podgate/testing` through the package's
 * exports, then run it on Node against the emulator. Every `ts` block of README.md and docs/*.md that
 * imports `podgate` is typechecked there as its own module, as a library user would write it, and the
 * library Worker of docs/composition.md runs under `wrangler dev` with that page's wrangler.toml.
 */
import { spawnSync } from 'node:child_process'
import type { SpawnSyncOptions } from 'node:child_process'
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startPodgate } from '../../scripts/lib/podgate-server.ts'

const ROOT = resolve(import.meta.dirname, '../..')
const scratch = mkdtempSync(join(tmpdir(), 'podgate-pack-'))

afterAll(() => rmSync(scratch, { recursive: true, force: true }))

function run(command: string, args: string[], options: SpawnSyncOptions = {}): string {
  const result = spawnSync(command, args, { encoding: 'utf8', timeout: 90_000, ...options })
  if (result.status !== 0) throw new Error(`${command} ${args.join(' ')} failed (${result.status ?? result.signal}):\n${String(result.stdout).slice(-3000)}\n${String(result.stderr).slice(-3000)}`)
  return String(result.stdout)
}

// A small app a user would write: podgate mounted in Hono, with an in-memory KV (Node has none).
const APP = `import { Hono } from 'hono'
import { createGateway, GatewayError, openApiHandler } from 'podgate'
import type { GatewayOptions, LogSink } from 'podgate'
import { createRunpodEmulator } from 'podgate/testing'

function memoryKv(): KVNamespace {
  const data = new Map<string, { value: string; metadata: unknown }>()
  const kv = {
    async get(name: string, type?: string | { type?: string }) {
      const entry = data.get(name)
      if (!entry) return null
      const t = typeof type === 'string' ? type : type?.type
      return t === 'json' ? JSON.parse(entry.value) : entry.value
    },
    async getWithMetadata(name: string) {
      const entry = data.get(name)
      return { value: entry?.value ?? null, metadata: entry?.metadata ?? null }
    },
    async put(name: string, value: string, options?: { metadata?: unknown }) {
      data.set(name, { value, metadata: options?.metadata ?? null })
    },
    async delete(name: string) {
      data.delete(name)
    },
    async list(options: { prefix?: string } = {}) {
      const keys = [...data].filter(([k]) => k.startsWith(options.prefix ?? '')).map(([name, e]) => ({ name, metadata: e.metadata }))
      return { keys, list_complete: true, cacheStatus: null }
    },
  }
  return kv as unknown as KVNamespace
}

const emulator = createRunpodEmulator({ apiKey: 'rp_demo_key' })
const kv = memoryKv()
const lines: string[] = []
const logSink: LogSink = (line) => void lines.push(line)
const options: GatewayOptions = {
  models: { 'chat-current': { endpoints: [{ endpointId: 'vllmcurrent' }], mode: 'native' } },
  runpod: { apiKey: 'rp_demo_key', baseUrl: 'https://emulator.test/v2' },
  adminToken: 'admin_demo_token_0123456789',
  kv: () => kv,
  fetch: (input, init) => emulator.fetch(new Request(input, init)),
  extras: { openapi: openApiHandler },
  logSink,
}
const app = new Hono()
app.get('/', (c) => c.text('host app'))
app.route('/ai', createGateway(options))

const admin = { authorization: 'Bearer admin_demo_token_0123456789', 'content-type': 'application/json' }
const created = await app.request('/ai/admin/keys', { method: 'POST', headers: admin, body: JSON.stringify({ name: 'packed' }) })
const { key } = (await created.json()) as { key: string }
const headers = { authorization: 'Bearer ' + key, 'content-type': 'application/json' }
const body = (stream: boolean) => JSON.stringify({ model: 'chat-current', messages: [{ role: 'user', content: 'hi from the tarball' }], max_tokens: 16, stream })
const full = await app.request('/ai/v1/chat/completions', { method: 'POST', headers, body: body(false) })
const streamed = await app.request('/ai/v1/chat/completions', { method: 'POST', headers, body: body(true) })
const openapi = await app.request('/ai/openapi.json')
console.log(JSON.stringify({
  home: await (await app.request('/')).text(),
  created: created.status,
  status: full.status,
  text: ((await full.json()) as { choices: { message: { content: string } }[] }).choices[0]?.message.content,
  streamType: streamed.headers.get('content-type'),
  streamEndsWithDone: (await streamed.text()).trimEnd().endsWith('data: [DONE]'),
  openapi: ((await openapi.json()) as { openapi: string }).openapi,
  gatewayError: new GatewayError('not_found', 'x').status,
}))
`

let files: string[] = []
let tarball = ''

// Build, pack and install once; every test below uses the installed tarball.
beforeAll(() => {
  run('npm', ['run', 'build'], { cwd: ROOT })
  const packed = JSON.parse(run('npm', ['pack', '--json', '--pack-destination', scratch], { cwd: ROOT })) as { filename: string; files: { path: string }[] }[]
  files = packed[0]!.files.map((f) => f.path)
  tarball = join(scratch, packed[0]!.filename)

  // The versions this repo is tested with (npm's cache already holds them, so the install stays quick).
  const local = (name: string) => (JSON.parse(readFileSync(join(ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version
  writeFileSync(join(scratch, 'package.json'), JSON.stringify({
    name: 'scratch-app',
    private: true,
    type: 'module',
    dependencies: {
      podgate: `file:${join(scratch, packed[0]!.filename)}`,
      hono: local('hono'),
      zod: local('zod'),
      typescript: local('typescript'),
      '@cloudflare/workers-types': local('@cloudflare/workers-types'),
    },
  }))
  writeFileSync(join(scratch, 'tsconfig.json'), JSON.stringify({
    compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, types: ['@cloudflare/workers-types'], outDir: 'out', skipLibCheck: false, lib: ['ES2023'] },
    include: ['app.ts'],
  }))
  writeFileSync(join(scratch, 'app.ts'), APP)
  run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--ignore-scripts', '--loglevel', 'error'], { cwd: scratch })
}, 180_000)

describe('the packed package', () => {
  it('installs into a scratch Hono app, typechecks and runs on Node', { timeout: 120_000 }, () => {
    expect(files).toContain('dist/index.js')
    expect(files).toContain('dist/testing/index.d.ts')
    expect(files).toContain('dist/worker.d.ts')
    expect(files.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toEqual([])
    // The README links to docs/*.md, and package.json names a licence: both ship with the package.
    expect(files).toEqual(expect.arrayContaining(['LICENSE', 'README.md', 'docs/configuration.md', 'docs/api.md']))
    expect(readdirSync(join(scratch, 'node_modules', 'podgate'))).toContain('dist')

    run(process.execPath, [join(scratch, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json'], { cwd: scratch })
    // Workers-only modules (`cloudflare:*`) make a module unimportable elsewhere: only the Durable
    // Object subpath (`podgate/durable-objects`, imported by Worker entry points alone) may use them.
    const workersOnly = files.filter((f) => f.endsWith('.js') && /^(import|export)\b.*from ['"]cloudflare:/m.test(readFileSync(join(scratch, 'node_modules', 'podgate', f), 'utf8')))
    expect(workersOnly, 'files of the package that import cloudflare:* (podgate must import on Node too)').toEqual(['dist/quota/durable-object.js'])
    const output = run(process.execPath, ['out/app.js'], { cwd: scratch })
    const result = JSON.parse(output.trim().split('\n').at(-1)!) as Record<string, unknown>
    expect(result).toMatchObject({
      home: 'host app',
      created: 201,
      status: 200,
      streamType: expect.stringMatching(/^text\/event-stream/),
      streamEndsWithDone: true,
      openapi: '3.1.0',
      gatewayError: 404,
    })
    expect(String(result.text).length).toBeGreaterThan(0)
  })

  it('a CommonJS module require()s the package and each subpath but the Workers-only one (Node >= 22.12, the engines floor, loads ESM through require), and its package.json', () => {
    const probe = "const p = require('podgate'); const t = require('podgate/testing'); const w = require('podgate/worker'); console.log(JSON.stringify([typeof p.createGateway, typeof t.createRunpodEmulator, typeof w.optionsFromEnv, require('podgate/package.json').name]))"
    const output = run(process.execPath, ['-e', probe], { cwd: scratch })
    expect(JSON.parse(output.trim().split('\n').at(-1)!)).toEqual(['function', 'function', 'function', 'podgate'])
  })

  it('every relative link of the README and docs/ it ships leads to a file it ships, but the repository\'s own records', () => {
    // Repository material the docs cite, not part of what a user installs: benchmark records and the
    // example Worker's source (docs/composition.md shows it whole).
    const repositoryOnly = new Set(['BENCHMARKS.md', 'scripts/bench/NOTES.md', 'workers/composed.ts'])
    const missing: string[] = []
    for (const doc of files.filter((f) => f.endsWith('.md'))) {
      const text = readFileSync(join(scratch, 'node_modules', 'podgate', doc), 'utf8')
      for (const [, target] of text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
        if (/^[a-z]+:/.test(target!)) continue
        const path = join(doc, '..', target!)
        if (!files.includes(path) && !repositoryOnly.has(path)) missing.push(`${doc} -> ${target}`)
      }
    }
    expect(missing).toEqual([])
  })

  it('the composed example Worker bundles for deployment (docs/composition.md: npm run deploy -- --config workers/composed.wrangler.toml), its placeholders named', { timeout: 60_000 }, () => {
    const outdir = join(scratch, 'composed-bundle')
    const deploy = spawnSync('npm', ['run', 'deploy', '--', '--dry-run', '--config', 'workers/composed.wrangler.toml', '--outdir', outdir], { cwd: ROOT, encoding: 'utf8', timeout: 90_000 })
    const output = String(deploy.stdout)
    expect(deploy.status, `${output.slice(-3000)}\n${String(deploy.stderr).slice(-3000)}`).toBe(0)
    expect(output).toContain('--dry-run: exiting now.')
    // A dry run only warns; a real deploy refuses them (test/e2e/deploy.test.ts).
    expect(String(deploy.stderr)).toContain('--dry-run: workers/composed.wrangler.toml still holds the placeholder "your0endpoint0id"')
    expect(readdirSync(outdir)).toContain('composed.js')
    // Workers' free plan allows 3 MiB gzipped; podgate should stay far below (about 200 KiB today).
    const gzip = Number(/gzip: ([\d.]+) KiB/.exec(output)?.[1])
    expect(gzip).toBeGreaterThan(0)
    expect(gzip).toBeLessThan(400)
  })

  it('every ts block of README.md and docs/*.md that imports podgate typechecks against the package, each as its own module', { timeout: 120_000 }, () => {
    const dir = join(scratch, 'snippets')
    mkdirSync(dir, { recursive: true })
    const names: string[] = []
    for (const doc of ['README.md', ...readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)]) {
      const text = readFileSync(join(ROOT, doc), 'utf8')
      let n = 0
      for (const [, code] of text.matchAll(/^```ts\n([\s\S]*?)^```$/gm)) {
        if (!/from 'podgate(\/[a-z-]+)?'/.test(code!)) continue
        const name = `${doc.replace(/[/.]/g, '_')}_${++n}.ts`
        // `export {}` keeps a block without exports a module, so blocks never share names.
        writeFileSync(join(dir, name), `${code}\nexport {}\n`)
        names.push(name)
      }
    }
    // The README's library snippet, configuration's example, composition's Worker and app at least.
    expect(names).toEqual(expect.arrayContaining(['README_md_1.ts', 'docs_configuration_md_1.ts', 'docs_composition_md_1.ts', 'docs_composition_md_2.ts', 'docs_composition_md_3.ts']))
    // As a Worker project compiles them: bundler resolution, workers-types, strict.
    writeFileSync(join(scratch, 'tsconfig.snippets.json'), JSON.stringify({
      compilerOptions: { target: 'ES2022', module: 'ESNext', moduleResolution: 'Bundler', strict: true, noUncheckedIndexedAccess: true, verbatimModuleSyntax: true, types: ['@cloudflare/workers-types'], lib: ['ES2023'], noEmit: true, skipLibCheck: true },
      include: ['snippets/*.ts'],
    }))
    run(process.execPath, [join(scratch, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.snippets.json'], { cwd: scratch })
  })

  it('docs/composition.md shows workers/composed.ts whole, as a library user imports it', () => {
    const composed = readFileSync(join(ROOT, 'workers/composed.ts'), 'utf8')
      .replaceAll("from '../src/index.ts'", "from 'podgate'")
      .replaceAll("from '../src/worker.ts'", "from 'podgate/worker'")
    expect(readFileSync(join(ROOT, 'docs/composition.md'), 'utf8')).toContain(`\`\`\`ts\n${composed.trimEnd()}\n\`\`\``)
  })

  it('the library Worker and wrangler.toml of docs/composition.md run under wrangler dev and stream an answer', { timeout: 120_000 }, async () => {
    const doc = readFileSync(join(ROOT, 'docs/composition.md'), 'utf8')
    const worker = /^```ts\n(\/\/ src\/index\.ts of your Worker[\s\S]*?)^```$/m.exec(doc)?.[1]
    const toml = /^```toml\n([\s\S]*?)^```$/m.exec(doc)?.[1]
    expect(worker).toBeDefined()
    expect(toml).toBeDefined()
    mkdirSync(join(scratch, 'src'), { recursive: true })
    writeFileSync(join(scratch, 'src/index.ts'), worker!)
    writeFileSync(join(scratch, 'wrangler.toml'), toml!.replace('<your namespace id>', '0123456789abcdef0123456789abcdef'))
    const models = JSON.stringify({ 'chat-current': { endpoints: [{ endpointId: 'vllmcurrent' }], mode: 'native' } })
    const server = await startPodgate({ config: join(scratch, 'wrangler.toml'), env: '', vars: { PODGATE_MODELS: models } })
    try {
      const { key } = await server.createKey()
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'chat-current', messages: [{ role: 'user', content: 'hi' }], max_tokens: 16, stream: true }),
      })
      expect(res.status).toBe(200)
      expect((await res.text()).trimEnd().endsWith('data: [DONE]')).toBe(true)
      expect((await fetch(`${server.url}/openapi.json`)).status).toBe(200)
    } finally {
      await server.close()
    }
  })
})

// The lowest versions package.json's peerDependencies allow, with a host app's own middleware that
// parses the body first (docs/composition.md: Hono before 4.8.4 caches c.req.json()'s parsed value).
const LOWEST_PEERS_APP = `import { Hono } from 'hono'
import { createGateway, KeyStore } from 'podgate'
import { createRunpodEmulator } from 'podgate/testing'

const data = new Map()
const kv = {
  async get(name, type) { const e = data.get(name); if (!e) return null; return (typeof type === 'string' ? type : type?.type) === 'json' ? JSON.parse(e.value) : e.value },
  async getWithMetadata(name) { const e = data.get(name); return { value: e?.value ?? null, metadata: e?.metadata ?? null } },
  async put(name, value, options) { data.set(name, { value, metadata: options?.metadata ?? null }) },
  async delete(name) { data.delete(name) },
  async list() { return { keys: [], list_complete: true } },
}
const emulator = createRunpodEmulator({ apiKey: 'rp_demo_key' })
const app = new Hono()
const seen = []
app.use('/ai/*', async (c, next) => {
  if (c.req.method === 'POST') seen.push((await c.req.json().catch(() => null))?.model ?? null)
  await next()
})
app.route('/ai', createGateway({
  models: { 'chat-openai': { endpoints: [{ endpointId: 'vllmopenai' }], mode: 'openai' }, 'chat-current': { endpoints: [{ endpointId: 'vllmcurrent' }], mode: 'native' } },
  runpod: { apiKey: 'rp_demo_key', baseUrl: 'https://emulator.test/v2' },
  kv: () => kv,
  fetch: (input, init) => emulator.fetch(new Request(input, init)),
  logSink: () => {},
}))
const { key } = await new KeyStore(kv, { cacheTtlMs: 0 }).create({ name: 'lowest' })
const post = async (path, body) => {
  const res = await app.request(path, { method: 'POST', headers: { authorization: 'Bearer ' + key, 'content-type': 'application/json' }, body })
  const json = await res.json()
  return [res.status, json.error?.code ?? json.code ?? json.object ?? json.status]
}
const chat = (extra) => JSON.stringify({ model: 'chat-openai', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, ...extra })
console.log(JSON.stringify({
  chat: await post('/ai/v1/chat/completions', chat({})),
  badJson: await post('/ai/v1/chat/completions', '{"model": "chat-openai", '),
  badField: await post('/ai/v1/chat/completions', chat({ temperature: 'hot' })),
  native: await post('/ai/v2/chat-current/runsync', JSON.stringify({ input: { prompt: 'hi', sampling_params: { max_tokens: 4 } } })),
  nativeBadJson: await post('/ai/v2/chat-current/run', '{'),
  refused: (await app.request('/ai/v1/models')).status,
  seen,
}))
`

describe('the packed package with the lowest peer versions it declares', () => {
  it('installs with hono and zod at their floors and answers as with current ones, a host middleware that parsed the body first included', { timeout: 180_000 }, () => {
    const peers = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { peerDependencies: Record<string, string> }).peerDependencies
    const floor = (name: string) => /^\^(\d+\.\d+\.\d+)$/.exec(peers[name] ?? '')?.[1]
    expect(floor('hono'), 'hono peer range').toBeDefined()
    expect(floor('zod'), 'zod peer range').toBeDefined()
    const dir = join(scratch, 'lowest-peers')
    mkdirSync(dir, { recursive: true })
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'lowest-peers', private: true, type: 'module', dependencies: { podgate: `file:${tarball}`, hono: floor('hono'), zod: floor('zod') } }))
    writeFileSync(join(dir, 'app.js'), LOWEST_PEERS_APP)
    run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--ignore-scripts', '--loglevel', 'error'], { cwd: dir, timeout: 150_000 })
    expect((JSON.parse(readFileSync(join(dir, 'node_modules/hono/package.json'), 'utf8')) as { version: string }).version).toBe(floor('hono'))
    const output = run(process.execPath, ['app.js'], { cwd: dir })
    expect(JSON.parse(output.trim().split('\n').at(-1)!)).toEqual({
      chat: [200, 'chat.completion'],
      badJson: [400, 'invalid_json'],
      badField: [400, 'invalid_request'],
      native: [200, 'COMPLETED'],
      nativeBadJson: [400, 'invalid_json'],
      refused: 401,
      seen: ['chat-openai', null, 'chat-openai', null, null],
    })
  })
})
