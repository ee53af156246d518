/**
 * agora-mesh/agh: an agent on a node's AGH face (`ws://<agh-listen>/agh/v0`), AGH Network v0.
 *
 * One text frame is one envelope. The agent greets with a Peer Card, then says, asks whois,
 * sends directs, capabilities and receipts; envelopes addressed to it (or broadcast in its
 * channel) arrive through an async iterator. v0 receivers never require a proof; this client
 * still signs each envelope with its Ed25519 key (WebCrypto), as AGH's draft v1 trust profile
 * `agh-network.trust.ed25519-jcs/v1` writes proofs, so that agents can check who wrote an
 * envelope ({@link verifyEnvelope}).
 */

import { AgoraError, ConnectionClosed, InvalidParams, TimeoutError } from './errors.js';
import { isOpen, openSocket, webSocketConstructor, type SocketConstructor, type SocketLike } from './transport.js';

export const PROTOCOL = 'agh-network/v0';
const PEER_ID = /^[a-z0-9][a-z0-9._-]{0,127}$/;

export type Kind = 'greet' | 'whois' | 'say' | 'direct' | 'capability' | 'receipt' | 'trace';
export type ReceiptStatus = 'accepted' | 'rejected' | 'duplicate' | 'expired' | 'unsupported' | 'canceled';
export type TraceState = 'working' | 'needs_input' | 'completed' | 'failed' | 'canceled';

export interface PeerCard {
  peer_id: string;
  display_name?: string;
  profiles_supported: string[];
  capabilities: string[];
  artifacts_supported: string[];
  trust_modes_supported: string[];
  ext?: Record<string, unknown>;
}

export interface Envelope {
  protocol: string;
  id: string;
  kind: Kind;
  channel: string;
  from: string;
  to: string | null;
  interaction_id?: string;
  reply_to?: string;
  trace_id?: string;
  causation_id?: string;
  ts: number;
  expires_at?: number;
  body: Record<string, any>;
  proof: Record<string, unknown> | null;
  ext?: Record<string, unknown>;
}

/** The node's answer to a refused envelope: `{"error": {ok: false, id?, reason, detail}}`. */
export interface Refusal {
  ok: false;
  id?: string;
  reason: string;
  detail?: string;
}

/** A capability document (AGH capability discovery); `digest` is computed when sending. */
export interface CapabilityDoc {
  id: string;
  summary: string;
  outcome: string;
  version?: string;
  context_needed?: string[];
  artifacts_expected?: string[];
  execution_outline?: string[];
  constraints?: string[];
  examples?: string[];
  requirements?: string[];
  digest?: string;
}

const subtle = (): SubtleCrypto => {
  const s = (globalThis as { crypto?: Crypto }).crypto?.subtle;
  if (!s) throw new AgoraError('agora-mesh/agh: WebCrypto (crypto.subtle) is not available in this runtime');
  return s;
};

const hex = (bytes: ArrayBuffer | Uint8Array<ArrayBuffer>): string =>
  Array.from(bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes), (b) => b.toString(16).padStart(2, '0')).join('');

