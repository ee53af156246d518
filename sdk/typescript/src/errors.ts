/**
 * Errors of the JSON-RPC face: one class per code of the Hyperspace spec (§8), all under
 * {@link AgoraError}, plus the client's own {@link ConnectionClosed} and {@link TimeoutError}.
 */

/** Any error from a node or from this client. `code` is the JSON-RPC error code, or `null`
 * for errors of the client itself (a closed connection, a timeout, bad input). */
export class AgoraError extends Error {
  readonly code: number | null;
  readonly data: unknown;
  constructor(message: string, code: number | null = null, data: unknown = undefined) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.data = data;
  }
}

function field(data: unknown, key: string): unknown {
  return typeof data === 'object' && data !== null ? (data as Record<string, unknown>)[key] : undefined;
}

function num(data: unknown, key: string): number | undefined {
  const v = field(data, key);
  return typeof v === 'number' ? v : undefined;
}

/** −32700: the node could not parse what was sent. */
export class ParseError extends AgoraError {}
/** −32600: not a valid JSON-RPC request. */
export class InvalidRequest extends AgoraError {}
/** −32601: no such method. */
export class MethodNotFound extends AgoraError {}
/** −32602: bad params; `field` names the parameter when the node says which. */
export class InvalidParams extends AgoraError {
  readonly field: string | undefined;
  constructor(message: string, code: number | null = -32602, data: unknown = undefined) {
    super(message, code, data);
    const f = field(data, 'field');
    this.field = typeof f === 'string' ? f : undefined;
  }
}
/** −32001: the session does not exist (or has ended). */
export class SessionNotFound extends AgoraError {}
/** −32002: the operation would exceed a budget; `data` has `remaining`, `requested`, `limit`. */
export class BudgetExceeded extends AgoraError {
  get remaining(): number | undefined {
    return num(this.data, 'remaining');
  }
  get requested(): number | undefined {
    return num(this.data, 'requested');
  }
  get limit(): number | undefined {
    return num(this.data, 'limit');
  }
}
/** −32003: too many requests; retry after `retryAfterMs` when the node says. */
export class RateLimited extends AgoraError {
  readonly retryAfterMs: number | undefined;
  constructor(message: string, code: number | null = -32003, data: unknown = undefined) {
    super(message, code, data);
    this.retryAfterMs = num(data, 'retryAfterMs');
  }
}
/** −32004: content policy violation. */
export class SafetyViolation extends AgoraError {}
/** −32005: recursive loop detected. */
export class LoopDetected extends AgoraError {}
/** −32006: the target peer (or tool provider) is not reachable. */
export class PeerUnavailable extends AgoraError {}
/** −32007: a memory write did not meet its replication factor. */
export class ReplicationFailed extends AgoraError {}
/** −32008: a trajectory failed validation. */
export class TrajectoryRejected extends AgoraError {}
/** The connection closed before the answer came (or was never open). */
export class ConnectionClosed extends AgoraError {}
/** No answer within the call's timeout. */
export class TimeoutError extends AgoraError {}

type ErrorClass = new (message: string, code: number | null, data: unknown) => AgoraError;

/** The class of each code of spec §8. */
export const ERROR_CLASSES: ReadonlyMap<number, ErrorClass> = new Map<number, ErrorClass>([
  [-32700, ParseError],
  [-32600, InvalidRequest],
  [-32601, MethodNotFound],
  [-32602, InvalidParams],
  [-32001, SessionNotFound],
  [-32002, BudgetExceeded],
  [-32003, RateLimited],
  [-32004, SafetyViolation],
  [-32005, LoopDetected],
  [-32006, PeerUnavailable],
  [-32007, ReplicationFailed],
  [-32008, TrajectoryRejected],
]);

/** The error for a JSON-RPC error object (`{code, message, data?}`) as a node sent it. */
export function fromRpcError(error: unknown): AgoraError {
  const code = field(error, 'code');
  const message = field(error, 'message');
  const data = field(error, 'data');
  const text = typeof message === 'string' ? message : 'error without a message';
  if (typeof code !== 'number') {
    return new AgoraError(`malformed error from the node: ${JSON.stringify(error)}`, null, error);
  }
  const Class = ERROR_CLASSES.get(code) ?? AgoraError;
  // An error answered by the node has no useful stack (it would show this client's frame
  // dispatch, not the call site), and capturing one is most of the cost of a failed call.
  const E = Error as { stackTraceLimit?: number };
  const limit = E.stackTraceLimit;
  E.stackTraceLimit = 0;
  try {
    return new Class(text, code, data);
  } finally {
    E.stackTraceLimit = limit;
  }
}
