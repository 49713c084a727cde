/**
 * `tokenQuotaStage`: holds a token minted with a `quota` of its own to it.
 *
 * It runs the gateway's quota stage once more, for the token: the token's limits, counted under its
 * token id (`tok_...`), before the parent key's own quota stage counts the call against the key. So a
 * token can only narrow what its key may do, and one busy token cannot use up its siblings' share.
 */
import type { CompletionStage } from '../pipeline/index.ts'

export function tokenQuotaStage(quota: CompletionStage): CompletionStage {
  return async function tokenQuota(ctx, next) {
    const principal = ctx.c.get('principal')
    if (principal.tokenId === null || principal.tokenQuota === null) return next(ctx)
    // The quota stage reads the principal once, as it starts: show it the token, then the key again.
    ctx.c.set('principal', { ...principal, keyId: principal.tokenId, quota: principal.tokenQuota })
    const restore = () => ctx.c.set('principal', principal)
    try {
      return await quota(ctx, (inner) => {
        restore()
        return next(inner)
      })
    } finally {
      restore()
    }
  }
}
