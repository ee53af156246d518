/**
 * Which WebSocket to use: the global one (browsers, Node ≥ 22, Node 20 with
 * `--experimental-websocket`), else the `ws` package when installed.
 */

/** The part of the WHATWG WebSocket this SDK uses (the global one and `ws` both have it). */
export interface SocketLike {
  readonly readyState: number;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

/** A WebSocket constructor: `new (url, options)`, where options may carry headers (Node only). */
export type SocketConstructor = new (url: string, options?: { headers?: Record<string, string> }) => SocketLike;

const OPEN = 1;

function isNode(): boolean {
  const p = (globalThis as { process?: { versions?: { node?: string } } }).process;
  return typeof p?.versions?.node === 'string';
}

let cached: SocketConstructor | undefined;

/** The WebSocket constructor to use; throws naming both options when there is none. */
export async function webSocketConstructor(): Promise<SocketConstructor> {
  if (cached) return cached;
  const global = (globalThis as { WebSocket?: unknown }).WebSocket;
  if (typeof global === 'function') {
    cached = global as SocketConstructor;
    return cached;
  }
  if (isNode()) {
    const name = 'ws';
    try {
      const mod = (await import(name)) as { WebSocket?: unknown; default?: unknown };
      const ctor = mod.WebSocket ?? mod.default;
      if (typeof ctor === 'function') {
        cached = ctor as SocketConstructor;
        return cached;
      }
    } catch {
      // not installed: the error below says what to do
    }
  }
  throw new Error(
    'agora-mesh: no WebSocket implementation: this runtime has no global WebSocket. ' +
      'Use Node.js >= 22 (or Node 20 started with --experimental-websocket), or install the ' +
      '`ws` package (npm install ws), or pass one as the `WebSocket` option.',
  );
}

/**
 * Opens a WebSocket and resolves once it is open. `headers` (the `Authorization` header) can only
 * be sent outside browsers; a browser client must reach a node that needs no key.
 */
export function openSocket(
  Ctor: SocketConstructor,
  url: string,
  headers: Record<string, string> | undefined,
  timeoutMs: number,
): Promise<SocketLike> {
  if (headers && !isNode()) {
    return Promise.reject(
      new Error(
        'agora-mesh: browsers cannot send an Authorization header on a WebSocket; connect to a ' +
          'loopback node without an API key, or put the client behind a server-side proxy',
      ),
    );
  }
  return new Promise((resolve, reject) => {
    let socket: SocketLike;
    try {
      socket = headers ? new Ctor(url, { headers }) : new Ctor(url);
    } catch (e) {
      reject(e instanceof Error ? e : new Error(String(e)));
      return;
    }
    let settled = false;
    const fail = (why: string): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.onopen = socket.onerror = socket.onclose = null;
      try {
        socket.close();
      } catch {
        // closing a socket that never opened
      }
      reject(new Error(`cannot connect to ${url}: ${why}`));
    };
    const timer = setTimeout(() => fail(`no WebSocket connection within ${timeoutMs} ms`), timeoutMs);
    socket.onopen = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.onopen = socket.onerror = socket.onclose = null;
      resolve(socket);
    };
    // `ws` names the cause (`Unexpected server response: 401`); the WHATWG WebSocket does not.
    socket.onerror = (ev) => {
      const err = (ev as { error?: unknown; message?: unknown }) ?? {};
      const msg = err.error instanceof Error ? err.error.message : err.message;
      fail(
        typeof msg === 'string' && msg !== ''
          ? msg
          : 'the WebSocket handshake failed (no node there, not its JSON-RPC face, or a refused credential: HTTP 401)',
      );
    };
    socket.onclose = (ev) => fail(ev.reason ? `closed with ${ev.code} ${ev.reason}` : `closed with ${ev.code}`);
  });
}

/** Whether a socket is open. */
export function isOpen(socket: SocketLike | undefined): socket is SocketLike {
  return socket !== undefined && socket.readyState === OPEN;
}