function base64url(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function fromBase64url(text: string): Uint8Array<ArrayBuffer> {
  const s = atob(text.replace(/-/g, '+').replace(/_/g, '/'));
  return Uint8Array.from(s, (c) => c.charCodeAt(0));
}

async function sha256(text: string): Promise<ArrayBuffer> {
  return subtle().digest('SHA-256', new TextEncoder().encode(text));
}

/** The trust profile whose proofs this client writes and checks (AGH v1 draft, Ed25519 + JCS). */
export const TRUST_PROFILE = 'agh-network.trust.ed25519-jcs/v1';
const PKCS8_ED25519_PREFIX = Uint8Array.from([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20]);

/** An agent's Ed25519 key pair; its default Peer ID is derived from the public key. */
export class Identity {
  readonly publicKey: Uint8Array<ArrayBuffer>;
  /** First 32 hex digits of SHA-256 of the public key (the v1 draft's fingerprint). */
  readonly fingerprint: string;
  /** `sha256:` and the 64 hex digits of SHA-256 of the public key. */
  readonly keyId: string;
  /** `ed25519-<fingerprint>`: a v0 Peer ID (the v1 handle `name@fingerprint` is not one). */
  readonly peerId: string;
  private readonly privateKey: CryptoKey;

  private constructor(privateKey: CryptoKey, publicKey: Uint8Array<ArrayBuffer>, digest: string) {
    this.privateKey = privateKey;
    this.publicKey = publicKey;
    this.keyId = `sha256:${digest}`;
    this.fingerprint = digest.slice(0, 32);
    this.peerId = `ed25519-${this.fingerprint}`;
  }

  private static async from(privateKey: CryptoKey, publicKey: Uint8Array<ArrayBuffer>): Promise<Identity> {
    return new Identity(privateKey, publicKey, hex(await subtle().digest('SHA-256', publicKey)));
  }

  /** A new random identity. */
  static async generate(): Promise<Identity> {
    const pair = (await subtle().generateKey({ name: 'Ed25519' }, true, ['sign', 'verify'])) as CryptoKeyPair;
    return Identity.from(pair.privateKey, new Uint8Array(await subtle().exportKey('raw', pair.publicKey)));
  }

  /** The identity of a 32-byte Ed25519 seed (private key). */
  static async fromSeed(seed: Uint8Array): Promise<Identity> {
    if (!(seed instanceof Uint8Array) || seed.length !== 32) {
      throw new InvalidParams('an Ed25519 seed is 32 bytes', null, { field: 'seed' });
    }
    const pkcs8 = new Uint8Array(48);
    pkcs8.set(PKCS8_ED25519_PREFIX);
    pkcs8.set(seed, 16);
    const key = await subtle().importKey('pkcs8', pkcs8, { name: 'Ed25519' }, true, ['sign']);
    const jwk = await subtle().exportKey('jwk', key);
    if (typeof jwk.x !== 'string') throw new AgoraError('WebCrypto did not export the Ed25519 public key');
    return Identity.from(key, fromBase64url(jwk.x));
  }

  /** Signs bytes (Ed25519). */
  async sign(bytes: Uint8Array<ArrayBuffer>): Promise<Uint8Array<ArrayBuffer>> {
    return new Uint8Array(await subtle().sign({ name: 'Ed25519' }, this.privateKey, bytes));
  }
}

/** RFC 8785 (JCS) canonical JSON: keys sorted by UTF-16 code units, ECMAScript numbers and
 * strings; `undefined` members dropped. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const obj = value as Record<string, unknown>;
    const keys = Object.keys(obj)
      .filter((k) => obj[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/** The bytes a proof signs: the envelope with `proof` minus `sig`, JCS-canonicalised. */
function signingBytes(env: Envelope): Uint8Array<ArrayBuffer> {
  const { sig: _sig, ...proof } = env.proof ?? {};
  return new TextEncoder().encode(canonicalJson({ ...env, proof }));
}

/** Signs an envelope in place with the v1 draft's Ed25519 + JCS profile; returns it. */
export async function signEnvelope(env: Envelope, identity: Identity): Promise<Envelope> {
  env.proof = { profile: TRUST_PROFILE, alg: 'Ed25519', key_id: identity.keyId, pubkey: base64url(identity.publicKey) };
  env.proof.sig = base64url(await identity.sign(signingBytes(env)));
  return env;
}

/**
 * Checks an envelope's Ed25519 + JCS proof (its profile, key id and signature) and, when
 * `publicKey` is given, that this key made it. `false` without a proof.
 */
export async function verifyEnvelope(env: Envelope, publicKey?: Uint8Array): Promise<boolean> {
  const p = env.proof;
  if (!p || p.profile !== TRUST_PROFILE || p.alg !== 'Ed25519') return false;
  if (typeof p.pubkey !== 'string' || typeof p.sig !== 'string' || typeof p.key_id !== 'string') return false;
  try {
    const key = fromBase64url(p.pubkey);
    if (key.length !== 32 || p.key_id !== `sha256:${hex(await subtle().digest('SHA-256', key))}`) return false;
    if (publicKey && base64url(publicKey) !== p.pubkey) return false;
    const k = await subtle().importKey('raw', key, { name: 'Ed25519' }, false, ['verify']);
    return await subtle().verify({ name: 'Ed25519' }, k, fromBase64url(p.sig), signingBytes(env));
  } catch {
    return false;
  }
}

/** A JSON string as Go's `json.Marshal` writes it (the capability digest's serialisation). */
function goString(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0) ?? 0;
    if (ch === '"') out += '\\"';
    else if (ch === '\\') out += '\\\\';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (ch === '\b') out += '\\b';
    else if (ch === '\f') out += '\\f';
    else if (c < 0x20 || ch === '<' || ch === '>' || ch === '&' || c === 0x2028 || c === 0x2029) {
      out += `\\u${c.toString(16).padStart(4, '0')}`;
    } else out += ch;
  }
  return `${out}"`;
}

