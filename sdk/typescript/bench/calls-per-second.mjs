// JSON-RPC calls per second on one connection: through the SDK and through a bare WebSocket
// client sending the same frames, in alternating rounds of the same run against one node.
//
//   node bench/calls-per-second.mjs [--rounds 6] [--calls 4000] [--window 64] [--method state.getSession]
//
// Starts its own node (AGORA_BIN, default `agora` on PATH) with the face's rate limits raised,
// or uses AGORA_RPC (then that node's limits apply). Prints one line per round and a summary;
// the last line is the summary as JSON.
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import { connect } from 'agora-mesh';
import { startNode } from '../test/support.js';

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}
const ROUNDS = Number(option('rounds', 6));
const CALLS = Number(option('calls', 4000));
const WINDOW = Number(option('window', 64));
const METHOD = option('method', 'state.getSession');
const PARAMS = METHOD === 'state.getSession' ? { sessionId: 'sess-missing' } : {};
for (const [k, v] of [['rounds', ROUNDS], ['calls', CALLS], ['window', WINDOW]]) {
  if (!Number.isInteger(v) || v < 1) throw new Error(`--${k} must be a positive integer`);
}

/** Runs `calls` calls of `one()` with `window` in flight; resolves to calls per second. */
async function drive(one) {
  let started = 0;
  let failed = 0;
  const t0 = performance.now();
  await new Promise((resolve, reject) => {
    let done = 0;
    const next = () => {
      if (started >= CALLS) return;
      started++;
      one().then(
        (ok) => {
          if (!ok) failed++;
          if (++done === CALLS) resolve();
          else next();
        },
        reject,
      );
    };
    for (let i = 0; i < WINDOW; i++) next();
  });
  const secs = (performance.now() - t0) / 1000;
  if (failed > 0) throw new Error(`${failed} calls got an unexpected answer`);
  return CALLS / secs;
}

/** The SDK, through the namespaced method (`hyperspace.state.getSession`) as an agent calls
 * it; a missing session is the expected −32001. */
async function sdkRound(client) {
  const expectError = METHOD === 'state.getSession';
  const method = METHOD.split('.').reduce((o, k) => o?.[k], client);
  if (typeof method !== 'function') throw new Error(`the SDK has no method ${METHOD}`);
  return drive(() =>
    method(PARAMS).then(
      () => !expectError,
      (e) => expectError && e.code === -32001,
    ),
  );
}

/** A bare client: the same frames, ids matched in a Map, answers parsed with JSON.parse. */
function bareClient(url) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    const pending = new Map();
    let seq = 0;
    ws.on('message', (data) => {
      const msg = JSON.parse(data.toString());
      const done = pending.get(msg.id);
      pending.delete(msg.id);
      done?.(msg);
    });
    ws.once('open', () =>
      resolve({
        call(method, params) {
          const id = ++seq;
          return new Promise((res) => {
            pending.set(id, res);
            ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
          });
        },
        close: () => ws.close(),
      }),
    );
    ws.once('error', reject);
  });
}

async function bareRound(client) {
  const expectError = METHOD === 'state.getSession';
  return drive(() =>
    client.call(METHOD, PARAMS).then((m) => (expectError ? m.error?.code === -32001 : m.result !== undefined)),
  );
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

const node = process.env.AGORA_RPC
  ? undefined
  : await startNode({ extra: ['--rpc-conn-rate', '10000000', '--rpc-key-rate', '10000000'] });
const url = process.env.AGORA_RPC ?? node.rpc;
try {
  const sdk = await connect(url);
  const bare = await bareClient(url);
  // warm-up: JIT and the node's caches
  CALLS > 500 && (await sdkRound(sdk), await bareRound(bare));
  const results = { sdk: [], bare: [] };
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 === 0 ? ['sdk', 'bare'] : ['bare', 'sdk'];
    for (const which of order) {
      const rate = which === 'sdk' ? await sdkRound(sdk) : await bareRound(bare);
      results[which].push(rate);
      console.log(`round ${r + 1} ${which.padEnd(4)} ${rate.toFixed(0)} calls/s`);
    }
  }
  await sdk.close();
  bare.close();
  const s = median(results.sdk);
  const b = median(results.bare);
  const overhead = ((b - s) / b) * 100;
  console.log(
    `${METHOD}, ${CALLS} calls per round, ${WINDOW} in flight, ${ROUNDS} rounds each: ` +
      `SDK ${s.toFixed(0)} calls/s, bare WebSocket ${b.toFixed(0)} calls/s (medians), SDK overhead ${overhead.toFixed(1)} %`,
  );
  console.log(
    JSON.stringify({
      method: METHOD,
      calls: CALLS,
      window: WINDOW,
      rounds: ROUNDS,
      sdkCallsPerSec: Math.round(s),
      bareCallsPerSec: Math.round(b),
      overheadPercent: Number(overhead.toFixed(1)),
    }),
  );
} finally {
  await node?.stop();
}
