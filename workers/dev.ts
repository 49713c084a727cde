/**
 * The dev Worker (`npm run dev`, wrangler.toml [env.dev]): the production Worker plus the dev tools it
 * leaves out of its bundle: `GET /openapi.json` and, with PODGATE_PLAYGROUND = "true", `GET /playground`.
 */
import { openApiHandler, playgroundHandler } from '../src/index.ts'
import { createPodgateWorker } from '../src/worker.ts'

export { QuotaObject } from '../src/durable-objects.ts'

export default createPodgateWorker({ extras: { openapi: openApiHandler, playground: playgroundHandler } })
