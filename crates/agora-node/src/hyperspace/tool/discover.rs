//! `tool.discover` across the mesh (spec §4.3: "Searches the DHT for tools matching the
//! query"; §1 "discovered dynamically from the gossip mesh"), in three tiers, stopping at the
//! first that finds something:
//!
//! 1. **Local**: the tools registered here and the live cards already known (gossip keeps them
//!    fresh) — answered at once.
//! 2. **DHT**: the providers of the wanted capability tags (`capabilities`, or the query's
//!    words), then each provider's signed card record; valid cards join the card table and the
//!    query runs again.
//! 3. **Gossip**: a signed ask on `hyperspace/tasks/tool.discover`; nodes with matching tools
//!    send us their card record directly. The call is answered as soon as a card makes the
//!    result non-empty, or after [`GOSSIP_WAIT`] with whatever is known (possibly nothing).

use std::time::Duration;

use agora_hyperspace::announce;
use agora_hyperspace::jsonrpc::RpcError;
use agora_hyperspace::tool::{DISCOVER, DISCOVER_PARAMS, DiscoverParams, ToolsResult};
use libp2p::PeerId;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::call::Call;
use crate::clock::now_ms;
use crate::hyperspace::{Input, Service, random_hex};
use crate::mesh;

/// How long a DHT query may take.
const DHT_WAIT: Duration = Duration::from_secs(3);
/// How long a gossip ask waits for answers.
pub(in crate::hyperspace) const GOSSIP_WAIT: Duration = Duration::from_millis(1500);
/// Most providers whose records one discovery fetches.
const MAX_PROVIDERS: usize = 16;
/// Most discoveries waiting at once (more are answered from local knowledge only).
const MAX_WAITING: usize = 1024;

/// A discovery waiting for the DHT or for gossip answers.
#[derive(Debug)]
pub struct PendingDiscover {
    params: DiscoverParams,
    reply: oneshot::Sender<Result<Value, RpcError>>,
    asked: bool,
}

/// Runs one DHT query and waits for its results (empty when it fails or takes too long).
async fn dht_query<T: Default>(
    mesh: &mpsc::Sender<mesh::Command>,
    command: impl FnOnce(oneshot::Sender<T>) -> mesh::Command,
) -> T {
    let (reply, found) = oneshot::channel();
    if mesh.send(command(reply)).await.is_err() {
        return T::default();
    }
    tokio::time::timeout(DHT_WAIT, found)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default()
}

/// The providers of `key` in the DHT.
pub(in crate::hyperspace) async fn get_providers(
    mesh: &mpsc::Sender<mesh::Command>,
    key: Vec<u8>,
) -> Vec<PeerId> {
    dht_query(mesh, |reply| mesh::Command::GetProviders { key, reply }).await
}

/// The values stored under `key` in the DHT.
pub(in crate::hyperspace) async fn get_records(
    mesh: &mpsc::Sender<mesh::Command>,
    key: Vec<u8>,
) -> Vec<Vec<u8>> {
    dht_query(mesh, |reply| mesh::Command::GetRecords { key, reply }).await
}

/// Tier 2: the card records of the providers of `params`' tags.
async fn dht_lookup(
    mesh: mpsc::Sender<mesh::Command>,
    params: DiscoverParams,
    local: PeerId,
) -> Vec<Vec<u8>> {
    let tags = announce::lookup_tags(&params);
    let lookups = tags
        .iter()
        .map(|tag| get_providers(&mesh, announce::provider_key(tag)));
    let mut peers: Vec<PeerId> = futures::future::join_all(lookups)
        .await
        .into_iter()
        .flatten()
        .filter(|p| *p != local)
        .collect();
    peers.sort();
    peers.dedup();
    peers.truncate(MAX_PROVIDERS);
    let fetches = peers
        .iter()
        .map(|p| get_records(&mesh, announce::card_key(&p.to_string())));
    futures::future::join_all(fetches)
        .await
        .into_iter()
        .flatten()
        .collect()
}

fn to_value(found: &ToolsResult) -> Result<Value, RpcError> {
    serde_json::to_value(found).map_err(|e| RpcError::internal_error().with_message(e.to_string()))
}

