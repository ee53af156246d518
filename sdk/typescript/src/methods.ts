/**
 * The methods of the JSON-RPC face: one table, {@link METHODS}, whose keys are the spec's
 * primitive and method names (`state` + `createSession` → `state.createSession`). The client's
 * namespaces are built from it, and its types from the params and result types given here.
 */

/** A JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
/** A JSON object. */
export type JsonObject = { [key: string]: unknown };
/** An amount: a decimal number (`0.003`) or a decimal string (`"0.003"`). */
export type Amount = number | string;

// ---- state (spec §4.1) ----
export interface CreateSessionParams {
  agentName?: string;
  agentType?: string;
  peerId?: string;
  model?: string;
  /** Free-form; `budget` and `maxDepth` set the session's guard budget and recursion depth. */
  metadata?: JsonObject;
}
export interface CreateSessionResult {
  sessionId: string;
  createdAt: string;
  /** A bearer token scoped to this session (`connect(url, {sessionToken})`). */
  sessionToken: string;
}
export interface SessionRef {
  sessionId: string;
}
export type SessionInfo = JsonObject & { sessionId: string };
export interface SetStateParams {
  sessionId: string;
  key: string;
  value: unknown;
}
export interface GetStateParams {
  sessionId: string;
  key: string;
}
export interface RecordEpisodeParams {
  sessionId: string;
  outcome: string;
  reward: number;
}

// ---- guard (spec §4.2) ----
export interface ValidateParams {
  data: unknown;
  schema: JsonObject;
}
export interface CheckSafetyParams {
  content: string;
  policy?: unknown;
}
export interface CheckBudgetParams {
  sessionId: string;
  estimatedCost: number;
}
export interface CheckBudgetResult {
  allowed: boolean;
  remaining: number;
  consumed: number;
  limit: number;
  reason?: string;
}
export interface ConsumeBudgetParams {
  sessionId: string;
  amount: number;
  description?: string;
}
export interface CheckRateLimitParams {
  key: string;
  limit: number;
  window: number;
}
export interface CheckRateLimitResult {
  allowed: boolean;
  remaining: number;
  resetAt: number | string;
}
export interface BudgetStatus {
  remaining: number;
  consumed: number;
  limit: number;
}

// ---- tool (spec §4.3) ----
export interface DiscoverParams {
  query?: string;
  capabilities?: string[];
  minReputation?: number;
  maxLatency?: number;
  geo?: string;
}
export interface ToolRecord {
  id: string;
  name: string;
  peerId: string;
  description: string;
  capabilities: string[];
  reputation: number;
  avgLatency: number;
  schema: unknown;
  [key: string]: unknown;
}
export interface Price {
  usdc?: Amount;
  points?: Amount;
}
export interface RegisterParams {
  name: string;
  description: string;
  /** The tool's schema object, as the spec shows it: `{input, output}` JSON Schemas. */
  schema: JsonObject;
  /** Capability tags, at least one. */
  capabilities: string[];
  price?: Price;
}
export interface InvokeParams {
  toolId: string;
  params: unknown;
  sessionId?: string;
  payment?: { credential: unknown } | { channelId: string };
}
export interface InvokeResult<T = unknown> {
  result: T;
  duration: number;
  peerId: string;
  payment?: unknown;
}
export interface ToolAnalytics {
  invocations: number;
  avgLatency: number;
  successRate: number;
  [key: string]: unknown;
}

// ---- memory (spec §4.4) ----
export type MemoryTier = 'working' | 'episodic' | 'semantic' | 'archival' | (string & {});
export interface StoreParams {
  content: string;
  sessionId?: string;
  metadata?: JsonObject;
  tier?: MemoryTier;
}
/** `memory.reembed`'s answer. */
export interface ReembedResult {
  reembedded: number;
  failed: number;
  remaining: number;
  from: string;
  to: string;
  note?: string;
}
export interface StoreResult {
  id: string;
  peerId: string;
  replicas: unknown;
}
export interface SearchParams {
  query: string;
  sessionId?: string;
  limit?: number;
  threshold?: number;
  tier?: MemoryTier;
}
export interface Memory {
  id: string;
  content: string;
  similarity?: number;
  metadata?: JsonObject;
  peerId?: string;
  createdAt?: string;
  [key: string]: unknown;
}
export interface SearchResult {
  memories: Memory[];
  searchTime: number;
}
export interface IdRef {
  id: string;
}
export interface ListParams {
  sessionId: string;
  limit?: number;
  offset?: number;
}

