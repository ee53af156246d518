//! The peer-to-peer mesh: one rust-libp2p swarm, owned by one task.
//!
//! Transport TCP + Noise + Yamux; behaviours identify, ping, Kademlia (server mode, protocol
//! `/agora/kad/1.0.0`, addresses learned from identify, inbound records handed to the services
//! for verification before they are stored), gossipsub and three request-response protocols:
//! `/agora/envelope/1.0.0` for directed AGH envelopes, `/agora/hyperspace/1.0.0` for
//! node-to-node Hyperspace requests (tool invocation, discovery answers) and
//! `/agora/memory/1.0.0` for the memory primitive's replication, reads and anti-entropy, and
//! `/agora/payments/1.0.0` for payment channels between nodes, and `/agora/directory/1.0.0`
//! for directory searches and their answers (`agora_directory::ask`). Bootstrap addresses are
//! dialled at start and re-dialled with exponential backoff whenever the connection is lost.
//!
//! Gossipsub (`docs/node.md` "Gossip topics" and "Gossip limits"):
//! - message ids are js-libp2p's ([`message_id`]), so IHAVE/IWANT work in a mixed mesh;
//! - its inbound streams are read frame by frame by [`crate::mesh::frames`], so a bad frame is
//!   skipped instead of silencing the peer; frames may be [`MAX_FRAME_BYTES`] long, messages
//!   [`MAX_MESSAGE_BYTES`] (the application limit, enforced at validation);
//! - the topics joined are decided by [`crate::mesh::topics`] within a fixed budget; topics shared by
//!   interested nodes are met through a DHT rendezvous;
//! - messages are held for validation (inline validators by topic prefix, else the owning
//!   service) and every refusal is counted and logged once per peer.
//!
//! The swarm is `!Sync`, so [`run`] owns it and is driven by a bounded command channel; it never
//! blocks on its event channel (events queue locally, gossip beyond the queue bound is ignored),
//! so the services that send it commands can never deadlock with it.

pub mod chores;
mod codec;
pub mod connmgr;
pub mod copies;
pub mod dials;
pub mod frames;
pub mod gated;
mod join;
pub mod muxer;
pub mod pings;
mod swarm;
pub mod topics;

pub use codec::BytesCodec;
use join::Join;
pub use swarm::YAMUX_MAX_STREAMS;
use swarm::{Behaviour, BehaviourEvent, build_swarm};

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use crate::config::PeerLimits;
use crate::mesh::chores::{Chore, Chores};
use crate::mesh::connmgr::ConnManager;
use crate::mesh::muxer::Splits;
use crate::mesh::topics::Topics;

use futures::StreamExt;
use libp2p::gossipsub::{self, IdentTopic, MessageAcceptance, MessageId};
use libp2p::kad::{self};
use libp2p::request_response::{self, OutboundRequestId, ResponseChannel};
use libp2p::swarm::SwarmEvent;
use libp2p::{Multiaddr, PeerId, StreamProtocol, Swarm, identify, identity};
use tokio::sync::{mpsc, oneshot};

/// Protocol name of our Kademlia DHT (kept apart from the public IPFS DHT).
pub const KAD_PROTOCOL: StreamProtocol = StreamProtocol::new("/agora/kad/1.0.0");
/// Protocol of directed envelopes.
pub const ENVELOPE_PROTOCOL: StreamProtocol = StreamProtocol::new("/agora/envelope/1.0.0");
/// Protocol of node-to-node Hyperspace requests.
pub const HYPERSPACE_PROTOCOL: StreamProtocol = StreamProtocol::new("/agora/hyperspace/1.0.0");
/// Protocol name of node-to-node memory requests (replication, reads, searches, anti-entropy).
pub const MEMORY_PROTOCOL: StreamProtocol = StreamProtocol::new("/agora/memory/1.0.0");
/// Protocol name of node-to-node payment requests (channel open, vouchers, close).
pub const PAYMENTS_PROTOCOL: StreamProtocol = StreamProtocol::new("/agora/payments/1.0.0");
/// Protocol name of node-to-node directory searches and answers (`agora_directory::ask`).
pub const DIRECTORY_PROTOCOL: StreamProtocol = StreamProtocol::new(agora_directory::ask::PROTOCOL);
/// Identify protocol version shared by every Agora node.
pub const IDENTIFY_VERSION: &str = "/agora/1.0.0";
/// Largest gossip message (the application limit, checked at validation) and directed request:
/// one 1 MiB payload plus its envelope.
pub const MAX_MESSAGE_BYTES: usize = (1 << 20) + 4096;
/// Largest control part of one gossipsub RPC (subscriptions, IHAVE, IWANT, GRAFT, PRUNE…) we
/// accept: a peer's subscription list of a few thousand topics, or a full IHAVE of 5,000 ids.
pub const MAX_CONTROL_BYTES: usize = 256 * 1024;
/// Largest gossipsub frame we read: a message at the application limit, a control part at its
/// limit (js-libp2p piggybacks control on messages) and the protobuf fields around them. Larger
/// frames are skipped unread ([`crate::mesh::frames`]).
pub const MAX_FRAME_BYTES: usize = MAX_MESSAGE_BYTES + MAX_CONTROL_BYTES + 4096;
/// Most topics one peer may be subscribed to, and most subscription changes in one RPC, that we
/// track (past them gossipsub ignores that RPC's subscriptions).
const MAX_PEER_TOPICS: usize = 5000;
/// Largest directed response (an acknowledgement).
const MAX_RESPONSE_BYTES: u64 = 64 * 1024;
/// Largest Hyperspace response (a tool's result).
const MAX_HS_RESPONSE_BYTES: u64 = MAX_MESSAGE_BYTES as u64;
/// Largest DHT record value (a signed capability card).
pub const MAX_RECORD_BYTES: usize = 256 * 1024;
/// Largest memory response (search hits, listed entries, pulled entries with their vectors).
const MAX_MEMORY_RESPONSE_BYTES: u64 = 8 * 1024 * 1024;
/// Largest payment request or response (a channel, a voucher, a refusal).
const MAX_PAYMENT_BYTES: u64 = 64 * 1024;
/// How long an outbound memory request may take (the memory service waits less).
const MEMORY_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an outbound Hyperspace request may take (a tool runs within it).
const HS_REQUEST_TIMEOUT: Duration = Duration::from_secs(40);
/// Lifetime of DHT records stored for others (refreshed by their publishers).
const RECORD_TTL: Duration = Duration::from_secs(60 * 60);
/// Lifetime of provider records (capability tags, topic rendezvous): short enough that providers
/// that left fade within hours. A node re-provides its own keys itself ([`chores`]).
const PROVIDER_TTL: Duration = Duration::from_secs(2 * 60 * 60);
/// Which request-response protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proto {
    /// `/agora/envelope/1.0.0` (AGH).
    Envelope,
    /// `/agora/hyperspace/1.0.0`.
    Hyperspace,
    /// `/agora/memory/1.0.0`.
    Memory,
    /// `/agora/payments/1.0.0`.
    Payments,
    /// `/agora/directory/1.0.0`.
    Directory,
}