const LISTS = ['context_needed', 'artifacts_expected', 'execution_outline', 'constraints', 'examples'] as const;

/** The canonical digest of a capability document: `sha256:<hex>` (AGH capability discovery). */
export async function capabilityDigest(doc: CapabilityDoc): Promise<string> {
  const parts = [
    `"id":${goString(doc.id.trim())}`,
    `"summary":${goString(doc.summary.trim())}`,
    `"outcome":${goString(doc.outcome.trim())}`,
  ];
  const version = doc.version?.trim();
  if (version) parts.push(`"version":${goString(version)}`);
  for (const name of LISTS) {
    const items = (doc[name] ?? []).map((s) => s.trim()).filter((s) => s !== '');
    if (items.length > 0) parts.push(`"${name}":[${items.map(goString).join(',')}]`);
  }
  const reqs = (doc.requirements ?? []).map((s) => s.trim());
  if (reqs.length > 0) {
    reqs.sort((a, b) => {
      const x = new TextEncoder().encode(a);
      const y = new TextEncoder().encode(b);
      for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return (x[i] ?? 0) - (y[i] ?? 0);
      return x.length - y.length;
    });
    parts.push(`"requirements":[${reqs.map(goString).join(',')}]`);
  }
  return `sha256:${hex(await sha256(`{${parts.join(',')}}`))}`;
}

/** A bounded queue read by async iteration; beyond `limit` the oldest item is dropped. */
class Inbox<T> {
  private readonly items: T[] = [];
  private readonly waiters: Array<(r: IteratorResult<T>) => void> = [];
  private ended = false;
  dropped = 0;
  constructor(private readonly limit: number) {}

  push(item: T): void {
    const w = this.waiters.shift();
    if (w) {
      w({ value: item, done: false });
      return;
    }
    if (this.items.length >= this.limit) {
      this.items.shift();
      this.dropped++;
    }
    this.items.push(item);
  }

  end(): void {
    this.ended = true;
    for (const w of this.waiters.splice(0)) w({ value: undefined, done: true });
  }

  next(): Promise<IteratorResult<T>> {
    const item = this.items.shift();
    if (item !== undefined) return Promise.resolve({ value: item, done: false });
    if (this.ended) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** The next item, or `'timeout'` when none comes within `ms`. */
  take(ms: number): Promise<IteratorResult<T> | 'timeout'> {
    const item = this.items.shift();
    if (item !== undefined) return Promise.resolve({ value: item, done: false });
    if (this.ended) return Promise.resolve({ value: undefined, done: true });
    if (ms <= 0) return Promise.resolve('timeout');
    return new Promise((resolve) => {
      const waiter = (r: IteratorResult<T>): void => {
        clearTimeout(timer);
        resolve(r);
      };
      const timer = setTimeout(() => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        resolve('timeout');
      }, ms);
      this.waiters.push(waiter);
    });
  }

