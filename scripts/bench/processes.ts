/**
 * The processes a bench run starts (wrangler dev, Portkey) and what it reads about them from /proc:
 * CPU time with nanosecond resolution (summed over every thread) and resident memory.
 */
import { spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { existsSync, readdirSync, readFileSync } from 'node:fs'

export { freePort } from '../lib/podgate-server.ts'

export interface Spawned {
  child: ChildProcess
  /** Everything it printed, for the error message when it does not come up. */
  output(): string
  stop(): Promise<void>
}

/** Every process started and not yet stopped, so a failed run still stops them all. */
export const running = new Set<Spawned>()

export function start(command: string, args: string[], env: NodeJS.ProcessEnv = {}): Spawned {
  // Its own process group, so stopping it also stops what it started (wrangler's workerd).
  const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true })
  let output = ''
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString('utf8')).slice(-8000)
  }
  child.stdout?.on('data', keep)
  child.stderr?.on('data', keep)
  const spawned: Spawned = {
    child,
    output: () => output,
    stop: async () => {
      running.delete(spawned)
      if (child.exitCode !== null || child.pid === undefined) return
      const exited = new Promise((resolve) => child.once('exit', resolve))
      try {
        process.kill(-child.pid, 'SIGTERM')
      } catch {
        return
      }
      const timer = setTimeout(() => {
        try {
          process.kill(-child.pid!, 'SIGKILL')
        } catch {
          // already gone
        }
      }, 3000)
      await exited
      clearTimeout(timer)
    },
  }
  running.add(spawned)
  return spawned
}

export async function waitForHttp(url: string, spawned: Spawned, timeoutMs = 90_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (spawned.child.exitCode !== null) throw new Error(`exited (${spawned.child.exitCode}) before ${url} answered:\n${spawned.output()}`)
    // wrangler dev stays up after a build error, waiting for a file change: fail now instead.
    const plain = spawned.output().replace(/\x1b\[[0-9;]*m/g, '')
    if (plain.includes('[ERROR]')) throw new Error(`failed to start:\n${plain}`)
    try {
      const res = await fetch(url)
      await res.arrayBuffer()
      if (res.status < 500) return
    } catch {
      // not up yet
    }
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  throw new Error(`${url} did not answer within ${timeoutMs} ms:\n${spawned.output()}`)
}

/** The first descendant of `root` whose command name is `name` and that is not in `skip`. */
export function findDescendant(root: number, name: string, skip: number[] = []): number | undefined {
  const children = new Map<number, number[]>()
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    const stat = readStat(Number(entry))
    if (!stat) continue
    const list = children.get(stat.ppid) ?? []
    list.push(Number(entry))
    children.set(stat.ppid, list)
  }
  const queue = [root]
  while (queue.length > 0) {
    const pid = queue.shift()!
    if (pid !== root && !skip.includes(pid) && readStat(pid)?.comm === name) return pid
    queue.push(...(children.get(pid) ?? []))
  }
  return undefined
}

function readStat(pid: number): { comm: string; ppid: number } | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const close = text.lastIndexOf(')')
    const comm = text.slice(text.indexOf('(') + 1, close)
    const fields = text.slice(close + 2).split(' ')
    return { comm, ppid: Number(fields[1]) }
  } catch {
    return undefined
  }
}

/** CPU time the process has used, in nanoseconds: every thread's schedstat run time, summed. */
export function cpuNs(pid: number): number {
  let total = 0
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      total += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0])
    } catch {
      // the thread ended between listing and reading
    }
  }
  return total
}

/** Resident set size in bytes. */
export function rssBytes(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return match ? Number(match[1]) * 1024 : 0
}

export function procAvailable(pid: number): boolean {
  return existsSync(`/proc/${pid}/task`)
}
