//! The Memory primitive (`memory.*`): distributed semantic memory across the mesh.
//!
//! Spec (`hyperspace-gossiping-agents-protocol.txt`): §4.4 "Memory Primitive" (750 virtual
//! nodes, 3× replication, SHA-256 routing, the six methods and their shapes), §2.1 topic
//! `hyperspace/crdt/sync/memory`, §8 −32007 "Replication Failed", §9.3 "Memory encryption at
//! rest" and "GDPR-compliant data deletion". The sans-IO pieces (ring, records, parameters,
//! merge of partial results, last-writer-wins, wire messages, anti-entropy digests) are
//! `agora_hyperspace::memory`; decisions are in `docs/hyperspace-wire.md` "Memory" and
//! `docs/node.md` "Memory".
//!
//! | module | owns |
//! |---|---|
//! | this one | the memory task, its inputs and wiring: heartbeats, the rounds' timing, the status section |
//! | `calls` | the JSON-RPC methods (`memory.*`): embedding, replication, finding, searching |
//! | `peer` | node-to-node requests (`/agora/memory/1.0.0`) |
//! | `sync` | gossip on the sync topic, anti-entropy rounds, re-replication |
//! | `members` | the members of this node's ring view (signed heartbeats, expiry, suspicion) |
//! | `shard` | the memories this node holds: redb table `hs_memories`, the in-memory table, one vector index per embedder |
//! | `vault` | encryption at rest (XChaCha20-Poly1305, key file `memory.key`) |
//! | `embedders` | the embedders (all-MiniLM-L6-v2 when installed, the lexical fallback) |
//!
//! Work that costs CPU runs on threads, never on an async task: embeddings and vector searches
//! on the memory worker pool ([`Settings::workers`] threads, each call within
//! [`Settings::budget`]), so that `state.*` and `guard.*` calls, which the Hyperspace
//! service answers on its own task, are never behind an embedding; the anti-entropy scan (one
//! owner lookup per held memory and the digests, about 0.1 s at 100,000) on one background
//! worker of its own at a lowered priority, so that it never takes a worker from a call nor
//! the CPU from one that is running.
//!
//! Writes: the node that takes `memory.store` embeds once, builds the record (its id
//! `mem-<24 hex>`, version `(now, this node)`) and sends it to the key's owners; it answers when
//! `min(3, members)` of them hold it durably, `members` counted after the attempt (an owner that
//! did not answer is suspected and leaves the view, so a node that just died does not fail every
//! write until its heartbeat expires). Fewer → −32007 with `data {required, acknowledged}`, and
//! the write is undone: a tombstone newer than the record goes to the owners that took it, so
//! nothing is half visible. Deletes and tier changes are versioned entries replicated the same
//! way and also gossiped (signed v2 envelopes) on the sync topic.
//!
//! Bounds on other nodes: a node-to-node request is decoded against the same size limits as a
//! call ([`MemoryLimits`]); each peer may send [`Settings::peer_rate`] requests per second
//! (bursts of twice as many) with at most `PEER_IN_FLIGHT` of them in flight, and all peers
//! share `PEER_REQUESTS` slots (calls have their own `IN_FLIGHT`). A request beyond any of
//! these is answered at once with an `Error` (−32003, "Rate Limited: …"), never queued. A peer
//! writing through a batch of up to 128 stores at once is never refused; beyond that its writes
//! may come back −32007.

mod calls;
mod embedders;
mod members;
mod peer;
mod shard;
mod sync;
mod vault;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agora_bucket::{Decision, RateConfig, RateLimiter};
use agora_hyperspace::jsonrpc::{RpcCode, RpcError};
use agora_hyperspace::memory as methods;
use agora_hyperspace::memory::params::{
    ArchiveParams, DeleteParams, GetParams, ListParams, MemoryLimits, SearchParams, StoreParams,
};
use agora_hyperspace::memory::record::{
    Entry, MemoryRecord, Tier, Tombstone, Version, new_memory_id,
};
use agora_hyperspace::memory::search::{SearchHit, merge_hits};
use agora_hyperspace::memory::sync::{SyncLists, VersionMap, Versions, diff};
use agora_hyperspace::memory::wire::{MemoryRequest, MemoryResponse};
use ed25519_dalek::SigningKey;
use futures::future::join_all;
use libp2p::PeerId;
use libp2p::request_response::ResponseChannel;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::time::Instant;

