//! Capability cards on the node (spec §2.4, §7.4; wire in `agora_hyperspace::announce`):
//!
//! - **Our card.** Built from the tools registered here (those with a connected provider), this
//!   node's track record (`reputation`, `latency` from the invocations it served) and published
//!   on `hyperspace/capabilities/{ourPeerId}`: at once when the offer changes, otherwise a delta
//!   heartbeat every 30 s, a full card every tenth time and whenever a neighbour subscribes. The
//!   same signed full card is our DHT record (`/hyperspace/card/{peerId}`), re-put on every
//!   change and every 10 minutes, and we are a DHT provider of each capability tag we offer.
//! - **Cards of others** arrive by gossip (full cards and deltas, after the envelope verified),
//!   from the DHT and as discovery answers; they go into the tool registry's card table (newest
//!   wins, live for 5 minutes after the last heartbeat). A delta we cannot apply (we missed the
//!   base) makes us fetch the peer's DHT record, at most twice a minute per peer.
//! - **Records held for the network.** Kademlia offers us records to store; each is verified
//!   (signature, owner, at most an hour old, a valid card) and kept only if newer than what we
//!   hold. Held records are written to redb, and after a restart they are loaded, re-verified and
//!   put back into the DHT.

use agora_hyperspace::announce::{
    self, CapabilityMessage, DISCOVERY_TOPIC, RECORD_REFRESH_MS, RecordError,
};
use agora_hyperspace::card::{CapabilityCard, CardError};
use agora_hyperspace::envelope::Envelope;
use agora_hyperspace::tool::REPUTATION_PRIOR;
use libp2p::PeerId;
use libp2p::gossipsub::MessageAcceptance;

use super::{GossipCheck, Input, Service, random_hex};
use crate::clock::now_ms;
use crate::mesh;

/// Most card records held for the DHT.
const MAX_HELD: usize = 4096;
/// Least time between two card fetches for one peer (after a missed delta).
const REFETCH_MS: u64 = 30_000;
/// Least time between two re-publications of every record on a new neighbour.
const REPUBLISH_MS: u64 = 60_000;

/// A card record held for the DHT.
#[derive(Debug, Clone)]
pub struct HeldRecord {
    /// The card it carries (for newest-wins).
    pub card: CapabilityCard,
    /// The record (envelope text).
    pub record: String,
}

/// How long node `peer_id` leaves an unchanged card record before re-putting it: between
/// [`RECORD_REFRESH_MS`] and twice that (well inside the records' one-hour life), fixed per node.
/// At 500 nodes started within a minute, every node re-putting at the same 10-minute mark (each
/// put a DHT query and 20 stores) kept both cores busy for minutes.
pub(super) fn refresh_ms(peer_id: &str) -> u64 {
    let every = std::time::Duration::from_millis(RECORD_REFRESH_MS);
    u64::try_from(mesh::topics::spread(peer_id, "card-record", every).as_millis())
        .unwrap_or(RECORD_REFRESH_MS)
}

