declare namespace Cloudflare {
  interface Env {
    PODGATE_KV: KVNamespace
    PODGATE_QUOTA: DurableObjectNamespace<import('../src/quota/durable-object.ts').QuotaObject>
    RUNPOD_BASE_URL: string
    /** test/global-setup.ts's replay server: scripted SSE bytes over real HTTP. */
    TEST_REPLAY_URL?: string
    RUNPOD_API_KEY: string
    PODGATE_ADMIN_TOKEN: string
  }
}
