/**
 * HMAC keys derived from one secret, one per purpose (HKDF "info" label), so a value signed for one
 * purpose (a browser token) can never be replayed as another (a job id).
 *
 * The secret is `signingSecret` (PODGATE_SIGNING_SECRET) when set, else the Runpod API key: both are
 * Worker secrets that never leave it, and HKDF makes the derived keys independent of the input's use.
 */

export type SigningPurpose = 'podgate/token/v1' | 'podgate/job/v1' | 'podgate/cache/v1'

async function derive(secret: string, purpose: SigningPurpose): Promise<CryptoKey> {
  const base = await crypto.subtle.importKey('raw', encoder.encode(secret), 'HKDF', false, ['deriveKey'])
  return crypto.subtle.deriveKey(
    { name: 'HKDF', hash: 'SHA-256', salt: encoder.encode('podgate'), info: encoder.encode(purpose) },
    base,
    { name: 'HMAC', hash: 'SHA-256', length: 256 },
    false,
    ['sign', 'verify'],
  )
}

/** Shared with the token and job-id modules, which encode what they sign. */
export const encoder = new TextEncoder()

const cache = new Map<string, Promise<CryptoKey>>()

export function signingKey(secret: string, purpose: SigningPurpose): Promise<CryptoKey> {
  const id = `${purpose}\u0000${secret}`
  let key = cache.get(id)
  if (!key) {
    key = derive(secret, purpose)
    cache.set(id, key)
  }
  return key
}

export function fromBase64url(text: string): Uint8Array | null {
  if (!/^[A-Za-z0-9_-]*$/.test(text)) return null
  try {
    const binary = atob(text.replaceAll('-', '+').replaceAll('_', '/'))
    const out = new Uint8Array(binary.length)
    for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i)
    return out
  } catch {
    return null
  }
}

/** `base64url(HMAC-SHA256(key, payload))`. */
export async function sign(key: CryptoKey, payload: string): Promise<string> {
  return base64url(new Uint8Array(await crypto.subtle.sign('HMAC', key, encoder.encode(payload))))
}

export function base64url(bytes: Uint8Array): string {
  let binary = ''
  for (const b of bytes) binary += String.fromCharCode(b)
  return btoa(binary).replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '')
}

/**
 * Constant-time check of a signature made by `sign` (WebCrypto's verify compares in constant time). Only
 * `sign`'s own spelling passes: the last character's two spare bits would give each signature four.
 */
export async function verify(key: CryptoKey, payload: string, signature: string): Promise<boolean> {
  const bytes = fromBase64url(signature)
  if (!bytes || bytes.length !== 32 || base64url(bytes) !== signature) return false
  return crypto.subtle.verify('HMAC', key, bytes, encoder.encode(payload))
}
