//! The AGH service: one task that owns the [`agora_agh::Router`] and carries out its effects.
//!
//! Inputs: envelopes from local agents (WebSocket connections or HTTP posts), gossip and directed
//! requests from the mesh, and a timer. Outputs: frames to local agents, gossip publications,
//! directed requests to other nodes, and gossip validation verdicts. Because one task owns all
//! AGH state, no lock is ever taken on the hot path.
//!
//! Mesh mapping (`docs/architecture.md`): broadcasts travel on gossipsub topic
//! `agh/v0/<channel>` carrying the envelope's exact bytes; directed envelopes go by
//! request-response to the node that hosts the target peer, which is the gossip *source* of that
//! peer's greets (authenticated by the gossipsub signature), or the node that sent us a directed
//! request.
//!
//! Limits on one agent connection: it may be in at most [`Settings::max_channels`] channels
//! (a greet into one more is refused with `busy`); frames it does not read are queued up to
//! [`AGENT_QUEUE`] and then dropped, counted in `dropped` and logged at most once per
//! [`WARN_EVERY`] per connection with the number of drops not logged.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agora_agh::lifecycle::{Interaction, Outcome};
use agora_agh::router::{Effects, IdSource, Route, UuidIds};
use agora_agh::{Catalog, InteractionState, Rejection, Router, RouterConfig, ValidationPolicy};
use libp2p::PeerId;
use libp2p::gossipsub::MessageAcceptance;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::config::Config;
use crate::faces::nats;

mod catchup;
mod listing;
use crate::mesh;
use crate::store::{Store, StoreError};

/// Gossip topic prefix of AGH channels.
pub const TOPIC_PREFIX: &str = "agh/v0/";

/// How long a finished interaction is remembered (so late work gets `interaction_closed`).
pub const FINISHED_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// The stored form of an interaction.
fn interaction_json(i: &Interaction) -> String {
    serde_json::json!({
        "initiator": i.initiator,
        "target": i.target,
        "state": i.state.as_str(),
        "opened_at": i.opened_at,
        "updated_at": i.updated_at,
    })
    .to_string()
}

/// Reads the stored form of an interaction.
pub fn parse_interaction(json: &str) -> Option<Interaction> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    Some(Interaction {
        initiator: v["initiator"].as_str()?.to_owned(),
        target: v["target"].as_str()?.to_owned(),
        state: InteractionState::from_wire(v["state"].as_str()?)?,
        opened_at: v["opened_at"].as_i64()?,
        updated_at: v["updated_at"].as_i64()?,
    })
}

/// Frames queued for one agent before it counts as too slow.
pub const AGENT_QUEUE: usize = 1024;

/// A repeated warning is logged at most once per this period (per connection where it is about
/// one), with the count of those held back.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// Holds back a repeated warning: the first is logged, then at most one per [`WARN_EVERY`].
#[derive(Debug, Default)]
struct Throttle {
    last: Option<Instant>,
    held: u64,
}

impl Throttle {
    /// `Some(held back since the last line)` when this occurrence is to be logged.
    fn hit(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.duration_since(t) < WARN_EVERY => {
                self.held += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held))
            }
        }
    }
}

/// One local agent connection.
#[derive(Debug)]
struct AgentConn {
    frames: mpsc::Sender<Frame>,
    /// Channels it greeted in.
    channels: HashSet<String>,
    /// Frames dropped because it did not read them.
    dropped: u64,
    drop_warnings: Throttle,
}

/// Where a remote peer was learned from, and so where directed envelopes for it go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    /// A node of the libp2p mesh.
    Mesh(PeerId),
    /// The NATS bridge (the reference NATS profile).
    Nats,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Mesh(p) => write!(f, "{p}"),
            Self::Nats => f.write_str("nats"),
        }
    }
}

/// Identifies one local agent connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// A frame for a local agent: an envelope (exact bytes) or an error object.
pub type Frame = String;

/// The verdict on one envelope sent by a local agent.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Verdict {
    /// Accepted?
    pub ok: bool,
    /// Envelope id, when it could be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Reason code when rejected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Detail when rejected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Verdict {
    fn of(fx_result: &Result<agora_agh::router::Accepted, Rejection>) -> Self {
        match fx_result {
            Ok(a) => Self {
                ok: true,
                id: Some(a.id.clone()),
                reason: None,
                detail: None,
            },
            Err(e) => Self {
                ok: false,
                id: None,
                reason: Some(e.reason().as_str().to_owned()),
                detail: Some(e.detail().to_owned()),
            },
        }
    }

    /// The JSON error frame sent to an agent for a rejected envelope.
    pub fn error_frame(&self) -> String {
        serde_json::json!({ "error": self }).to_string()
    }
}

/// One present peer, as the HTTP API shows it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PeerView {
    /// Channel.
    pub channel: String,
    /// Peer ID.
    pub peer_id: String,
    /// `local` or `remote`.
    pub presence: &'static str,
    /// The node hosting a remote peer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Seconds until a remote peer expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<i64>,
    /// The peer's card, as JSON.
    pub peer_card: serde_json::Value,
    /// Capability ids in its catalog (local) or cached rich catalog (remote).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub catalog: Vec<String>,
}