pub use embedders::{EmbedderChoice, Embedders};
use members::Members;
use shard::Shard;
use vault::Vault;

use super::guard::{LongCallSettings, LongCalls};
use super::random_hex;
use super::service::{Counters, PeerLink, Unanswered, internal, invalid, spawn_call};
use crate::call::{Call, Principal};
use crate::clock::now_ms;
use crate::config::Config;
use crate::mesh;
use crate::routes::{self, CallRoute, Delivery, EventKey, EventRoute};
use crate::store::Store;

/// The gossip topic of memory synchronisation (spec §2.1).
pub const SYNC_TOPIC: &str = agora_hyperspace::memory::SYNC_TOPIC;
/// Replication factor (spec §4.4: primary + 2).
pub const REPLICAS: usize = agora_hyperspace::memory::ring::REPLICAS;
/// Memory calls handled at once; beyond, −32003.
const IN_FLIGHT: usize = 256;
/// Node-to-node requests handled at once, all peers together (each at most 1 MiB + 4 KiB: a
/// bound of about 256 MiB of requests held); beyond, an `Error` (−32003) answer.
const PEER_REQUESTS: usize = 256;
/// Node-to-node requests of one peer handled at once; beyond, an `Error` (−32003) answer, so
/// one peer cannot take every slot of [`PEER_REQUESTS`]. Above the 64 writes of a batch of
/// stores (the first cap, 32, refused the puts of a 64-store batch on a quiet machine).
const PEER_IN_FLIGHT: usize = 128;
/// Peers whose request rate is tracked at once (the longest idle are forgotten first).
const PEER_RATE_KEYS: usize = 4_096;
/// Members asked for a memory none of its owners (in this node's view) holds.
const FALLBACK_ASKS: usize = 8;
/// A search that takes this long is logged with the time of each of its stages.
const SLOW_SEARCH: Duration = Duration::from_millis(50);
/// How long an anti-entropy scan may wait for the background worker and run (a scan of
/// 100,000 memories takes about a tenth of a second on an idle core).
const SCAN_BUDGET: Duration = Duration::from_secs(30);
/// Versions per page of an anti-entropy exchange.
const VERSIONS_PAGE: u32 = 2_000;
/// Entries pushed or pulled concurrently in an anti-entropy exchange.
const SYNC_FANOUT: usize = 8;

/// How the memory service runs (`[memory]` in `agora.toml`; `docs/node.md` "Memory").
#[derive(Debug, Clone)]
pub struct Settings {
    /// Does this node hold memories (join the ring)? Default true.
    pub serve: bool,
    /// Which embedder embeds new memories and queries.
    pub embedder: EmbedderChoice,
    /// Where the MiniLM model's files are (`<data>/models/all-minilm-l6-v2`).
    pub model_dir: PathBuf,
    /// Worker threads for embeddings and searches. Default 2.
    pub workers: usize,
    /// How long one embedding or search may wait for a worker and run. Default 5 s.
    pub budget: Duration,
    /// Most memories (live and tombstones) this node holds. Default 200,000.
    pub max_memories: usize,
    /// Size limits of calls.
    pub limits: MemoryLimits,
    /// How long a write waits for its replicas. Default 3 s.
    pub replicate_timeout: Duration,
    /// How long a search, list or get waits for other members. Default 2 s.
    pub gather_timeout: Duration,
    /// How often a full anti-entropy round runs. Default 15 s.
    pub sync_interval: Duration,
    /// Node-to-node requests per second accepted from one peer (bursts of twice as many);
    /// beyond, an `Error` (−32003) answer. Default 2,000.
    pub peer_rate: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            serve: true,
            embedder: EmbedderChoice::Auto,
            model_dir: PathBuf::from("models").join("all-minilm-l6-v2"),
            workers: 2,
            budget: Duration::from_secs(5),
            max_memories: 200_000,
            limits: MemoryLimits::default(),
            replicate_timeout: Duration::from_secs(3),
            gather_timeout: Duration::from_secs(2),
            sync_interval: Duration::from_secs(15),
            peer_rate: 2_000.0,
        }
    }
}

/// Inputs of the memory task.
#[derive(Debug)]
pub enum Input {
    /// A `memory.*` JSON-RPC call.
    Call(Call),
    /// A node-to-node request on `/agora/memory/1.0.0`.
    Peer(routes::Request),
    /// A verified envelope from the sync topic.
    Gossip(Vec<u8>),
    /// Report the service's state (`/status` `memory`).
    Status(oneshot::Sender<Value>),
}

