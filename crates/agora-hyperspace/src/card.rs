//! Capability cards and capability gossip, sans IO: the card a peer advertises, a table keeping
//! the newest card per peer with a heartbeat TTL, and delta-only heartbeats.
//!
//! Spec references (the Hyperspace Gossiping Agents Protocol):
//!
//! - §2.4 "Discovery (DHT)": "Capability cards include: peerId, tools[], taskTypes[], reputation,
//!   geo, latency".
//! - §7.4 "Capability Gossip": heartbeat every 30 seconds ([`HEARTBEAT_INTERVAL_MS`]), delta-only
//!   ("CRDT-based, only changes propagated"), TTL 5 minutes ([`CARD_TTL_MS`]: "capabilities expire
//!   if no heartbeat").
//! - §4.3 "Tool Primitive": each entry of `tools[]` has the shape of a `tool.discover` result
//!   ([`ToolRecord`]).
//!
//! # Design
//!
//! [`CapabilityCard`] is plain serde data (camelCase on the wire). [`CardTable`] keeps at most one
//! card per peer together with the local receive time of its last accepted heartbeat; it reads no
//! clock (`now_ms`, Unix milliseconds, is a parameter). Signing is not done here: the node
//! publishes cards and deltas inside v2 signed envelopes on `hyperspace/capabilities/{peerId}` and
//! only hands this module payloads whose envelope verified and whose signer is `peerId`.
//!
//! # Newest wins
//!
//! A card replaces the stored card of its peer when `(version, updatedAt)` is greater
//! (lexicographically). An equal pair is a duplicate and an older one is stale: both are ignored
//! and neither refreshes the TTL, so a replayed old heartbeat cannot keep a vanished peer alive.
//! Every heartbeat therefore bumps `version`.
//!
//! # TTL
//!
//! A card is live while `now_ms < last_heartbeat_ms + ttl_ms`: it expires at **exactly** five
//! minutes after the last accepted heartbeat, measured with the receiver's clock (`updatedAt` is the
//! publisher's clock and is not trusted for expiry). Expired cards are kept (so the tool registry can
//! say −32006 "Peer Unavailable" rather than "unknown tool") until [`CardTable::prune`] forgets
//! them `forget_after_ms` after expiry, or room is needed.
//!
//! # Delta format
//!
//! [`heartbeat_delta`] produces a JSON object with
//!
//! - `peerId` — whose card this is,
//! - `baseVersion` — the version the delta applies to,
//! - `version` and `updatedAt` — the new card's (always present: the delta of an unchanged card
//!   is the bare heartbeat),
//! - every other top-level field (`tools`, `taskTypes`, `reputation`, `geo`, `latency`) whose
//!   value changed, with its complete new value (`geo: null` when the region was removed).
//!
//! [`apply_delta`] merges those fields into the base card and validates the result, so
//! `apply_delta(prev, heartbeat_delta(prev, cur)) == cur`. A delta whose `baseVersion` is not the
//! stored card's version is a gap ([`CardError::VersionGap`]): the receiver missed something and
//! must wait for a full card. Publishers should therefore send the full card when a peer is new
//! to them and periodically (node policy).
//!
//! # Memory bounds ([`CardLimits`], defaults)
//!
//! | bound | default | when reached |
//! |---|---|---|
//! | cards | 1024 | the expired card with the oldest heartbeat is dropped; otherwise [`CardError::Full`] |
//! | tools per card | 64 | [`CardError::Invalid`] |
//! | `taskTypes` per card | 64, each 1..=64 bytes | [`CardError::Invalid`] |
//! | `peerId` | 1..=128 bytes | [`CardError::Invalid`] |
//! | `geo` | 1..=64 bytes | [`CardError::Invalid`] |
//! | each tool | the [`ToolLimits`] of `tool.register` | [`CardError::Invalid`] |
//!
//! # Important discrepancies
//!
//! - **`version`, `updatedAt` and the delta's `baseVersion` are ours.** §2.4 lists only the six
//!   fields; "newest wins" and gap detection need an order, and §7.4 says "CRDT-based" without
//!   saying which CRDT. A per-peer card with a single writer is a last-writer-wins register
//!   keyed by `(version, updatedAt)`; deltas replace whole top-level fields (a changed tool
//!   resends the whole `tools` array).
//! - **Units.** `latency` is whole milliseconds (as `duration` and `avgLatency` in §4.3/§11);
//!   `reputation` is in `0..=1` (the §4.3 example's `0.94`), self-reported and only a claim.
//! - **Unknown fields are ignored**, in cards and deltas (spec §1.3 "Extensible"); they are not
//!   kept.
//! - **`tools[].peerId` may be omitted** in a card; it is filled with the card's `peerId`. A tool
//!   naming another peer is rejected, so a card only advertises its own peer's tools.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::tool_record::{ToolLimits, ToolRecord, validate_record};

