/**
 * Reads a V8 CPU profile (`.cpuprofile`, as the inspector's `Profiler.stop` returns it) of a Worker
 * bundle and says where the time went: self time per function, mapped through the bundle's source map
 * to the file in src/ (or the package) it came from, and per module.
 *
 * Built-in functions (Response, read, digest, …) have no script of their own: the function table lists
 * them by name with the nearest calling function from a script, and the module table counts their time
 * to that caller's module, which is the code that chose to call them.
 */
import { existsSync, readFileSync } from 'node:fs'
import { SourceMap } from 'node:module'

interface CallFrame {
  functionName: string
  url: string
  lineNumber: number
  columnNumber: number
}

interface ProfileNode {
  id: number
  callFrame: CallFrame
  children?: number[]
}

export interface CpuProfile {
  nodes: ProfileNode[]
  samples: number[]
  timeDeltas: number[]
  startTime: number
  endTime: number
}

export interface ProfileSummary {
  /** µs the profile covered. */
  totalUs: number
  /** µs sampled anywhere but `(idle)`. */
  busyUs: number
  /** Self time per function, largest first. */
  functions: Array<{ name: string; where: string; us: number }>
  /** Self time per module (`src/cache`, `zod`, `hono`, `bench harness`, `(garbage collector)`, …), largest first. */
  modules: Array<{ module: string; us: number }>
}

/** `(program)` is time V8 saw outside JavaScript: the runtime's own C++ work, or another isolate running. */
const SPECIAL = new Set(['(idle)', '(program)', '(garbage collector)', '(root)'])

/**
 * Resolves positions in a script to their source file through its source map (a script without one,
 * such as the pass-through Worker, is its own source); `undefined` when the frame is not in the script.
 */
export function bundleResolver(bundlePath: string): (frame: CallFrame) => { file: string; line: number } | undefined {
  const map = existsSync(`${bundlePath}.map`) ? new SourceMap(JSON.parse(readFileSync(`${bundlePath}.map`, 'utf8'))) : undefined
  const name = bundlePath.split('/').pop()!
  return (frame) => {
    if (!frame.url.endsWith(name)) return undefined
    const entry = (map?.findEntry(frame.lineNumber, frame.columnNumber) ?? {}) as { originalSource?: string; originalLine?: number }
    if (!entry.originalSource) return { file: name, line: frame.lineNumber + 1 }
    return { file: tidy(entry.originalSource), line: (entry.originalLine ?? 0) + 1 }
  }
}

/** `../../../node_modules/zod/v4/core/schemas.js` → `zod/v4/core/schemas.js`; `../../src/cache/key.ts` → `src/cache/key.ts`. */
function tidy(source: string): string {
  const pkg = /node_modules\/(.+)$/.exec(source)
  if (pkg) return pkg[1]!
  const local = /(?:^|\/)((?:src|scripts|workers)\/.+)$/.exec(source)
  return local ? local[1]! : source
}

/** The module a source file counts to: a folder under src/, a package, or the bench's own harness. */
export function moduleOf(file: string): string {
  if (file.startsWith('src/')) {
    const parts = file.split('/')
    return parts.length > 2 ? `${parts[0]}/${parts[1]}` : file
  }
  if (file.startsWith('scripts/')) return 'bench harness (scripts/bench)'
  if (file.startsWith('workers/')) return 'workers/'
  const pkg = /^((?:@[^/]+\/)?[^/]+)/.exec(file)
  return pkg ? pkg[1]! : file
}

export function summarizeProfile(profile: CpuProfile, resolve: (frame: CallFrame) => { file: string; line: number } | undefined, top = 25): ProfileSummary {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]))
  const parent = new Map<number, number>()
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id)
  const self = new Map<number, number>()
  // timeDeltas[i] is the time since the previous sample: the interval that ends at sample i belongs to it.
  profile.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)))

  /** The nearest frame (this one or a caller) that comes from a script, with its source position. */
  const scripted = new Map<number, { node: ProfileNode; source: { file: string; line: number } } | null>()
  const nearestScripted = (id: number): { node: ProfileNode; source: { file: string; line: number } } | null => {
    if (scripted.has(id)) return scripted.get(id)!
    const node = byId.get(id)!
    const source = node.callFrame.url ? resolve(node.callFrame) : undefined
    const found = source ? { node, source } : parent.has(id) ? nearestScripted(parent.get(id)!) : null
    scripted.set(id, found)
    return found
  }

  const functions = new Map<string, { name: string; where: string; us: number }>()
  const modules = new Map<string, number>()
  let totalUs = 0
  let idleUs = 0
  for (const [id, us] of self) {
    totalUs += us
    const frame = byId.get(id)!.callFrame
    if (SPECIAL.has(frame.functionName)) {
      if (frame.functionName === '(idle)') idleUs += us
      else modules.set(frame.functionName, (modules.get(frame.functionName) ?? 0) + us)
      continue
    }
    const own = frame.url ? resolve(frame) : undefined
    const caller = own ? null : nearestScripted(id)
    const name = frame.functionName || '(anonymous)'
    const where = own
      ? `${own.file}:${own.line}`
      : frame.url
        ? `${frame.url.split('/').pop()} (not in the bundle)`
        : caller
          ? `built-in, called from ${caller.node.callFrame.functionName || '(anonymous)'} (${caller.source.file}:${caller.source.line})`
          : 'built-in'
    const key = `${name} ${where}`
    const entry = functions.get(key) ?? { name, where, us: 0 }
    entry.us += us
    functions.set(key, entry)
    const module = own ? moduleOf(own.file) : caller ? moduleOf(caller.source.file) : 'runtime built-ins (no calling script)'
    modules.set(module, (modules.get(module) ?? 0) + us)
  }
  return {
    totalUs,
    busyUs: totalUs - idleUs,
    functions: [...functions.values()].sort((a, b) => b.us - a.us).slice(0, top),
    modules: [...modules].map(([module, us]) => ({ module, us })).sort((a, b) => b.us - a.us),
  }
}
