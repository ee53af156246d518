// Hyperspace envelope v2, signing and checking, written from docs/hyperspace-wire.md alone (not
// from Agora's code), so that the interop test checks Agora against the documented wire.
// Only node:crypto is used.

import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, sign, verify } from 'node:crypto'

// |now − ts| beyond this is stale.
export const FRESH_MS = 300_000
// Topics `hyperspace/{kind}/{peerId}` on which only `{peerId}` may publish.
const OWNER_KINDS = ['capabilities', 'reputation']

const sha256 = (...parts) => {
  const h = createHash('sha256')
  for (const p of parts) h.update(p)
  return h.digest()
}

const B58 = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz'

function base58btc (bytes) {
  let n = BigInt('0x' + (Buffer.from(bytes).toString('hex') || '0'))
  let out = ''
  while (n > 0n) { out = B58[Number(n % 58n)] + out; n /= 58n }
  for (const b of bytes) { if (b !== 0) break; out = '1' + out }
  return out
}

// The PeerId of a raw 32-byte Ed25519 public key: base58btc of the identity multihash of the
// protobuf key, `00 24 08 01 12 20 ‖ pk`.
export function peerIdOf (pk) {
  return base58btc(Buffer.concat([Buffer.from([0x00, 0x24, 0x08, 0x01, 0x12, 0x20]), pk]))
}

// An Ed25519 identity from a 32-byte seed (random when omitted): {seed, pk, privateKey, peerId}.
export function identity (seed = randomBytes(32)) {
  // PKCS#8 for an Ed25519 seed: a fixed 16-byte prefix (RFC 8410) and the seed.
  const der = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), seed])
  const privateKey = createPrivateKey({ key: der, format: 'der', type: 'pkcs8' })
  const pk = Buffer.from(privateKey.export({ format: 'jwk' }).x, 'base64url')
  return { seed: Buffer.from(seed), pk, privateKey, peerId: peerIdOf(pk) }
}

// A fresh random identity's PeerId (cheaper than `identity()` with its seed handling).
export function randomPeerId () {
  const { publicKey } = generateKeyPairSync('ed25519')
  return peerIdOf(Buffer.from(publicKey.export({ format: 'jwk' }).x, 'base64url'))
}

function u64be (n) {
  const b = Buffer.alloc(8)
  b.writeBigUInt64BE(BigInt(n))
  return b
}

// SHA256(ts u64 BE ‖ UTF-8 nonce ‖ UTF-8 from ‖ SHA256(d_json)).
export function signingMaterial (ts, nonce, from, dJson) {
  return sha256(u64be(ts), Buffer.from(nonce, 'utf8'), Buffer.from(from, 'utf8'), sha256(Buffer.from(dJson, 'utf8')))
}

// What the signature covers: UTF-8(topic) ‖ 0x00 ‖ signing material.
function signedBytes (topic, material) {
  return Buffer.concat([Buffer.from(topic, 'utf8'), Buffer.from([0]), material])
}

// The compact envelope text carrying `dJson` (compact JSON, copied verbatim) on `topic`, signed
// by `id`; `ts` (Unix ms) and `nonce` (32 lowercase hex) are fresh unless given.
export function signEnvelope (id, topic, dJson, { ts = Date.now(), nonce = randomBytes(16).toString('hex') } = {}) {
  const sig = sign(null, signedBytes(topic, signingMaterial(ts, nonce, id.peerId, dJson)), id.privateKey)
  const text = `{"_v":2,"ts":${ts},"nonce":${JSON.stringify(nonce)},"from":${JSON.stringify(id.peerId)},` +
    `"pk":${JSON.stringify(id.pk.toString('hex'))},"sig":${JSON.stringify(sig.toString('hex'))},"d":${dJson}}`
  return { text, nonce, sig: sig.toString('hex') }
}

