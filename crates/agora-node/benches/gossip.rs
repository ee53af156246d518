//! Gossip delivery latency across N in-process nodes: Agora's own mesh against a bare
//! rust-libp2p gossipsub mesh of the same size, topology and gossipsub parameters, in one run.
//!
//! - **agora**: N meshes started with the public API exactly as the node does
//!   (`mesh::start` + `tokio::spawn(mesh::run(..))`, heartbeat 500 ms, the default connection
//!   manager limits) with the node's inline `GossipGate` on `hyperspace/…`: the v2 envelope
//!   (Ed25519 over the topic, freshness, replay window) is verified in gossipsub's validation hook
//!   inside the mesh task. On `hyperspace/tasks/…` the gate's `Relay` verdict is where the node's
//!   handling of a message ends (forwarded, no copy queued for a service), so a delivery is
//!   recorded there, by a wrapper around the gate. A task per node drains the mesh's events as
//!   the node's router does (and would verify and answer deferred topics as the Hyperspace
//!   service does).
//! - **bare**: N plain `libp2p::Swarm`s with only a gossipsub behaviour (TCP + Noise + Yamux,
//!   nodelay), `MessageAuthenticity::Signed`, `ValidationMode::Strict`, no application
//!   validation, and the mesh parameters of Agora's `build_swarm` (heartbeat 500 ms, mesh_n_low 1,
//!   mesh_n 4, mesh_n_high 8, mesh_outbound_min 1, max_transmit_size 1 MiB + 4 KiB); each swarm
//!   is driven by its own task through a bounded command channel. A delivery is recorded at
//!   `gossipsub::Event::Message`.
//! - **floor**: the bare variant plus the one thing the spec adds to every hop: gossipsub holds
//!   each message for validation (`validate_messages`, the js-libp2p message ids Agora uses),
//!   and the swarm's own task runs the node's `GossipGate` on it (the v2 envelope check) and
//!   reports the verdict at once, before gossipsub forwards it. No other protocol runs. This is
//!   the least any conformant node does per delivery, so `floor/bare` is the share of the gap
//!   that the spec itself sets, and `agora/floor` the share that is Agora's. A delivery is
//!   recorded when the gate accepts.
//!
//! The run is K rounds. Each round starts a fresh network of each variant in turn (the order
//! rotates between rounds, so a slow spell of a shared machine falls on every variant alike),
//! measures it and shuts it down completely before the next starts: the variants never run at
//! the same time. In a round, every variant publishes the same number of messages from the same
//! nodes with the same payloads.
//!
//! Every variant: listen on 127.0.0.1:0; node i > 0 dials up to 4 distinct random earlier nodes
//! (fixed seed); every node subscribes to `hyperspace/tasks/bench`. Readiness is awaited, never
//! slept for, under one deadline per network: first warm-up messages (not measured) are
//! published from random nodes until 5 consecutive ones reach all N − 1 other nodes within 1 s
//! each; then the process CPU time is polled until the last second used less than 20 % of one
//! core (the Agora nodes' Kademlia bootstrap keeps both cores busy for about 20 s after the
//! gossip mesh works), and, for Agora, until the connection manager has closed the connections
//! Kademlia's bootstrap opened (the total connection count unchanged for the manager's grace
//! period + 1 s); `--quiet 0` skips both gates and measures that start-up period too. Then the
//! round's messages (v2 envelopes, `d` ≈ 1 KB of JSON carrying a sequence number, signed just
//! before) are published at R/s from a random node each. Latency is receive `Instant` − publish
//! `Instant` (one in-process clock) per (message, receiving node); time-to-all is the largest
//! latency of a message that reached all N − 1 others. One process, tokio multi-thread runtime
//! with 2 workers; process CPU time (user + system) comes from `/proc/self/stat`, reported as a
//! share of the 2 workers over the measured phases.
//!
//! Run: `cargo bench -p agora-node --bench gossip` (N = 50, M = 600 per variant, R = 20, K = 4).
//! Options (after `--`, or as environment variables): `--nodes N` (`GOSSIP_BENCH_NODES`),
//! `--messages M` (`GOSSIP_BENCH_MESSAGES`, split over the rounds), `--rate R`
//! (`GOSSIP_BENCH_RATE`), `--rounds K` (`GOSSIP_BENCH_ROUNDS`), `--workers W`
//! (`GOSSIP_BENCH_WORKERS`), `--ready-timeout SECS` (`GOSSIP_BENCH_READY_TIMEOUT`, default
//! 120, per network), `--quiet PCT` (`GOSSIP_BENCH_QUIET`, default 20, 0 = off), `--timeline`
//! (`GOSSIP_BENCH_TIMELINE=1`: latency and CPU per second of each measured phase),
//! `--only agora|bare|floor` (`GOSSIP_BENCH_ONLY`, a comma-separated list) and
//! `--peers-low L --peers-high H` (`GOSSIP_BENCH_PEERS_LOW`, `GOSSIP_BENCH_PEERS_HIGH`: the Agora
//! nodes' connection manager watermarks, parsed and checked as the node's flags of the same
//! names; default 8, 16). Keep M / (K · R) under 5 minutes: Agora ignores envelopes older than
//! that.
//!
//! This is a measurement harness, not a test: it asserts nothing about the numbers (the project
//! goal is Agora within 1.2× of bare gossipsub at p50 and p99).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agora_node::mesh::{self, Command, Event, GossipValidator, MeshConfig, Verdict};
use ed25519_dalek::SigningKey;
use futures::StreamExt;
use libp2p::gossipsub::{self, IdentTopic, MessageAcceptance};
use libp2p::swarm::SwarmEvent;
use libp2p::{Multiaddr, Swarm, identity, noise, tcp, yamux};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

