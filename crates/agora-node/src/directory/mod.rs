//! The directory service (issue 33, `docs/directory.md`): one directory behind every face.
//!
//! It owns its task and the index (`agora_directory::Directory`, in memory: every record is
//! rebuilt from its source within a second of a start). Every [`REFRESH`] it asks each source
//! for its whole current list — the AGH service (present peers and their catalogs), the
//! Hyperspace service (tools registered here, on live capability cards, bridged from MCP
//! servers and A2A agents) and the Agent Name Service (its Active agents) — embeds the texts
//! that are new or changed with the node's embedder (MiniLM when installed, else `lexical-v1`)
//! and applies each list as one feed: what a source stops listing is offline, then gone when
//! its TTL ends. A source that does not answer within [`ASK_WAIT`] keeps its records as they
//! were until the next round. Each round also moves a few staged vectors into the HNSW graph
//! and, when one is due (a bulk load, removals past the rebuild fraction), builds a graph on
//! its blocking thread without holding the lock.
//!
//! `directory.search` (JSON-RPC, `GET /directory/search`, `agora directory search`, the `/mcp`
//! face's `agora.directory.search` tool, the dashboard's search box) runs on blocking threads,
//! at most [`SEARCHES`] at once: the query's embedding, then the hybrid BM25 + embedding
//! ranking under a read lock. The task also writes the AI Catalog document
//! (`/.well-known/ai-catalog.json`).
//!
//! Bounded: the calls queue holds 64 (beyond, the call router waits); the index holds at
//! most `agora_directory::Config::max_records` records (new ones beyond are refused and counted
//! in the log); one refresh runs at a time.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use agora_directory::ask::ASK_TOPIC;
use agora_directory::catalog::{self, NodeFacts};
use agora_directory::rpc::{METHODS, SEARCH, SEARCH_PARAMS, SearchResult};
use agora_directory::{Directory, FeedItem, Hit, Scope, SearchParams};
use agora_embed::Embedder;
use agora_hyperspace::jsonrpc::RpcError;
use agora_hyperspace::params::parse_params;
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::call::Call;
use crate::clock::now_ms;
use crate::routes::{CallRoute, Delivery, EventKey, EventRoute};
use crate::{agh, ans, hyperspace, mesh};

pub mod fanout;

/// How often the sources are asked for their lists.
pub const REFRESH: Duration = Duration::from_secs(1);
/// How long a source may take to answer.
pub const ASK_WAIT: Duration = Duration::from_secs(2);
/// Searches running at once (each on a blocking thread).
pub const SEARCHES: usize = 8;
/// Calls waiting for the service.
const QUEUE: usize = 64;
/// Staged vectors put into the graph per round (a few milliseconds each at 100,000 records).
const STAGED_PER_ROUND: usize = 64;
/// Texts embedded per embedder call.
const EMBED_BATCH: usize = 32;

/// Requests to the directory service.
#[derive(Debug)]
pub enum Input {
    /// A `directory.*` call.
    Call(Call),
    /// A gossip ask or a request on `/agora/directory/1.0.0` ([`fanout`]).
    Mesh(mesh::Event),
    /// The AI Catalog document, its URLs under `base_url` (the HTTP face as the client reached
    /// it).
    Catalog {
        /// `http://host:port`.
        base_url: String,
        /// The document.
        reply: oneshot::Sender<Value>,
    },
}

/// What the service needs from the node.
#[derive(Debug)]
pub struct Wiring {
    /// This node's PeerId.
    pub peer_id: String,
    /// The node's embedder (the memory service's).
    pub embedder: Arc<dyn Embedder>,
    /// The AGH service.
    pub agh: mpsc::Sender<agh::Input>,
    /// The Hyperspace service.
    pub hyperspace: mpsc::Sender<hyperspace::Input>,
    /// The Agent Name Service.
    pub ans: Arc<ans::Ans>,
    /// Commands to the mesh (the fan-out).
    pub mesh: mpsc::Sender<mesh::Command>,
    /// How long what left stays listed as offline (`[directory] offline_ttl_secs`), ms: it
    /// replaces every source's own offline TTL but a zero one (gone at once).
    pub offline_ttl_ms: u64,
    /// Whether the HTTP face serves `/mcp` and the A2A Agent Card (listed in the AI Catalog).
    pub faces: (bool, bool),
    /// Bridged A2A agents: `(name, card URL)`.
    pub a2a_agents: Vec<(String, String)>,
}

#[derive(Debug)]
struct Shared {
    wiring: Wiring,
    index: RwLock<Directory>,
    searches: Semaphore,
    fanout: fanout::Fanout,
}

