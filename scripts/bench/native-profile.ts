/**
 * `perf` over a workerd process: on-CPU samples with their call stacks, so each sample can be charged
 * both to what ran (the leaf: V8, the streams machinery, HTTP, GC, SQLite, the kernel) and to whose
 * JavaScript asked for it (the nearest JavaScript frame: podgate's bundle, mapped back to src/, or
 * Miniflare's own Workers, which simulate KV, the Cache API and Durable Objects locally).
 *
 * workerd ships with its symbols; V8 names its JIT code in `/tmp/perf-<pid>.map` when started with
 * `PERF_V8_FLAGS` (Miniflare passes MINIFLARE_WORKERD_V8_FLAGS to workerd).
 */
import { execFileSync, spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { moduleOf } from './cpu-profile.ts'

/**
 * For MINIFLARE_WORKERD_V8_FLAGS: a perf map of JIT code, and interpreted functions on the native stack.
 * The perf map turns on V8's event log too, which would leave a file per isolate in the working directory.
 */
export const PERF_V8_FLAGS = '--perf-basic-prof --interpreted-frames-native-stack --logfile=/dev/null --no-logfile-per-isolate'

/** Leaf symbol families, first match wins: approximate, but each names what a share is spent on. */
const CATEGORIES: Array<[string, (symbol: string, dso: string) => boolean]> = [
  ['kernel (syscalls, loopback TCP, files)', (_, dso) => dso.includes('kernel')],
  ['JavaScript code (JIT and interpreted)', (symbol) => symbol.startsWith('JS:')],
  ['V8 builtins (promises, calls, property access)', (symbol) => symbol.startsWith('Builtins_')],
  ['V8 garbage collection', (symbol) => /^(v8::internal::(Heap|Scavenger|MarkCompact|MinorMarkSweep|ConcurrentMarking|Sweeper|IncrementalMarking|Marking|Evacuat|PagedSpace|NewSpace|SemiSpace|LargeObjectSpace|MemoryAllocator|MemoryChunk|GCTracer|ArrayBufferSweeper|GlobalHandles|WriteBarrier|LocalHeap)|cppgc::|heap::)/.test(symbol)],
  ['V8 parser and compilers', (symbol) => /^v8::internal::(compiler|maglev|baseline|interpreter::BytecodeGenerator|Compiler|Parser|Scanner|PreParser)/.test(symbol)],
  ['V8 runtime (objects, JSON, embedder API)', (symbol) => /^(v8::|Runtime_)/.test(symbol)],
  ['SQLite (the storage simulations)', (symbol) => /^sqlite3|Sqlite/.test(symbol)],
  ['workerd Web APIs (streams, fetch, Request, Response, Headers)', (symbol) => symbol.startsWith('workerd::api::')],
  ['workerd and JSG glue (isolate locks, wrappers, I/O context)', (symbol) => /^(workerd::|jsg::|_ZN7workerd)/.test(symbol)],
  ['event loop, async I/O and HTTP (KJ; tokio and hyper in Rust)', (symbol) => /^(kj::|kj_|capnp::|tokio::|hyper::|futures_util::|workerd_server::|<(kj_|tokio|hyper|futures_util|workerd_server))/.test(symbol)],
  ['memory allocation and copies (tcmalloc, libc)', (symbol) => /tcmalloc|TCMalloc|^__mem|^mem(cpy|move|set)|^malloc|^free|^operator (new|delete)/.test(symbol)],
]
const OTHER = 'other (libc, Rust runtime, unresolved)'

/** Whose JavaScript a sample ran for; `source` is set for the bundle's own frames. */
export interface Owner {
  owner: string
  source?: { file: string; line: number }
  name?: string
}

export interface StackProfile {
  samples: number
  /** Share of samples per leaf family. */
  leaves: Array<{ name: string; share: number }>
  /** Share of samples per owner: the nearest JavaScript frame's script, or no JavaScript on the stack. */
  owners: Array<{ name: string; share: number }>
  /** For the bundle's own frames: share per source module (folder under src/, or package). */
  modules: Array<{ name: string; share: number }>
  /** For the bundle's own frames: share per function (self, and the native work it called synchronously). */
  functions: Array<{ name: string; where: string; share: number }>
  /** Samples with no JavaScript on the stack: share per leaf family. */
  runtime: Array<{ name: string; share: number }>
}

export function perfAvailable(): boolean {
  try {
    execFileSync('perf', ['--version'], { stdio: 'pipe' })
    return true
  } catch {
    return false
  }
}

/** Starts sampling `pid` with call stacks (999 Hz). Stop with `stopPerf`. */
export function startPerf(pid: number, output: string): ChildProcess {
  return spawn('perf', ['record', '-F', '999', '-g', '-p', String(pid), '-o', output, '--quiet'], { stdio: 'ignore' })
}

export async function stopPerf(perf: ChildProcess): Promise<void> {
  if (perf.exitCode !== null) return
  const exited = new Promise((resolve) => perf.once('exit', resolve))
  perf.kill('SIGINT')
  await exited
}

/**
 * Reads `perf script` stacks. `classify` turns a JavaScript frame (`JS:<tier><name> <script>:<line>:<column>`
 * in the perf map) into its owner, e.g. the bundle's function mapped to src/, or Miniflare.
 */
export function readPerfStacks(data: string, classify: (name: string, script: string, line: number, column: number) => Owner, top = 20): StackProfile {
  const text = execFileSync('perf', ['script', '-i', data, '-F', 'ip,sym,dso'], { encoding: 'utf8', maxBuffer: 1024 * 2 ** 20, stdio: ['ignore', 'pipe', 'ignore'] })
  const count = () => new Map<string, number>()
  const leaves = count()
  const owners = count()
  const modules = count()
  const functions = new Map<string, { name: string; where: string; n: number }>()
  const runtime = count()
  const add = (map: Map<string, number>, key: string) => map.set(key, (map.get(key) ?? 0) + 1)
  let samples = 0
  for (const block of text.split('\n\n')) {
    const frames = block.split('\n').map(parseFrame).filter((f) => f !== undefined)
    if (frames.length === 0) continue
    samples++
    const leaf = frames[0]!
    const family = CATEGORIES.find(([, matches]) => matches(leaf.symbol, leaf.dso))?.[0] ?? OTHER
    add(leaves, family)
    const js = frames.map((f) => /^JS:[~^+*']*(.*) (\S+):(\d+):(\d+)$/.exec(f.symbol)).find((m) => m !== null)
    if (!js) {
      add(owners, 'no JavaScript on the stack (HTTP in and out, stream pumping, event loop, kernel)')
      add(runtime, family)
      continue
    }
    const owner = classify(js[1]!, js[2]!, Number(js[3]), Number(js[4]))
    add(owners, owner.owner)
    if (owner.source) {
      add(modules, moduleOf(owner.source.file))
      const name = owner.name || '(anonymous)'
      const where = `${owner.source.file}:${owner.source.line}`
      const entry = functions.get(`${name} ${where}`) ?? { name, where, n: 0 }
      entry.n++
      functions.set(`${name} ${where}`, entry)
    }
  }
  const shares = (map: Map<string, number>) => [...map].map(([name, n]) => ({ name, share: n / samples })).sort((a, b) => b.share - a.share)
  return {
    samples,
    leaves: shares(leaves),
    owners: shares(owners),
    modules: shares(modules),
    functions: [...functions.values()].map((f) => ({ name: f.name, where: f.where, share: f.n / samples })).sort((a, b) => b.share - a.share).slice(0, top),
    runtime: shares(runtime),
  }
}

/** `   7f12 sym+0x1a (dso)` → symbol and dso. */
function parseFrame(line: string): { symbol: string; dso: string } | undefined {
  const match = /^\s*[0-9a-f]+\s+(.*?)\s+\(([^)]*)\)$/.exec(line)
  if (!match) return undefined
  return { symbol: match[1]!.replace(/\+0x[0-9a-f]+$/, ''), dso: match[2]! }
}
