//! Signed envelopes v2: signing, verification, domain separation and the replay window.
//!
//! Spec §2.1 "Signed Envelopes (v2)" and §9.2; the wire details the spec leaves open are pinned
//! and recorded in `docs/hyperspace-wire.md`:
//! - JSON `{"_v":2,"ts":…,"nonce":"…","from":"…","pk":"…","sig":"…","d":…}`, in that order when
//!   we emit it; `ts` Unix milliseconds; `nonce` 32 lowercase hex; `pk` 64 lowercase hex (raw
//!   Ed25519 key); `sig` 128 lowercase hex; `from` the PeerId of `pk`;
//! - `d_json` = the exact bytes of `d` as received (never re-serialised); on send `d` is serialised
//!   once, compactly;
//! - signing material `SM = SHA256(ts u64 BE ‖ nonce ‖ from ‖ SHA256(d_json))`; the Ed25519
//!   signature is over `topic ‖ 0x00 ‖ SM` and is checked by the `verify_strict` rule
//!   ([`crate::strict_key`]);
//! - receivers reject `_v` ≠ 2, `|now − ts|` > 5 min, a `(from, nonce)` seen in the window, a bad
//!   signature (including one made for another topic), a `from`/`pk` mismatch, and on owner topics
//!   a `from` other than the owner.
//!
//! Checks run cheapest first: structure, version, `from`/`pk`, owner, freshness, signature, and
//! only then the replay window, so that nothing invalid can occupy a nonce.

use std::fmt;

use agora_window::{ExpiringSet, Refused, key_of};
use ed25519_dalek::{Signer, SigningKey};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use sha2::{Digest as _, Sha256};

use crate::peer_id::peer_id_of;
use crate::strict_key::StrictKey;
use crate::topic::Topic;

/// Envelope version this crate speaks.
pub const VERSION: u64 = 2;
/// Largest accepted distance between `ts` and the receiver clock, in milliseconds.
pub const MAX_SKEW_MS: u64 = 5 * 60 * 1000;

/// Why an envelope was refused. [`VerifyError::reason`] is the stable string the CLI prints.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// Not a v2 envelope of the pinned shape (bad JSON, missing or malformed field).
    #[error("malformed envelope: {0}")]
    Malformed(String),
    /// `_v` is not 2.
    #[error("unsupported envelope version {0}")]
    UnsupportedVersion(String),
    /// `from` is not the PeerId of `pk`.
    #[error("from {from} is not the PeerId of pk ({expected})")]
    FromMismatch {
        /// Claimed sender.
        from: String,
        /// PeerId of the key.
        expected: String,
    },
    /// Someone other than the owner published on an owner topic.
    #[error("only {owner} may publish on this topic, not {from}")]
    NotOwner {
        /// The topic's owner.
        owner: String,
        /// The sender.
        from: String,
    },
    /// `ts` is more than five minutes away from the receiver clock.
    #[error("ts {ts} is outside the freshness window at receiver time {now}")]
    Stale {
        /// Envelope time (ms).
        ts: u64,
        /// Receiver time (ms).
        now: u64,
    },
    /// The signature does not verify for this topic.
    #[error("signature does not verify for this topic")]
    BadSignature,
    /// This `(from, nonce)` was already accepted within the window.
    #[error("nonce {nonce} from {from} was already seen")]
    Replayed {
        /// Sender.
        from: String,
        /// Nonce.
        nonce: String,
    },
    /// The replay window is full; nothing new is accepted until entries expire.
    #[error("the replay window is full")]
    WindowFull,
}

impl VerifyError {
    /// Stable reason string (CLI output, logs).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "malformed",
            Self::UnsupportedVersion(_) => "unsupported_version",
            Self::FromMismatch { .. } => "from_mismatch",
            Self::NotOwner { .. } => "not_owner",
            Self::Stale { .. } => "stale",
            Self::BadSignature => "bad_signature",
            Self::Replayed { .. } => "replayed",
            Self::WindowFull => "window_full",
        }
    }

    /// `true` for envelopes that are well-formed and authentic but unwanted now (stale or seen
    /// before): gossip should ignore them rather than penalise the forwarding peer.
    pub fn is_benign(&self) -> bool {
        matches!(
            self,
            Self::Stale { .. } | Self::Replayed { .. } | Self::WindowFull
        )
    }
}