/// Requests to the AGH service.
#[derive(Debug)]
pub enum Input {
    /// An agent connected; frames for it go to `frames`.
    Connect {
        /// Connection.
        conn: ConnId,
        /// Its outgoing frames.
        frames: mpsc::Sender<Frame>,
    },
    /// An agent disconnected; its peers leave.
    Disconnect(ConnId),
    /// An envelope from an agent.
    FromAgent {
        /// Connection.
        conn: ConnId,
        /// The envelope's bytes.
        bytes: Vec<u8>,
        /// Where the verdict goes (HTTP posts wait for it); WebSocket agents get error frames.
        verdict: Option<oneshot::Sender<Verdict>>,
        /// The envelope's share of the bytes in flight ([`InFlight`]), given back once the
        /// service has handled it.
        held: Held,
    },
    /// List present peers.
    Peers {
        /// Only this channel.
        channel: Option<String>,
        /// Answer.
        reply: oneshot::Sender<Vec<PeerView>>,
    },
    /// Set (or clear) the catalog of a local Peer ID; persisted before it is applied.
    SetCatalog {
        /// Peer ID.
        peer_id: String,
        /// The catalog; `None` clears it.
        catalog: Option<Catalog>,
        /// Done (or why not).
        reply: oneshot::Sender<Result<Vec<String>, String>>,
    },
    /// Counters for `/status`.
    Stats(oneshot::Sender<Stats>),
    /// Every present peer as a directory record (the directory's `agh` feed); `node` is this
    /// node's PeerId, the host of the local peers.
    Directory {
        /// This node's PeerId.
        node: String,
        /// Answer.
        reply: oneshot::Sender<Vec<agora_directory::FeedItem>>,
    },
    /// The most recently updated interactions (at most [`MAX_REPORTED_INTERACTIONS`]), newest
    /// first, for the dashboard.
    Interactions(oneshot::Sender<serde_json::Value>),
}

/// Bytes of agents' envelopes on their way to or in the AGH service, all connections together.
/// The service's queue is counted in messages (4,096); with envelopes of up to 1 MiB that alone
/// would hold 4 GiB: an agent sending 1 MiB envelopes as fast as it could grew the node to 948 MB.
pub const BYTES_IN_FLIGHT: usize = 32 << 20;
/// … and of one connection (an agent's WebSocket, an HTTP post).
pub const CONN_BYTES_IN_FLIGHT: usize = 4 << 20;

/// The budget of [`BYTES_IN_FLIGHT`], shared by the faces that take agents' envelopes. A face
/// takes an envelope's share, from its connection's [`CONN_BYTES_IN_FLIGHT`] too, before it
/// reads the next frame: past either bound it waits, so the agent's socket fills and TCP holds
/// the agent back.
#[derive(Clone, Debug)]
pub struct InFlight(std::sync::Arc<tokio::sync::Semaphore>);

impl Default for InFlight {
    fn default() -> Self {
        Self(std::sync::Arc::new(tokio::sync::Semaphore::new(
            BYTES_IN_FLIGHT,
        )))
    }
}

/// One envelope's share of [`InFlight`] (and of its connection's budget); released on drop.
#[derive(Debug)]
pub struct Held(
    #[allow(dead_code, reason = "held for its drop")] Vec<tokio::sync::OwnedSemaphorePermit>,
);

impl InFlight {
    /// A connection's own budget of [`CONN_BYTES_IN_FLIGHT`].
    pub fn connection() -> std::sync::Arc<tokio::sync::Semaphore> {
        std::sync::Arc::new(tokio::sync::Semaphore::new(CONN_BYTES_IN_FLIGHT))
    }

    /// Waits until `len` bytes fit in `conn`'s budget and in this one; `None` once either is
    /// closed (never, in practice).
    pub async fn hold(
        &self,
        conn: &std::sync::Arc<tokio::sync::Semaphore>,
        len: usize,
    ) -> Option<Held> {
        let share = |cap: usize| u32::try_from(len.clamp(1, cap)).unwrap_or(u32::MAX);
        let mine = std::sync::Arc::clone(conn)
            .acquire_many_owned(share(CONN_BYTES_IN_FLIGHT))
            .await
            .ok()?;
        let all = std::sync::Arc::clone(&self.0)
            .acquire_many_owned(share(BYTES_IN_FLIGHT))
            .await
            .ok()?;
        Some(Held(vec![mine, all]))
    }
}

/// AGH counters.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Stats {
    /// Local agent connections.
    pub connections: usize,
    /// Local peers (over all channels).
    pub local_peers: usize,
    /// Unexpired remote peers (over all channels).
    pub remote_peers: usize,
    /// Tracked interactions.
    pub interactions: usize,
    /// Envelopes accepted from agents.
    pub sent: u64,
    /// Envelopes accepted from the mesh.
    pub received: u64,
    /// Envelopes rejected (both directions).
    pub rejected: u64,
    /// Frames dropped because an agent did not read them fast enough (its queue of
    /// [`AGENT_QUEUE`] frames was full; the reference runtime drops on overflow too).
    pub dropped: u64,
}

/// Settings of the AGH service.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Interactions loaded from the store: `(channel, interaction_id, record)`.
    pub interactions: Vec<(String, String, Interaction)>,
    /// Greet interval.
    pub greet_interval: Duration,
    /// Validation policy.
    pub policy: ValidationPolicy,
    /// Channels one agent connection may be in.
    pub max_channels: usize,
    /// Counts envelopes from agents, accepted or rejected by reason.
    pub telemetry: Option<std::sync::Arc<crate::telemetry::Telemetry>>,
}

