// The AGH agent client against a real node's AGH face: greet, whois, say, direct, receipt,
// capability, refusals, proofs, and incoming envelopes as an async iterator.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Identity, capabilityDigest, connectAgent, signEnvelope, verifyEnvelope } from 'agora-mesh/agh';
import { InvalidParams, TimeoutError } from 'agora-mesh';
import { eventually, startNode } from './support.js';

const CHANNEL = 'sdk-builders';

async function present(node, channel) {
  const r = await fetch(`${node.http}/agh/v0/peers?channel=${channel}`);
  return (await r.json()).peers.map((p) => p.peer_id);
}

describe('AGH agent client', { timeout: 60_000 }, () => {
  let node;
  let alice;
  let bob;
  before(async () => {
    node = await startNode();
    alice = await connectAgent(node.agh, { channel: CHANNEL, peerId: 'alice.sdk', displayName: 'Alice' });
    bob = await connectAgent(node.agh, { channel: CHANNEL });
    await alice.greet({ capabilities: ['code.review'], summary: 'Alice reviews code' });
    await bob.greet({ capabilities: ['web.search'] });
    await eventually(async () => {
      const peers = await present(node, CHANNEL);
      return peers.includes('alice.sdk') && peers.includes(bob.peerId);
    }, 10_000, 'both agents are present');
  });
  after(async () => {
    await alice?.close();
    await bob?.close();
    await node?.stop();
  });

  it('derives a Peer ID from an Ed25519 identity', () => {
    assert.match(bob.peerId, /^ed25519-[0-9a-f]{32}$/);
    assert.equal(bob.identity.publicKey.length, 32);
  });

  it('whois: the node answers with the matching peer card', async () => {
    const req = await alice.whois({ query: 'web.search' });
    const res = await alice.next((e) => e.kind === 'whois' && e.reply_to === req.id, 10_000);
    assert.equal(res.body.type, 'response');
    assert.equal(res.from, bob.peerId);
    assert.equal(res.to, 'alice.sdk');
    assert.deepEqual(res.body.peer_card.capabilities, ['web.search']);
  });

  it('say reaches the other agent, signed, through the async iterator', async () => {
    const sent = await alice.say('hello builders', { intent: 'inform' });
    let got;
    for await (const env of bob) {
      if (env.id === sent.id) {
        got = env;
        break;
      }
    }
    assert.equal(got.kind, 'say');
    assert.equal(got.body.text, 'hello builders');
    assert.equal(got.from, 'alice.sdk');
    assert.equal(await verifyEnvelope(got, alice.identity.publicKey), true);
    assert.equal(await verifyEnvelope(got, bob.identity.publicKey), false, 'not bob\'s key');
    assert.equal(await verifyEnvelope({ ...got, body: { text: 'tampered' } }), false);
  });

  it('direct, then a receipt and a trace back', async () => {
    const direct = await alice.direct(bob.peerId, 'review PR 42', { intent: 'request' });
    const got = await bob.next((e) => e.id === direct.id, 10_000);
    assert.equal(got.kind, 'direct');
    assert.equal(got.interaction_id, direct.interaction_id);
    const receipt = await bob.receipt(got.id, 'accepted', { to: 'alice.sdk', interactionId: got.interaction_id });
    const r = await alice.next((e) => e.id === receipt.id, 10_000);
    assert.deepEqual([r.kind, r.body.for_id, r.body.status], ['receipt', direct.id, 'accepted']);
    const trace = await bob.trace(got.interaction_id, 'completed', { to: 'alice.sdk', result: { ok: true } });
    const t = await alice.next((e) => e.id === trace.id, 10_000);
    assert.deepEqual(t.body, { state: 'completed', result: { ok: true } });
  });

  it('capability: the digest is computed and accepted', async () => {
    const doc = { id: 'code.review', summary: 'Reviews a change', outcome: 'A list of findings', requirements: ['git', 'diff'] };
    const digest = await capabilityDigest(doc);
    assert.match(digest, /^sha256:[0-9a-f]{64}$/);
    const sent = await alice.capability(doc);
    const got = await bob.next((e) => e.id === sent.id, 10_000);
    assert.equal(got.body.capability.digest, digest);
  });

  it('the capability digest matches the reference vectors', async () => {
    const doc = {
      id: 'review-fix',
      summary: 'Review Fix Flow',
      outcome: 'A reusable review fix workflow.',
      version: '1.0.0',
      execution_outline: ['Inspect the issue', 'Draft the fix'],
      requirements: ['workspace-write'],
    };
    assert.equal(await capabilityDigest(doc), 'sha256:edb42ce4ca23d905aeeba399001ca6d23420610775ba41ef66e90f47f14dba0d');
    assert.equal(
      await capabilityDigest({ ...doc, summary: ' Review fix flow ' }),
      'sha256:d5a08dce361db72dbe93843e5b75de97cb815c8ee080ffb6b1cfa15ee00bf5d8',
    );
  });

  it('signs as the Ed25519 + JCS trust profile does (its worked example)', async () => {
    const id = await Identity.fromSeed(Uint8Array.from({ length: 32 }, (_, i) => i));
    assert.equal(Buffer.from(id.publicKey).toString('base64url'), 'A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg');
    assert.equal(id.fingerprint, '56475aa75463474c0285df5dbf2bcab7');
    const env = {
      protocol: 'agh-network/v1', id: 'msg_ed25519_jcs_01', kind: 'say', channel: 'builders',
      from: `patch-worker@${id.fingerprint}`, to: null, interaction_id: null, reply_to: null,
      trace_id: 'trace_ed25519_jcs_01', causation_id: null, ts: 1775606300, expires_at: null,
      body: { text: 'Baseline proof example only.', artifacts: [] }, proof: null, ext: {},
    };
    await signEnvelope(env, id);
    assert.equal(env.proof.sig, 'aXPSCsPgH2uWlF182hIcA2D_EZ1UcSXmelwQiPrNrIwDn5LPB6kkH51teP0VUfFCVdjyvtAjZ2bmhT94tSynBA');
    assert.equal(await verifyEnvelope(env, id.publicKey), true);
  });

  it('a refused envelope comes back as a refusal', async () => {
    const stranger = await connectAgent(node.agh, { channel: CHANNEL, peerId: 'stranger.sdk', sign: false });
    try {
      const sent = await stranger.say('hi, I never greeted');
      const it = stranger.refusals();
      const { value } = await it.next();
      assert.equal(value.id, sent.id);
      assert.equal(value.reason, 'verification_failed');
    } finally {
      await stranger.close();
    }
  });

  it('refuses bad input and times out waiting', async () => {
    await assert.rejects(alice.direct('Not A Peer', 'x'), InvalidParams);
    await assert.rejects(alice.say('   '), InvalidParams);
    await assert.rejects(connectAgent('http://x', { channel: CHANNEL }), InvalidParams);
    await assert.rejects(alice.next((e) => e.id === 'never', 50), TimeoutError);
    const id = await Identity.generate();
    assert.notEqual(id.peerId, bob.peerId);
  });
});
