/**
 * Runs a command in a process group of its own, for the npm scripts whose command starts processes of
 * its own (vitest: its workers, and the wrangler dev a test started):
 *
 *   node scripts/lib/run-group.ts <command> [args...]
 *
 * exits with the command's status. A SIGTERM to npm alone (a process manager's or IDE's "stop") reaches
 * only the npm script's own process: signalled itself, vitest ended and left its workers and what they
 * started running.
 */
import { spawn } from 'node:child_process'
import { realpathSync } from 'node:fs'
import { constants } from 'node:os'

export const SIGNALS = { SIGHUP: 1, SIGINT: 2, SIGTERM: 15 } as const

/**
 * Runs `command` in a process group of its own and waits for it, its exit status (128+n when a signal
 * killed it, as a shell's). A
 * SIGINT, SIGTERM or SIGHUP to this script goes to that whole group (vitest, its workers, the wrangler dev
 * a test started) and ends this script once the child has exited: a signal to npm alone (a process
 * manager's or IDE's "stop") reaches only this script, and with spawnSync vitest and its children outlived it.
 */
export async function runGroup(command: string, args: string[], env: NodeJS.ProcessEnv, { terminal = false } = {}): Promise<number | null> {
  // No stdin: a process group that is not the terminal's foreground one would be stopped reading it. A
  // command that may ask its user (wrangler deploy's "Would you like to continue?") keeps the terminal
  // instead, in this script's own group: Ctrl-C reaches it there, and a signal to this script alone is
  // forwarded to it. Without a terminal it would take its prompts' defaults unasked.
  const own = terminal && process.stdin.isTTY
  const child = spawn(command, args, { stdio: [own ? 'inherit' : 'ignore', 'inherit', 'inherit'], env, detached: !own })
  const signals = Object.keys(SIGNALS) as (keyof typeof SIGNALS)[]
  let stopped: NodeJS.Signals | undefined
  const kill = (signal: NodeJS.Signals) => {
    try {
      process.kill(own ? child.pid! : -child.pid!, signal)
    } catch {
      // already gone
    }
  }
  const forward = (signal: NodeJS.Signals) => {
    stopped = signal
    kill(signal)
    // What has not stopped in 5 s (a worker busy in a synchronous loop) is killed.
    setTimeout(() => kill('SIGKILL'), 5_000).unref()
  }
  for (const signal of signals) process.on(signal, forward)
  const status = await new Promise<number | null>((resolve) => {
    child.once('error', () => resolve(null))
    // A child killed by a signal (its own, the OOM killer's) ends with 128+n, as a shell reports it.
    child.once('exit', (code, signal) => resolve(code ?? (signal ? 128 + constants.signals[signal] : null)))
  })
  for (const signal of signals) process.off(signal, forward)
  if (stopped) process.exit(128 + SIGNALS[stopped as keyof typeof SIGNALS])
  return status
}

// Run as a script (also through a symlinked checkout, where argv[1] is not the real path).
if (process.argv[1] !== undefined && import.meta.filename === realpathSync(process.argv[1])) {
  const [command, ...args] = process.argv.slice(2)
  if (command === undefined) {
    console.error('usage: node scripts/lib/run-group.ts <command> [args...]')
    process.exit(2)
  }
  process.exit((await runGroup(command, args, process.env)) ?? 1)
}
