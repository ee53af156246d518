//! Capability announcements on the wire, sans IO: what a node publishes about its tools, where,
//! and how a receiver checks it.
//!
//! Spec references (the Hyperspace Gossiping Agents Protocol):
//!
//! - §2.1: the topic `hyperspace/capabilities/{peerId}` ("tool and agent capability
//!   announcements") and `hyperspace/tasks/{taskType}` ("task requests and routing").
//! - §2.4: "Agents publish capability cards to DHT" (Kademlia).
//! - §4.3: `tool.discover` "searches the DHT"; tools "are discovered dynamically from the gossip
//!   mesh"; `tool.invoke` returns `{result, duration, peerId}`.
//! - §7.4: heartbeat every 30 s, delta-only, 5-minute TTL ([`crate::card`]).
//!
//! The spec names the places but not the bytes; everything below is pinned in
//! `docs/hyperspace-wire.md` and by the tests of this module.
//!
//! | what | where | payload |
//! |---|---|---|
//! | full card | gossip `hyperspace/capabilities/{peerId}` | v2 envelope, `d = {"card": CapabilityCard}` |
//! | heartbeat delta | same topic | v2 envelope, `d = {"delta": <heartbeat_delta>}` |
//! | card record | Kademlia value under [`card_key`] `= "/hyperspace/card/{peerId}"` | the full-card envelope above, byte for byte |
//! | provider record | Kademlia provider of [`provider_key`] `= SHA256("hyperspace/cap/" ‖ lowercase tag)` | (the peer itself) |
//! | discovery ask | gossip [`DISCOVERY_TOPIC`] `hyperspace/tasks/tool.discover` | v2 envelope, `d = {"discover": DiscoverParams}` |
//! | discovery answer, invocation | request-response `/agora/hyperspace/1.0.0` | [`PeerRequest`] → [`PeerResponse`] (plain JSON; the card inside is a signed record) |
//!
//! A card record is the very envelope gossiped as the full card, signed for the owner topic, so
//! one verification rule ([`verify_card_record`]) serves gossip, the DHT and discovery answers.
//! A record may be up to [`RECORD_TTL_MS`] old (the gossip window is five minutes); records are
//! re-signed by their owner every [`RECORD_REFRESH_MS`] and whenever the card changes.
//!
//! [`CardPublisher`] decides when the node publishes and what: at once when the card's content
//! changed, otherwise one heartbeat per [`HEARTBEAT_INTERVAL_MS`]; a delta unless this is the
//! first announcement, every [`FULL_CARD_EVERY`]th one, or a full card was asked for (a new
//! subscriber cannot apply deltas). Versions are `max(previous + 1, now_ms)`, so they keep
//! increasing across restarts without being stored (as long as the clock does not go back).

use ed25519_dalek::SigningKey;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::card::{
    CapabilityCard, CardError, CardLimits, HEARTBEAT_INTERVAL_MS, heartbeat_delta, validate_card,
};
use crate::envelope::{self, Envelope, VerifyError};
use crate::jsonrpc::RpcError;
use crate::tool::DiscoverParams;

/// Prefix of the per-peer capability topics.
pub const CAPABILITIES_PREFIX: &str = "hyperspace/capabilities/";
/// Topic of discovery asks (the third tier of `tool.discover`).
pub const DISCOVERY_TOPIC: &str = "hyperspace/tasks/tool.discover";
/// Prefix of card record keys in the DHT.
pub const CARD_KEY_PREFIX: &str = "/hyperspace/card/";
/// Prefix hashed with a capability tag into a provider key.
pub const PROVIDER_KEY_PREFIX: &str = "hyperspace/cap/";
/// How old a card record may be (its envelope `ts`) and still be accepted.
pub const RECORD_TTL_MS: u64 = 60 * 60 * 1000;
/// How often a node re-signs and re-puts its card record even when nothing changed.
pub const RECORD_REFRESH_MS: u64 = 10 * 60 * 1000;
/// Every this many announcements, a full card instead of a delta.
pub const FULL_CARD_EVERY: u32 = 10;