  iterator(): AsyncIterableIterator<T> {
    const it: AsyncIterableIterator<T> = {
      next: () => this.next(),
      return: async () => ({ value: undefined, done: true }),
      [Symbol.asyncIterator]: () => it,
    };
    return it;
  }
}

export interface AgentOptions {
  /** The channel the agent is in. */
  channel: string;
  /** The Peer ID (`[a-z0-9][a-z0-9._-]{0,127}`); default: derived from the identity. */
  peerId?: string;
  /** The Ed25519 identity; default: a new one. */
  identity?: Identity;
  /** Sign each envelope's `proof` with the identity (default true). */
  sign?: boolean;
  /** The node's API key (`Authorization: Bearer`; not possible from browsers). */
  apiKey?: string;
  displayName?: string;
  /** Incoming envelopes kept unread at most (default 1,024); beyond, the oldest is dropped. */
  queueSize?: number;
  /** Seconds an envelope stays valid (`expires_at = ts + ttl`); default none. */
  ttlSeconds?: number;
  connectTimeoutMs?: number;
  WebSocket?: SocketConstructor;
}

export interface SendOptions {
  to?: string | null;
  interactionId?: string;
  replyTo?: string;
  traceId?: string;
  causationId?: string;
  ext?: Record<string, unknown>;
}

/** An agent connected to a node's AGH face. Create it with {@link connectAgent}. */
export class AghAgent {
  readonly peerId: string;
  readonly channel: string;
  readonly identity: Identity;
  private readonly socket: SocketLike;
  private readonly sign: boolean;
  private readonly displayName: string | undefined;
  private readonly ttl: number | undefined;
  private readonly inbox: Inbox<Envelope>;
  private readonly refused: Inbox<Refusal>;
  private seq = 0;
  private closedWith: string | undefined;

  /** @internal Use {@link connectAgent}. */
  constructor(socket: SocketLike, identity: Identity, options: AgentOptions) {
    this.socket = socket;
    this.identity = identity;
    this.peerId = options.peerId ?? identity.peerId;
    this.channel = options.channel;
    this.sign = options.sign ?? true;
    this.displayName = options.displayName;
    this.ttl = options.ttlSeconds;
    const size = options.queueSize ?? 1024;
    this.inbox = new Inbox(size);
    this.refused = new Inbox(size);
    socket.onmessage = (ev) => this.receive(ev.data);
    socket.onerror = () => {
      // the close event follows
    };
    socket.onclose = (ev) => {
      this.closedWith = `${ev.code}${ev.reason ? ` ${ev.reason}` : ''}`;
      this.inbox.end();
      this.refused.end();
    };
  }

  private receive(data: unknown): void {
    let v: any;
    try {
      v = JSON.parse(typeof data === 'string' ? data : String(data));
    } catch {
      return;
    }
    if (v === null || typeof v !== 'object') return;
    if (typeof v.protocol === 'string' && typeof v.kind === 'string') {
      this.inbox.push(v as Envelope);
    } else if (v.error && typeof v.error === 'object') {
      this.refused.push(v.error as Refusal);
    } else if (v.ok === false) {
      this.refused.push(v as Refusal);
    }
    // anything else (an acknowledgement such as {"ok": true, "id": …}) carries nothing to read
  }

