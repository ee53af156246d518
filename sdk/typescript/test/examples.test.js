// Runs every example (compiled to dist-examples/ by `npm run build`) as a child process against
// two real nodes, as a user would; each asserts what the spec's response shows.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { eventually, startPair } from './support.js';

const EXAMPLES = fileURLToPath(new URL('../dist-examples/', import.meta.url));
const TOPIC = 'hyperspace/trajectories/web-research';

function runExample(name, args) {
  return new Promise((resolve) => {
    execFile(process.execPath, [`${EXAMPLES}${name}.js`, ...args], { timeout: 40_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (error.code ?? 1) : 0, stdout, stderr });
    });
  });
}

describe('examples', { timeout: 60_000 }, () => {
  let a;
  let b;
  before(async () => {
    [a, b] = await startPair(['--improving-share', '--improving-task-type', 'web-research']);
    // Example 2 needs a gossip mesh on the trajectory topic before A records.
    await eventually(async () => {
      const s = await (await fetch(`${a.http}/status`)).json();
      return (s.gossip?.mesh?.[TOPIC] ?? 0) >= 1;
    }, 20_000, 'A has a mesh peer on the trajectory topic');
  });
  after(async () => {
    await a?.stop();
    await b?.stop();
  });

  const cases = [
    ['example1', () => [a.rpc, b.rpc], /1\. state\.createSession[\s\S]*3\. tool\.invoke[\s\S]*"ended": true/],
    ['example2', () => [a.rpc, b.rpc], /improving\.getExemplars[\s\S]*"peerId"/],
    ['example3', () => [a.rpc], /"allowed": false[\s\S]*"code": -32002/],
    ['channel', () => [a.rpc, b.rpc], /channel\.close\n\{[^}]*"refund": 4\.994,[^}]*"totalSpent": 0\.006,/],
  ];
  for (const [name, args, shows] of cases) {
    it(name, async () => {
      const r = await runExample(name, args());
      assert.equal(r.code, 0, `${name} failed:\n${r.stderr}\n${r.stdout.slice(-2000)}`);
      assert.match(r.stdout, shows);
    });
  }
});
