// Starts real `agora node` processes for the tests, examples and benchmark (as the Rust
// harness does: every face on an ephemeral loopback port), and stops them.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export const AGORA_BIN = process.env.AGORA_BIN || 'agora';
const FACES = ['p2p', 'agh', 'http', 'rpc', 'agtp'];
const START_MS = Number(process.env.AGORA_NODE_START_SECS || 30) * 1000;
const live = new Set();

process.on('exit', () => {
  for (const node of live) node.child.kill('SIGKILL');
});
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    for (const node of live) node.child.kill('SIGKILL');
    process.exit(130);
  });
}

/**
 * Starts a node on `dataDir` (a new temporary one by default). `ports` reuses a previous node's
 * listening addresses (to restart it in place). Resolves to {rpc, agh, http, p2p, agtp, peerId,
 * dataDir, stop()}.
 */
export async function startNode({ dataDir, bootstrap = [], extra = [], ports, env: extraEnv = {} } = {}) {
  const dir = dataDir ?? mkdtempSync(join(tmpdir(), 'agora-sdk-ts-'));
  const hostPort = (url) => new URL(url.replace(/^agtp:/, 'http:')).host;
  const args = [
    'node', '--data', dir,
    '--agh-listen', ports ? hostPort(ports.agh) : '127.0.0.1:0',
    '--http-listen', ports ? hostPort(ports.http) : '127.0.0.1:0',
    '--rpc-listen', ports ? hostPort(ports.rpc) : '127.0.0.1:0',
    '--p2p-listen', ports ? ports.p2p.replace(/\/p2p\/[^/]+$/, '') : '/ip4/127.0.0.1/tcp/0',
    '--agtp-listen', ports ? hostPort(ports.agtp) : '127.0.0.1:0',
    '--greet-interval', '30',
    ...bootstrap.flatMap((b) => ['--bootstrap', b]),
    ...extra,
  ];
  const env = { ...process.env, ...extraEnv };
  delete env.AGORA_CONFIG;
  const child = spawn(AGORA_BIN, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const stderr = [];
  child.stderr.on('data', (d) => {
    stderr.push(d);
    if (stderr.length > 200) stderr.shift();
  });
  const node = { child, dataDir: dir, ownsDir: dataDir === undefined };
  live.add(node);
  const found = {};
  try {
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the node printed no listening lines within ${START_MS} ms`)), START_MS);
      child.once('error', (e) => {
        clearTimeout(timer);
        reject(new Error(`cannot start ${AGORA_BIN} (set AGORA_BIN): ${e.message}`));
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`the node exited with ${code}: ${Buffer.concat(stderr).toString().slice(-2000)}`));
      });
      createInterface({ input: child.stdout }).on('line', (line) => {
        const m = /^listening on (\S+) (\S+)$/.exec(line);
        if (m && FACES.includes(m[1])) found[m[1]] = m[2];
        if (FACES.every((f) => found[f])) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
  } catch (e) {
    child.kill('SIGKILL');
    live.delete(node);
    throw e;
  }
  child.removeAllListeners('exit');
  Object.assign(node, found, { peerId: found.p2p.split('/').pop() });
  node.stop = async ({ keepData = false } = {}) => {
    if (live.has(node)) {
      live.delete(node);
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      if (child.exitCode === null && child.signalCode === null) await exited;
    }
    if (node.ownsDir && !keepData) rmSync(dir, { recursive: true, force: true });
  };
  return node;
}

/** Polls `f` every 25 ms until it returns a truthy value or `timeoutMs` passes. */
export async function eventually(f, timeoutMs = 20_000, what = 'the condition') {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() >= deadline) throw new Error(`${what} did not hold within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** The PeerIds a node is connected to (`GET /status` `connected`). */
export async function connectedPeers(node) {
  const r = await fetch(`${node.http}/status`);
  const status = await r.json();
  return status.connected ?? [];
}

/** Starts two nodes, B bootstrapped from A, and waits until they are connected. */
export async function startPair(extra = []) {
  const a = await startNode({ extra });
  const b = await startNode({ bootstrap: [a.p2p], extra });
  await eventually(async () => (await connectedPeers(b)).includes(a.peerId), 20_000, 'B connects to A');
  return [a, b];
}
