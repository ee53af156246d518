//! The Self-Improving primitive (`improving.*`, and the SDK's `selfImproving.*`; spec §5.2,
//! §7.3, §9.3, §9.4): trajectory libraries on this node, a task of its own, its redb tables
//! (`hs_trajectories`, `hs_reputation`), its worker pool, and its gossip on
//! `hyperspace/trajectories/{taskType}` and `hyperspace/reputation/{peerId}`.
//!
//! The rules (checks, states, admission, utility, exemplars, curation, critique, difficulty,
//! reputation, redaction, the gossip payloads) are `agora_hyperspace::improving`'s; this module
//! runs them. Choices where the spec is silent (`docs/hyperspace-wire.md` "Trajectories and
//! reputation", `docs/node.md` "Self-improving"):
//!
//! - **Sharing is opt-in** (§9.3): `[improving] share` (default off), overridden per call by
//!   `share`. Only rewarded runs are shared. What is shared is redacted first (every string and
//!   number through the `guard.checkSafety` detectors); the node keeps the original.
//!   `gossipedTo` is the number of peers gossipsub sent the message to (0 when not shared).
//! - **Libraries**: one per task type, at most `[improving] max_library` trajectories each
//!   (default 1,000; beyond, the lowest by utility, reward, age makes room, or a newcomer that
//!   would be the lowest is not admitted) and `max_task_types` task types (beyond, a new task
//!   type is −32008). The node subscribes to the trajectory topic of every task type it
//!   records and of those configured (`[improving] task_types`). A received trajectory is
//!   admitted when its envelope verifies (the mesh's gate), it decodes under the recorded
//!   trajectory's checks, it names the topic's task type and its signer as contributor, it is
//!   new by content hash, and its reward is at least `[improving] min_reward` (default 0).
//!   Invalid ones are rejected in gossipsub's validation (the forwarder is penalised).
//! - **Reputation** (§9.4): a recorded run that lists the exemplars it used in
//!   `metadata.exemplarIds` credits their contributors (success when its reward ≥ 0.5). The
//!   standings weigh utility and curation, are published on this node's reputation topic when
//!   they change (at most every [`VIEW_EVERY`]) and set gossipsub's application score of each
//!   contributor ([`agora_hyperspace::improving::gossip::app_score`]), so a peer whose
//!   exemplars keep preceding failures falls below the graylist threshold and its gossip is
//!   ignored. Views published by contributors this node holds trajectories of are followed
//!   (at most [`MAX_VIEWS`]) and shown in `/status`; they do not change this node's standings.
//! - **Pulse rounds** (§9.4 "Sybil resistance", [`pulse`]): this node proves every round's
//!   work on `hyperspace/pulse/proofs` and checks the proofs of others; an identity's weight
//!   (`FLOOR` until it passed rounds, at most 1) multiplies its trajectories' exemplar scores
//!   and eviction utility, weighs its reputation views in the gossip scores of others, and
//!   adds to its own gossip score ([`agora_hyperspace::improving::gossip::app_score`]); this
//!   node weighs 1 to itself. Views of other nodes thereby count toward gossip scores in
//!   proportion to their publisher's pulse weight (never this node's standings).
//! - **Durability**: `recordTrajectory`, `curate` and `augment` are written before they are
//!   answered; usage counts and admissions of received trajectories are written within
//!   [`FLUSH_EVERY`] (a crash may lose that much of them).
//! - `augment` FULL_PIPELINE needs `[improving] base_url` and `model` (an OpenAI-compatible
//!   chat endpoint); without them it is −32602 `reason: "no-llm"`.
//!
//! Bounded: 64 calls in flight (beyond, −32003), 256 received trajectories being admitted
//! (beyond, they are ignored, not penalised), `[improving] max_contributors` standings (the
//! least used is forgotten).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agora_hyperspace::improving as methods;
use agora_hyperspace::improving::gossip::{
    self, REPUTATION_PREFIX, ReputationView, TRAJECTORIES_PREFIX,
};
use agora_hyperspace::improving::library::{self as lib, Admit, Held};
use agora_hyperspace::improving::params::{
    AugmentMode, AugmentParams, CurateParams, DifficultyParams, ExemplarParams, StatsParams,
};
use agora_hyperspace::improving::trajectory::{self, rejected};
use agora_hyperspace::improving::{
    Library, RecordParams, Reputation, Trajectory, TrajectoryLimits, TrajectoryState, augment,
};
use agora_hyperspace::jsonrpc::{RpcCode, RpcError};
use ed25519_dalek::SigningKey;
use libp2p::PeerId;
use libp2p::gossipsub::{MessageAcceptance, MessageId};
use serde_json::{Value, json};
use tokio::sync::{OwnedMutexGuard, Semaphore, mpsc, oneshot};
use tokio::time::Instant;

use super::guard::{LongCallSettings, LongCalls};
use super::learning::ChatConfig;
use super::learning::llm::Chat;
use super::random_hex;
use super::service::{internal, spawn_call};
use crate::call::Call;
use crate::clock::now_ms;
use crate::config::Config;
use crate::mesh;
use crate::routes::{self, CallRoute, Delivery, EventKey, EventRoute};
use crate::store::Store;

pub mod pulse;

/// Calls handled at once; beyond, −32003.
const IN_FLIGHT: usize = 64;
/// Received trajectories being admitted at once; beyond, ignored.
const ADMITTING: usize = 256;
/// How often usage counts and admitted trajectories are written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(2);
/// Least time between two publications of this node's reputation view.
pub const VIEW_EVERY: Duration = Duration::from_secs(10);
/// How often every application score is set again (peers that reconnected get theirs back).
const SCORES_EVERY: Duration = Duration::from_secs(30);
/// Most followed reputation views of other nodes.
pub const MAX_VIEWS: usize = 16;
/// Most application scores listed in `/status` (`improving.scores`, by PeerId).
const MAX_LISTED_SCORES: usize = 256;
/// The system message of FULL_PIPELINE.
const LLM_SYSTEM: &str =
    "You repair failed runs of an AI agent from a critique. Answer with JSON only.";