/// Where the peers found by a DHT query go.
pub type PeersReply = oneshot::Sender<Vec<PeerId>>;
/// Where the values found by a DHT query go.
pub type ValuesReply = oneshot::Sender<Vec<Vec<u8>>>;
/// Events waiting for the services; gossip beyond this is ignored (never forwarded).
const EVENT_QUEUE: usize = 16_384;

/// Something a sender keeps until the mesh has handled its command (a share of a budget,
/// released on drop).
pub struct Hold(pub Box<dyn std::any::Any + Send>);

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hold")
    }
}

/// Commands to the mesh task.
#[derive(Debug)]
pub enum Command {
    /// Publish `data` on gossip topic `topic` (subscribing first if needed).
    Publish {
        /// Topic string.
        topic: String,
        /// Payload.
        data: Vec<u8>,
    },
    /// [`Command::Publish`] of bytes a client's budget still counts: `hold` is dropped once the
    /// mesh has taken the message, so the bytes waiting in this queue stay within that budget
    /// (an AGH agent's envelopes: `agh::InFlight`).
    PublishHeld {
        /// Topic string.
        topic: String,
        /// Payload.
        data: Vec<u8>,
        /// Released on drop.
        hold: Hold,
    },
    /// Publish `data` on `topic` and report how many peers it was sent to (with flood publishing,
    /// every connected subscriber of the topic whose score is above the publish threshold); 0
    /// when nobody subscribes or every queue was full.
    PublishCounted {
        /// Topic string.
        topic: String,
        /// Payload.
        data: Vec<u8>,
        /// Where the count goes.
        reply: oneshot::Sender<usize>,
    },
    /// Gossipsub application-specific scores (P5) of peers, replacing what was set before for
    /// those peers; score 0 is neutral (see [`APP_SCORE_LIMIT`]).
    AppScores(Vec<(PeerId, f64)>),
    /// This node's own functions use a gossip topic: join it (within the topic budget, see
    /// [`crate::mesh::topics`]) and meet the other nodes interested in it.
    Subscribe(String),
    /// This node's own functions no longer use a gossip topic (it is left unless another reason
    /// keeps it).
    Unsubscribe(String),
    /// Report the verdict on a gossip message received with validation pending.
    Validated {
        /// Message id.
        id: MessageId,
        /// Peer it came from.
        propagation_source: PeerId,
        /// Verdict.
        acceptance: MessageAcceptance,
    },
    /// Send `data` to `peer` by request-response; the reply carries the response bytes.
    SendDirect {
        /// Protocol.
        proto: Proto,
        /// Target node.
        peer: PeerId,
        /// Request payload (one envelope).
        data: Vec<u8>,
        /// Where the response (or the failure) goes.
        reply: oneshot::Sender<Result<Vec<u8>, String>>,
    },
    /// Answer an inbound directed request.
    Respond {
        /// Protocol the request came on.
        proto: Proto,
        /// The request's channel.
        channel: ResponseChannel<Vec<u8>>,
        /// Response payload.
        data: Vec<u8>,
    },
    /// Report the mesh state.
    Status(oneshot::Sender<Status>),
    /// Store a record locally and at the nodes closest to its key (our own card, or a stored
    /// record re-published after a restart).
    PutRecord {
        /// Key.
        key: Vec<u8>,
        /// Value.
        value: Vec<u8>,
    },
    /// Store a record offered by another node (after the services verified it), locally only.
    StoreRecord {
        /// Key.
        key: Vec<u8>,
        /// Value.
        value: Vec<u8>,
    },
    /// Announce this node as a provider of `key`.
    StartProviding(Vec<u8>),
    /// Stop announcing this node as a provider of `key`.
    StopProviding(Vec<u8>),
    /// Find the providers of `key` (local and in the DHT).
    GetProviders {
        /// Key.
        key: Vec<u8>,
        /// Where the providers go when the query ends.
        reply: PeersReply,
    },
    /// Find every value stored under `key` (local and in the DHT).
    GetRecords {
        /// Key.
        key: Vec<u8>,
        /// Where the values go when the query ends.
        reply: ValuesReply,
    },
}

/// What the mesh looks like now.
#[derive(Clone, Debug, Default)]
pub struct Status {
    /// This node's peer id.
    pub peer_id: String,
    /// Full listen addresses (with `/p2p/<id>`).
    pub listen: Vec<String>,
    /// Connected peers.
    pub connected: Vec<String>,
    /// Subscribed gossip topics.
    pub topics: Vec<String>,
    /// The topic budget as it stands.
    pub topic_budget: topics::Report,
    /// Gossip refused, by reason.
    pub refused: std::collections::BTreeMap<&'static str, u64>,
    /// Messages gossipsub gave up sending to slow peers (their queue was full or a message
    /// waited past its deadline), by kind, since the node started.
    pub dropped: Dropped,
    /// Mesh peers per joined topic (the peers full messages go to at once; the others of a
    /// topic hear of them by gossip).
    pub mesh: std::collections::BTreeMap<String, usize>,
    /// Connected peers that are lasting neighbours (connected for `topics::NEIGHBOUR_SETTLE` or
    /// kept as mesh or bootstrap peers): the node follows their card topics.
    pub neighbours: Vec<String>,
    /// Gossipsub's outbound streams: negotiated, and connections closed because its handler
    /// gave up on them.
    pub outbound_streams: frames::OutboundStreams,
    /// Received messages whose signature gossipsub's decoder checked, and copies of messages
    /// already taken that went to gossipsub without a second check (`copies`).
    pub signatures: copies::SignatureCounts,
    /// Gossipsub RPCs whose subscription list was split because it was longer than
    /// [`crate::mesh::muxer::SPLIT_AT`].
    pub split_rpcs: u64,
    /// Gossipsub peer scores of connected peers that are not 0 (PeerId → score).
    pub scores: std::collections::BTreeMap<String, f64>,
    /// The mesh peers of each joined topic (for the dashboard's graph).
    pub mesh_peers: std::collections::BTreeMap<String, Vec<String>>,
    /// Peers in the Kademlia routing table.
    pub kad_peers: usize,
    /// Outbound dials the dial budget allowed, denied and let through outside it (`dials`).
    pub dials: dials::DialCounts,
    /// DHT keys this node provides and re-provides on its own schedule (`chores`).
    pub provided_keys: usize,
    /// Kademlia queries ended since the node started, by kind: (queries, requests sent).
    pub queries: dials::QueryCensus,
}

/// Messages gossipsub could not send to slow peers, as its `SlowPeer` events count them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Dropped {
    /// Control messages and own publications not queued (the peer's priority queue was full).
    pub priority: u64,
    /// Forwarded messages and gossip not queued (the non-priority queue was full), and messages
    /// that waited in a queue past their deadline.
    pub non_priority: u64,
}

impl Dropped {
    fn add(&mut self, f: &gossipsub::FailedMessages) {
        let n = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
        self.priority = self.priority.saturating_add(n(f.priority));
        self.non_priority = self.non_priority.saturating_add(n(f.non_priority));
    }
}

