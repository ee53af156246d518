/**
 * The JSON-RPC client: one WebSocket to a node's rpc face, many calls in flight, the spec's
 * primitives as namespaces, tool providers, reconnection.
 */

import {
  AgoraError,
  ConnectionClosed,
  InvalidParams,
  TimeoutError,
  fromRpcError,
} from './errors.js';
import {
  METHODS,
  isNamespace,
  type Amount,
  type CallOptions,
  type Callable,
  type ChannelCloseResult,
  type ChannelOpenParams,
  type ChannelPayResult,
  type JsonObject,
  type PayChannelState,
  type Price,
  type RegisterParams,
} from './methods.js';
import {
  isOpen,
  openSocket,
  webSocketConstructor,
  type SocketConstructor,
  type SocketLike,
} from './transport.js';

/** How the client reconnects after losing its connection. */
export interface ReconnectOptions {
  /** First delay, ms (default 250). */
  initialDelayMs?: number;
  /** Largest delay, ms (default 10,000). */
  maxDelayMs?: number;
  /** Growth per attempt (default 2). */
  factor?: number;
  /** Fraction of each delay drawn at random, 0..1 (default 0.5: a delay d becomes d/2..d). */
  jitter?: number;
  /** Attempts before giving up (default unlimited). */
  maxAttempts?: number;
}

export interface ConnectOptions {
  /** The node's API key, sent as `Authorization: Bearer` (not possible from browsers). */
  apiKey?: string;
  /** A session token from `state.createSession` instead of the API key. */
  sessionToken?: string;
  /** Per-call timeout, ms (default 30,000). A call may override it. */
  timeoutMs?: number;
  /** Time to open the WebSocket, ms (default 10,000). */
  connectTimeoutMs?: number;
  /** Reconnection: `false` disables it; default on with the defaults of {@link ReconnectOptions}. */
  reconnect?: boolean | ReconnectOptions;
  /** Calls waiting for an answer at most (default 4,096); beyond, a call fails at once. */
  maxPending?: number;
  /** The WebSocket constructor to use instead of the global one or `ws`. */
  WebSocket?: SocketConstructor;
}


/** What a tool handler is told besides its input. */
export interface ToolContext {
  toolId: string;
  sessionId: string | undefined;
  /** The id of the node's `tool.invoke` request (`srv-<n>`). */
  requestId: string | number;
}

/** A tool's implementation: its input in, its result (any JSON) out; a throw is an error reply. */
export type ToolHandler<I = any, O = unknown> = (params: I, ctx: ToolContext) => O | Promise<O>;

/** A tool to register: the spec's `tool.register` params, with `inputSchema`/`outputSchema` as a
 * shorthand for `schema: {input, output}`. */
export interface ToolDefinition {
  name: string;
  description: string;
  capabilities: string[];
  schema?: JsonObject;
  inputSchema?: JsonObject;
  outputSchema?: JsonObject;
  price?: Price;
}

export type ClientEvent = 'disconnect' | 'reconnect' | 'reconnectFailed';

interface Pending {
  resolve: (value: any) => void;
  reject: (error: AgoraError) => void;
  /** `Date.now()` after which the call times out. */
  deadline: number;
  timeoutMs: number;
  method: string;
}

interface Registered {
  params: RegisterParams;
  handler: ToolHandler | undefined;
}

type State = 'open' | 'reconnecting' | 'closed';

const DEFAULT_TIMEOUT_MS = 30_000;
const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
const DEFAULT_MAX_PENDING = 4096;
/** How often calls in flight are checked for their timeout, ms (a timeout fires up to this late). */
const SWEEP_MS = 20;
/** The WebSocket close code of a policy violation. */
const POLICY_CLOSE = 1008;
const DECIMAL = /^(?:0|[1-9][0-9]*)(?:\.[0-9]+)?$/;

function positive(value: unknown, name: string): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new InvalidParams(`${name} must be a positive number, got ${String(value)}`, null, { field: name });
  }
  return value;
}

/** Checks an amount: a non-negative finite number or a decimal string (`"0.003"`). */
export function checkAmount(value: unknown, name: string): Amount {
  if (typeof value === 'number' && Number.isFinite(value) && value >= 0) return value;
  if (typeof value === 'string' && DECIMAL.test(value)) return value;
  throw new InvalidParams(
    `${name} must be a decimal amount (a number such as 0.003 or a string such as "0.003"), got ${JSON.stringify(value)}`,
    null,
    { field: name },
  );
}