/// How the Self-Improving service runs (`[improving]`; `docs/node.md` "Self-improving").
#[derive(Debug, Clone)]
pub struct Settings {
    /// Share recorded trajectories by default. Default false.
    pub share: bool,
    /// Task types whose trajectories this node learns from (subscribed at start).
    pub task_types: Vec<String>,
    /// Most trajectories per task type. Default 1,000.
    pub max_library: usize,
    /// Most task types. Default 256.
    pub max_task_types: usize,
    /// Least reward of a received trajectory. Default 0.
    pub min_reward: f64,
    /// Most contributors with a standing. Default 10,000.
    pub max_contributors: usize,
    /// Bounds of a trajectory.
    pub limits: TrajectoryLimits,
    /// Worker threads. Default 2, so that one `FULL_PIPELINE` waiting on its model does not
    /// hold every other call.
    pub workers: usize,
    /// How long a call may wait for a worker and run (FULL_PIPELINE's model call included).
    /// Default 30 s.
    pub budget: Duration,
    /// FULL_PIPELINE's chat endpoint.
    pub chat: Option<ChatConfig>,
    /// Length of a pulse round. Default 90 s.
    pub pulse_round_ms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            share: false,
            task_types: Vec::new(),
            max_library: 1_000,
            max_task_types: 256,
            min_reward: 0.0,
            max_contributors: 10_000,
            limits: TrajectoryLimits::default(),
            workers: 2,
            budget: Duration::from_secs(30),
            chat: None,
            pulse_round_ms: agora_hyperspace::pulse::DEFAULT_ROUND_MS,
        }
    }
}

/// Inputs of the Self-Improving task.
#[derive(Debug)]
pub enum Input {
    /// An `improving.*` or `selfImproving.*` call.
    Call(Call),
    /// A trajectory received on a trajectory topic (its envelope verified by the mesh's gate),
    /// waiting for this service's verdict.
    Trajectory {
        /// Topic.
        topic: String,
        /// The envelope's bytes.
        data: Vec<u8>,
        /// Gossipsub's message id.
        id: MessageId,
        /// The peer that forwarded it.
        propagation_source: PeerId,
    },
    /// A reputation view received on a followed reputation topic (verified and accepted).
    View(Vec<u8>),
    /// A pulse proof (its envelope verified by the mesh's gate), waiting for this service's
    /// verdict.
    Pulse {
        /// The envelope's bytes.
        data: Vec<u8>,
        /// Gossipsub's message id.
        id: MessageId,
        /// The peer that forwarded it.
        propagation_source: PeerId,
    },
    /// Report the service's state (`/status` `improving`).
    Status(oneshot::Sender<Value>),
}

/// The calls this service answers (`improving.*` and their `selfImproving.*` aliases).
pub fn call_route(tx: &mpsc::Sender<Input>) -> CallRoute {
    CallRoute::new(
        &["improving.", "selfImproving."],
        &[&methods::METHODS, &methods::ALIASES],
        tx,
        Input::Call,
    )
}

/// The mesh events this service owns: trajectories and pulse proofs (each waits for this
/// service's verdict) and reputation views (a full queue loses a view; the next one replaces it
/// anyway).
pub fn event_routes(tx: &mpsc::Sender<Input>) -> Vec<EventRoute> {
    vec![
        EventRoute::new(
            EventKey::Topic(agora_hyperspace::pulse::TOPIC),
            tx,
            Delivery::Wait,
            |e| {
                routes::gossip(e).map(|g| Input::Pulse {
                    data: g.data,
                    id: g.id,
                    propagation_source: g.propagation_source,
                })
            },
        ),
        EventRoute::new(
            EventKey::TopicPrefix(TRAJECTORIES_PREFIX),
            tx,
            Delivery::Wait,
            |e| {
                routes::gossip(e).map(|g| Input::Trajectory {
                    topic: g.topic,
                    data: g.data,
                    id: g.id,
                    propagation_source: g.propagation_source,
                })
            },
        ),
        EventRoute::new(
            EventKey::TopicPrefix(REPUTATION_PREFIX),
            tx,
            Delivery::DropWhenFull,
            |e| routes::gossip(e).map(|g| Input::View(g.data)),
        ),
    ]
}

type Lib = Arc<tokio::sync::Mutex<Library>>;

/// What received trajectories came to.
#[derive(Debug, Default)]
struct Counters {
    admitted: AtomicU64,
    duplicate: AtomicU64,
    below_min_reward: AtomicU64,
    full: AtomicU64,
    rejected: AtomicU64,
    ignored: AtomicU64,
    shared: AtomicU64,
}

struct Shared {
    store: Store,
    settings: Settings,
    peer_id: String,
    key: SigningKey,
    mesh: mpsc::Sender<mesh::Command>,
    chat: Option<Chat>,
    pool: LongCalls,
    libraries: Mutex<HashMap<String, Lib>>,
    reputation: Mutex<Reputation>,
    /// Standings changed since the view was last published / scores last set.
    reputation_changed: AtomicBool,
    /// Trajectory rows to write at the next flush: (taskType, trajectoryId).
    dirty: Mutex<BTreeSet<(String, String)>>,
    /// Trajectory rows to delete at the next flush.
    gone: Mutex<BTreeSet<(String, String)>>,
    /// Topics this node joined.
    subscribed: Mutex<HashSet<String>>,
    /// Reputation views of other nodes, by PeerId.
    views: Mutex<BTreeMap<String, ReputationView>>,
    counters: Counters,
    in_flight: Arc<Semaphore>,
    admitting: Arc<Semaphore>,
    runtime: tokio::runtime::Handle,
    pulse: pulse::Pulse,
}