/// The calls this service answers (`memory.*`).
pub fn call_route(tx: &mpsc::Sender<Input>) -> CallRoute {
    CallRoute::new(&["memory."], &[&methods::METHODS], tx, Input::Call)
}

/// The mesh events this service owns: the sync topic (a full queue loses a sync message, which
/// anti-entropy makes up for) and requests on `/agora/memory/1.0.0`.
pub fn event_routes(tx: &mpsc::Sender<Input>) -> Vec<EventRoute> {
    vec![
        EventRoute::new(
            EventKey::Topic(SYNC_TOPIC),
            tx,
            Delivery::DropWhenFull,
            |e| routes::gossip(e).map(|g| Input::Gossip(g.data)),
        ),
        EventRoute::new(
            EventKey::Proto(mesh::Proto::Memory),
            tx,
            Delivery::Wait,
            |e| routes::request(e).map(Input::Peer),
        ),
    ]
}

/// What the memory task needs from the node.
#[derive(Debug)]
pub struct Wiring {
    /// This node's PeerId.
    pub peer_id: String,
    /// The node's key (signs heartbeats and sync messages).
    pub key: SigningKey,
    /// Commands to the mesh.
    pub mesh: mpsc::Sender<mesh::Command>,
}

/// A message on the sync topic (the `d` of a v2 envelope signed by its sender).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
enum SyncMessage {
    /// The sender serves memory.
    Member {
        /// Embedders the sender can embed with.
        embedders: Vec<String>,
        /// Memories (live and tombstones) the sender holds; for operators' views only, absent
        /// from older senders.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        held: Option<u64>,
    },
    /// A memory was deleted.
    Delete {
        /// Its tombstone.
        tombstone: Tombstone,
    },
    /// A memory changed tier.
    Tier {
        /// Memory id.
        id: String,
        /// New tier.
        tier: Tier,
        /// Version of the change.
        version: Version,
    },
}

struct Shared {
    me: String,
    key: SigningKey,
    mesh: mpsc::Sender<mesh::Command>,
    shard: Shard,
    members: Mutex<Members>,
    embedders: Embedders,
    pool: LongCalls,
    settings: Settings,
    in_flight: Arc<Semaphore>,
    /// Slots of node-to-node requests.
    peer_slots: Arc<Semaphore>,
    /// Node-to-node requests in flight, by peer (entries at zero are removed).
    peer_in_flight: Mutex<HashMap<PeerId, usize>>,
    counters: Counters,
    /// Requests and responses on `/agora/memory/1.0.0`.
    link: PeerLink,
    /// The view changed (a heartbeat, a failure) and no round has run since.
    ring_dirty: AtomicBool,
    /// Anti-entropy's version lists, made on the background pool with the shard's generation,
    /// snapshot and the ring's members they were made from: a round with no write and no change
    /// of view since the last one does nothing, one after writes walks only the changed entries.
    versions_cache: Mutex<Option<CachedVersions>>,
    /// Held while the lists are made, so that a round and the requests of peers that arrive
    /// meanwhile wait for one scan instead of starting their own.
    versions_scan: tokio::sync::Mutex<()>,
    /// One low-priority worker for background scans ([`LongCallSettings::background`]): they
    /// never hold a worker of [`Shared::pool`], which embeds and searches for calls.
    sync_pool: LongCalls,
    /// What the last complete anti-entropy round found: (when, in ms since the epoch, how many
    /// memories held here another owner lacked or held older before the round repaired them).
    last_check: Mutex<Option<(u64, usize)>>,
}

/// Anti-entropy's lists and what they were made from.
#[derive(Debug)]
struct CachedVersions {
    /// The shard's generation read before its snapshot was taken.
    generation: u64,
    /// The ring's members.
    members: Vec<String>,
    /// The shard's versions the lists were made from: the next lists are this one's update by
    /// the difference to the next snapshot.
    snapshot: VersionMap,
    lists: Arc<SyncLists>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory").field("me", &self.me).finish()
    }
}

/// The memory service before it runs: the shard is loaded and the embedder chosen.
#[derive(Debug)]
pub struct Prepared {
    shared: Arc<Shared>,
}

