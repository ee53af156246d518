//! The topic budget: which gossip topics this node joins, and why (`docs/node.md` "Gossip
//! topics").
//!
//! A gossipsub node sends its whole subscription list to every new neighbour in one RPC, and
//! receivers refuse control data past a limit (16 KiB by default in rust-libp2p). A node that
//! joined every topic it ever heard of — one `hyperspace/capabilities/{peerId}` per peer of the
//! mesh — therefore cut itself off from new neighbours past about 200 topics. This module decides
//! the subscription set so that it stays within a fixed budget at any mesh size:
//!
//! | class | what | cap |
//! |---|---|---|
//! | local | topics this node's own functions use: its capability topic, the discovery topic, the AGH channels of its local agents, … (the services ask with `mesh::Command::Subscribe`) | the rest of the budget |
//! | proxy | a `hyperspace/…` topic that a connected neighbour which is *not* an Agora node subscribes to (a js-libp2p agent, say): Agora joins it on that peer's behalf so that it relays for it | [`Budget::proxies`], [`Budget::proxies_per_peer`] each |
//! | neighbour | `hyperspace/capabilities/{P}` of each lasting neighbour `P` (connected for [`NEIGHBOUR_SETTLE`], or kept by the node as a mesh peer of a topic it uses or a bootstrap peer), and of each connected peer that is not an Agora node from the moment it is known not to be one, that subscribes to its own capability topic (so neighbours' cards arrive by gossip; every other card is in the DHT) | [`Budget::neighbours`] |
//! | relay | an AGH channel (`agh/v0/…`) a neighbour is in: AGH presence is a directory every node can show, so channels are carried by nodes without agents in them too — but only while they carry traffic: a relayed channel silent for [`RELAY_IDLE`] (AGH greets every 30 s by default) is left and not joined again until some peer newly subscribes to it | [`Budget::relays`] |
//!
//! Apart from AGH relays, Agora nodes never join a topic because another Agora node joined it
//! (that contagion is what made every node carry every topic, and no topic could ever be left).
//! Agora nodes with a local
//! or proxy interest in the same shared topic (`agh/v0/…`, `hyperspace/tasks/…`,
//! `hyperspace/trajectories/…`, `hyperspace/crdt/…`, `hyperspace/settlements/…`) meet directly
//! instead, through a **rendezvous** in the DHT: each provides [`rendezvous_key`] of the topic and,
//! while fewer than [`RENDEZVOUS_MIN`] connected peers share the topic, looks up the other
//! providers and dials a few of them (with a backoff that doubles, each wait stretched by a random
//! fraction in [0, 1)). Now and then the node also dials one provider of one of its rendezvous
//! topics that it is not connected to, so that groups which formed apart merge: one such
//! **long-range** lookup per node and period, not one per topic, the topics taken in turn (the one
//! looked up longest ago first); the first [`LONG_RANGE`] after the node's first rendezvous topic,
//! then at intervals doubling up to [`LONG_RANGE_MAX`], each stretched by a random fraction in
//! [0, 1), so that nodes started together do not all look up at the same moment (at 500 nodes
//! the per-topic lookups, arriving together and answered by the same few providers, kept both
//! cores busy).
//!
//! Admission is greedy in priority order (local, proxy, neighbour, relay), topics already joined first
//! within a class, then by the order they were asked for, under both a topic count
//! ([`Budget::max_topics`]) and a byte budget ([`Budget::max_bytes`], the encoded size of the
//! subscription list, so the hello RPC fits a receiver's default 16 KiB control limit). A local
//! topic that does not fit is refused ([`Action::Refused`]); topics of the other classes that do
//! not fit are simply not joined. A topic is left as soon as no reason for it remains, except that
//! a disconnected peer's reasons linger for [`LINGER`] (a reconnect causes no churn).
//!
//! Pure logic with an injected clock and random seed; the mesh task feeds it events and executes
//! its actions.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use agora_hyperspace::announce::{CAPABILITIES_PREFIX, DISCOVERY_TOPIC};
use agora_hyperspace::topic::Topic;
use libp2p::PeerId;

/// How long a disconnected peer's reasons keep their topics joined.
pub const LINGER: Duration = Duration::from_secs(30);
/// A connected peer counts as a lasting neighbour (its card topic is followed) once it has been
/// connected this long, or sooner when the node keeps it for a reason ([`Topics::keep`]: a mesh
/// peer of a topic the node uses, a bootstrap peer). It is past the connection manager's grace
/// for unused connections (10 s), so the short connections of DHT queries, which the manager
/// closes again, never make the node join a card topic (each join brings that peer's full card
/// to all of its followers, and a leave follows 30 s later).
pub const NEIGHBOUR_SETTLE: Duration = Duration::from_secs(15);
/// How long a new peer may take to identify itself before it counts as not an Agora node.
pub const IDENTIFY_WAIT: Duration = Duration::from_secs(3);
/// A rendezvous topic with fewer connected subscribers than this looks for more.
pub const RENDEZVOUS_MIN: usize = 2;
/// How many providers one rendezvous lookup dials at most.
pub const RENDEZVOUS_DIALS: usize = 3;
/// The first rendezvous lookup waits this long after joining (neighbours' subscriptions that are
/// already on the way arrive first).
pub const FIRST_LOOKUP: Duration = Duration::from_millis(250);
/// Largest wait between two lookups of an under-served topic.
pub const MAX_LOOKUP_BACKOFF: Duration = Duration::from_secs(300);
/// How often a served rendezvous topic is checked again.
pub const SERVED_RECHECK: Duration = Duration::from_secs(30);
/// How long after its first rendezvous topic a node first dials one provider it is not connected
/// to (stretched by a random fraction in [0, 1)).
pub const LONG_RANGE: Duration = Duration::from_secs(600);
/// The longest interval between two long-range dials of a node (before the stretch).
pub const LONG_RANGE_MAX: Duration = Duration::from_secs(2 * 60 * 60);
/// A relayed AGH channel with no message for this long is left.
pub const RELAY_IDLE: Duration = Duration::from_secs(300);
/// Most topics remembered per peer (subscriptions past this are not tracked).
pub const MAX_PEER_TOPICS: usize = 4096;
/// Prefix of AGH channel topics.
pub const AGH_PREFIX: &str = "agh/v0/";
/// Prefix hashed with a topic into its rendezvous key.
pub const RENDEZVOUS_PREFIX: &str = "agora/topic/";

