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
//! | this one | the memory task: JSON-RPC calls, node-to-node requests (`/agora/memory/1.0.0`), gossip on the sync topic, heartbeats, re-replication and anti-entropy rounds |
//! | [`members`] | the members of this node's ring view (signed heartbeats, expiry, suspicion) |
//! | [`shard`] | the memories this node holds: redb table `hs_memories`, the in-memory table, one vector index per embedder |
//! | [`vault`] | encryption at rest (XChaCha20-Poly1305, key file `memory.key`) |
//! | [`embedders`] | the embedders (all-MiniLM-L6-v2 when installed, the lexical fallback) |
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
//! (bursts of twice as many) with at most [`PEER_IN_FLIGHT`] of them in flight, and all peers
//! share [`PEER_REQUESTS`] slots (calls have their own [`IN_FLIGHT`]). A request beyond any of
//! these is answered at once with an `Error` (−32003, "Rate Limited: …"), never queued. A peer
//! writing through a batch of up to 128 stores at once is never refused; beyond that its writes
//! may come back −32007.

mod embedders;
mod members;
mod shard;
mod vault;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agora_agtp::ratelimit::{Decision, RateConfig, RateLimiter};
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
use super::service::{Counters, PeerLink, Unanswered, internal, invalid, spawn_call};
use super::{now_ms, random_hex};
use crate::call::{Call, Principal};
use crate::config::Config;
use crate::mesh;
use crate::routes::{self, CallRoute, Delivery, EventKey, EventRoute, Sink};
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
    Peer {
        /// The requesting node.
        peer: PeerId,
        /// The request's bytes.
        data: Vec<u8>,
        /// Where the response goes.
        channel: ResponseChannel<Vec<u8>>,
    },
    /// A verified envelope from the sync topic.
    Gossip(Vec<u8>),
    /// Report the service's state (`/status` `memory`).
    Status(oneshot::Sender<Value>),
}

impl Input {
    fn peer(r: routes::Request) -> Self {
        Self::Peer {
            peer: r.peer,
            data: r.data,
            channel: r.channel,
        }
    }
}