// ---- recursive (spec §4.5) ----
export interface AnalyzeParams {
  sessionId: string;
  currentStep: string;
  callStack: string[];
  maxIterations?: number;
}
export interface AnalyzeResult {
  isLooping: boolean;
  pattern?: string;
  iterations?: number;
  depth?: number;
  recommendation: string;
}
export interface TrackParams {
  sessionId: string;
  step: string;
  depth: number;
}
export interface SetMaxDepthParams {
  sessionId: string;
  maxDepth: number;
}

// ---- learning (spec §5.1) ----
export interface PlaybookRef {
  playbookId: string;
}
export interface ReflectParams {
  playbookId: string;
  execution: JsonObject;
}
export interface CurateParams {
  playbookId: string;
  maxTokens?: number;
}
export interface AddBulletParams {
  playbookId: string;
  section: 'str' | 'cal' | 'mis' | 'fbk' | (string & {});
  content: string;
}
export interface FeedbackParams {
  playbookId: string;
  bulletId: string;
  helpful: boolean;
}

// ---- improving (spec §5.2) ----
export interface TrajectoryStep {
  action: string;
  tool?: string;
  params?: unknown;
  result?: unknown;
  duration?: number;
  [key: string]: unknown;
}
export interface RecordTrajectoryParams {
  taskType: string;
  input: unknown;
  output: unknown;
  steps: TrajectoryStep[];
  reward: number;
  metadata?: JsonObject;
}
export interface RecordTrajectoryResult {
  trajectoryId: string;
  state: string;
  gossipedTo: number;
}
export type CurationStrategy = 'ACCUMULATE' | 'DATABASE_LEVEL' | 'EXEMPLAR_LEVEL' | 'HYBRID';
export interface GetExemplarsParams {
  taskType: string;
  limit?: number;
  strategy?: CurationStrategy;
  minReward?: number;
}
export interface Exemplar {
  trajectoryId: string;
  input: unknown;
  output?: unknown;
  steps: TrajectoryStep[];
  reward: number;
  utilityScore: number;
  usageCount: number;
  peerId: string;
  [key: string]: unknown;
}
export interface GetExemplarsResult {
  exemplars: Exemplar[];
  librarySize: number;
  avgReward: number;
}
export interface ImprovingCurateParams {
  taskType: string;
  strategy?: CurationStrategy;
}
export interface AugmentParams {
  trajectoryId: string;
  mode?: 'NONE' | 'FEEDBACK_ONLY' | 'FULL_PIPELINE';
}
export interface AssessDifficultyParams {
  taskType: string;
  input: unknown;
  samples?: number;
}
export interface LibraryStatsParams {
  taskType?: string;
}

// ---- micropayments (spec §6) ----
export interface ChallengeParams {
  pricePoints?: Amount;
  priceUsdc?: Amount;
  payeeAddress?: string;
  resource?: string;
}
export interface VerifyParams {
  credential: unknown;
}
export interface ChannelOpenParams {
  /** The payee's PeerId. */
  payee: string;
  budget: Amount;
  currency: 'USDC' | 'points' | (string & {});
  chainId?: number;
  network?: string;
}
export interface PayChannelState {
  channelId: string;
  payer: string;
  payerPeerId?: string;
  payee: string;
  currency: string;
  chainId?: number;
  budget: number | string;
  spent: number | string;
  remaining: number | string;
  nonce: number;
  state: 'open' | 'closed';
  openedAt?: number | string;
  closedAt?: number | string | null;
  [key: string]: unknown;
}
export interface ChannelPayParams {
  channelId: string;
  amount: Amount;
  memo?: string;
}
export interface ChannelPayResult {
  nonce: number;
  remaining: number | string;
  [key: string]: unknown;
}
export interface ChannelRef {
  channelId: string;
}
export interface ChannelCloseResult {
  totalSpent: number | string;
  refund: number | string;
  channelId: string;
  [key: string]: unknown;
}

// ---- bridge (docs/bridges.md) ----
export interface RegisterMcpServerParams {
  url: string;
  name?: string;
  command?: string;
  args?: string[];
  env?: Record<string, string>;
  cwd?: string;
  tools?: string[];
  tags?: string[];
  price?: Price;
}
export interface AnnounceA2AAgentParams {
  url?: string;
  agentCard?: JsonObject;
  name?: string;
  tags?: string[];
  price?: Price;
}