/// Starts the service; its calls come through [`call_route`].
pub fn start(wiring: Wiring) -> mpsc::Sender<Input> {
    let (tx, mut rx) = mpsc::channel::<Input>(QUEUE);
    let config = agora_directory::Config::for_embedder(wiring.embedder.id());
    let shared = Arc::new(Shared {
        wiring,
        index: RwLock::new(Directory::new(config)),
        searches: Semaphore::new(SEARCHES),
        fanout: fanout::Fanout::default(),
    });
    let subscribe = shared.wiring.mesh.clone();
    tokio::spawn(async move {
        let _ = subscribe
            .send(mesh::Command::Subscribe(ASK_TOPIC.to_owned()))
            .await;
        let mut tick = tokio::time::interval(REFRESH);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
        let mut refreshing = false;
        loop {
            tokio::select! {
                input = rx.recv() => match input {
                    Some(Input::Call(call)) => {
                        tokio::spawn(answer(Arc::clone(&shared), call));
                    }
                    Some(Input::Mesh(event)) => {
                        tokio::spawn(fanout::on_event(Arc::clone(&shared), event));
                    }
                    Some(Input::Catalog { base_url, reply }) => {
                        tokio::spawn(write_catalog(Arc::clone(&shared), base_url, reply));
                    }
                    None => break,
                },
                _ = tick.tick(), if !refreshing => {
                    refreshing = true;
                    let (shared, done) = (Arc::clone(&shared), done_tx.clone());
                    tokio::spawn(async move {
                        refresh(shared).await;
                        let _ = done.send(()).await;
                    });
                }
                Some(()) = done_rx.recv() => refreshing = false,
            }
        }
    });
    tx
}

/// The `directory.*` calls, for the call router.
pub fn call_route(tx: &mpsc::Sender<Input>) -> CallRoute {
    CallRoute::new(&["directory."], &[&METHODS], tx, Input::Call)
}

/// The mesh events this service owns: asks on `agora/directory/v1/ask` (dropped when the queue
/// is full: the asker has other nodes) and requests on `/agora/directory/1.0.0`.
pub fn event_routes(tx: &mpsc::Sender<Input>) -> Vec<EventRoute> {
    vec![
        EventRoute::new(
            EventKey::Topic(ASK_TOPIC),
            tx,
            Delivery::DropWhenFull,
            |e| Some(Input::Mesh(e)),
        ),
        EventRoute::new(
            EventKey::Proto(mesh::Proto::Directory),
            tx,
            Delivery::Wait,
            |e| Some(Input::Mesh(e)),
        ),
    ]
}

/// Asks a service for its feed; `None` when it does not answer in time.
async fn ask<I>(
    tx: &mpsc::Sender<I>,
    input: impl FnOnce(oneshot::Sender<Vec<FeedItem>>) -> I,
) -> Option<Vec<FeedItem>> {
    let (reply, answer) = oneshot::channel();
    tx.send(input(reply)).await.ok()?;
    tokio::time::timeout(ASK_WAIT, answer).await.ok()?.ok()
}

/// One round: every source's list, embedded where needed, applied; expired records dropped.
async fn refresh(shared: Arc<Shared>) {
    let w = &shared.wiring;
    let node = w.peer_id.clone();
    let agh = ask(&w.agh, |reply| agh::Input::Directory { node, reply }).await;
    let hs = ask(&w.hyperspace, hyperspace::Input::Directory).await;
    let worker = Arc::clone(&shared);
    let words = tokio::task::spawn_blocking(move || {
        let ans = worker.wiring.ans.directory_feed(&worker.wiring.peer_id);
        let feeds = [("agh", agh), ("hyperspace", hs), ("ans", Some(ans))];
        for (feed, items) in feeds {
            let Some(mut items) = items else { continue };
            for item in &mut items {
                if item.record.ttl_ms > 0 {
                    item.record.ttl_ms = worker.wiring.offline_ttl_ms;
                }
            }
            embed_missing(&worker, &mut items);
            let applied = write(&worker.index).apply_feed(feed, items, now_ms());
            if applied.refused > 0 {
                tracing::warn!(
                    feed,
                    refused = applied.refused,
                    "directory full: new records refused"
                );
            }
        }
        let build = {
            let mut index = write(&worker.index);
            index.expire(now_ms());
            index.index_staged(STAGED_PER_ROUND);
            index.graph_build()
        };
        // A graph build runs here, apart from the lock: searches go on meanwhile.
        if let Some((generation, build)) = build {
            let built = build.run();
            write(&worker.index).finish_graph(generation, built);
        }
        hosted_words(&read(&worker.index), &worker.wiring.peer_id)
    })
    .await;
    if let Ok(words) = words {
        fanout::provide(&shared, words).await;
    }
}

