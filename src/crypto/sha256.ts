/**
 * SHA-256 as lowercase hex: how podgate stores a key (`keyhash:`) and names a cached answer.
 */

const HEX: string[] = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'))

/**
 * @example
 * await sha256Hex('abc') // 'ba7816bf...'
 */
export async function sha256Hex(text: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text)))
  let hex = ''
  for (const b of digest) hex += HEX[b]
  return hex
}
