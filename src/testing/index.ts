/**
 * podgate/testing: tools for testing a gateway in front of Runpod without a GPU.
 */

export { createRunpodEmulator } from './emulator/index.ts'
export { parseDirectives } from './emulator/directives.ts'
export type { Directives } from './emulator/directives.ts'
export { countPromptTokens, generateCompletion } from './emulator/generate.ts'
export type { ChatMessageText, GeneratedText, GenerateOptions } from './emulator/generate.ts'
export { regexInstance, schemaInstance } from './emulator/schema-instance.ts'
export type { InstanceOptions } from './emulator/schema-instance.ts'
export { DEFAULT_BEHAVIOUR } from './emulator/types.ts'
export type {
  EmulatorCall,
  EmulatorJobView,
  EmulatorOp,
  EmulatorOptions,
  EmulatorRequestRecord,
  EndpointBehaviour,
  Fault,
  JobStatus,
  RunpodEmulator,
  WorkerGeneration,
} from './emulator/types.ts'
