//! A search across nodes (issue 33 item 5, `agora_directory::ask`): this node's index, then the
//! nodes the DHT names as providers of the query's words, then a gossip ask on
//! `agora/directory/v1/ask`, all within [`DEADLINE`]; and this node's side of other nodes'
//! searches (answering asks and searches from its own index, delivering answers to the search
//! that waits for them).
//!
//! Bounded: at most [`MAX_WAITING`] searches wait for answers at once (more are answered from
//! this node alone, said in the log); at most [`ANSWERING`] asks of other nodes are answered
//! at once (more are dropped: the asker has other nodes and its deadline); each search takes at
//! most [`MAX_DHT_PEERS`] DHT providers and keeps at most `MAX_REMOTE_HITS` hits per node.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agora_directory::ask::{self, Ask, Request, Response};
use agora_directory::merge::merge;
use agora_directory::{Hit, Query, SearchParams};
use libp2p::PeerId;
use libp2p::gossipsub::MessageAcceptance;
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::Shared;
use crate::mesh;

/// How long a mesh search waits for other nodes, in all.
pub const DEADLINE: Duration = Duration::from_millis(1500);
/// How long it waits for another answer after each one.
pub const GRACE: Duration = Duration::from_millis(100);
/// How long a DHT provider lookup may take.
const DHT_WAIT: Duration = Duration::from_millis(1000);
/// Most providers one search asks.
pub const MAX_DHT_PEERS: usize = 16;
/// Most searches waiting for answers at once.
pub const MAX_WAITING: usize = 256;
/// Most asks of other nodes answered at once.
pub const ANSWERING: usize = 8;

/// One node's answer: its PeerId and its hits.
type Answer = (String, Vec<Hit>);

/// The searches waiting for answers, by ask id.
#[derive(Debug, Default)]
pub(super) struct Waiting(Mutex<HashMap<String, mpsc::Sender<Answer>>>);