impl Service {
    /// `tool.discover`: tier 1 here, tiers 2 and 3 off the service task.
    pub(in crate::hyperspace) async fn discover(&mut self, call: Call) {
        if let Err(e) = crate::hyperspace::state::authorize(
            &call.principal,
            DISCOVER,
            call.request.params.as_ref(),
        ) {
            let _ = call.reply.send(Err(e));
            return;
        }
        let now = now_ms();
        let params = match agora_hyperspace::params::parse_params::<DiscoverParams>(
            call.request.params.as_ref().unwrap_or(&Value::Null),
            &DISCOVER_PARAMS,
        ) {
            Ok(p) => p,
            Err(e) => {
                let _ = call.reply.send(Err(e));
                return;
            }
        };
        let found = match self.tools.discover(&params, now) {
            Ok(found) => found,
            Err(e) => {
                let _ = call.reply.send(Err(e));
                return;
            }
        };
        if !found.tools.is_empty() || self.discovering.len() >= MAX_WAITING {
            let _ = call.reply.send(to_value(&found));
            return;
        }
        let id = self.next_discover;
        self.next_discover += 1;
        let Ok(local) = self.peer_id.parse::<PeerId>() else {
            let _ = call.reply.send(to_value(&found));
            return;
        };
        let mesh = self.mesh.clone();
        let inputs = self.inputs.clone();
        let lookup = params.clone();
        self.discovering.insert(
            id,
            PendingDiscover {
                params,
                reply: call.reply,
                asked: false,
            },
        );
        tokio::spawn(async move {
            let records = dht_lookup(mesh, lookup, local).await;
            let _ = inputs
                .send(Input::Learned {
                    records,
                    discover: Some(id),
                })
                .await;
        });
    }

    /// Records arrived (DHT or a fetch): learn them, answer whoever can be answered now, and
    /// move discovery `discover` to the gossip tier if it is still empty-handed.
    pub(in crate::hyperspace) async fn learned(
        &mut self,
        records: &[Vec<u8>],
        discover: Option<u64>,
    ) {
        let now = now_ms();
        self.learn_records(records, now);
        self.answer_waiting(now);
        let Some(id) = discover else { return };
        let Some(pending) = self.discovering.get_mut(&id) else {
            return;
        };
        if pending.asked {
            return;
        }
        pending.asked = true;
        match announce::sign_ask(&self.key, &pending.params, now, &random_hex(16)) {
            Ok(ask) => {
                let _ = self
                    .mesh
                    .send(mesh::Command::Publish {
                        topic: announce::DISCOVERY_TOPIC.to_owned(),
                        data: ask.into_bytes(),
                    })
                    .await;
            }
            Err(e) => tracing::warn!(error = %e, "cannot sign a discovery ask"),
        }
        let inputs = self.inputs.clone();
        tokio::spawn(async move {
            tokio::time::sleep(GOSSIP_WAIT).await;
            let _ = inputs.send(Input::DiscoverDeadline(id)).await;
        });
    }

    /// Answers every waiting discovery whose result is no longer empty.
    pub(in crate::hyperspace) fn answer_waiting(&mut self, now: u64) {
        if self.discovering.is_empty() {
            return;
        }
        let ready: Vec<u64> = self
            .discovering
            .iter()
            .filter(|(_, p)| {
                self.tools
                    .discover(&p.params, now)
                    .is_ok_and(|r| !r.tools.is_empty())
            })
            .map(|(id, _)| *id)
            .collect();
        for id in ready {
            self.finish_discover(id, now);
        }
    }

    /// The gossip ask of discovery `id` had its time.
    pub(in crate::hyperspace) fn discover_deadline(&mut self, id: u64) {
        self.finish_discover(id, now_ms());
    }

    fn finish_discover(&mut self, id: u64, now: u64) {
        let Some(p) = self.discovering.remove(&id) else {
            return;
        };
        let outcome = self
            .tools
            .discover(&p.params, now)
            .and_then(|r| to_value(&r));
        let _ = p.reply.send(outcome);
    }
}
