/**
 * The README's quick start, as a newcomer runs it: `npm run dev` (scripts/dev.ts, with its emulator and
 * .dev.vars) in a directory of its own, then the "A first request" blocks of README.md as written: the
 * shell block with bash, the `openai` and AI SDK blocks with node. Only the port differs: the test
 * picks free ones and rewrites `127.0.0.1:8787` in the blocks.
 */
import { spawn, spawnSync } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { freePort } from '../../scripts/lib/podgate-server.ts'

const ROOT = resolve(import.meta.dirname, '../..')
const dir = mkdtempSync(join(tmpdir(), 'podgate-quickstart-'))
let dev: ChildProcess | undefined
let url = ''
let devOutput = ''

/** The README's fenced blocks of one language between two headings. */
function readmeBlocks(lang: 'sh' | 'ts', from: string, to: string): string[] {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8')
  const section = readme.slice(readme.indexOf(from), readme.indexOf(to))
  return [...section.matchAll(new RegExp(`^\`\`\`${lang}\\n([\\s\\S]*?)^\`\`\`$`, 'gm'))].map((m) => m[1]!.replaceAll('http://127.0.0.1:8787', url))
}

/** The "A first request" blocks. */
const firstRequestBlocks = (lang: 'sh' | 'ts') => readmeBlocks(lang, '### A first request', '### Tools, structured output')
/** The tools, structured output, embeddings and Responses blocks. */
const passthroughBlocks = () => readmeBlocks('ts', '### Tools, structured output', '## Deploy in five steps')

beforeAll(async () => {
  // The repository as a fresh clone has it, without the files a previous `npm run dev` left behind.
  for (const name of ['node_modules', 'package.json', 'wrangler.toml', 'tsconfig.json', 'src', 'workers', 'scripts']) symlinkSync(join(ROOT, name), join(dir, name))
  const port = await freePort()
  url = `http://127.0.0.1:${port}`
  const env = { ...process.env, PORT: String(port), EMULATOR_PORT: String(await freePort()), INSPECTOR_PORT: String(await freePort()), RUNPOD_API_KEY: '' }
  dev = spawn(process.execPath, ['scripts/dev.ts'], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] })
  dev.stdout?.on('data', (d: Buffer) => (devOutput += d.toString()))
  dev.stderr?.on('data', (d: Buffer) => (devOutput += d.toString()))
  for (let i = 0; !devOutput.includes('[podgate] ready on'); i++) {
    if (dev.exitCode !== null || i > 600) throw new Error(`npm run dev did not start:\n${devOutput.slice(-2000)}`)
    await new Promise((r) => setTimeout(r, 100))
  }
}, 90_000)

afterAll(async () => {
  if (dev && dev.exitCode === null) {
    const exited = new Promise((r) => dev!.once('exit', r))
    dev.kill('SIGTERM')
    await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))])
  }
  rmSync(dir, { recursive: true, force: true })
})

describe('the README quick start', () => {
  let key = ''

  it('npm run dev prints where it serves, the keys command and the playground origin', () => {
    expect(devOutput).toContain(`[podgate] ready on ${url}`)
    expect(devOutput).toContain('npm run keys -- create --name me')
    expect(devOutput).toContain(`--origins ${url}`)
  })

  it('the shell block creates a key with npm run keys (no flags) and streams an answer with curl', { timeout: 60_000 }, () => {
    const [shell] = firstRequestBlocks('sh')
    expect(shell).toMatch(/npm run -s keys -- create/)
    // `echo KEY=` afterwards hands the key to the next tests, as the reader's shell keeps $KEY.
    const result = spawnSync('bash', ['-euo', 'pipefail', '-c', `${shell}\necho\necho "KEY=$KEY"`], {
      cwd: dir,
      encoding: 'utf8',
      timeout: 60_000,
      // npm run uses the Node of node_modules/.bin, as in a reader's shell after `npm ci`.
      env: { ...process.env, PORT: '', PODGATE_URL: '', PODGATE_ADMIN_TOKEN: '' },
    })
    expect(result.status, `${result.stdout}\n${result.stderr}`).toBe(0)
    expect(result.stdout).toMatch(/^data: \{.*"chat\.completion\.chunk"/m)
    expect(result.stdout).toMatch(/^data: \[DONE\]$/m)
    key = /^KEY=(pg_sk_\w+)$/m.exec(result.stdout)?.[1] ?? ''
    expect(key).toMatch(/^pg_sk_/)
  })

  /** Runs a README block as `npx node <file>.ts` would: the Node 22 of node_modules/.bin, which strips the types. */
  function runBlock(code: string, name: string) {
    const file = join(dir, `${name}.ts`)
    writeFileSync(file, code)
    const result = spawnSync(process.execPath, [file], { cwd: dir, encoding: 'utf8', timeout: 60_000, env: { ...process.env, PODGATE_KEY: key } })
    expect(result.status, `${result.stdout}\n${result.stderr}`).toBe(0)
    return result.stdout
  }

  it('the openai client block streams an answer with node', { timeout: 60_000 }, () => {
    expect(runBlock(firstRequestBlocks('ts')[0]!, 'readme-0').trim().length).toBeGreaterThan(0)
  })

  it('the AI SDK block streams an answer, then prints the usage it asked for with includeUsage', { timeout: 60_000 }, () => {
    // Token counts, not `undefined`: the block's model must be one whose streams carry vLLM's usage.
    expect(runBlock(firstRequestBlocks('ts')[1]!, 'readme-1')).toMatch(/\S[\s\S]*inputTokens: \d+[\s\S]*outputTokens: \d+/)
  })

  it('the tools block runs a tool loop: the tool is called with a city, then the model answers', { timeout: 60_000 }, () => {
    const blocks = passthroughBlocks()
    expect(blocks).toHaveLength(4)
    expect(runBlock(blocks[0]!, 'readme-tools')).toMatch(/city: '[^']*'[\s\S]*\S/)
  })

  it('the structured output block prints an object with a title and a whole-number year', { timeout: 60_000 }, () => {
    expect(runBlock(passthroughBlocks()[1]!, 'readme-structured')).toMatch(/title: '[^']*',\s*year: -?\d+/)
  })

  it('the embeddings block prints one vector length per value, and the usage', { timeout: 60_000 }, () => {
    expect(runBlock(passthroughBlocks()[2]!, 'readme-embeddings')).toMatch(/\[ (\d+), \1 \][\s\S]*tokens/)
  })

  it('the Responses block streams text through /v1/responses, then prints the usage', { timeout: 60_000 }, () => {
    expect(runBlock(passthroughBlocks()[3]!, 'readme-responses')).toMatch(/\S[\s\S]*input_tokens: \d+[\s\S]*output_tokens: \d+/)
  })
})
