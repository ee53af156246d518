/**
 * agora-mesh: a client for an Agora node's Hyperspace JSON-RPC face (spec §2.2).
 *
 * ```ts
 * import { connect } from 'agora-mesh';
 * const hyperspace = await connect('ws://127.0.0.1:3100');
 * const { sessionId } = await hyperspace.state.createSession({ agentName: 'research-agent' });
 * ```
 */
export { connect, checkAmount, Hyperspace, PaymentChannel } from './client.js';
export type {
  ClientEvent,
  ConnectOptions,
  ReconnectOptions,
  ToolContext,
  ToolDefinition,
  ToolHandler,
} from './client.js';
export * from './errors.js';
export { METHODS, methodNames } from './methods.js';
export type * from './methods.js';
export type { SocketConstructor, SocketLike } from './transport.js';