// ---- node ----
export interface NodeInfo {
  peerId: string;
  /** The payments wallet's address (EIP-55). */
  walletAddress: string;
  /** Each face's address (`rpc`, `agh`, `http`, `agtp`, …); `p2p` is a list of multiaddrs. */
  faces: { [face: string]: string | string[] | undefined; p2p?: string[] };
  /** The memory embedder: its `id` (`lexical-v1`, …) and vector `dimensions`. */
  embedder: { id: string; dimensions: number; [key: string]: unknown };
  version: string;
  [key: string]: unknown;
}

// ---- directory (docs/directory.md) ----
export interface DirectorySearchParams {
  /** What is wanted, in words (may be empty when a filter is given). */
  query: string;
  filters?: {
    source?: string | string[];
    trust?: 'claimed' | 'signed' | 'verified';
    capability?: string;
    kind?: 'agent' | 'tool';
    online?: boolean;
    /** The highest price per call, decimal USDC. */
    maxPrice?: number | string;
    maxPriceAtomic?: number;
    maxLatencyMs?: number;
  };
  limit?: number;
  scope?: 'local' | 'mesh';
}
export interface DirectoryHit {
  id: string;
  kind: 'agent' | 'tool';
  source: string;
  name: string;
  description: string;
  capabilities: string[];
  provenance: { face: string; node: string; signer?: string };
  trust: { level: 'claimed' | 'signed' | 'verified'; basis: string; [key: string]: unknown };
  call: { face: string; method?: string; target?: string; address?: string };
  online: boolean;
  lastSeenMs: number;
  score: number;
  explain: { text: string; [key: string]: unknown };
  answeredBy?: string;
  [key: string]: unknown;
}
export interface DirectorySearchResult {
  results: DirectoryHit[];
  count: number;
  embedder: string;
  answeredBy: string[];
  tookMs: number;
}

/** The OpenRPC document `rpc.discover` answers (only the members this SDK reads are typed). */
export interface OpenRpcDocument {
  openrpc: string;
  info: { title: string; version: string; [key: string]: unknown };
  methods: Array<{ name: string; [key: string]: unknown }>;
  [key: string]: unknown;
}

/** A method's signature, carried only in the type (the runtime value is an empty marker). */
export interface Sig<P, R> {
  readonly __params?: P;
  readonly __result?: R;
}
const m = <P, R>(): Sig<P, R> => ({}) as Sig<P, R>;
type Any = JsonObject;
type Empty = Record<string, never> | undefined;

/**
 * Every method of the face, by primitive. A nested object is a dotted sub-namespace
 * (`micropayments.channel.open`). Each name is written here once.
 */
