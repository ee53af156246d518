// Reconnection: the node is killed and restarted on the same data directory and ports; the
// client reconnects with backoff, registers its tools again, and calls in flight fail with
// ConnectionClosed.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { ConnectionClosed, connect } from 'agora-mesh';
import { eventually, startNode } from './support.js';

describe('reconnection', { timeout: 60_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'agora-sdk-ts-reconnect-'));
  const nodes = [];
  after(async () => {
    for (const n of nodes) await n.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('reconnects after a node restart and serves its tools again', async () => {
    const first = await startNode({ dataDir: dir });
    nodes.push(first);
    const provider = await connect(first.rpc, { reconnect: { initialDelayMs: 20, maxDelayMs: 200, jitter: 0.5 } });
    const events = [];
    provider.on('disconnect', (d) => events.push(['disconnect', d]));
    provider.on('reconnect', (d) => events.push(['reconnect', d]));
    let calls = 0;
    const { toolId } = await provider.tool.register(
      { name: 'counter', description: 'counts its calls', capabilities: ['count'] },
      () => ({ calls: ++calls }),
    );
    const slow = await provider.tool.register({ name: 'never', description: 'never answers', capabilities: ['never'] }, () => new Promise(() => {}));
    const inFlight = provider.tool.invoke({ toolId: slow.toolId, params: {} }).then(() => 'answered', (e) => e);

    await first.stop({ keepData: true });
    assert.ok((await inFlight) instanceof ConnectionClosed);
    assert.equal(provider.connected, false);
    // a call made while the client reconnects waits for the new connection
    const waiting = provider.state.createSession({ agentName: 'after-restart' });

    const second = await startNode({ dataDir: dir, ports: first });
    nodes.push(second);
    assert.equal(second.rpc, first.rpc);
    await eventually(() => provider.connected, 10_000, 'the provider reconnects');
    assert.match((await waiting).sessionId, /\S/);
    assert.deepEqual(events.map((e) => e[0]), ['disconnect', 'reconnect']);

    const caller = await connect(second.rpc);
    try {
      const r = await caller.tool.invoke({ toolId, params: {} });
      assert.deepEqual(r.result, { calls: 1 }, 'the re-registered tool keeps its id and is served');
    } finally {
      await caller.close();
      await provider.close();
    }
    await assert.rejects(provider.state.createSession(), ConnectionClosed);
  });

  it('without reconnection the client stays closed', async () => {
    const node = await startNode();
    nodes.push(node);
    const client = await connect(node.rpc, { reconnect: false });
    let disconnected = false;
    client.on('disconnect', () => {
      disconnected = true;
    });
    await node.stop();
    await eventually(() => disconnected, 5_000, 'the client sees the close');
    await assert.rejects(client.state.createSession(), ConnectionClosed);
  });

  it('gives up after maxAttempts', async () => {
    const node = await startNode();
    nodes.push(node);
    const client = await connect(node.rpc, { reconnect: { initialDelayMs: 5, maxDelayMs: 20, maxAttempts: 3 } });
    let failed;
    client.on('reconnectFailed', (d) => {
      failed = d;
    });
    await node.stop();
    await eventually(() => failed, 10_000, 'reconnectFailed');
    assert.ok(failed.error instanceof Error);
    await assert.rejects(client.state.createSession(), ConnectionClosed);
  });

  it('stops reconnecting once its session has ended', async () => {
    const node = await startNode();
    nodes.push(node);
    const admin = await connect(node.rpc);
    const s = await admin.state.createSession();
    const scoped = await connect(node.rpc, { sessionToken: s.sessionToken, reconnect: { initialDelayMs: 5, maxDelayMs: 20 } });
    let failed;
    scoped.on('reconnectFailed', (d) => {
      failed = d;
    });
    await admin.state.endSession({ sessionId: s.sessionId });
    // the node closes the token's connection at its next frame
    await scoped.state.getSession({ sessionId: s.sessionId }).catch(() => {});
    try {
      await eventually(() => failed, 10_000, 'reconnectFailed once the session has ended');
      assert.ok(failed.error instanceof Error);
      await assert.rejects(scoped.state.getSession({ sessionId: s.sessionId }), ConnectionClosed);
    } finally {
      await scoped.close();
      await admin.close();
    }
  });
});