function errorReply(e: unknown): { code: number; message: string; data?: unknown } {
  if (e instanceof AgoraError && e.code !== null) {
    return e.data === undefined ? { code: e.code, message: e.message } : { code: e.code, message: e.message, data: e.data };
  }
  const message = e instanceof Error ? e.message : String(e);
  return { code: -32603, message: message || 'the tool failed' };
}

type ToolNamespace = Omit<Callable<typeof METHODS.tool>, 'register'> & {
  /**
   * Registers a tool on this connection. With a handler, the client answers the node's
   * `tool.invoke` requests for it, and registers it again after a reconnection.
   */
  register(definition: ToolDefinition | RegisterParams, handler?: ToolHandler): Promise<{ toolId: string }>;
};

type ChannelNamespace = Omit<Callable<typeof METHODS.micropayments.channel>, 'open'> & {
  /** Opens a payment channel (spec §6.4) and returns it as an object with `pay` and `close`. */
  open(params: ChannelOpenParams): Promise<PaymentChannel>;
};

type MicropaymentsNamespace = Omit<Callable<typeof METHODS.micropayments>, 'channel'> & {
  channel: ChannelNamespace;
};

/** A client connected to a node's JSON-RPC face. Create it with {@link connect}. */
export class Hyperspace {
  readonly url: string;
  readonly state!: Callable<typeof METHODS.state>;
  readonly guard!: Callable<typeof METHODS.guard>;
  readonly tool!: ToolNamespace;
  readonly memory!: Callable<typeof METHODS.memory>;
  readonly recursive!: Callable<typeof METHODS.recursive>;
  readonly learning!: Callable<typeof METHODS.learning>;
  readonly improving!: Callable<typeof METHODS.improving>;
  readonly micropayments!: MicropaymentsNamespace;
  readonly bridge!: Callable<typeof METHODS.bridge>;
  readonly node!: Callable<typeof METHODS.node>;
  readonly directory!: Callable<typeof METHODS.directory>;
  readonly rpc!: Callable<typeof METHODS.rpc>;

  private socket: SocketLike | undefined;
  private status: State = 'closed';
  private seq = 0;
  private readonly pending = new Map<number, Pending>();
  private readonly tools = new Map<string, Registered>();
  private readonly listeners = new Map<ClientEvent, Set<(detail: unknown) => void>>();
  private readonly headers: Record<string, string> | undefined;
  private readonly sessionScoped: boolean;
  private readonly timeoutMs: number;
  private readonly connectTimeoutMs: number;
  private readonly maxPending: number;
  private readonly reconnect: Required<ReconnectOptions> | undefined;
  private readonly Ctor: SocketConstructor;
  private ready: Promise<void> = Promise.resolve();
  private settleReady: ((ok: boolean) => void) | undefined;
  private wake: (() => void) | undefined;
  /** Calls waiting for a reconnection (bounded by `maxPending`). */
  private waiting = 0;
  private detach: () => void = () => {};
  /** One timer for all calls in flight (cheaper than a timer per call), while there are any. */
  private sweeper: ReturnType<typeof setInterval> | undefined;
  private readonly sweep = (): void => {
    const now = Date.now();
    for (const [id, p] of this.pending) {
      if (p.deadline <= now) {
        this.pending.delete(id);
        p.reject(new TimeoutError(`${p.method}: no answer within ${p.timeoutMs} ms`));
      }
    }
    if (this.pending.size === 0) this.stopSweeper();
  };

  /** @internal Use {@link connect}. */
  constructor(url: string, options: ConnectOptions, Ctor: SocketConstructor) {
    this.url = url;
    this.Ctor = Ctor;
    const bearer = options.apiKey ?? options.sessionToken;
    this.sessionScoped = options.sessionToken !== undefined;
    this.headers = bearer === undefined ? undefined : { Authorization: `Bearer ${bearer}` };
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    this.maxPending = options.maxPending ?? DEFAULT_MAX_PENDING;
    const r = options.reconnect ?? true;
    this.reconnect =
      r === false
        ? undefined
        : {
            initialDelayMs: 250,
            maxDelayMs: 10_000,
            factor: 2,
            jitter: 0.5,
            maxAttempts: Number.POSITIVE_INFINITY,
            ...(r === true ? {} : Object.fromEntries(Object.entries(r).filter(([, v]) => v !== undefined))),
          };
    const self = this as unknown as Record<string, unknown>;
    for (const [ns, table] of Object.entries(METHODS)) self[ns] = this.namespace(table, `${ns}.`);
    const tool = this.tool as unknown as Record<string, unknown>;
    tool.register = (def: ToolDefinition | RegisterParams, handler?: ToolHandler) => this.register(def, handler);
    const channel = this.micropayments.channel as unknown as Record<string, unknown>;
    channel.open = (params: ChannelOpenParams) => this.openChannel(params);
  }

