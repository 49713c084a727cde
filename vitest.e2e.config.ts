import { defineConfig } from 'vitest/config'

// End-to-end tests run on Node: they start podgate as a user does (`wrangler dev`, in workerd) in
// front of an HTTP Runpod emulator, and drive it with real software: browsers, SDKs, the packed package.
export default defineConfig({
  test: {
    include: ['test/e2e/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 90_000,
    // Each file starts its own wrangler dev; two at once is what two cores carry.
    maxWorkers: 2,
  },
})