/// Interactions the dashboard's report lists.
pub const MAX_REPORTED_INTERACTIONS: usize = 100;

/// Unix seconds now.
use crate::clock::unix_now;

fn random_ids() -> impl IdSource {
    UuidIds::new(|b: &mut [u8; 16]| {
        if getrandom::fill(b).is_err() {
            // The system random source failing is not recoverable in a useful way; fall back to
            // time-derived bytes so that ids stay unique on this node.
            let t = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            b.copy_from_slice(&t.to_le_bytes());
        }
    })
}

struct Service<I: IdSource> {
    router: Router<ConnId, Origin>,
    conns: HashMap<ConnId, AgentConn>,
    max_channels: usize,
    /// Generated envelopes refused before emission (not about one connection).
    refused_warnings: Throttle,
    /// Recent channel messages, sent to neighbours that (re)join a channel ([`catchup`]).
    recent: catchup::Recent,
    catalogs: HashMap<String, Catalog>,
    mesh: mpsc::Sender<mesh::Command>,
    nats: Option<mpsc::Sender<nats::Command>>,
    store: Store,
    ids: I,
    stats: Stats,
    telemetry: Option<std::sync::Arc<crate::telemetry::Telemetry>>,
    /// Channels whose gossip topic this node joined for its local peers (left when the last one
    /// goes).
    joined: std::collections::BTreeSet<String>,
}

/// The channels the AGH service works with.
#[derive(Debug)]
pub struct Parts {
    /// Requests from the faces.
    pub inputs: mpsc::Receiver<Input>,
    /// Events from the mesh (all but the Hyperspace ones, see `crate::routes`).
    pub mesh_events: mpsc::Receiver<mesh::Event>,
    /// Commands to the mesh.
    pub mesh: mpsc::Sender<mesh::Command>,
    /// The NATS bridge, when configured: commands out, messages in.
    pub nats: Option<(mpsc::Sender<nats::Command>, mpsc::Receiver<nats::Message>)>,
    /// Where the mesh's listen addresses are reported.
    pub listening: mpsc::Sender<libp2p::Multiaddr>,
}

/// What the AGH service needs from the node.
#[derive(Debug)]
pub struct Wiring {
    /// Commands to the mesh.
    pub mesh: mpsc::Sender<mesh::Command>,
    /// The NATS bridge, when configured: commands out, messages in.
    pub nats: Option<(mpsc::Sender<nats::Command>, mpsc::Receiver<nats::Message>)>,
    /// Where the mesh's listen addresses are reported.
    pub listening: mpsc::Sender<libp2p::Multiaddr>,
    /// Counts envelopes from agents.
    pub telemetry: std::sync::Arc<crate::telemetry::Telemetry>,
}

/// The running AGH service, as the node holds it.
#[derive(Debug)]
pub struct Started {
    /// Its input (from the faces).
    pub tx: mpsc::Sender<Input>,
    /// The mesh events it owns (the routers' fallback).
    pub events: mpsc::Sender<mesh::Event>,
    /// The service's task.
    pub task: tokio::task::JoinHandle<()>,
}

impl Settings {
    /// The settings `config` asks for (`[agh]`, the greet interval), with the stored
    /// interactions.
    pub fn from_config(
        config: &Config,
        interactions: Vec<(String, String, Interaction)>,
        telemetry: std::sync::Arc<crate::telemetry::Telemetry>,
    ) -> Self {
        Self {
            interactions,
            greet_interval: config.greet_interval,
            policy: ValidationPolicy {
                replay_age: config.agh.replay_age,
                reference_admission: config.agh.reference_admission,
            },
            max_channels: config.agh.max_channels,
            telemetry: Some(telemetry),
        }
    }
}

/// Starts the AGH service: loads the stored catalogs and interactions (unreadable ones are
/// logged and skipped), then [`run`] on a task of its own.
pub async fn start(config: &Config, store: Store, node: Wiring) -> Result<Started, StoreError> {
    let catalogs = load_catalogs(&store).await?;
    let interactions = load_interactions(&store).await?;
    let (tx, inputs) = mpsc::channel(4096);
    let (events, mesh_events) = mpsc::channel(4096);
    let task = tokio::spawn(run(
        Settings::from_config(config, interactions, node.telemetry),
        store,
        catalogs,
        Parts {
            inputs,
            mesh_events,
            mesh: node.mesh,
            nats: node.nats,
            listening: node.listening,
        },
    ));
    Ok(Started { tx, events, task })
}

async fn load_catalogs(store: &Store) -> Result<HashMap<String, Catalog>, StoreError> {
    let rows = store.read(Store::catalogs).await?;
    let mut out = HashMap::new();
    for (peer_id, json) in rows {
        match Catalog::from_json(&json) {
            Ok(c) => {
                out.insert(peer_id, c);
            }
            Err(e) => tracing::warn!(%peer_id, error = %e, "stored catalog is unreadable; ignored"),
        }
    }
    Ok(out)
}

async fn load_interactions(
    store: &Store,
) -> Result<Vec<(String, String, Interaction)>, StoreError> {
    let rows = store.read(Store::interactions).await?;
    Ok(rows
        .into_iter()
        .filter_map(|(channel, iid, json)| match parse_interaction(&json) {
            Some(i) => Some((channel, iid, i)),
            None => {
                tracing::warn!(%channel, %iid, "stored interaction is unreadable; ignored");
                None
            }
        })
        .collect())
}