/// How often a peer re-publishes its card (spec §7.4: 30 seconds).
pub const HEARTBEAT_INTERVAL_MS: u64 = 30_000;
/// How long a card lives after its last heartbeat (spec §7.4: 5 minutes).
pub const CARD_TTL_MS: u64 = 5 * 60 * 1000;

/// A peer's capability card (spec §2.4), camelCase on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityCard {
    /// The advertising peer.
    pub peer_id: String,
    /// The tools the peer offers, in the `tool.discover` record shape.
    #[serde(default)]
    pub tools: Vec<ToolRecord>,
    /// The task types the peer accepts (free-form names such as `"web-research"`).
    #[serde(default)]
    pub task_types: Vec<String>,
    /// The peer's self-reported reputation, `0..=1`.
    pub reputation: f64,
    /// The peer's region (`"us-east"`), if it states one.
    #[serde(default)]
    pub geo: Option<String>,
    /// The peer's self-reported typical latency, in milliseconds.
    pub latency: u64,
    /// Monotonic card version; every heartbeat increases it.
    pub version: u64,
    /// When the publisher made this version, Unix milliseconds (its clock).
    pub updated_at: u64,
    /// The peer's wallet address (`0x`, 40 hex digits), where it is paid in USDC
    /// (`micropayments`); absent on nodes that say nothing of payments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wallet_address: Option<String>,
}

/// Memory bounds of [`CardTable`] and of one card (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CardLimits {
    /// Cards kept (live or expired).
    pub max_cards: usize,
    /// Tools in one card.
    pub max_tools_per_card: usize,
    /// Entries of `taskTypes`.
    pub max_task_types: usize,
    /// Bytes of one task type.
    pub max_task_type_bytes: usize,
    /// Bytes of `peerId`.
    pub max_peer_id_bytes: usize,
    /// Bytes of `geo`.
    pub max_geo_bytes: usize,
    /// Time to live after the last heartbeat, milliseconds.
    pub ttl_ms: u64,
    /// How long an expired card is remembered by [`CardTable::prune`], milliseconds.
    pub forget_after_ms: u64,
    /// Limits applied to each advertised tool.
    pub tool: ToolLimits,
}

impl Default for CardLimits {
    fn default() -> Self {
        Self {
            max_cards: 1024,
            max_tools_per_card: 64,
            max_task_types: 64,
            max_task_type_bytes: 64,
            max_peer_id_bytes: 128,
            max_geo_bytes: 64,
            ttl_ms: CARD_TTL_MS,
            forget_after_ms: 10 * 60 * 1000,
            tool: ToolLimits::default(),
        }
    }
}

/// Why a card or delta was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CardError {
    /// A field breaks a rule or bound.
    #[error("invalid capability card: {field}: {reason}")]
    Invalid {
        /// The offending field (`tools[2].name`).
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A delta arrived for a peer whose card is unknown.
    #[error("no card of peer {peer_id} to apply a delta to")]
    MissingBase {
        /// The peer.
        peer_id: String,
    },
    /// A delta's `baseVersion` is not the stored version: something was missed.
    #[error("delta for version {base_version} but the stored card is version {stored_version}")]
    VersionGap {
        /// The stored card's version.
        stored_version: u64,
        /// The delta's `baseVersion`.
        base_version: u64,
    },
    /// The table is full of live cards.
    #[error("capability card table is full ({limit} cards)")]
    Full {
        /// [`CardLimits::max_cards`].
        limit: usize,
    },
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> CardError {
    CardError::Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}

/// What [`CardTable::upsert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CardUpdate {
    /// First card of this peer (or first since it was forgotten).
    Inserted,
    /// A newer card replaced the stored one and refreshed the TTL.
    Replaced,
    /// Same `(version, updatedAt)` as stored: ignored, TTL not refreshed.
    Duplicate,
    /// Older than stored: ignored.
    Stale,
}