  /** Incoming envelopes, in arrival order, until the connection closes. */
  envelopes(): AsyncIterableIterator<Envelope> {
    return this.inbox.iterator();
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<Envelope> {
    return this.envelopes();
  }

  /** The node's refusals of envelopes this agent sent (`{ok: false, id, reason, detail}`). */
  refusals(): AsyncIterableIterator<Refusal> {
    return this.refused.iterator();
  }

  /** Incoming envelopes dropped because nobody read them (the queue is bounded). */
  get dropped(): number {
    return this.inbox.dropped;
  }

  /**
   * The next incoming envelope that matches `pred`, within `timeoutMs`; envelopes that do not
   * match are consumed and skipped.
   */
  async next(pred: (env: Envelope) => boolean = () => true, timeoutMs = 10_000): Promise<Envelope> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const got = await this.inbox.take(deadline - Date.now());
      if (got === 'timeout') throw new TimeoutError(`no matching envelope within ${timeoutMs} ms`);
      if (got.done) throw new ConnectionClosed(`the AGH connection closed (${this.closedWith ?? 'closed'})`);
      if (pred(got.value)) return got.value;
    }
  }

  /** The agent's Peer Card. */
  card(capabilities: string[] = [], ext?: Record<string, unknown>): PeerCard {
    const card: PeerCard = {
      peer_id: this.peerId,
      profiles_supported: this.sign ? [PROTOCOL, TRUST_PROFILE] : [PROTOCOL],
      capabilities,
      artifacts_supported: ['capability'],
      trust_modes_supported: this.sign ? ['verified'] : [],
    };
    if (this.displayName) card.display_name = this.displayName;
    if (ext) card.ext = ext;
    return card;
  }

  /** Builds, signs (unless disabled) and sends an envelope; returns it. */
  async send(kind: Kind, body: Record<string, unknown>, options: SendOptions = {}): Promise<Envelope> {
    if (!isOpen(this.socket)) throw new ConnectionClosed(`the AGH connection is closed (${this.closedWith ?? 'closed'})`);
    const ts = Math.floor(Date.now() / 1000);
    const env: Envelope = {
      protocol: PROTOCOL,
      id: `${this.peerId}-${ts}-${++this.seq}`,
      kind,
      channel: this.channel,
      from: this.peerId,
      to: options.to ?? null,
      ts,
      body,
      proof: null,
    };
    if (options.interactionId !== undefined) env.interaction_id = options.interactionId;
    if (options.replyTo !== undefined) env.reply_to = options.replyTo;
    if (options.traceId !== undefined) env.trace_id = options.traceId;
    if (options.causationId !== undefined) env.causation_id = options.causationId;
    if (this.ttl !== undefined) env.expires_at = ts + this.ttl;
    if (options.ext !== undefined) env.ext = options.ext;
    if (this.sign) await signEnvelope(env, this.identity);
    this.socket.send(JSON.stringify(env));
    return env;
  }

  /** Announces the agent in its channel with its Peer Card. */
  async greet(options: { capabilities?: string[]; summary?: string; cardExt?: Record<string, unknown> } = {}): Promise<Envelope> {
    const body: Record<string, unknown> = { peer_card: this.card(options.capabilities ?? [], options.cardExt) };
    if (options.summary !== undefined) body.summary = options.summary;
    return this.send('greet', body);
  }

  /** A channel-visible message. */
  async say(text: string, options: { intent?: string; artifacts?: unknown[] } & SendOptions = {}): Promise<Envelope> {
    requireText(text, 'text');
    return this.send('say', messageBody(text, options), options);
  }

  /** Asks who is in the channel (or one peer, with `to`); the node answers for its local peers. */
  async whois(options: { query?: string; includeCatalog?: boolean } & SendOptions = {}): Promise<Envelope> {
    const body: Record<string, unknown> = { type: 'request' };
    if (options.query !== undefined) body.query = options.query;
    const send = { ...options };
    if (options.includeCatalog) send.ext = { ...options.ext, 'agh.include': ['capability_catalog'] };
    return this.send('whois', body, send);
  }

  /** A directed message opening or continuing an interaction (`interactionId`, default new). */
  async direct(
    to: string,
    text: string,
    options: { intent?: string; artifacts?: unknown[] } & SendOptions = {},
  ): Promise<Envelope> {
    requirePeer(to, 'to');
    requireText(text, 'text');
    const interactionId = options.interactionId ?? `int-${this.peerId}-${Date.now()}-${this.seq + 1}`;
    return this.send('direct', messageBody(text, options), { ...options, to, interactionId });
  }

  /** Transfers a capability document (its digest computed here), broadcast or directed. */
  async capability(doc: CapabilityDoc, options: SendOptions = {}): Promise<Envelope> {
    for (const k of ['id', 'summary', 'outcome'] as const) requireText(doc?.[k], `capability.${k}`);
    const capability: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(doc)) if (k !== 'digest' && v !== undefined) capability[k] = v;
    capability.digest = await capabilityDigest(doc);
    return this.send('capability', { capability }, options);
  }

  /** A receipt for an envelope (`forId`) of an interaction. */
  async receipt(
    forId: string,
    status: ReceiptStatus,
    options: { reasonCode?: string; detail?: string } & SendOptions & { interactionId: string },
  ): Promise<Envelope> {
    requireText(forId, 'forId');
    requireText(options?.interactionId, 'interactionId');
    const body: Record<string, unknown> = { for_id: forId, status };
    if (options.reasonCode !== undefined) body.reason_code = options.reasonCode;
    if (options.detail !== undefined) body.detail = options.detail;
    return this.send('receipt', body, { replyTo: forId, ...options });
  }

  /** Progress of an interaction (`working`, `completed`, …). */
  async trace(
    interactionId: string,
    state: TraceState,
    options: { message?: string; result?: unknown } & SendOptions = {},
  ): Promise<Envelope> {
    const body: Record<string, unknown> = { state };
    if (options.message !== undefined) body.message = options.message;
    if (options.result !== undefined) body.result = options.result;
    return this.send('trace', body, { ...options, interactionId });
  }

  /** Closes the connection; the node forgets the agent's presence. */
  async close(): Promise<void> {
    if (!isOpen(this.socket)) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, 2000);
      const prev = this.socket.onclose;
      this.socket.onclose = (ev) => {
        clearTimeout(timer);
        prev?.(ev);
        resolve();
      };
      this.socket.close(1000);
    });
  }
}