/// Runs the AGH service until `inputs` closes.
pub async fn run(
    settings: Settings,
    store: Store,
    catalogs: HashMap<String, Catalog>,
    parts: Parts,
) {
    let Parts {
        mut inputs,
        mut mesh_events,
        mesh,
        nats,
        listening,
    } = parts;
    let (nats, mut nats_messages) = match nats {
        Some((tx, rx)) => (Some(tx), Some(rx)),
        None => (None, None),
    };
    let interval = settings.greet_interval;
    let restored = settings.interactions;
    let recent = catchup::Recent::new(settings.policy.replay_age);
    let mut svc = Service {
        recent,
        router: Router::new(RouterConfig {
            policy: settings.policy,
            greet_interval: i64::try_from(interval.as_secs()).unwrap_or(i64::MAX).max(1),
            ..RouterConfig::default()
        }),
        conns: HashMap::new(),
        max_channels: settings.max_channels.max(1),
        refused_warnings: Throttle::default(),
        catalogs,
        mesh,
        nats,
        store,
        ids: random_ids(),
        stats: Stats::default(),
        telemetry: settings.telemetry.clone(),
        joined: std::collections::BTreeSet::new(),
    };
    let now = unix_now();
    for (channel, iid, i) in restored {
        if let Err(e) = svc.router.interactions.restore(&channel, &iid, i, now) {
            tracing::warn!(%channel, %iid, error = %e, "stored interaction not restored");
        }
    }
    let mut pruning = tokio::time::interval(Duration::from_secs(3600));
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sweep = tokio::time::interval(Duration::from_millis(250).min(interval));
    loop {
        tokio::select! {
            input = inputs.recv() => {
                let Some(input) = input else { break };
                svc.input(input).await;
            }
            event = mesh_events.recv() => {
                let Some(event) = event else { break };
                if let mesh::Event::Listening(addr) = &event {
                    let _ = listening.send(addr.clone()).await;
                }
                svc.mesh_event(event).await;
            }
            message = next_nats(&mut nats_messages) => {
                match message {
                    Some(m) => svc.nats_message(m).await,
                    None => nats_messages = None,
                }
            }
            _ = ticker.tick() => svc.announce().await,
            _ = pruning.tick() => svc.prune().await,
            _ = sweep.tick() => { svc.router.presence.sweep(unix_now()); }
        }
    }
}

/// Hands `data` to the mesh for `node` on the directed-envelope protocol; the answer's receiver,
/// or `None` when the mesh is gone.
async fn send_envelope(
    mesh: &mpsc::Sender<mesh::Command>,
    node: PeerId,
    data: Vec<u8>,
) -> Option<oneshot::Receiver<Result<Vec<u8>, String>>> {
    let (reply, answer) = oneshot::channel();
    mesh.send(mesh::Command::SendDirect {
        proto: mesh::Proto::Envelope,
        peer: node,
        data,
        reply,
    })
    .await
    .ok()?;
    Some(answer)
}