impl Prepared {
    /// What `/status` and the start-up line say of the embedder.
    pub fn embedder(&self) -> String {
        self.shared.embedders.default_id().to_owned()
    }

    /// The embedder of new memories, for other services (learning's near-duplicate bullets).
    pub fn default_embedder(&self) -> Arc<dyn agora_embed::Embedder> {
        self.shared.embedders.default_embedder()
    }
}

/// Loads the shard (a blocking read of every stored memory) and the embedders. Call it off the
/// runtime's workers.
pub fn prepare(
    data_dir: &std::path::Path,
    store: Store,
    settings: Settings,
    peer_id: &str,
    key: SigningKey,
    mesh: mpsc::Sender<mesh::Command>,
) -> Result<Prepared, String> {
    let vault = Vault::open(data_dir).map_err(|e| e.to_string())?;
    let (shard, bad) =
        Shard::load(store, vault, settings.max_memories).map_err(|e| e.to_string())?;
    if bad > 0 {
        tracing::warn!(
            rows = bad,
            "memory rows that do not open with this node's key were skipped"
        );
    }
    let embedders = Embedders::load(&settings.embedder, &settings.model_dir)?;
    let pool = LongCalls::named(
        "memory",
        LongCallSettings {
            workers: settings.workers,
            budget: settings.budget,
            ..LongCallSettings::default()
        },
    );
    let sync_pool = LongCalls::named(
        "memory-sync",
        LongCallSettings {
            workers: 1,
            budget: SCAN_BUDGET,
            background: true,
            ..LongCallSettings::default()
        },
    );
    Ok(Prepared {
        shared: Arc::new(Shared {
            me: peer_id.to_owned(),
            key,
            link: PeerLink {
                mesh: mesh.clone(),
                proto: mesh::Proto::Memory,
            },
            mesh,
            shard,
            members: Mutex::new(Members::new(peer_id, settings.serve)),
            embedders,
            pool,
            in_flight: Arc::new(Semaphore::new(IN_FLIGHT)),
            peer_slots: Arc::new(Semaphore::new(PEER_REQUESTS)),
            peer_in_flight: Mutex::new(HashMap::new()),
            settings,
            counters: Counters::default(),
            ring_dirty: AtomicBool::new(false),
            versions_cache: Mutex::new(None),
            versions_scan: tokio::sync::Mutex::new(()),
            sync_pool,
            last_check: Mutex::new(None),
        }),
    })
}

impl Settings {
    /// The settings `config` asks for (`[memory]`; models under the data directory).
    pub fn from_config(config: &Config) -> Result<Self, String> {
        let m = &config.memory;
        Ok(Self {
            serve: m.serve,
            embedder: EmbedderChoice::from_config(
                &m.embedder,
                m.base_url.as_deref(),
                m.model.as_deref(),
                m.api_key.as_deref(),
            )?,
            model_dir: agora_embed::model_dir(&config.data),
            workers: m.workers,
            max_memories: m.max_memories,
            peer_rate: m.peer_rate,
            ..Self::default()
        })
    }
}

/// The running memory service, as the node holds it.
#[derive(Debug)]
pub struct Started {
    /// Its input.
    pub tx: mpsc::Sender<Input>,
    /// The embedder of new memories (learning uses it for near-duplicate bullets).
    pub embedder: Arc<dyn agora_embed::Embedder>,
}

/// Starts the memory service: its settings from `config`, [`prepare`] on a blocking thread (it
/// reads every stored memory), then [`run`] on a task of its own.
pub async fn start(config: &Config, store: Store, wiring: Wiring) -> Result<Started, String> {
    let settings = Settings::from_config(config)?;
    let data = config.data.clone();
    let Wiring { peer_id, key, mesh } = wiring;
    let memory =
        tokio::task::spawn_blocking(move || prepare(&data, store, settings, &peer_id, key, mesh))
            .await
            .map_err(|e| e.to_string())??;
    let embedder = memory.embedder();
    if embedder == agora_embed::Lexical::ID {
        tracing::warn!(
            "memory: no MiniLM model installed, embedding with the built-in lexical embedder \
             (install the model with `agora memory install-model`)"
        );
    } else {
        tracing::info!(embedder, "memory embedder");
    }
    let embedder = memory.default_embedder();
    let (tx, rx) = mpsc::channel(4096);
    tokio::spawn(run(memory, rx));
    Ok(Started { tx, embedder })
}