/// The service before it runs: libraries and standings loaded.
pub struct Prepared {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Improving").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What the node needs from the rest of the node.
#[derive(Debug)]
pub struct Wiring {
    /// This node's PeerId.
    pub peer_id: String,
    /// Its key (signs what it publishes).
    pub key: SigningKey,
    /// Commands to the mesh.
    pub mesh: mpsc::Sender<mesh::Command>,
    /// The runtime (blocking store writes from workers).
    pub runtime: tokio::runtime::Handle,
    /// Where the pulse outcomes are counted.
    pub telemetry: Arc<crate::telemetry::Telemetry>,
}

/// Loads the libraries and standings (blocking: call it off the runtime's workers).
pub fn prepare(store: Store, settings: Settings, wiring: Wiring) -> Result<Prepared, String> {
    let mut libraries: HashMap<String, Library> = HashMap::new();
    for (task, row) in store.hs_trajectories().map_err(|e| e.to_string())? {
        match serde_json::from_str::<Held>(&row) {
            Ok(h) => libraries
                .entry(task)
                .or_insert_with(|| Library::new(settings.max_library))
                .items
                .push(h),
            Err(e) => tracing::warn!(task, error = %e, "an unreadable trajectory row was skipped"),
        }
    }
    let mut reputation = Reputation::new(settings.max_contributors);
    for (peer, row) in store.hs_reputation().map_err(|e| e.to_string())? {
        match serde_json::from_str(&row) {
            Ok(s) => {
                reputation.peers.insert(peer, s);
            }
            Err(e) => tracing::warn!(peer, error = %e, "an unreadable standing was skipped"),
        }
    }
    let mut gone = BTreeSet::new();
    for (task, l) in &mut libraries {
        // Rows come in id order; a library is kept in arrival order.
        l.items.sort_by_key(|h| h.received_at);
        // A lowered max_library takes effect at start.
        if l.items.len() > l.max {
            for id in l.curate(lib::Strategy::Accumulate, &reputation) {
                gone.insert((task.clone(), id));
            }
        }
    }
    let pool = LongCalls::named(
        "improving",
        LongCallSettings {
            workers: settings.workers,
            budget: settings.budget,
            ..LongCallSettings::default()
        },
    );
    Ok(Prepared {
        shared: Arc::new(Shared {
            store,
            chat: settings.chat.clone().map(Chat::new),
            peer_id: wiring.peer_id,
            key: wiring.key,
            mesh: wiring.mesh,
            pool,
            libraries: Mutex::new(
                libraries
                    .into_iter()
                    .map(|(k, l)| (k, Arc::new(tokio::sync::Mutex::new(l))))
                    .collect(),
            ),
            reputation: Mutex::new(reputation),
            reputation_changed: AtomicBool::new(true),
            dirty: Mutex::new(BTreeSet::new()),
            gone: Mutex::new(gone),
            subscribed: Mutex::new(HashSet::new()),
            views: Mutex::new(BTreeMap::new()),
            counters: Counters::default(),
            in_flight: Arc::new(Semaphore::new(IN_FLIGHT)),
            admitting: Arc::new(Semaphore::new(ADMITTING)),
            runtime: wiring.runtime,
            pulse: pulse::Pulse::new(settings.pulse_round_ms, &wiring.telemetry),
            settings,
        }),
    })
}

impl Settings {
    /// The settings `config` asks for (`[improving]`).
    pub fn from_config(config: &Config) -> Self {
        let c = &config.improving;
        Self {
            share: c.share,
            task_types: c.task_types.clone(),
            max_library: c.max_library,
            max_task_types: c.max_task_types,
            min_reward: c.min_reward,
            chat: c.base_url.as_ref().map(|base_url| ChatConfig {
                base_url: base_url.clone(),
                model: c.model.clone().unwrap_or_default(),
                api_key: c.api_key.clone(),
                timeout: Duration::from_millis(c.timeout_ms),
            }),
            pulse_round_ms: c.pulse_round_ms,
            ..Self::default()
        }
    }
}

/// Starts the Self-Improving service: its settings from `config`, [`prepare`] on a blocking
/// thread (it loads the libraries), then [`run`] on a task of its own. Returns its input.
pub async fn start(
    config: &Config,
    store: Store,
    wiring: Wiring,
) -> Result<mpsc::Sender<Input>, String> {
    let settings = Settings::from_config(config);
    let improving = tokio::task::spawn_blocking(move || prepare(store, settings, wiring))
        .await
        .map_err(|e| e.to_string())??;
    let (tx, rx) = mpsc::channel(1024);
    tokio::spawn(run(improving, rx));
    Ok(tx)
}

/// Runs the service until `inputs` closes.
pub async fn run(prepared: Prepared, mut inputs: mpsc::Receiver<Input>) {
    let shared = prepared.shared;
    let mut topics: Vec<String> = shared.settings.task_types.clone();
    topics.extend(shared.libraries_snapshot().into_iter().map(|(t, _)| t));
    for t in topics {
        shared.follow(&gossip::trajectory_topic(&t)).await;
    }
    shared.follow(agora_hyperspace::pulse::TOPIC).await;
    let mut pulse_every = tokio::time::interval(Duration::from_millis(
        (shared.settings.pulse_round_ms / 4).clamp(250, 5_000),
    ));
    pulse_every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut flush = tokio::time::interval(FLUSH_EVERY);
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut view = tokio::time::interval(VIEW_EVERY);
    view.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut scores = tokio::time::interval(SCORES_EVERY);
    scores.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let input = tokio::select! {
            input = inputs.recv() => match input {
                Some(input) => input,
                None => break,
            },
            _ = flush.tick() => {
                let s = Arc::clone(&shared);
                tokio::spawn(async move { s.flush().await });
                continue;
            }
            _ = view.tick() => {
                if shared.reputation_changed.swap(false, Ordering::AcqRel) {
                    shared.publish_view().await;
                    shared.set_scores().await;
                }
                continue;
            }
            _ = scores.tick() => {
                shared.set_scores().await;
                continue;
            }
            _ = pulse_every.tick() => {
                shared.pulse_tick();
                if shared.pulse.changed.swap(false, Ordering::AcqRel) {
                    shared.set_scores().await;
                }
                continue;
            }
        };
        match input {
            Input::Call(call) => {
                let s = Arc::clone(&shared);
                spawn_call(
                    &shared.in_flight,
                    "improving",
                    call,
                    async move |_, method, params| s.call(&method, &params).await,
                );
            }
            Input::Trajectory {
                topic,
                data,
                id,
                propagation_source,
            } => {
                let Ok(permit) = Arc::clone(&shared.admitting).try_acquire_owned() else {
                    shared.counters.ignored.fetch_add(1, Ordering::Relaxed);
                    mesh::report_validation(
                        &shared.mesh,
                        id,
                        propagation_source,
                        MessageAcceptance::Ignore,
                    )
                    .await;
                    continue;
                };
                let s = Arc::clone(&shared);
                tokio::spawn(async move {
                    let verdict = s.received(&topic, &data).await;
                    mesh::report_validation(&s.mesh, id, propagation_source, verdict).await;
                    drop(permit);
                });
            }
            Input::View(data) => shared.view_received(&data),
            Input::Pulse {
                data,
                id,
                propagation_source,
            } => shared.pulse_received(data, id, propagation_source),
            Input::Status(reply) => {
                let _ = reply.send(shared.status());
            }
        }
    }
}

