//! The inline gossip check for `hyperspace/…` topics: the v2 envelope is verified once (signature
//! over the topic, `from`/`pk`, freshness, replay window) inside gossipsub's validation hook, in
//! the mesh task, before the message can be forwarded. Topics whose messages change a service's
//! state (capabilities, discovery asks, trajectories, pulse proofs) are then deferred to the service, which
//! decides from the content; memory sync messages, reputation views and settlement records are
//! accepted here and a copy goes to the memory, improving or payments service ([`Verdict::Accept`]); every other Hyperspace topic is accepted here and relayed at once, and
//! since no service reads those, the mesh queues no copy of them ([`Verdict::Relay`]).

use std::sync::{Arc, Mutex};

use agora_hyperspace::announce::{CAPABILITIES_PREFIX, DISCOVERY_TOPIC};
use agora_hyperspace::improving::gossip::{REPUTATION_PREFIX, TRAJECTORIES_PREFIX};
use agora_hyperspace::memory::SYNC_TOPIC;
use agora_hyperspace::payments::settlement::SETTLEMENTS_PREFIX;
use agora_hyperspace::pulse::TOPIC as PULSE_TOPIC;
use agora_hyperspace::{KeyCache, ReplayWindow};

use crate::clock::{PeerClocks, now_ms};
use crate::mesh::{GossipValidator, Verdict};
use crate::telemetry::{RefusedLabels, Telemetry, topic_family};

/// Verifies Hyperspace gossip in the mesh task; reads the senders' clocks off the envelopes
/// that pass ([`PeerClocks`]) and counts the refused ones by reason.
#[derive(Debug)]
pub struct GossipGate {
    state: Mutex<(ReplayWindow, KeyCache)>,
    clocks: Arc<PeerClocks>,
    telemetry: Option<Arc<Telemetry>>,
}

impl GossipGate {
    /// A gate with an empty replay window and key cache that tells `clocks` the time of every
    /// envelope that passes and counts refusals in `telemetry`.
    pub fn new(clocks: Arc<PeerClocks>, telemetry: Option<Arc<Telemetry>>) -> Self {
        Self {
            state: Mutex::new((
                ReplayWindow::default(),
                KeyCache::with_capacity(agora_hyperspace::envelope::DEFAULT_KEY_CACHE),
            )),
            clocks,
            telemetry,
        }
    }
}

impl GossipValidator for GossipGate {
    fn validate(&self, topic: &str, data: &[u8]) -> Verdict {
        let Ok(text) = std::str::from_utf8(data) else {
            return Verdict::Reject;
        };
        let now = now_ms();
        let checked = {
            // A poisoned lock only means another check panicked; the window is still usable.
            let mut state = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (window, keys) = &mut *state;
            agora_hyperspace::verify_keyed(text, topic, now, window, keys)
                .map(|env| self.clocks.observe(env.from, env.ts, now))
        };
        if let (Err(e), Some(t)) = (&checked, &self.telemetry) {
            t.gossip_refused
                .get_or_create(&RefusedLabels {
                    family: topic_family(topic),
                    reason: e.reason(),
                })
                .inc();
        }
        match checked {
            Ok(())
                if topic.starts_with(CAPABILITIES_PREFIX)
                    || topic == DISCOVERY_TOPIC
                    || topic == PULSE_TOPIC
                    || topic.starts_with(TRAJECTORIES_PREFIX) =>
            {
                Verdict::Defer
            }
            // Memory sync: forwarded at once, and the memory service applies a copy; so are
            // reputation views (the improving service keeps those it follows) and settlement
            // records (the payments service keeps those whose payer signature holds), and A2A
            // Agent Cards (the A2A bridge keeps them, `crate::bridge::a2a`).
            Ok(())
                if topic == SYNC_TOPIC
                    || topic == agora_bridge::a2a::CARDS_TOPIC
                    || topic.starts_with(REPUTATION_PREFIX)
                    || topic.starts_with(SETTLEMENTS_PREFIX) =>
            {
                Verdict::Accept
            }
            Ok(()) => Verdict::Relay,
            Err(e) if e.is_benign() => Verdict::Ignore,
            Err(e) => {
                tracing::debug!(%topic, reason = e.reason(), "rejected Hyperspace gossip");
                Verdict::Reject
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(topic: &str, ts: u64) -> String {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NONCE: AtomicU64 = AtomicU64::new(0);
        let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        let nonce = format!("{:032x}", NONCE.fetch_add(1, Ordering::Relaxed));
        agora_hyperspace::envelope::sign(&key, topic, ts, &nonce, r#"{"x":1}"#).expect("sign")
    }

    #[test]
    fn verifies_once_and_defers_stateful_topics() {
        let gate = GossipGate::new(Arc::default(), None);
        let tasks = "hyperspace/tasks/x";
        let env = envelope(tasks, now_ms());
        assert_eq!(gate.validate(tasks, env.as_bytes()), Verdict::Relay);
        // The same envelope again is a replay: ignored, not penalised.
        assert_eq!(gate.validate(tasks, env.as_bytes()), Verdict::Ignore);
        // Signed for another topic: forged.
        assert_eq!(
            gate.validate("hyperspace/tasks/y", envelope(tasks, now_ms()).as_bytes()),
            Verdict::Reject
        );
        assert_eq!(
            gate.validate(
                DISCOVERY_TOPIC,
                envelope(DISCOVERY_TOPIC, now_ms()).as_bytes()
            ),
            Verdict::Defer
        );
        let sync = SYNC_TOPIC;
        assert_eq!(
            gate.validate(sync, envelope(sync, now_ms()).as_bytes()),
            Verdict::Accept
        );
        // A2A cards: accepted inline, and a copy goes to the A2A bridge.
        let cards = agora_bridge::a2a::CARDS_TOPIC;
        assert_eq!(
            gate.validate(cards, envelope(cards, now_ms()).as_bytes()),
            Verdict::Accept
        );
        assert_eq!(gate.validate(tasks, b"\xff"), Verdict::Reject);
        assert_eq!(
            gate.validate(tasks, envelope(tasks, now_ms() - 600_000).as_bytes()),
            Verdict::Ignore
        );
    }

    #[test]
    fn reads_the_senders_clocks_and_counts_refusals_by_reason() {
        let clocks = Arc::new(PeerClocks::default());
        let telemetry = Arc::new(Telemetry::new());
        let gate = GossipGate::new(Arc::clone(&clocks), Some(Arc::clone(&telemetry)));
        let tasks = "hyperspace/tasks/x";
        // A sender two minutes ahead: inside the window, taken, and its clock read.
        let ahead = envelope(tasks, now_ms() + 120_000);
        assert_eq!(gate.validate(tasks, ahead.as_bytes()), Verdict::Relay);
        let view = clocks.view(now_ms());
        assert_eq!(view.peers, 1);
        assert!(view.offset_ms.is_some_and(|o| (o - 120_000).abs() < 5_000));
        // Outside the window: refused as stale and counted.
        let stale = envelope(tasks, now_ms() - 400_000);
        assert_eq!(gate.validate(tasks, stale.as_bytes()), Verdict::Ignore);
        let counted = telemetry
            .gossip_refused
            .get_or_create(&RefusedLabels {
                family: "tasks",
                reason: "stale",
            })
            .get();
        assert_eq!(counted, 1);
    }
}
