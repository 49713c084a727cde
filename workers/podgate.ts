/**
 * The deployable podgate Worker: wires wrangler.toml vars and secrets to the library, nothing more.
 * Dev tools (the playground, /openapi.json) are not in this bundle: `npm run dev` runs workers/dev.ts.
 */
import { createPodgateWorker } from '../src/worker.ts'

// The strict quota store's Durable Object class: wrangler.toml binds it as PODGATE_QUOTA.
export { QuotaObject } from '../src/durable-objects.ts'

export default createPodgateWorker()