/// The JSON of an exemplar.
fn exemplar_json(h: &Held, rep: &Reputation) -> Value {
    let t = &h.trajectory;
    let mut out = json!({
        "trajectoryId": t.trajectory_id,
        "input": t.input,
        "output": t.output,
        "steps": t.steps,
        "reward": t.reward,
        "state": h.state.as_str(),
        "utilityScore": lib::utility(h, rep.weight(&t.peer_id)),
        "usageCount": h.usage_count,
        "peerId": t.peer_id,
    });
    if let (Some(c), Some(o)) = (&h.critique, out.as_object_mut()) {
        o.insert("critique".into(), json!(c));
    }
    out
}

fn row(h: &Held) -> Result<String, RpcError> {
    serde_json::to_string(h).map_err(internal)
}

impl Shared {
    fn libraries_snapshot(&self) -> Vec<(String, Lib)> {
        lock(&self.libraries)
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect()
    }

    fn library(&self, task: &str) -> Option<Lib> {
        lock(&self.libraries).get(task).cloned()
    }

    fn library_or_create(&self, task: &str) -> Result<Lib, RpcError> {
        let mut libs = lock(&self.libraries);
        if let Some(l) = libs.get(task) {
            return Ok(Arc::clone(l));
        }
        if libs.len() >= self.settings.max_task_types {
            return Err(rejected(
                "taskType",
                format!(
                    "this node holds its maximum of {} task types",
                    self.settings.max_task_types
                ),
            ));
        }
        let l = Arc::new(tokio::sync::Mutex::new(Library::new(
            self.settings.max_library,
        )));
        libs.insert(task.to_owned(), Arc::clone(&l));
        Ok(l)
    }

    /// Joins `topic` once.
    async fn follow(&self, topic: &str) {
        if lock(&self.subscribed).insert(topic.to_owned()) {
            let _ = self
                .mesh
                .send(mesh::Command::Subscribe(topic.to_owned()))
                .await;
        }
    }

    /// The standings, with every contributor's pulse weight (this node's own: 1).
    fn reputation(&self) -> Reputation {
        let mut rep = lock(&self.reputation).clone();
        let mut weights = self.pulse.weights();
        weights.insert(self.peer_id.clone(), agora_hyperspace::pulse::CAP);
        rep.trust = lib::Trust {
            weights,
            default: agora_hyperspace::pulse::FLOOR,
        };
        rep
    }

    /// The gossip application score of every peer this node knows something of (standings,
    /// pulse passes, views and their entries), but itself.
    fn scores(&self) -> BTreeMap<String, f64> {
        let rep = self.reputation();
        let views = lock(&self.views).clone();
        let mut peers: BTreeSet<&str> = rep.peers.keys().map(String::as_str).collect();
        peers.extend(rep.trust.weights.keys().map(String::as_str));
        for (viewer, v) in &views {
            peers.insert(viewer);
            peers.extend(v.contributors.iter().map(|c| c.peer_id.as_str()));
        }
        peers.remove(self.peer_id.as_str());
        peers
            .into_iter()
            .map(|p| (p.to_owned(), gossip::app_score(&rep, &views, p)))
            .collect()
    }

