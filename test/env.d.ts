declare namespace Cloudflare {
  interface Env {
    PODGATE_KV: KVNamespace
    RUNPOD_BASE_URL: string
    RUNPOD_API_KEY: string
    PODGATE_ADMIN_TOKEN: string
  }
}
