// The JSON-RPC client against a real node: every namespace, error mapping, concurrency, tool
// providers, session tokens, timeouts, bad input, the §6.4 channel and node.info.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  AgoraError,
  BudgetExceeded,
  ConnectionClosed,
  InvalidParams,
  METHODS,
  MethodNotFound,
  PeerUnavailable,
  RateLimited,
  SessionNotFound,
  TimeoutError,
  connect,
  methodNames,
} from 'agora-mesh';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startNode } from './support.js';

const API_KEY = 'sdk-test-key-0123456789';
// `ws` reports the 401; the WHATWG WebSocket (Node >= 22, or --experimental-websocket) cannot.
const REFUSED = /401|non-101/;

describe('client', { timeout: 60_000 }, () => {
  let node;
  let hs;
  before(async () => {
    node = await startNode({ env: { AGORA_API_KEY: API_KEY }, extra: ['--rpc-conn-rate', '300', '--rpc-key-rate', '100000'] });
    hs = await connect(node.rpc, { apiKey: API_KEY, timeoutMs: 10_000 });
  });
  after(async () => {
    await hs?.close();
    await node?.stop();
  });

  it('builds every namespace from the one method table', () => {
    const names = methodNames();
    assert.ok(names.includes('state.createSession'));
    assert.ok(names.includes('micropayments.channel.open'));
    assert.ok(names.includes('bridge.registerMCPServer'));
    assert.ok(names.includes('node.info'));
    assert.ok(names.includes('directory.search'));
    for (const name of names) {
      const fn = name.split('.').reduce((o, k) => o?.[k], hs);
      assert.equal(typeof fn, 'function', name);
    }
    assert.deepEqual(Object.keys(METHODS).sort(), [
      'bridge', 'directory', 'guard', 'improving', 'learning', 'memory', 'micropayments', 'node', 'recursive', 'rpc',
      'state', 'tool',
    ]);
  });

  it('the method table matches the methods the node describes (rpc.discover)', async (t) => {
    const doc = await hs.rpc.discover().catch((e) => e);
    if (doc instanceof MethodNotFound) {
      t.skip('this node binary has no rpc.discover yet');
      return;
    }
    assert.ok(!(doc instanceof Error), String(doc));
    assert.match(doc.openrpc, /^1\.3\./);
    // selfImproving.* are the node's aliases of improving.*
    const served = doc.methods.map((m) => m.name).filter((n) => !n.startsWith('selfImproving.'));
    assert.deepEqual([...new Set(served)].sort(), methodNames().sort());
  });

  it('state: a session lifecycle', async () => {
    const s = await hs.state.createSession({ agentName: 'web-researcher', agentType: 'autonomous', model: 'gemma-3-27b', metadata: { task: 'market-analysis' } });
    assert.match(s.sessionId, /\S/);
    assert.ok(!Number.isNaN(Date.parse(s.createdAt)));
    assert.deepEqual(await hs.state.setState({ sessionId: s.sessionId, key: 'k', value: { n: 1 } }), { updated: true });
    assert.deepEqual((await hs.state.getState({ sessionId: s.sessionId, key: 'k' })).value, { n: 1 });
    assert.equal((await hs.state.getSession({ sessionId: s.sessionId })).sessionId, s.sessionId);
    assert.match((await hs.state.recordEpisode({ sessionId: s.sessionId, outcome: 'success', reward: 0.85 })).episodeId, /\S/);
    const ended = await hs.state.endSession({ sessionId: s.sessionId });
    assert.equal(ended.ended, true);
    const refused = await hs.state.setState({ sessionId: s.sessionId, key: 'k', value: 2 }).catch((e) => e);
    assert.ok(refused instanceof SessionNotFound, String(refused));
    assert.equal(refused.data.reason, 'ended');
  });

  it('guard, recursive: budgets, rate limits, safety, loops', async () => {
    const { sessionId } = await hs.state.createSession();
    assert.deepEqual(await hs.guard.checkBudget({ sessionId, estimatedCost: 0.02 }), { allowed: true, remaining: 1, consumed: 0, limit: 1 });
    assert.equal((await hs.guard.consumeBudget({ sessionId, amount: 0.25 })).remaining, 0.75);
    assert.deepEqual(await hs.guard.getBudgetStatus({ sessionId }), { remaining: 0.75, consumed: 0.25, limit: 1 });
    const err = await hs.guard.consumeBudget({ sessionId, amount: 5 }).catch((e) => e);
    assert.ok(err instanceof BudgetExceeded && err instanceof AgoraError);
    assert.equal(err.code, -32002);
    assert.deepEqual([err.remaining, err.requested, err.limit], [0.75, 5, 1]);
    const rl = await hs.guard.checkRateLimit({ key: `k-${Date.now()}`, limit: 1, window: 60 });
    assert.equal(rl.allowed, true);
    assert.equal(typeof (await hs.guard.checkSafety({ content: 'hello there' })).safe, 'boolean');
    assert.equal((await hs.guard.validate({ data: { a: 1 }, schema: { type: 'object' } })).valid, true);
    const stack = ['plan-research', 'web-search', 'analyze-results', 'refine-search-query', 'web-search', 'analyze-results', 'refine-search-query'];
    const loop = await hs.recursive.analyze({ sessionId, currentStep: 'refine-search-query', callStack: stack, maxIterations: 10 });
    assert.equal(loop.isLooping, true);
    assert.equal((await hs.recursive.track({ sessionId, step: 'plan', depth: 1 })).tracked, true);
    assert.ok(Array.isArray((await hs.recursive.getTrace({ sessionId })).steps));
    assert.equal((await hs.recursive.setMaxDepth({ sessionId, maxDepth: 5 })).updated, true);
  });

  it('memory, learning, improving', async () => {
    const stored = await hs.memory.store({ content: 'Exponential backoff with jitter prevents thundering herds', metadata: { tags: ['api'] } });
    assert.equal(stored.peerId, node.peerId);
    assert.equal((await hs.memory.get({ id: stored.id })).content, 'Exponential backoff with jitter prevents thundering herds');
    const found = await hs.memory.search({ query: 'backoff jitter', limit: 5 });
    assert.ok(found.memories.some((m) => m.id === stored.id));
    assert.equal((await hs.memory.archive({ id: stored.id })).archived, true);
    assert.equal((await hs.memory.delete({ id: stored.id })).deleted, true);
    const { sessionId } = await hs.state.createSession();
    assert.equal(typeof (await hs.memory.list({ sessionId })).total, 'number');

    const playbookId = `pb-${Date.now()}`;
    const { bulletId } = await hs.learning.addBullet({ playbookId, section: 'str', content: 'Prefer analyst reports for market sizes' });
    assert.equal((await hs.learning.feedback({ playbookId, bulletId, helpful: true })).helpfulCount, 1);
    assert.equal((await hs.learning.getPlaybook({ playbookId })).bullets.length, 1);
    assert.equal((await hs.learning.getStats({ playbookId })).totalBullets, 1);
    assert.ok(Array.isArray((await hs.learning.curate({ playbookId })).removed));
    const reflected = await hs.learning.reflect({ playbookId, execution: { input: { q: 'x' }, output: {}, steps: [{ action: 'search', tool: 'web-search', duration: 340 }], outcome: 'success', reward: 0.92 } });
    assert.equal(typeof reflected.playbookVersion, 'number');

    const rec = await hs.improving.recordTrajectory({ taskType: 'sdk-test', input: { q: 1 }, output: { a: 1 }, steps: [{ action: 'search', duration: 10 }], reward: 0.9 });
    assert.equal(rec.state, 'SUCCESS');
    assert.ok((await hs.improving.getExemplars({ taskType: 'sdk-test' })).exemplars.some((e) => e.trajectoryId === rec.trajectoryId));
    assert.equal(typeof (await hs.improving.getLibraryStats()).total, 'number');
    assert.equal(typeof (await hs.improving.curate({ taskType: 'sdk-test' })).librarySize, 'number');
    assert.ok(['TOO_EASY', 'FRONTIER', 'TOO_HARD'].includes((await hs.improving.assessDifficulty({ taskType: 'sdk-test', input: { q: 1 } })).difficulty));
    assert.equal(typeof (await hs.improving.augment({ trajectoryId: rec.trajectoryId, mode: 'NONE' })).augmented, 'boolean');
  });

  it('the API key: required once set; bridge.* with it', async () => {
    await assert.rejects(connect(node.rpc, { reconnect: false }), (e) => e instanceof ConnectionClosed && REFUSED.test(e.message));
    await assert.rejects(connect(node.rpc, { apiKey: 'wrong-key-0123456789', reconnect: false }), REFUSED);
    assert.ok(Array.isArray((await hs.bridge.listMCPServers()).servers));
    assert.equal(typeof (await hs.bridge.listA2AAgents()), 'object');
    const err = await hs.bridge.unregisterMCPServer({ serverId: 'nothing-here' }).catch((e) => e);
    assert.ok(err instanceof AgoraError && err.code !== null, String(err));
    const a2a = await hs.bridge.withdrawA2AAgent({ name: 'nothing-here' }).catch((e) => e);
    assert.ok(a2a instanceof AgoraError && a2a.code !== null, String(a2a));
    const s = await hs.state.createSession();
    const scoped = await connect(node.rpc, { sessionToken: s.sessionToken });
    try {
      const refused = await scoped.bridge.listMCPServers().catch((e) => e);
      assert.ok(refused instanceof AgoraError && refused.code !== null, String(refused));
    } finally {
      await scoped.close();
    }
  });

  it('maps every error code and carries field and retryAfterMs', async () => {
    const missing = await hs.call('no.suchMethod', {}).catch((e) => e);
    assert.ok(missing instanceof MethodNotFound);
    assert.equal(missing.code, -32601);
    const bad = await hs.state.getSession({}).catch((e) => e);
    assert.ok(bad instanceof InvalidParams);
    assert.equal(bad.field, 'sessionId');
    const gone = await hs.state.getSession({ sessionId: 'sess-none' }).catch((e) => e);
    assert.ok(gone instanceof SessionNotFound);
    assert.equal(gone.code, -32001);
  });

  it('sends many calls at once on one connection and matches the answers', async () => {
    const client = await connect(node.rpc, { apiKey: API_KEY });
    try {
      const n = 150;
      const results = await Promise.all(
        Array.from({ length: n }, (_, i) => client.guard.checkRateLimit({ key: `c-${i}`, limit: i + 1, window: 60 })),
      );
      results.forEach((r, i) => assert.deepEqual([r.allowed, r.remaining], [true, i], `call ${i}`));
      const stored = await Promise.all(Array.from({ length: 20 }, (_, i) => client.memory.store({ content: `memo number ${i}` })));
      const got = await Promise.all(stored.map((s) => client.memory.get({ id: s.id })));
      got.forEach((g, i) => assert.equal(g.content, `memo number ${i}`));
    } finally {
      await client.close();
    }
  });

  it('a tool provider answers tool.invoke; a throwing handler becomes an error reply', async () => {
    const provider = await connect(node.rpc, { apiKey: API_KEY });
    try {
      const seen = [];
      const { toolId } = await provider.tool.register(
        { name: 'echo', description: 'echoes its input', capabilities: ['echo'], inputSchema: { type: 'object' } },
        async (params, ctx) => {
          seen.push(ctx);
          if (params.fail === 'typed') throw new PeerUnavailable('upstream down', -32006, { upstream: 'x' });
          if (params.fail) throw new Error('kaputt');
          return { echo: params };
        },
      );
      const { sessionId } = await hs.state.createSession();
      const r = await hs.tool.invoke({ toolId, params: { msg: 'hi' }, sessionId });
      assert.deepEqual(r.result, { echo: { msg: 'hi' } });
      assert.equal(r.peerId, node.peerId);
      assert.equal(seen[0].toolId, toolId);
      assert.equal(seen[0].sessionId, sessionId);
      assert.match(String(seen[0].requestId), /^srv-/);
      const e1 = await hs.tool.invoke({ toolId, params: { fail: true } }).catch((e) => e);
      assert.ok(e1 instanceof AgoraError);
      assert.equal(e1.message, 'kaputt');
      const e2 = await hs.tool.invoke({ toolId, params: { fail: 'typed' } }).catch((e) => e);
      assert.ok(e2 instanceof PeerUnavailable);
      assert.deepEqual(e2.data, { upstream: 'x' });
      // the provider survived its handler's errors
      assert.deepEqual((await hs.tool.invoke({ toolId, params: { n: 2 } })).result, { echo: { n: 2 } });
      const many = await Promise.all(Array.from({ length: 10 }, (_, i) => hs.tool.invoke({ toolId, params: { i } })));
      many.forEach((m, i) => assert.deepEqual(m.result, { echo: { i } }));
      assert.ok((await provider.tool.listRegistered()).tools.some((t) => t.id === toolId));
      assert.ok((await hs.tool.discover({ query: 'echo', capabilities: ['echo'] })).tools.some((t) => t.id === toolId));
      assert.ok((await hs.tool.getAnalytics({ toolId })).invocations >= 13);
    } finally {
      await provider.close();
    }
  });

  it('refuses bad input with a clear error before sending', async () => {
    await assert.rejects(connect('http://127.0.0.1:1'), (e) => e instanceof InvalidParams && e.field === 'url');
    await assert.rejects(connect(node.rpc, { apiKey: API_KEY, sessionToken: 'b' }), InvalidParams);
    await assert.rejects(connect(node.rpc, { apiKey: API_KEY, timeoutMs: -1 }), /timeoutMs must be a positive number/);
    await assert.rejects(hs.tool.register({ name: 'x' }, () => 1), /missing description, capabilities/);
    await assert.rejects(hs.state.getSession('sess-1'), /state\.getSession: params must be one object/);
    await assert.rejects(hs.micropayments.channel.open({ payee: node.peerId, budget: '5 USDC', currency: 'USDC' }), (e) => e instanceof InvalidParams && e.field === 'budget');
    await assert.rejects(connect('ws://127.0.0.1:9', { reconnect: false }), ConnectionClosed);
  });

  it('names both remedies when there is no WebSocket at all', { skip: typeof WebSocket === 'function' && 'this runtime has a global WebSocket' }, () => {
    // the built package alone, where `ws` cannot be resolved
    const dir = mkdtempSync(join(tmpdir(), 'agora-sdk-ts-nows-'));
    try {
      cpSync(fileURLToPath(new URL('../dist/', import.meta.url)), dir, { recursive: true });
      writeFileSync(join(dir, 'package.json'), '{"type":"module"}');
      const script = "import('./index.js').then((m) => m.connect('ws://127.0.0.1:9')).catch((e) => console.log(e.message))";
      const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: dir, encoding: 'utf8' });
      assert.match(out, /Node\.js >= 22/);
      assert.match(out, /npm install ws/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('times a call out, and fails calls in flight when the connection closes', async () => {
    const provider = await connect(node.rpc, { apiKey: API_KEY });
    const slow = await provider.tool.register({ name: 'slow', description: 'answers late', capabilities: ['slow'] }, () => new Promise(() => {}));
    const client = await connect(node.rpc, { apiKey: API_KEY, reconnect: false });
    const t = await client.tool.invoke({ toolId: slow.toolId, params: {} }, { timeoutMs: 200 }).catch((e) => e);
    assert.ok(t instanceof TimeoutError, String(t));
    const inFlight = client.tool.invoke({ toolId: slow.toolId, params: {} });
    await client.close();
    await assert.rejects(inFlight, ConnectionClosed);
    await assert.rejects(client.state.createSession(), ConnectionClosed);
    await provider.close();
  });

  it('a session token grants its own session only', async () => {
    const s = await hs.state.createSession({ agentName: 'scoped' });
    const scoped = await connect(node.rpc, { sessionToken: s.sessionToken });
    try {
      assert.equal((await scoped.guard.getBudgetStatus({ sessionId: s.sessionId })).limit, 1);
      const other = await hs.state.createSession();
      await assert.rejects(scoped.state.getSession({ sessionId: other.sessionId }), AgoraError);
    } finally {
      await scoped.close();
    }
    await assert.rejects(connect(node.rpc, { sessionToken: 'hst_not-a-token', reconnect: false }), REFUSED);
  });

  it('RateLimited carries retryAfterMs', async () => {
    const client = await connect(node.rpc, { apiKey: API_KEY });
    try {
      const outcomes = await Promise.allSettled(
        Array.from({ length: 400 }, (_, i) => client.guard.checkRateLimit({ key: `r-${i}`, limit: 10, window: 60 })),
      );
      const limited = outcomes.filter((o) => o.status === 'rejected').map((o) => o.reason);
      assert.ok(limited.length > 0, 'the face refuses some of 400 calls at once (300/s per connection here)');
      for (const e of limited) {
        assert.ok(e instanceof RateLimited, String(e));
        assert.equal(e.code, -32003);
        assert.ok(e.retryAfterMs > 0);
      }
    } finally {
      await client.close();
    }
  });

  it('micropayments: the §6.4 channel with decimal amounts', async () => {
    const channel = await hs.micropayments.channel.open({ payee: node.peerId, budget: 5.0, currency: 'USDC' });
    assert.equal(channel.opened.budget, 5);
    assert.equal((await channel.pay(0.003, '42 tokens')).nonce, 1);
    assert.equal((await channel.pay('0.003', '42 tokens')).nonce, 2);
    const receipt = await channel.close();
    assert.equal(receipt.totalSpent, 0.006);
    assert.equal(receipt.refund, 4.994);
    assert.equal(receipt.totalSpentAtomic, '6000');
    assert.equal(channel.remaining, 4.994);
    const points = await hs.micropayments.channel.open({ payee: node.peerId, budget: '10', currency: 'points' });
    const over = await points.pay(11).catch((e) => e);
    assert.ok(over instanceof BudgetExceeded, String(over));
    assert.equal(over.remaining, 10);
    await points.close();
    const challenge = await hs.micropayments.challenge({ priceUsdc: 0.01 });
    assert.match(challenge.challengeId, /^pc-/);
    const refused = await hs.micropayments.verify({ credential: { x402Version: 2 } }).catch((e) => e);
    assert.ok(refused instanceof InvalidParams);
  });

  it('node.info: PeerId, wallet, faces, embedder, version', async () => {
    const info = await hs.node.info();
    assert.equal(info.peerId, node.peerId);
    assert.match(info.walletAddress, /^0x[0-9a-fA-F]{40}$/);
    assert.equal(info.faces.rpc, node.rpc);
    assert.equal(info.faces.agh, node.agh);
    assert.ok(info.faces.p2p.includes(node.p2p));
    assert.equal(typeof info.embedder.id, 'string');
    assert.ok(info.embedder.dimensions > 0);
    assert.equal(typeof info.version, 'string');
  });
});