    fn status(&self) -> Value {
        let libs = self.libraries_snapshot();
        let sizes: BTreeMap<String, usize> = libs
            .iter()
            .map(|(t, l)| (t.clone(), l.try_lock().map_or(0, |l| l.items.len())))
            .collect();
        let c = &self.counters;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let views: BTreeMap<String, Value> = lock(&self.views)
            .iter()
            .map(|(p, v)| {
                (
                    p.clone(),
                    json!({"ts": v.ts, "contributors": v.contributors.len()}),
                )
            })
            .collect();
        let mut subscribed: Vec<String> = lock(&self.subscribed).iter().cloned().collect();
        subscribed.sort();
        json!({
            "share": self.settings.share,
            "libraries": sizes,
            "contributors": lock(&self.reputation).peers.len(),
            "subscribed": subscribed,
            "received": {
                "admitted": n(&c.admitted),
                "duplicate": n(&c.duplicate),
                "belowMinReward": n(&c.below_min_reward),
                "full": n(&c.full),
                "rejected": n(&c.rejected),
                "ignored": n(&c.ignored),
            },
            "shared": n(&c.shared),
            "views": views,
            "fullPipeline": self.chat.is_some(),
            "pulse": self.pulse.status(),
            "scores": self.scores().into_iter().take(MAX_LISTED_SCORES).collect::<BTreeMap<_, _>>(),
        })
    }

    async fn call(self: &Arc<Self>, method: &str, params: &Value) -> Result<Value, RpcError> {
        match methods::canonical(method) {
            Some(methods::RECORD_TRAJECTORY) => self.record(params).await.map_err(|e| {
                agora_hyperspace::params::with_every_problem_of(
                    &methods::DOCS,
                    methods::RECORD_TRAJECTORY,
                    params,
                    e,
                )
            }),
            Some(methods::GET_EXEMPLARS) => {
                let p = ExemplarParams::parse(params)?;
                let Some(l) = self.library(&p.task_type) else {
                    return Ok(json!({"exemplars": [], "librarySize": 0, "avgReward": 0.0}));
                };
                let guard = l.lock_owned().await;
                let s = Arc::clone(self);
                let task = p.task_type.clone();
                self.work(method, guard, move |l| {
                    let rep = s.reputation();
                    let picked = l.exemplars(p.limit, p.strategy, p.min_reward, &rep);
                    let exemplars: Vec<Value> = picked
                        .iter()
                        .map(|&i| exemplar_json(&l.items[i], &rep))
                        .collect();
                    {
                        let mut dirty = lock(&s.dirty);
                        for &i in &picked {
                            dirty.insert((task.clone(), l.items[i].trajectory.trajectory_id.clone()));
                        }
                    }
                    Ok(json!({
                        "exemplars": exemplars,
                        "librarySize": l.items.len(),
                        "avgReward": avg_reward(l),
                        "strategy": p.strategy,
                    }))
                })
                .await
            }
            Some(methods::CURATE) => {
                let p = CurateParams::parse(params)?;
                let Some(l) = self.library(&p.task_type) else {
                    return Ok(json!({"kept": 0, "pruned": 0, "librarySize": 0, "prunedIds": []}));
                };
                let guard = l.lock_owned().await;
                let s = Arc::clone(self);
                self.work(method, guard, move |l| {
                    let pruned = l.curate(p.strategy, &s.reputation());
                    let deletes = pruned
                        .iter()
                        .map(|id| (p.task_type.clone(), id.clone()))
                        .collect();
                    s.write(Vec::new(), deletes, Vec::new())?;
                    Ok(json!({
                        "kept": l.items.len(),
                        "pruned": pruned.len(),
                        "librarySize": l.items.len(),
                        "prunedIds": pruned,
                        "strategy": p.strategy,
                    }))
                })
                .await
            }
            Some(methods::AUGMENT) => self.augment(method, params).await,
            Some(methods::ASSESS_DIFFICULTY) => {
                let p = DifficultyParams::parse(params)?;
                let l = self.library(&p.task_type);
                let guard = match l {
                    Some(l) => Some(l.lock_owned().await),
                    None => None,
                };
                let deadline = Instant::now() + self.settings.budget;
                self.pool
                    .run(method, deadline, move || {
                        let a = lib::difficulty(guard.as_deref(), &p.input, p.samples.as_deref());
                        Ok(json!({
                            "difficulty": a.difficulty,
                            "passRate": a.pass_rate,
                            "recommendation": a.recommendation,
                            "runs": a.runs,
                            "basis": a.basis,
                            "confidence": a.confidence,
                        }))
                    })
                    .await
            }
            Some(methods::GET_LIBRARY_STATS) => {
                let p = StatsParams::parse(params)?;
                let libs: Vec<Lib> = match &p.task_type {
                    Some(t) => self.library(t).into_iter().collect(),
                    None => self
                        .libraries_snapshot()
                        .into_iter()
                        .map(|(_, l)| l)
                        .collect(),
                };
                let mut guards = Vec::with_capacity(libs.len());
                for l in libs {
                    guards.push(l.lock_owned().await);
                }
                let s = Arc::clone(self);
                let deadline = Instant::now() + self.settings.budget;
                self.pool
                    .run(method, deadline, move || {
                        let rep = s.reputation();
                        let items = guards.iter().flat_map(|g| g.items.iter());
                        Ok(stats_json(items, &rep))
                    })
                    .await
            }
            _ => Err(RpcError::method_not_found().with_message(format!(
                "Method Not Found: {method} (improving methods: recordTrajectory, getExemplars, curate, augment, assessDifficulty, getLibraryStats)"
            ))),
        }
    }

    /// Runs `job` on the library held by `guard` on a worker, within the budget.
    async fn work<F>(
        &self,
        method: &str,
        mut guard: OwnedMutexGuard<Library>,
        job: F,
    ) -> Result<Value, RpcError>
    where
        F: FnOnce(&mut Library) -> Result<Value, RpcError> + Send + 'static,
    {
        let deadline = Instant::now() + self.settings.budget;
        self.pool
            .run(method, deadline, move || job(&mut guard))
            .await
    }

    /// Writes trajectory rows, deletions and standings in one transaction (blocking: on a
    /// worker).
    fn write(
        &self,
        puts: Vec<(String, String, String)>,
        deletes: Vec<(String, String)>,
        standings: Vec<(String, String)>,
    ) -> Result<(), RpcError> {
        self.runtime
            .block_on(self.store.put_trajectories(puts, deletes, standings))
            .map_err(|e| internal(format!("the library was not saved: {e}")))
    }