/// A parsed (not yet verified) v2 envelope, borrowing from the received bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope<'a> {
    /// Sender time, Unix milliseconds.
    pub ts: u64,
    /// 32 lowercase hex characters.
    pub nonce: &'a str,
    /// Sender PeerId.
    pub from: &'a str,
    /// Raw Ed25519 public key.
    pub pk: [u8; 32],
    /// Ed25519 signature.
    pub sig: [u8; 64],
    /// The exact bytes of `d` as received.
    pub d_json: &'a str,
}

/// The signing material: `SHA256(ts u64 BE ‖ nonce ‖ from ‖ SHA256(d_json))`.
pub fn signing_material(ts: u64, nonce: &str, from: &str, d_json: &str) -> [u8; 32] {
    let d_hash = Sha256::digest(d_json.as_bytes());
    let mut h = Sha256::new();
    h.update(ts.to_be_bytes());
    h.update(nonce.as_bytes());
    h.update(from.as_bytes());
    h.update(d_hash);
    h.finalize().into()
}

/// The parts of what the Ed25519 signature covers, in order: `topic ‖ 0x00 ‖ signing material`.
fn signed_parts<'a>(topic: &'a str, material: &'a [u8; 32]) -> [&'a [u8]; 3] {
    [topic.as_bytes(), &[0], material]
}

/// The bytes the Ed25519 signature covers: `topic ‖ 0x00 ‖ signing material`.
pub fn signed_bytes(topic: &str, material: &[u8; 32]) -> Vec<u8> {
    signed_parts(topic, material).concat()
}