impl Waiting {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::Sender<Answer>>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What this side of the fan-out holds.
#[derive(Debug)]
pub(super) struct Fanout {
    pub(super) waiting: Waiting,
    pub(super) answering: Semaphore,
    /// The words this node provides in the DHT.
    pub(super) provided: Mutex<BTreeSet<String>>,
}

impl Default for Fanout {
    fn default() -> Self {
        Self {
            waiting: Waiting::default(),
            answering: Semaphore::new(ANSWERING),
            provided: Mutex::new(BTreeSet::new()),
        }
    }
}

/// `local` merged with what other nodes answer to `params` within the deadline.
pub(super) async fn search_mesh(
    shared: &Arc<Shared>,
    query: &Query,
    params: &SearchParams,
    local: Vec<Hit>,
) -> (Vec<Hit>, Vec<String>) {
    let me = shared.wiring.peer_id.clone();
    let ask_id = crate::hyperspace::random_hex(12);
    let (tx, mut rx) = mpsc::channel::<Answer>(64);
    {
        let mut waiting = shared.fanout.waiting.lock();
        if waiting.len() >= MAX_WAITING {
            tracing::warn!("directory: too many searches waiting; answered from this node alone");
            return (local, vec![me]);
        }
        waiting.insert(ask_id.clone(), tx.clone());
    }
    let mesh = shared.wiring.mesh.clone();
    // Tier 3, the gossip ask (sent first: it takes the longest).
    let ask = Ask {
        ask_id: ask_id.clone(),
        params: params.clone(),
    };
    let (count_tx, count_rx) = oneshot::channel();
    let _ = mesh
        .send(mesh::Command::PublishCounted {
            topic: ask::ASK_TOPIC.to_owned(),
            data: ask::encode(&ask),
            reply: count_tx,
        })
        .await;
    let reached = count_rx.await.unwrap_or(0);
    // Tier 2, the DHT's providers of the query's words.
    let mut lookup: Vec<String> = ask::words(&query.text)
        .take(ask::MAX_LOOKUP_WORDS)
        .collect();
    if let Some(c) = &query.filter.capability {
        lookup.extend(ask::words(c).take(1));
    }
    let mut dht = tokio::spawn(dht_tier(mesh, me.clone(), lookup, params.clone(), tx));
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut answers: Vec<Answer> = Vec::new();
    let mut until = deadline;
    let mut dht_done = false;
    loop {
        tokio::select! {
            answer = rx.recv() => {
                let Some(answer) = answer else { break };
                until = (tokio::time::Instant::now() + GRACE).min(deadline);
                answers.push(answer);
            }
            _ = &mut dht, if !dht_done => {
                dht_done = true;
            }
            () = tokio::time::sleep_until(until) => break,
        }
        // Every neighbour the ask reached has answered (or it reached none) and the DHT tier
        // is done: nothing more is expected soon.
        if dht_done {
            while let Ok(answer) = rx.try_recv() {
                answers.push(answer);
            }
            let mut answered: Vec<&str> = answers.iter().map(|(n, _)| n.as_str()).collect();
            answered.sort_unstable();
            answered.dedup();
            if answered.len() >= reached {
                break;
            }
        }
    }
    shared.fanout.waiting.lock().remove(&ask_id);
    dht.abort();
    let mut nodes = vec![me];
    for (node, _) in &answers {
        if !nodes.contains(node) {
            nodes.push(node.clone());
        }
    }
    (merge(local, answers, query.limit), nodes)
}

/// Asks the providers of `words` for their hits.
async fn dht_tier(
    mesh: mpsc::Sender<mesh::Command>,
    me: String,
    words: Vec<String>,
    params: SearchParams,
    answers: mpsc::Sender<Answer>,
) {
    let lookups = words.iter().map(|w| async {
        let (reply, found) = oneshot::channel();
        let key = ask::provider_key(w);
        if mesh
            .send(mesh::Command::GetProviders { key, reply })
            .await
            .is_err()
        {
            return Vec::new();
        }
        tokio::time::timeout(DHT_WAIT, found)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default()
    });
    let mut peers: Vec<PeerId> = futures::future::join_all(lookups)
        .await
        .into_iter()
        .flatten()
        .filter(|p| p.to_string() != me)
        .collect();
    peers.sort();
    peers.dedup();
    peers.truncate(MAX_DHT_PEERS);
    let request = ask::encode(&Request::Search { params });
    let asks = peers.into_iter().map(|peer| {
        let (mesh, request, answers) = (mesh.clone(), request.clone(), answers.clone());
        async move {
            let (reply, response) = oneshot::channel();
            let cmd = mesh::Command::SendDirect {
                proto: mesh::Proto::Directory,
                peer,
                data: request,
                reply,
            };
            if mesh.send(cmd).await.is_err() {
                return;
            }
            if let Ok(Ok(bytes)) = response.await
                && let Ok(Response::Hits { hits }) = Response::decode(&bytes)
                && !hits.is_empty()
            {
                let _ = answers.send((peer.to_string(), hits)).await;
            }
        }
    });
    futures::future::join_all(asks).await;
}

/// A mesh event for the directory: a gossip ask, or a request on `/agora/directory/1.0.0`.
pub(super) async fn on_event(shared: Arc<Shared>, event: mesh::Event) {
    let mesh = shared.wiring.mesh.clone();
    match event {
        mesh::Event::Gossip {
            data,
            source,
            id,
            propagation_source,
            needs_verdict,
            ..
        } => {
            let ask = Ask::decode(&data);
            if needs_verdict {
                let acceptance = if ask.is_ok() {
                    MessageAcceptance::Accept
                } else {
                    MessageAcceptance::Reject
                };
                let _ = mesh
                    .send(mesh::Command::Validated {
                        id,
                        propagation_source,
                        acceptance,
                    })
                    .await;
            }
            let (Ok(ask), Some(asker)) = (ask, source) else {
                return;
            };
            if asker.to_string() == shared.wiring.peer_id {
                return;
            }
            let Ok(_permit) = shared.fanout.answering.try_acquire() else {
                return;
            };
            let hits = super::search_local(&shared, &ask.params).await;
            if hits.is_empty() {
                return;
            }
            let (reply, done) = oneshot::channel();
            let answer = Request::Answer {
                ask_id: ask.ask_id,
                hits,
            };
            let cmd = mesh::Command::SendDirect {
                proto: mesh::Proto::Directory,
                peer: asker,
                data: ask::encode(&answer),
                reply,
            };
            if mesh.send(cmd).await.is_ok() {
                let _ = done.await;
            }
        }
        mesh::Event::Direct {
            peer,
            data,
            channel,
            ..
        } => {
            let response = match Request::decode(&data) {
                Ok(Request::Search { params }) => match shared.fanout.answering.try_acquire() {
                    Ok(_permit) => Response::Hits {
                        hits: super::search_local(&shared, &params).await,
                    },
                    Err(_) => Response::Refused {
                        reason: "busy".into(),
                    },
                },
                Ok(Request::Answer { ask_id, hits }) => {
                    let waiting = shared.fanout.waiting.lock().get(&ask_id).cloned();
                    if let Some(tx) = waiting {
                        let _ = tx.try_send((peer.to_string(), hits));
                    }
                    Response::Ack
                }
                Err(e) => Response::Refused {
                    reason: e.to_string(),
                },
            };
            let _ = mesh
                .send(mesh::Command::Respond {
                    proto: mesh::Proto::Directory,
                    channel,
                    data: ask::encode(&response),
                })
                .await;
        }
        _ => {}
    }
}

/// Provides the words of the capabilities of what this node hosts (at most
/// `agora_directory::ask::MAX_PROVIDED`), and stops providing the words no longer there.
pub(super) async fn provide(shared: &Shared, words: BTreeSet<String>) {
    let (start, stop): (Vec<String>, Vec<String>) = {
        let mut provided = shared
            .fanout
            .provided
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let start = words.difference(&provided).cloned().collect();
        let stop = provided.difference(&words).cloned().collect();
        *provided = words;
        (start, stop)
    };
    let mesh = &shared.wiring.mesh;
    for w in stop {
        let _ = mesh
            .send(mesh::Command::StopProviding(ask::provider_key(&w)))
            .await;
    }
    for w in start {
        let _ = mesh
            .send(mesh::Command::StartProviding(ask::provider_key(&w)))
            .await;
    }
}