    async fn record(self: &Arc<Self>, params: &Value) -> Result<Value, RpcError> {
        let limits = self.settings.limits;
        let p = RecordParams::parse(params, &limits)?;
        let task = p.task_type.clone();
        let l = self.library_or_create(&task)?;
        let guard = l.lock_owned().await;
        let s = Arc::clone(self);
        let share = p.share.unwrap_or(self.settings.share) && p.reward.is_some();
        let credits = p.reward.is_some() && p.metadata.get("exemplarIds").is_some();
        let deadline = Instant::now() + self.settings.budget;
        let (answer, shared) = self
            .pool
            .run("improving.recordTrajectory", deadline, move || {
                let mut l = guard;
                let mut id = trajectory::trajectory_id(random4());
                while l.get(&id).is_some() {
                    id = trajectory::trajectory_id(random4());
                }
                let t = Trajectory {
                    trajectory_id: id,
                    task_type: p.task_type.clone(),
                    input: p.input,
                    output: p.output,
                    steps: p.steps,
                    reward: p.reward,
                    metadata: p.metadata,
                    peer_id: s.peer_id.clone(),
                    created_at: now_ms(),
                };
                let mut puts = Vec::new();
                let mut standings = Vec::new();
                // The exemplars this run used: their counts and their contributors' standing.
                if let Some(reward) = t.reward {
                    let ids: Vec<String> = t.metadata["exemplarIds"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|v| v.as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default();
                    if !ids.is_empty() {
                        let success = reward >= trajectory::SUCCESS_REWARD;
                        let credited = l.credit(&ids, success);
                        for id in &ids {
                            if let Some(h) = l.get(id) {
                                puts.push((p.task_type.clone(), id.clone(), row(h)?));
                            }
                        }
                        let mut rep = lock(&s.reputation);
                        for peer in &credited {
                            rep.record(peer, success);
                        }
                        for peer in credited.iter().collect::<BTreeSet<_>>() {
                            if let Some(st) = rep.peers.get(peer.as_str()) {
                                standings.push((
                                    peer.clone(),
                                    serde_json::to_string(st).map_err(internal)?,
                                ));
                            }
                        }
                        if !credited.is_empty() {
                            s.reputation_changed.store(true, Ordering::Release);
                        }
                    }
                }
                let held = Held::new(t.clone(), now_ms());
                let state = held.state;
                let rep = s.reputation();
                let (trajectory_id, kept, duplicate) = match l.admit(held, None, &rep) {
                    Admit::Added { evicted } => {
                        let h = l.get(&t.trajectory_id).ok_or_else(|| internal("lost"))?;
                        puts.push((p.task_type.clone(), t.trajectory_id.clone(), row(h)?));
                        let deletes = evicted
                            .into_iter()
                            .map(|e| (p.task_type.clone(), e))
                            .collect();
                        s.write(puts, deletes, standings)?;
                        (t.trajectory_id.clone(), true, false)
                    }
                    Admit::Duplicate(existing) => {
                        s.write(puts, Vec::new(), standings)?;
                        (existing, true, true)
                    }
                    Admit::Full | Admit::BelowMinReward => {
                        s.write(puts, Vec::new(), standings)?;
                        (t.trajectory_id.clone(), false, false)
                    }
                };
                let outgoing = (share && !duplicate).then(|| {
                    gossip::redacted(&Trajectory {
                        trajectory_id: trajectory_id.clone(),
                        ..t
                    })
                });
                Ok((
                    json!({
                        "trajectoryId": trajectory_id,
                        "state": state.as_str(),
                        "kept": kept,
                        "duplicate": duplicate,
                    }),
                    outgoing,
                ))
            })
            .await?;
        let mut answer = answer;
        if credits {
            // A contributor's standing changed: its gossip score follows at once.
            self.set_scores().await;
        }
        self.follow(&gossip::trajectory_topic(&task)).await;
        let was_shared = shared.is_some();
        let (gossiped_to, redactions) = match shared {
            Some((clean, flags)) => {
                let n = self.publish_trajectory(&clean).await;
                (n, flags.iter().map(|f| f.as_str()).collect::<Vec<_>>())
            }
            None => (0, Vec::new()),
        };
        if let Some(o) = answer.as_object_mut() {
            o.insert("gossipedTo".into(), json!(gossiped_to));
            o.insert("shared".into(), json!(was_shared));
            o.insert("redactions".into(), json!(redactions));
        }
        Ok(answer)
    }

    /// Signs and publishes a (redacted) trajectory; the number of peers it went to.
    async fn publish_trajectory(&self, t: &Trajectory) -> usize {
        let topic = gossip::trajectory_topic(&t.task_type);
        let Ok(d) = serde_json::to_string(t) else {
            return 0;
        };
        let env = match agora_hyperspace::envelope::sign(
            &self.key,
            &topic,
            now_ms(),
            &random_hex(16),
            &d,
        ) {
            Ok(env) => env,
            Err(e) => {
                tracing::warn!(error = %e, "cannot sign a trajectory");
                return 0;
            }
        };
        let (tx, rx) = oneshot::channel();
        if self
            .mesh
            .send(mesh::Command::PublishCounted {
                topic,
                data: env.into_bytes(),
                reply: tx,
            })
            .await
            .is_err()
        {
            return 0;
        }
        self.counters.shared.fetch_add(1, Ordering::Relaxed);
        rx.await.unwrap_or(0)
    }

    async fn augment(self: &Arc<Self>, method: &str, params: &Value) -> Result<Value, RpcError> {
        let p = AugmentParams::parse(params)?;
        if p.mode == AugmentMode::FullPipeline && self.chat.is_none() {
            return Err(RpcError::invalid_params()
                .with_message(
                    "Invalid params: FULL_PIPELINE needs an LLM endpoint ([improving] base_url and model); none is configured",
                )
                .with_data(json!({"reason": "no-llm", "field": "mode"})));
        }
        // Find the library that holds it.
        let mut found = None;
        for (task, l) in self.libraries_snapshot() {
            let guard = l.lock_owned().await;
            if guard.get(&p.trajectory_id).is_some() {
                found = Some((task, guard));
                break;
            }
        }
        let Some((task, guard)) = found else {
            return Err(RpcError::invalid_params()
                .with_message(format!(
                    "Invalid params: trajectoryId: no trajectory {} on this node",
                    p.trajectory_id
                ))
                .with_data(json!({"reason": "not-found", "field": "trajectoryId"})));
        };
        let s = Arc::clone(self);
        self.work(method, guard, move |l| {
            let id = p.trajectory_id.as_str();
            let state = l.get(id).map(|h| h.state).ok_or_else(|| internal("lost"))?;
            if p.mode == AugmentMode::None {
                return Ok(json!({"augmented": false, "newState": state.as_str()}));
            }
            let critique = l.critique(id).ok_or_else(|| internal("lost"))?;
            let mut out = json!({"critique": critique});
            let mut new_state = state;
            if p.mode == AugmentMode::FullPipeline {
                let chat = s.chat.as_ref().ok_or_else(|| internal("no chat"))?;
                let best = l
                    .items
                    .iter()
                    .filter(|h| {
                        h.state == TrajectoryState::Success && h.trajectory.trajectory_id != id
                    })
                    .max_by(|a, b| {
                        a.trajectory
                            .reward
                            .partial_cmp(&b.trajectory.reward)
                            .unwrap_or(std::cmp::Ordering::Equal)
                    });
                let target = l.get(id).ok_or_else(|| internal("lost"))?;
                let prompt = augment::prompt(target, &critique, best);
                let (steps, output) = chat
                    .complete(LLM_SYSTEM, &prompt)
                    .and_then(|a| augment::parse_regenerated(&a, &s.settings.limits))
                    .map_err(|e| {
                        RpcError::from_code(RpcCode::INTERNAL_ERROR)
                            .with_message(format!("Internal error: FULL_PIPELINE: {e}"))
                            .with_data(json!({"reason": "llm"}))
                    })?;
                new_state = TrajectoryState::Augmented;
                if let Some(o) = out.as_object_mut() {
                    o.insert(
                        "regenerated".into(),
                        json!({"steps": steps, "output": output}),
                    );
                }
                let h = l.get_mut(id).ok_or_else(|| internal("lost"))?;
                if !h.trajectory.metadata.is_object() {
                    h.trajectory.metadata = json!({});
                }
                if let Some(m) = h.trajectory.metadata.as_object_mut() {
                    m.insert(
                        "augmentation".into(),
                        json!({"steps": steps, "output": output, "verified": false}),
                    );
                }
            }
            let h = l.get_mut(id).ok_or_else(|| internal("lost"))?;
            h.critique = Some(critique);
            h.state = new_state;
            let r = row(h)?;
            s.write(
                vec![(task.clone(), id.to_owned(), r)],
                Vec::new(),
                Vec::new(),
            )?;
            if let Some(o) = out.as_object_mut() {
                o.insert("augmented".into(), json!(true));
                o.insert("newState".into(), json!(new_state.as_str()));
            }
            Ok(out)
        })
        .await
    }

    /// A trajectory received by gossip: the verdict for gossipsub.
    async fn received(self: &Arc<Self>, topic: &str, data: &[u8]) -> MessageAcceptance {
        let Ok(text) = std::str::from_utf8(data) else {
            return MessageAcceptance::Reject;
        };
        let Ok(env) = agora_hyperspace::envelope::Envelope::parse(text) else {
            return MessageAcceptance::Reject;
        };
        if env.from == self.peer_id {
            return MessageAcceptance::Accept;
        }
        let task = topic.strip_prefix(TRAJECTORIES_PREFIX).unwrap_or_default();
        let t = match gossip::decode_shared(env.d_json, env.from, task, &self.settings.limits) {
            Ok(t) => t,
            Err(e) => {
                self.counters.rejected.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%topic, error = %e.message, "rejected a trajectory");
                return MessageAcceptance::Reject;
            }
        };
        let Some(l) = self
            .library(task)
            .or_else(|| self.library_or_create(task).ok())
        else {
            self.counters.full.fetch_add(1, Ordering::Relaxed);
            return MessageAcceptance::Accept;
        };
        let contributor = t.peer_id.clone();
        let guard = l.lock_owned().await;
        let s = Arc::clone(self);
        let task = task.to_owned();
        let deadline = Instant::now() + self.settings.budget;
        let admitted = self
            .pool
            .run("admit", deadline, move || {
                let mut l = guard;
                let id = t.trajectory_id.clone();
                // Another trajectory under the same id (a collision, or a peer reusing one) would
                // shadow the held one: counted as a repeat.
                if l.get(&id).is_some() {
                    s.counters.duplicate.fetch_add(1, Ordering::Relaxed);
                    return Ok(false);
                }
                let outcome = l.admit(
                    Held::new(t, now_ms()),
                    Some(s.settings.min_reward),
                    &s.reputation(),
                );
                let c = &s.counters;
                Ok(match outcome {
                    Admit::Added { evicted } => {
                        c.admitted.fetch_add(1, Ordering::Relaxed);
                        lock(&s.dirty).insert((task.clone(), id));
                        if let Some(e) = evicted {
                            lock(&s.gone).insert((task, e));
                        }
                        true
                    }
                    Admit::Duplicate(_) => {
                        c.duplicate.fetch_add(1, Ordering::Relaxed);
                        false
                    }
                    Admit::BelowMinReward => {
                        c.below_min_reward.fetch_add(1, Ordering::Relaxed);
                        false
                    }
                    Admit::Full => {
                        c.full.fetch_add(1, Ordering::Relaxed);
                        false
                    }
                })
            })
            .await;
        let topic = gossip::reputation_topic(&contributor);
        let followed = {
            let subscribed = lock(&self.subscribed);
            subscribed.contains(&topic)
                || subscribed
                    .iter()
                    .filter(|t| t.starts_with(REPUTATION_PREFIX))
                    .count()
                    >= MAX_VIEWS
        };
        if admitted == Ok(true) && !followed {
            self.follow(&topic).await;
        }
        MessageAcceptance::Accept
    }