/// Checks a card against `limits` and fills omitted `tools[].peerId`.
///
/// # Errors
///
/// [`CardError::Invalid`] naming the first offending field.
pub fn validate_card(card: &mut CapabilityCard, limits: &CardLimits) -> Result<(), CardError> {
    if card.peer_id.is_empty() || card.peer_id.len() > limits.max_peer_id_bytes {
        return Err(invalid(
            "peerId",
            format!("must be 1..={} bytes", limits.max_peer_id_bytes),
        ));
    }
    if !card.reputation.is_finite() || !(0.0..=1.0).contains(&card.reputation) {
        return Err(invalid("reputation", "must be a number in 0..=1"));
    }
    if let Some(geo) = &card.geo
        && (geo.is_empty() || geo.len() > limits.max_geo_bytes)
    {
        return Err(invalid(
            "geo",
            format!("must be 1..={} bytes", limits.max_geo_bytes),
        ));
    }
    if let Some(w) = &card.wallet_address
        && crate::payments::eip712::parse_address(w).is_none()
    {
        return Err(invalid("walletAddress", "must be a 0x address"));
    }
    if card.task_types.len() > limits.max_task_types {
        return Err(invalid(
            "taskTypes",
            format!("more than {} entries", limits.max_task_types),
        ));
    }
    for (i, task_type) in card.task_types.iter().enumerate() {
        if task_type.is_empty() || task_type.len() > limits.max_task_type_bytes {
            return Err(invalid(
                format!("taskTypes[{i}]"),
                format!("must be 1..={} bytes", limits.max_task_type_bytes),
            ));
        }
    }
    if card.tools.len() > limits.max_tools_per_card {
        return Err(invalid(
            "tools",
            format!("more than {} tools", limits.max_tools_per_card),
        ));
    }
    let mut ids = std::collections::BTreeSet::new();
    for (i, tool) in card.tools.iter_mut().enumerate() {
        if tool.peer_id.is_empty() {
            tool.peer_id.clone_from(&card.peer_id);
        } else if tool.peer_id != card.peer_id {
            return Err(invalid(
                format!("tools[{i}].peerId"),
                "does not match the card's peerId",
            ));
        }
        validate_record(tool, &limits.tool)
            .map_err(|(field, reason)| invalid(format!("tools[{i}].{field}"), reason))?;
        if !ids.insert(tool.id.as_str()) {
            return Err(invalid(format!("tools[{i}].id"), "duplicate tool id"));
        }
    }
    Ok(())
}

/// The fields a delta may carry besides `peerId`, `baseVersion`, `version` and `updatedAt`.
const DELTA_FIELDS: [&str; 5] = ["tools", "taskTypes", "reputation", "geo", "latency"];

/// The delta-only heartbeat from `previous` to `current` (format in the module docs).
///
/// `None` when no delta can express the change: the cards belong to different peers, or
/// `current` is not newer than `previous` by `(version, updatedAt)`; the node then publishes the
/// full card (or nothing).
#[must_use]
pub fn heartbeat_delta(previous: &CapabilityCard, current: &CapabilityCard) -> Option<Value> {
    if previous.peer_id != current.peer_id
        || (current.version, current.updated_at) <= (previous.version, previous.updated_at)
    {
        return None;
    }
    let Ok(Value::Object(prev)) = serde_json::to_value(previous) else {
        return None;
    };
    let Ok(Value::Object(cur)) = serde_json::to_value(current) else {
        return None;
    };
    let mut delta = Map::new();
    delta.insert("peerId".into(), Value::String(current.peer_id.clone()));
    delta.insert("baseVersion".into(), Value::from(previous.version));
    delta.insert("version".into(), Value::from(current.version));
    delta.insert("updatedAt".into(), Value::from(current.updated_at));
    for field in DELTA_FIELDS {
        let new = cur.get(field).unwrap_or(&Value::Null);
        if prev.get(field).unwrap_or(&Value::Null) != new {
            delta.insert(field.into(), new.clone());
        }
    }
    Some(Value::Object(delta))
}