/// Decodes exactly `N` bytes of **lowercase** hex, as the wire's nonces, keys and digests are
/// written: the `hex` crate decodes either case, so uppercase is refused here first. The one
/// strict decoder of the crate (memory digests use it too).
pub(crate) fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.bytes().any(|c| c.is_ascii_uppercase()) {
        return None;
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

/// `true` for 32 lowercase hex characters.
pub fn is_nonce(s: &str) -> bool {
    unhex::<16>(s).is_some()
}

/// Signs `d_json` (one compact JSON value) for `topic` and returns the envelope's JSON text.
///
/// `nonce` must be 32 lowercase hex characters (16 random bytes chosen by the caller).
pub fn sign(
    key: &SigningKey,
    topic: &str,
    ts: u64,
    nonce: &str,
    d_json: &str,
) -> Result<String, VerifyError> {
    if !is_nonce(nonce) {
        return Err(VerifyError::Malformed(
            "nonce must be 32 lowercase hex characters".into(),
        ));
    }
    let d: &RawValue = serde_json::from_str(d_json)
        .map_err(|e| VerifyError::Malformed(format!("d is not one JSON value: {e}")))?;
    let pk = key.verifying_key().to_bytes();
    let from = peer_id_of(&pk);
    let material = signing_material(ts, nonce, &from, d.get());
    let sig = key.sign(&signed_bytes(topic, &material));
    Ok(format!(
        "{{\"_v\":2,\"ts\":{ts},\"nonce\":\"{nonce}\",\"from\":\"{from}\",\"pk\":\"{}\",\"sig\":\"{}\",\"d\":{}}}",
        hex::encode(pk),
        hex::encode(sig.to_bytes()),
        d.get()
    ))
}

impl<'a> Envelope<'a> {
    /// Parses an envelope's JSON text (structure and field formats only).
    pub fn parse(text: &'a str) -> Result<Self, VerifyError> {
        let raw: RawEnvelope<'a> =
            serde_json::from_str(text).map_err(|e| VerifyError::Malformed(e.to_string()))?;
        let missing = |f: &str| VerifyError::Malformed(format!("field `{f}` is required"));
        let version = raw.version.ok_or_else(|| missing("_v"))?;
        if version.get() != "2" {
            return Err(VerifyError::UnsupportedVersion(version.get().to_owned()));
        }
        let ts = raw.ts.ok_or_else(|| missing("ts"))?;
        let nonce = raw.nonce.ok_or_else(|| missing("nonce"))?;
        if !is_nonce(nonce) {
            return Err(VerifyError::Malformed(
                "field `nonce` must be 32 lowercase hex characters".into(),
            ));
        }
        let from = raw.from.ok_or_else(|| missing("from"))?;
        let pk = unhex::<32>(raw.pk.ok_or_else(|| missing("pk"))?).ok_or_else(|| {
            VerifyError::Malformed("field `pk` must be 64 lowercase hex characters".into())
        })?;
        let sig = unhex::<64>(raw.sig.ok_or_else(|| missing("sig"))?).ok_or_else(|| {
            VerifyError::Malformed("field `sig` must be 128 lowercase hex characters".into())
        })?;
        let d = raw.d.ok_or_else(|| missing("d"))?;
        Ok(Self {
            ts,
            nonce,
            from,
            pk,
            sig,
            d_json: d.get(),
        })
    }

    /// Checks everything but the replay window: `from`/`pk`, owner, freshness at `now_ms`, and
    /// the signature for `topic`.
    pub fn check(&self, topic: &str, now_ms: u64) -> Result<(), VerifyError> {
        self.check_window(topic, now_ms, MAX_SKEW_MS)
    }

    /// As [`Self::check`], but an envelope may be up to `max_age_ms` old (still at most five
    /// minutes in the future): for stored copies such as DHT records, which outlive gossip's
    /// freshness window.
    pub fn check_window(
        &self,
        topic: &str,
        now_ms: u64,
        max_age_ms: u64,
    ) -> Result<(), VerifyError> {
        self.check_keyed(topic, now_ms, max_age_ms, &mut KeyCache::with_capacity(0))
    }

    /// As [`Self::check_window`], with the parsed key and its PeerId taken from (and added to)
    /// `keys`: a sender's point decompression and PeerId encoding are done once, not per message.
    pub fn check_keyed(
        &self,
        topic: &str,
        now_ms: u64,
        max_age_ms: u64,
        keys: &mut KeyCache,
    ) -> Result<(), VerifyError> {
        let (key, expected) = keys.get(&self.pk)?;
        if expected.as_str() != self.from {
            return Err(VerifyError::FromMismatch {
                from: self.from.to_owned(),
                expected: expected.clone(),
            });
        }
        if let Ok(t) = Topic::parse(topic)
            && let Some(owner) = t.owner()
            && owner != self.from
        {
            return Err(VerifyError::NotOwner {
                owner: owner.to_owned(),
                from: self.from.to_owned(),
            });
        }
        let too_old = now_ms.saturating_sub(self.ts) > max_age_ms;
        if too_old || self.ts.saturating_sub(now_ms) > MAX_SKEW_MS {
            return Err(VerifyError::Stale {
                ts: self.ts,
                now: now_ms,
            });
        }
        let material = signing_material(self.ts, self.nonce, self.from, self.d_json);
        if key.verify(&signed_parts(topic, &material), &self.sig) {
            Ok(())
        } else {
            Err(VerifyError::BadSignature)
        }
    }
}

/// Decoded sender keys with their PeerIds, at most `capacity` (emptied when full: senders are few
/// and decoding again is only a cost, never a change in the verdict).
#[derive(Debug, Default)]
pub struct KeyCache {
    keys: std::collections::HashMap<[u8; 32], (StrictKey, String)>,
    capacity: usize,
}

/// Default [`KeyCache`] capacity.
pub const DEFAULT_KEY_CACHE: usize = 4096;

impl KeyCache {
    /// A cache of at most `capacity` keys (0 and 1 alike: only the last sender is kept).
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            keys: std::collections::HashMap::new(),
            capacity: capacity.max(1),
        }
    }

    /// The decoded key and PeerId of `pk`.
    fn get(&mut self, pk: &[u8; 32]) -> Result<&(StrictKey, String), VerifyError> {
        use std::collections::hash_map::Entry;
        if self.keys.len() >= self.capacity && !self.keys.contains_key(pk) {
            self.keys.clear();
        }
        match self.keys.entry(*pk) {
            Entry::Occupied(e) => Ok(e.into_mut()),
            Entry::Vacant(e) => {
                let key = StrictKey::from_bytes(pk).ok_or(VerifyError::BadSignature)?;
                Ok(e.insert((key, peer_id_of(pk))))
            }
        }
    }
}

/// As [`verify`], with sender keys cached in `keys`.
pub fn verify_keyed<'a>(
    text: &'a str,
    topic: &str,
    now_ms: u64,
    window: &mut ReplayWindow,
    keys: &mut KeyCache,
) -> Result<Envelope<'a>, VerifyError> {
    let env = Envelope::parse(text)?;
    env.check_keyed(topic, now_ms, MAX_SKEW_MS, keys)?;
    window.insert(env.from, env.nonce, env.ts, now_ms)?;
    Ok(env)
}

/// Parses and fully verifies `text` received on `topic` at `now_ms`, recording its nonce in
/// `window`. Returns the envelope on success.
pub fn verify<'a>(
    text: &'a str,
    topic: &str,
    now_ms: u64,
    window: &mut ReplayWindow,
) -> Result<Envelope<'a>, VerifyError> {
    let env = Envelope::parse(text)?;
    env.check(topic, now_ms)?;
    window.insert(env.from, env.nonce, env.ts, now_ms)?;
    Ok(env)
}