    fn view_received(&self, data: &[u8]) {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let Ok(env) = agora_hyperspace::envelope::Envelope::parse(text) else {
            return;
        };
        match ReputationView::decode(env.d_json, env.from) {
            Ok(v) => {
                let mut views = lock(&self.views);
                if views.len() < MAX_VIEWS || views.contains_key(&v.peer_id) {
                    views.insert(v.peer_id.clone(), v);
                }
            }
            Err(e) => tracing::debug!(from = env.from, error = %e, "an unreadable reputation view"),
        }
    }

    /// Publishes this node's reputation view.
    async fn publish_view(&self) {
        let view = ReputationView::of(&self.peer_id, &lock(&self.reputation), now_ms());
        let topic = gossip::reputation_topic(&self.peer_id);
        let Ok(d) = serde_json::to_string(&view) else {
            return;
        };
        match agora_hyperspace::envelope::sign(&self.key, &topic, now_ms(), &random_hex(16), &d) {
            Ok(env) => {
                let _ = self
                    .mesh
                    .send(mesh::Command::Publish {
                        topic,
                        data: env.into_bytes(),
                    })
                    .await;
            }
            Err(e) => tracing::warn!(error = %e, "cannot sign the reputation view"),
        }
    }

    /// Sets the gossipsub application score of every peer this node knows something of.
    async fn set_scores(&self) {
        let scores: Vec<(PeerId, f64)> = self
            .scores()
            .into_iter()
            .filter_map(|(p, s)| Some((p.parse().ok()?, s)))
            .collect();
        if !scores.is_empty() {
            let _ = self.mesh.send(mesh::Command::AppScores(scores)).await;
        }
    }

