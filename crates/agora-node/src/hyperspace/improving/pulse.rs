//! Pulse rounds on this node (spec §9.4 "Sybil resistance via proof-of-work participation";
//! the rules are `agora_hyperspace::pulse`'s, the wire `docs/hyperspace-wire.md` "Pulse rounds
//! (§9.4)"): once per round this node does the round's work on a blocking thread and publishes
//! its proof on `hyperspace/pulse/proofs`; proofs of other nodes are checked before gossipsub
//! forwards them, and each one that holds counts a round passed in the participation table,
//! whose weights the improving service ranks exemplars, weighs reputation views and sets
//! gossip scores with (`Shared::reputation`, `Shared::set_scores`).
//!
//! Bounded: at most [`VERIFYING`] proofs checked at once on blocking threads and [`QUEUED`]
//! waiting (beyond, a proof is ignored, not penalised); the table keeps [`MAX_IDENTITIES`]
//! identities (when full, the one with the fewest passes goes). The table is in memory only:
//! after a restart every identity is fresh again and regains its weight in
//! `ESTABLISHED_ROUNDS` rounds (10 rounds, 15 minutes at 90-s rounds), which keeps the store
//! out of a path taken for every proof.
//!
//! Outcomes of received proofs are counted in `/status` (`improving.pulse.received`) and in
//! the metric `agora_pulse_proofs_total{outcome}`: `passed`, `own`, `busy`, and each refusal
//! reason of `PulseError::reason` (`malformed`, `not_signer`, `wrong_round`, `wrong_indices`,
//! `bad_leaf`, `bad_path`, `replayed`). Forged proofs are rejected (the forwarder is
//! penalised); late and repeated ones are ignored.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agora_hyperspace::pulse::{self, Participation, Proof, PulseError};
use libp2p::PeerId;
use libp2p::gossipsub::{MessageAcceptance, MessageId};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::{Shared, lock};
use crate::clock::now_ms;
use crate::hyperspace::random_hex;
use crate::mesh;

/// Proofs checked at once.
pub const VERIFYING: usize = 2;
/// Proofs waiting to be checked; beyond, ignored.
pub const QUEUED: usize = 256;
/// Most identities in the participation table.
pub const MAX_IDENTITIES: usize = 10_000;

/// `outcome` label of `agora_pulse_proofs_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// What came of the proof.
    pub outcome: &'static str,
}

/// This node's pulse state.
#[derive(Debug)]
pub struct Pulse {
    round_ms: u64,
    table: Mutex<Participation>,
    /// A proof of this node is being computed.
    proving: AtomicBool,
    /// The last round this node published a proof of (0: none).
    proved: AtomicU64,
    /// The round the node started in: its first proof is of the next one, so a node that
    /// lives less than a round (tests, restarts) does no work, and nodes started together
    /// prove at the round's start like the others.
    started: u64,
    /// Weights changed since the scores were last set.
    pub(super) changed: AtomicBool,
    queued: Arc<Semaphore>,
    verifying: Arc<Semaphore>,
    outcomes: Mutex<BTreeMap<&'static str, u64>>,
    metric: Family<OutcomeLabel, Counter>,
}

impl Pulse {
    /// Rounds of `round_ms`; outcomes also counted in `telemetry`.
    pub fn new(round_ms: u64, telemetry: &crate::telemetry::Telemetry) -> Self {
        let metric = Family::<OutcomeLabel, Counter>::default();
        telemetry.registry().register(
            "pulse_proofs",
            "Pulse proofs received, by outcome (spec 9.4)",
            metric.clone(),
        );
        Self {
            started: pulse::round_of(now_ms(), round_ms),
            round_ms,
            table: Mutex::new(Participation::new(MAX_IDENTITIES)),
            proving: AtomicBool::new(false),
            proved: AtomicU64::new(0),
            changed: AtomicBool::new(false),
            queued: Arc::new(Semaphore::new(QUEUED)),
            verifying: Arc::new(Semaphore::new(VERIFYING)),
            outcomes: Mutex::new(BTreeMap::new()),
            metric,
        }
    }

    /// The current round.
    pub fn round(&self) -> u64 {
        pulse::round_of(now_ms(), self.round_ms)
    }

