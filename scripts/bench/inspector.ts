/**
 * CPU profiles of Workers through workerd's V8 inspector (Miniflare's `inspectorPort`, i.e. workerd's
 * `--inspector-addr`): one Chrome DevTools Protocol session per isolate, `Profiler.start` / `stop`.
 * The profiles are the same `.cpuprofile` files Chrome DevTools opens.
 */
import type { CpuProfile } from './cpu-profile.ts'

interface InspectorTarget {
  id: string
  webSocketDebuggerUrl: string
}

class Session {
  readonly #socket: WebSocket
  readonly #pending = new Map<number, { resolve: (value: unknown) => void; reject: (error: Error) => void }>()
  #next = 0

  private constructor(socket: WebSocket) {
    this.#socket = socket
    socket.addEventListener('message', (event) => {
      const message = JSON.parse(String(event.data)) as { id?: number; result?: unknown; error?: { message: string } }
      const waiter = message.id === undefined ? undefined : this.#pending.get(message.id)
      if (!waiter) return
      this.#pending.delete(message.id!)
      if (message.error) waiter.reject(new Error(message.error.message))
      else waiter.resolve(message.result)
    })
  }

  static async open(url: string): Promise<Session> {
    const socket = new WebSocket(url)
    await new Promise((resolve, reject) => {
      socket.addEventListener('open', resolve, { once: true })
      socket.addEventListener('error', () => reject(new Error(`inspector: cannot connect to ${url}`)), { once: true })
    })
    return new Session(socket)
  }

  send<T>(method: string, params: Record<string, unknown> = {}): Promise<T> {
    const id = ++this.#next
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (value: unknown) => void, reject })
      this.#socket.send(JSON.stringify({ id, method, params }))
    })
  }

  close(): void {
    this.#socket.close()
  }
}

export interface Recording {
  /** Stops every profiler; the profiles by isolate id (`core:user:` is the Worker under test). */
  stop(): Promise<Map<string, CpuProfile>>
}

export interface ProfilingOptions {
  /**
   * The isolate to profile, by inspector id (`core:user:` is the Worker under test; Miniflare's entry
   * Worker and its storage simulations are others). Default: every isolate. In workerd they share one
   * thread, and each profiler interrupts it with its own signals, so profile one at a time to measure.
   */
  isolate?: string
  /** µs between samples. Default 250. */
  samplingIntervalUs?: number
}

/** Starts V8's sampling profiler in the chosen isolates. */
export async function startProfiling(inspectorPort: number, options: ProfilingOptions = {}): Promise<Recording> {
  const targets = (await (await fetch(`http://127.0.0.1:${inspectorPort}/json`)).json()) as InspectorTarget[]
  const sessions = new Map<string, Session>()
  for (const target of targets.filter((t) => options.isolate === undefined || t.id === options.isolate)) {
    const session = await Session.open(target.webSocketDebuggerUrl)
    await session.send('Profiler.enable')
    await session.send('Profiler.setSamplingInterval', { interval: options.samplingIntervalUs ?? 250 })
    await session.send('Profiler.start')
    sessions.set(target.id, session)
  }
  return {
    async stop() {
      const profiles = new Map<string, CpuProfile>()
      for (const [id, session] of sessions) {
        profiles.set(id, (await session.send<{ profile: CpuProfile }>('Profiler.stop')).profile)
        session.close()
      }
      return profiles
    },
  }
}
