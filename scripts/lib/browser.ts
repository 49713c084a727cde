/**
 * Headless Chromium for the browser tests, from npm alone: `@sparticuz/chromium` unpacks a self-contained
 * build (no system packages, no download) and playwright-core drives it. Its own default flags are not
 * used: they include `--disable-web-security`, which would switch off the CORS checks these tests exist for.
 */
import chromiumBinary from '@sparticuz/chromium'
import { chromium } from 'playwright-core'
import type { Browser } from 'playwright-core'

/** The flags a closed, loopback-only machine needs: no sandbox as root, no GPU, no background calls out. */
const ARGS = ['--no-sandbox', '--no-zygote', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic']

export async function launchBrowser(options: { timeoutMs?: number } = {}): Promise<Browser> {
  const executablePath = await chromiumBinary.executablePath()
  return chromium.launch({ executablePath, args: ARGS, headless: true, timeout: options.timeoutMs ?? 60_000 })
}