/// `hyperspace/capabilities/{peerId}`.
#[must_use]
pub fn capabilities_topic(peer_id: &str) -> String {
    format!("{CAPABILITIES_PREFIX}{peer_id}")
}

/// The DHT key of `peer_id`'s card record: the UTF-8 bytes of `/hyperspace/card/{peerId}`.
#[must_use]
pub fn card_key(peer_id: &str) -> Vec<u8> {
    format!("{CARD_KEY_PREFIX}{peer_id}").into_bytes()
}

/// The peer of a card record key, if `key` is one.
#[must_use]
pub fn card_key_peer(key: &[u8]) -> Option<&str> {
    std::str::from_utf8(key)
        .ok()?
        .strip_prefix(CARD_KEY_PREFIX)
        .filter(|peer| !peer.is_empty() && !peer.contains('/'))
}

/// The DHT provider key of capability `tag`: `SHA256("hyperspace/cap/" ‖ lowercase(tag))`
/// (ASCII lowercase, as capabilities compare case-insensitively in `tool.discover`).
#[must_use]
pub fn provider_key(tag: &str) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(PROVIDER_KEY_PREFIX.as_bytes());
    h.update(tag.to_ascii_lowercase().as_bytes());
    h.finalize().to_vec()
}

/// Most capability tags looked up in the DHT for one `tool.discover`.
pub const MAX_LOOKUP_TAGS: usize = 8;

/// The capability tags whose providers `tool.discover` looks up in the DHT: the `capabilities`
/// filter when given, otherwise the query's tokens (a tool tagged `search` is found by the
/// query "web search"); lowercase, deduplicated, at most [`MAX_LOOKUP_TAGS`].
#[must_use]
pub fn lookup_tags(params: &DiscoverParams) -> Vec<String> {
    let mut tags: Vec<String> = match &params.capabilities {
        Some(caps) if !caps.is_empty() => caps.iter().map(|c| c.to_ascii_lowercase()).collect(),
        _ => crate::tool::tokens(&params.query).collect(),
    };
    let mut seen = std::collections::BTreeSet::new();
    tags.retain(|t| !t.is_empty() && seen.insert(t.clone()));
    tags.truncate(MAX_LOOKUP_TAGS);
    tags
}

/// The payload `d` of a message on `hyperspace/capabilities/{peerId}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CapabilityMessage {
    /// `{"card": {…}}`: the whole card.
    Card(CapabilityCard),
    /// `{"delta": {…}}`: a heartbeat carrying only what changed ([`crate::card::heartbeat_delta`]).
    Delta(Value),
}

/// The payload `d` of a discovery ask on [`DISCOVERY_TOPIC`]: `{"discover": {…}}`, the asker's
/// `tool.discover` params. Peers with matching tools answer the envelope's `from` directly with
/// [`PeerRequest::Card`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryAsk {
    /// What the asker looks for.
    pub discover: DiscoverParams,
}

/// A request of the node-to-node protocol `/agora/hyperspace/1.0.0` (JSON, one per stream).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum PeerRequest {
    /// `{"op":"invoke","toolId":…,"params":…,"sessionId":…}`: run a tool of the receiving node.
    Invoke {
        /// The tool.
        tool_id: String,
        /// Its input.
        params: Value,
        /// The caller's session, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session_id: Option<String>,
        /// Payment for a priced tool (`{credential}`, or `{channelId, nonce}` of a voucher the
        /// caller's node paid this node).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        payment: Option<Value>,
    },
    /// `{"op":"card","record":"<envelope>"}`: a discovery answer carrying the sender's signed
    /// card record.
    Card {
        /// The card record (an envelope's JSON text).
        record: String,
    },
}

/// The response to a [`PeerRequest`]: `{"result": …}` or `{"error": {code, message, data?}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PeerResponse {
    /// Success (`null` for a card).
    Result(Value),
    /// A JSON-RPC error to hand to the caller unchanged.
    Error(RpcError),
}

impl From<Result<Value, RpcError>> for PeerResponse {
    fn from(outcome: Result<Value, RpcError>) -> Self {
        match outcome {
            Ok(v) => Self::Result(v),
            Err(e) => Self::Error(e),
        }
    }
}

