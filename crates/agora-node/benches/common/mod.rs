//! What the gossip benches share: options, keys, topology, v2 envelopes, the delivery recorder,
//! the bare rust-libp2p gossipsub variant, the readiness gates, and the arithmetic of the
//! results. Each bench compiles this module on its own and uses part of it.

#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agora_node::mesh::{self, GossipValidator, Verdict};
use ed25519_dalek::SigningKey;
use futures::StreamExt;
use libp2p::gossipsub::{self, IdentTopic, MessageAcceptance};
use libp2p::swarm::SwarmEvent;
use libp2p::{Multiaddr, Swarm, identity, noise, tcp, yamux};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Sequence numbers of warm-up messages start here (measured ones are 0..M).
pub(crate) const WARMUP_BASE: u64 = 1 << 40;
/// Consecutive warm-up messages that must reach every other node.
pub(crate) const READY_STREAK: usize = 5;
/// Bootstrap peers per node (distinct, random, earlier nodes).
pub(crate) const FANOUT: usize = 4;
pub(crate) const SEED: u64 = 0x9e37_79b9_7f4a_7c15;
/// Target size of the envelope's `d` JSON.
pub(crate) const D_SIZE: usize = 1024;
/// Same as `agora_node::mesh::MAX_MESSAGE_BYTES`.
pub(crate) const MAX_TRANSMIT: usize = (1 << 20) + 4096;
/// Command and event channel capacity, as the node uses.
pub(crate) const CHANNEL: usize = 4096;
/// Capacity of the delivery queue.
pub(crate) const DELIVERY_QUEUE: usize = 1 << 16;

// ---------------------------------------------------------------------------------------------
// Options

/// Options from the command line (`--name VALUE`, `--flag`), else from the environment
/// (`{PREFIX}_{NAME}`, dashes as underscores; a flag is set by any value but `0`).
#[derive(Debug)]
pub(crate) struct Args(HashMap<&'static str, String>);

impl Args {
    pub(crate) fn read(prefix: &str, options: &[&'static str], flags: &[&'static str]) -> Self {
        let var = |name: &str| format!("{prefix}_{}", name.to_uppercase().replace('-', "_"));
        let mut map = HashMap::new();
        for &name in options {
            if let Ok(v) = std::env::var(var(name)) {
                map.insert(name, v);
            }
        }
        for &name in flags {
            if std::env::var(var(name)).is_ok_and(|v| v != "0") {
                map.insert(name, String::new());
            }
        }
        // `cargo bench` adds `--bench`; anything unknown is ignored.
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let Some(name) = a.strip_prefix("--") else {
                continue;
            };
            if let Some(&flag) = flags.iter().find(|&&f| f == name) {
                map.insert(flag, String::new());
            } else if let Some(&option) = options.iter().find(|&&o| o == name)
                && let Some(v) = args.next()
            {
                map.insert(option, v);
            }
        }
        Self(map)
    }

    /// The raw value of option `name`.
    pub(crate) fn raw(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }

    /// Option `name` parsed, or `default`; a value that does not parse stops the bench.
    pub(crate) fn get<T: FromStr>(&self, name: &str, default: T) -> T {
        self.parsed(name).unwrap_or(default)
    }

    /// Option `name` parsed, if given; a value that does not parse stops the bench.
    pub(crate) fn parsed<T: FromStr>(&self, name: &str) -> Option<T> {
        let v = self.0.get(name)?;
        Some(
            v.parse()
                .unwrap_or_else(|_| panic!("--{name}: cannot parse {v:?}")),
        )
    }

    pub(crate) fn flag(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }
}

/// The options every gossip bench takes (its own come beside them).
#[derive(Clone, Debug)]
pub(crate) struct RunOpts {
    pub(crate) nodes: usize,
    pub(crate) messages: usize,
    pub(crate) rate: f64,
    pub(crate) workers: usize,
    /// Per network.
    pub(crate) ready_timeout: Duration,
    /// Percent of one core (0 = off).
    pub(crate) quiet: f64,
    /// Comma-separated variants.
    pub(crate) only: Option<String>,
}