// The members of a JSON object text as [name, exact value text] in order, repeated names
// included; null when `text` is not a JSON object.
function members (text) {
  let value
  try { value = JSON.parse(text) } catch { return null }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return null
  const out = []
  let i = text.indexOf('{') + 1
  const ws = () => { while (' \t\r\n'.includes(text[i])) i++ }
  const skipString = () => { i++; while (text[i] !== '"') i += text[i] === '\\' ? 2 : 1; i++ }
  for (;;) {
    ws()
    if (text[i] === '}') return out
    const keyStart = i
    skipString()
    const name = JSON.parse(text.slice(keyStart, i))
    ws(); i++; ws() // the colon
    const start = i
    if (text[i] === '"') {
      skipString()
    } else if (text[i] === '{' || text[i] === '[') {
      let depth = 0
      do {
        const c = text[i]
        if (c === '"') { skipString(); continue }
        if (c === '{' || c === '[') depth++
        else if (c === '}' || c === ']') depth--
        i++
      } while (depth > 0)
    } else {
      while (!',} \t\r\n'.includes(text[i])) i++
    }
    out.push([name, text.slice(start, i)])
    ws()
    if (text[i] === ',') i++
  }
}

// `(from, nonce)` pairs seen, each kept until its envelope is stale.
export class ReplayWindow {
  seen = new Map()

  // false when the pair was seen before; remembers it otherwise.
  insert (from, nonce, ts, now) {
    for (const [k, t] of this.seen) if (now - t > FRESH_MS) this.seen.delete(k)
    const key = `${from} ${nonce}`
    if (this.seen.has(key)) return false
    this.seen.set(key, ts)
    return true
  }
}

// Checks an envelope received on `topic` at `now` (Unix ms). Returns {ok: true, from, nonce, ts,
// dJson} or {ok: false, reason, ...what was read}, with the documented reason strings, checked in
// the documented order: structure → _v → from/pk → owner → freshness → signature → replay.
export function checkEnvelope (topic, text, { now = Date.now(), replay = null } = {}) {
  const fields = members(text)
  const bad = (reason, extra = {}) => ({ ok: false, reason, ...extra })
  if (fields === null) return bad('malformed')
  if (new Set(fields.map(([n]) => n)).size !== fields.length) return bad('malformed')
  const raw = Object.fromEntries(fields)
  const str = (name, re) => {
    if (raw[name] === undefined || !raw[name].startsWith('"')) return null
    const s = JSON.parse(raw[name])
    return re.test(s) ? s : null
  }
  const ts = /^(0|[1-9][0-9]*)$/.test(raw.ts ?? '') && BigInt(raw.ts) < 2n ** 64n ? Number(raw.ts) : null
  const nonce = str('nonce', /^[0-9a-f]{32}$/)
  const from = str('from', /^.+$/s)
  const pkHex = str('pk', /^[0-9a-f]{64}$/)
  const sigHex = str('sig', /^[0-9a-f]{128}$/)
  const dJson = raw.d
  if (raw._v === undefined || ts === null || nonce === null || from === null || pkHex === null ||
      sigHex === null || dJson === undefined) {
    return bad('malformed')
  }
  if (raw._v !== '2') return bad('unsupported_version')
  const pk = Buffer.from(pkHex, 'hex')
  if (peerIdOf(pk) !== from) return bad('from_mismatch', { from })
  const [root, kind, scope, ...more] = topic.split('/')
  if (root === 'hyperspace' && OWNER_KINDS.includes(kind) && more.length === 0 && scope !== from) {
    return bad('not_owner', { from })
  }
  if (Math.abs(now - ts) > FRESH_MS) return bad('stale', { from, nonce, ts })
  const key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: pk.toString('base64url') }, format: 'jwk' })
  if (!verify(null, signedBytes(topic, signingMaterial(ts, nonce, from, dJson)), key, Buffer.from(sigHex, 'hex'))) {
    return bad('bad_signature', { from, nonce, ts })
  }
  if (replay !== null && !replay.insert(from, nonce, ts, now)) return bad('replayed', { from, nonce, ts })
  return { ok: true, from, nonce, ts, dJson }
}