impl From<PeerResponse> for Result<Value, RpcError> {
    fn from(response: PeerResponse) -> Self {
        match response {
            PeerResponse::Result(v) => Ok(v),
            PeerResponse::Error(e) => Err(e),
        }
    }
}

/// Why a card record or capability message was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecordError {
    /// The DHT key is not `/hyperspace/card/{peerId}`.
    #[error("not a card record key")]
    Key,
    /// The envelope did not verify (for records: signed more than an hour ago counts as stale).
    #[error(transparent)]
    Envelope(#[from] VerifyError),
    /// `d` is not what this topic or record carries.
    #[error("unexpected payload: {0}")]
    Payload(String),
    /// The card or delta names another peer than the signer.
    #[error("card of {card} signed by {from}")]
    PeerMismatch {
        /// The card's `peerId`.
        card: String,
        /// The envelope's `from`.
        from: String,
    },
    /// The card breaks a rule of [`crate::card`].
    #[error(transparent)]
    Card(#[from] CardError),
}

/// Signs `card` as a full-card message for its owner topic: the gossip message and the DHT record.
///
/// # Errors
///
/// [`VerifyError::Malformed`] for a nonce that is not 32 lowercase hex characters.
pub fn sign_card(
    key: &SigningKey,
    card: &CapabilityCard,
    ts: u64,
    nonce: &str,
) -> Result<String, VerifyError> {
    sign_message(
        key,
        &card.peer_id,
        &CapabilityMessage::Card(card.clone()),
        ts,
        nonce,
    )
}

/// Signs a capability message of `peer_id` (which must be the key's PeerId to be accepted).
///
/// # Errors
///
/// [`VerifyError::Malformed`] for a bad nonce.
pub fn sign_message(
    key: &SigningKey,
    peer_id: &str,
    message: &CapabilityMessage,
    ts: u64,
    nonce: &str,
) -> Result<String, VerifyError> {
    let d = serde_json::to_string(message).map_err(|e| VerifyError::Malformed(e.to_string()))?;
    envelope::sign(key, &capabilities_topic(peer_id), ts, nonce, &d)
}

/// Signs a discovery ask.
///
/// # Errors
///
/// [`VerifyError::Malformed`] for a bad nonce.
pub fn sign_ask(
    key: &SigningKey,
    params: &DiscoverParams,
    ts: u64,
    nonce: &str,
) -> Result<String, VerifyError> {
    let d = serde_json::to_string(&DiscoveryAsk {
        discover: params.clone(),
    })
    .map_err(|e| VerifyError::Malformed(e.to_string()))?;
    envelope::sign(key, DISCOVERY_TOPIC, ts, nonce, &d)
}

/// Reads the payload of an envelope that verified on `hyperspace/capabilities/{from}`: the card
/// or delta must be the signer's own.
///
/// # Errors
///
/// [`RecordError::Payload`] for anything but `{"card"}` / `{"delta"}`,
/// [`RecordError::PeerMismatch`] for another peer's card or delta.
pub fn read_message(env: &Envelope<'_>) -> Result<CapabilityMessage, RecordError> {
    let message: CapabilityMessage =
        serde_json::from_str(env.d_json).map_err(|e| RecordError::Payload(e.to_string()))?;
    let peer = match &message {
        CapabilityMessage::Card(card) => card.peer_id.as_str(),
        CapabilityMessage::Delta(delta) => {
            delta.get("peerId").and_then(Value::as_str).unwrap_or("")
        }
    };
    if peer != env.from {
        return Err(RecordError::PeerMismatch {
            card: peer.to_owned(),
            from: env.from.to_owned(),
        });
    }
    Ok(message)
}

/// Reads a discovery ask's payload.
///
/// # Errors
///
/// [`RecordError::Payload`] when `d` is not `{"discover": {…}}`.
pub fn read_ask(env: &Envelope<'_>) -> Result<DiscoveryAsk, RecordError> {
    serde_json::from_str(env.d_json).map_err(|e| RecordError::Payload(e.to_string()))
}

/// Verifies a card record (from the DHT, a discovery answer, or the store) at `now_ms`: an
/// envelope signed by `peer` for `hyperspace/capabilities/{peer}` at most [`RECORD_TTL_MS`] ago,
/// carrying `{"card": …}` whose `peerId` is `peer` and which passes [`validate_card`].
///
/// `peer` is the key's peer for DHT records, or `None` to take the envelope's signer.
///
/// # Errors
///
/// The first rule broken.
pub fn verify_record(
    record: &[u8],
    peer: Option<&str>,
    now_ms: u64,
    limits: &CardLimits,
) -> Result<CapabilityCard, RecordError> {
    let text = std::str::from_utf8(record)
        .map_err(|_| VerifyError::Malformed("record is not UTF-8".into()))?;
    let env = Envelope::parse(text)?;
    let peer = peer.unwrap_or(env.from);
    env.check_window(&capabilities_topic(peer), now_ms, RECORD_TTL_MS)?;
    match read_message(&env)? {
        CapabilityMessage::Card(mut card) => {
            validate_card(&mut card, limits)?;
            Ok(card)
        }
        CapabilityMessage::Delta(_) => Err(RecordError::Payload(
            "a card record holds a full card, not a delta".into(),
        )),
    }
}

/// Verifies a DHT value stored under `key` (see [`verify_record`]).
///
/// # Errors
///
/// [`RecordError::Key`] for a key that is not a card key; otherwise as [`verify_record`].
pub fn verify_card_record(
    key: &[u8],
    value: &[u8],
    now_ms: u64,
    limits: &CardLimits,
) -> Result<CapabilityCard, RecordError> {
    let peer = card_key_peer(key).ok_or(RecordError::Key)?;
    verify_record(value, Some(peer), now_ms, limits)
}

/// Whether card `a` is newer than card `b` (newest wins: `(version, updatedAt)`).
#[must_use]
pub fn is_newer(a: &CapabilityCard, b: &CapabilityCard) -> bool {
    (a.version, a.updated_at) > (b.version, b.updated_at)
}

/// One announcement the node must publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Announcement {
    /// The card as of this announcement (its version and `updatedAt` set).
    pub card: CapabilityCard,
    /// What goes on the wire: the full card or a delta.
    pub message: CapabilityMessage,
    /// Whether what the card offers (tools, task types, region) changed since the previous
    /// announcement, as opposed to a heartbeat: the node then also re-puts its DHT record and
    /// provider records.
    pub changed: bool,
}