    fn count(&self, outcome: &'static str) {
        *lock(&self.outcomes).entry(outcome).or_insert(0) += 1;
        self.metric.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    /// Every identity's weight now.
    pub fn weights(&self) -> BTreeMap<String, f64> {
        lock(&self.table).weights(self.round())
    }

    /// `/status` `improving.pulse`.
    pub fn status(&self) -> Value {
        let round = self.round();
        let table = lock(&self.table);
        let mut top: Vec<(&String, &pulse::Record)> = table.peers.iter().collect();
        top.sort_by(|a, b| b.1.passed.cmp(&a.1.passed).then(a.0.cmp(b.0)));
        top.truncate(32);
        json!({
            "roundMs": self.round_ms,
            "round": round,
            "proved": self.proved.load(Ordering::Relaxed),
            "identities": table.peers.len(),
            "received": *lock(&self.outcomes),
            "top": top.into_iter().map(|(p, r)| json!({
                "peerId": p,
                "passed": r.passed,
                "lastRound": r.last_round,
                "weight": table.weight(p, round),
            })).collect::<Vec<_>>(),
        })
    }
}

impl Shared {
    /// At each tick: when a new round began (not the one the node started in) and no proof is
    /// being computed, does the round's work on a blocking thread and publishes the proof.
    pub(super) fn pulse_tick(self: &Arc<Self>) {
        let p = &self.pulse;
        let round = p.round();
        if round <= p.started
            || round <= p.proved.load(Ordering::Acquire)
            || p.proving.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let s = Arc::clone(self);
        tokio::spawn(async move {
            let me = s.peer_id.clone();
            let ms = s.pulse.round_ms;
            let proof = tokio::task::spawn_blocking(move || Proof::prove(round, ms, &me)).await;
            if let Ok(proof) = proof {
                s.publish_proof(&proof).await;
            }
            s.pulse.proved.store(round, Ordering::Release);
            s.pulse.proving.store(false, Ordering::Release);
        });
    }

    async fn publish_proof(&self, proof: &Proof) {
        let Ok(d) = serde_json::to_string(proof) else {
            return;
        };
        match agora_hyperspace::envelope::sign(
            &self.key,
            pulse::TOPIC,
            now_ms(),
            &random_hex(16),
            &d,
        ) {
            Ok(env) => {
                let _ = self
                    .mesh
                    .send(mesh::Command::Publish {
                        topic: pulse::TOPIC.to_owned(),
                        data: env.into_bytes(),
                    })
                    .await;
            }
            Err(e) => tracing::warn!(error = %e, "cannot sign a pulse proof"),
        }
    }

    /// A proof received on the pulse topic (its envelope verified by the mesh's gate): checked
    /// within the bounds, counted, and the verdict reported to gossipsub.
    pub(super) fn pulse_received(
        self: &Arc<Self>,
        data: Vec<u8>,
        id: MessageId,
        propagation_source: PeerId,
    ) {
        let Ok(permit) = Arc::clone(&self.pulse.queued).try_acquire_owned() else {
            self.pulse.count("busy");
            let mesh = self.mesh.clone();
            tokio::spawn(async move {
                mesh::report_validation(&mesh, id, propagation_source, MessageAcceptance::Ignore)
                    .await;
            });
            return;
        };
        let s = Arc::clone(self);
        tokio::spawn(async move {
            let verdict = s.check_proof(&data).await;
            mesh::report_validation(&s.mesh, id, propagation_source, verdict).await;
            drop(permit);
        });
    }

    async fn check_proof(self: &Arc<Self>, data: &[u8]) -> MessageAcceptance {
        let outcome = self.proof_outcome(data).await;
        let (label, verdict) = match &outcome {
            Ok(label) => (*label, MessageAcceptance::Accept),
            Err(e) => {
                tracing::debug!(error = %e, "a pulse proof was refused");
                let verdict = if e.is_benign() {
                    MessageAcceptance::Ignore
                } else {
                    MessageAcceptance::Reject
                };
                (e.reason(), verdict)
            }
        };
        self.pulse.count(label);
        verdict
    }

    async fn proof_outcome(self: &Arc<Self>, data: &[u8]) -> Result<&'static str, PulseError> {
        let malformed = |e: &dyn std::fmt::Display| PulseError::Malformed(e.to_string());
        let text = std::str::from_utf8(data).map_err(|e| malformed(&e))?;
        let env = agora_hyperspace::envelope::Envelope::parse(text).map_err(|e| malformed(&e))?;
        if env.from == self.peer_id {
            return Ok("own");
        }
        let proof = Proof::decode(env.d_json, env.from)?;
        let p = &self.pulse;
        let current = p.round();
        proof.check_round(current)?;
        if !lock(&p.table).is_new(&proof.peer_id, proof.round) {
            return Err(PulseError::Replayed(proof.round));
        }
        let ms = p.round_ms;
        let permit = Arc::clone(&p.verifying)
            .acquire_owned()
            .await
            .map_err(|e| malformed(&e))?;
        let proof = tokio::task::spawn_blocking(move || {
            let checked = proof.verify(current, ms);
            drop(permit);
            checked.map(|()| proof)
        })
        .await
        .map_err(|e| malformed(&e))??;
        lock(&p.table).pass(&proof.peer_id, proof.round)?;
        p.changed.store(true, Ordering::Release);
        Ok("passed")
    }
}