/// `(from, nonce)` pairs accepted within the freshness window.
///
/// An entry is kept until `max(ts, now) + 5 min` (after that the envelope is stale anyway). Keys
/// are the first 16 bytes of SHA-256 over `from ‖ 0x00 ‖ nonce` (the shared `agora_window` set),
/// so an entry costs the same whatever the sender put in its fields; at most `capacity` entries
/// are held (`WindowFull` beyond).
#[derive(Debug)]
pub struct ReplayWindow {
    set: ExpiringSet,
}

/// Default replay window capacity.
pub const DEFAULT_WINDOW_CAPACITY: usize = 1 << 20;

impl Default for ReplayWindow {
    fn default() -> Self {
        Self::with_capacity(DEFAULT_WINDOW_CAPACITY)
    }
}

impl ReplayWindow {
    /// A window holding at most `capacity` entries.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            set: ExpiringSet::with_capacity(capacity),
        }
    }

    /// Number of remembered pairs.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// `true` when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Records `(from, nonce)` for an envelope with time `ts`; `Replayed` if already present.
    pub fn insert(
        &mut self,
        from: &str,
        nonce: &str,
        ts: u64,
        now_ms: u64,
    ) -> Result<(), VerifyError> {
        // Keep until the envelope itself can no longer pass the freshness check.
        let deadline = ts.max(now_ms).saturating_add(MAX_SKEW_MS);
        let key = key_of(&[from.as_bytes(), nonce.as_bytes()]);
        match self.set.insert(key, deadline, now_ms) {
            Ok(()) => Ok(()),
            Err(Refused::Duplicate) => Err(VerifyError::Replayed {
                from: from.to_owned(),
                nonce: nonce.to_owned(),
            }),
            Err(Refused::Full) => Err(VerifyError::WindowFull),
        }
    }
}

/// The envelope before format checks, with duplicate keys refused.
#[derive(Default)]
struct RawEnvelope<'a> {
    version: Option<&'a RawValue>,
    ts: Option<u64>,
    nonce: Option<&'a str>,
    from: Option<&'a str>,
    pk: Option<&'a str>,
    sig: Option<&'a str>,
    d: Option<&'a RawValue>,
}