export const METHODS = {
  state: {
    createSession: m<CreateSessionParams | undefined, CreateSessionResult>(),
    getSession: m<SessionRef, SessionInfo>(),
    setState: m<SetStateParams, { updated: boolean }>(),
    getState: m<GetStateParams, { value: unknown }>(),
    endSession: m<SessionRef, { ended: boolean; duration: number }>(),
    recordEpisode: m<RecordEpisodeParams, { episodeId: string }>(),
  },
  guard: {
    validate: m<ValidateParams, { valid: boolean; errors?: unknown[] }>(),
    checkSafety: m<CheckSafetyParams, { safe: boolean; flags?: unknown[] }>(),
    checkBudget: m<CheckBudgetParams, CheckBudgetResult>(),
    consumeBudget: m<ConsumeBudgetParams, { remaining: number }>(),
    checkRateLimit: m<CheckRateLimitParams, CheckRateLimitResult>(),
    getBudgetStatus: m<SessionRef, BudgetStatus>(),
  },
  tool: {
    discover: m<DiscoverParams, { tools: ToolRecord[] }>(),
    register: m<RegisterParams, { toolId: string }>(),
    invoke: m<InvokeParams, InvokeResult>(),
    getAnalytics: m<{ toolId: string }, ToolAnalytics>(),
    listRegistered: m<Empty, { tools: ToolRecord[] }>(),
  },
  memory: {
    store: m<StoreParams, StoreResult>(),
    search: m<SearchParams, SearchResult>(),
    get: m<IdRef, { content: string; metadata?: JsonObject; peerId: string; [k: string]: unknown }>(),
    list: m<ListParams, { memories: Memory[]; total: number }>(),
    delete: m<IdRef, { deleted: boolean }>(),
    archive: m<IdRef, { archived: boolean; tier: string }>(),
    /** Agora's, not the spec's (the API key): lexical memories move to the node's embedder. */
    reembed: m<{ limit?: number } | undefined, ReembedResult>(),
  },
  recursive: {
    analyze: m<AnalyzeParams, AnalyzeResult>(),
    track: m<TrackParams, { tracked: boolean; depth: number }>(),
    getTrace: m<SessionRef, { steps: unknown[]; maxDepth: number; totalIterations: number }>(),
    setMaxDepth: m<SetMaxDepthParams, { updated: boolean }>(),
  },
  learning: {
    getPlaybook: m<PlaybookRef, { bullets: Any[]; version: number; tokenCount: number }>(),
    reflect: m<ReflectParams, { newBullets: Any[]; prunedBullets: string[]; playbookVersion: number }>(),
    curate: m<CurateParams, { removed: unknown[]; remaining: number; tokenCount: number }>(),
    addBullet: m<AddBulletParams, { bulletId: string }>(),
    feedback: m<FeedbackParams, { helpfulCount: number; harmfulCount: number }>(),
    getStats: m<PlaybookRef, { totalBullets: number; bySection: Any; avgScore: number; version: number }>(),
  },
  improving: {
    recordTrajectory: m<RecordTrajectoryParams, RecordTrajectoryResult>(),
    getExemplars: m<GetExemplarsParams, GetExemplarsResult>(),
    curate: m<ImprovingCurateParams, { kept: number; pruned: number; librarySize: number }>(),
    augment: m<AugmentParams, { augmented: boolean; newState: string }>(),
    assessDifficulty: m<AssessDifficultyParams, { difficulty: string; passRate: number; recommendation: string }>(),
    getLibraryStats: m<LibraryStatsParams | undefined, { total: number; byState: Any; avgReward: number; topContributors: Any[] }>(),
  },
  micropayments: {
    challenge: m<ChallengeParams, Any>(),
    verify: m<VerifyParams, { accepted: boolean; receiptId: string; amount: number | string; [k: string]: unknown }>(),
    channel: {
      open: m<ChannelOpenParams, PayChannelState>(),
      pay: m<ChannelPayParams, ChannelPayResult>(),
      close: m<ChannelRef, ChannelCloseResult>(),
    },
  },
  bridge: {
    registerMCPServer: m<RegisterMcpServerParams, { serverId: string; tools: string[] }>(),
    listMCPServers: m<Empty, { servers: Any[] }>(),
    unregisterMCPServer: m<{ serverId: string }, { serverId: string; removed: boolean }>(),
    announceA2AAgent: m<AnnounceA2AAgentParams, Any>(),
    listA2AAgents: m<Empty, Any>(),
    withdrawA2AAgent: m<{ name: string }, Any>(),
  },
  node: {
    info: m<Empty, NodeInfo>(),
  },
  directory: {
    search: m<DirectorySearchParams, DirectorySearchResult>(),
  },
  rpc: {
    /** The face's OpenRPC 1.3 document (OpenRPC's `rpc.discover` convention). */
    discover: m<Empty, OpenRpcDocument>(),
  },
} as const;

/** Options of one call. */
export interface CallOptions {
  /** This call's timeout, ms (default: the client's `timeoutMs`). */
  timeoutMs?: number;
}

/** The callable form of a table: each signature becomes `(params, options?) => Promise<result>`. */
export type Callable<T> = {
  readonly [K in keyof T]: T[K] extends Sig<infer P, infer R>
    ? undefined extends P
      ? (params?: P, options?: CallOptions) => Promise<R>
      : (params: P, options?: CallOptions) => Promise<R>
    : Callable<T[K]>;
};

/** Every method name of {@link METHODS}, dotted (`"micropayments.channel.open"`). */
export function methodNames(table: object = METHODS, prefix = ''): string[] {
  const out: string[] = [];
  for (const [key, value] of Object.entries(table)) {
    const name = prefix + key;
    if (isNamespace(value)) out.push(...methodNames(value, `${name}.`));
    else out.push(name);
  }
  return out;
}

/** Whether a table entry is a nested namespace rather than a method marker. */
export function isNamespace(value: unknown): value is object {
  return typeof value === 'object' && value !== null && Object.keys(value).length > 0;
}
