//! Settlement (spec §6, topic `hyperspace/settlements/{round}` of §2.1): submitting records to a chain ([`Settler`]), the
//! settlement log, and the settlement gossip of other nodes' records.

use super::*;

impl Shared {
    /// Hands `record` to the settler, keeps it in the log and publishes it on its round's
    /// topic.
    pub(super) async fn settle(&self, record: &Record) {
        match self.settler.submit(record) {
            Settled::Recorded => {}
            Settled::Submitted { transaction } => {
                tracing::info!(transaction, id = record.id(), "payment settled");
            }
            Settled::Failed { reason } => {
                tracing::warn!(
                    reason,
                    id = record.id(),
                    "a settlement failed; it stays recorded"
                );
            }
        }
        self.log_settlement(record, &self.me).await;
        let Ok(d) = serde_json::to_string(record) else {
            return;
        };
        let topic = hs_settlement::topic(hs_settlement::round_of(record.at()));
        match agora_hyperspace::envelope::sign(&self.key, &topic, now_ms(), &random_hex(16), &d) {
            Ok(env) => {
                let _ = self
                    .mesh
                    .send(mesh::Command::Publish {
                        topic,
                        data: env.into_bytes(),
                    })
                    .await;
                self.count("settlements_published");
            }
            Err(e) => tracing::warn!(error = %e, "cannot sign a settlement record"),
        }
    }

    /// Appends `record` (published by `by`) to the bounded log, durably; a record already in
    /// the log is not added again.
    pub(super) async fn log_settlement(&self, record: &Record, by: &str) {
        let id = record.id();
        let entry = json!({ "id": id, "publishedBy": by, "round": hs_settlement::round_of(record.at()), "record": record });
        let (seq, evicted) = {
            let Ok(mut log) = self.settlements.lock() else {
                return;
            };
            if log.iter().any(|(_, v)| v["id"] == id) {
                return;
            }
            let seq = self.settlement_seq.fetch_add(1, Ordering::AcqRel);
            log.push_back((seq, entry.clone()));
            let mut evicted = Vec::new();
            while log.len() > self.settings.max_settlements {
                if let Some((s, _)) = log.pop_front() {
                    evicted.push(s);
                }
            }
            (seq, evicted)
        };
        let mut rows: Vec<(PayTable, String, Option<String>)> = evicted
            .into_iter()
            .map(|s| (PayTable::Settlements, format!("{s:020}"), None))
            .collect();
        rows.push((
            PayTable::Settlements,
            format!("{seq:020}"),
            Some(entry.to_string()),
        ));
        if let Err(e) = self.store.put_payments(rows).await {
            tracing::warn!(error = %e, "cannot write the settlement log");
        }
    }

    pub(super) fn settlement_log(&self) -> Value {
        let log: Vec<Value> = self
            .settlements
            .lock()
            .map(|l| l.iter().rev().map(|(_, v)| v.clone()).collect())
            .unwrap_or_default();
        json!({ "settlements": log, "settler": self.settler.name() })
    }

    /// A settlement envelope from gossip: kept when the payer's signature holds.
    pub(super) async fn settlement_received(&self, data: &[u8]) {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let Ok(env) = agora_hyperspace::envelope::Envelope::parse(text) else {
            return;
        };
        if env.from == self.me {
            return;
        }
        let Ok(record) = serde_json::from_str::<Record>(env.d_json) else {
            self.count("settlements_malformed");
            return;
        };
        match record.check(Self::peer_key) {
            Ok(()) => {
                self.log_settlement(&record, env.from).await;
                self.count("settlements_received");
            }
            Err(e) => {
                tracing::debug!(error = %e, from = env.from, "a settlement record was refused");
                self.count("settlements_refused");
            }
        }
    }

    /// Subscribes to the current and next settlement rounds, and leaves older ones.
    pub(super) async fn follow_rounds(&self) {
        let now = hs_settlement::round_of(now_ms());
        let want = [now, now + 1];
        let (join, leave) = {
            let Ok(mut r) = self.rounds.lock() else {
                return;
            };
            let join: Vec<u64> = want.iter().copied().filter(|w| !r.contains(w)).collect();
            let leave: Vec<u64> = r.iter().copied().filter(|x| *x + 1 < now).collect();
            r.retain(|x| *x + 1 >= now);
            r.extend(&join);
            (join, leave)
        };
        for round in join {
            let _ = self
                .mesh
                .send(mesh::Command::Subscribe(hs_settlement::topic(round)))
                .await;
        }
        for round in leave {
            let _ = self
                .mesh
                .send(mesh::Command::Unsubscribe(hs_settlement::topic(round)))
                .await;
        }
    }
}

/// What a settler did with a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Recorded only (no chain).
    Recorded,
    /// Submitted to a chain as `transaction`.
    Submitted {
        /// The transaction hash.
        transaction: String,
    },
    /// The submission failed.
    Failed {
        /// Why.
        reason: String,
    },
}

/// Moves what accepted payments and closed channels owe onto a chain: an EIP-3009
/// `transferWithAuthorization` with the credential's signature, or a channel's last voucher
/// to an escrow contract. Called once per record by the payee's node, off the call that
/// accepted it.
pub trait Settler: Send + Sync + std::fmt::Debug {
    /// The settler's name (`/hyperspace/settlements` `settler`).
    fn name(&self) -> &'static str;
    /// Settles `record`.
    fn submit(&self, record: &Record) -> Settled;
}

/// The settler of a node without a chain: it records, and submits nothing. A USDC receipt then
/// means "a valid, unreplayed authorization for this amount", not "the money moved".
#[derive(Debug, Default, Clone, Copy)]
pub struct NoChainSettler;

impl Settler for NoChainSettler {
    fn name(&self) -> &'static str {
        "none"
    }

    fn submit(&self, _record: &Record) -> Settled {
        Settled::Recorded
    }
}