/// The words of the capabilities of the records this node hosts, at most
/// `agora_directory::ask::MAX_PROVIDED` (the most frequent first).
fn hosted_words(index: &Directory, me: &str) -> std::collections::BTreeSet<String> {
    let mut counts: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (r, _) in index.records(now_ms()) {
        if r.provenance.node != me {
            continue;
        }
        for c in &r.capabilities {
            for w in agora_directory::ask::words(c) {
                *counts.entry(w).or_default() += 1;
            }
        }
    }
    let mut ranked: Vec<(String, usize)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked
        .into_iter()
        .take(agora_directory::ask::MAX_PROVIDED)
        .map(|(w, _)| w)
        .collect()
}

/// Embeds the records the index has no vector for (new, or their text changed).
fn embed_missing(shared: &Shared, items: &mut [FeedItem]) {
    let need: Vec<usize> = {
        let index = read(&shared.index);
        (0..items.len())
            .filter(|&i| index.needs_vector(&items[i].record))
            .collect()
    };
    for batch in need.chunks(EMBED_BATCH) {
        let texts: Vec<String> = batch
            .iter()
            .map(|&i| items[i].record.search_text())
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        match shared.wiring.embedder.embed(&refs) {
            Ok(vectors) => {
                for (&i, v) in batch.iter().zip(vectors) {
                    items[i].vector = Some(v);
                }
            }
            Err(e) => tracing::warn!(error = %e, "directory: texts not embedded (keywords only)"),
        }
    }
}

fn read(lock: &RwLock<Directory>) -> std::sync::RwLockReadGuard<'_, Directory> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write(lock: &RwLock<Directory>) -> std::sync::RwLockWriteGuard<'_, Directory> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn answer(shared: Arc<Shared>, call: Call) {
    let outcome = match call.request.method.as_str() {
        SEARCH => search(&shared, call.request.params.as_ref()).await,
        _ => Err(RpcError::method_not_found()),
    };
    let _ = call.reply.send(outcome);
}

/// `directory.search`: this node, then (scope `mesh`) the DHT and a gossip ask.
async fn search(shared: &Arc<Shared>, params: Option<&Value>) -> Result<Value, RpcError> {
    let params: SearchParams = parse_params(params.unwrap_or(&Value::Null), &SEARCH_PARAMS)?;
    let query = params.compile().map_err(|e| e.to_rpc())?;
    let started = Instant::now();
    let local = search_local(shared, &params).await;
    let (hits, nodes) = match query.scope {
        Scope::Local => (local, vec![shared.wiring.peer_id.clone()]),
        Scope::Mesh => fanout::search_mesh(shared, &query, &params, local).await,
    };
    Ok(result(
        hits,
        shared.wiring.embedder.id().to_owned(),
        started,
        nodes,
    ))
}

/// This node's hits for `params` (none when they do not compile): the query's embedding and
/// the ranking, on a blocking thread, at most [`SEARCHES`] at once.
async fn search_local(shared: &Arc<Shared>, params: &SearchParams) -> Vec<Hit> {
    let Ok(query) = params.compile() else {
        return Vec::new();
    };
    let Ok(_permit) = shared.searches.acquire().await else {
        return Vec::new();
    };
    let worker = Arc::clone(shared);
    tokio::task::spawn_blocking(move || {
        let embedder = &worker.wiring.embedder;
        let vector = if query.text.is_empty() {
            None
        } else {
            embedder
                .embed(&[query.text.as_str()])
                .ok()
                .and_then(|mut v| v.pop())
        };
        read(&worker.index).search(&query, vector.as_deref(), now_ms())
    })
    .await
    .unwrap_or_default()
}

/// `directory.search`'s result.
fn result(hits: Vec<Hit>, embedder: String, started: Instant, nodes: Vec<String>) -> Value {
    let result = SearchResult {
        count: hits.len(),
        results: hits,
        embedder,
        answered_by: nodes,
        took_ms: (started.elapsed().as_secs_f64() * 1e6).round() / 1e3,
    };
    serde_json::to_value(result).unwrap_or(Value::Null)
}

async fn write_catalog(shared: Arc<Shared>, base_url: String, reply: oneshot::Sender<Value>) {
    let worker = Arc::clone(&shared);
    let doc = tokio::task::spawn_blocking(move || {
        let w = &worker.wiring;
        let facts = NodeFacts {
            peer_id: &w.peer_id,
            base_url: &base_url,
            version: env!("CARGO_PKG_VERSION"),
            mcp: w.faces.0,
            a2a: w.faces.1,
            a2a_agents: &w.a2a_agents,
        };
        let index = read(&worker.index);
        let now = now_ms();
        let doc = catalog::build(&facts, index.records(now).map(|(r, _)| r));
        serde_json::to_value(doc).unwrap_or(Value::Null)
    })
    .await
    .unwrap_or(Value::Null);
    let _ = reply.send(doc);
}