function requireText(v: unknown, field: string): void {
  if (typeof v !== 'string' || v.trim() === '') {
    throw new InvalidParams(`${field} must be a non-blank string`, null, { field });
  }
}

function requirePeer(v: unknown, field: string): void {
  if (typeof v !== 'string' || !PEER_ID.test(v)) {
    throw new InvalidParams(`${field} must be a Peer ID ([a-z0-9][a-z0-9._-]{0,127}), got ${JSON.stringify(v)}`, null, {
      field,
    });
  }
}

function messageBody(text: string, o: { intent?: string; artifacts?: unknown[] }): Record<string, unknown> {
  const body: Record<string, unknown> = { text };
  if (o.intent !== undefined) body.intent = o.intent;
  if (o.artifacts !== undefined) body.artifacts = o.artifacts;
  return body;
}

/** Connects an agent to a node's AGH face (`ws://127.0.0.1:4410/agh/v0`). */
export async function connectAgent(url: string, options: AgentOptions): Promise<AghAgent> {
  if (typeof url !== 'string' || !/^wss?:\/\/[^/]/.test(url)) {
    throw new InvalidParams(`connectAgent: the url must be ws://host:port/agh/v0, got ${JSON.stringify(url)}`, null, {
      field: 'url',
    });
  }
  requireText(options?.channel, 'channel');
  if (options.peerId !== undefined) requirePeer(options.peerId, 'peerId');
  const identity = options.identity ?? (await Identity.generate());
  const Ctor = options.WebSocket ?? (await webSocketConstructor());
  const headers = options.apiKey === undefined ? undefined : { Authorization: `Bearer ${options.apiKey}` };
  let socket: SocketLike;
  try {
    socket = await openSocket(Ctor, url, headers, options.connectTimeoutMs ?? 10_000);
  } catch (e) {
    throw new ConnectionClosed(e instanceof Error ? e.message : String(e));
  }
  return new AghAgent(socket, identity, options);
}
