/**
 * podgate: a safe, fast Cloudflare Workers edge for Runpod Serverless vLLM endpoints.
 * Importing this module has no side effects.
 */
export { createGateway } from './gateway.ts'
export type { GatewayOptions } from './gateway.ts'
export { ConfigError, resolveConfig } from './config/resolve.ts'
export type { GatewayOptionsInput, ModelInput, EndpointInput, ResolvedOptions, ModelConfig, EndpointConfig, UpstreamMode } from './config/schema.ts'
export { GatewayError, ERROR_CODES, openAIErrorBody } from './errors/index.ts'
export type { GatewayErrorCode, OpenAIErrorType } from './errors/index.ts'
export { apiKeyAuth, bearerCredential } from './auth/api-key-auth.ts'
export type { ApiKeyAuthOptions, CredentialResolver } from './auth/api-key-auth.ts'
export { KeyStore } from './auth/keys.ts'
export type { KeyRecord, Principal } from './auth/keys.ts'
export { adminAuth } from './admin/admin-auth.ts'
export { RunpodClient, resolveEndpoint, isTerminal } from './upstream/runpod/client.ts'
export type { Endpoint, JobStatus, JobStream, JobState, RunpodClientOptions } from './upstream/runpod/client.ts'
export type { NormalizedRequest, NormalizedMessage, SamplingParams } from './normalize/types.ts'
export type { GatewayEnv, GatewayBindings, GatewayVariables } from './types.ts'