    /// Writes the rows changed since the last flush (usage counts, admissions, evictions).
    async fn flush(self: &Arc<Self>) {
        let dirty = std::mem::take(&mut *lock(&self.dirty));
        let gone = std::mem::take(&mut *lock(&self.gone));
        if dirty.is_empty() && gone.is_empty() {
            return;
        }
        let mut puts = Vec::new();
        let mut by_task: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (t, id) in &dirty {
            by_task.entry(t).or_default().push(id);
        }
        for (task, ids) in by_task {
            let Some(l) = self.library(task) else {
                continue;
            };
            let l = l.lock().await;
            for id in ids {
                if let Some(h) = l.get(id)
                    && let Ok(r) = serde_json::to_string(h)
                {
                    puts.push((task.to_owned(), id.to_owned(), r));
                }
            }
        }
        let deletes: Vec<(String, String)> = gone.into_iter().collect();
        if let Err(e) = self.store.put_trajectories(puts, deletes, Vec::new()).await {
            tracing::warn!(error = %e, "trajectory usage counts were not saved");
        }
    }
}

fn random4() -> [u8; 4] {
    let mut b = [0u8; 4];
    if getrandom::fill(&mut b).is_err() {
        b = (now_ms() as u32).to_le_bytes();
    }
    b
}

/// The mean reward of `l`'s rewarded trajectories, 4 decimals (0 without any): what
/// `Library::stats` says, without counting states and contributors.
fn avg_reward(l: &Library) -> f64 {
    let (n, sum) = l
        .items
        .iter()
        .filter_map(|h| h.trajectory.reward)
        .fold((0usize, 0.0f64), |(n, s), r| (n + 1, s + r));
    if n == 0 {
        0.0
    } else {
        ((sum / n as f64) * 10_000.0).round() / 10_000.0
    }
}

/// `getLibraryStats` over `items`.
fn stats_json<'a>(items: impl Iterator<Item = &'a Held>, rep: &Reputation) -> Value {
    let mut by_state: BTreeMap<&str, usize> = TrajectoryState::ALL
        .iter()
        .map(|s| (s.as_str(), 0))
        .collect();
    let (mut total, mut rewarded, mut sum) = (0usize, 0usize, 0.0f64);
    let mut contributors: BTreeMap<&str, usize> = BTreeMap::new();
    for h in items {
        total += 1;
        *by_state.entry(h.state.as_str()).or_insert(0) += 1;
        if let Some(r) = h.trajectory.reward {
            rewarded += 1;
            sum += r;
        }
        *contributors.entry(&h.trajectory.peer_id).or_insert(0) += 1;
    }
    let mut top: Vec<(&str, usize)> = contributors.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    top.truncate(5);
    let avg = if rewarded == 0 {
        0.0
    } else {
        ((sum / rewarded as f64) * 10_000.0).round() / 10_000.0
    };
    json!({
        "total": total,
        "byState": by_state,
        "avgReward": avg,
        "topContributors": top.into_iter().map(|(p, n)| json!({
            "peerId": p,
            "trajectories": n,
            "reputation": (rep.weight(p) * 10_000.0).round() / 10_000.0,
            "uses": rep.peers.get(p).map_or(0, |s| s.uses),
        })).collect::<Vec<_>>(),
    })
}