/// Runs the memory task until `inputs` closes.
pub async fn run(prepared: Prepared, mut inputs: mpsc::Receiver<Input>) {
    let shared = prepared.shared;
    if shared.settings.serve {
        let _ = shared
            .mesh
            .send(mesh::Command::Subscribe(SYNC_TOPIC.to_owned()))
            .await;
    }
    let mut beat = tokio::time::interval(Duration::from_secs(1));
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_heartbeat = 0u64;
    let mut last_sync = Instant::now();
    let mut ring_changed: Option<Instant> = None;
    let syncing = Arc::new(tokio::sync::Mutex::new(()));
    let started = Instant::now();
    let mut peer_rates = RateLimiter::new(RateConfig {
        rate: shared.settings.peer_rate,
        burst: shared.settings.peer_rate * 2.0,
        max_keys: PEER_RATE_KEYS,
    });
    loop {
        let input = tokio::select! {
            input = inputs.recv() => match input {
                Some(input) => input,
                None => break,
            },
            _ = beat.tick() => {
                let now = now_ms();
                if shared.settings.serve && now.saturating_sub(last_heartbeat) >= members::HEARTBEAT_MS {
                    last_heartbeat = now;
                    shared.publish(&SyncMessage::Member {
                        embedders: shared.embedders.ids(),
                        held: Some(shared.shard.len() as u64),
                    }).await;
                }
                if shared.lock_members().expire(now) {
                    ring_changed.get_or_insert_with(Instant::now);
                }
                if shared.take_ring_change() {
                    ring_changed.get_or_insert_with(Instant::now);
                }
                // A round soon after the view changed (re-replication), else every interval.
                let due = ring_changed.is_some_and(|at| at.elapsed() >= Duration::from_secs(2))
                    || last_sync.elapsed() >= shared.settings.sync_interval;
                if due && let Ok(guard) = Arc::clone(&syncing).try_lock_owned() {
                    ring_changed = None;
                    last_sync = Instant::now();
                    let s = Arc::clone(&shared);
                    tokio::spawn(async move {
                        s.anti_entropy().await;
                        drop(guard);
                    });
                }
                continue;
            }
        };
        match input {
            Input::Call(call) => {
                let s = Arc::clone(&shared);
                spawn_call(
                    &shared.in_flight,
                    "memory",
                    call,
                    async move |who, method, params| s.call(&who, &method, Some(&params)).await,
                );
            }
            Input::Peer(routes::Request {
                peer,
                data,
                channel,
            }) => {
                let now = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                let refused = match peer_rates.check(&peer.to_string(), now) {
                    Decision::Allowed => None,
                    Decision::Limited {
                        retry_after_ms,
                        anomaly,
                    } => {
                        shared.count("peer_requests_limited");
                        if anomaly {
                            tracing::warn!(peer_id = %peer, rate = shared.settings.peer_rate, "a peer sends memory requests faster than the per-peer rate");
                        }
                        Some(format!(
                            "Rate Limited: more than {} memory requests per second from this peer; retry in {retry_after_ms} ms",
                            shared.settings.peer_rate
                        ))
                    }
                };
                let s = Arc::clone(&shared);
                let permits = refused.map_or_else(
                    || {
                        let slot = PeerSlot::take(&shared, peer).ok_or_else(|| {
                            shared.count("peer_requests_limited");
                            format!("Rate Limited: {PEER_IN_FLIGHT} memory requests from this peer in flight")
                        })?;
                        let permit = Arc::clone(&shared.peer_slots)
                            .try_acquire_owned()
                            .map_err(|_| "Rate Limited: this node is busy".to_owned())?;
                        Ok((slot, permit))
                    },
                    Err,
                );
                tokio::spawn(async move {
                    let response = match permits {
                        Ok(_permits) => s.peer_request(&peer, &data).await,
                        Err(message) => MemoryResponse::Error {
                            code: RpcCode::RATE_LIMITED.0,
                            message,
                        },
                    };
                    s.respond(channel, &response).await;
                });
            }
            Input::Gossip(data) => {
                let s = Arc::clone(&shared);
                tokio::spawn(async move { s.gossip(&data).await });
            }
            Input::Status(reply) => {
                let _ = reply.send(shared.status());
            }
        }
    }
}

/// One of a peer's [`PEER_IN_FLIGHT`] request slots, given back on drop.
struct PeerSlot {
    shared: Arc<Shared>,
    peer: PeerId,
}