/// Applies a delta from [`heartbeat_delta`] to `base`, validating the result with `limits`.
///
/// # Errors
///
/// [`CardError::Invalid`] for a malformed delta, another peer's delta or an invalid resulting
/// card (unknown fields are ignored); [`CardError::VersionGap`] when `baseVersion` is not `base.version`.
pub fn apply_delta(
    base: &CapabilityCard,
    delta: &Value,
    limits: &CardLimits,
) -> Result<CapabilityCard, CardError> {
    let Value::Object(delta) = delta else {
        return Err(invalid("delta", "must be an object"));
    };
    match delta.get("peerId") {
        Some(Value::String(peer)) if *peer == base.peer_id => {}
        Some(Value::String(_)) => return Err(invalid("peerId", "delta of another peer")),
        _ => return Err(invalid("peerId", "missing or not a string")),
    }
    let base_version = delta
        .get("baseVersion")
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid("baseVersion", "missing or not an unsigned integer"))?;
    if base_version != base.version {
        return Err(CardError::VersionGap {
            stored_version: base.version,
            base_version,
        });
    }
    let Ok(Value::Object(mut merged)) = serde_json::to_value(base) else {
        return Err(invalid("delta", "base card is not serializable"));
    };
    for (key, value) in delta {
        match key.as_str() {
            "peerId" | "baseVersion" => {}
            "version" | "updatedAt" => {
                merged.insert(key.clone(), value.clone());
            }
            field if DELTA_FIELDS.contains(&field) => {
                merged.insert(key.clone(), value.clone());
            }
            // Fields of future versions are ignored (spec §1.3 "Extensible").
            _ => {}
        }
    }
    if !delta.contains_key("version") {
        return Err(invalid("version", "missing"));
    }
    let mut card: CapabilityCard = serde_json::from_value(Value::Object(merged))
        .map_err(|error| invalid("delta", error.to_string()))?;
    if (card.version, card.updated_at) <= (base.version, base.updated_at) {
        return Err(invalid("version", "not newer than the base card"));
    }
    validate_card(&mut card, limits)?;
    Ok(card)
}

/// A stored card and the local time of its last accepted heartbeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CardEntry {
    /// The newest card of the peer.
    pub card: CapabilityCard,
    /// When it was accepted, Unix milliseconds (receiver's clock).
    pub last_heartbeat_ms: u64,
}

/// The newest capability card per peer, with TTL (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CardTable {
    cards: BTreeMap<String, CardEntry>,
    #[serde(skip)]
    limits: CardLimits,
}

impl CardTable {
    /// An empty table with the default limits.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty table with the given limits.
    #[must_use]
    pub fn with_limits(limits: CardLimits) -> Self {
        Self {
            cards: BTreeMap::new(),
            limits,
        }
    }

    /// The limits in force.
    #[must_use]
    pub fn limits(&self) -> &CardLimits {
        &self.limits
    }

    /// Replaces the limits (after reloading a deserialized table).
    pub fn set_limits(&mut self, limits: CardLimits) {
        self.limits = limits;
    }

    /// Number of stored cards, live or expired.
    #[must_use]
    pub fn len(&self) -> usize {
        self.cards.len()
    }