  private namespace(table: object, prefix: string): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(table)) {
      const name = prefix + key;
      out[key] = isNamespace(value)
        ? this.namespace(value, `${name}.`)
        : (params?: unknown, options?: CallOptions) =>
            params === undefined || (typeof params === 'object' && params !== null && !Array.isArray(params))
              ? this.call(name, params, options)
              : Promise.reject(
                  new InvalidParams(`${name}: params must be one object with the spec's names, got ${JSON.stringify(params)}`, null, {
                    field: 'params',
                  }),
                );
    }
    return out;
  }

  /** @internal Opens the first connection. */
  async open(): Promise<void> {
    const socket = await openSocket(this.Ctor, this.url, this.headers, this.connectTimeoutMs);
    this.attach(socket);
    this.status = 'open';
  }

  /** Whether the connection is open now. */
  get connected(): boolean {
    return this.status === 'open' && isOpen(this.socket);
  }

  /** Calls any method (`"state.getSession"`) with one params object; resolves to its result. */
  call<R = unknown>(method: string, params?: unknown, options?: CallOptions): Promise<R> {
    const socket = this.socket;
    if (this.status !== 'open' || socket === undefined) return this.callWhenReady<R>(method, params, options);
    return this.send<R>(socket, method, params, options?.timeoutMs ?? this.timeoutMs);
  }

  private send<R>(socket: SocketLike, method: string, params: unknown, timeoutMs: number): Promise<R> {
    if (this.pending.size >= this.maxPending) {
      return Promise.reject(
        new AgoraError(`${method}: ${this.maxPending} calls already wait for an answer (maxPending)`),
      );
    }
    const id = ++this.seq;
    let frame: string;
    try {
      frame =
        params === undefined
          ? `{"jsonrpc":"2.0","id":${id},"method":${JSON.stringify(method)}}`
          : JSON.stringify({ jsonrpc: '2.0', id, method, params });
    } catch (e) {
      return Promise.reject(new InvalidParams(`${method}: params are not JSON: ${String(e)}`, null, { field: 'params' }));
    }
    return new Promise<R>((resolve, reject) => {
      this.pending.set(id, { resolve, reject, deadline: Date.now() + timeoutMs, timeoutMs, method });
      if (this.sweeper === undefined) this.sweeper = setInterval(this.sweep, SWEEP_MS);
      try {
        socket.send(frame);
      } catch (e) {
        this.pending.delete(id);
        reject(new ConnectionClosed(`${method}: the connection is not open: ${String(e)}`));
      }
    });
  }

  private stopSweeper(): void {
    if (this.sweeper !== undefined) clearInterval(this.sweeper);
    this.sweeper = undefined;
  }

  private async callWhenReady<R>(method: string, params: unknown, options?: CallOptions): Promise<R> {
    if (this.status === 'closed') throw new ConnectionClosed(`${method}: the connection is closed`);
    if (this.waiting >= this.maxPending) {
      throw new AgoraError(`${method}: ${this.maxPending} calls already wait for the reconnection (maxPending)`);
    }
    this.waiting++;
    try {
      return await this.afterReconnect<R>(method, params, options);
    } finally {
      this.waiting--;
    }
  }

  private async afterReconnect<R>(method: string, params: unknown, options?: CallOptions): Promise<R> {
    const timeoutMs = options?.timeoutMs ?? this.timeoutMs;
    const started = Date.now();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const expired = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(resolve, timeoutMs, 'timeout');
    });
    try {
      if ((await Promise.race([this.ready.then(() => 'ready' as const), expired])) === 'timeout') {
        throw new TimeoutError(`${method}: not reconnected within ${timeoutMs} ms`);
      }
    } finally {
      clearTimeout(timer);
    }
    const socket = this.socket;
    if (this.status !== 'open' || socket === undefined) throw new ConnectionClosed(`${method}: the connection is closed`);
    return this.send<R>(socket, method, params, Math.max(1, timeoutMs - (Date.now() - started)));
  }

  private attach(socket: SocketLike): void {
    this.socket = socket;
    const emitter = socket as unknown as { on?: unknown; off?: unknown };
    if (typeof emitter.on === 'function' && typeof emitter.off === 'function') {
      // `ws`: its EventEmitter side skips building a MessageEvent per frame
      const onMessage = (data: unknown, isBinary: boolean): void => {
        if (!isBinary) this.receive(socket, String(data));
      };
      (emitter.on as (e: string, l: typeof onMessage) => void).call(socket, 'message', onMessage);
      this.detach = () => (emitter.off as (e: string, l: typeof onMessage) => void).call(socket, 'message', onMessage);
    } else {
      socket.onmessage = (ev) => this.receive(socket, ev.data);
      this.detach = () => {
        socket.onmessage = null;
      };
    }
    socket.onerror = () => {
      // the close event that follows says what happened
    };
    socket.onclose = (ev) => this.closed(socket, ev.code, ev.reason);
  }

  private receive(socket: SocketLike, data: unknown): void {
    let msg: unknown;
    try {
      msg = JSON.parse(typeof data === 'string' ? data : String(data));
    } catch {
      return; // not JSON: the face never sends that
    }
    if (Array.isArray(msg)) {
      for (const m of msg) this.dispatch(socket, m);
    } else {
      this.dispatch(socket, msg);
    }
  }

  private dispatch(socket: SocketLike, msg: any): void {
    if (msg === null || typeof msg !== 'object') return;
    if (msg.method !== undefined) {
      if (msg.id !== undefined && msg.id !== null) void this.serve(socket, msg);
      return;
    }
    const p = this.pending.get(msg.id);
    if (p === undefined) return; // its call timed out
    this.pending.delete(msg.id);
    if (msg.error !== undefined) p.reject(fromRpcError(msg.error));
    else p.resolve(msg.result);
  }

  /** Answers a request from the node (`tool.invoke` of a tool registered here). */
  private async serve(socket: SocketLike, req: { id: string | number; method: unknown; params?: any }): Promise<void> {
    let reply: string;
    if (req.method !== 'tool.invoke') {
      reply = JSON.stringify({
        jsonrpc: '2.0',
        id: req.id,
        error: { code: -32601, message: `Method not found: this client serves only tool.invoke` },
      });
    } else {
      const toolId = String(req.params?.toolId ?? '');
      const tool = this.tools.get(toolId);
      if (tool?.handler === undefined) {
        reply = JSON.stringify({
          jsonrpc: '2.0',
          id: req.id,
          error: { code: -32006, message: `no handler for tool ${toolId} on this connection` },
        });
      } else {
        const ctx: ToolContext = { toolId, sessionId: req.params?.sessionId, requestId: req.id };
        try {
          const result = await tool.handler(req.params?.params, ctx);
          reply = JSON.stringify({ jsonrpc: '2.0', id: req.id, result: result === undefined ? null : result });
        } catch (e) {
          reply = JSON.stringify({ jsonrpc: '2.0', id: req.id, error: errorReply(e) });
        }
      }
    }
    if (isOpen(socket)) {
      try {
        socket.send(reply);
      } catch {
        // the connection closed meanwhile: the node answers its caller −32006
      }
    }
  }

  private closed(socket: SocketLike, code: number, reason: string): void {
    if (socket !== this.socket) return;
    this.detach();
    socket.onclose = socket.onerror = null;
    this.socket = undefined;
    const why = `the connection closed (${code}${reason ? ` ${reason}` : ''})`;
    for (const [id, p] of this.pending) {
      p.reject(new ConnectionClosed(`${p.method}: ${why}`, null, { code, reason }));
      this.pending.delete(id);
    }
    this.stopSweeper();
    if (this.status === 'closed') return;
    this.emit('disconnect', { code, reason });
    if (this.reconnect === undefined) {
      this.status = 'closed';
      return;
    }
    if (code === POLICY_CLOSE && this.sessionScoped) {
      // the node closes a session token's connection with 1008 once the session has ended:
      // the token will be refused from now on
      this.status = 'closed';
      this.emit('reconnectFailed', { error: new ConnectionClosed(`the node ended the session's connection (${code} ${reason})`) });
      return;
    }
    if (this.status === 'open') {
      this.status = 'reconnecting';
      this.ready = new Promise<boolean>((resolve) => {
        this.settleReady = resolve;
      }).then(() => undefined);
      void this.reconnectLoop(this.reconnect);
    }
  }

  private async reconnectLoop(opts: Required<ReconnectOptions>): Promise<void> {
    let lastError: unknown;
    for (let attempt = 0; attempt < opts.maxAttempts; attempt++) {
      const base = Math.min(opts.maxDelayMs, opts.initialDelayMs * opts.factor ** attempt);
      const delay = base * (1 - opts.jitter * Math.random());
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, delay);
        this.wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.wake = undefined;
      if (this.status !== 'reconnecting') return;
      try {
        const socket = await openSocket(this.Ctor, this.url, this.headers, this.connectTimeoutMs);
        if (this.status !== 'reconnecting') {
          socket.close(1000);
          return;
        }
        this.attach(socket);
        await this.reregister(socket);
        if (this.socket !== socket || !isOpen(socket)) continue;
        this.status = 'open';
        this.settleReady?.(true);
        this.emit('reconnect', { attempt: attempt + 1 });
        return;
      } catch (e) {
        lastError = e;
        // a refused credential stays refused (an ended session's token, a changed API key)
        if (e instanceof Error && /\b401\b/.test(e.message)) break;
      }
    }
    if (this.status !== 'reconnecting') return;
    this.status = 'closed';
    this.settleReady?.(false);
    this.emit('reconnectFailed', { error: lastError });
  }

  /** Registers this connection's tools again on a new connection. */
  private async reregister(socket: SocketLike): Promise<void> {
    const entries = [...this.tools.entries()];
    this.tools.clear();
    try {
      for (const [oldId, entry] of entries) {
        const r = await this.send<{ toolId: string }>(socket, 'tool.register', entry.params, this.timeoutMs);
        this.tools.set(r.toolId, entry);
        if (r.toolId !== oldId) this.tools.set(oldId, entry);
      }
    } catch (e) {
      for (const [id, entry] of entries) if (!this.tools.has(id)) this.tools.set(id, entry);
      throw e;
    }
  }

  private async register(def: ToolDefinition | RegisterParams, handler?: ToolHandler): Promise<{ toolId: string }> {
    if (handler !== undefined && typeof handler !== 'function') {
      throw new InvalidParams('tool.register: the handler must be a function', null, { field: 'handler' });
    }
    const params = toRegisterParams(def);
    const r = await this.call<{ toolId: string }>('tool.register', params);
    this.tools.set(r.toolId, { params, handler });
    return r;
  }

  private async openChannel(params: ChannelOpenParams): Promise<PaymentChannel> {
    if (typeof params?.payee !== 'string' || params.payee === '') {
      throw new InvalidParams('micropayments.channel.open: payee (a PeerId) is required', null, { field: 'payee' });
    }
    checkAmount(params.budget, 'budget');
    const state = await this.call<PayChannelState>('micropayments.channel.open', params);
    return new PaymentChannel(this, state);
  }

  /** Listens to `disconnect`, `reconnect` or `reconnectFailed`; returns a function that stops. */
  on(event: ClientEvent, listener: (detail: unknown) => void): () => void {
    let set = this.listeners.get(event);
    if (!set) this.listeners.set(event, (set = new Set()));
    set.add(listener);
    return () => set.delete(listener);
  }

  private emit(event: ClientEvent, detail: unknown): void {
    for (const l of this.listeners.get(event) ?? []) {
      try {
        l(detail);
      } catch {
        // a listener's error is its own
      }
    }
  }

  /** Closes the connection; calls still waiting fail with {@link ConnectionClosed}. */
  async close(): Promise<void> {
    const socket = this.socket;
    const wasReconnecting = this.status === 'reconnecting';
    this.status = 'closed';
    this.wake?.();
    if (wasReconnecting) this.settleReady?.(false);
    if (socket === undefined) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, 2000);
      socket.onclose = (ev) => {
        clearTimeout(timer);
        this.closed(socket, ev.code, ev.reason);
        resolve();
      };
      socket.close(1000);
    });
    if (this.socket === socket) this.closed(socket, 1000, 'closed by the client');
  }
}

