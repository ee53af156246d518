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
//! were until the next round.
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

use agora_directory::catalog::{self, NodeFacts};
use agora_directory::rpc::{METHODS, SEARCH, SEARCH_PARAMS, SearchResult};
use agora_directory::{Directory, FeedItem, Hit, SearchParams};
use agora_embed::Embedder;
use agora_hyperspace::jsonrpc::RpcError;
use agora_hyperspace::params::parse_params;
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::call::Call;
use crate::clock::now_ms;
use crate::routes::CallRoute;
use crate::{agh, ans, hyperspace};

/// How often the sources are asked for their lists.
pub const REFRESH: Duration = Duration::from_secs(1);
/// How long a source may take to answer.
pub const ASK_WAIT: Duration = Duration::from_secs(2);
/// Searches running at once (each on a blocking thread).
pub const SEARCHES: usize = 8;
/// Calls waiting for the service.
const QUEUE: usize = 64;
/// Texts embedded per embedder call.
const EMBED_BATCH: usize = 32;

/// Requests to the directory service.
#[derive(Debug)]
pub enum Input {
    /// A `directory.*` call.
    Call(Call),
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
}

/// Starts the service; its calls come through [`call_route`].
pub fn start(wiring: Wiring) -> mpsc::Sender<Input> {
    let (tx, mut rx) = mpsc::channel::<Input>(QUEUE);
    let config = agora_directory::Config::for_embedder(wiring.embedder.id());
    let shared = Arc::new(Shared {
        wiring,
        index: RwLock::new(Directory::new(config)),
        searches: Semaphore::new(SEARCHES),
    });
    tokio::spawn(async move {
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
    let _ = tokio::task::spawn_blocking(move || {
        let ans = worker.wiring.ans.directory_feed(&worker.wiring.peer_id);
        let feeds = [("agh", agh), ("hyperspace", hs), ("ans", Some(ans))];
        for (feed, items) in feeds {
            let Some(mut items) = items else { continue };
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
        write(&worker.index).expire(now_ms());
    })
    .await;
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

/// `directory.search`.
async fn search(shared: &Arc<Shared>, params: Option<&Value>) -> Result<Value, RpcError> {
    let params: SearchParams = parse_params(params.unwrap_or(&Value::Null), &SEARCH_PARAMS)?;
    let query = params.compile().map_err(|e| e.to_rpc())?;
    let _permit = shared
        .searches
        .acquire()
        .await
        .map_err(|_| RpcError::internal_error().with_message("directory stopped"))?;
    let worker = Arc::clone(shared);
    let started = Instant::now();
    let (hits, embedder) = tokio::task::spawn_blocking(move || {
        let embedder = &worker.wiring.embedder;
        let vector = if query.text.is_empty() {
            None
        } else {
            embedder
                .embed(&[query.text.as_str()])
                .ok()
                .and_then(|mut v| v.pop())
        };
        let hits = read(&worker.index).search(&query, vector.as_deref(), now_ms());
        (hits, embedder.id().to_owned())
    })
    .await
    .map_err(|e| RpcError::internal_error().with_message(e.to_string()))?;
    Ok(result(hits, embedder, started, &shared.wiring.peer_id))
}

/// `directory.search`'s result.
fn result(hits: Vec<Hit>, embedder: String, started: Instant, node: &str) -> Value {
    let result = SearchResult {
        count: hits.len(),
        results: hits,
        embedder,
        answered_by: vec![node.to_owned()],
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