    /// No card is stored.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.cards.is_empty()
    }

    /// Whether `entry` is live at `now_ms`.
    fn entry_live(&self, entry: &CardEntry, now_ms: u64) -> bool {
        now_ms < entry.last_heartbeat_ms.saturating_add(self.limits.ttl_ms)
    }

    /// The stored card of `peer_id` and its heartbeat time, live or expired.
    #[must_use]
    pub fn entry(&self, peer_id: &str) -> Option<&CardEntry> {
        self.cards.get(peer_id)
    }

    /// The card of `peer_id` if it is live at `now_ms`.
    #[must_use]
    pub fn live(&self, peer_id: &str, now_ms: u64) -> Option<&CapabilityCard> {
        self.cards
            .get(peer_id)
            .filter(|entry| self.entry_live(entry, now_ms))
            .map(|entry| &entry.card)
    }

    /// Whether `peer_id` has a live card at `now_ms`.
    #[must_use]
    pub fn is_live(&self, peer_id: &str, now_ms: u64) -> bool {
        self.live(peer_id, now_ms).is_some()
    }

    /// Every card live at `now_ms`, by peer id.
    pub fn live_cards(&self, now_ms: u64) -> impl Iterator<Item = &CapabilityCard> {
        self.cards
            .values()
            .filter(move |entry| self.entry_live(entry, now_ms))
            .map(|entry| &entry.card)
    }

    /// Every stored card (live or expired) with its heartbeat time, by peer id.
    pub fn entries(&self) -> impl Iterator<Item = &CardEntry> {
        self.cards.values()
    }

    /// Stores `card` if it is newer than the stored card of its peer (newest wins).
    ///
    /// # Errors
    ///
    /// [`CardError::Invalid`] for a card breaking the limits; [`CardError::Full`] when a new peer
    /// does not fit and no expired card can be dropped.
    pub fn upsert(
        &mut self,
        mut card: CapabilityCard,
        now_ms: u64,
    ) -> Result<CardUpdate, CardError> {
        validate_card(&mut card, &self.limits)?;
        if let Some(entry) = self.cards.get_mut(&card.peer_id) {
            let stored = (entry.card.version, entry.card.updated_at);
            let incoming = (card.version, card.updated_at);
            return Ok(if incoming > stored {
                entry.card = card;
                entry.last_heartbeat_ms = entry.last_heartbeat_ms.max(now_ms);
                CardUpdate::Replaced
            } else if incoming == stored {
                CardUpdate::Duplicate
            } else {
                CardUpdate::Stale
            });
        }
        self.make_room(now_ms)?;
        self.cards.insert(
            card.peer_id.clone(),
            CardEntry {
                card,
                last_heartbeat_ms: now_ms,
            },
        );
        Ok(CardUpdate::Inserted)
    }

    /// Applies a heartbeat delta to the stored card of its peer (live or expired) and refreshes
    /// the TTL. A delta whose new `(version, updatedAt)` is not newer than the stored card is
    /// [`CardUpdate::Duplicate`] or [`CardUpdate::Stale`] and ignored.
    ///
    /// # Errors
    ///
    /// [`CardError::MissingBase`] when the peer has no stored card, otherwise as [`apply_delta`].
    pub fn apply_delta(&mut self, delta: &Value, now_ms: u64) -> Result<CardUpdate, CardError> {
        let peer_id = delta
            .get("peerId")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("peerId", "missing or not a string"))?;
        let entry = self
            .cards
            .get_mut(peer_id)
            .ok_or_else(|| CardError::MissingBase {
                peer_id: peer_id.to_owned(),
            })?;
        let incoming = (
            delta.get("version").and_then(Value::as_u64).unwrap_or(0),
            delta
                .get("updatedAt")
                .and_then(Value::as_u64)
                .unwrap_or(entry.card.updated_at),
        );
        let stored = (entry.card.version, entry.card.updated_at);
        if incoming == stored {
            return Ok(CardUpdate::Duplicate);
        }
        if incoming < stored {
            return Ok(CardUpdate::Stale);
        }
        let card = apply_delta(&entry.card, delta, &self.limits)?;
        entry.card = card;
        entry.last_heartbeat_ms = entry.last_heartbeat_ms.max(now_ms);
        Ok(CardUpdate::Replaced)
    }

    /// Removes the card of `peer_id` (e.g. the peer left); returns it.
    pub fn remove(&mut self, peer_id: &str) -> Option<CapabilityCard> {
        self.cards.remove(peer_id).map(|entry| entry.card)
    }

    /// Forgets cards expired for at least `forget_after_ms` at `now_ms`; returns how many.
    pub fn prune(&mut self, now_ms: u64) -> usize {
        let before = self.cards.len();
        let horizon = self
            .limits
            .ttl_ms
            .saturating_add(self.limits.forget_after_ms);
        self.cards
            .retain(|_, entry| now_ms < entry.last_heartbeat_ms.saturating_add(horizon));
        before - self.cards.len()
    }

    /// Makes room for one more card: drops the expired card with the oldest heartbeat.
    fn make_room(&mut self, now_ms: u64) -> Result<(), CardError> {
        if self.cards.len() < self.limits.max_cards {
            return Ok(());
        }
        let oldest_expired = self
            .cards
            .iter()
            .filter(|(_, entry)| !self.entry_live(entry, now_ms))
            .min_by_key(|(peer, entry)| (entry.last_heartbeat_ms, *peer))
            .map(|(peer, _)| peer.clone());
        match oldest_expired {
            Some(peer) => {
                self.cards.remove(&peer);
                Ok(())
            }
            None => Err(CardError::Full {
                limit: self.limits.max_cards,
            }),
        }
    }
}