function toRegisterParams(def: ToolDefinition | RegisterParams): RegisterParams {
  if (typeof def !== 'object' || def === null) {
    throw new InvalidParams('tool.register: a tool definition object is required', null, { field: 'name' });
  }
  const d = def as ToolDefinition;
  const missing = (['name', 'description'] as const).filter((k) => typeof d[k] !== 'string' || d[k] === '');
  if (!Array.isArray(d.capabilities) || d.capabilities.length === 0) missing.push('capabilities' as never);
  if (missing.length > 0) {
    throw new InvalidParams(
      `tool.register: missing ${missing.join(', ')} (name and description are strings, capabilities a non-empty array of tags)`,
      null,
      { field: missing[0], missing },
    );
  }
  let schema = d.schema;
  if (schema === undefined) {
    schema = { input: d.inputSchema ?? { type: 'object' } };
    if (d.outputSchema !== undefined) schema.output = d.outputSchema;
  }
  const out: RegisterParams = { name: d.name, description: d.description, schema, capabilities: d.capabilities };
  if (d.price !== undefined) out.price = d.price;
  return out;
}

/** An open payment channel (spec §6.4): `pay(amount, memo)` per use, then `close()`. */
export class PaymentChannel {
  readonly channelId: string;
  /** The channel as `micropayments.channel.open` answered it. */
  readonly opened: PayChannelState;
  /** The nonce of the last payment (0 before the first). */
  nonce: number;
  /** What remains of the budget after the last payment. */
  remaining: number | string;
  private readonly client: Hyperspace;