/// Events from the mesh task.
#[derive(Debug)]
pub enum Event {
    /// A listener is up (full address with `/p2p/<id>`).
    Listening(Multiaddr),
    /// A gossip message awaiting validation.
    Gossip {
        /// Topic string.
        topic: String,
        /// Payload.
        data: Vec<u8>,
        /// The node that published it (authenticated by the gossipsub signature).
        source: Option<PeerId>,
        /// Message id, for [`Command::Validated`].
        id: MessageId,
        /// The peer that forwarded it, for [`Command::Validated`].
        propagation_source: PeerId,
        /// The receiver must report a verdict ([`Command::Validated`]); false when an inline
        /// validator already accepted it.
        needs_verdict: bool,
    },
    /// A directed request from `peer`; answer with [`Command::Respond`].
    Direct {
        /// Protocol.
        proto: Proto,
        /// Requesting node.
        peer: PeerId,
        /// Payload.
        data: Vec<u8>,
        /// Response channel.
        channel: ResponseChannel<Vec<u8>>,
    },
    /// A connection to `peer` was established (first one).
    Connected(PeerId),
    /// A neighbour (the peer) subscribed to an AGH topic or a Hyperspace capabilities topic.
    Subscribed(PeerId, String),
    /// The DHT routing table got its first peer: records put before (at start, after a restart)
    /// reached nobody and should be put again.
    DhtPeer(PeerId),
    /// Another node asks us to store a DHT record; answer with [`Command::StoreRecord`] if it
    /// is valid.
    RecordOffered {
        /// Key.
        key: Vec<u8>,
        /// Value.
        value: Vec<u8>,
    },
}

/// What an inline validator decided about a gossip message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Valid: gossipsub forwards it at once; the owning service still receives it.
    Accept,
    /// Valid: gossipsub forwards it at once, and no service needs a copy (none is queued).
    Relay,
    /// Drop it without penalising the sender (stale, replayed).
    Ignore,
    /// Drop it and penalise the sender (forged, malformed).
    Reject,
    /// Valid so far, but the owning service decides (it reports [`Command::Validated`]).
    Defer,
}

impl Verdict {
    /// What gossipsub is told: `None` for [`Self::Defer`] (the owning service reports later).
    pub fn acceptance(self) -> Option<MessageAcceptance> {
        match self {
            Self::Accept | Self::Relay => Some(MessageAcceptance::Accept),
            Self::Ignore => Some(MessageAcceptance::Ignore),
            Self::Reject => Some(MessageAcceptance::Reject),
            Self::Defer => None,
        }
    }

    /// The verdict as a metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Accept => "accept",
            Self::Relay => "relay",
            Self::Ignore => "ignore",
            Self::Reject => "reject",
            Self::Defer => "defer",
        }
    }
}

/// Checks gossip synchronously in the mesh task, inside gossipsub's validation hook: no hop to
/// another task before a message can be forwarded. Must be cheap and must not block.
pub trait GossipValidator: Send + Sync + std::fmt::Debug {
    /// The verdict on `data` received on `topic`.
    fn validate(&self, topic: &str, data: &[u8]) -> Verdict;
}

/// Settings of the mesh.
#[derive(Clone, Debug)]
pub struct MeshConfig {
    /// Addresses to listen on.
    pub listen: Vec<Multiaddr>,
    /// Nodes to join (each a multiaddr, ideally ending in `/p2p/<peer id>`).
    pub bootstrap: Vec<Multiaddr>,
    /// Gossipsub heartbeat.
    pub heartbeat: Duration,
    /// How many connections to keep (see [`crate::mesh::connmgr`]).
    pub limits: PeerLimits,
    /// Inline validators by topic prefix (the first match applies); gossip on other topics is
    /// validated by the service that receives it.
    pub validators: Vec<(String, Arc<dyn GossipValidator>)>,
    /// The topic budget.
    pub budget: topics::Budget,
    /// Where the mesh counts (libp2p's metrics, gossip verdicts, connection events).
    pub telemetry: Arc<crate::telemetry::Telemetry>,
}

/// The mesh could not start.
#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    /// Building the transport or a behaviour failed.
    #[error("cannot build the libp2p swarm: {0}")]
    Build(String),
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {reason}")]
    Listen {
        /// Address.
        addr: Multiaddr,
        /// Why.
        reason: String,
    },
}

/// The mesh's gossipsub message id, js-libp2p's for signed messages: the publisher's protobuf
/// public key ‖ the 8-byte big-endian sequence number
/// ([`agora_hyperspace::peer_id::gossip_message_id`]). Messages without a publisher or sequence
/// number are refused by strict validation before an id matters; they get a content hash.
/// Replays of an envelope under a new sequence number are refused by the envelope's own replay
/// window, not by the id.
pub fn message_id(message: &gossipsub::Message) -> MessageId {
    match (message.source, message.sequence_number) {
        (Some(source), Some(seqno)) => signed_message_id(&source, seqno),
        _ => {
            use sha2::Digest as _;
            MessageId::new(&sha2::Sha256::digest(&message.data)[..16])
        }
    }
}

/// The id of a signed message from `source` with sequence number `seqno` ([`message_id`]; the
/// copies check of `frames` asks by it too).
#[must_use]
pub fn signed_message_id(source: &PeerId, seqno: u64) -> MessageId {
    MessageId::new(&agora_hyperspace::peer_id::gossip_message_id(
        &source.to_bytes(),
        seqno,
    ))
}

/// Starts listening and returns the mesh ready to [`run`].
pub fn start(keypair: &identity::Keypair, cfg: &MeshConfig) -> Result<Mesh, MeshError> {
    let splits = Splits::default();
    let mut swarm = build_swarm(keypair, cfg, splits.clone())?;
    let telemetry = Arc::clone(&cfg.telemetry);
    for addr in &cfg.listen {
        swarm
            .listen_on(addr.clone())
            .map_err(|e| MeshError::Listen {
                addr: addr.clone(),
                reason: e.to_string(),
            })?;
    }
    let bootstrap = Join::new(&cfg.bootstrap);
    Ok(Mesh {
        swarm,
        bootstrap,
        limits: cfg.limits,
        validators: cfg.validators.clone(),
        budget: cfg.budget,
        splits,
        telemetry,
    })
}

/// A mesh that is listening but not yet running.
pub struct Mesh {
    swarm: Swarm<Behaviour>,
    bootstrap: Join,
    limits: PeerLimits,
    validators: Vec<(String, Arc<dyn GossipValidator>)>,
    budget: topics::Budget,
    splits: Splits,
    telemetry: Arc<crate::telemetry::Telemetry>,
}

impl std::fmt::Debug for Mesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mesh")
            .field("peer_id", self.swarm.local_peer_id())
            .finish()
    }
}

impl Mesh {
    /// This node's peer id.
    pub fn peer_id(&self) -> PeerId {
        *self.swarm.local_peer_id()
    }
}

/// Where the outcome of a directed request goes.
type DirectReply = oneshot::Sender<Result<Vec<u8>, String>>;

/// A directed request in flight (kept to retry once after a DHT lookup).
struct Outgoing {
    proto: Proto,
    peer: PeerId,
    data: Vec<u8>,
    reply: DirectReply,
    retried: bool,
}