impl Service {
    /// At start: join our capability topic (neighbours follow it because we are in it) and the
    /// discovery asks, put back the records held before a restart, and announce our card.
    pub(super) async fn start_announcing(&mut self, records: Vec<(String, String)>) {
        for topic in [
            announce::capabilities_topic(&self.peer_id),
            DISCOVERY_TOPIC.to_owned(),
        ] {
            let _ = self.mesh.send(mesh::Command::Subscribe(topic)).await;
        }
        let now = now_ms();
        let limits = *self.tools.cards().limits();
        for (peer, record) in records {
            match announce::verify_record(record.as_bytes(), Some(&peer), now, &limits) {
                Ok(card) => {
                    let _ = self
                        .mesh
                        .send(mesh::Command::PutRecord {
                            key: announce::card_key(&peer),
                            value: record.clone().into_bytes(),
                        })
                        .await;
                    self.held.insert(peer, HeldRecord { card, record });
                }
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "stored card record dropped");
                    if let Err(e) = self.store.delete_hs_record(&peer).await {
                        tracing::warn!(error = %e, "cannot delete a card record");
                    }
                }
            }
        }
        self.announce(now).await;
    }

    /// The DHT routing table got its first peer. Records put while the node had no DHT peers (at
    /// start, after a restart) reached nobody, so ours and the held ones are put again — at most
    /// once a minute.
    pub(super) async fn dht_peer(&mut self) {
        let now = now_ms();
        if self
            .republished_ms
            .is_some_and(|at| now.saturating_sub(at) < REPUBLISH_MS)
        {
            return;
        }
        self.republished_ms = Some(now);
        if let Some(card) = self.publisher.last().cloned() {
            self.put_own_record(&card, now).await;
        }
        for (peer, held) in &self.held {
            let _ = self
                .mesh
                .send(mesh::Command::PutRecord {
                    key: announce::card_key(peer),
                    value: held.record.clone().into_bytes(),
                })
                .await;
        }
    }

    /// Our card as of now (version and time are set by the publisher).
    fn current_card(&self) -> CapabilityCard {
        let summary = self.tools.local_summary();
        let reputation = if summary.invocations > 0 {
            summary.reputation()
        } else {
            REPUTATION_PRIOR
        };
        self.tools
            .local_card(Vec::new(), reputation, summary.avg_latency(), 0, 0)
    }

    /// Publishes what is due: a changed card, a heartbeat, a record refresh.
    pub(super) async fn announce(&mut self, now: u64) {
        let Some(a) = self.publisher.poll(self.current_card(), now) else {
            return;
        };
        let nonce = random_hex(16);
        match announce::sign_message(&self.key, &self.peer_id, &a.message, now, &nonce) {
            Ok(text) => {
                let _ = self
                    .mesh
                    .send(mesh::Command::Publish {
                        topic: announce::capabilities_topic(&self.peer_id),
                        data: text.into_bytes(),
                    })
                    .await;
            }
            Err(e) => tracing::warn!(error = %e, "cannot sign our capability card"),
        }
        if a.changed || now.saturating_sub(self.record_put_ms) >= self.record_refresh_ms {
            self.put_own_record(&a.card, now).await;
        }
        if a.changed {
            self.update_providing(&a.card).await;
        }
    }

    /// Our signed card record for `card` at `now`.
    pub(super) fn sign_own(&self, card: &CapabilityCard, now: u64) -> Option<String> {
        announce::sign_card(&self.key, card, now, &random_hex(16))
            .map_err(|e| tracing::warn!(error = %e, "cannot sign our card record"))
            .ok()
    }

    async fn put_own_record(&mut self, card: &CapabilityCard, now: u64) {
        let Some(record) = self.sign_own(card, now) else {
            return;
        };
        if record.len() > mesh::MAX_RECORD_BYTES {
            tracing::warn!(
                bytes = record.len(),
                "our card is too large for a DHT record; it is only gossiped"
            );
            return;
        }
        self.record_put_ms = now;
        let _ = self
            .mesh
            .send(mesh::Command::PutRecord {
                key: announce::card_key(&self.peer_id),
                value: record.into_bytes(),
            })
            .await;
    }

    /// Provides exactly the tags of `card`'s tools.
    async fn update_providing(&mut self, card: &CapabilityCard) {
        let tags: std::collections::BTreeSet<String> = card
            .tools
            .iter()
            .flat_map(|t| t.capabilities.iter().map(|c| c.to_ascii_lowercase()))
            .collect();
        for gone in self.provided.difference(&tags) {
            let _ = self
                .mesh
                .send(mesh::Command::StopProviding(announce::provider_key(gone)))
                .await;
        }
        for new in tags.difference(&self.provided) {
            let _ = self
                .mesh
                .send(mesh::Command::StartProviding(announce::provider_key(new)))
                .await;
        }
        self.provided = tags;
    }

    /// A neighbour subscribed to our capabilities topic: it needs a full card.
    pub(super) async fn subscribed(&mut self, topic: &str) {
        if topic == announce::capabilities_topic(&self.peer_id) {
            self.publisher.want_full();
            self.announce(now_ms()).await;
        }
    }

    /// Judges a verified gossip message, tells gossipsub, and applies it.
    pub(super) async fn gossip(&mut self, check: GossipCheck) {
        let GossipCheck {
            topic,
            data,
            id,
            propagation_source,
        } = check;
        let acceptance = self.apply_gossip(&topic, &data).await;
        mesh::report_validation(&self.mesh, id, propagation_source, acceptance).await;
    }

    async fn apply_gossip(&mut self, topic: &str, data: &[u8]) -> MessageAcceptance {
        let Ok(text) = std::str::from_utf8(data) else {
            return MessageAcceptance::Reject;
        };
        let now = now_ms();
        // The mesh's GossipGate verified it (and entered it in its replay window).
        let env = match Envelope::parse(text) {
            Ok(env) => env,
            Err(e) if e.is_benign() => return MessageAcceptance::Ignore,
            Err(e) => {
                tracing::debug!(%topic, reason = e.reason(), "rejected Hyperspace gossip");
                return MessageAcceptance::Reject;
            }
        };
        if topic.starts_with(announce::CAPABILITIES_PREFIX) {
            self.capability_message(&env, now).await
        } else if topic == DISCOVERY_TOPIC {
            self.discovery_ask(&env, now).await
        } else {
            // Other topics (tasks, trajectories, reputation…) are verified and relayed.
            MessageAcceptance::Accept
        }
    }

    async fn capability_message(&mut self, env: &Envelope<'_>, now: u64) -> MessageAcceptance {
        if env.from == self.peer_id {
            return MessageAcceptance::Accept;
        }
        let outcome = match announce::read_message(env) {
            Ok(CapabilityMessage::Card(card)) => self
                .tools
                .cards_mut()
                .upsert(card, now)
                .map_err(RecordError::from),
            Ok(CapabilityMessage::Delta(delta)) => self
                .tools
                .cards_mut()
                .apply_delta(&delta, now)
                .map_err(RecordError::from),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(_) => {
                self.answer_waiting(now);
                MessageAcceptance::Accept
            }
            // We missed the base card: others may not have; forward, and fetch the record.
            Err(RecordError::Card(
                CardError::MissingBase { .. } | CardError::VersionGap { .. },
            )) => {
                self.fetch_card(env.from, now);
                MessageAcceptance::Accept
            }
            // Authentic but no room: not the forwarder's fault.
            Err(RecordError::Card(CardError::Full { .. })) => MessageAcceptance::Ignore,
            Err(e) => {
                tracing::debug!(from = env.from, error = %e, "refused a capability message");
                MessageAcceptance::Reject
            }
        }
    }

    /// Fetches `peer`'s card record from the DHT (at most once per [`REFETCH_MS`]).
    fn fetch_card(&mut self, peer: &str, now: u64) {
        let key = format!("fetch:{peer}");
        if self
            .throttle
            .get(&key)
            .is_some_and(|at| now.saturating_sub(*at) < REFETCH_MS)
        {
            return;
        }
        self.throttle.insert(key, now);
        let mesh = self.mesh.clone();
        let inputs = self.inputs.clone();
        let key = announce::card_key(peer);
        tokio::spawn(async move {
            let records = super::tool::discover::get_records(&mesh, key).await;
            let _ = inputs
                .send(Input::Learned {
                    records,
                    discover: None,
                })
                .await;
        });
    }

    /// Card records from the DHT or a discovery answer: the newest valid card per peer goes
    /// into the card table.
    pub(super) fn learn_records(&mut self, records: &[Vec<u8>], now: u64) -> usize {
        let limits = *self.tools.cards().limits();
        let mut learned = 0;
        for value in records {
            match announce::verify_record(value, None, now, &limits) {
                Ok(card) if card.peer_id != self.peer_id => {
                    if self.tools.cards_mut().upsert(card, now).is_ok() {
                        learned += 1;
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "refused a card record"),
            }
        }
        learned
    }

    /// Kademlia offers us a record to hold: keep it if it is a valid card record newer than the
    /// one we hold.
    pub(super) async fn record_offered(&mut self, key: &[u8], value: Vec<u8>) {
        let now = now_ms();
        let limits = *self.tools.cards().limits();
        let card = match announce::verify_card_record(key, &value, now, &limits) {
            Ok(card) => card,
            Err(e) => {
                tracing::debug!(error = %e, "refused a DHT record");
                return;
            }
        };
        let peer = card.peer_id.clone();
        if peer == self.peer_id {
            return;
        }
        if let Some(held) = self.held.get(&peer)
            && !announce::is_newer(&card, &held.card)
        {
            return;
        }
        if !self.held.contains_key(&peer) && self.held.len() >= MAX_HELD {
            // Make room: drop the record whose card is oldest.
            if let Some(oldest) = self
                .held
                .iter()
                .min_by_key(|(_, h)| h.card.updated_at)
                .map(|(p, _)| p.clone())
            {
                self.held.remove(&oldest);
                let _ = self.store.delete_hs_record(&oldest).await;
            }
        }
        let Ok(record) = String::from_utf8(value) else {
            return;
        };
        if let Err(e) = self.store.put_hs_record(&peer, &record).await {
            tracing::warn!(error = %e, "cannot store a card record");
        }
        let _ = self
            .mesh
            .send(mesh::Command::StoreRecord {
                key: key.to_vec(),
                value: record.clone().into_bytes(),
            })
            .await;
        self.held.insert(peer, HeldRecord { card, record });
    }

    /// What `GET /hyperspace/cards` shows: our card, the cards of others (live or expired) and
    /// the records held for the DHT.
    pub(super) fn cards_report(&self, now: u64) -> serde_json::Value {
        let cards: Vec<serde_json::Value> = self
            .tools
            .cards()
            .entries()
            .map(|e| {
                serde_json::json!({
                    "peerId": e.card.peer_id,
                    "version": e.card.version,
                    "updatedAt": e.card.updated_at,
                    "live": self.tools.cards().is_live(&e.card.peer_id, now),
                    "tools": e.card.tools.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
                    "walletAddress": e.card.wallet_address,
                })
            })
            .collect();
        let mut held: Vec<serde_json::Value> = self
            .held
            .values()
            .map(|h| {
                serde_json::json!({
                    "peerId": h.card.peer_id,
                    "version": h.card.version,
                    "updatedAt": h.card.updated_at,
                })
            })
            .collect();
        held.sort_by(|a, b| a["peerId"].as_str().cmp(&b["peerId"].as_str()));
        serde_json::json!({
            "own": self.publisher.last(),
            "cards": cards,
            "held": held,
        })
    }

    /// Someone asks over gossip who has tools for a query: if we do, we send them our card.
    async fn discovery_ask(&mut self, env: &Envelope<'_>, now: u64) -> MessageAcceptance {
        let ask = match announce::read_ask(env) {
            Ok(ask) => ask,
            Err(e) => {
                tracing::debug!(from = env.from, error = %e, "refused a discovery ask");
                return MessageAcceptance::Reject;
            }
        };
        if env.from == self.peer_id {
            return MessageAcceptance::Accept;
        }
        let ours = self
            .tools
            .discover(&ask.discover, now)
            .is_ok_and(|r| r.tools.iter().any(|t| t.peer_id == self.peer_id));
        let key = format!("answer:{}", env.from);
        let recently = self
            .throttle
            .get(&key)
            .is_some_and(|at| now.saturating_sub(*at) < 1_000);
        if ours
            && !recently
            && let Ok(asker) = env.from.parse::<PeerId>()
            && let Some(card) = self.publisher.last().cloned()
            && let Some(record) = self.sign_own(&card, now)
        {
            self.throttle.insert(key, now);
            let request = announce::PeerRequest::Card { record };
            if let Ok(data) = serde_json::to_vec(&request) {
                let (reply, _answer) = tokio::sync::oneshot::channel();
                let _ = self
                    .mesh
                    .send(mesh::Command::SendDirect {
                        proto: mesh::Proto::Hyperspace,
                        peer: asker,
                        data,
                        reply,
                    })
                    .await;
            }
        }
        MessageAcceptance::Accept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_re_puts_are_spread_over_ten_minutes_and_fixed_per_node() {
        let peers: Vec<String> = (0..500).map(|_| PeerId::random().to_string()).collect();
        let every: Vec<u64> = peers.iter().map(|p| refresh_ms(p)).collect();
        assert!(
            every
                .iter()
                .all(|ms| (RECORD_REFRESH_MS..2 * RECORD_REFRESH_MS).contains(ms))
        );
        // 500 nodes started together: no minute of the ten holds more than a fifth of them.
        let mut per_minute = [0usize; 10];
        for ms in &every {
            per_minute[usize::try_from((ms - RECORD_REFRESH_MS) / 60_000).unwrap()] += 1;
        }
        assert!(per_minute.iter().all(|n| *n < 100), "{per_minute:?}");
        assert_eq!(refresh_ms(&peers[0]), every[0]);
    }
}