/// When to publish the node's own card, and as what (see the module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CardPublisher {
    last: Option<CapabilityCard>,
    next_beat_ms: u64,
    since_full: u32,
    full_wanted: bool,
}

/// Two cards offering the same things: equal but for `version`, `updatedAt` and the measured
/// figures (`reputation`, `latency`, and the tools' `reputation` and `avgLatency`), which change
/// with every invocation and travel with the next heartbeat instead of at once.
fn same_offer(a: &CapabilityCard, b: &CapabilityCard) -> bool {
    a.peer_id == b.peer_id
        && a.task_types == b.task_types
        && a.geo == b.geo
        && a.tools.len() == b.tools.len()
        && a.tools.iter().zip(&b.tools).all(|(x, y)| {
            x.id == y.id
                && x.name == y.name
                && x.peer_id == y.peer_id
                && x.description == y.description
                && x.capabilities == y.capabilities
                && x.schema == y.schema
        })
}

impl CardPublisher {
    /// A publisher that has announced nothing yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The next announcement is a full card (a new subscriber appeared).
    pub fn want_full(&mut self) {
        self.full_wanted = true;
    }

    /// The last card announced.
    #[must_use]
    pub fn last(&self) -> Option<&CapabilityCard> {
        self.last.as_ref()
    }

    /// When the next heartbeat is due (0 before the first announcement).
    #[must_use]
    pub fn next_beat_ms(&self) -> u64 {
        self.next_beat_ms
    }

