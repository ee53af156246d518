// A js-libp2p gossipsub peer (TCP + Noise + Yamux, StrictSign) that Agora's interop test drives.
//
// Commands are JSON lines on stdin, events JSON lines on stdout; a command's `id`, when given, is
// echoed in the event that answers it (`error` included). See docs/interop.md for the list.
// Its libp2p identity is an Ed25519 key held here, so that it signs Hyperspace envelopes
// (envelope.mjs, written from docs/hyperspace-wire.md) with the key of its own PeerId.

import { randomBytes } from 'node:crypto'
import { createInterface } from 'node:readline'
import { checkEnvelope, identity, randomPeerId, ReplayWindow, signEnvelope } from './envelope.mjs'

// Node 20 has no Promise.withResolvers, which js-libp2p 3 calls. Installed before any libp2p
// module loads (hence the dynamic imports below).
if (typeof Promise.withResolvers !== 'function') {
  Promise.withResolvers = () => {
    const out = {}
    out.promise = new Promise((resolve, reject) => Object.assign(out, { resolve, reject }))
    return out
  }
}

const { createLibp2p } = await import('libp2p')
const { tcp } = await import('@libp2p/tcp')
const { noise } = await import('@chainsafe/libp2p-noise')
const { yamux } = await import('@chainsafe/libp2p-yamux')
const { identify } = await import('@libp2p/identify')
const { ping } = await import('@libp2p/ping')
const { gossipsub } = await import('@libp2p/gossipsub')
const { generateKeyPairFromSeed } = await import('@libp2p/crypto/keys')
const { multiaddr } = await import('@multiformats/multiaddr')

const emit = (event) => process.stdout.write(JSON.stringify(event) + '\n')
// Message bodies up to this size are shown in `message` and `verified` events.
const SHOW_BYTES = 64 * 1024

// ---------------------------------------------------------------------------------------------
// The node
// ---------------------------------------------------------------------------------------------

// `--no-ping`: run no ping service (js-libp2p's connection monitor still pings the peers);
// `--monitor-ms N`: the connection monitor's ping interval (js-libp2p's default is 10 s).
const argv = process.argv.slice(2)
const noPing = argv.includes('--no-ping')
const monitorAt = argv.indexOf('--monitor-ms')
const monitorMs = monitorAt >= 0 ? Number(argv[monitorAt + 1]) : undefined

const me = identity()
const replay = new ReplayWindow()
const node = await createLibp2p({
  privateKey: await generateKeyPairFromSeed('Ed25519', me.seed),
  addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
  transports: [tcp()],
  connectionEncrypters: [noise()],
  streamMuxers: [yamux()],
  ...(monitorMs ? { connectionMonitor: { pingInterval: monitorMs } } : {}),
  services: {
    identify: identify(),
    // The ping service, as js nodes usually run it (`--no-ping` leaves it out: the connection
    // monitor still pings every connection and closes those whose ping fails).
    ...(noPing ? {} : { ping: ping() }),
    pubsub: gossipsub({ globalSignaturePolicy: 'StrictSign', emitSelf: false })
  }
})
const pubsub = node.services.pubsub
if (node.peerId.toString() !== me.peerId) {
  emit({ event: 'error', message: `libp2p PeerId ${node.peerId} differs from the documented PeerId ${me.peerId}` })
  process.exit(1)
}
const ownCardTopic = `hyperspace/capabilities/${me.peerId}`

pubsub.addEventListener('subscription-change', (e) => {
  emit({
    event: 'subscription-change',
    peer: e.detail.peerId.toString(),
    subscriptions: e.detail.subscriptions.map((s) => ({ topic: s.topic, subscribe: s.subscribe }))
  })
})

pubsub.addEventListener('gossipsub:message', (e) => {
  const { msg, msgId } = e.detail
  const data = Buffer.from(msg.data)
  const small = data.length <= SHOW_BYTES
  emit({
    event: 'message',
    topic: msg.topic,
    via: e.detail.propagationSource.toString(),
    from: msg.type === 'signed' ? msg.from.toString() : null,
    seqno: msg.type === 'signed' ? msg.sequenceNumber.toString() : null,
    msgId,
    size: data.length,
    ...(small ? { data: data.toString('utf8') } : {})
  })
  if (data[0] === 0x7b) { // '{': an envelope, perhaps
    const r = checkEnvelope(msg.topic, data.toString('utf8'), { replay })
    const { dJson, ...rest } = r
    emit({
      event: 'verified',
      topic: msg.topic,
      msgId,
      size: data.length,
      ...rest,
      ...(r.ok && small ? { d: JSON.parse(dJson) } : {})
    })
  }
})

// Publishes `bytes` on `topic`; answers `published`.
async function publish (cmd, bytes, extra = {}) {
  const r = await pubsub.publish(cmd.topic, bytes)
  emit({ event: 'published', id: cmd.id, topic: cmd.topic, size: bytes.length, recipients: r.recipients.map(String), ...extra })
}