const TOPIC: &str = "hyperspace/tasks/bench";
/// Sequence numbers of warm-up messages start here (measured ones are 0..M).
const WARMUP_BASE: u64 = 1 << 40;
/// Consecutive warm-up messages that must reach every other node.
const READY_STREAK: usize = 5;
/// How long one warm-up message may take to reach every other node.
const WARMUP_WAIT: Duration = Duration::from_secs(1);
/// Default quiet threshold: readiness also waits until the process used less than this share
/// of one core (percent) over the last second.
const QUIET_DEFAULT: f64 = 20.0;
/// Default number of interleaved measuring rounds.
const ROUNDS_DEFAULT: usize = 4;
/// Bootstrap peers per node (distinct, random, earlier nodes).
const FANOUT: usize = 4;
const SEED: u64 = 0x9e37_79b9_7f4a_7c15;
/// Target size of the envelope's `d` JSON.
const D_SIZE: usize = 1024;
/// Same as `agora_node::mesh::MAX_MESSAGE_BYTES`.
const MAX_TRANSMIT: usize = (1 << 20) + 4096;
/// Command and event channel capacity, as the node uses.
const CHANNEL: usize = 4096;

// ---------------------------------------------------------------------------------------------
// Options, randomness, keys, messages

#[derive(Clone, Debug)]
struct Opts {
    nodes: usize,
    messages: usize,
    rate: f64,
    workers: usize,
    ready_timeout: Duration,
    quiet: f64,
    timeline: bool,
    only: Option<String>,
    rounds: usize,
    /// The Agora nodes' connection manager watermarks (the node's `--peers-low/--peers-high`).
    peers: agora_node::connmgr::Limits,
}

fn opts() -> Opts {
    let env = |k: &str| std::env::var(k).ok();
    let mut nodes = env("GOSSIP_BENCH_NODES");
    let mut messages = env("GOSSIP_BENCH_MESSAGES");
    let mut rate = env("GOSSIP_BENCH_RATE");
    let mut workers = env("GOSSIP_BENCH_WORKERS");
    let mut ready = env("GOSSIP_BENCH_READY_TIMEOUT");
    let mut only = env("GOSSIP_BENCH_ONLY");
    let mut quiet = env("GOSSIP_BENCH_QUIET");
    let mut rounds = env("GOSSIP_BENCH_ROUNDS");
    let mut peers_low = env("GOSSIP_BENCH_PEERS_LOW");
    let mut peers_high = env("GOSSIP_BENCH_PEERS_HIGH");
    let mut timeline = env("GOSSIP_BENCH_TIMELINE").is_some_and(|v| v != "0");
    // `cargo bench` adds `--bench`; anything unknown is ignored.
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let slot = match a.as_str() {
            "--nodes" => &mut nodes,
            "--messages" => &mut messages,
            "--rate" => &mut rate,
            "--workers" => &mut workers,
            "--ready-timeout" => &mut ready,
            "--only" => &mut only,
            "--quiet" => &mut quiet,
            "--rounds" => &mut rounds,
            "--peers-low" => &mut peers_low,
            "--peers-high" => &mut peers_high,
            "--timeline" => {
                timeline = true;
                continue;
            }
            _ => continue,
        };
        *slot = args.next();
    }
    let nodes: usize = nodes.map_or(50, |v| v.parse().expect("--nodes N"));
    assert!(nodes >= 2, "at least 2 nodes");
    // The node's own layering and checks, so the bench takes exactly what the node takes.
    let mut node = agora_node::config::Config::default();
    node.apply(agora_node::config::Overrides {
        peers_low: peers_low.map(|v| v.parse().expect("--peers-low N")),
        peers_high: peers_high.map(|v| v.parse().expect("--peers-high N")),
        ..agora_node::config::Overrides::default()
    })
    .and_then(|()| node.validate())
    .expect("--peers-low / --peers-high");
    Opts {
        nodes,
        messages: messages.map_or(600, |v| v.parse().expect("--messages M")),
        rate: rate.map_or(20.0, |v| v.parse().expect("--rate R")),
        workers: workers.map_or(2, |v| v.parse().expect("--workers W")),
        ready_timeout: Duration::from_secs(
            ready.map_or(120, |v| v.parse().expect("--ready-timeout SECS")),
        ),
        quiet: quiet.map_or(QUIET_DEFAULT, |v| v.parse().expect("--quiet PCT")),
        timeline,
        only,
        rounds: rounds.map_or(ROUNDS_DEFAULT, |v| v.parse().expect("--rounds K")),
        peers: node.peers,
    }
}

/// xorshift64: a fixed, tiny, reproducible generator.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn nonce(&mut self) -> String {
        format!("{:016x}{:016x}", self.next(), self.next())
    }
}