/// A DHT query whose results someone waits for.
enum KadWait {
    Providers(PeersReply, HashSet<PeerId>),
    Records(ValuesReply, Vec<Vec<u8>>),
    /// A topic rendezvous: dial up to this many of the providers found.
    Rendezvous(usize, HashSet<PeerId>),
}

/// What the mesh task keeps between events.
struct Pending {
    /// Which connections are in use, and which to close.
    conns: ConnManager,
    replies: HashMap<(Proto, OutboundRequestId), Outgoing>,
    lookups: HashMap<kad::QueryId, Vec<Outgoing>>,
    kad: HashMap<kad::QueryId, KadWait>,
    /// The topic budget.
    topics: Topics,
    /// The periodic DHT chores.
    chores: Chores,
    /// Kademlia queries ended, by kind.
    queries: dials::QueryCensus,
    /// The topic plan must be recomputed (at the next [`PLAN_EVERY`] tick).
    replan: bool,
    /// Peers whose connection the frame guard closed, to dial back once it is gone.
    resets: HashSet<PeerId>,
    /// Peers whose connection this node closed because its pings failed (the link or the host
    /// went away): their bootstrap redial uses the backoff, as for a failed connection.
    ping_timeouts: HashSet<PeerId>,
    /// Messages gossipsub dropped for slow peers.
    dropped: Dropped,
    /// Gossipsub RPCs the muxer split.
    splits: Splits,
    telemetry: Arc<crate::telemetry::Telemetry>,
}

impl Behaviour {
    fn send_request(&mut self, proto: Proto, peer: &PeerId, data: Vec<u8>) -> OutboundRequestId {
        // A request's peer is dialled if need be, outside the dial budget.
        self.dials.exempt(*peer);
        match proto {
            Proto::Envelope => self.direct.send_request(peer, data),
            Proto::Hyperspace => self.hs.send_request(peer, data),
            Proto::Memory => self.mem.send_request(peer, data),
            Proto::Payments => self.pay.send_request(peer, data),
            Proto::Directory => self.dir.send_request(peer, data),
        }
    }
}

/// Drives the swarm until `commands` closes.
pub async fn run(mesh: Mesh, mut commands: mpsc::Receiver<Command>, events: mpsc::Sender<Event>) {
    let Mesh {
        mut swarm,
        mut bootstrap,
        limits,
        validators,
        budget,
        splits,
        telemetry,
    } = mesh;
    let local = *swarm.local_peer_id();
    let mut queue: VecDeque<Event> = VecDeque::new();
    let mut pending = Pending {
        conns: ConnManager::new(limits),
        replies: HashMap::new(),
        lookups: HashMap::new(),
        kad: HashMap::new(),
        topics: Topics::new(budget, local, random_seed()),
        chores: Chores::new(std::time::Instant::now(), random_seed()),
        queries: dials::QueryCensus::default(),
        replan: false,
        resets: HashSet::new(),
        ping_timeouts: HashSet::new(),
        dropped: Dropped::default(),
        splits,
        telemetry,
    };
    let mut listen: Vec<Multiaddr> = Vec::new();
    let mut redial = tokio::time::interval(Duration::from_millis(250));
    redial.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut trim = tokio::time::interval(Duration::from_secs(1));
    trim.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Publications gossipsub could not queue yet (every peer's send queue was full). While any
    // wait, no new command is taken: the services block on the bounded command channel and the
    // agents' sockets fill up, so a fast publisher is slowed down instead of losing messages.
    let mut stalled: VecDeque<(IdentTopic, Vec<u8>)> = VecDeque::new();
    let mut retry = tokio::time::interval(Duration::from_millis(5));
    let mut plan = tokio::time::interval(PLAN_EVERY);
    plan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            command = commands.recv(), if stalled.is_empty() => {
                let Some(command) = command else { break };
                handle_command(&mut swarm, command, &mut pending, &listen, &mut stalled);
            }
            _ = retry.tick(), if !stalled.is_empty() => {
                while let Some((topic, data)) = stalled.pop_front() {
                    if let Err(back) = publish(&mut swarm, topic, data) {
                        stalled.push_front(back);
                        break;
                    }
                }
            }
            event = swarm.select_next_some() => {
                handle_swarm_event(&mut swarm, event, &mut queue, &mut pending, &mut listen, &mut bootstrap, local, &validators);
            }
            permit = events.reserve(), if !queue.is_empty() => {
                let Ok(permit) = permit else { break };
                if let Some(ev) = queue.pop_front() {
                    permit.send(ev);
                }
            }
            _ = plan.tick(), if pending.replan => apply_topic_plan(&mut swarm, &mut pending),
            _ = redial.tick() => bootstrap.redial(&mut swarm),
            _ = trim.tick() => {
                // Mesh peers of the topics the node uses are kept; the meshes of neighbours'
                // card topics are not a reason (they consist of those very neighbours).
                let gossipsub = &swarm.behaviour().gossipsub;
                let mut protected: HashSet<PeerId> = HashSet::new();
                for (t, class) in pending.topics.joined() {
                    if class != topics::Class::Neighbour {
                        protected.extend(gossipsub.mesh_peers(&IdentTopic::new(t).hash()));
                    }
                }
                protected.extend(bootstrap.connected_peers());
                // The peers kept are lasting neighbours: their cards are followed.
                if pending.topics.keep(&protected) {
                    pending.replan = true;
                }
                for peer in pending.conns.to_trim(std::time::Instant::now(), &protected) {
                    tracing::debug!(%peer, "closing an unused connection");
                    let _ = swarm.disconnect_peer_id(peer);
                }
                // Lingering reasons expire and rendezvous lookups fall due with time.
                if pending.topics.due(std::time::Instant::now()) {
                    pending.replan = true;
                }
                do_chores(&mut swarm, &mut pending);
            }
        }
    }
}

/// How often at most the topic plan is recomputed for what peers do. A connection's hello
/// brings one `Subscribed` event per topic and the plan looks at every peer's topics, so planning
/// per event cost a third of the CPU of a 200-node mesh while it formed; the node's own
/// `Subscribe`/`Unsubscribe` commands are planned at once.
const PLAN_EVERY: Duration = Duration::from_millis(100);

/// Recomputes the topic plan and carries it out.
fn apply_topic_plan(swarm: &mut Swarm<Behaviour>, pending: &mut Pending) {
    pending.replan = false;
    for action in pending.topics.plan(std::time::Instant::now()) {
        let b = swarm.behaviour_mut();
        match action {
            topics::Action::Subscribe(t) => {
                if let Err(e) = b.gossipsub.subscribe(&IdentTopic::new(&t)) {
                    tracing::warn!(topic = %t, error = %e, "cannot join a gossip topic");
                }
            }
            topics::Action::Unsubscribe(t) => {
                b.gossipsub.unsubscribe(&IdentTopic::new(t));
            }
            topics::Action::Provide(t) => {
                provide(b, &mut pending.chores, topics::rendezvous_key(&t));
            }
            topics::Action::StopProviding(t) => {
                let key = topics::rendezvous_key(&t);
                b.kad.stop_providing(&kad::RecordKey::new(&key));
                pending.chores.unprovided(&key);
            }
            topics::Action::Lookup { topic, dials } => {
                let id = b
                    .kad
                    .get_providers(kad::RecordKey::new(&topics::rendezvous_key(&topic)));
                pending
                    .kad
                    .insert(id, KadWait::Rendezvous(dials, HashSet::new()));
            }
            topics::Action::Refused(t) => tracing::warn!(
                topic = %t,
                "topic budget full: not joined; this node's agents on it are not reached by other nodes"
            ),
        }
    }
}