/// The next NATS message, or never when there is no bridge.
async fn next_nats(rx: &mut Option<mpsc::Receiver<nats::Message>>) -> Option<nats::Message> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl<I: IdSource> Service<I> {
    async fn nats_message(&mut self, m: nats::Message) {
        let fx = self
            .router
            .receive(&m.payload, Origin::Nats, unix_now(), &mut self.ids);
        self.count(&fx);
        let _ = self.persist_lifecycle(&fx).await;
        // Traffic from NATS is delivered here only; generated replies (receipts, whois
        // answers) go back over NATS.
        self.execute(fx, Some(&m.payload), None).await;
    }

    async fn input(&mut self, input: Input) {
        match input {
            Input::Connect { conn, frames } => {
                self.conns.insert(
                    conn,
                    AgentConn {
                        frames,
                        channels: HashSet::new(),
                        dropped: 0,
                        drop_warnings: Throttle::default(),
                    },
                );
            }
            Input::Disconnect(conn) => {
                if let Some(gone) = self.conns.remove(&conn)
                    && gone.drop_warnings.held > 0
                {
                    tracing::warn!(
                        conn = conn.0,
                        dropped = gone.dropped,
                        unlogged_drops = gone.drop_warnings.held,
                        "agent disconnected with dropped frames that were not logged"
                    );
                }
                self.router.presence.remove_owner(&conn);
                self.leave_empty_channels().await;
            }
            Input::FromAgent {
                conn,
                bytes,
                verdict,
                held,
            } => {
                // The envelope's share of the bytes in flight goes with it to the mesh.
                self.agent_envelope(conn, &bytes, verdict, held).await;
            }
            Input::Peers { channel, reply } => {
                let _ = reply.send(self.peers(channel.as_deref()));
            }
            Input::Directory { node, reply } => {
                let _ = reply.send(self.directory_feed(&node));
            }
            Input::SetCatalog {
                peer_id,
                catalog,
                reply,
            } => {
                let _ = reply.send(self.set_catalog(peer_id, catalog).await);
            }
            Input::Interactions(reply) => {
                let mut all: Vec<(&str, &str, &Interaction)> =
                    self.router.interactions.iter().collect();
                all.sort_by_key(|i| std::cmp::Reverse(i.2.updated_at));
                let list: Vec<serde_json::Value> = all
                    .into_iter()
                    .take(MAX_REPORTED_INTERACTIONS)
                    .map(|(channel, id, i)| {
                        serde_json::json!({
                            "channel": channel,
                            "interaction_id": id,
                            "initiator": i.initiator,
                            "target": i.target,
                            "state": i.state.as_str(),
                            "opened_at": i.opened_at,
                            "updated_at": i.updated_at,
                        })
                    })
                    .collect();
                let _ = reply.send(serde_json::json!({
                    "total": self.router.interactions.len(),
                    "recent": list,
                }));
            }
            Input::Stats(reply) => {
                let mut s = self.stats.clone();
                let now = unix_now();
                s.connections = self.conns.len();
                for ch in self.router.presence.channels() {
                    s.local_peers += self.router.presence.local_peers(ch).count();
                    s.remote_peers += self.router.presence.remote_peers(ch, now).count();
                }
                s.interactions = self.router.interactions.len();
                let _ = reply.send(s);
            }
        }
    }

    async fn agent_envelope(
        &mut self,
        conn: ConnId,
        bytes: &[u8],
        verdict: Option<oneshot::Sender<Verdict>>,
        held: Held,
    ) {
        if let Some(refused) = self.over_channel_limit(conn, bytes) {
            self.stats.rejected += 1;
            self.count_envelope(&refused);
            match verdict {
                Some(tx) => {
                    let _ = tx.send(refused);
                }
                None => self.frame_to_conn(conn, refused.error_frame()),
            }
            return;
        }
        let now = unix_now();
        let mut fx = self.router.send(bytes, &conn, now, &mut self.ids);
        // What the envelope did to an interaction is written before anything else happens; when
        // it cannot be (a full disk) the envelope is undone and refused, nothing kept.
        if let Err(e) = self.persist_lifecycle(&fx).await
            && let Ok(a) = &fx.result
        {
            self.router.undo(a);
            fx = Effects::rejected(Rejection::Internal(
                format!(
                    "this node cannot save the interaction now ({e}); nothing was kept: send the envelope again later"
                )
                .into(),
            ));
        }
        let mut v = Verdict::of(&fx.result);
        if !v.ok {
            // Name the refused envelope when its id can be read, so the agent can correlate.
            v.id = agora_agh::RawEnvelope::parse(bytes)
                .ok()
                .and_then(|r| r.id.map(|id| id.trim().to_owned()))
                .filter(|id| !id.is_empty());
        }
        if fx.result.is_ok() {
            self.stats.sent += 1;
            // A greet registers a local peer: give it its stored catalog and join the channel.
            if let Ok(a) = &fx.result
                && a.kind == agora_agh::Kind::Greet
            {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.channels.insert(a.channel.clone());
                }
                self.on_local_greet(bytes, conn, &a.channel).await;
            }
        } else {
            self.stats.rejected += 1;
        }
        self.count_envelope(&v);
        match verdict {
            Some(tx) => {
                let _ = tx.send(v);
            }
            None if !v.ok => self.frame_to_conn(conn, v.error_frame()),
            None => {}
        }
        self.execute(fx, Some(bytes), Some(held)).await;
    }

    /// Counts an envelope from an agent in the metrics (its reason code as a fixed label).
    fn count_envelope(&self, v: &Verdict) {
        if let Some(t) = &self.telemetry {
            let reason = v.reason.as_deref().map(|r| {
                agora_agh::ReasonCode::ALL
                    .iter()
                    .map(|c| c.as_str())
                    .find(|c| *c == r)
                    .unwrap_or("other")
            });
            t.agh_envelope(if v.ok {
                None
            } else {
                Some(reason.unwrap_or("other"))
            });
        }
    }

    /// The refusal of a greet that would put `conn` in more than `max_channels` channels.
    fn over_channel_limit(&self, conn: ConnId, bytes: &[u8]) -> Option<Verdict> {
        let c = self.conns.get(&conn)?;
        if c.channels.len() < self.max_channels {
            return None;
        }
        let raw = agora_agh::RawEnvelope::parse(bytes).ok()?;
        let channel = raw.channel.as_deref()?;
        if raw.kind.as_deref() != Some("greet") || c.channels.contains(channel) {
            return None;
        }
        Some(Verdict {
            ok: false,
            id: raw
                .id
                .map(|id| id.trim().to_owned())
                .filter(|id| !id.is_empty()),
            reason: Some("busy".into()),
            detail: Some(format!(
                "this connection is already in {} channels, the limit ([agh] max_channels); \
                 greet in one of them or use another connection",
                c.channels.len()
            )),
        })
    }

    async fn on_local_greet(&mut self, bytes: &[u8], conn: ConnId, channel: &str) {
        let Ok(env) = agora_agh::Envelope::parse(bytes) else {
            return;
        };
        let peer_id = env.from.to_string();
        if let Some(catalog) = self.catalogs.get(&peer_id) {
            self.router
                .presence
                .set_local_catalog(&peer_id, &conn, Some(catalog));
        }
        if self.joined.insert(channel.to_owned()) {
            let _ = self
                .mesh
                .send(mesh::Command::Subscribe(format!("{TOPIC_PREFIX}{channel}")))
                .await;
        }
        if let Some(nats) = &self.nats {
            let subjects = [
                agora_agh::broadcast_subject(channel),
                agora_agh::direct_subject(channel, &peer_id),
            ];
            for subject in subjects.into_iter().flatten() {
                let _ = nats.send(nats::Command::Subscribe(subject)).await;
            }
        }
    }

    /// Leaves the gossip topics of channels where no local peer is left.
    async fn leave_empty_channels(&mut self) {
        let empty: Vec<String> = self
            .joined
            .iter()
            .filter(|ch| self.router.presence.local_peers(ch).next().is_none())
            .cloned()
            .collect();
        for channel in empty {
            self.joined.remove(&channel);
            let _ = self
                .mesh
                .send(mesh::Command::Unsubscribe(format!(
                    "{TOPIC_PREFIX}{channel}"
                )))
                .await;
        }
    }

    async fn mesh_event(&mut self, event: mesh::Event) {
        match event {
            mesh::Event::Gossip {
                topic,
                data,
                source,
                id,
                propagation_source,
                needs_verdict,
            } => {
                let origin = Origin::Mesh(source.unwrap_or(propagation_source));
                let acceptance = if topic.starts_with(TOPIC_PREFIX) {
                    let fx = self
                        .router
                        .receive(&data, origin, unix_now(), &mut self.ids);
                    let acceptance = acceptance_of(&fx.result);
                    self.count(&fx);
                    let _ = self.persist_lifecycle(&fx).await;
                    self.execute(fx, Some(&data), None).await;
                    acceptance
                } else {
                    MessageAcceptance::Ignore
                };
                if needs_verdict {
                    mesh::report_validation(&self.mesh, id, propagation_source, acceptance).await;
                }
            }
            mesh::Event::Direct {
                peer,
                data,
                channel,
                ..
            } => {
                let fx = self
                    .router
                    .receive(&data, Origin::Mesh(peer), unix_now(), &mut self.ids);
                self.count(&fx);
                let _ = self.persist_lifecycle(&fx).await;
                // Channel traffic new to this node that a neighbour caught it up on goes on to
                // the channel's topic, for the nodes that missed it too ([`catchup`]).
                let caught_up = match &fx.result {
                    Ok(a) if a.to.is_none() && catchup::Recent::keeps(a.kind) => {
                        Some(format!("{TOPIC_PREFIX}{}", a.channel))
                    }
                    _ => None,
                };
                if let Some(topic) = caught_up {
                    let _ = self
                        .mesh
                        .send(mesh::Command::Publish {
                            topic,
                            data: data.clone(),
                        })
                        .await;
                }
                let v = Verdict::of(&fx.result);
                let response = serde_json::to_vec(&v).unwrap_or_default();
                let _ = self
                    .mesh
                    .send(mesh::Command::Respond {
                        proto: mesh::Proto::Envelope,
                        channel,
                        data: response,
                    })
                    .await;
                self.execute(fx, Some(&data), None).await;
            }
            mesh::Event::Connected(_) => {
                // A new neighbour: tell it who is here now rather than at the next tick.
                self.announce().await;
            }
            mesh::Event::Subscribed(peer, topic) => {
                // A neighbour newly in a channel: tell it who is here, and what it may have
                // missed ([`catchup`]).
                self.announce().await;
                if let Some(channel) = topic.strip_prefix(TOPIC_PREFIX) {
                    let recent = self.recent.of(unix_now(), channel);
                    if !recent.is_empty() {
                        self.catch_up(peer, recent);
                    }
                }
            }
            mesh::Event::Listening(_)
            | mesh::Event::RecordOffered { .. }
            | mesh::Event::DhtPeer(_) => {}
        }
    }

    /// Writes the interaction an accepted envelope opened or moved, so that it survives a
    /// restart; a failure is logged and returned (an agent's envelope is then undone; one from
    /// another node or NATS stays in memory: its sender cannot be told).
    async fn persist_lifecycle(&mut self, fx: &Effects<Origin>) -> Result<(), StoreError> {
        let Ok(a) = &fx.result else { return Ok(()) };
        if !matches!(a.lifecycle, Outcome::Opened | Outcome::Changed { .. }) {
            return Ok(());
        }
        let Some(iid) = a.interaction_id.as_deref() else {
            return Ok(());
        };
        let Some(i) = self.router.interactions.get(&a.channel, iid) else {
            return Ok(());
        };
        let json = interaction_json(i);
        let written = self.store.put_interaction(&a.channel, iid, &json).await;
        if let Err(e) = &written {
            tracing::error!(error = %e, "cannot persist an interaction");
        }
        written
    }

    /// Forgets finished interactions older than [`FINISHED_RETENTION`], in memory and on disk.
    async fn prune(&mut self) {
        let before = unix_now() - FINISHED_RETENTION.as_secs() as i64;
        for (channel, iid) in self.router.interactions.prune_finished(before) {
            if let Err(e) = self.store.delete_interaction(&channel, &iid).await {
                tracing::warn!(error = %e, "cannot delete a finished interaction");
            }
        }
    }

    fn count(&mut self, fx: &Effects<Origin>) {
        let rejected = match &fx.result {
            Ok(_) => {
                self.stats.received += 1;
                None
            }
            Err(r) => {
                self.stats.rejected += 1;
                Some(r.reason().as_str())
            }
        };
        if let Some(t) = &self.telemetry {
            t.agh_network_envelope(rejected);
        }
    }

    async fn announce(&mut self) {
        let now = unix_now();
        let replies = self.router.announcements(now, &mut self.ids);
        for reply in replies {
            let bytes = reply.envelope.to_json().into_bytes();
            self.route(reply.route, &reply.envelope.channel, None, bytes, None)
                .await;
        }
    }

    /// Carries out a router's effects. `original` is the envelope the effects are about;
    /// `held`, an agent's share of the bytes in flight for it, goes with it to the mesh.
    async fn execute(&mut self, fx: Effects<Origin>, original: Option<&[u8]>, held: Option<Held>) {
        let (channel, to) = match &fx.result {
            Ok(a) => (Some(a.channel.clone()), a.to.clone()),
            Err(_) => (None, None),
        };
        if let (Some(original), Some(channel)) = (original, &channel) {
            let text = String::from_utf8_lossy(original).into_owned();
            for peer in &fx.deliver {
                self.deliver_local(channel, peer, text.clone());
            }
            let broadcast = matches!(&fx.result,
                Ok(a) if a.to.is_none() && catchup::Recent::keeps(a.kind));
            if let Some(route) = fx.publish.clone() {
                let bytes = match &fx.rewritten {
                    Some(env) => env.to_json().into_bytes(),
                    None => original.to_vec(),
                };
                if broadcast {
                    self.recent.push(unix_now(), channel, &bytes);
                }
                self.route(route, channel, to.as_deref(), bytes, held).await;
            } else if broadcast {
                self.recent.push(unix_now(), channel, original);
            }
        }
        for reply in fx.replies {
            let bytes = reply.envelope.to_json().into_bytes();
            let to = reply.envelope.to.as_deref().map(str::to_owned);
            self.route(
                reply.route,
                &reply.envelope.channel,
                to.as_deref(),
                bytes,
                None,
            )
            .await;
        }
        for refused in fx.refused {
            if let Some(held) = self.refused_warnings.hit(Instant::now()) {
                tracing::warn!(%refused, held_back = held, "generated envelope refused before emission");
            }
        }
    }

    /// Sends an envelope along `route`; `to` is its target (for NATS peer subjects).
    async fn route(
        &mut self,
        route: Route<Origin>,
        channel: &str,
        to: Option<&str>,
        bytes: Vec<u8>,
        held: Option<Held>,
    ) {
        match route {
            Route::Local(peer) => {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                self.deliver_local(channel, &peer, text);
            }
            Route::Broadcast => {
                if let Some(nats) = &self.nats
                    && let Ok(subject) = agora_agh::broadcast_subject(channel)
                {
                    let _ = nats
                        .send(nats::Command::Publish {
                            subject,
                            payload: bytes.clone(),
                        })
                        .await;
                }
                let topic = format!("{TOPIC_PREFIX}{channel}");
                let command = match held {
                    Some(held) => mesh::Command::PublishHeld {
                        topic,
                        data: bytes,
                        hold: mesh::Hold(Box::new(held)),
                    },
                    None => mesh::Command::Publish { topic, data: bytes },
                };
                let _ = self.mesh.send(command).await;
            }
            Route::Remote(Origin::Nats) => {
                if let (Some(nats), Some(to)) = (&self.nats, to)
                    && let Ok(subject) = agora_agh::direct_subject(channel, to)
                {
                    let _ = nats
                        .send(nats::Command::Publish {
                            subject,
                            payload: bytes,
                        })
                        .await;
                }
            }
            Route::Remote(Origin::Mesh(node)) => self.send_direct(node, bytes).await,
        }
    }

    /// Sends `messages` to `node` one after the other, each once the previous one is answered:
    /// a burst would overrun the peer's inbound streams (request-response drops those beyond
    /// its concurrency, and the messages with them — seen after a partition healed).
    fn catch_up(&self, node: PeerId, messages: Vec<Vec<u8>>) {
        let mesh = self.mesh.clone();
        tokio::spawn(async move {
            for data in messages {
                let Some(answer) = send_envelope(&mesh, node, data).await else {
                    return;
                };
                if let Ok(Err(e)) = answer.await {
                    tracing::debug!(%node, error = %e, "a channel message for catch-up not delivered");
                }
            }
        });
    }

    /// Sends an envelope to the node `node` on the directed-envelope protocol; a failure is
    /// only logged (at debug).
    async fn send_direct(&self, node: PeerId, data: Vec<u8>) {
        let Some(answer) = send_envelope(&self.mesh, node, data).await else {
            return;
        };
        tokio::spawn(async move {
            if let Ok(Err(e)) = answer.await {
                tracing::debug!(%node, error = %e, "directed envelope not delivered");
            }
        });
    }

    fn deliver_local(&mut self, channel: &str, peer: &str, frame: Frame) {
        let Some(owner) = self.router.presence.local(channel, peer).map(|p| p.owner) else {
            return;
        };
        self.frame_to_conn(owner, frame);
    }

    fn frame_to_conn(&mut self, conn: ConnId, frame: Frame) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        // A closed queue is a connection on its way out; only a full one is a drop.
        if let Err(mpsc::error::TrySendError::Full(_)) = c.frames.try_send(frame) {
            c.dropped += 1;
            self.stats.dropped += 1;
            if let Some(held) = c.drop_warnings.hit(Instant::now()) {
                tracing::warn!(
                    conn = conn.0,
                    dropped = c.dropped,
                    "agent is not reading its frames; dropping them ({held} more dropped since \
                     the last such line; at most one line per {} s)",
                    WARN_EVERY.as_secs()
                );
            }
        }
    }

    /// Every present peer once (the first channel it is seen in), as a directory record.
    fn directory_feed(&self, node: &str) -> Vec<agora_directory::FeedItem> {
        let now = unix_now();
        let now_ms = u64::try_from(now).unwrap_or_default().saturating_mul(1000);
        let presence = &self.router.presence;
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for ch in presence.channels() {
            for p in presence.local_peers(ch) {
                if seen.insert(p.card.peer_id.to_string()) {
                    out.push(listing::item(ch, &p.card, p.catalog.as_ref(), node, now_ms));
                }
            }
            for p in presence.remote_peers(ch, now) {
                if seen.insert(p.card.peer_id.to_string()) {
                    let host = p.origin.to_string();
                    let last = u64::try_from(p.last_seen).unwrap_or_default() * 1000;
                    out.push(listing::item(ch, &p.card, p.catalog.as_ref(), &host, last));
                }
            }
        }
        out
    }

    fn peers(&self, channel: Option<&str>) -> Vec<PeerView> {
        let now = unix_now();
        let presence = &self.router.presence;
        let channels: Vec<String> = match channel {
            Some(c) => vec![c.to_owned()],
            None => presence.channels().into_iter().map(str::to_owned).collect(),
        };
        let card_json = |c: &agora_agh::PeerCard<'_>| {
            serde_json::from_str(&c.to_json()).unwrap_or(serde_json::Value::Null)
        };
        let mut out = Vec::new();
        for ch in channels {
            for p in presence.local_peers(&ch) {
                out.push(PeerView {
                    channel: ch.clone(),
                    peer_id: p.card.peer_id.to_string(),
                    presence: "local",
                    node: None,
                    expires_in: None,
                    peer_card: card_json(&p.projected_card()),
                    catalog: p
                        .catalog
                        .iter()
                        .flat_map(|c| c.ids().map(str::to_owned))
                        .collect(),
                });
            }
            for p in presence.remote_peers(&ch, now) {
                out.push(PeerView {
                    channel: ch.clone(),
                    peer_id: p.card.peer_id.to_string(),
                    presence: "remote",
                    node: Some(p.origin.to_string()),
                    expires_in: Some(p.expires_at - now),
                    peer_card: card_json(&p.card),
                    catalog: p
                        .catalog
                        .iter()
                        .flat_map(|c| c.ids().map(str::to_owned))
                        .collect(),
                });
            }
        }
        out
    }

    async fn set_catalog(
        &mut self,
        peer_id: String,
        catalog: Option<Catalog>,
    ) -> Result<Vec<String>, String> {
        if !agora_agh::grammar::is_peer_id(&peer_id) {
            return Err(format!("{peer_id:?} is not a Peer ID"));
        }
        let stored = match &catalog {
            Some(c) => {
                let json = agora_agh::catalog::rich_catalog_json(
                    Some(c),
                    &agora_agh::catalog::IdFilter::All,
                );
                self.store.put_catalog(&peer_id, &json).await
            }
            None => self.store.delete_catalog(&peer_id).await,
        };
        stored.map_err(|e| e.to_string())?;
        match &catalog {
            Some(c) => self.catalogs.insert(peer_id.clone(), c.clone()),
            None => self.catalogs.remove(&peer_id),
        };
        // Apply to every local registration of this Peer ID, whoever holds it.
        let mut applied = Vec::new();
        let owners: Vec<ConnId> = self
            .router
            .presence
            .channels()
            .into_iter()
            .filter_map(|ch| self.router.presence.local(ch, &peer_id).map(|p| p.owner))
            .collect();
        for owner in owners {
            applied.extend(self.router.presence.set_local_catalog(
                &peer_id,
                &owner,
                catalog.as_ref(),
            ));
        }
        applied.sort();
        applied.dedup();
        // Re-announce so that other nodes see the new brief projection now.
        self.announce().await;
        Ok(applied)
    }
}

fn acceptance_of(result: &Result<agora_agh::router::Accepted, Rejection>) -> MessageAcceptance {
    use agora_agh::ReasonCode as R;
    match result {
        Ok(_) => MessageAcceptance::Accept,
        Err(e) => match e.reason() {
            // Valid but stale, repeated or not for us: do not forward, do not penalise.
            R::Duplicate
            | R::Expired
            | R::Busy
            | R::NotTarget
            | R::NotFound
            | R::InteractionClosed
            | R::Internal => MessageAcceptance::Ignore,
            R::Malformed | R::UnsupportedKind | R::UnsupportedProfile | R::VerificationFailed => {
                MessageAcceptance::Reject
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_warning_is_logged_first_then_once_per_period_with_a_count() {
        let mut t = Throttle::default();
        let t0 = Instant::now();
        assert_eq!(t.hit(t0), Some(0));
        for i in 1..=500 {
            assert_eq!(t.hit(t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(t.hit(t0 + WARN_EVERY), Some(500));
        assert_eq!(t.hit(t0 + WARN_EVERY + Duration::from_secs(1)), None);
        assert_eq!(t.held, 1, "what the disconnect line reports");
    }
}