/// Node i's 32-byte Ed25519 secret (the same for both variants).
fn secret(i: usize) -> [u8; 32] {
    let mut rng = Rng(SEED ^ (i as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut s = [0u8; 32];
    for chunk in s.chunks_exact_mut(8) {
        chunk.copy_from_slice(&rng.next().to_le_bytes());
    }
    s
}

fn keypair(i: usize) -> identity::Keypair {
    identity::Keypair::ed25519_from_bytes(secret(i)).expect("ed25519 secret")
}

/// For each node, the earlier nodes it bootstraps to.
fn topology(n: usize) -> Vec<Vec<usize>> {
    let mut rng = Rng(SEED);
    (0..n)
        .map(|i| {
            let mut peers = Vec::new();
            while peers.len() < FANOUT.min(i) {
                let j = rng.below(i);
                if !peers.contains(&j) {
                    peers.push(j);
                }
            }
            peers
        })
        .collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A v2 envelope signed by `key`, whose `d` (≈ 1 KB) carries `seq`.
fn envelope(key: &SigningKey, seq: u64, rng: &mut Rng) -> Vec<u8> {
    let head = format!("{{\"seq\":{seq},\"kind\":\"bench\",\"pad\":\"");
    let pad = D_SIZE.saturating_sub(head.len() + 2);
    let d = format!("{head}{}\"}}", "x".repeat(pad));
    agora_hyperspace::sign(key, TOPIC, now_ms(), &rng.nonce(), &d)
        .expect("sign")
        .into_bytes()
}

/// The sequence number in an envelope (`"seq":N`, the first field of `d`).
fn seq_of(data: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"seq\":";
    let at = data.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let digits = data[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&data[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

/// The measured messages: (publishing node, envelope bytes).
type Plan = Vec<(usize, Vec<u8>)>;

/// One delivery: (sequence number, receiving node, when).
type Delivery = (u64, usize, Instant);

/// Where receivers record deliveries. Never blocks a receiver: the harness drains the queue
/// while it publishes, and a delivery that finds it full is counted in `overflow` (and missing).
#[derive(Clone, Debug)]
struct Recorder {
    tx: mpsc::Sender<Delivery>,
    overflow: Arc<AtomicUsize>,
}

impl Recorder {
    fn record(&self, seq: u64, node: usize) {
        if self.tx.try_send((seq, node, Instant::now())).is_err() {
            self.overflow.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Capacity of the delivery queue.
const DELIVERY_QUEUE: usize = 1 << 16;

/// Process CPU time (user + system) from `/proc/self/stat`, in clock ticks of 10 ms.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

// ---------------------------------------------------------------------------------------------
// The two variants behind one interface

/// A running network of one variant.
trait Net {
    /// Publishes `data` from node `from`.
    async fn publish(&self, from: usize, data: Vec<u8>);
    /// Connected peers of every node.
    async fn connections(&self) -> Vec<usize>;
    /// Shuts every node down and waits until they are gone.
    async fn shutdown(self);
    /// How long start-up connections nobody needs may stay open (zero: none are opened).
    fn transient_idle(&self) -> Duration;
}

fn listen_addr() -> Multiaddr {
    "/ip4/127.0.0.1/tcp/0".parse().expect("multiaddr")
}

// --- (a) Agora's mesh ------------------------------------------------------------------------

struct AgoraNode {
    commands: mpsc::Sender<Command>,
    mesh: JoinHandle<()>,
    validator: JoinHandle<()>,
}

struct AgoraNet(Vec<AgoraNode>);

/// The node's `GossipGate`, recording every message it lets through. On `hyperspace/tasks/…`
/// that is where the node's handling ends: it relays the message and queues no copy for any
/// service (`Verdict::Relay`), as bare gossipsub's ends at `gossipsub::Event::Message`.
#[derive(Debug)]
struct Recording {
    gate: agora_node::hyperspace::GossipGate,
    node: usize,
    deliveries: Recorder,
}

impl GossipValidator for Recording {
    fn validate(&self, topic: &str, data: &[u8]) -> Verdict {
        let verdict = self.gate.validate(topic, data);
        if matches!(verdict, Verdict::Relay | Verdict::Accept)
            && let Some(seq) = seq_of(data)
        {
            self.deliveries.record(seq, self.node);
        }
        verdict
    }
}

/// What the node's services do with the mesh's events: deferred Hyperspace gossip is verified
/// and answered with `Command::Validated` (and recorded); nothing else needs an answer.
async fn validator(
    node: usize,
    mut events: mpsc::Receiver<Event>,
    commands: mpsc::Sender<Command>,
    deliveries: Recorder,
) {
    let mut window = agora_hyperspace::ReplayWindow::default();
    while let Some(event) = events.recv().await {
        // Other events (and variants added later) need no answer.
        #[allow(clippy::single_match)]
        match event {
            Event::Gossip {
                topic,
                data,
                id,
                propagation_source,
                needs_verdict: true,
                ..
            } => {
                let (acceptance, seq) = match std::str::from_utf8(&data) {
                    Ok(text) => {
                        match agora_hyperspace::verify(text, &topic, now_ms(), &mut window) {
                            Ok(env) => (MessageAcceptance::Accept, seq_of(env.d_json.as_bytes())),
                            Err(e) if e.is_benign() => (MessageAcceptance::Ignore, None),
                            Err(_) => (MessageAcceptance::Reject, None),
                        }
                    }
                    Err(_) => (MessageAcceptance::Reject, None),
                };
                if let Some(seq) = seq {
                    deliveries.record(seq, node);
                }
                let _ = commands
                    .send(Command::Validated {
                        id,
                        propagation_source,
                        acceptance,
                    })
                    .await;
            }
            _ => {}
        }
    }
}

async fn start_agora(
    n: usize,
    topo: &[Vec<usize>],
    deliveries: &Recorder,
    limits: agora_node::connmgr::Limits,
) -> AgoraNet {
    let mut nodes = Vec::with_capacity(n);
    let mut addrs: Vec<Multiaddr> = Vec::with_capacity(n);
    for (i, boot) in topo.iter().enumerate().take(n) {
        let cfg = MeshConfig {
            listen: vec![listen_addr()],
            bootstrap: boot.iter().map(|&j| addrs[j].clone()).collect(),
            heartbeat: Duration::from_millis(500),
            limits,
            validators: vec![(
                agora_node::hyperspace::TOPIC_PREFIX.to_owned(),
                Arc::new(Recording {
                    gate: agora_node::hyperspace::GossipGate::new(),
                    node: i,
                    deliveries: deliveries.clone(),
                }),
            )],
            budget: agora_node::topics::Budget::default(),
        };
        let m = mesh::start(&keypair(i), &cfg).expect("mesh start");
        let (commands, commands_rx) = mpsc::channel(CHANNEL);
        let (events_tx, mut events) = mpsc::channel(CHANNEL);
        let mesh = tokio::spawn(mesh::run(m, commands_rx, events_tx));
        let addr = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match events.recv().await {
                    Some(Event::Listening(addr)) => break addr,
                    Some(_) => {}
                    None => panic!("mesh {i} stopped before listening"),
                }
            }
        })
        .await
        .expect("listening within 10 s");
        addrs.push(addr);
        let validator = tokio::spawn(validator(i, events, commands.clone(), deliveries.clone()));
        commands
            .send(Command::Subscribe(TOPIC.to_owned()))
            .await
            .expect("subscribe");
        nodes.push(AgoraNode {
            commands,
            mesh,
            validator,
        });
    }
    AgoraNet(nodes)
}

impl Net for AgoraNet {
    fn transient_idle(&self) -> Duration {
        agora_node::connmgr::Limits::default().grace
    }

    async fn publish(&self, from: usize, data: Vec<u8>) {
        let _ = self.0[from]
            .commands
            .send(Command::Publish {
                topic: TOPIC.to_owned(),
                data,
            })
            .await;
    }

    async fn connections(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for node in &self.0 {
            let (tx, rx) = oneshot::channel();
            let _ = node.commands.send(Command::Status(tx)).await;
            out.push(rx.await.map_or(0, |s| s.connected.len()));
        }
        out
    }

    async fn shutdown(self) {
        let mut meshes = Vec::new();
        for node in self.0 {
            // The validator holds a command sender: stop it, then close ours, and the mesh task
            // ends (dropping the swarm and its connections).
            node.validator.abort();
            let _ = node.validator.await;
            drop(node.commands);
            meshes.push(node.mesh);
        }
        for m in meshes {
            let _ = tokio::time::timeout(Duration::from_secs(10), m).await;
        }
    }
}

// --- (b) bare rust-libp2p gossipsub ----------------------------------------------------------

enum BareCommand {
    Publish(Vec<u8>),
    Connections(oneshot::Sender<usize>),
}

struct BareNode {
    commands: mpsc::Sender<BareCommand>,
    task: JoinHandle<()>,
}

struct BareNet(Vec<BareNode>);

/// A bare gossipsub swarm; with `hold`, gossipsub holds every message for the application's
/// verdict and identifies messages by a hash of their content (as Agora's mesh does).
fn bare_swarm(keypair: identity::Keypair, hold: bool) -> Swarm<gossipsub::Behaviour> {
    libp2p::SwarmBuilder::with_existing_identity(keypair)
        .with_tokio()
        .with_tcp(
            tcp::Config::default().nodelay(true),
            noise::Config::new,
            yamux::Config::default,
        )
        .expect("tcp transport")
        .with_behaviour(|key| {
            let mut config = gossipsub::ConfigBuilder::default();
            config
                .max_transmit_size(MAX_TRANSMIT)
                .validation_mode(gossipsub::ValidationMode::Strict)
                .heartbeat_interval(Duration::from_millis(500))
                .mesh_n_low(1)
                .mesh_n(4)
                .mesh_n_high(8)
                .mesh_outbound_min(1);
            if hold {
                config.validate_messages().message_id_fn(mesh::message_id);
            }
            let config = config.build()?;
            let behaviour: gossipsub::Behaviour = gossipsub::Behaviour::new(
                gossipsub::MessageAuthenticity::Signed(key.clone()),
                config,
            )?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(behaviour)
        })
        .expect("gossipsub behaviour")
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(60)))
        .build()
}

async fn bare_node(
    node: usize,
    mut swarm: Swarm<gossipsub::Behaviour>,
    mut commands: mpsc::Receiver<BareCommand>,
    listening: oneshot::Sender<Multiaddr>,
    deliveries: Recorder,
    gate: Option<agora_node::hyperspace::GossipGate>,
) {
    let topic = IdentTopic::new(TOPIC);
    let local = *swarm.local_peer_id();
    let mut listening = Some(listening);
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                None => break,
                Some(BareCommand::Publish(data)) => {
                    let _ = swarm.behaviour_mut().publish(topic.clone(), data);
                }
                Some(BareCommand::Connections(reply)) => {
                    let _ = reply.send(swarm.connected_peers().count());
                }
            },
            event = swarm.select_next_some() => match event {
                SwarmEvent::NewListenAddr { address, .. } => {
                    if let Some(tx) = listening.take() {
                        let _ = tx.send(address.with_p2p(local).unwrap_or_else(|a| a));
                    }
                }
                SwarmEvent::Behaviour(gossipsub::Event::Message {
                    propagation_source,
                    message_id,
                    message,
                }) => {
                    let valid = match &gate {
                        None => true,
                        Some(gate) => {
                            // The gate never defers; if it did, nobody would report later.
                            let acceptance = gate
                                .validate(message.topic.as_str(), &message.data)
                                .acceptance()
                                .unwrap_or(MessageAcceptance::Ignore);
                            swarm.behaviour_mut().report_message_validation_result(
                                &message_id,
                                &propagation_source,
                                acceptance,
                            );
                            acceptance == MessageAcceptance::Accept
                        }
                    };
                    if valid && let Some(seq) = seq_of(&message.data) {
                        deliveries.record(seq, node);
                    }
                }
                _ => {}
            },
        }
    }
}

/// Starts the bare variant, or with `gate` the floor variant.
async fn start_bare(n: usize, topo: &[Vec<usize>], deliveries: &Recorder, gate: bool) -> BareNet {
    let mut nodes = Vec::with_capacity(n);
    let mut addrs: Vec<Multiaddr> = Vec::with_capacity(n);
    for (i, boot) in topo.iter().enumerate().take(n) {
        let mut swarm = bare_swarm(keypair(i), gate);
        swarm.listen_on(listen_addr()).expect("listen");
        swarm
            .behaviour_mut()
            .subscribe(&IdentTopic::new(TOPIC))
            .expect("subscribe");
        for &j in boot {
            swarm.dial(addrs[j].clone()).expect("dial");
        }
        let (commands, commands_rx) = mpsc::channel(CHANNEL);
        let (listening_tx, listening) = oneshot::channel();
        let task = tokio::spawn(bare_node(
            i,
            swarm,
            commands_rx,
            listening_tx,
            deliveries.clone(),
            gate.then(agora_node::hyperspace::GossipGate::new),
        ));
        let addr = tokio::time::timeout(Duration::from_secs(10), listening)
            .await
            .expect("listening within 10 s")
            .expect("swarm task alive");
        addrs.push(addr);
        nodes.push(BareNode { commands, task });
    }
    BareNet(nodes)
}

impl Net for BareNet {
    /// Bare nodes only hold the connections the harness dialled.
    fn transient_idle(&self) -> Duration {
        Duration::ZERO
    }

    async fn publish(&self, from: usize, data: Vec<u8>) {
        let _ = self.0[from].commands.send(BareCommand::Publish(data)).await;
    }

    async fn connections(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for node in &self.0 {
            let (tx, rx) = oneshot::channel();
            let _ = node.commands.send(BareCommand::Connections(tx)).await;
            out.push(rx.await.unwrap_or(0));
        }
        out
    }

    async fn shutdown(self) {
        let mut tasks = Vec::new();
        for node in self.0 {
            drop(node.commands);
            tasks.push(node.task);
        }
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Measurement

#[derive(Debug, Default)]
struct Report {
    variant: &'static str,
    /// From the start of this variant's nodes.
    started: Duration,
    ready: Option<Duration>,
    /// From the start of the run (the quiet gate covers both variants).
    quiet: Option<Duration>,
    warmups: usize,
    connections: (usize, f64, usize),
    expected: usize,
    delivered: usize,
    /// Sorted.
    latencies: Vec<Duration>,
    /// Sorted; messages delivered to every other node only.
    time_to_all: Vec<Duration>,
    complete: usize,
    /// Summed over this variant's slices.
    wall: Duration,
    cpu: Option<Duration>,
    overflow: usize,
    /// Per round: (latency p50, latency p99, CPU per delivery).
    rounds: Vec<(Duration, Duration, Option<Duration>)>,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Publishes warm-up messages until `READY_STREAK` consecutive ones reach every other node
/// within `WARMUP_WAIT`, or `deadline` passes. Returns (ready?, warm-up messages sent).
async fn wait_ready(
    net: &impl Net,
    n: usize,
    keys: &[SigningKey],
    deliveries: &mut mpsc::Receiver<Delivery>,
    deadline: tokio::time::Instant,
) -> (bool, usize) {
    let mut rng = Rng(SEED ^ 0x5eed);
    let mut streak = 0;
    let mut sent = 0;
    while streak < READY_STREAK {
        if tokio::time::Instant::now() >= deadline {
            return (false, sent);
        }
        let seq = WARMUP_BASE + sent as u64;
        let from = rng.below(n);
        net.publish(from, envelope(&keys[from], seq, &mut rng))
            .await;
        sent += 1;
        let wait = (tokio::time::Instant::now() + WARMUP_WAIT).min(deadline);
        let mut seen = vec![false; n];
        let mut count = 0;
        while count < n - 1 {
            match tokio::time::timeout_at(wait, deliveries.recv()).await {
                Ok(Some((s, node, _))) if s == seq && !seen[node] => {
                    seen[node] = true;
                    count += 1;
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        streak = if count == n - 1 { streak + 1 } else { 0 };
    }
    (true, sent)
}

/// Polls the process CPU time until the last second used less than `pct` % of one core, or
/// `deadline` passes (then `false`). `pct` ≤ 0 turns the check off.
async fn wait_quiet(pct: f64, deadline: tokio::time::Instant) -> bool {
    const WINDOW: Duration = Duration::from_secs(1);
    if pct <= 0.0 {
        return true;
    }
    let mut samples: VecDeque<(Instant, Duration)> = VecDeque::new();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        let Some(cpu) = cpu_time() else { return true };
        let now = Instant::now();
        samples.push_back((now, cpu));
        while samples.len() > 2 && now.duration_since(samples[1].0) >= WINDOW {
            samples.pop_front();
        }
        if let Some(&(t, c)) = samples.front() {
            let span = now.duration_since(t);
            let used = cpu.saturating_sub(c).as_secs_f64() / span.as_secs_f64().max(1e-9);
            if span >= WINDOW && used * 100.0 < pct {
                return true;
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
    }
}

/// Waits until the connections Kademlia opened during start-up have been trimmed: the total
/// connection count has not changed for `idle` + 1 s.
async fn wait_settled(net: &impl Net, idle: Duration, deadline: tokio::time::Instant) -> bool {
    if idle.is_zero() {
        return true;
    }
    let stable_for = idle + Duration::from_secs(1);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let mut last: Option<(usize, Instant)> = None;
    loop {
        tick.tick().await;
        let total: usize = net.connections().await.iter().sum();
        let now = Instant::now();
        match last {
            Some((n, since)) if n == total => {
                if now.duration_since(since) >= stable_for {
                    return true;
                }
            }
            _ => last = Some((total, now)),
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
    }
}

/// A recorder and the queue it feeds.
fn recorder() -> (Recorder, mpsc::Receiver<Delivery>, Arc<AtomicUsize>) {
    let (tx, rx) = mpsc::channel::<Delivery>(DELIVERY_QUEUE);
    let overflow = Arc::new(AtomicUsize::new(0));
    let rec = Recorder {
        tx,
        overflow: Arc::clone(&overflow),
    };
    (rec, rx, overflow)
}

/// One round of one variant: starts its nodes with `start`, waits until the mesh delivers and
/// the process is quiet, publishes `messages` envelopes at the configured rate, collects their
/// deliveries, shuts the nodes down, and adds what it measured to `report`.
async fn round<N, F, Fut>(
    report: &mut Report,
    o: &Opts,
    keys: &[SigningKey],
    round: usize,
    messages: usize,
    start: F,
) where
    N: Net,
    F: FnOnce(Recorder) -> Fut,
    Fut: Future<Output = N>,
{
    let n = o.nodes;
    let variant = report.variant;
    let (rec, mut deliveries, overflow) = recorder();
    let t0 = Instant::now();
    let deadline = tokio::time::Instant::from_std(t0 + o.ready_timeout);
    let net = start(rec).await;
    let started = t0.elapsed();
    let (ready, warmups) = wait_ready(&net, n, keys, &mut deliveries, deadline).await;
    let ready = ready.then(|| t0.elapsed());
    if ready.is_none() {
        println!(
            "  round {round} {variant}: NOT ready after {:.1} s ({warmups} warm-up messages); measuring anyway",
            t0.elapsed().as_secs_f64()
        );
    }
    let quiet = ready.is_some()
        && wait_quiet(o.quiet, deadline).await
        && (o.quiet <= 0.0 || wait_settled(&net, net.transient_idle(), deadline).await);
    let quiet = quiet.then(|| t0.elapsed());
    if ready.is_some() && quiet.is_none() {
        println!(
            "  round {round} {variant}: NOT quiet (< {}% of a core, connections settled) after {:.1} s; measuring anyway",
            o.quiet,
            t0.elapsed().as_secs_f64()
        );
    }
    let connections = connection_counts(&net).await;
    // Signed now, as late as possible (Agora refuses envelopes more than 5 minutes old). The
    // same publishers and payloads for both variants in a round.
    let plan: Plan = {
        let mut rng = Rng(SEED ^ 0xbe7c ^ round as u64);
        (0..messages)
            .map(|k| {
                let from = rng.below(n);
                (from, envelope(&keys[from], k as u64, &mut rng))
            })
            .collect()
    };
    // Late warm-up copies are not measured.
    while deliveries.try_recv().is_ok() {}

    let expected = plan.len() * (n - 1);
    let mut got: Vec<Vec<Option<Instant>>> = vec![vec![None; n]; plan.len()];
    let mut count = 0;
    let mut published: Vec<Instant> = Vec::with_capacity(plan.len());
    let cpu0 = cpu_time();
    let begin = Instant::now();
    // Process CPU time at each whole second of the measured phase (for the timeline).
    let mut marks: Vec<Option<Duration>> = vec![cpu0];
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / o.rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while published.len() < plan.len() {
        tokio::select! {
            _ = tick.tick() => {
                if begin.elapsed().as_secs() as usize >= marks.len() {
                    marks.push(cpu_time());
                }
                let (from, data) = &plan[published.len()];
                published.push(Instant::now());
                net.publish(*from, data.clone()).await;
            }
            Some(d) = deliveries.recv() => count += usize::from(record(&mut got, d)),
        }
    }
    // Collect until everything arrived or nothing more can be expected (10 s after the last
    // publication; receive times were taken by the receivers, so waiting here costs nothing).
    let last = tokio::time::Instant::now() + Duration::from_secs(10);
    while count < expected {
        match tokio::time::timeout_at(last, deliveries.recv()).await {
            Ok(Some(d)) => count += usize::from(record(&mut got, d)),
            Ok(None) | Err(_) => break,
        }
    }
    let wall = begin.elapsed();
    let cpu = cpu0.zip(cpu_time()).map(|(a, b)| b.saturating_sub(a));
    net.shutdown().await;

    let (mut lat, to_all) = latencies(&got, &published, &plan, n);
    lat.sort();
    let per = cpu.map(|c| c / u32::try_from(count.max(1)).unwrap_or(u32::MAX));
    println!(
        "  round {round} {variant:<5}: {count}/{expected} delivered, p50 {:>6.2} ms, p99 {:>6.2} ms, CPU {} per delivery, {:.1} connections per node, quiet after {}",
        ms(percentile(&lat, 0.5)),
        ms(percentile(&lat, 0.99)),
        per.map_or_else(|| "n/a".to_owned(), |c| format!("{:.2} ms", ms(c))),
        connections.1,
        quiet.map_or_else(|| "-".to_owned(), |q| format!("{:.1} s", q.as_secs_f64())),
    );
    if o.timeline {
        for line in timeline(&got, &published, &plan, begin, &marks) {
            println!("{line}");
        }
    }
    let r = report;
    let first = r.rounds.is_empty();
    r.rounds
        .push((percentile(&lat, 0.5), percentile(&lat, 0.99), per));
    r.started = r.started.max(started);
    r.ready = if first {
        ready
    } else {
        r.ready.zip(ready).map(|(a, b)| a.max(b))
    };
    r.quiet = if first {
        quiet
    } else {
        r.quiet.zip(quiet).map(|(a, b)| a.max(b))
    };
    r.warmups = r.warmups.max(warmups);
    r.connections = if first {
        connections
    } else {
        let k = r.rounds.len() as f64;
        (
            r.connections.0.min(connections.0),
            (r.connections.1 * (k - 1.0) + connections.1) / k,
            r.connections.2.max(connections.2),
        )
    };
    r.expected += expected;
    r.delivered += count;
    r.complete += to_all.len();
    r.latencies.extend(lat);
    r.time_to_all.extend(to_all);
    r.wall += wall;
    r.cpu = if first {
        cpu
    } else {
        r.cpu.zip(cpu).map(|(a, b)| a + b)
    };
    r.overflow += overflow.load(Ordering::Relaxed);
}

/// Keeps the first delivery of measured message `seq` at `node`; `true` if it is new.
fn record(got: &mut [Vec<Option<Instant>>], (seq, node, at): Delivery) -> bool {
    let Ok(k) = usize::try_from(seq) else {
        return false;
    };
    if let Some(slot) = got.get_mut(k).and_then(|m| m.get_mut(node))
        && slot.is_none()
    {
        *slot = Some(at);
        return true;
    }
    false
}

/// Every delivery's latency, and each complete message's time-to-all (both unsorted).
fn latencies(
    got: &[Vec<Option<Instant>>],
    published: &[Instant],
    plan: &Plan,
    n: usize,
) -> (Vec<Duration>, Vec<Duration>) {
    let mut lat_all = Vec::new();
    let mut to_all = Vec::new();
    for (k, (row, &at0)) in got.iter().zip(published).enumerate() {
        let lat: Vec<Duration> = row
            .iter()
            .enumerate()
            .filter(|&(node, _)| node != plan[k].0)
            .filter_map(|(_, at)| at.map(|at| at.saturating_duration_since(at0)))
            .collect();
        if lat.len() == n - 1
            && let Some(max) = lat.iter().max()
        {
            to_all.push(*max);
        }
        lat_all.extend(lat);
    }
    (lat_all, to_all)
}

/// Latency and CPU per second of a round's measured phase (by publication time).
fn timeline(
    got: &[Vec<Option<Instant>>],
    published: &[Instant],
    plan: &[(usize, Vec<u8>)],
    start: Instant,
    marks: &[Option<Duration>],
) -> Vec<String> {
    let mut seconds: Vec<Vec<Duration>> = Vec::new();
    for (k, row) in got.iter().enumerate() {
        let Some(&at0) = published.get(k) else {
            continue;
        };
        let sec = at0.duration_since(start).as_secs() as usize;
        if seconds.len() <= sec {
            seconds.resize(sec + 1, Vec::new());
        }
        seconds[sec].extend(row.iter().enumerate().filter_map(|(node, at)| {
            let at = (*at)?;
            (node != plan[k].0).then(|| at.saturating_duration_since(at0))
        }));
    }
    seconds
        .iter_mut()
        .enumerate()
        .map(|(sec, lat)| {
            lat.sort();
            let cpu = match (marks.get(sec), marks.get(sec + 1)) {
                (Some(Some(a)), Some(Some(b))) => {
                    format!("{:.0}%", 100.0 * b.saturating_sub(*a).as_secs_f64())
                }
                _ => "-".to_owned(),
            };
            format!(
                "    s{sec:>3}: {:>5} deliveries, p50 {:>8.2} ms, p99 {:>8.2} ms, CPU {cpu} of one core",
                lat.len(),
                ms(percentile(lat, 0.5)),
                ms(percentile(lat, 0.99)),
            )
        })
        .collect()
}

fn summary(r: &Report, o: &Opts) {
    println!(
        "{}: {} nodes up in {:.2} s, ready {} ({} warm-up messages), connections per node min/avg/max {}/{:.1}/{}, {}/{} delivered, {} deliveries lost by the harness queue",
        r.variant,
        o.nodes,
        r.started.as_secs_f64(),
        r.ready.map_or_else(
            || "never".to_owned(),
            |d| format!("after {:.2} s", d.as_secs_f64())
        ),
        r.warmups,
        r.connections.0,
        r.connections.1,
        r.connections.2,
        r.delivered,
        r.expected,
        r.overflow,
    );
}

fn row(r: &Report, o: &Opts, size: usize) -> String {
    let l = &r.latencies;
    let t = &r.time_to_all;
    let cpu = r.cpu.map_or_else(
        || "n/a".to_owned(),
        |c| {
            format!(
                "{:.0}% ({:.2} ms/delivery)",
                100.0 * c.as_secs_f64() / (r.wall.as_secs_f64() * o.workers as f64),
                ms(c) / r.delivered.max(1) as f64
            )
        },
    );
    format!(
        "| {} | {} | {} @ {}/s | {} B | {} | {:.2}% | {:.2} / {:.2} / {:.2} ms | {:.2} / {:.2} ms ({}/{}) | {} | {:.1} | {} | {} |",
        r.variant,
        o.nodes,
        o.messages,
        o.rate,
        size,
        match r.variant {
            "agora" => "Strict + app (verify v2)",
            "floor" => "Strict + inline v2 check",
            _ => "Strict",
        },
        100.0 * r.delivered as f64 / r.expected.max(1) as f64,
        ms(percentile(l, 0.50)),
        ms(percentile(l, 0.90)),
        ms(percentile(l, 0.99)),
        ms(percentile(t, 0.50)),
        ms(percentile(t, 0.99)),
        r.complete,
        o.messages,
        cpu,
        r.connections.1,
        r.ready.map_or_else(
            || "not ready".to_owned(),
            |d| format!("{:.1} s ({} msgs)", d.as_secs_f64(), r.warmups)
        ),
        match (r.quiet, o.quiet > 0.0) {
            (_, false) => "off".to_owned(),
            (Some(q), true) => format!("{:.1} s", q.as_secs_f64()),
            (None, true) => "not quiet".to_owned(),
        },
    )
}

/// Connections per node: (min, average, max).
async fn connection_counts(net: &impl Net) -> (usize, f64, usize) {
    let conns = net.connections().await;
    (
        conns.iter().copied().min().unwrap_or(0),
        conns.iter().sum::<usize>() as f64 / conns.len().max(1) as f64,
        conns.iter().copied().max().unwrap_or(0),
    )
}

async fn bench(o: Opts) {
    let n = o.nodes;
    let topo = topology(n);
    let topo = &topo[..n];
    let keys: Vec<SigningKey> = (0..n).map(|i| SigningKey::from_bytes(&secret(i))).collect();
    let size = envelope(&keys[0], o.messages as u64 / 2, &mut Rng(SEED)).len();
    let rounds = o.rounds.clamp(1, o.messages.max(1));
    println!(
        "gossip bench: {n} nodes, {} messages at {}/s per variant in {rounds} rounds, envelope ≈ {size} B, topic {TOPIC}, {} tokio workers, Agora peers {}..{}",
        o.messages, o.rate, o.workers, o.peers.low, o.peers.high
    );
    let want = |v: &str| {
        o.only
            .as_deref()
            .is_none_or(|x| x.split(',').any(|w| w.trim() == v))
    };
    let mut reports: Vec<Report> = VARIANTS
        .iter()
        .filter(|v| want(v))
        .map(|&variant| Report {
            variant,
            ..Report::default()
        })
        .collect();
    // Each round starts every network afresh, one after the other, and rotates which goes
    // first, so that a slow spell of the machine falls on every variant alike.
    for k in 0..rounds {
        let messages = (k + 1) * o.messages / rounds - k * o.messages / rounds;
        let count = reports.len();
        for i in 0..count {
            let r = &mut reports[(i + k) % count];
            match r.variant {
                "agora" => {
                    let peers = o.peers;
                    round(r, &o, &keys, k, messages, |rec| async move {
                        start_agora(n, topo, &rec, peers).await
                    })
                    .await;
                }
                variant => {
                    let gate = variant == "floor";
                    round(r, &o, &keys, k, messages, |rec| async move {
                        start_bare(n, topo, &rec, gate).await
                    })
                    .await;
                }
            }
        }
    }
    for r in &mut reports {
        r.latencies.sort();
        r.time_to_all.sort();
    }
    println!();
    for r in &reports {
        summary(r, &o);
    }
    println!();
    println!(
        "| variant | N | msgs @ rate | envelope | validation | delivered | latency p50 / p90 / p99 | time-to-all p50 / p99 (complete) | CPU of {} cores | conns/node | mesh ready | CPU quiet |",
        o.workers
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &reports {
        println!("{}", row(r, &o, size));
    }
    let find = |v: &str| reports.iter().find(|r| r.variant == v);
    println!();
    for (a, b) in [("agora", "bare"), ("floor", "bare"), ("agora", "floor")] {
        if let (Some(a), Some(b)) = (find(a), find(b)) {
            compare(a, b);
        }
    }
}

/// The variants, in the order of the first round.
const VARIANTS: [&str; 3] = ["agora", "bare", "floor"];

/// Prints `a`'s latency over `b`'s, over the whole run and round by round.
fn compare(a: &Report, b: &Report) {
    let ratio = |x: Duration, y: Duration| x.as_secs_f64() / y.as_secs_f64().max(1e-9);
    let (la, lb, ta, tb) = (&a.latencies, &b.latencies, &a.time_to_all, &b.time_to_all);
    let cpu = |r: &Report| {
        r.cpu
            .map(|c| c.as_secs_f64() / r.delivered.max(1) as f64)
            .unwrap_or(0.0)
    };
    println!(
        "{}/{}: latency p50 {:.2}x, p90 {:.2}x, p99 {:.2}x; time-to-all p50 {:.2}x, p99 {:.2}x; CPU per delivery {:.2}x{}",
        a.variant,
        b.variant,
        ratio(percentile(la, 0.5), percentile(lb, 0.5)),
        ratio(percentile(la, 0.9), percentile(lb, 0.9)),
        ratio(percentile(la, 0.99), percentile(lb, 0.99)),
        ratio(percentile(ta, 0.5), percentile(tb, 0.5)),
        ratio(percentile(ta, 0.99), percentile(tb, 0.99)),
        cpu(a) / cpu(b).max(1e-12),
        if (a.variant, b.variant) == ("agora", "bare") {
            " (goal: within 1.2x)"
        } else {
            ""
        },
    );
    let spread = |f: fn(&(Duration, Duration, Option<Duration>)) -> Duration| {
        let mut v: Vec<f64> = a
            .rounds
            .iter()
            .zip(&b.rounds)
            .map(|(x, y)| ratio(f(x), f(y)))
            .collect();
        v.sort_by(f64::total_cmp);
        format!(
            "{:.2}–{:.2}x",
            v.first().copied().unwrap_or(0.0),
            v.last().copied().unwrap_or(0.0)
        )
    };
    println!(
        "  per round ({}/{} of the same round): p50 {}, p99 {}",
        a.variant,
        b.variant,
        spread(|r| r.0),
        spread(|r| r.1)
    );
}

fn main() {
    let o = opts();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(o.workers)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(bench(o));
}
