// Checks envelope.mjs against the envelope v2 vectors in tests/vectors/hyperspace/ (an independent
// signer's and the golden/tamper cases): signing reproduces every envelope byte for byte, and
// checking gives every expected verdict. Prints one line per failure and a summary; exit 1 on any.
//
//   node tests/interop/vectors.mjs

import { readFileSync } from 'node:fs'
import { checkEnvelope, identity, ReplayWindow, signEnvelope } from './envelope.mjs'

const dir = new URL('../vectors/hyperspace/', import.meta.url)
const independent = readFileSync(new URL('envelope-v2.ndjson', dir), 'utf8').split('\n').filter(Boolean).map(JSON.parse)
const golden = JSON.parse(readFileSync(new URL('golden.json', dir), 'utf8'))

let passed = 0
let failed = 0
const check = (name, ok, detail) => {
  if (ok) { passed++; return }
  failed++
  console.log(`FAIL ${name}: ${detail}`)
}

function signed (name, seedHex, v) {
  const id = identity(Buffer.from(seedHex, 'hex'))
  const env = signEnvelope(id, v.topic, v.d_json, { ts: v.ts, nonce: v.nonce })
  check(`${name}: sign`, env.text === v.envelope, `got ${env.text}`)
  const r = checkEnvelope(v.topic, v.envelope, { now: v.now ?? v.ts, replay: new ReplayWindow() })
  check(`${name}: check`, r.ok && r.dJson === v.d_json, JSON.stringify(r))
}

for (const v of independent) signed(`independent ${v.topic}`, v.seed_hex, v)
for (const v of golden) {
  if (v.key !== undefined) {
    signed(v.name, v.key, v)
    continue
  }
  const replay = new ReplayWindow()
  const got = v.input.map((text) => {
    const r = checkEnvelope(v.topic, text, { now: v.now, replay })
    return r.ok ? 'ok' : r.reason
  })
  check(v.name, JSON.stringify(got) === JSON.stringify(v.expect), `expected ${v.expect}, got ${got}`)
}
console.log(`${passed} passed, ${failed} failed`)
process.exit(failed === 0 ? 0 : 1)