/// The limits of the subscription set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Most topics joined at once.
    pub max_topics: usize,
    /// Most bytes of the encoded subscription list ([`subscription_len`] summed).
    pub max_bytes: usize,
    /// Most neighbours' capability topics.
    pub neighbours: usize,
    /// Most proxy topics in all.
    pub proxies: usize,
    /// Most proxy topics on behalf of one peer.
    pub proxies_per_peer: usize,
    /// Most relayed AGH channels.
    pub relays: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            max_topics: 100,
            max_bytes: 12 * 1024,
            neighbours: 32,
            proxies: 24,
            proxies_per_peer: 8,
            relays: 24,
        }
    }
}

/// Why a topic is joined, in priority order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// This node's own functions use it.
    Local,
    /// On behalf of a neighbour that is not an Agora node.
    Proxy,
    /// A connected neighbour's own capability topic.
    Neighbour,
    /// An AGH channel a neighbour is in, carried while it has traffic.
    Relay,
}

impl Class {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Neighbour => "neighbour",
            Self::Proxy => "proxy",
            Self::Relay => "relay",
        }
    }
}

/// What the mesh must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Join the gossipsub topic.
    Subscribe(String),
    /// Leave it.
    Unsubscribe(String),
    /// Provide the topic's [`rendezvous_key`] in the DHT.
    Provide(String),
    /// Stop providing it.
    StopProviding(String),
    /// Look up the providers of the topic's rendezvous key and dial up to `dials` of those not
    /// connected.
    Lookup {
        /// Topic.
        topic: String,
        /// Most dials.
        dials: usize,
    },
    /// A local topic does not fit the budget and is not joined (reported once per refusal).
    Refused(String),
}

/// The budget as it stands, for `/status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// [`Budget::max_topics`].
    pub max_topics: usize,
    /// [`Budget::max_bytes`].
    pub max_bytes: usize,
    /// Topics joined.
    pub topics: usize,
    /// Their encoded size.
    pub bytes: usize,
    /// Joined topics per class.
    pub by_class: BTreeMap<&'static str, usize>,
    /// Topics being met by rendezvous.
    pub rendezvous: usize,
    /// Local topics refused for lack of room (now).
    pub refused: usize,
}

/// Bytes a topic adds to a subscription RPC: the `subscriptions` entry (tag, length) holding
/// `SubOpts { subscribe = true, topic_id }`.
#[must_use]
pub fn subscription_len(topic: &str) -> usize {
    let sub_opts = 2 + 1 + varint_len(topic.len()) + topic.len();
    1 + varint_len(sub_opts) + sub_opts
}

fn varint_len(mut n: usize) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

/// The DHT key under which nodes interested in `topic` provide themselves:
/// `SHA256("agora/topic/" ‖ topic)`.
#[must_use]
pub fn rendezvous_key(topic: &str) -> Vec<u8> {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update(RENDEZVOUS_PREFIX.as_bytes());
    h.update(topic.as_bytes());
    h.finalize().to_vec()
}

/// `every` stretched by a fraction in [0, 1) fixed for this node (`local`, its own card topic)
/// and `topic`: a deterministic spread of periodic chores over the nodes, with no clock or
/// randomness of its own.
#[must_use]
pub fn spread(local: &str, topic: &str, every: Duration) -> Duration {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update(local.as_bytes());
    h.update([0]);
    h.update(topic.as_bytes());
    let d = h.finalize();
    let x = u16::from_be_bytes([d[0], d[1]]);
    every + every.mul_f64(f64::from(x) / 65_536.0)
}

/// Topics shared by every node that cares about them (not owned by one peer, not joined by every
/// Agora node anyway): the ones met by rendezvous. The settlement rounds are joined by every
/// node (its payments service follows the current and the next round), so neighbours meet on
/// them without the DHT, as on the discovery topic.
#[must_use]
pub fn is_rendezvous_topic(topic: &str) -> bool {
    if topic.starts_with(AGH_PREFIX) {
        return topic.len() > AGH_PREFIX.len();
    }
    if topic == DISCOVERY_TOPIC {
        return false;
    }
    matches!(
        Topic::parse(topic),
        Ok(Topic::Tasks(_) | Topic::Trajectories(_) | Topic::CrdtSyncMemory)
    )
}

/// What a peer is, as far as topics go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Not identified yet (since when).
    Pending(Instant),
    /// An Agora node: it joins its own topics and meets others by rendezvous.
    Agora,
    /// Anything else (a js-libp2p agent, a go node…): Agora relays for it.
    Other,
}

#[derive(Debug)]
struct Peer {
    kind: Kind,
    /// Its own capability topic, `hyperspace/capabilities/{peerId}` (rendered once: a PeerId's
    /// base58 form is costly and plans are frequent).
    caps: String,
    /// Disconnected at; its reasons end after [`LINGER`].
    gone: Option<Instant>,
    /// Connected (again) at.
    since: Instant,
    /// A lasting neighbour: connected for [`NEIGHBOUR_SETTLE`] or kept by the node.
    settled: bool,
    /// Topics it subscribes to, with the order they were learned in.
    topics: BTreeMap<String, u64>,
}

impl Peer {
    fn new(id: &PeerId, now: Instant) -> Self {
        Self {
            kind: Kind::Pending(now),
            caps: format!("{CAPABILITIES_PREFIX}{id}"),
            gone: None,
            since: now,
            settled: false,
            topics: BTreeMap::new(),
        }
    }

    fn connected(&self) -> bool {
        self.gone.is_none()
    }

    /// Connected long enough to count as a lasting neighbour, but not marked so yet.
    fn settles(&self, now: Instant) -> bool {
        self.connected()
            && !self.settled
            && now.saturating_duration_since(self.since) >= NEIGHBOUR_SETTLE
    }