// An envelope whose `d` is `d` or, with `size`, `{"text":…,"pad":"xxx…"}` padded so that the
// whole envelope is exactly `size` bytes.
function envelopeFor (topic, d, size) {
  if (size == null) return signEnvelope(me, topic, JSON.stringify(d ?? { text: 'hello' }))
  const base = { text: d?.text ?? 'padded', pad: '' }
  const emptyLen = signEnvelope(me, topic, JSON.stringify(base)).text.length
  if (size < emptyLen) throw new Error(`an envelope needs at least ${emptyLen} bytes`)
  return signEnvelope(me, topic, JSON.stringify({ ...base, pad: 'x'.repeat(size - emptyLen) }))
}

const watches = new Map() // peer → {timer, min, samples, last}
const topicsOf = (cmd) => cmd.topics ?? [cmd.topic]

const commands = {
  async dial (cmd) {
    const conn = await node.dial(multiaddr(cmd.addr))
    emit({ event: 'dialed', id: cmd.id, addr: cmd.addr, peer: conn.remotePeer.toString() })
  },
  async subscribe (cmd) {
    for (const t of topicsOf(cmd)) pubsub.subscribe(t)
    emit({ event: 'subscribed', id: cmd.id, count: topicsOf(cmd).length })
  },
  async unsubscribe (cmd) {
    for (const t of topicsOf(cmd)) pubsub.unsubscribe(t)
    emit({ event: 'unsubscribed', id: cmd.id, count: topicsOf(cmd).length })
  },
  async subscribers (cmd) {
    emit({ event: 'subscribers', id: cmd.id, topic: cmd.topic, peers: pubsub.getSubscribers(cmd.topic).map(String) })
  },
  async mesh (cmd) {
    emit({ event: 'mesh', id: cmd.id, topic: cmd.topic, peers: pubsub.getMeshPeers(cmd.topic).map(String) })
  },
  async connections (cmd) {
    emit({ event: 'connections', id: cmd.id, peers: [...new Set(node.getConnections().map((c) => c.remotePeer.toString()))] })
  },
  async publish (cmd) {
    const bytes = cmd.data != null ? Buffer.from(cmd.data, 'utf8') : randomBytes(cmd.size ?? 32)
    await publish(cmd, bytes)
  },
  async 'publish-envelope' (cmd) {
    const env = envelopeFor(cmd.topic, cmd.d, cmd.size)
    await publish(cmd, Buffer.from(env.text, 'utf8'), { nonce: env.nonce })
  },
  async card (cmd) {
    const now = Date.now()
    const card = {
      peerId: me.peerId,
      tools: (cmd.tools ?? []).map((t) => ({ peerId: me.peerId, reputation: 0.5, avgLatency: 0, schema: {}, ...t })),
      taskTypes: cmd.taskTypes ?? [],
      reputation: cmd.reputation ?? 0.5,
      geo: cmd.geo ?? null,
      latency: cmd.latency ?? 0,
      version: cmd.version ?? now,
      updatedAt: now
    }
    const env = signEnvelope(me, ownCardTopic, JSON.stringify({ card }))
    await publish({ ...cmd, topic: ownCardTopic }, Buffer.from(env.text, 'utf8'), { nonce: env.nonce })
  },
  async score (cmd) {
    emit({ event: 'score', id: cmd.id, peer: cmd.peer, score: pubsub.getScore(cmd.peer) })
  },
  async 'watch-score' (cmd) {
    clearInterval(watches.get(cmd.peer)?.timer)
    const w = { min: Infinity, samples: 0, last: null }
    const sample = () => { w.last = pubsub.getScore(cmd.peer); w.min = Math.min(w.min, w.last); w.samples++ }
    sample()
    w.timer = setInterval(sample, 200)
    watches.set(cmd.peer, w)
    emit({ event: 'watching', id: cmd.id, peer: cmd.peer })
  },
  async 'score-min' (cmd) {
    const w = watches.get(cmd.peer)
    if (w === undefined) throw new Error(`no watch-score for ${cmd.peer}`)
    emit({ event: 'score-min', id: cmd.id, peer: cmd.peer, min: w.min, samples: w.samples, last: w.last })
  },
  async 'peer-ids' (cmd) {
    emit({ event: 'peer-ids', id: cmd.id, ids: Array.from({ length: cmd.count }, randomPeerId) })
  },
  async quit () {
    for (const w of watches.values()) clearInterval(w.timer)
    await node.stop()
    process.exit(0)
  }
}

emit({ event: 'listening', peerId: me.peerId, pk: me.pk.toString('hex'), addrs: node.getMultiaddrs().map(String) })

// Commands run one after another, in the order given.
let queue = Promise.resolve()
createInterface({ input: process.stdin }).on('line', (line) => {
  if (line.trim() === '') return
  queue = queue.then(async () => {
    let cmd
    try {
      cmd = JSON.parse(line)
      const run = commands[cmd.cmd]
      if (run === undefined) throw new Error(`unknown command ${JSON.stringify(cmd.cmd)}`)
      await run(cmd)
    } catch (err) {
      emit({ event: 'error', id: cmd?.id, cmd: cmd?.cmd, message: String(err?.message ?? err) })
    }
  })
}).on('close', () => { queue.then(() => commands.quit()) })