impl PeerSlot {
    /// A slot of `peer`, or `None` when all of its slots are taken.
    fn take(shared: &Arc<Shared>, peer: PeerId) -> Option<Self> {
        let mut map = shared
            .peer_in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = map.entry(peer).or_insert(0);
        if *n >= PEER_IN_FLIGHT {
            return None;
        }
        *n += 1;
        Some(Self {
            shared: Arc::clone(shared),
            peer,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut map = self
            .shared
            .peer_in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = map.get_mut(&self.peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.peer);
            }
        }
    }
}

fn replication_failed(required: usize, acknowledged: usize) -> RpcError {
    RpcError::from_code(RpcCode::REPLICATION_FAILED)
        .with_message(format!(
            "Replication Failed: {acknowledged} of {required} replicas hold the write"
        ))
        .with_data(json!({ "required": required, "acknowledged": acknowledged }))
}

fn not_found(id: &str) -> RpcError {
    invalid(format!("no memory {id:?}"))
        .with_data(json!({ "field": "id", "id": id, "reason": "not-found" }))
}

/// The session a caller acts in: a session token is bound to its session (it may name no
/// other); the API key and loopback clients act in whatever session they name.
fn scope(principal: &Principal, named: Option<&str>) -> Result<Option<String>, RpcError> {
    match principal {
        Principal::Session(own) => match named {
            Some(s) if s != own => Err(RpcError::invalid_request()
                .with_message("session token does not grant this session")
                .with_data(json!({ "sessionId": own }))),
            _ => Ok(Some(own.clone())),
        },
        Principal::ApiKey | Principal::Local => Ok(named.map(str::to_owned)),
    }
}

/// Whether `principal` may see `record`.
fn visible(principal: &Principal, record: &MemoryRecord) -> bool {
    match principal {
        Principal::Session(own) => record.session_id.as_deref() == Some(own.as_str()),
        Principal::ApiKey | Principal::Local => true,
    }
}

fn record_json(r: &MemoryRecord) -> Value {
    json!({
        "id": r.id,
        "content": r.content,
        "metadata": r.metadata,
        "peerId": r.peer_id,
        "sessionId": r.session_id,
        "tier": r.tier,
        "createdAt": agora_hyperspace::memory::record::format_time(r.created_at),
        "embedder": r.embedder,
    })
}

impl Shared {
    fn lock_members(&self) -> std::sync::MutexGuard<'_, Members> {
        self.members
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn count(&self, what: &'static str) {
        self.counters.count(what);
    }

    /// Whether a failure or a heartbeat changed the ring since the last call.
    fn take_ring_change(&self) -> bool {
        self.ring_dirty.swap(false, Ordering::Relaxed)
    }

    fn mark_ring_change(&self) {
        self.count("ring_changes");
        self.ring_dirty.store(true, Ordering::Relaxed);
    }

    fn status(&self) -> Value {
        let mut members = self.lock_members();
        let counters = self.counters.json();
        let held = self.shard.len();
        let ring: Vec<Value> = members
            .view()
            .into_iter()
            .map(|(peer, share, theirs)| {
                let me = peer == self.me;
                json!({
                    "peer_id": peer,
                    "share": share,
                    "held": if me { Some(held as u64) } else { theirs },
                    "me": me,
                })
            })
            .collect();
        // Owners per memory in this view; fewer members than the target leave every memory short.
        let owners = REPLICAS.min(members.len());
        let check = *lock_cache(&self.last_check);
        let under_target = if owners < REPLICAS {
            Some(held)
        } else {
            check.map(|(_, lacking)| lacking)
        };
        json!({
            "serve": members.serves(),
            "embedder": self.embedders.default_id(),
            "embedders": self.embedders.ids(),
            "members": members.len(),
            "held": held,
            "ring": ring,
            "replicas": {
                "target": REPLICAS,
                "owners": owners,
                "under_target": under_target,
                "checked_ms": check.map(|(at, _)| at),
            },
            "indexes": self.shard.index_status(),
            "counters": counters,
        })
    }

    fn count_n(&self, what: &'static str, n: usize) {
        self.counters.add(what, n as u64);
    }
}

fn lock_cache<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn hit_json(h: &SearchHit) -> Value {
    serde_json::to_value(h).unwrap_or(Value::Null)
}