impl RunOpts {
    /// Their names on the command line.
    pub(crate) const NAMES: [&'static str; 7] = [
        "nodes",
        "messages",
        "rate",
        "workers",
        "ready-timeout",
        "quiet",
        "only",
    ];

    /// Reads them from `args`; the defaults of the rate and of the number of messages may
    /// depend on the number of nodes and on the rate.
    pub(crate) fn read(
        args: &Args,
        nodes: usize,
        rate: impl Fn(usize) -> f64,
        messages: impl Fn(f64) -> usize,
        ready_timeout_secs: u64,
        quiet: f64,
    ) -> Self {
        let nodes: usize = args.get("nodes", nodes);
        assert!(nodes >= 2, "at least 2 nodes");
        let rate = args.get("rate", rate(nodes));
        Self {
            nodes,
            messages: args.get("messages", messages(rate)),
            rate,
            workers: args.get("workers", 2),
            ready_timeout: Duration::from_secs(args.get("ready-timeout", ready_timeout_secs)),
            quiet: args.get("quiet", quiet),
            only: args.raw("only"),
        }
    }

    /// Whether `variant` is to run.
    pub(crate) fn wants(&self, variant: &str) -> bool {
        self.only
            .as_deref()
            .is_none_or(|x| x.split(',').any(|w| w.trim() == variant))
    }
}

// ---------------------------------------------------------------------------------------------
// Randomness, keys, topology, messages

/// xorshift64: a fixed, tiny, reproducible generator.
#[derive(Clone, Debug)]
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub(crate) fn nonce(&mut self) -> String {
        format!("{:016x}{:016x}", self.next(), self.next())
    }
}