  constructor(client: Hyperspace, state: PayChannelState) {
    this.client = client;
    this.opened = state;
    this.channelId = state.channelId;
    this.nonce = state.nonce ?? 0;
    this.remaining = state.remaining;
  }

  /** Pays `amount` (a decimal number or string) with an optional memo; `{nonce, remaining}`. */
  async pay(amount: Amount, memo?: string): Promise<ChannelPayResult> {
    checkAmount(amount, 'amount');
    if (memo !== undefined && typeof memo !== 'string') {
      throw new InvalidParams('micropayments.channel.pay: memo must be a string', null, { field: 'memo' });
    }
    const params: { channelId: string; amount: Amount; memo?: string } = { channelId: this.channelId, amount };
    if (memo !== undefined) params.memo = memo;
    const r = await this.client.call<ChannelPayResult>('micropayments.channel.pay', params);
    this.nonce = r.nonce;
    this.remaining = r.remaining;
    return r;
  }

  /** Closes the channel: `{totalSpent, refund, ...}`. */
  close(): Promise<ChannelCloseResult> {
    return this.client.call<ChannelCloseResult>('micropayments.channel.close', { channelId: this.channelId });
  }
}

/**
 * Connects to a node's JSON-RPC face (`ws://127.0.0.1:3100`) and resolves once the WebSocket is
 * open.
 */