/// The calls this service answers (`memory.*`).
pub fn call_route(tx: &mpsc::Sender<Input>) -> CallRoute {
    CallRoute {
        prefixes: &["memory."],
        methods: &[&methods::METHODS],
        sink: Sink::new(tx.clone(), Delivery::Wait, |c| Some(Input::Call(c))),
    }
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
            |e| routes::request(e).map(Input::peer),
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
                m.endpoint.base_url.as_deref(),
                m.endpoint.model.as_deref(),
                m.endpoint.api_key.as_deref(),
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
            Input::Peer {
                peer,
                data,
                channel,
            } => {
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
    invalid(format!("no memory {id:?}")).with_data(json!({ "id": id, "reason": "not-found" }))
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

    async fn publish(&self, message: &SyncMessage) {
        let Ok(d) = serde_json::to_string(message) else {
            return;
        };
        match agora_hyperspace::envelope::sign(&self.key, SYNC_TOPIC, now_ms(), &random_hex(16), &d)
        {
            Ok(env) => {
                let _ = self
                    .mesh
                    .send(mesh::Command::Publish {
                        topic: SYNC_TOPIC.to_owned(),
                        data: env.into_bytes(),
                    })
                    .await;
            }
            Err(e) => tracing::warn!(error = %e, "cannot sign a memory sync message"),
        }
    }

    async fn respond(&self, channel: ResponseChannel<Vec<u8>>, response: &MemoryResponse) {
        self.link.respond(channel, response.encode()).await;
    }

    /// Sends `request` to `peer`; a peer that cannot be reached is suspected (it leaves the view
    /// until its next heartbeat).
    async fn request(
        &self,
        peer: &str,
        request: &MemoryRequest,
        timeout: Duration,
    ) -> Result<MemoryResponse, String> {
        let target: PeerId = peer.parse().map_err(|_| format!("bad peer id {peer}"))?;
        let outcome = match self.link.request(target, request.encode(), timeout).await {
            Ok(bytes) => MemoryResponse::decode(&bytes, &self.settings.limits)
                .map_err(|e| format!("bad answer: {e}")),
            Err(e @ Unanswered::ShuttingDown) => return Err(e.to_string()),
            Err(Unanswered::Failed(why)) => Err(why),
        };
        if outcome.is_err() {
            self.count("requests_failed");
            if self.lock_members().suspect(peer, now_ms()) {
                self.mark_ring_change();
            }
        }
        outcome
    }

    /// Embeds `text` with the default embedder on the worker pool.
    async fn embed(&self, method: &str, text: String) -> Result<(String, Vec<f32>), RpcError> {
        let embedder = self.embedders.default_embedder();
        let deadline = Instant::now() + self.settings.budget;
        self.pool
            .run(method, deadline, move || {
                let mut v = embedder
                    .embed(&[text.as_str()])
                    .map_err(|e| internal(format!("embedding failed: {e}")))?;
                let vector = v.pop().ok_or_else(|| internal("embedding failed"))?;
                Ok((embedder.id().to_owned(), vector))
            })
            .await
    }

    async fn call(
        self: &Arc<Self>,
        principal: &Principal,
        method: &str,
        params: Option<&Value>,
    ) -> Result<Value, RpcError> {
        let null = Value::Null;
        let p = params.unwrap_or(&null);
        let limits = &self.settings.limits;
        match method {
            methods::STORE => self.store(principal, StoreParams::parse(p, limits)?).await,
            methods::SEARCH => {
                self.search(principal, SearchParams::parse(p, limits)?)
                    .await
            }
            methods::GET => {
                let params = GetParams::parse(p, limits)?;
                match self.find(&params.id, true).await {
                    Some(Entry::Live(r)) if visible(principal, &r) => Ok(record_json(&r)),
                    _ => Err(not_found(&params.id)),
                }
            }
            methods::LIST => self.list(principal, ListParams::parse(p, limits)?).await,
            methods::DELETE => {
                self.delete(principal, DeleteParams::parse(p, limits)?)
                    .await
            }
            methods::ARCHIVE => {
                self.archive(principal, ArchiveParams::parse(p, limits)?)
                    .await
            }
            _ => Err(RpcError::method_not_found()
                .with_data(Value::String(format!("unknown method {method:?}")))),
        }
    }

    async fn store(
        self: &Arc<Self>,
        principal: &Principal,
        params: StoreParams,
    ) -> Result<Value, RpcError> {
        let session_id = scope(principal, params.session_id.as_deref())?;
        let (embedder, vector) = self.embed("memory.store", params.content.clone()).await?;
        let mut random = [0u8; 12];
        getrandom::fill(&mut random).map_err(|_| internal("no system randomness"))?;
        let id = new_memory_id(random);
        let owners = self.owners(&id);
        let Some(primary) = owners.first().cloned() else {
            return Err(replication_failed(1, 0));
        };
        let now = now_ms();
        let record = MemoryRecord {
            id: id.clone(),
            content: params.content,
            session_id,
            metadata: params.metadata,
            tier: params.tier,
            created_at: now,
            embedder,
            vector,
            peer_id: primary.clone(),
            version: Version {
                timestamp_ms: now,
                peer_id: self.me.clone(),
            },
        };
        let entry = Entry::Live(record);
        let acked = self.replicate(&entry, &owners).await;
        let required = self.required();
        if acked.len() >= required {
            self.count("stored");
            return Ok(json!({ "id": id, "peerId": primary, "replicas": acked.len() }));
        }
        // Undo: a newer tombstone to every owner that took it, so nothing is half visible.
        let undo = Entry::Tombstone(Tombstone {
            id: id.clone(),
            deleted_at: now_ms(),
            version: Version {
                timestamp_ms: now.saturating_add(1).max(now_ms()),
                peer_id: self.me.clone(),
            },
        });
        self.replicate(&undo, &acked).await;
        self.count("store_failed");
        Err(replication_failed(required, acked.len()))
    }

    /// Replicas a write needs now: `min(3, members)`, at least 1.
    fn required(&self) -> usize {
        self.lock_members().len().clamp(1, REPLICAS)
    }

    /// Members that together own every key (this node first when it serves): whom a search or
    /// a list asks.
    fn cover(&self) -> Vec<String> {
        let members = self.lock_members();
        let first = if members.serves() {
            self.me.as_str()
        } else {
            ""
        };
        members
            .ring()
            .cover(first)
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    /// The owners of `id` in this node's view, primary first.
    fn owners(&self, id: &str) -> Vec<String> {
        self.lock_members()
            .ring()
            .owners(id)
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    /// Sends `entry` to `targets` (this node applies it itself) and returns those that hold it
    /// durably.
    async fn replicate(self: &Arc<Self>, entry: &Entry, targets: &[String]) -> Vec<String> {
        let timeout = self.settings.replicate_timeout;
        let sends = targets.iter().map(|t| async move {
            let ok = if *t == self.me {
                match self.shard.apply(entry).await {
                    Ok(_) => true,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot hold a memory");
                        false
                    }
                }
            } else {
                let put = MemoryRequest::Put {
                    entry: entry.clone(),
                };
                matches!(
                    self.request(t, &put, timeout).await,
                    Ok(MemoryResponse::Ack { durable: true })
                )
            };
            ok.then(|| t.clone())
        });
        join_all(sends).await.into_iter().flatten().collect()
    }

    /// The newest entry of `id` among its owners (then a few other members), with its vector
    /// when `full`.
    async fn find(self: &Arc<Self>, id: &str, full: bool) -> Option<Entry> {
        let owners = self.owners(id);
        let mut asked: Vec<String> = owners.clone();
        let others: Vec<String> = self.lock_members().others();
        asked.extend(
            others
                .into_iter()
                .filter(|m| !owners.contains(m))
                .take(FALLBACK_ASKS),
        );
        let mut best: Option<Entry> = self.local(id, full);
        let timeout = self.settings.gather_timeout;
        let asks = asked.iter().filter(|m| **m != self.me).map(|m| async move {
            match self
                .request(m, &MemoryRequest::Get { id: id.to_owned() }, timeout)
                .await
            {
                Ok(MemoryResponse::Found { entry }) if entry.id() == id => Some(entry),
                _ => None,
            }
        });
        for entry in join_all(asks).await.into_iter().flatten() {
            let newer = best.as_ref().is_none_or(|b| {
                agora_hyperspace::memory::record::merge(Some(b), &entry)
                    == agora_hyperspace::memory::record::Resolution::Replace
            });
            if newer {
                best = Some(entry);
            }
        }
        best
    }

    fn local(&self, id: &str, full: bool) -> Option<Entry> {
        if full {
            self.shard.get_full(id)
        } else {
            self.shard.get(id)
        }
    }

    async fn search(
        self: &Arc<Self>,
        principal: &Principal,
        params: SearchParams,
    ) -> Result<Value, RpcError> {
        let started = Instant::now();
        let session_id = scope(principal, params.session_id.as_deref())?;
        let (embedder, vector) = self.embed("memory.search", params.query.clone()).await?;
        let embedded = started.elapsed();
        let request = MemoryRequest::Search {
            query: params.query.clone(),
            vector,
            embedder: embedder.clone(),
            session_id,
            tier: params.tier,
            limit: u32::try_from(params.limit).unwrap_or(u32::MAX),
            threshold: params.threshold,
        };
        let cover = self.cover();
        let timeout = self.settings.gather_timeout;
        let asks = cover.iter().map(|m| {
            let request = &request;
            async move {
                if *m == self.me {
                    self.local_search(request.clone()).await.ok()
                } else {
                    match self.request(m, request, timeout).await {
                        Ok(MemoryResponse::Hits { hits, skipped }) => Some((hits, skipped)),
                        _ => None,
                    }
                }
            }
        });
        let answers = join_all(asks).await;
        let answered = answers.iter().filter(|a| a.is_some()).count();
        let mut skipped: Vec<String> = Vec::new();
        let mut partials = Vec::new();
        for (hits, s) in answers.into_iter().flatten() {
            partials.push(hits);
            skipped.extend(s);
        }
        skipped.sort();
        skipped.dedup();
        let hits = merge_hits(partials, params.limit, params.threshold);
        let took = started.elapsed();
        if took >= SLOW_SEARCH {
            tracing::info!(
                ms = took.as_secs_f64() * 1e3,
                embed_ms = embedded.as_secs_f64() * 1e3,
                gather_ms = (took - embedded).as_secs_f64() * 1e3,
                asked = cover.len(),
                answered,
                "memory.search was slow"
            );
        }
        let memories: Vec<Value> = hits.iter().map(hit_json).collect();
        let mut out = json!({
            "memories": memories,
            "searchTime": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "embedder": embedder,
        });
        if let Some(o) = out.as_object_mut() {
            if !skipped.is_empty() {
                o.insert("skippedEmbedders".into(), json!(skipped));
            }
            if answered < cover.len() {
                o.insert(
                    "partial".into(),
                    json!({ "asked": cover.len(), "answered": answered }),
                );
            }
        }
        Ok(out)
    }

    /// This node's part of a search, on the worker pool: the memories of the query's embedder
    /// with its vector; those of another embedder this node has, with the query re-embedded;
    /// the rest skipped.
    async fn local_search(
        self: &Arc<Self>,
        request: MemoryRequest,
    ) -> Result<(Vec<SearchHit>, Vec<String>), RpcError> {
        let MemoryRequest::Search {
            query,
            vector,
            embedder,
            session_id,
            tier,
            limit,
            threshold,
        } = request
        else {
            return Err(internal("not a search"));
        };
        let s = Arc::clone(self);
        let deadline = Instant::now() + self.settings.budget;
        self.pool
            .run("memory.search", deadline, move || {
                let limit = usize::try_from(limit).unwrap_or(usize::MAX);
                let mut partials = Vec::new();
                let mut skipped = Vec::new();
                for held in s.shard.embedders() {
                    let q = if held == embedder {
                        vector.clone()
                    } else if let Some(e) = s.embedders.get(&held) {
                        match e.embed(&[query.as_str()]) {
                            Ok(mut v) => v.pop().unwrap_or_default(),
                            Err(_) => {
                                skipped.push(held);
                                continue;
                            }
                        }
                    } else {
                        skipped.push(held);
                        continue;
                    };
                    partials.push(s.shard.search(
                        &held,
                        &q,
                        tier,
                        session_id.as_deref(),
                        limit,
                        threshold,
                    ));
                }
                Ok((merge_hits(partials, limit, threshold), skipped))
            })
            .await
    }

    async fn list(
        self: &Arc<Self>,
        principal: &Principal,
        params: ListParams,
    ) -> Result<Value, RpcError> {
        let session = scope(principal, Some(&params.session_id))?
            .unwrap_or_else(|| params.session_id.clone());
        let want = params.offset.saturating_add(params.limit);
        let request = MemoryRequest::List {
            session_id: session.clone(),
            limit: u32::try_from(want).unwrap_or(u32::MAX),
            offset: 0,
        };
        let cover = self.cover();
        let timeout = self.settings.gather_timeout;
        let asks = cover.iter().map(|m| {
            let request = &request;
            let session = &session;
            async move {
                if *m == self.me {
                    Some(self.shard.list(session, want))
                } else {
                    match self.request(m, request, timeout).await {
                        Ok(MemoryResponse::Listed { entries, total }) => Some((entries, total)),
                        _ => None,
                    }
                }
            }
        });
        let mut newest: HashMap<String, MemoryRecord> = HashMap::new();
        let mut most = 0u64;
        let mut complete = true;
        for (entries, total) in join_all(asks).await.into_iter().flatten() {
            most = most.max(total);
            complete &= total <= entries.len() as u64;
            for e in entries {
                if let Entry::Live(r) = e {
                    let keep = newest
                        .get(&r.id)
                        .is_none_or(|held| held.version < r.version);
                    if keep {
                        newest.insert(r.id.clone(), r);
                    }
                }
            }
        }
        let mut all: Vec<MemoryRecord> = newest.into_values().collect();
        all.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        let total = if complete {
            all.len() as u64
        } else {
            most.max(all.len() as u64)
        };
        let memories: Vec<Value> = all
            .iter()
            .skip(params.offset)
            .take(params.limit)
            .map(record_json)
            .collect();
        Ok(json!({ "memories": memories, "total": total }))
    }

    async fn delete(
        self: &Arc<Self>,
        principal: &Principal,
        params: DeleteParams,
    ) -> Result<Value, RpcError> {
        let existed = match self.find(&params.id, false).await {
            Some(Entry::Live(r)) if visible(principal, &r) => true,
            Some(Entry::Live(_)) => return Err(not_found(&params.id)),
            _ => false,
        };
        if !existed {
            return Ok(json!({ "deleted": false }));
        }
        let now = now_ms();
        let tombstone = Tombstone {
            id: params.id.clone(),
            deleted_at: now,
            version: Version {
                timestamp_ms: now,
                peer_id: self.me.clone(),
            },
        };
        let owners = self.owners(&params.id);
        let acked = self
            .replicate(&Entry::Tombstone(tombstone.clone()), &owners)
            .await;
        self.publish(&SyncMessage::Delete { tombstone }).await;
        let required = self.required();
        if acked.len() < required {
            return Err(replication_failed(required, acked.len()));
        }
        self.count("deleted");
        Ok(json!({ "deleted": true }))
    }

    async fn archive(
        self: &Arc<Self>,
        principal: &Principal,
        params: ArchiveParams,
    ) -> Result<Value, RpcError> {
        let Some(Entry::Live(mut record)) = self.find(&params.id, true).await else {
            return Err(not_found(&params.id));
        };
        if !visible(principal, &record) {
            return Err(not_found(&params.id));
        }
        let now = now_ms();
        let version = Version {
            timestamp_ms: now.max(record.version.timestamp_ms.saturating_add(1)),
            peer_id: self.me.clone(),
        };
        record.tier = Tier::Archival;
        record.version = version.clone();
        let owners = self.owners(&params.id);
        let acked = self.replicate(&Entry::Live(record), &owners).await;
        self.publish(&SyncMessage::Tier {
            id: params.id.clone(),
            tier: Tier::Archival,
            version,
        })
        .await;
        let required = self.required();
        if acked.len() < required {
            return Err(replication_failed(required, acked.len()));
        }
        Ok(json!({ "archived": true, "tier": "archival" }))
    }

    /// Answers a node-to-node request.
    async fn peer_request(self: &Arc<Self>, peer: &PeerId, data: &[u8]) -> MemoryResponse {
        let request = match MemoryRequest::decode(data, &self.settings.limits) {
            Ok(r) => r,
            Err(e) => {
                self.count("peer_requests_refused");
                tracing::debug!(%peer, error = %e, "refused a memory request");
                return MemoryResponse::Error {
                    code: RpcCode::INVALID_PARAMS.0,
                    message: e.to_string(),
                };
            }
        };
        match request {
            MemoryRequest::Put { entry } => {
                if !self.settings.serve {
                    return MemoryResponse::Error {
                        code: RpcCode::REPLICATION_FAILED.0,
                        message: "this node does not serve memory".into(),
                    };
                }
                match self.shard.apply(&entry).await {
                    Ok(_) => MemoryResponse::Ack { durable: true },
                    Err(e) => MemoryResponse::Error {
                        code: RpcCode::REPLICATION_FAILED.0,
                        message: e.to_string(),
                    },
                }
            }
            MemoryRequest::Get { id } => match self.shard.get_full(&id) {
                Some(entry) => MemoryResponse::Found { entry },
                None => MemoryResponse::NotHere,
            },
            search @ MemoryRequest::Search { .. } => match self.local_search(search).await {
                Ok((hits, skipped)) => MemoryResponse::Hits { hits, skipped },
                Err(e) => MemoryResponse::Error {
                    code: e.code.0,
                    message: e.message,
                },
            },
            MemoryRequest::List {
                session_id, limit, ..
            } => {
                let (entries, total) = self
                    .shard
                    .list(&session_id, usize::try_from(limit).unwrap_or(usize::MAX));
                MemoryResponse::Listed { entries, total }
            }
            MemoryRequest::Digest {
                peer: from,
                digest: theirs,
                ..
            } => {
                let mine = self.pair_versions(&from).await;
                if mine.is_some_and(|m| m.digest == theirs) {
                    MemoryResponse::DigestMatch
                } else {
                    MemoryResponse::DigestMismatch
                }
            }
            MemoryRequest::Versions {
                peer: from,
                after,
                limit,
            } => {
                let Some(versions) = self.pair_versions(&from).await else {
                    return MemoryResponse::Error {
                        code: RpcCode::RATE_LIMITED.0,
                        message: "Rate Limited: this node's version scan is busy".into(),
                    };
                };
                let limit = usize::try_from(limit.min(VERSIONS_PAGE)).unwrap_or(1);
                let (items, next) = versions.page(after.as_deref(), limit);
                MemoryResponse::VersionList { items, next }
            }
            MemoryRequest::Pull { ids } => MemoryResponse::Entries {
                entries: ids
                    .iter()
                    .filter_map(|id| self.shard.get_full(id))
                    .collect(),
            },
        }
    }

    /// The (id, version) of held entries whose owners, in this node's view, include both this
    /// node and `peer`, sorted by id (the set an anti-entropy exchange with `peer` compares);
    /// `None` when the scan did not finish within its budget.
    async fn pair_versions(self: &Arc<Self>, peer: &str) -> Option<Arc<Versions>> {
        let lists = self.version_lists().await?;
        Some(lists.pairs.get(peer).cloned().unwrap_or_default())
    }

    /// Anti-entropy's lists for the current shard and view: cached; else, on the background
    /// pool, the cached lists updated by the entries written since (same view), or made anew in
    /// one scan (a new view: one owner lookup per held entry for every list at once).
    async fn version_lists(self: &Arc<Self>) -> Option<Arc<SyncLists>> {
        let _scan = self.versions_scan.lock().await;
        let generation = self.shard.generation();
        let (ring, members) = {
            let m = self.lock_members();
            let ring = m.ring().clone();
            let members: Vec<String> = ring.members().map(str::to_owned).collect();
            (ring, members)
        };
        let previous = match lock_cache(&self.versions_cache).as_ref() {
            Some(c) if c.members == members && c.generation == generation => {
                return Some(Arc::clone(&c.lists));
            }
            Some(c) if c.members == members => Some((c.snapshot.clone(), Arc::clone(&c.lists))),
            _ => None,
        };
        // Taken after the generation was read: it may hold later writes too, which the next
        // call's difference then finds again (placing an entry twice changes nothing).
        let snapshot = self.shard.snapshot();
        let me = self.me.clone();
        let held = snapshot.clone();
        let deadline = Instant::now() + SCAN_BUDGET;
        let made = self
            .sync_pool
            .run("memory.sync", deadline, move || {
                Ok(match previous {
                    Some((before, lists)) => lists.update(&before, &held, &ring, &me),
                    None => SyncLists::build(&held, &ring, &me),
                })
            })
            .await;
        match made {
            Ok(lists) => {
                let lists = Arc::new(lists);
                *lock_cache(&self.versions_cache) = Some(CachedVersions {
                    generation,
                    members,
                    snapshot,
                    lists: Arc::clone(&lists),
                });
                Some(lists)
            }
            Err(e) => {
                tracing::warn!(error = %e.message, "memory: the anti-entropy scan did not finish; this round is skipped");
                None
            }
        }
    }

    /// One anti-entropy round: with every other member, compare digests of the entries both
    /// should hold and exchange what differs; hand entries this node holds but does not own to
    /// their owners.
    async fn anti_entropy(self: &Arc<Self>) {
        let others = self.lock_members().others();
        let mut lacking: HashSet<String> = HashSet::new();
        for peer in others {
            let Some(mine) = self.pair_versions(&peer).await else {
                return;
            };
            let ask = MemoryRequest::Digest {
                peer: self.me.clone(),
                digest: mine.digest,
                count: mine.map.len() as u64,
            };
            match self
                .request(&peer, &ask, self.settings.gather_timeout)
                .await
            {
                Ok(MemoryResponse::DigestMismatch) => {
                    lacking.extend(self.exchange(&peer, &mine.to_list()).await);
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(%peer, error = %e, "anti-entropy digest failed"),
            }
        }
        *lock_cache(&self.last_check) = Some((now_ms(), lacking.len()));
        self.hand_off().await;
        self.count("sync_rounds");
    }

    /// Pages through `peer`'s versions, pushes what it lacks and pulls what it has newer; returns
    /// the ids it lacked or held older (none when its versions could not be read).
    async fn exchange(self: &Arc<Self>, peer: &str, mine: &[(String, Version)]) -> Vec<String> {
        let mut theirs: Vec<(String, Version)> = Vec::new();
        let mut after = None;
        loop {
            let page = MemoryRequest::Versions {
                peer: self.me.clone(),
                after: after.clone(),
                limit: VERSIONS_PAGE,
            };
            match self
                .request(peer, &page, self.settings.gather_timeout)
                .await
            {
                Ok(MemoryResponse::VersionList { items, next }) => {
                    theirs.extend(items);
                    match next {
                        Some(n) => after = Some(n),
                        None => break,
                    }
                }
                _ => return Vec::new(),
            }
        }
        let d = diff(mine, &theirs);
        for chunk in d.push.chunks(SYNC_FANOUT) {
            let sends = chunk
                .iter()
                .filter_map(|id| self.shard.get_full(id))
                .map(|entry| {
                    let put = MemoryRequest::Put { entry };
                    async move {
                        let _ = self
                            .request(peer, &put, self.settings.replicate_timeout)
                            .await;
                    }
                });
            join_all(sends).await;
            self.count_n("sync_pushed", chunk.len());
        }
        for chunk in d.pull.chunks(64) {
            let pull = MemoryRequest::Pull {
                ids: chunk.to_vec(),
            };
            if let Ok(MemoryResponse::Entries { entries }) = self
                .request(peer, &pull, self.settings.gather_timeout)
                .await
            {
                for entry in entries {
                    if chunk.iter().any(|id| id == entry.id()) {
                        let _ = self.shard.apply(&entry).await;
                    }
                }
                self.count_n("sync_pulled", chunk.len());
            }
        }
        d.push
    }

    /// Entries held here whose owners (this node's view) do not include this node go to their
    /// owners (they stay here too: a later view may give them back).
    async fn hand_off(self: &Arc<Self>) {
        if !self.settings.serve {
            return;
        }
        let Some(lists) = self.version_lists().await else {
            return;
        };
        for (id, _) in &lists.strays.map {
            if let Some(entry) = self.shard.get_full(id) {
                let owners = self.owners(id);
                self.replicate(&entry, &owners).await;
            }
        }
    }

    fn count_n(&self, what: &'static str, n: usize) {
        self.counters.add(what, n as u64);
    }

    /// A verified envelope from the sync topic.
    async fn gossip(self: &Arc<Self>, data: &[u8]) {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let Ok(env) = agora_hyperspace::envelope::Envelope::parse(text) else {
            return;
        };
        let Ok(message) = serde_json::from_str::<SyncMessage>(env.d_json) else {
            self.count("gossip_refused");
            return;
        };
        match message {
            SyncMessage::Member { held, .. } => {
                if self.lock_members().heard(env.from, now_ms(), held) {
                    self.mark_ring_change();
                }
            }
            SyncMessage::Delete { tombstone } => {
                if self.shard.get(&tombstone.id).is_some() {
                    let _ = self.shard.apply(&Entry::Tombstone(tombstone)).await;
                }
            }
            SyncMessage::Tier { id, tier, version } => {
                if let Some(Entry::Live(mut r)) = self.shard.get_full(&id)
                    && r.version < version
                {
                    r.tier = tier;
                    r.version = version;
                    let _ = self.shard.apply(&Entry::Live(r)).await;
                }
            }
        }
    }
}

fn lock_cache<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn hit_json(h: &SearchHit) -> Value {
    serde_json::to_value(h).unwrap_or(Value::Null)
}