    /// The announcement due at `now_ms` for the card whose current content is `current`
    /// (`version` and `updatedAt` are set here), or `None` when nothing is due. A changed offer
    /// is due at once; changed figures only (reputation, latency) wait for the heartbeat.
    pub fn poll(&mut self, mut current: CapabilityCard, now_ms: u64) -> Option<Announcement> {
        let changed = self.last.as_ref().is_none_or(|l| !same_offer(l, &current));
        if !changed && !self.full_wanted && now_ms < self.next_beat_ms {
            return None;
        }
        let previous = self.last.as_ref().map_or(0, |l| l.version);
        current.version = previous.saturating_add(1).max(now_ms);
        current.updated_at = now_ms;
        let delta = match &self.last {
            Some(last) if !self.full_wanted && self.since_full + 1 < FULL_CARD_EVERY => {
                heartbeat_delta(last, &current)
            }
            _ => None,
        };
        let message = match delta {
            Some(d) => {
                self.since_full += 1;
                CapabilityMessage::Delta(d)
            }
            None => {
                self.since_full = 0;
                CapabilityMessage::Card(current.clone())
            }
        };
        self.full_wanted = false;
        self.next_beat_ms = now_ms.saturating_add(HEARTBEAT_INTERVAL_MS);
        self.last = Some(current.clone());
        Some(Announcement {
            card: current,
            message,
            changed,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::card::{CardTable, CardUpdate};
    use crate::tool_record::ToolRecord;

    const NONCE: &str = "00112233445566778899aabbccddeeff";
    const NOW: u64 = 1_800_000_000_000;

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    fn peer(seed: u8) -> String {
        crate::peer_id_of(&key(seed).verifying_key().to_bytes())
    }

    fn card(seed: u8, tools: &[&str]) -> CapabilityCard {
        let peer_id = peer(seed);
        CapabilityCard {
            tools: tools
                .iter()
                .map(|id| ToolRecord {
                    id: (*id).to_owned(),
                    name: "web-search".into(),
                    peer_id: peer_id.clone(),
                    description: "search the web".into(),
                    capabilities: vec!["search".into()],
                    reputation: 0.5,
                    avg_latency: 0,
                    schema: serde_json::json!({}),
                    price: None,
                    source: None,
                })
                .collect(),
            peer_id,
            task_types: vec![],
            reputation: 0.5,
            geo: None,
            latency: 0,
            version: 0,
            updated_at: 0,
            wallet_address: None,
        }
    }

    #[test]
    fn keys_are_pinned() {
        assert_eq!(card_key("12D3KooWabc"), b"/hyperspace/card/12D3KooWabc");
        assert_eq!(
            card_key_peer(b"/hyperspace/card/12D3KooWabc"),
            Some("12D3KooWabc")
        );
        assert_eq!(card_key_peer(b"/hyperspace/card/"), None);
        assert_eq!(card_key_peer(b"/other/12D3KooWabc"), None);
        // SHA256("hyperspace/cap/search"), case-insensitive in the tag.
        assert_eq!(provider_key("Search"), provider_key("search"));
        let hex = hex::encode(provider_key("search"));
        assert_eq!(hex.len(), 64);
        assert_ne!(provider_key("search"), provider_key("scrape"));
    }

    #[test]
    fn a_signed_card_is_a_valid_record_and_gossip_message() {
        let mut c = card(1, &["tool-1"]);
        c.version = 7;
        c.updated_at = NOW;
        let text = sign_card(&key(1), &c, NOW, NONCE).unwrap();
        let got = verify_card_record(
            &card_key(&c.peer_id),
            text.as_bytes(),
            NOW,
            &CardLimits::default(),
        )
        .unwrap();
        assert_eq!(got, c);
        // The same bytes pass the gossip check on the owner topic.
        let mut window = crate::ReplayWindow::default();
        let env = crate::verify(&text, &capabilities_topic(&c.peer_id), NOW, &mut window).unwrap();
        assert_eq!(read_message(&env).unwrap(), CapabilityMessage::Card(c));
    }

    #[test]
    fn records_live_an_hour_not_longer() {
        let c = card(1, &[]);
        let text = sign_card(&key(1), &c, NOW, NONCE).unwrap();
        let k = card_key(&c.peer_id);
        let limits = CardLimits::default();
        assert!(verify_card_record(&k, text.as_bytes(), NOW + RECORD_TTL_MS, &limits).is_ok());
        let err = verify_card_record(&k, text.as_bytes(), NOW + RECORD_TTL_MS + 1, &limits);
        assert!(matches!(
            err,
            Err(RecordError::Envelope(VerifyError::Stale { .. }))
        ));
        // Future skew is still bounded by five minutes.
        let err = verify_card_record(&k, text.as_bytes(), NOW - 300_001, &limits);
        assert!(matches!(
            err,
            Err(RecordError::Envelope(VerifyError::Stale { .. }))
        ));
    }

    #[test]
    fn records_under_another_peers_key_or_card_are_refused() {
        let c = card(1, &[]);
        let text = sign_card(&key(1), &c, NOW, NONCE).unwrap();
        let limits = CardLimits::default();
        // Stored under peer 2's key: signed for another topic and by a non-owner.
        let err = verify_card_record(&card_key(&peer(2)), text.as_bytes(), NOW, &limits);
        assert!(matches!(
            err,
            Err(RecordError::Envelope(VerifyError::NotOwner { .. }))
        ));
        // Peer 2 signing peer 1's card.
        let forged =
            sign_message(&key(2), &peer(2), &CapabilityMessage::Card(c), NOW, NONCE).unwrap();
        let err = verify_card_record(&card_key(&peer(2)), forged.as_bytes(), NOW, &limits);
        assert!(matches!(err, Err(RecordError::PeerMismatch { .. })));
        assert_eq!(
            verify_card_record(b"/x", text.as_bytes(), NOW, &limits),
            Err(RecordError::Key)
        );
        let err = verify_card_record(&card_key(&peer(1)), b"\xff", NOW, &limits);
        assert!(matches!(
            err,
            Err(RecordError::Envelope(VerifyError::Malformed(_)))
        ));
    }

    #[test]
    fn a_tampered_record_is_refused() {
        let c = card(1, &["tool-1"]);
        let text = sign_card(&key(1), &c, NOW, NONCE).unwrap();
        let tampered = text.replace("search the web", "search the wob");
        let err = verify_card_record(
            &card_key(&c.peer_id),
            tampered.as_bytes(),
            NOW,
            &CardLimits::default(),
        );
        assert_eq!(err, Err(RecordError::Envelope(VerifyError::BadSignature)));
    }

    #[test]
    fn a_delta_is_not_a_record() {
        let c = card(1, &[]);
        let msg = CapabilityMessage::Delta(
            serde_json::json!({"peerId": c.peer_id, "baseVersion": 1, "version": 2}),
        );
        let text = sign_message(&key(1), &c.peer_id, &msg, NOW, NONCE).unwrap();
        let err = verify_card_record(
            &card_key(&c.peer_id),
            text.as_bytes(),
            NOW,
            &CardLimits::default(),
        );
        assert!(matches!(err, Err(RecordError::Payload(_))));
    }

    #[test]
    fn lookup_tags_come_from_capabilities_or_the_query() {
        let mut params = DiscoverParams {
            query: "Web search, web!".into(),
            capabilities: None,
            min_reputation: None,
            max_latency: None,
            geo: None,
        };
        assert_eq!(lookup_tags(&params), ["web", "search"]);
        params.capabilities = Some(vec!["Search".into(), "search".into(), "scrape".into()]);
        assert_eq!(lookup_tags(&params), ["search", "scrape"]);
    }

    #[test]
    fn wire_forms_are_pinned() {
        let ask = DiscoveryAsk {
            discover: DiscoverParams {
                query: "web search".into(),
                capabilities: Some(vec!["search".into()]),
                min_reputation: None,
                max_latency: None,
                geo: None,
            },
        };
        assert_eq!(
            serde_json::to_string(&ask).unwrap(),
            r#"{"discover":{"query":"web search","capabilities":["search"]}}"#
        );
        let req = PeerRequest::Invoke {
            tool_id: "tool-1".into(),
            params: serde_json::json!({"q": 1}),
            session_id: None,
            payment: None,
        };
        assert_eq!(
            serde_json::to_string(&req).unwrap(),
            r#"{"op":"invoke","toolId":"tool-1","params":{"q":1}}"#
        );
        let back: PeerRequest =
            serde_json::from_str(r#"{"op":"invoke","toolId":"t","params":null,"sessionId":"s"}"#)
                .unwrap();
        assert!(matches!(back, PeerRequest::Invoke { session_id: Some(s), .. } if s == "s"));
        let resp = PeerResponse::from(Err(RpcError::peer_unavailable()));
        assert_eq!(
            serde_json::to_string(&resp).unwrap(),
            r#"{"error":{"code":-32006,"message":"Peer Unavailable"}}"#
        );
        let ok: PeerResponse = serde_json::from_str(r#"{"result":{"x":1}}"#).unwrap();
        assert_eq!(Result::from(ok), Ok(serde_json::json!({"x": 1})));
        assert!(serde_json::from_str::<PeerRequest>(r#"{"op":"nope"}"#).is_err());
    }

    #[test]
    fn publisher_sends_full_then_deltas_then_full_again() {
        let mut p = CardPublisher::new();
        let first = p.poll(card(1, &[]), NOW).unwrap();
        assert!(matches!(first.message, CapabilityMessage::Card(_)));
        assert!(first.changed);
        assert_eq!(first.card.version, NOW);
        // Nothing due before the heartbeat.
        assert!(p.poll(card(1, &[]), NOW + 1).is_none());
        // A change goes out at once, as a delta that rebuilds the card.
        let second = p.poll(card(1, &["tool-1"]), NOW + 2).unwrap();
        assert!(second.changed);
        let CapabilityMessage::Delta(delta) = &second.message else {
            panic!("expected a delta");
        };
        assert!(delta.get("tools").is_some());
        let mut table = CardTable::new();
        table.upsert(first.card.clone(), NOW).unwrap();
        assert_eq!(
            table.apply_delta(delta, NOW + 2).unwrap(),
            CardUpdate::Replaced
        );
        assert_eq!(table.live(&first.card.peer_id, NOW + 2), Some(&second.card));
        // Heartbeats: unchanged content, bare deltas, until the tenth announcement is full.
        let mut now = NOW + 2;
        let mut kinds = Vec::new();
        for _ in 0..9 {
            now += HEARTBEAT_INTERVAL_MS;
            let a = p.poll(card(1, &["tool-1"]), now).unwrap();
            assert!(!a.changed);
            kinds.push(matches!(a.message, CapabilityMessage::Card(_)));
        }
        assert_eq!(
            kinds,
            [false, false, false, false, false, false, false, false, true]
        );
        // A new subscriber gets a full card next.
        p.want_full();
        let a = p.poll(card(1, &["tool-1"]), now + 1).unwrap();
        assert!(matches!(a.message, CapabilityMessage::Card(_)));
    }

    #[test]
    fn changed_figures_wait_for_the_heartbeat() {
        let mut p = CardPublisher::new();
        p.poll(card(1, &["tool-1"]), NOW).unwrap();
        let mut busier = card(1, &["tool-1"]);
        busier.reputation = 0.9;
        busier.tools[0].avg_latency = 12;
        assert!(p.poll(busier.clone(), NOW + 1).is_none());
        let beat = p.poll(busier, NOW + HEARTBEAT_INTERVAL_MS).unwrap();
        assert!(!beat.changed);
        let CapabilityMessage::Delta(delta) = beat.message else {
            panic!("expected a delta");
        };
        assert_eq!(delta["reputation"], 0.9);
        assert_eq!(delta["tools"][0]["avgLatency"], 12);
    }

    #[test]
    fn versions_increase_across_restarts_and_within_a_millisecond() {
        let mut p = CardPublisher::new();
        let a = p.poll(card(1, &[]), NOW).unwrap();
        let b = p.poll(card(1, &["t"]), NOW).unwrap();
        assert!(is_newer(&b.card, &a.card));
        // A restarted publisher (no memory) later on the clock still wins.
        let mut restarted = CardPublisher::new();
        let c = restarted.poll(card(1, &[]), NOW + 5).unwrap();
        assert!(is_newer(&c.card, &b.card));
    }
}