export async function connect(url: string, options: ConnectOptions = {}): Promise<Hyperspace> {
  if (typeof url !== 'string' || !/^wss?:\/\/[^/]/.test(url)) {
    throw new InvalidParams(`connect: the url must be ws://host:port or wss://host:port, got ${JSON.stringify(url)}`, null, {
      field: 'url',
    });
  }
  if (options.apiKey !== undefined && options.sessionToken !== undefined) {
    throw new InvalidParams('connect: give apiKey or sessionToken, not both', null, { field: 'sessionToken' });
  }
  for (const k of ['apiKey', 'sessionToken'] as const) {
    const v = options[k];
    if (v !== undefined && (typeof v !== 'string' || v === '' || /\s/.test(v))) {
      throw new InvalidParams(`connect: ${k} must be a non-empty string without spaces`, null, { field: k });
    }
  }
  if (options.timeoutMs !== undefined) positive(options.timeoutMs, 'timeoutMs');
  if (options.connectTimeoutMs !== undefined) positive(options.connectTimeoutMs, 'connectTimeoutMs');
  if (options.maxPending !== undefined) positive(options.maxPending, 'maxPending');
  if (typeof options.reconnect === 'object') {
    const r = options.reconnect;
    for (const k of ['initialDelayMs', 'maxDelayMs', 'factor', 'maxAttempts'] as const) {
      if (r[k] !== undefined) positive(r[k], `reconnect.${k}`);
    }
    if (r.jitter !== undefined && !(r.jitter >= 0 && r.jitter <= 1)) {
      throw new InvalidParams('connect: reconnect.jitter must be within 0..1', null, { field: 'reconnect.jitter' });
    }
  }
  const Ctor = options.WebSocket ?? (await webSocketConstructor());
  const client = new Hyperspace(url, options, Ctor);
  try {
    await client.open();
  } catch (e) {
    throw new ConnectionClosed(e instanceof Error ? e.message : String(e));
  }
  return client;
}