/// Node i's 32-byte Ed25519 secret (the same for every variant).
pub(crate) fn secret(i: usize) -> [u8; 32] {
    let mut rng = Rng(SEED ^ (i as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut s = [0u8; 32];
    for chunk in s.chunks_exact_mut(8) {
        chunk.copy_from_slice(&rng.next().to_le_bytes());
    }
    s
}

pub(crate) fn keypair(i: usize) -> identity::Keypair {
    identity::Keypair::ed25519_from_bytes(secret(i)).expect("ed25519 secret")
}

/// Every node's envelope signing key.
pub(crate) fn signing_keys(n: usize) -> Vec<SigningKey> {
    (0..n).map(|i| SigningKey::from_bytes(&secret(i))).collect()
}

/// For each node, the earlier nodes it bootstraps to.
pub(crate) fn topology(n: usize) -> Vec<Vec<usize>> {
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

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A v2 envelope for `topic` signed by `key`, whose `d` (≈ 1 KB) carries `seq`.
pub(crate) fn envelope(key: &SigningKey, topic: &str, seq: u64, rng: &mut Rng) -> Vec<u8> {
    let head = format!("{{\"seq\":{seq},\"kind\":\"bench\",\"pad\":\"");
    let pad = D_SIZE.saturating_sub(head.len() + 2);
    let d = format!("{head}{}\"}}", "x".repeat(pad));
    agora_hyperspace::sign(key, topic, now_ms(), &rng.nonce(), &d)
        .expect("sign")
        .into_bytes()
}

/// The sequence number in an envelope (`"seq":N`, the first field of `d`).
pub(crate) fn seq_of(data: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"seq\":";
    let at = data.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let digits = data[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&data[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

pub(crate) fn listen_addr() -> Multiaddr {
    "/ip4/127.0.0.1/tcp/0".parse().expect("multiaddr")
}

// ---------------------------------------------------------------------------------------------
// Recording deliveries

/// One delivery: (sequence number, receiving node, when).
pub(crate) type Delivery = (u64, usize, Instant);

/// Where receivers record deliveries. Never blocks a receiver: the harness drains the queue
/// while it publishes, and a delivery that finds it full is counted in `overflow` (and missing).
#[derive(Clone, Debug)]
pub(crate) struct Recorder {
    tx: mpsc::Sender<Delivery>,
    overflow: Arc<AtomicUsize>,
}

impl Recorder {
    pub(crate) fn record(&self, seq: u64, node: usize) {
        if self.tx.try_send((seq, node, Instant::now())).is_err() {
            self.overflow.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A recorder and the queue it feeds.
pub(crate) fn recorder() -> (Recorder, mpsc::Receiver<Delivery>, Arc<AtomicUsize>) {
    let (tx, rx) = mpsc::channel::<Delivery>(DELIVERY_QUEUE);
    let overflow = Arc::new(AtomicUsize::new(0));
    let rec = Recorder {
        tx,
        overflow: Arc::clone(&overflow),
    };
    (rec, rx, overflow)
}

/// The node's `GossipGate`, recording every message it lets through. On `hyperspace/tasks/…`
/// that is where the node's handling ends: it relays the message and queues no copy for any
/// service (`Verdict::Relay`), as bare gossipsub's ends at `gossipsub::Event::Message`.
#[derive(Debug)]
pub(crate) struct Recording {
    pub(crate) gate: agora_node::hyperspace::GossipGate,
    pub(crate) node: usize,
    pub(crate) deliveries: Recorder,
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

/// Keeps the first delivery of measured message `seq` at `node`; `true` if it is new.
pub(crate) fn record(got: &mut [Vec<Option<Instant>>], (seq, node, at): Delivery) -> bool {
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
/// `from[k]` published message k (its own copy is not a delivery).
pub(crate) fn latencies(
    got: &[Vec<Option<Instant>>],
    published: &[Instant],
    from: &[usize],
    n: usize,
) -> (Vec<Duration>, Vec<Duration>) {
    let mut lat_all = Vec::new();
    let mut to_all = Vec::new();
    for (k, (row, &at0)) in got.iter().zip(published).enumerate() {
        let lat: Vec<Duration> = row
            .iter()
            .enumerate()
            .filter(|&(node, _)| node != from[k])
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

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

// ---------------------------------------------------------------------------------------------
// The process

/// Process CPU time (user + system) from `/proc/self/stat`, in clock ticks of 10 ms.
pub(crate) fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// A field of `/proc/self/status` given in kB (`VmRSS`, `VmHWM`), in bytes.
pub(crate) fn proc_status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status
        .lines()
        .find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Open file descriptors of this process.
pub(crate) fn open_fds() -> Option<usize> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count())
}

// ---------------------------------------------------------------------------------------------
// A network of one variant

/// A running network of one variant.
pub(crate) trait Net {
    /// Publishes `data` on `topic` from node `from`.
    async fn publish(&self, from: usize, topic: &str, data: Vec<u8>);
    /// Connected peers of every node.
    async fn connections(&self) -> Vec<usize>;
    /// Shuts every node down and waits until they are gone.
    async fn shutdown(self);
    /// How long start-up connections nobody needs may stay open (zero: none are opened).
    fn transient_idle(&self) -> Duration;
}

/// Connections per node: (min, average, max).
pub(crate) async fn connection_counts(net: &impl Net) -> (usize, f64, usize) {
    spread(&net.connections().await)
}

/// (min, average, max) of per-node counts.
pub(crate) fn spread(counts: &[usize]) -> (usize, f64, usize) {
    (
        counts.iter().copied().min().unwrap_or(0),
        counts.iter().sum::<usize>() as f64 / counts.len().max(1) as f64,
        counts.iter().copied().max().unwrap_or(0),
    )
}

/// How warm-up went: whether `READY_STREAK` rounds in a row reached every other node, how many
/// messages were sent, and when the last delivery of the first complete round arrived.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Warmup {
    pub(crate) ready: bool,
    pub(crate) sent: usize,
    pub(crate) first_complete: Option<Instant>,
}

/// Publishes warm-up rounds, one message on each of `topics` from a random node, until
/// `READY_STREAK` consecutive rounds reach all N − 1 other nodes within `wait`, or `deadline`
/// passes. Every node must be subscribed to every topic.
pub(crate) async fn wait_ready(
    net: &impl Net,
    n: usize,
    keys: &[SigningKey],
    topics: &[&str],
    wait: Duration,
    deliveries: &mut mpsc::Receiver<Delivery>,
    deadline: tokio::time::Instant,
) -> Warmup {
    let mut rng = Rng(SEED ^ 0x5eed);
    let mut streak = 0;
    let mut sent = 0;
    let mut first_complete = None;
    while streak < READY_STREAK {
        if tokio::time::Instant::now() >= deadline {
            return Warmup {
                ready: false,
                sent,
                first_complete,
            };
        }
        let base = WARMUP_BASE + sent as u64;
        for (t, topic) in topics.iter().enumerate() {
            let from = rng.below(n);
            let data = envelope(&keys[from], topic, base + t as u64, &mut rng);
            // A node too busy to take a command holds this up no longer than the deadline.
            if tokio::time::timeout_at(deadline, net.publish(from, topic, data))
                .await
                .is_err()
            {
                return Warmup {
                    ready: false,
                    sent,
                    first_complete,
                };
            }
        }
        sent += topics.len();
        let until = (tokio::time::Instant::now() + wait).min(deadline);
        let mut seen = vec![vec![false; n]; topics.len()];
        let want = topics.len() * (n - 1);
        let mut count = 0;
        let mut last = None;
        while count < want {
            match tokio::time::timeout_at(until, deliveries.recv()).await {
                Ok(Some((s, node, at)))
                    if (base..base + topics.len() as u64).contains(&s)
                        && !seen[(s - base) as usize][node] =>
                {
                    seen[(s - base) as usize][node] = true;
                    count += 1;
                    last = Some(at);
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        if count == want {
            streak += 1;
            first_complete = first_complete.or(last);
        } else {
            streak = 0;
        }
    }
    Warmup {
        ready: true,
        sent,
        first_complete,
    }
}

/// Polls the process CPU time until the last second used less than `pct` % of one core, or
/// `deadline` passes (then `false`). `pct` ≤ 0 turns the check off.
pub(crate) async fn wait_quiet(pct: f64, deadline: tokio::time::Instant) -> bool {
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
pub(crate) async fn wait_settled(
    net: &impl Net,
    idle: Duration,
    deadline: tokio::time::Instant,
) -> bool {
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

/// What a measured phase gathered.
#[derive(Debug)]
pub(crate) struct Phase {
    /// `got[k][node]`: when measured message k reached `node` first.
    pub(crate) got: Vec<Vec<Option<Instant>>>,
    /// When each message was published.
    pub(crate) published: Vec<Instant>,
    /// Deliveries recorded (first copies only).
    pub(crate) count: usize,
    /// When publishing began.
    pub(crate) begin: Instant,
    /// From then until the collection ended.
    pub(crate) wall: Duration,
    /// Process CPU time over `wall`.
    pub(crate) cpu: Option<Duration>,
    /// Process CPU time at the start and at each whole second of publishing (for a timeline).
    pub(crate) marks: Vec<Option<Duration>>,
}

/// Publishes `messages` measured messages at `rate`/s, message k being `message(k)` = (from,
/// topic, envelope), recording deliveries while it does; then collects until all N − 1 copies
/// of every message arrived or nothing more can be expected (10 s after the last publication;
/// receive times were taken by the receivers, so waiting here costs nothing).
pub(crate) async fn publish_and_collect(
    net: &impl Net,
    n: usize,
    messages: usize,
    rate: f64,
    message: impl Fn(usize) -> (usize, &'static str, Vec<u8>),
    deliveries: &mut mpsc::Receiver<Delivery>,
) -> Phase {
    let expected = messages * (n - 1);
    let mut got: Vec<Vec<Option<Instant>>> = vec![vec![None; n]; messages];
    let mut count = 0;
    let mut published: Vec<Instant> = Vec::with_capacity(messages);
    let cpu0 = cpu_time();
    let begin = Instant::now();
    let mut marks: Vec<Option<Duration>> = vec![cpu0];
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while published.len() < messages {
        tokio::select! {
            _ = tick.tick() => {
                if begin.elapsed().as_secs() as usize >= marks.len() {
                    marks.push(cpu_time());
                }
                let (from, topic, data) = message(published.len());
                published.push(Instant::now());
                net.publish(from, topic, data).await;
            }
            Some(d) = deliveries.recv() => count += usize::from(record(&mut got, d)),
        }
    }
    let last = tokio::time::Instant::now() + Duration::from_secs(10);
    while count < expected {
        match tokio::time::timeout_at(last, deliveries.recv()).await {
            Ok(Some(d)) => count += usize::from(record(&mut got, d)),
            Ok(None) | Err(_) => break,
        }
    }
    let wall = begin.elapsed();
    let cpu = cpu0.zip(cpu_time()).map(|(a, b)| b.saturating_sub(a));
    Phase {
        got,
        published,
        count,
        begin,
        wall,
        cpu,
        marks,
    }
}

// ---------------------------------------------------------------------------------------------
// Agora meshes

/// How long an Agora node keeps the connections its Kademlia bootstrap opened before trimming
/// them (the default connection manager's grace period).
pub(crate) fn agora_transient_idle() -> Duration {
    agora_node::config::PeerLimits::default().grace
}

/// Node `i`'s mesh settings as the node sets them (heartbeat 500 ms, `limits`, the node's
/// `GossipGate` inline on `hyperspace/…`), listening on 127.0.0.1:0, joining `bootstrap`, the
/// gate wrapped to record what it lets through.
pub(crate) fn agora_mesh_config(
    i: usize,
    bootstrap: Vec<Multiaddr>,
    limits: agora_node::config::PeerLimits,
    deliveries: &Recorder,
) -> mesh::MeshConfig {
    mesh::MeshConfig {
        listen: vec![listen_addr()],
        bootstrap,
        heartbeat: Duration::from_millis(500),
        limits,
        validators: vec![(
            agora_node::hyperspace::TOPIC_PREFIX.to_owned(),
            Arc::new(Recording {
                gate: agora_node::hyperspace::GossipGate::new(Arc::default(), None),
                node: i,
                deliveries: deliveries.clone(),
            }),
        )],
        budget: mesh::topics::Budget::default(),
        telemetry: Arc::default(),
    }
}

/// One Agora node of a bench: its mesh's command channel and task, the tasks around it, and
/// whatever else it owns (`X`).
#[derive(Debug)]
pub(crate) struct AgoraNode<X> {
    pub(crate) mesh: mpsc::Sender<mesh::Command>,
    pub(crate) swarm: JoinHandle<()>,
    /// Tasks that may hold a command sender of the mesh (stopped first at shutdown).
    pub(crate) helpers: Vec<JoinHandle<()>>,
    pub(crate) extra: X,
}

/// N Agora nodes.
#[derive(Debug)]
pub(crate) struct AgoraNet<X>(pub(crate) Vec<AgoraNode<X>>);

impl<X> AgoraNet<X> {
    /// The `Status` of every node's mesh, in order (a default one for a mesh that is gone).
    pub(crate) async fn status(&self) -> Vec<mesh::Status> {
        futures::future::join_all(self.0.iter().map(|node| async {
            let (tx, rx) = oneshot::channel();
            let _ = node.mesh.send(mesh::Command::Status(tx)).await;
            rx.await.unwrap_or_default()
        }))
        .await
    }
}

impl<X> Net for AgoraNet<X> {
    fn transient_idle(&self) -> Duration {
        agora_node::config::PeerLimits::default().grace
    }

    async fn publish(&self, from: usize, topic: &str, data: Vec<u8>) {
        let _ = self.0[from]
            .mesh
            .send(mesh::Command::Publish {
                topic: topic.to_owned(),
                data,
            })
            .await;
    }

    async fn connections(&self) -> Vec<usize> {
        self.status()
            .await
            .iter()
            .map(|s| s.connected.len())
            .collect()
    }

    async fn shutdown(self) {
        let mut meshes = Vec::new();
        for node in self.0 {
            // The helpers may hold command senders: stop them, then close ours, and the mesh
            // task ends (dropping the swarm and its connections).
            for task in &node.helpers {
                task.abort();
            }
            for task in node.helpers {
                let _ = task.await;
            }
            drop(node.mesh);
            meshes.push((node.swarm, node.extra));
        }
        // A mesh whose sender is still held (by a query task of the node's services) ends
        // within 10 s at the latest; all are awaited together.
        let ends = futures::future::join_all(meshes.into_iter().map(|(m, _extra)| m));
        let _ = tokio::time::timeout(Duration::from_secs(10), ends).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Bare rust-libp2p gossipsub

enum BareCommand {
    Publish(String, Vec<u8>),
    /// (connected peers, subscribed topics).
    Status(oneshot::Sender<(usize, usize)>),
}

struct BareNode {
    commands: mpsc::Sender<BareCommand>,
    task: JoinHandle<()>,
}

/// N plain gossipsub swarms, one task each.
pub(crate) struct BareNet(Vec<BareNode>);

/// A bare gossipsub swarm with the gossipsub parameters of Agora's `build_swarm`; with `hold`,
/// gossipsub holds every message for the application's verdict and identifies messages by a
/// hash of their content (as Agora's mesh does).
pub(crate) fn bare_swarm(keypair: identity::Keypair, hold: bool) -> Swarm<gossipsub::Behaviour> {
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
                .mesh_n_low(3)
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
    let local = *swarm.local_peer_id();
    let mut listening = Some(listening);
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                None => break,
                Some(BareCommand::Publish(topic, data)) => {
                    let _ = swarm.behaviour_mut().publish(IdentTopic::new(topic), data);
                }
                Some(BareCommand::Status(reply)) => {
                    let _ = reply.send((
                        swarm.connected_peers().count(),
                        swarm.behaviour().topics().count(),
                    ));
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

/// Starts N bare swarms subscribed to `topics`, node i dialling `topo[i]`; with `gate`, each
/// runs the node's `GossipGate` on every message before gossipsub forwards it (the floor).
pub(crate) async fn start_bare(
    n: usize,
    topo: &[Vec<usize>],
    deliveries: &Recorder,
    gate: bool,
    topics: &[&str],
) -> BareNet {
    let mut nodes = Vec::with_capacity(n);
    let mut addrs: Vec<Multiaddr> = Vec::with_capacity(n);
    for (i, boot) in topo.iter().enumerate().take(n) {
        let mut swarm = bare_swarm(keypair(i), gate);
        swarm.listen_on(listen_addr()).expect("listen");
        for topic in topics {
            swarm
                .behaviour_mut()
                .subscribe(&IdentTopic::new(*topic))
                .expect("subscribe");
        }
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
            gate.then(|| agora_node::hyperspace::GossipGate::new(Arc::default(), None)),
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

impl BareNet {
    /// (connected peers, subscribed topics) of every node.
    pub(crate) async fn status(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for node in &self.0 {
            let (tx, rx) = oneshot::channel();
            let _ = node.commands.send(BareCommand::Status(tx)).await;
            out.push(rx.await.unwrap_or((0, 0)));
        }
        out
    }
}

impl Net for BareNet {
    /// Bare nodes only hold the connections the harness dialled.
    fn transient_idle(&self) -> Duration {
        Duration::ZERO
    }

    async fn publish(&self, from: usize, topic: &str, data: Vec<u8>) {
        let _ = self.0[from]
            .commands
            .send(BareCommand::Publish(topic.to_owned(), data))
            .await;
    }

    async fn connections(&self) -> Vec<usize> {
        self.status().await.into_iter().map(|(c, _)| c).collect()
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
