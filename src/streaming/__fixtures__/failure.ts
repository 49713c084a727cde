/** Runs `run` and returns the GatewayError it throws; fails the test when it throws nothing else. */
import { expect } from 'vitest'
import { GatewayError } from '../../errors/index.ts'

export function failure(run: () => unknown): GatewayError {
  try {
    run()
  } catch (error) {
    expect(error).toBeInstanceOf(GatewayError)
    return error as GatewayError
  }
  throw new Error('expected a GatewayError')
}
