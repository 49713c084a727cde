import { cloudflareTest } from '@cloudflare/vitest-plugin'
import { defineConfig } from 'vitest/config'

// Every test runs inside workerd (the Workers runtime) with miniflare's real KV, Cache API and Durable
// Objects. test/global-setup.ts starts a real HTTP Runpod emulator on loopback for the tests whose
// behaviour depends on a real upstream connection; its URL reaches the Worker as RUNPOD_BASE_URL (and a
// replay server for scripted upstream bytes, as TEST_REPLAY_URL).
export default defineConfig({
  plugins: [
    cloudflareTest(({ inject }) => ({
      wrangler: { configPath: './wrangler.toml', environment: 'dev' },
      miniflare: {
        bindings: {
          RUNPOD_BASE_URL: `${inject<string>('emulatorUrl')}/v2`,
          TEST_REPLAY_URL: inject<string>('replayUrl'),
          RUNPOD_API_KEY: 'rp_test_key_never_leaks_0123456789',
          PODGATE_ADMIN_TOKEN: 'admin_test_token_0123456789abcdef',
        },
      },
    })),
  ],
  test: {
    include: ['test/**/*.test.ts', 'src/**/*.test.ts'],
    exclude: ['test/e2e/**', '**/node_modules/**'],
    globalSetup: ['./test/global-setup.ts'],
    testTimeout: 20_000,
  },
})