impl<'de> serde::Deserialize<'de> for RawEnvelope<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawEnvelope<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a v2 envelope (a JSON object)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = RawEnvelope::default();
                let mut seen: Vec<std::borrow::Cow<'de, str>> = Vec::new();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if seen.contains(&key) {
                        return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
                    }
                    seen.push(key.clone());
                    let field = |e: A::Error| de::Error::custom(format_args!("field `{key}`: {e}"));
                    match &*key {
                        "_v" => out.version = Some(map.next_value().map_err(field)?),
                        "ts" => out.ts = Some(map.next_value().map_err(field)?),
                        "nonce" => out.nonce = Some(map.next_value().map_err(field)?),
                        "from" => out.from = Some(map.next_value().map_err(field)?),
                        "pk" => out.pk = Some(map.next_value().map_err(field)?),
                        "sig" => out.sig = Some(map.next_value().map_err(field)?),
                        "d" => out.d = Some(map.next_value().map_err(field)?),
                        _ => {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                    }
                    if seen.len() > 64 {
                        return Err(de::Error::custom("too many fields"));
                    }
                }
                Ok(out)
            }
        }
        deserializer.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SigningKey {
        SigningKey::from_bytes(&[0x42; 32])
    }

    const TOPIC: &str = "hyperspace/tasks/web-research";
    const NONCE: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
    const TS: u64 = 1_776_366_000_123;

    #[test]
    fn sign_then_verify_and_replay() {
        let text = sign(&key(), TOPIC, TS, NONCE, r#"{"q":"rust"}"#).unwrap();
        let mut w = ReplayWindow::default();
        let env = verify(&text, TOPIC, TS + 1000, &mut w).unwrap();
        assert_eq!(env.d_json, r#"{"q":"rust"}"#);
        assert!(env.from.starts_with("12D3KooW"));
        assert_eq!(
            verify(&text, TOPIC, TS + 2000, &mut w)
                .unwrap_err()
                .reason(),
            "replayed"
        );
    }

    #[test]
    fn cached_keys_give_the_same_verdicts() {
        let mut keys = KeyCache::with_capacity(1);
        let text = sign(&key(), TOPIC, TS, NONCE, r#"{"q":"rust"}"#).unwrap();
        let other = SigningKey::from_bytes(&[7; 32]);
        let foreign = sign(&other, TOPIC, TS, NONCE, "1").unwrap();
        // A known key with another sender's PeerId, and a bad signature, after the key is cached.
        let env = Envelope::parse(&text).unwrap();
        let spoofed = text.replace(env.from, &peer_id_of(&other.verifying_key().to_bytes()));
        for _ in 0..2 {
            let mut w = ReplayWindow::default();
            verify_keyed(&text, TOPIC, TS, &mut w, &mut keys).unwrap();
            let mut w = ReplayWindow::default();
            let e = verify_keyed(&spoofed, TOPIC, TS, &mut w, &mut keys).unwrap_err();
            assert_eq!(e.reason(), "from_mismatch");
            let e = verify_keyed(&text, "hyperspace/tasks/x", TS, &mut w, &mut keys).unwrap_err();
            assert_eq!(e.reason(), "bad_signature");
            // A second sender evicts the first (capacity 1) without changing any verdict.
            verify_keyed(&foreign, TOPIC, TS, &mut ReplayWindow::default(), &mut keys).unwrap();
        }
        assert!(keys.keys.len() <= 1);
    }

    #[test]
    fn tampering_is_detected() {
        let text = sign(&key(), TOPIC, TS, NONCE, r#"{"q":"rust"}"#).unwrap();
        let now = TS;
        let check = |t: &str, topic: &str| {
            verify(t, topic, now, &mut ReplayWindow::default())
                .map(|_| ())
                .map_err(|e| e.reason())
        };
        assert_eq!(check(&text, "hyperspace/tasks/other"), Err("bad_signature"));
        assert_eq!(
            check(&text.replace("rust", "rusT"), TOPIC),
            Err("bad_signature")
        );
        assert_eq!(
            check(&text.replace(r#""q":"rust""#, r#""q": "rust""#), TOPIC),
            Err("bad_signature"),
            "d is checked as sent, never re-serialised"
        );
        assert_eq!(
            check(&text.replace("\"_v\":2", "\"_v\":3"), TOPIC),
            Err("unsupported_version")
        );
        let other = sign(&SigningKey::from_bytes(&[7; 32]), TOPIC, TS, NONCE, "1").unwrap();
        let other_pk = Envelope::parse(&other).unwrap().pk;
        let swapped = text.replace(
            &hex::encode(Envelope::parse(&text).unwrap().pk),
            &hex::encode(other_pk),
        );
        assert_eq!(check(&swapped, TOPIC), Err("from_mismatch"));
        assert_eq!(check(&text.replace(NONCE, "XYZ"), TOPIC), Err("malformed"));
        assert_eq!(
            check(&text.replace("\"ts\"", "\"ts\":1,\"ts\""), TOPIC),
            Err("malformed")
        );
        assert!(verify(&text, TOPIC, TS + MAX_SKEW_MS, &mut ReplayWindow::default()).is_ok());
        assert_eq!(
            verify(
                &text,
                TOPIC,
                TS + MAX_SKEW_MS + 1,
                &mut ReplayWindow::default()
            )
            .unwrap_err()
            .reason(),
            "stale"
        );
    }

    #[test]
    fn owner_topics_accept_only_their_owner() {
        let me = peer_id_of(&key().verifying_key().to_bytes());
        let mine = format!("hyperspace/capabilities/{me}");
        let text = sign(&key(), &mine, TS, NONCE, "{}").unwrap();
        assert!(verify(&text, &mine, TS, &mut ReplayWindow::default()).is_ok());
        let theirs = format!("hyperspace/reputation/{}", peer_id_of(&[7; 32]));
        let text = sign(&key(), &theirs, TS, NONCE, "{}").unwrap();
        assert_eq!(
            verify(&text, &theirs, TS, &mut ReplayWindow::default())
                .unwrap_err()
                .reason(),
            "not_owner"
        );
    }

    #[test]
    fn window_is_bounded_and_forgets_stale_pairs() {
        let mut w = ReplayWindow::with_capacity(2);
        w.insert("a", NONCE, TS, TS).unwrap();
        w.insert("b", NONCE, TS, TS).unwrap();
        assert_eq!(
            w.insert("c", NONCE, TS, TS).unwrap_err().reason(),
            "window_full"
        );
        // Once those envelopes are stale their entries go.
        w.insert("c", NONCE, TS + 2 * MAX_SKEW_MS, TS + 2 * MAX_SKEW_MS)
            .unwrap();
        assert_eq!(w.len(), 1);
    }
}