/// The name a Kademlia query's kind is counted under.
fn query_kind(result: &kad::QueryResult) -> &'static str {
    match result {
        kad::QueryResult::Bootstrap(_) => "bootstrap",
        kad::QueryResult::GetClosestPeers(_) => "closest_peers",
        kad::QueryResult::GetProviders(_) => "get_providers",
        kad::QueryResult::StartProviding(_) => "start_providing",
        kad::QueryResult::RepublishProvider(_) => "republish_provider",
        kad::QueryResult::GetRecord(_) => "get_record",
        kad::QueryResult::PutRecord(_) => "put_record",
        kad::QueryResult::RepublishRecord(_) => "republish_record",
    }
}

/// Provides `key` in the DHT now and schedules its re-provides.
fn provide(b: &mut Behaviour, chores: &mut Chores, key: Vec<u8>) {
    match b.kad.start_providing(kad::RecordKey::new(&key)) {
        Ok(_) => {
            if !chores.provided(key, std::time::Instant::now()) {
                tracing::warn!("the re-provide schedule is full: a DHT key is provided once only");
            }
        }
        Err(e) => tracing::warn!(error = ?e, "cannot provide a DHT key"),
    }
}

/// Carries out the DHT chores that fell due ([`chores`]).
fn do_chores(swarm: &mut Swarm<Behaviour>, pending: &mut Pending) {
    let kad = &mut swarm.behaviour_mut().kad;
    for chore in pending.chores.due(std::time::Instant::now()) {
        match chore {
            Chore::Bootstrap => {
                if let Err(e) = kad.bootstrap() {
                    tracing::debug!(error = ?e, "no routing table refresh");
                }
            }
            Chore::Reprovide(key) => {
                if let Err(e) = kad.start_providing(kad::RecordKey::new(&key)) {
                    tracing::warn!(error = ?e, "cannot provide a DHT key again");
                }
            }
        }
    }
}

/// A seed from the operating system's randomness (0 if it has none to give: the jitter it
/// seeds spreads chores, it protects nothing).
fn random_seed() -> u64 {
    let mut seed = [0u8; 8];
    let _ = getrandom::fill(&mut seed);
    u64::from_le_bytes(seed)
}

/// The rendezvous providers found that are neither this node nor connected to it.
fn fresh_providers<'a>(
    swarm: &'a Swarm<Behaviour>,
    found: &'a HashSet<PeerId>,
) -> impl Iterator<Item = &'a PeerId> {
    let local = swarm.local_peer_id();
    found
        .iter()
        .filter(move |p| *p != local && !swarm.is_connected(p))
}

/// Dials up to `dials` of the rendezvous providers found that are not connected yet.
fn dial_providers(swarm: &mut Swarm<Behaviour>, found: &HashSet<PeerId>, dials: usize) {
    let mut fresh: Vec<PeerId> = fresh_providers(swarm, found).copied().collect();
    // A random choice spreads the links over the providers.
    fastrand::Rng::with_seed(random_seed()).shuffle(&mut fresh);
    for peer in fresh.into_iter().take(dials) {
        if let Err(e) = swarm.dial(peer) {
            tracing::debug!(%peer, error = %e, "rendezvous dial failed");
        }
    }
}

/// Tells the mesh task gossipsub's verdict on a message it holds for validation.
pub async fn report_validation(
    mesh: &mpsc::Sender<Command>,
    id: MessageId,
    propagation_source: PeerId,
    acceptance: MessageAcceptance,
) {
    let _ = mesh
        .send(Command::Validated {
            id,
            propagation_source,
            acceptance,
        })
        .await;
}

/// Largest application score magnitude ([`Command::AppScores`]). Weighted 1, so a peer at
/// −100 is below the graylist threshold (−80: everything it sends is ignored), and one below
/// −50 gets none of this node's publications; any negative score takes a peer out of the
/// node's topic meshes at the next heartbeat.
pub const APP_SCORE_LIMIT: f64 = 100.0;
/// Gossipsub's publish threshold (see `score_settings`).
pub const PUBLISH_THRESHOLD: f64 = -50.0;
/// Gossipsub's graylist threshold (see `score_settings`).
pub const GRAYLIST_THRESHOLD: f64 = -80.0;

/// Gossipsub peer scoring as Agora runs it: the application-specific score (P5, fed by the
/// Self-Improving primitive's contributor reputation, spec §9.4) is the only component. The
/// topic components need per-topic parameters the spec does not give; IP colocation (P6) would
/// punish every node of a host or a NAT; the behaviour penalty (P7) and the slow-peer penalty
/// were not measured at scale (`docs/performance.md`) and stay off, so a node with no
/// reputation data forwards by the same rules as without scoring (scoring's per-message
/// bookkeeping is the added cost). Thresholds are gossipsub's defaults,
/// except that peer exchange is accepted from any peer not below 0, as it was without scoring.
fn score_settings() -> (gossipsub::PeerScoreParams, gossipsub::PeerScoreThresholds) {
    let params = gossipsub::PeerScoreParams {
        app_specific_weight: 1.0,
        ip_colocation_factor_weight: 0.0,
        behaviour_penalty_weight: 0.0,
        slow_peer_weight: 0.0,
        ..gossipsub::PeerScoreParams::default()
    };
    let thresholds = gossipsub::PeerScoreThresholds {
        publish_threshold: PUBLISH_THRESHOLD,
        graylist_threshold: GRAYLIST_THRESHOLD,
        accept_px_threshold: 0.0,
        ..gossipsub::PeerScoreThresholds::default()
    };
    (params, thresholds)
}

/// Publishes on gossip; hands the message back when every peer's queue is full.
fn publish(
    swarm: &mut Swarm<Behaviour>,
    topic: IdentTopic,
    data: Vec<u8>,
) -> Result<(), (IdentTopic, Vec<u8>)> {
    match swarm
        .behaviour_mut()
        .gossipsub
        .publish(topic.clone(), data.clone())
    {
        Ok(_) => Ok(()),
        Err(gossipsub::PublishError::AllQueuesFull(_)) => Err((topic, data)),
        // Nobody else subscribed yet, or the same bytes were published before: not errors for a
        // broadcast (receivers learn presence from the next greet).
        Err(
            gossipsub::PublishError::NoPeersSubscribedToTopic | gossipsub::PublishError::Duplicate,
        ) => Ok(()),
        Err(e) => {
            tracing::warn!(topic = %topic, error = %e, "gossip publish failed");
            Ok(())
        }
    }
}