    fn proxied(&self, now: Instant) -> bool {
        match self.kind {
            Kind::Other => true,
            Kind::Agora => false,
            Kind::Pending(since) => now.saturating_duration_since(since) >= IDENTIFY_WAIT,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Rendezvous {
    next: Instant,
    backoff: Duration,
    /// When this topic's last long-range lookup was made (never: first in turn).
    long_at: Option<Instant>,
}

/// The node's long-range lookups: one per period over all its rendezvous topics.
#[derive(Debug)]
struct LongRange {
    /// The next one is due (none while the node has no rendezvous topic).
    next: Option<Instant>,
    /// The interval before the one after it (before the stretch).
    every: Duration,
}

/// The topic budget and the reasons behind every joined topic.
#[derive(Debug)]
pub struct Topics {
    budget: Budget,
    /// This node's own capability topic.
    local_caps: String,
    local: BTreeMap<String, u64>,
    peers: HashMap<PeerId, Peer>,
    joined: BTreeMap<String, Class>,
    bytes: usize,
    refused: BTreeSet<String>,
    rendezvous: BTreeMap<String, Rendezvous>,
    seq: u64,
    /// Relayed channels: when each last carried a message (or was joined).
    traffic: HashMap<String, Instant>,
    /// Channels left for silence, with the subscription sequence number at that time: only a
    /// newer subscription makes them candidates again.
    quiet: HashMap<String, u64>,
    long_range: LongRange,
    /// The jitter of every periodic lookup.
    rng: fastrand::Rng,
}

impl Topics {
    /// An empty subscription set for the node `local_peer`; `seed` seeds the jitter of its
    /// lookups.
    pub fn new(budget: Budget, local_peer: PeerId, seed: u64) -> Self {
        Self {
            budget,
            local_caps: format!("{CAPABILITIES_PREFIX}{local_peer}"),
            local: BTreeMap::new(),
            peers: HashMap::new(),
            joined: BTreeMap::new(),
            bytes: 0,
            refused: BTreeSet::new(),
            rendezvous: BTreeMap::new(),
            seq: 0,
            traffic: HashMap::new(),
            quiet: HashMap::new(),
            long_range: LongRange {
                next: None,
                every: LONG_RANGE,
            },
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// `d` stretched by a random fraction in [0, 1).
    fn stretch(&mut self, d: Duration) -> Duration {
        super::chores::stretch(&mut self.rng, d, 1.0)
    }

    /// A message arrived on `topic` (only relayed channels keep track).
    pub fn traffic(&mut self, topic: &str, now: Instant) {
        if let Some(at) = self.traffic.get_mut(topic) {
            *at = now;
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// This node's own functions need `topic`.
    pub fn join_local(&mut self, topic: &str) {
        if !self.local.contains_key(topic) {
            let seq = self.next_seq();
            self.local.insert(topic.to_owned(), seq);
        }
    }

    /// This node's own functions no longer need `topic`.
    pub fn leave_local(&mut self, topic: &str) {
        self.local.remove(topic);
    }

    /// A connection to `peer` was established (its first one).
    pub fn peer_connected(&mut self, peer: PeerId, now: Instant) {
        let p = self
            .peers
            .entry(peer)
            .or_insert_with(|| Peer::new(&peer, now));
        if p.gone.take().is_some() {
            p.since = now;
            p.settled = false;
        }
    }

    /// The node keeps these connected peers for a reason of its own (mesh peers of the topics it
    /// uses, bootstrap peers): they are lasting neighbours at once. Returns whether that made a
    /// new one (a plan is then due).
    pub fn keep<'a>(&mut self, peers: impl IntoIterator<Item = &'a PeerId>) -> bool {
        let mut changed = false;
        for id in peers {
            if let Some(p) = self.peers.get_mut(id)
                && p.connected()
                && !p.settled
            {
                p.settled = true;
                changed = true;
            }
        }
        changed
    }

    /// Connected peers that are lasting neighbours (connected for [`NEIGHBOUR_SETTLE`] or kept).
    pub fn neighbours(&self) -> impl Iterator<Item = &PeerId> {
        self.peers
            .iter()
            .filter(|(_, p)| p.connected() && p.settled)
            .map(|(id, _)| id)
    }

    /// The last connection to `peer` closed.
    pub fn peer_disconnected(&mut self, peer: &PeerId, now: Instant) {
        if let Some(p) = self.peers.get_mut(peer) {
            p.gone = Some(now);
        }
    }

    /// `peer` identified itself: `agora` when it is an Agora node.
    pub fn peer_identified(&mut self, peer: &PeerId, agora: bool) {
        if let Some(p) = self.peers.get_mut(peer) {
            p.kind = if agora { Kind::Agora } else { Kind::Other };
        }
    }

    /// `peer` subscribed to `topic`.
    pub fn peer_subscribed(&mut self, peer: PeerId, topic: &str, now: Instant) {
        let seq = self.next_seq();
        let p = self
            .peers
            .entry(peer)
            .or_insert_with(|| Peer::new(&peer, now));
        if p.topics.len() < MAX_PEER_TOPICS || p.topics.contains_key(topic) {
            p.topics.entry(topic.to_owned()).or_insert(seq);
        }
    }

    /// `peer` left `topic`.
    pub fn peer_unsubscribed(&mut self, peer: &PeerId, topic: &str) {
        if let Some(p) = self.peers.get_mut(peer) {
            p.topics.remove(topic);
        }
    }

    /// Connected peers subscribed to `topic`.
    #[must_use]
    pub fn subscribers(&self, topic: &str) -> usize {
        self.peers
            .values()
            .filter(|p| p.connected() && p.topics.contains_key(topic))
            .count()
    }

    /// Whether `topic` is joined now.
    #[must_use]
    pub fn is_joined(&self, topic: &str) -> bool {
        self.joined.contains_key(topic)
    }

    /// The joined topics and why.
    pub fn joined(&self) -> impl Iterator<Item = (&str, Class)> {
        self.joined.iter().map(|(t, c)| (t.as_str(), *c))
    }

    /// The budget as it stands.
    #[must_use]
    pub fn report(&self) -> Report {
        let mut by_class = BTreeMap::new();
        for c in [Class::Local, Class::Proxy, Class::Neighbour, Class::Relay] {
            by_class.insert(c.name(), 0);
        }
        for c in self.joined.values() {
            *by_class.entry(c.name()).or_default() += 1;
        }
        Report {
            max_topics: self.budget.max_topics,
            max_bytes: self.budget.max_bytes,
            topics: self.joined.len(),
            bytes: self.bytes,
            by_class,
            rendezvous: self.rendezvous.len(),
            refused: self.refused.len(),
        }
    }

    /// The topics wanted now, best first: `(class, seq, topic)`.
    fn candidates(&self, now: Instant) -> Vec<(Class, u64, &str)> {
        let mut best: HashMap<&str, (Class, u64)> = HashMap::new();
        fn offer<'a>(
            topic: &'a str,
            class: Class,
            seq: u64,
            best: &mut HashMap<&'a str, (Class, u64)>,
        ) {
            let e = best.entry(topic).or_insert((class, seq));
            if (class, seq) < *e {
                *e = (class, seq);
            }
        }
        for (t, seq) in &self.local {
            offer(t, Class::Local, *seq, &mut best);
        }
        let local_caps = self.local_caps.as_str();
        for p in self.peers.values() {
            if p.gone
                .is_some_and(|at| now.saturating_duration_since(at) >= LINGER)
            {
                continue;
            }
            let own = p.caps.as_str();
            // A peer that is not an Agora node (a js-libp2p agent) is followed at once: it
            // announces its card on its own topic only, and it is not one of the short
            // connections of Agora nodes' DHT queries that the settling guards against.
            if (p.settled || (p.connected() && p.kind == Kind::Other))
                && let Some((t, seq)) = p.topics.get_key_value(own)
            {
                offer(t, Class::Neighbour, *seq, &mut best);
            }
            if p.connected() {
                for (t, seq) in p.topics.range::<str, _>((
                    std::ops::Bound::Included(AGH_PREFIX),
                    std::ops::Bound::Unbounded,
                )) {
                    if !t.starts_with(AGH_PREFIX) {
                        break;
                    }
                    if t.len() > AGH_PREFIX.len()
                        && self.quiet.get(t).is_none_or(|quiet| seq > quiet)
                    {
                        offer(t, Class::Relay, *seq, &mut best);
                    }
                }
            }
            if !p.proxied(now) {
                continue;
            }
            let mut mine: Vec<(&u64, &String)> = p
                .topics
                .iter()
                .filter(|(t, _)| *t != own && *t != local_caps && Topic::parse(t).is_ok())
                .map(|(t, s)| (s, t))
                .collect();
            mine.sort();
            for (seq, t) in mine.into_iter().take(self.budget.proxies_per_peer) {
                offer(t, Class::Proxy, *seq, &mut best);
            }
        }
        let mut out: Vec<(Class, u64, &str)> =
            best.into_iter().map(|(t, (c, s))| (c, s, t)).collect();
        // Within a class, topics joined already keep their place.
        out.sort_by_key(|(c, s, t)| (*c, !self.joined.contains_key(*t), *s));
        out
    }

    /// Whether the passage of time alone can change the plan at `now`: a departed peer's linger
    /// ended, a peer still unidentified reached [`IDENTIFY_WAIT`], a relayed channel reached
    /// [`RELAY_IDLE`] of silence, or a rendezvous lookup fell due. Peers' and the node's own
    /// actions ask for a plan themselves; a timer only needs one when this says so.
    #[must_use]
    pub fn due(&self, now: Instant) -> bool {
        self.peers.values().any(|p| {
            p.settles(now)
                || p.gone
                    .is_some_and(|at| now.saturating_duration_since(at) >= LINGER)
                || matches!(p.kind, Kind::Pending(since) if now.saturating_duration_since(since) >= IDENTIFY_WAIT)
        }) || self
            .traffic
            .values()
            .any(|at| now.saturating_duration_since(*at) >= RELAY_IDLE)
            || self.rendezvous.values().any(|r| now >= r.next)
            || self.long_range.next.is_some_and(|at| now >= at)
    }

    /// Recomputes the subscription set and the rendezvous schedule; returns what to do.
    pub fn plan(&mut self, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        // Peers gone for longer than the linger period are forgotten; a peer that did not say
        // within IDENTIFY_WAIT that it is an Agora node is taken for another (as `proxied` does;
        // identify arriving later still corrects it).
        self.peers.retain(|_, p| {
            p.gone
                .is_none_or(|at| now.saturating_duration_since(at) < LINGER)
        });
        for p in self.peers.values_mut() {
            if matches!(p.kind, Kind::Pending(since) if now.saturating_duration_since(since) >= IDENTIFY_WAIT)
            {
                p.kind = Kind::Other;
            }
            if p.settles(now) {
                p.settled = true;
            }
        }

        // Relayed channels silent for too long are left until someone newly subscribes.
        let silent: Vec<String> = self
            .joined
            .iter()
            .filter(|(t, c)| {
                **c == Class::Relay
                    && self
                        .traffic
                        .get(*t)
                        .is_some_and(|at| now.saturating_duration_since(*at) >= RELAY_IDLE)
            })
            .map(|(t, _)| t.clone())
            .collect();
        for t in silent {
            self.quiet.insert(t, self.seq);
        }
        let mut chosen: BTreeMap<&str, Class> = BTreeMap::new();
        let mut refused = BTreeSet::new();
        let (mut bytes, mut neighbours, mut proxies, mut relays) = (0, 0, 0, 0);
        for (class, _, topic) in self.candidates(now) {
            let cost = subscription_len(topic);
            let room = chosen.len() < self.budget.max_topics
                && bytes + cost <= self.budget.max_bytes
                && match class {
                    Class::Local => true,
                    Class::Neighbour => neighbours < self.budget.neighbours,
                    Class::Proxy => proxies < self.budget.proxies,
                    Class::Relay => relays < self.budget.relays,
                };
            if !room {
                if class == Class::Local {
                    refused.insert(topic.to_owned());
                }
                continue;
            }
            bytes += cost;
            match class {
                Class::Local => {}
                Class::Neighbour => neighbours += 1,
                Class::Proxy => proxies += 1,
                Class::Relay => relays += 1,
            }
            chosen.insert(topic, class);
        }
        for gone in self
            .joined
            .keys()
            .filter(|t| !chosen.contains_key(t.as_str()))
        {
            actions.push(Action::Unsubscribe(gone.clone()));
        }
        for new in chosen.keys().filter(|t| !self.joined.contains_key(**t)) {
            actions.push(Action::Subscribe((*new).to_owned()));
        }
        let chosen: BTreeMap<String, Class> =
            chosen.into_iter().map(|(t, c)| (t.to_owned(), c)).collect();
        for t in refused.difference(&self.refused) {
            actions.push(Action::Refused(t.clone()));
        }
        self.refused = refused;
        // Silence is measured from the time a channel became relayed.
        self.traffic
            .retain(|t, _| chosen.get(t) == Some(&Class::Relay));
        for (t, c) in &chosen {
            if *c == Class::Relay {
                self.traffic.entry(t.clone()).or_insert(now);
            }
        }
        self.quiet.retain(|t, _| !self.local.contains_key(t));
        self.joined = chosen;
        self.bytes = bytes;
        self.plan_rendezvous(now, &mut actions);
        actions
    }

    fn plan_rendezvous(&mut self, now: Instant, actions: &mut Vec<Action>) {
        let wanted: BTreeSet<String> = self
            .joined
            .iter()
            .filter(|(t, c)| matches!(c, Class::Local | Class::Proxy) && is_rendezvous_topic(t))
            .map(|(t, _)| t.clone())
            .collect();
        let stale: Vec<String> = self
            .rendezvous
            .keys()
            .filter(|t| !wanted.contains(*t))
            .cloned()
            .collect();
        for t in stale {
            self.rendezvous.remove(&t);
            actions.push(Action::StopProviding(t));
        }
        for t in wanted {
            if let std::collections::btree_map::Entry::Vacant(e) = self.rendezvous.entry(t) {
                actions.push(Action::Provide(e.key().clone()));
                e.insert(Rendezvous {
                    next: now + FIRST_LOOKUP,
                    backoff: Duration::from_secs(1),
                    long_at: None,
                });
            }
        }
        self.plan_long_range(now, actions);
        let counts: Vec<(String, usize)> = self
            .rendezvous
            .keys()
            .map(|t| (t.clone(), self.subscribers(t)))
            .collect();
        for (topic, subscribers) in counts {
            let Some(&Rendezvous { next, backoff, .. }) = self.rendezvous.get(&topic) else {
                continue;
            };
            if now < next {
                continue;
            }
            let (next, backoff) = if subscribers < RENDEZVOUS_MIN {
                let wait = self.stretch(backoff);
                actions.push(Action::Lookup {
                    topic: topic.clone(),
                    dials: RENDEZVOUS_DIALS,
                });
                (now + wait, (backoff * 2).min(MAX_LOOKUP_BACKOFF))
            } else {
                (now + SERVED_RECHECK, Duration::from_secs(1))
            };
            if let Some(r) = self.rendezvous.get_mut(&topic) {
                r.next = next;
                r.backoff = backoff;
            }
        }
    }

    /// The node's one long-range lookup per period, over its rendezvous topics in turn.
    fn plan_long_range(&mut self, now: Instant, actions: &mut Vec<Action>) {
        if self.rendezvous.is_empty() {
            self.long_range.next = None;
            return;
        }
        let Some(due) = self.long_range.next else {
            let wait = self.stretch(self.long_range.every);
            self.long_range.next = Some(now + wait);
            return;
        };
        if now < due {
            return;
        }
        // The topic looked up longest ago (never: first), ties by name.
        let turn = self
            .rendezvous
            .iter()
            .min_by_key(|(_, r)| r.long_at)
            .map(|(t, _)| t.clone());
        if let Some(topic) = turn {
            if let Some(r) = self.rendezvous.get_mut(&topic) {
                r.long_at = Some(now);
            }
            actions.push(Action::Lookup { topic, dials: 1 });
        }
        self.long_range.every = (self.long_range.every * 2).min(LONG_RANGE_MAX);
        let wait = self.stretch(self.long_range.every);
        self.long_range.next = Some(now + wait);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ed25519 PeerId, as every Agora and js-libp2p node has (`12D3KooW…`, 52 characters).
    fn peer() -> PeerId {
        libp2p::identity::Keypair::generate_ed25519()
            .public()
            .to_peer_id()
    }

    fn caps(p: &PeerId) -> String {
        format!("{CAPABILITIES_PREFIX}{p}")
    }

    fn subscribed(actions: &[Action]) -> Vec<&str> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Subscribe(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn time_alone_asks_for_a_plan_only_when_a_reason_expires() {
        let t0 = Instant::now();
        let mut t = Topics::new(Budget::default(), peer(), 7);
        let (a, b) = (peer(), peer());
        t.peer_connected(a, t0);
        t.peer_identified(&a, true);
        t.peer_subscribed(a, &caps(&a), t0);
        t.peer_connected(b, t0);
        t.plan(t0);
        assert!(!t.due(t0 + Duration::from_secs(1)), "nothing expires yet");
        // b never identifies: once, when it is taken for a non-Agora peer.
        assert!(t.due(t0 + IDENTIFY_WAIT));
        t.plan(t0 + IDENTIFY_WAIT);
        assert!(!t.due(t0 + IDENTIFY_WAIT));
        // Both have lasted: once, when they become lasting neighbours.
        assert!(t.due(t0 + NEIGHBOUR_SETTLE));
        t.plan(t0 + NEIGHBOUR_SETTLE);
        assert!(!t.due(t0 + NEIGHBOUR_SETTLE));
        // a leaves: due when its linger ends, not before, and not after the plan forgot it.
        let left = t0 + NEIGHBOUR_SETTLE;
        t.peer_disconnected(&a, left);
        assert!(!t.due(left + LINGER / 2));
        assert!(t.due(left + LINGER));
        t.plan(left + LINGER);
        assert!(!t.due(left + LINGER));
    }

    #[test]
    fn wire_length_matches_the_protobuf_encoding() {
        // 10-byte topic: SubOpts = 08 01 12 0a <10> = 14 bytes; entry = 0a 0e <14> = 16 bytes.
        assert_eq!(subscription_len("0123456789"), 16);
        // A capability topic: 24 + 52 = 76 bytes of name, 82 on the wire.
        let t = caps(&peer());
        assert_eq!(t.len(), 76);
        assert_eq!(subscription_len(&t), 82);
        // Past 127 bytes the lengths take two bytes each.
        assert_eq!(
            subscription_len(&"x".repeat(200)),
            1 + 2 + (2 + 1 + 2 + 200)
        );
    }

    #[test]
    fn local_topics_join_and_leave() {
        let me = peer();
        let mut t = Topics::new(Budget::default(), me, 7);
        let now = Instant::now();
        t.join_local("agh/v0/builders");
        let a = t.plan(now);
        assert_eq!(subscribed(&a), ["agh/v0/builders"]);
        assert!(a.contains(&Action::Provide("agh/v0/builders".into())));
        assert!(
            t.plan(now).is_empty(),
            "a plan with nothing new does nothing"
        );
        t.leave_local("agh/v0/builders");
        let a = t.plan(now);
        assert!(a.contains(&Action::Unsubscribe("agh/v0/builders".into())));
        assert!(a.contains(&Action::StopProviding("agh/v0/builders".into())));
        assert_eq!(t.report().topics, 0);
    }

    #[test]
    fn agora_nodes_do_not_spread_topics_to_each_other() {
        let mut t = Topics::new(Budget::default(), peer(), 7);
        let now = Instant::now();
        let n = peer();
        t.peer_connected(n, now);
        t.peer_identified(&n, true);
        // An Agora neighbour's own card topic is followed; what it follows itself is not.
        t.peer_subscribed(n, &caps(&n), now);
        for _ in 0..300 {
            t.peer_subscribed(n, &caps(&peer()), now);
        }
        t.peer_subscribed(n, "hyperspace/tasks/web-research", now);
        assert!(
            subscribed(&t.plan(now + Duration::from_secs(10))).is_empty(),
            "not a lasting neighbour yet"
        );
        assert!(t.due(now + NEIGHBOUR_SETTLE));
        let a = t.plan(now + NEIGHBOUR_SETTLE);
        assert_eq!(subscribed(&a), [caps(&n).as_str()]);
        assert_eq!(t.neighbours().collect::<Vec<_>>(), [&n]);
        // It disconnects: the topic stays for the linger period, then goes.
        t.peer_disconnected(&n, now);
        assert!(t.plan(now + LINGER / 2).is_empty());
        let a = t.plan(now + LINGER);
        assert_eq!(a, [Action::Unsubscribe(caps(&n))]);
    }

    #[test]
    fn short_connections_never_bring_card_topics_kept_peers_do_at_once() {
        let mut t = Topics::new(Budget::default(), peer(), 7);
        let now = Instant::now();
        let (brief, kept) = (peer(), peer());
        for n in [brief, kept] {
            t.peer_connected(n, now);
            t.peer_identified(&n, true);
            t.peer_subscribed(n, &caps(&n), now);
        }
        // A DHT query's connection, closed by the connection manager after its grace.
        t.peer_disconnected(&brief, now + Duration::from_secs(11));
        // The other is a mesh peer of a topic the node uses: followed at once.
        assert!(t.keep([&kept]));
        assert!(!t.keep([&kept]), "already a neighbour");
        assert!(!t.keep([&brief]), "not connected");
        assert_eq!(subscribed(&t.plan(now)), [caps(&kept).as_str()]);
        assert!(
            !t.due(now + NEIGHBOUR_SETTLE),
            "the brief one never settles"
        );
        assert!(t.plan(now + NEIGHBOUR_SETTLE).is_empty());
        // Reconnected: it has to last again.
        let later = now + Duration::from_secs(20);
        t.peer_connected(brief, later);
        assert!(t.plan(later + Duration::from_secs(1)).is_empty());
        assert_eq!(
            subscribed(&t.plan(later + NEIGHBOUR_SETTLE)),
            [caps(&brief).as_str()]
        );
    }

    #[test]
    fn agh_channels_are_relayed_while_they_carry_traffic() {
        let mut t = Topics::new(Budget::default(), peer(), 7);
        let now = Instant::now();
        let n = peer();
        t.peer_connected(n, now);
        t.peer_identified(&n, true);
        t.peer_subscribed(n, "agh/v0/builders", now);
        t.peer_subscribed(n, "agh/v0/quiet", now);
        let a = t.plan(now);
        assert_eq!(subscribed(&a), ["agh/v0/builders", "agh/v0/quiet"]);
        assert!(
            !a.iter().any(|a| matches!(a, Action::Provide(_))),
            "relays are not rendezvous"
        );
        assert_eq!(t.report().by_class["relay"], 2);
        let later = now + RELAY_IDLE;
        t.traffic("agh/v0/builders", later);
        let a = t.plan(later);
        assert_eq!(a, [Action::Unsubscribe("agh/v0/quiet".into())]);
        // The neighbour's old subscription does not bring it back; a new one does.
        assert!(t.plan(later + Duration::from_secs(1)).is_empty());
        let m = peer();
        t.peer_connected(m, later);
        t.peer_subscribed(m, "agh/v0/quiet", later);
        assert_eq!(subscribed(&t.plan(later)), ["agh/v0/quiet"]);
        // A local interest is never silenced.
        t.join_local("agh/v0/builders");
        t.plan(later);
        assert_eq!(t.report().by_class["local"], 1);
        assert!(
            t.plan(later + RELAY_IDLE * 2)
                .iter()
                .all(|a| *a != Action::Unsubscribe("agh/v0/builders".into()))
        );
    }

    #[test]
    fn other_peers_are_proxied_after_identify_or_the_wait() {
        let mut t = Topics::new(Budget::default(), peer(), 7);
        let now = Instant::now();
        let js = peer();
        t.peer_connected(js, now);
        t.peer_subscribed(js, "hyperspace/tasks/web-research", now);
        t.peer_subscribed(js, "not-hyperspace", now);
        assert!(subscribed(&t.plan(now)).is_empty(), "not before identify");
        let a = t.plan(now + IDENTIFY_WAIT);
        assert_eq!(subscribed(&a), ["hyperspace/tasks/web-research"]);
        assert!(a.contains(&Action::Provide("hyperspace/tasks/web-research".into())));
        assert_eq!(t.report().by_class["proxy"], 1);
        // Identified as Agora after all: no longer proxied.
        t.peer_identified(&js, true);
        let a = t.plan(now + IDENTIFY_WAIT);
        assert!(a.contains(&Action::Unsubscribe("hyperspace/tasks/web-research".into())));
    }

    #[test]
    fn a_foreign_peers_own_card_topic_is_followed_at_once_whatever_else_it_follows() {
        let mut t = Topics::new(Budget::default(), peer(), 7);
        let now = Instant::now();
        // Three js peers, each following 200 card topics, use up the proxy topics.
        let js: Vec<PeerId> = (0..4).map(|_| peer()).collect();
        for p in &js {
            t.peer_connected(*p, now);
            for _ in 0..199 {
                t.peer_subscribed(*p, &caps(&peer()), now);
            }
            t.peer_subscribed(*p, &caps(p), now);
            t.peer_identified(p, false);
        }
        let actions = t.plan(now);
        let joined = subscribed(&actions);
        for p in &js {
            assert!(
                joined.contains(&caps(p).as_str()),
                "each js peer's own card topic, before any settling"
            );
        }
        assert_eq!(t.report().by_class["proxy"], Budget::default().proxies);
        assert_eq!(t.report().by_class["neighbour"], js.len());
        // An Agora node's waits for NEIGHBOUR_SETTLE (or to be kept).
        let agora = peer();
        t.peer_connected(agora, now);
        t.peer_identified(&agora, true);
        t.peer_subscribed(agora, &caps(&agora), now);
        assert!(subscribed(&t.plan(now)).is_empty());
        assert_eq!(
            subscribed(&t.plan(now + NEIGHBOUR_SETTLE)),
            [caps(&agora).as_str()]
        );
    }

    #[test]
    fn the_budget_holds_at_any_mesh_size() {
        let budget = Budget::default();
        let mut t = Topics::new(budget, peer(), 7);
        let now = Instant::now();
        for i in 0..10 {
            t.join_local(&format!("agh/v0/channel-{i}"));
        }
        // 500 neighbours, each announcing its card topic and in 100 channels; 20 js peers with
        // 250 topics each.
        for i in 0..500 {
            let n = peer();
            t.peer_connected(n, now);
            t.peer_identified(&n, true);
            t.peer_subscribed(n, &caps(&n), now);
            for k in 0..100 {
                t.peer_subscribed(n, &format!("agh/v0/c-{}", (i + k) % 1000), now);
            }
        }
        for _ in 0..20 {
            let js = peer();
            t.peer_connected(js, now);
            t.peer_identified(&js, false);
            for k in 0..250 {
                t.peer_subscribed(js, &format!("hyperspace/tasks/t-{k:03}"), now);
                t.peer_subscribed(js, &caps(&peer()), now);
            }
        }
        t.plan(now + NEIGHBOUR_SETTLE);
        let r = t.report();
        assert!(r.topics <= budget.max_topics, "{r:?}");
        assert!(r.bytes <= budget.max_bytes, "{r:?}");
        assert_eq!(r.by_class["local"], 10);
        assert_eq!(r.by_class["proxy"], budget.proxies);
        assert_eq!(r.by_class["neighbour"], budget.neighbours);
        assert_eq!(r.by_class["relay"], budget.relays);
        assert_eq!(r.refused, 0);
    }

    #[test]
    fn local_topics_push_out_proxies_and_are_refused_only_when_nothing_is_left() {
        let budget = Budget {
            max_topics: 4,
            ..Budget::default()
        };
        let mut t = Topics::new(budget, peer(), 7);
        let now = Instant::now();
        let js = peer();
        t.peer_connected(js, now);
        t.peer_identified(&js, false);
        for k in 0..4 {
            t.peer_subscribed(js, &format!("hyperspace/tasks/t-{k}"), now);
        }
        assert_eq!(subscribed(&t.plan(now)).len(), 4);
        t.join_local("agh/v0/a");
        let a = t.plan(now);
        assert_eq!(subscribed(&a), ["agh/v0/a"]);
        assert!(a.contains(&Action::Unsubscribe("hyperspace/tasks/t-3".into())));
        for c in ["b", "c", "d", "e"] {
            t.join_local(&format!("agh/v0/{c}"));
        }
        let a = t.plan(now);
        assert!(a.contains(&Action::Refused("agh/v0/e".into())), "{a:?}");
        assert_eq!(t.report().by_class["local"], 4);
        // Reported once, not at every plan.
        assert!(!t.plan(now).iter().any(|a| matches!(a, Action::Refused(_))));
    }

    #[test]
    fn proxies_per_peer_are_capped_and_stable() {
        let budget = Budget::default();
        let mut t = Topics::new(budget, peer(), 7);
        let now = Instant::now();
        let js = peer();
        t.peer_connected(js, now);
        t.peer_identified(&js, false);
        for k in 0..250 {
            t.peer_subscribed(js, &format!("hyperspace/tasks/t-{k:03}"), now);
        }
        let first = subscribed(&t.plan(now))
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>();
        assert_eq!(first.len(), budget.proxies_per_peer);
        assert_eq!(first[0], "hyperspace/tasks/t-000");
        t.peer_unsubscribed(&js, "hyperspace/tasks/t-100");
        assert!(t.plan(now).is_empty(), "unrelated changes move nothing");
    }

    #[test]
    fn rendezvous_looks_up_with_backoff_until_served() {
        let mut t = Topics::new(Budget::default(), peer(), 7);
        let now = Instant::now();
        let topic = "hyperspace/tasks/web-research";
        t.join_local(topic);
        t.join_local(DISCOVERY_TOPIC);
        t.join_local(&caps(&peer()));
        let a = t.plan(now);
        let provided: Vec<_> = a
            .iter()
            .filter(|a| matches!(a, Action::Provide(_)))
            .collect();
        assert_eq!(provided, [&Action::Provide(topic.into())]);
        let lookups = |a: &[Action]| {
            a.iter()
                .filter(|a| matches!(a, Action::Lookup { .. }))
                .count()
        };
        assert_eq!(lookups(&t.plan(now)), 0);
        assert_eq!(lookups(&t.plan(now + FIRST_LOOKUP)), 1);
        assert_eq!(lookups(&t.plan(now + FIRST_LOOKUP)), 0, "backoff");
        // The first backoff, 1 s, stretched by less than itself.
        assert_eq!(
            lookups(&t.plan(now + FIRST_LOOKUP + Duration::from_millis(999))),
            0
        );
        let later = now + FIRST_LOOKUP + Duration::from_secs(2);
        assert_eq!(lookups(&t.plan(later)), 1);
        // Two subscribed neighbours: served, no more lookups.
        for _ in 0..RENDEZVOUS_MIN {
            let n = peer();
            t.peer_connected(n, now);
            t.peer_subscribed(n, topic, now);
        }
        assert_eq!(lookups(&t.plan(later + Duration::from_secs(10))), 0);
        // But a long-range dial now and then: first after LONG_RANGE (stretched), then at
        // doubling intervals.
        let long = Action::Lookup {
            topic: topic.into(),
            dials: 1,
        };
        let first = t
            .long_range
            .next
            .expect("scheduled with the first rendezvous topic");
        assert!(first >= now + LONG_RANGE && first < now + 2 * LONG_RANGE);
        assert!(!t.plan(first - Duration::from_secs(1)).contains(&long));
        assert!(t.plan(first).contains(&long));
        let second = t.long_range.next.expect("the next one");
        assert!(second >= first + 2 * LONG_RANGE && second < first + 4 * LONG_RANGE);
        assert!(!t.plan(second - Duration::from_secs(1)).contains(&long));
        assert!(t.plan(second).contains(&long));
    }

    #[test]
    fn one_long_range_lookup_per_node_and_period_over_the_topics_in_turn() {
        let mut t = Topics::new(Budget::default(), peer(), 11);
        let now = Instant::now();
        let topics = [
            "hyperspace/tasks/a",
            "hyperspace/tasks/b",
            "hyperspace/tasks/c",
        ];
        for topic in topics {
            t.join_local(topic);
            // Served: only long-range lookups remain.
            for _ in 0..RENDEZVOUS_MIN {
                let n = peer();
                t.peer_connected(n, now);
                t.peer_subscribed(n, topic, now);
            }
        }
        t.plan(now);
        let mut at = now;
        let mut seen = Vec::new();
        let mut waits = Vec::new();
        for _ in 0..6 {
            let next = t.long_range.next.expect("scheduled");
            waits.push(next - at);
            at = next;
            let long: Vec<String> = t
                .plan(at)
                .into_iter()
                .filter_map(|a| match a {
                    Action::Lookup { topic, dials: 1 } => Some(topic),
                    _ => None,
                })
                .collect();
            assert_eq!(long.len(), 1, "one long-range lookup per period: {long:?}");
            seen.extend(long);
        }
        // Each topic in turn, then again.
        assert_eq!(seen[..3], topics);
        assert_eq!(seen[3..], topics);
        // Periods double up to the cap, each stretched by less than itself.
        let mut every = LONG_RANGE;
        for w in waits {
            assert!(w >= every && w < 2 * every, "{w:?} for {every:?}");
            every = (every * 2).min(LONG_RANGE_MAX);
        }
    }

    #[test]
    fn nodes_jitter_differently_with_different_seeds() {
        let firsts: BTreeSet<Duration> = (0..50u64)
            .map(|seed| {
                let mut t = Topics::new(Budget::default(), peer(), seed);
                let now = Instant::now();
                t.join_local("hyperspace/tasks/a");
                t.plan(now);
                t.long_range.next.expect("scheduled") - now
            })
            .collect();
        assert!(
            firsts.len() > 40,
            "50 seeds gave {} first waits",
            firsts.len()
        );
        let spanned = firsts.last().copied().unwrap_or_default()
            - firsts.first().copied().unwrap_or_default();
        assert!(spanned > LONG_RANGE / 2, "spread over {spanned:?}");
    }

    #[test]
    fn chores_are_spread_over_nodes_and_topics() {
        let every = Duration::from_secs(600);
        let spreads: Vec<Duration> = (0..200)
            .map(|_| spread(&caps(&peer()), "hyperspace/tasks/x", every))
            .collect();
        assert!(spreads.iter().all(|d| *d >= every && *d < 2 * every));
        let (lo, hi) = (
            spreads.iter().min().copied().unwrap_or_default(),
            spreads.iter().max().copied().unwrap_or_default(),
        );
        assert!(hi - lo > every / 2, "200 nodes spread over {:?}", hi - lo);
        // Fixed for one node and topic.
        let me = caps(&peer());
        assert_eq!(spread(&me, "a", every), spread(&me, "a", every));
        assert_ne!(spread(&me, "a", every), spread(&me, "b", every));
    }

    #[test]
    fn rendezvous_topics() {
        assert!(is_rendezvous_topic("agh/v0/builders"));
        assert!(!is_rendezvous_topic("agh/v0/"));
        assert!(is_rendezvous_topic("hyperspace/tasks/web-research"));
        assert!(is_rendezvous_topic("hyperspace/trajectories/web-research"));
        assert!(is_rendezvous_topic("hyperspace/crdt/sync/memory"));
        assert!(!is_rendezvous_topic(DISCOVERY_TOPIC));
        assert!(!is_rendezvous_topic(&caps(&peer())));
        assert!(!is_rendezvous_topic("hyperspace/reputation/x"));
        assert!(!is_rendezvous_topic("elsewhere"));
        assert_ne!(rendezvous_key("a"), rendezvous_key("b"));
        assert_eq!(rendezvous_key("a").len(), 32);
    }
}