fn handle_command(
    swarm: &mut Swarm<Behaviour>,
    command: Command,
    pending: &mut Pending,
    listen: &[Multiaddr],
    stalled: &mut VecDeque<(IdentTopic, Vec<u8>)>,
) {
    let b = swarm.behaviour_mut();
    match command {
        // Publishing needs no subscription: gossipsub sends to the topic's known subscribers.
        Command::Publish { topic, data } => {
            if let Err(back) = publish(swarm, IdentTopic::new(topic), data) {
                stalled.push_back(back);
            }
        }
        Command::PublishHeld { topic, data, hold } => {
            if let Err(back) = publish(swarm, IdentTopic::new(topic), data) {
                stalled.push_back(back);
            }
            drop(hold);
        }
        Command::PublishCounted { topic, data, reply } => {
            let topic = IdentTopic::new(topic);
            let hash = topic.hash();
            let gossipsub = &swarm.behaviour().gossipsub;
            // Gossipsub floods its own publications to these peers (`publish_peers`).
            let recipients = gossipsub
                .all_peers()
                .filter(|(p, topics)| {
                    topics.contains(&&hash)
                        && gossipsub
                            .peer_score(p)
                            .is_none_or(|s| s >= PUBLISH_THRESHOLD)
                })
                .count();
            let sent = match swarm.behaviour_mut().gossipsub.publish(topic, data) {
                Ok(_) => recipients,
                Err(e) => {
                    tracing::debug!(error = %e, "a counted publication reached nobody");
                    0
                }
            };
            let _ = reply.send(sent);
        }
        Command::AppScores(scores) => {
            for (peer, score) in scores {
                let score = score.clamp(-APP_SCORE_LIMIT, APP_SCORE_LIMIT);
                swarm
                    .behaviour_mut()
                    .gossipsub
                    .set_application_score(&peer, score);
            }
        }
        // The node's own interest takes effect at once.
        Command::Subscribe(topic) => {
            pending.topics.join_local(&topic);
            apply_topic_plan(swarm, pending);
        }
        Command::Unsubscribe(topic) => {
            pending.topics.leave_local(&topic);
            apply_topic_plan(swarm, pending);
        }
        Command::Validated {
            id,
            propagation_source,
            acceptance,
        } => {
            if acceptance == MessageAcceptance::Reject {
                b.gossipsub.refuse(
                    propagation_source,
                    frames::Reason::Invalid,
                    "a message the node's services rejected",
                );
            }
            let _ =
                b.gossipsub
                    .report_message_validation_result(&id, &propagation_source, acceptance);
        }
        Command::SendDirect {
            proto,
            peer,
            data,
            reply,
        } => {
            let id = b.send_request(proto, &peer, data.clone());
            pending.conns.begin(peer, std::time::Instant::now());
            pending.replies.insert(
                (proto, id),
                Outgoing {
                    proto,
                    peer,
                    data,
                    reply,
                    retried: false,
                },
            );
        }
        Command::Respond {
            proto,
            channel,
            data,
        } => {
            let _ = match proto {
                Proto::Envelope => b.direct.send_response(channel, data),
                Proto::Hyperspace => b.hs.send_response(channel, data),
                Proto::Memory => b.mem.send_response(channel, data),
                Proto::Payments => b.pay.send_response(channel, data),
                Proto::Directory => b.dir.send_response(channel, data),
            };
        }
        Command::PutRecord { key, value } => {
            let record = kad::Record::new(key, value);
            if let Err(e) = b.kad.put_record(record, kad::Quorum::One) {
                tracing::warn!(error = ?e, "cannot store a DHT record");
            }
        }
        Command::StoreRecord { key, value } => {
            use kad::store::RecordStore as _;
            let mut record = kad::Record::new(key, value);
            record.expires = Some(std::time::Instant::now() + RECORD_TTL);
            if let Err(e) = b.kad.store_mut().put(record) {
                tracing::debug!(error = ?e, "DHT record not stored");
            }
        }
        Command::StartProviding(key) => provide(b, &mut pending.chores, key),
        Command::StopProviding(key) => {
            b.kad.stop_providing(&kad::RecordKey::new(&key));
            pending.chores.unprovided(&key);
        }
        Command::GetProviders { key, reply } => {
            let id = b.kad.get_providers(kad::RecordKey::new(&key));
            pending
                .kad
                .insert(id, KadWait::Providers(reply, HashSet::new()));
        }
        Command::GetRecords { key, reply } => {
            let id = b.kad.get_record(kad::RecordKey::new(&key));
            pending.kad.insert(id, KadWait::Records(reply, Vec::new()));
        }
        Command::Status(reply) => {
            let peer_id = swarm.local_peer_id().to_string();
            let mut connected: Vec<String> =
                swarm.connected_peers().map(ToString::to_string).collect();
            connected.sort();
            let mut topics: Vec<String> = swarm
                .behaviour()
                .gossipsub
                .topics()
                .map(ToString::to_string)
                .collect();
            topics.sort();
            let gossipsub = &swarm.behaviour().gossipsub;
            let mesh = pending
                .topics
                .joined()
                .map(|(t, _)| {
                    let n = gossipsub.mesh_peers(&IdentTopic::new(t).hash()).count();
                    (t.to_owned(), n)
                })
                .collect();
            let mesh_peers = pending
                .topics
                .joined()
                .map(|(t, _)| {
                    let peers = gossipsub
                        .mesh_peers(&IdentTopic::new(t).hash())
                        .map(ToString::to_string)
                        .collect();
                    (t.to_owned(), peers)
                })
                .collect();
            let kad_peers = swarm
                .behaviour_mut()
                .kad
                .kbuckets()
                .map(|b| b.num_entries())
                .sum();
            let gossipsub = &swarm.behaviour().gossipsub;
            let _ = reply.send(Status {
                mesh_peers,
                kad_peers,
                peer_id,
                listen: listen.iter().map(ToString::to_string).collect(),
                connected,
                topics,
                topic_budget: pending.topics.report(),
                refused: swarm.behaviour().gossipsub.refusals().counts(),
                dropped: pending.dropped,
                mesh,
                outbound_streams: swarm.behaviour().gossipsub.outbound(),
                signatures: swarm.behaviour().gossipsub.signatures(),
                dials: swarm.behaviour().dials.counts(),
                provided_keys: pending.chores.keys(),
                queries: pending.queries.clone(),
                split_rpcs: pending.splits.get(),
                scores: swarm
                    .connected_peers()
                    .filter_map(|p| {
                        let score = gossipsub.peer_score(p)?;
                        (score != 0.0).then(|| (p.to_string(), (score * 1000.0).round() / 1000.0))
                    })
                    .collect(),
                neighbours: {
                    let mut n: Vec<String> = pending
                        .topics
                        .neighbours()
                        .map(ToString::to_string)
                        .collect();
                    n.sort();
                    n
                },
            });
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn handle_swarm_event(
    swarm: &mut Swarm<Behaviour>,
    event: SwarmEvent<BehaviourEvent>,
    queue: &mut VecDeque<Event>,
    pending: &mut Pending,
    listen: &mut Vec<Multiaddr>,
    bootstrap: &mut Join,
    local: PeerId,
    validators: &[(String, Arc<dyn GossipValidator>)],
) {
    pending
        .resets
        .extend(swarm.behaviour_mut().gossipsub.take_reset());
    if let SwarmEvent::Behaviour(BehaviourEvent::Kad(kad::Event::OutboundQueryProgressed {
        result,
        stats,
        step,
        ..
    })) = &event
        && step.last
    {
        pending
            .queries
            .ended(query_kind(result), stats.num_requests());
    }
    {
        use libp2p::metrics::Recorder;
        let m = &pending.telemetry.libp2p;
        m.record(&event);
        match &event {
            SwarmEvent::Behaviour(BehaviourEvent::Gossipsub(e)) => m.record(e),
            SwarmEvent::Behaviour(BehaviourEvent::Kad(e)) => m.record(e),
            SwarmEvent::Behaviour(BehaviourEvent::Identify(e)) => m.record(e),
            SwarmEvent::Behaviour(BehaviourEvent::Ping(e)) => m.record(e),
            _ => {}
        }
    }
    match event {
        SwarmEvent::NewListenAddr { address, .. } => {
            let full = address.with_p2p(local).unwrap_or_else(|a| a);
            listen.push(full.clone());
            queue.push_back(Event::Listening(full));
        }
        SwarmEvent::ConnectionEstablished {
            peer_id,
            endpoint,
            num_established,
            ..
        } => {
            bootstrap.on_connected(swarm, peer_id, &endpoint);
            if endpoint.is_dialer() {
                swarm
                    .behaviour_mut()
                    .kad
                    .add_address(&peer_id, endpoint.get_remote_address().clone());
            }
            if num_established.get() == 1 {
                tracing::info!(
                    peer_id = %peer_id,
                    address = %endpoint.get_remote_address(),
                    direction = if endpoint.is_dialer() { "outbound" } else { "inbound" },
                    "peer connected"
                );
                pending
                    .telemetry
                    .conn_event(peer_id.to_string(), "connected");
                let now = std::time::Instant::now();
                pending.conns.connected(peer_id, now);
                pending.topics.peer_connected(peer_id, now);
                pending.replan = true;
                queue.push_back(Event::Connected(peer_id));
            }
        }
        SwarmEvent::ConnectionClosed {
            peer_id,
            num_established: 0,
            cause,
            ..
        } => {
            match &cause {
                Some(e) => tracing::info!(peer_id = %peer_id, cause = %e, "peer disconnected"),
                None => tracing::info!(peer_id = %peer_id, cause = "closed", "peer disconnected"),
            }
            pending
                .telemetry
                .conn_event(peer_id.to_string(), "disconnected");
            pending.conns.disconnected(&peer_id);
            pending
                .topics
                .peer_disconnected(&peer_id, std::time::Instant::now());
            pending.replan = true;
            let alone = swarm.connected_peers().next().is_none();
            let failed = pending.ping_timeouts.remove(&peer_id) || cause.is_some();
            bootstrap.on_disconnected(peer_id, alone, failed);
            if pending.resets.remove(&peer_id) {
                // Closed for broken gossip framing: a new connection starts its streams afresh.
                swarm.behaviour_mut().dials.exempt(peer_id);
                if let Err(e) = swarm.dial(peer_id) {
                    tracing::debug!(%peer_id, error = %e, "cannot dial a reset peer back");
                }
            }
        }
        SwarmEvent::OutgoingConnectionError { peer_id, error, .. } => {
            tracing::debug!(?peer_id, %error, "outgoing connection failed");
        }
        SwarmEvent::Behaviour(BehaviourEvent::Ping(libp2p::ping::Event {
            peer,
            connection,
            result: Err(failure),
        })) if !matches!(failure, libp2p::ping::Failure::Unsupported) => {
            // Two pings in a row went unanswered (`pings::TIMEOUT`): the link or the host went
            // away. libp2p keeps the connection; closed now, it is dialled again as soon as the
            // peer answers (`Join`).
            tracing::info!(%peer, %failure, "pings fail; closing the connection");
            pending.ping_timeouts.insert(peer);
            swarm.close_connection(connection);
        }
        SwarmEvent::Behaviour(BehaviourEvent::Identify(identify::Event::Received {
            peer_id,
            info,
            ..
        })) => {
            pending
                .topics
                .peer_identified(&peer_id, info.protocol_version == IDENTIFY_VERSION);
            pending.replan = true;
            if info.protocols.contains(&KAD_PROTOCOL) {
                for addr in info.listen_addrs {
                    swarm.behaviour_mut().kad.add_address(&peer_id, addr);
                }
            }
        }
        SwarmEvent::Behaviour(BehaviourEvent::Gossipsub(event)) => match event {
            gossipsub::Event::Message {
                propagation_source,
                message_id,
                message,
            } => {
                let topic = message.topic.as_str();
                pending.topics.traffic(topic, std::time::Instant::now());
                // With the event queue full, drop it (benignly) rather than grow without bound.
                let verdict = if message.data.len() > MAX_MESSAGE_BYTES {
                    swarm.behaviour_mut().gossipsub.refuse(
                        propagation_source,
                        frames::Reason::OverLimit,
                        &format!(
                            "a {}-byte message on {topic} is over the {MAX_MESSAGE_BYTES}-byte limit",
                            message.data.len()
                        ),
                    );
                    Verdict::Reject
                } else if queue.len() >= EVENT_QUEUE {
                    Verdict::Ignore
                } else {
                    validators
                        .iter()
                        .find(|(prefix, _)| topic.starts_with(prefix.as_str()))
                        .map_or(Verdict::Defer, |(_, v)| v.validate(topic, &message.data))
                };
                if verdict == Verdict::Reject && message.data.len() <= MAX_MESSAGE_BYTES {
                    swarm.behaviour_mut().gossipsub.refuse(
                        propagation_source,
                        frames::Reason::Invalid,
                        &format!("an invalid message on {topic}"),
                    );
                }
                pending.telemetry.gossip_verdict(topic, verdict.label());
                if let Some(acceptance) = verdict.acceptance() {
                    let _ = swarm
                        .behaviour_mut()
                        .gossipsub
                        .report_message_validation_result(
                            &message_id,
                            &propagation_source,
                            acceptance,
                        );
                }
                if matches!(verdict, Verdict::Accept | Verdict::Defer) {
                    queue.push_back(Event::Gossip {
                        topic: message.topic.into_string(),
                        data: message.data,
                        source: message.source,
                        id: message_id,
                        propagation_source,
                        needs_verdict: verdict == Verdict::Defer,
                    });
                }
            }
            // What neighbours subscribe to feeds the topic budget (their own card topics, topics
            // relayed for peers that are not Agora nodes, rendezvous); the services hear of new
            // subscribers to the AGH channels, capability topics and A2A cards topic this node is in.
            gossipsub::Event::Subscribed { peer_id, topic } => {
                let now = std::time::Instant::now();
                pending.topics.peer_subscribed(peer_id, topic.as_str(), now);
                pending.replan = true;
                let t = topic.as_str();
                if pending.topics.is_joined(t)
                    && (t.starts_with(topics::AGH_PREFIX)
                        || t.starts_with(agora_hyperspace::announce::CAPABILITIES_PREFIX)
                        || t == agora_bridge::a2a::CARDS_TOPIC)
                {
                    queue.push_back(Event::Subscribed(peer_id, topic.into_string()));
                }
            }
            gossipsub::Event::Unsubscribed { peer_id, topic } => {
                pending.topics.peer_unsubscribed(&peer_id, topic.as_str());
                pending.replan = true;
            }
            gossipsub::Event::SlowPeer {
                peer_id,
                failed_messages,
            } => {
                tracing::debug!(%peer_id, ?failed_messages, "gossipsub dropped messages for a slow peer");
                pending.dropped.add(&failed_messages);
            }
            _ => {}
        },
        SwarmEvent::Behaviour(BehaviourEvent::Direct(event)) => {
            direct_event(swarm, Proto::Envelope, event, queue, pending);
        }
        SwarmEvent::Behaviour(BehaviourEvent::Hs(event)) => {
            direct_event(swarm, Proto::Hyperspace, event, queue, pending);
        }
        SwarmEvent::Behaviour(BehaviourEvent::Mem(event)) => {
            direct_event(swarm, Proto::Memory, event, queue, pending);
        }
        SwarmEvent::Behaviour(BehaviourEvent::Pay(event)) => {
            direct_event(swarm, Proto::Payments, event, queue, pending);
        }
        SwarmEvent::Behaviour(BehaviourEvent::Dir(event)) => {
            direct_event(swarm, Proto::Directory, event, queue, pending);
        }
        SwarmEvent::Behaviour(BehaviourEvent::Kad(kad::Event::RoutingUpdated {
            peer,
            is_new_peer: true,
            ..
        })) => {
            // Only the first: re-putting every record on every new routing-table entry keeps a
            // large mesh busy with DHT traffic (publishers refresh their records themselves).
            let entries: usize = swarm
                .behaviour_mut()
                .kad
                .kbuckets()
                .map(|b| b.num_entries())
                .sum();
            if entries == 1 {
                queue.push_back(Event::DhtPeer(peer));
            }
        }
        SwarmEvent::Behaviour(BehaviourEvent::Kad(kad::Event::InboundRequest {
            request:
                kad::InboundRequest::PutRecord {
                    record: Some(record),
                    ..
                },
        })) if queue.len() < EVENT_QUEUE => {
            // Beyond the queue bound the record is simply not stored.
            queue.push_back(Event::RecordOffered {
                key: record.key.to_vec(),
                value: record.value,
            });
        }
        SwarmEvent::Behaviour(BehaviourEvent::Kad(kad::Event::InboundRequest {
            request:
                kad::InboundRequest::AddProvider {
                    record: Some(record),
                },
        })) => {
            use kad::store::RecordStore as _;
            // Provider records carry no claim to check beyond the provider being the sender,
            // which Kademlia already ensures; the store bounds them.
            if let Err(e) = swarm.behaviour_mut().kad.store_mut().add_provider(record) {
                tracing::debug!(error = ?e, "provider record not stored");
            }
        }
        SwarmEvent::Behaviour(BehaviourEvent::Kad(kad::Event::OutboundQueryProgressed {
            id,
            result: kad::QueryResult::GetProviders(result),
            step,
            ..
        })) => {
            if let Some(KadWait::Providers(_, found) | KadWait::Rendezvous(_, found)) =
                pending.kad.get_mut(&id)
                && let Ok(kad::GetProvidersOk::FoundProviders { providers, .. }) = result
            {
                found.extend(providers);
            }
            // A rendezvous needs only as many providers as it dials: once that many new ones
            // are known the walk ends instead of going on to the key's 20 closest peers. The
            // providers come mostly from those very peers, so at 200 nodes this saved little
            // (111 → 106 requests per node for the first lookups, `docs/performance.md`).
            if !step.last
                && let Some(KadWait::Rendezvous(dials, found)) = pending.kad.get(&id)
                && fresh_providers(swarm, found).count() >= *dials
                && let Some(mut query) = swarm.behaviour_mut().kad.query_mut(&id)
            {
                query.finish();
            }
            if step.last {
                match pending.kad.remove(&id) {
                    Some(KadWait::Providers(reply, found)) => {
                        let _ = reply.send(found.into_iter().collect());
                    }
                    Some(KadWait::Rendezvous(dials, found)) => dial_providers(swarm, &found, dials),
                    Some(other) => {
                        pending.kad.insert(id, other);
                    }
                    None => {}
                }
            }
        }
        SwarmEvent::Behaviour(BehaviourEvent::Kad(kad::Event::OutboundQueryProgressed {
            id,
            result: kad::QueryResult::GetRecord(result),
            step,
            ..
        })) => {
            if let Some(KadWait::Records(_, found)) = pending.kad.get_mut(&id)
                && let Ok(kad::GetRecordOk::FoundRecord(peer_record)) = result
                && !found.contains(&peer_record.record.value)
            {
                found.push(peer_record.record.value);
            }
            if step.last
                && let Some(KadWait::Records(reply, found)) = pending.kad.remove(&id)
            {
                let _ = reply.send(found);
            }
        }
        SwarmEvent::Behaviour(BehaviourEvent::Kad(kad::Event::OutboundQueryProgressed {
            id,
            result: kad::QueryResult::GetClosestPeers(_),
            step,
            ..
        })) => {
            if step.last
                && let Some(waiting) = pending.lookups.remove(&id)
            {
                for mut out in waiting {
                    let rid =
                        swarm
                            .behaviour_mut()
                            .send_request(out.proto, &out.peer, out.data.clone());
                    out.retried = true;
                    pending.conns.begin(out.peer, std::time::Instant::now());
                    pending.replies.insert((out.proto, rid), out);
                }
            }
        }
        _ => {}
    }
}

/// One event of either request-response behaviour.
fn direct_event(
    swarm: &mut Swarm<Behaviour>,
    proto: Proto,
    event: request_response::Event<Vec<u8>, Vec<u8>>,
    queue: &mut VecDeque<Event>,
    pending: &mut Pending,
) {
    match event {
        request_response::Event::Message { peer, message, .. } => match message {
            request_response::Message::Request {
                request, channel, ..
            } => {
                pending.conns.begin(peer, std::time::Instant::now());
                queue.push_back(Event::Direct {
                    proto,
                    peer,
                    data: request,
                    channel,
                });
            }
            request_response::Message::Response {
                request_id,
                response,
            } => {
                pending.conns.end(&peer, std::time::Instant::now());
                if let Some(out) = pending.replies.remove(&(proto, request_id)) {
                    let _ = out.reply.send(Ok(response));
                }
            }
        },
        request_response::Event::OutboundFailure {
            peer,
            request_id,
            error,
            ..
        } => {
            pending.conns.end(&peer, std::time::Instant::now());
            let Some(out) = pending.replies.remove(&(proto, request_id)) else {
                return;
            };
            let dial_failed = matches!(error, request_response::OutboundFailure::DialFailure);
            if dial_failed && !out.retried {
                // We do not know how to reach that node yet: ask the DHT, then retry once.
                let query = swarm.behaviour_mut().kad.get_closest_peers(out.peer);
                pending.lookups.entry(query).or_default().push(out);
            } else {
                let _ = out.reply.send(Err(error.to_string()));
            }
        }
        request_response::Event::ResponseSent { peer, .. }
        | request_response::Event::InboundFailure { peer, .. } => {
            pending.conns.end(&peer, std::time::Instant::now());
        }
    }
}
