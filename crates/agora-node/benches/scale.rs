//! Gossip at scale: N in-process Agora nodes with capability cards and three task topics,
//! against a bare rust-libp2p gossipsub mesh of the same size, topology, topics and publish
//! schedule, in one run.
//!
//! - **agora**: each node is the node's own pieces wired as `agora_node::run_until` wires them:
//!   a redb store in its own temporary directory, `mesh::start` + `mesh::run` (heartbeat 500 ms,
//!   the default connection manager limits) with the node's `GossipGate` inline on `hyperspace/…`,
//!   the Hyperspace service `hyperspace::run`, and the mesh-event router (`routes::EventRouter`) between them (what it hands
//!   the AGH service is drained; the first listen address is taken from there, as the node
//!   does). Every node registers one tool (`tool.register` through the service's input, the call
//!   the JSON-RPC face makes; capability = one of the task types, in turn), so it announces a
//!   non-trivial capability card on `hyperspace/capabilities/{peerId}` and as a DHT record, and
//!   provides the tag in the DHT. Every node then declares its own interest in the three task
//!   topics with `mesh::Command::Subscribe`. A delivery is recorded where the node's handling of
//!   a task message ends: the gate's `Relay` verdict (a wrapper around the gate, as in the gossip
//!   bench).
//! - **bare**: N `libp2p::Swarm`s with only gossipsub, with the gossipsub parameters of Agora's
//!   `build_swarm` (heartbeat 500 ms, mesh_n_low 3, mesh_n 4, mesh_n_high 8, mesh_outbound_min 1,
//!   max_transmit_size 1 MiB + 4 KiB, `Signed`, `Strict`), subscribed to the same three topics; no
//!   cards, no application validation. A delivery is recorded at `gossipsub::Event::Message`.
//!
//! Each variant runs in a child process of its own (the same executable, one after the other,
//! never at the same time), so that its memory and CPU figures are its own; the parent prints
//! the children's output and the comparison. Both use the same topology: node i listens on
//! 127.0.0.1:0 and dials up to 4 distinct random earlier nodes (fixed seed); nodes start one
//! after the other.
//!
//! After the last node started, convergence is awaited (polled, never slept for) under one
//! deadline (`--ready-timeout`):
//! - **(a) task gossip**: rounds of three probe messages, one on each task topic from a random
//!   node, until one round reaches all N − 1 other nodes on every topic within 5 s; its time is
//!   the last delivery of that round. Probing goes on until 5 rounds in a row do ("ready").
//! - **(b) cards** (Agora only): each node's `GET /hyperspace/cards` report
//!   (`hyperspace::Input::Cards`, the same call the HTTP face makes; every N / 100 seconds, at
//!   least every second, so the polling does not load the mesh it measures) is compared with its
//!   lasting neighbours (`mesh::Status::neighbours`: peers connected for 15 s or kept as mesh or
//!   bootstrap peers; the short connections of DHT queries are not neighbours): converged when
//!   every node holds a live card of every lasting neighbour. This is what any design must give
//!   (a node knows the offers of its neighbours); other cards are found in the DHT.
//!
//! Then, for Agora, until the connection manager has trimmed the connections Kademlia's bootstrap
//! opened (connection count unchanged for the manager's grace period + 1 s), and with `--quiet
//! PCT` until the process used less than PCT % of one core over a second (default off: at this
//! scale the cards' heartbeats alone keep Agora above any fixed threshold). Then the network's
//! background CPU is measured over 5 s with nothing published, and M messages (v2 envelopes,
//! `d` ≈ 1 KB of JSON carrying a sequence number, signed just before) are published at R/s,
//! each from a random node on a random task topic; the same publishers, topics and payloads in
//! both variants. Deliveries are collected until all arrived or 10 s after the last
//! publication.
//!
//! Reported per variant: delivery (deliveries / expected, in total and per task type; expected
//! is N − 1 per message), latency p50 / p99 / max (receive `Instant` − publish `Instant`, one
//! in-process clock), time-to-all p50 / p99 / max (slowest receiver of messages that reached
//! all), time to converge (a) and (b) from the moment the last node started, gossip topics per
//! node (Agora: `Status.topics`; bare: `gossipsub.topics()`), connections per node, cards known
//! per node (Agora), memory per node (process `VmRSS` from `/proc/self/status` when converged and
//! after measuring, and the peak `VmHWM`, each minus the `VmRSS` before the first node started,
//! divided by N), open file descriptors, and CPU (process user + system time from
//! `/proc/self/stat`) as a share of the tokio workers, idle and while publishing, and per
//! delivery.
//!
//! The default rate keeps the offered load near 1,000 deliveries per second, R = 1000 / N
//! rounded (20/s at N = 50, 5/s at 200, 2/s at 500), with M = 60 s worth of messages: on this
//! project's 2-core machine bare gossipsub spends ≈ 0.25 ms and Agora ≈ 0.4 ms of CPU per
//! delivery (the gossip bench), so the messages themselves take ≈ 15–20 % of the two cores and
//! what else the network does is visible beside them (the idle figure).
//!
//! Run: `cargo bench -p agora-node --bench scale -- --nodes 200`. Options (after `--`, or as
//! environment variables): `--nodes N` (`SCALE_BENCH_NODES`, default 200), `--messages M`
//! (`SCALE_BENCH_MESSAGES`), `--rate R` (`SCALE_BENCH_RATE`), `--workers W`
//! (`SCALE_BENCH_WORKERS`, default 2), `--ready-timeout SECS` (`SCALE_BENCH_READY_TIMEOUT`,
//! default 300, per network, from the last node's start), `--quiet PCT` (`SCALE_BENCH_QUIET`,
//! default 0 = off), `--only agora|bare` (`SCALE_BENCH_ONLY`, a comma-separated list) and
//! `--watch SECS` (`SCALE_BENCH_WATCH`: after measuring, leave the Agora network alone that long
//! and print its CPU in 10 s windows, with the largest window against the median: the DHT's
//! periodic chores show there) and
//! `--short` (`SCALE_BENCH_SHORT=1`: by default 50 nodes, 15 s of publishing and a 90 s ready
//! timeout; about 3 minutes once built, ending with the `agora/bare:` ratio line, for checking a
//! change quickly; the figures to report come from the full run). The
//! soft limit of open files is raised to the hard limit. Keep M / R under 5 minutes: Agora
//! ignores envelopes older than that.
//!
//! This is a measurement harness, not a test: it asserts nothing about the numbers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agora_node::config::PeerLimits;
use agora_node::faces::rpc;
use agora_node::hyperspace::{self, Input};
use agora_node::mesh::{self, Command};
use agora_node::routes;
use agora_node::store;
use common::{
    Args, Net, Rng, RunOpts, SEED, cpu_time, envelope, keypair, latencies, ms, open_fds,
    percentile, proc_status_kb, publish_and_collect, recorder, signing_keys, spread, start_bare,
    topology, wait_quiet, wait_ready, wait_settled,
};
use libp2p::Multiaddr;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

/// The task topics every node declares interest in.
const TASKS: [&str; 3] = [
    "hyperspace/tasks/summarize",
    "hyperspace/tasks/translate",
    "hyperspace/tasks/classify",
];
/// How long one probe round may take to reach every node.
const PROBE_WAIT: Duration = Duration::from_secs(5);
/// How often the cards are compared with the connections while converging, per 100 nodes (at
/// least once a second): each poll has every node render its whole card report, and polling
/// 500 nodes every second took about an eighth of the process's CPU while the mesh converged.
const CARD_POLL_PER_100: Duration = Duration::from_secs(1);
/// How long one look at every node's connections, topics or cards outside the convergence
/// deadline may take (not answered by then: reported as zeros).
const AFTER_POLL: Duration = Duration::from_secs(60);
/// Start-up progress is told every this many nodes.
const PROGRESS: usize = 50;
/// Background CPU is measured over this window before publishing.
const IDLE_WINDOW: Duration = Duration::from_secs(5);
/// The default rate aims at this many deliveries per second.
const DELIVERIES_PER_SECOND: f64 = 1000.0;
/// The default number of messages is this much publishing at the rate.
const MEASURE_SECONDS: f64 = 60.0;
/// `--short`: the default number of nodes, seconds of publishing and ready timeout, for a
/// check of a change in a few minutes (both variants) rather than a measurement to report.
const SHORT_NODES: usize = 50;
const SHORT_MEASURE_SECONDS: f64 = 15.0;
const SHORT_READY_TIMEOUT: u64 = 90;
/// The variants, in running order.
const VARIANTS: [&str; 2] = ["agora", "bare"];
/// Set in a child process: the variant it runs.
const CHILD_ENV: &str = "SCALE_BENCH_VARIANT";
/// A child's last line: this prefix and its report as JSON.
const REPORT_PREFIX: &str = "scale-report ";

fn opts() -> RunOpts {
    let args = Args::read("SCALE_BENCH", &RunOpts::NAMES, &["short"]);
    let short = args.flag("short");
    let (nodes, seconds, ready) = if short {
        (SHORT_NODES, SHORT_MEASURE_SECONDS, SHORT_READY_TIMEOUT)
    } else {
        (200, MEASURE_SECONDS, 300)
    };
    RunOpts::read(
        &args,
        nodes,
        |nodes| (DELIVERIES_PER_SECOND / nodes as f64).round().max(1.0),
        |rate| (rate * seconds).round() as usize,
        ready,
        0.0,
    )
}

// ---------------------------------------------------------------------------------------------
// Agora nodes

/// What a scale bench's Agora node owns beside its mesh: the Hyperspace service's input and the
/// directory of its store.
#[derive(Debug)]
struct Extra {
    hs: mpsc::Sender<Input>,
    _dir: tempfile::TempDir,
}

type AgoraNet = common::AgoraNet<Extra>;

/// One `tool.register` call into the Hyperspace service, as the JSON-RPC face makes it for a
/// loopback client on connection 1.
async fn register_tool(hs: &mpsc::Sender<Input>, node: usize, task: &str) {
    let kind = task.rsplit('/').next().unwrap_or(task);
    let (reply, answer) = oneshot::channel();
    let call = rpc::Call {
        principal: rpc::Principal::Local,
        conn: 1,
        request: agora_hyperspace::jsonrpc::Request {
            id: Some(1u64.into()),
            method: "tool.register".to_owned(),
            params: Some(json!({
                "name": format!("bench-{kind}-{node}"),
                "description": format!("Benchmark tool of node {node} for {kind} tasks"),
                "schema": {"input": {"type": "object"}, "output": {"type": "object"}},
                "capabilities": [kind],
            })),
        },
        reply,
    };
    hs.send(Input::Call(call)).await.expect("service alive");
    answer
        .await
        .expect("service answers")
        .expect("tool.register succeeds");
}

/// Starts the nodes one after the other (each needs the addresses of the earlier ones it
/// joins), telling progress every `PROGRESS` nodes. A node that cannot start (no file
/// descriptor left, say) ends the start: the nodes up so far come back with the reason.
async fn start_agora(
    n: usize,
    topo: &[Vec<usize>],
    deliveries: &common::Recorder,
) -> (AgoraNet, Option<String>) {
    let mut nodes = Vec::with_capacity(n);
    let mut addrs: Vec<Multiaddr> = Vec::with_capacity(n);
    let t0 = Instant::now();
    for (i, boot) in topo.iter().enumerate().take(n) {
        if i > 0 && i % PROGRESS == 0 {
            println!(
                "  agora: {i}/{n} nodes up after {:.1} s, {} open fds, RSS {:.0} MiB",
                t0.elapsed().as_secs_f64(),
                open_fds().unwrap_or(0),
                mib(rss() as f64)
            );
        }
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            // Counting needs a descriptor too: none left reads as "none left".
            let fds = open_fds().map_or_else(
                || "no file descriptor left to count them".to_owned(),
                |n| format!("{n} open fds"),
            );
            Some(format!("node {i} could not start ({what}: {e}; {fds})"))
        };
        let dir = match tempfile::Builder::new().prefix("agora-scale-").tempdir() {
            Ok(dir) => dir,
            Err(e) => return (common::AgoraNet(nodes), failed("temporary directory", &e)),
        };
        let path = dir.path().to_owned();
        let store = match tokio::task::spawn_blocking(move || store::Store::open(&path))
            .await
            .expect("store task")
        {
            Ok(store) => store,
            Err(e) => return (common::AgoraNet(nodes), failed("store", &e)),
        };
        let keys = keypair(i);
        let bootstrap = boot.iter().map(|&j| addrs[j].clone()).collect();
        let cfg = common::agora_mesh_config(i, bootstrap, PeerLimits::default(), deliveries);
        let m = match mesh::start(&keys, &cfg) {
            Ok(m) => m,
            Err(e) => return (common::AgoraNet(nodes), failed("mesh", &e)),
        };
        let peer_id = m.peer_id().to_string();
        let (mesh_tx, mesh_rx) = mpsc::channel(common::CHANNEL);
        let (events_tx, events_rx) = mpsc::channel(common::CHANNEL);
        let (agh_tx, mut agh_rx) = mpsc::channel(common::CHANNEL);
        let (hs_tx, hs_rx) = mpsc::channel(common::CHANNEL);
        let service = tokio::spawn(hyperspace::run(
            store,
            Arc::new(Mutex::new(HashMap::new())),
            hyperspace::Restored::default(),
            hyperspace::Parts {
                peer_id,
                key: agora_node::keys::signing_key(&keys).expect("ed25519 key"),
                links: rpc::Links::default(),
                mesh: mesh_tx.clone(),
                inputs_tx: hs_tx.clone(),
                inputs: hs_rx,
                long_calls: hyperspace::LongCallSettings::default(),
                // no payments service: the bench registers no priced tool
                payments: mpsc::channel(1).0,
                bridges: agora_node::bridge::Bridges::default(),
                wallet_address: None,
            },
        ));
        let router = tokio::spawn(
            routes::EventRouter::new(
                hyperspace::event_routes(&hs_tx),
                routes::Sink::new(agh_tx, routes::Delivery::Wait, Some),
            )
            .run(events_rx),
        );
        // What the router hands the AGH service: only the first listen address is wanted.
        let (listening_tx, listening) = oneshot::channel();
        let agh = tokio::spawn(async move {
            let mut listening_tx = Some(listening_tx);
            while let Some(event) = agh_rx.recv().await {
                if let mesh::Event::Listening(addr) = event
                    && let Some(tx) = listening_tx.take()
                {
                    let _ = tx.send(addr);
                }
            }
        });
        let swarm = tokio::spawn(mesh::run(m, mesh_rx, events_tx));
        let addr = tokio::time::timeout(Duration::from_secs(10), listening)
            .await
            .expect("listening within 10 s")
            .expect("router alive");
        addrs.push(addr);
        register_tool(&hs_tx, i, TASKS[i % TASKS.len()]).await;
        for topic in TASKS {
            mesh_tx
                .send(Command::Subscribe(topic.to_owned()))
                .await
                .expect("subscribe");
        }
        nodes.push(common::AgoraNode {
            mesh: mesh_tx,
            swarm,
            helpers: vec![service, router, agh],
            extra: Extra {
                hs: hs_tx,
                _dir: dir,
            },
        });
    }
    (common::AgoraNet(nodes), None)
}

/// The Hyperspace side of the nodes.
trait Cards {
    async fn cards(&self) -> Vec<HashSet<String>>;
    async fn card_view(&self) -> Vec<(usize, usize, usize)>;
}

impl Cards for AgoraNet {
    /// The peers whose live card each node holds (its `GET /hyperspace/cards`).
    async fn cards(&self) -> Vec<HashSet<String>> {
        // All at once: a busy service answers late, and the others need not wait for it.
        futures::future::join_all(self.0.iter().map(|node| async {
            let (tx, rx) = oneshot::channel();
            let _ = node.extra.hs.send(Input::Cards(tx)).await;
            let report = rx.await.unwrap_or_default();
            report["cards"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c["live"].as_bool() == Some(true))
                .filter_map(|c| c["peerId"].as_str().map(str::to_owned))
                .collect()
        }))
        .await
    }

    /// Per node: (cards known, lasting neighbours, neighbours whose card it holds).
    async fn card_view(&self) -> Vec<(usize, usize, usize)> {
        let status = self.status().await;
        let cards = self.cards().await;
        status
            .iter()
            .zip(&cards)
            .map(|(s, known)| {
                let covered = s.neighbours.iter().filter(|p| known.contains(*p)).count();
                (known.len(), s.neighbours.len(), covered)
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Measurement

/// What one variant measured (a child prints it as JSON for the parent).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Report {
    variant: String,
    nodes: usize,
    messages: usize,
    rate: f64,
    workers: usize,
    envelope_bytes: usize,
    /// Soft limit of open files after raising it.
    fd_limit: u64,
    /// Seconds to start all nodes (or until one could not start).
    start_s: f64,
    /// Nodes that started.
    started: usize,
    /// Why the network did not start in full (nothing was measured then).
    failed: Option<String>,
    /// (a): seconds from the last node's start until a probe round reached everyone.
    probes_s: Option<f64>,
    /// Seconds until 5 probe rounds in a row did.
    ready_s: Option<f64>,
    probe_messages: usize,
    /// (b): seconds until every node held the cards of all its lasting neighbours (Agora).
    cards_s: Option<f64>,
    /// When (b) was decided (converged or at the deadline): nodes holding every neighbour's
    /// card, and cards known per node (min, mean, max).
    cards_nodes_ok: usize,
    cards_known: (usize, f64, usize),
    /// The longest time one poll of every node's cards took while converging (seconds).
    cards_poll_max_s: f64,
    /// The same after measuring.
    cards_nodes_ok_end: usize,
    cards_known_end: (usize, f64, usize),
    /// Connections settled (and CPU quiet, with `--quiet`) before the deadline.
    settled: bool,
    /// CPU share of the workers in each 5 s from the last node's start until settled.
    cpu_converge: Vec<f64>,
    /// CPU share of the workers in each 5 s of publishing.
    cpu_publishing: Vec<f64>,
    /// Per node (min, mean, max), before and after measuring.
    connections: (usize, f64, usize),
    connections_end: (usize, f64, usize),
    topics: (usize, f64, usize),
    topics_end: (usize, f64, usize),
    /// Bytes: `VmRSS` before the first node, when converged, after measuring; `VmHWM` at the end.
    rss_base: u64,
    rss_ready: u64,
    rss_end: u64,
    rss_peak: u64,
    fds_ready: usize,
    /// CPU share of the workers with nothing published, and while publishing.
    cpu_idle: Option<f64>,
    cpu_measured: Option<f64>,
    /// CPU milliseconds per delivery over the measured phase.
    cpu_per_delivery_ms: Option<f64>,
    wall_s: f64,
    /// From the first publication to the last (M / R if the nodes took every message in time).
    publish_s: f64,
    expected: usize,
    delivered: usize,
    /// Per task type: (expected, delivered).
    per_task: Vec<(usize, usize)>,
    overflow: usize,
    /// Milliseconds: p50, p90, p99, max.
    latency_ms: [f64; 4],
    /// Milliseconds: p50, p99, max; and how many messages reached all.
    to_all_ms: [f64; 3],
    complete: usize,
}

impl Report {
    /// MiB per node of a process memory figure, above the process before the nodes.
    fn per_node(&self, bytes: u64) -> f64 {
        mib(bytes.saturating_sub(self.rss_base) as f64) / self.nodes as f64
    }
}

fn percent(share: Option<f64>) -> String {
    share.map_or_else(|| "n/a".to_owned(), |v| format!("{:.0}%", 100.0 * v))
}

fn percents(shares: &[f64]) -> String {
    let all: Vec<String> = shares.iter().map(|c| format!("{:.0}", 100.0 * c)).collect();
    all.join(" ")
}

fn rss() -> u64 {
    proc_status_kb("VmRSS").unwrap_or(0)
}

/// Raises the soft limit of open files to the hard limit; returns the soft limit then.
fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 0;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// What polling the cards found.
#[derive(Debug, Default)]
struct CardWait {
    /// When every node held the card of every lasting neighbour, if that happened.
    converged: Option<Instant>,
    /// The last complete view (empty if no poll completed before the deadline).
    view: Vec<(usize, usize, usize)>,
    /// The longest time one poll of all nodes took.
    slowest_poll: Duration,
}

/// Polls every node's cards against its connections until each holds the card of every peer
/// is a lasting neighbour of, or `deadline` (which also cuts a poll short).
async fn wait_cards(net: &AgoraNet, deadline: tokio::time::Instant) -> CardWait {
    let mut out = CardWait::default();
    let every = CARD_POLL_PER_100
        .mul_f64((net.0.len() as f64 / 100.0).max(1.0))
        .max(CARD_POLL_PER_100);
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let asked = Instant::now();
        let Ok(view) = tokio::time::timeout_at(deadline, net.card_view()).await else {
            out.slowest_poll = out.slowest_poll.max(asked.elapsed());
            return out;
        };
        out.slowest_poll = out.slowest_poll.max(asked.elapsed());
        let done = view.iter().all(|&(_, conns, covered)| covered == conns);
        out.view = view;
        if done {
            out.converged = Some(Instant::now());
            return out;
        }
        if tokio::time::Instant::now() >= deadline {
            return out;
        }
    }
}

/// (nodes holding every neighbour's card, cards known per node (min, mean, max)).
fn card_figures(view: &[(usize, usize, usize)]) -> (usize, (usize, f64, usize)) {
    let ok = view.iter().filter(|v| v.1 == v.2).count();
    let known: Vec<usize> = view.iter().map(|v| v.0).collect();
    (ok, spread(&known))
}

/// The measured messages: (publishing node, task type, envelope bytes).
type Plan = Vec<(usize, usize, Vec<u8>)>;

/// Starts the variant's network, awaits convergence, measures, prints the report, shuts the
/// network down.
async fn run_variant(variant: &str, o: &RunOpts) {
    let n = o.nodes;
    let topo = topology(n);
    let keys = signing_keys(n);
    let mut r = Report {
        variant: variant.to_owned(),
        nodes: n,
        messages: o.messages,
        rate: o.rate,
        workers: o.workers,
        envelope_bytes: envelope(&keys[0], TASKS[0], o.messages as u64 / 2, &mut Rng(SEED)).len(),
        fd_limit: raise_fd_limit(),
        rss_base: rss(),
        ..Report::default()
    };
    let (rec, mut deliveries, overflow) = recorder();
    let t0 = Instant::now();
    // The report goes out before the network is shut down: the parent has it even if shutting
    // a saturated network down takes long.
    let emit = |mut r: Report| {
        r.overflow = overflow.load(Ordering::Relaxed);
        println!(
            "{REPORT_PREFIX}{}",
            serde_json::to_string(&r).expect("report as JSON")
        );
    };
    if variant == "agora" {
        let (net, failed) = start_agora(n, &topo, &rec).await;
        r.start_s = t0.elapsed().as_secs_f64();
        if let Some(why) = failed {
            // What the nodes that did start looked like when the next one could not.
            println!("  agora: {why} after {:.1} s", r.start_s);
            r.started = net.0.len();
            r.failed = Some(why);
            r.rss_ready = rss();
            r.fds_ready = open_fds().unwrap_or(0);
            if let Ok(shape) = tokio::time::timeout(AFTER_POLL, net.shape()).await {
                (r.connections, r.topics) = shape;
            }
        } else {
            r.started = n;
            measure(&net, Some(&net), o, &keys, &mut r, &mut deliveries).await;
        }
        emit(r);
        net.shutdown().await;
    } else {
        let net = start_bare(n, &topo, &rec, false, &TASKS).await;
        r.start_s = t0.elapsed().as_secs_f64();
        r.started = n;
        measure(&net, None, o, &keys, &mut r, &mut deliveries).await;
        emit(r);
        net.shutdown().await;
    }
}

/// From the moment the last node started: awaits convergence, measures the idle network, then
/// publishes the measured messages and collects their deliveries, into `r`. `cards` is the
/// same network when it has cards (Agora).
async fn measure<N: Shape>(
    net: &N,
    cards: Option<&AgoraNet>,
    o: &RunOpts,
    keys: &[ed25519_dalek::SigningKey],
    r: &mut Report,
    deliveries: &mut mpsc::Receiver<common::Delivery>,
) {
    let n = o.nodes;
    let variant = r.variant.clone();
    let started = Instant::now();
    println!(
        "  {variant}: {n} nodes started in {:.1} s; converging (deadline {} s)",
        r.start_s,
        o.ready_timeout.as_secs()
    );
    let deadline = tokio::time::Instant::from_std(started + o.ready_timeout);
    let since = |t: Instant| t.saturating_duration_since(started).as_secs_f64();

    // Convergence: task gossip (a) and cards (b) at the same time.
    let probes = async {
        let w = wait_ready(net, n, keys, &TASKS, PROBE_WAIT, deliveries, deadline).await;
        (w, Instant::now())
    };
    let card_wait = async {
        match cards {
            Some(a) => Some(wait_cards(a, deadline).await),
            None => None,
        }
    };
    let (((warmup, ready_at), card_outcome), cpu) =
        sampled(async { tokio::join!(probes, card_wait) }, o.workers).await;
    r.cpu_converge = cpu;
    r.probes_s = warmup.first_complete.map(since);
    r.ready_s = warmup.ready.then(|| since(ready_at));
    r.probe_messages = warmup.sent;
    if let Some(c) = &card_outcome {
        r.cards_s = c.converged.map(since);
        r.cards_poll_max_s = c.slowest_poll.as_secs_f64();
        (r.cards_nodes_ok, r.cards_known) = card_figures(&c.view);
    }
    println!(
        "  {variant}: probes reached everyone after {}, ready {}, cards {}",
        fmt_s(r.probes_s),
        fmt_s(r.ready_s),
        match &card_outcome {
            None => "n/a".to_owned(),
            Some(_) => format!(
                "{} ({}/{n} nodes hold every neighbour's card, {:.1} cards per node; slowest poll {:.1} s)",
                fmt_s(r.cards_s),
                r.cards_nodes_ok,
                r.cards_known.1,
                r.cards_poll_max_s,
            ),
        }
    );
    let (settled, cpu) = sampled(
        async {
            wait_settled(net, net.transient_idle(), deadline).await
                && wait_quiet(o.quiet, deadline).await
        },
        o.workers,
    )
    .await;
    r.settled = settled;
    r.cpu_converge.extend(cpu);
    r.rss_ready = rss();
    r.fds_ready = open_fds().unwrap_or(0);
    if let Ok(shape) = tokio::time::timeout(AFTER_POLL, net.shape()).await {
        (r.connections, r.topics) = shape;
    }
    println!(
        "  {variant}: {} after {:.1} s; {:.1} connections and {:.1} topics per node (max {}, {})",
        if r.settled {
            "settled"
        } else {
            "NOT settled or quiet (measuring anyway)"
        },
        since(Instant::now()),
        r.connections.1,
        r.topics.1,
        r.connections.2,
        r.topics.2
    );

    // Background CPU: the network with nothing published.
    let idle_end = tokio::time::Instant::now() + IDLE_WINDOW;
    let cpu0 = cpu_time();
    let idle0 = Instant::now();
    while let Ok(Some(_)) = tokio::time::timeout_at(idle_end, deliveries.recv()).await {}
    r.cpu_idle = cpu0
        .zip(cpu_time())
        .map(|(a, b)| share(b.saturating_sub(a), idle0.elapsed(), o.workers));

    // The measured messages, signed now.
    let plan: Plan = {
        let mut rng = Rng(SEED ^ 0x5ca1e);
        (0..o.messages)
            .map(|k| {
                let from = rng.below(n);
                let task = rng.below(TASKS.len());
                (
                    from,
                    task,
                    envelope(&keys[from], TASKS[task], k as u64, &mut rng),
                )
            })
            .collect()
    };
    while deliveries.try_recv().is_ok() {}
    let expected = plan.len() * (n - 1);
    let phase = publish_and_collect(
        net,
        n,
        plan.len(),
        o.rate,
        |k| (plan[k].0, TASKS[plan[k].1], plan[k].2.clone()),
        deliveries,
    )
    .await;
    r.wall_s = phase.wall.as_secs_f64();
    r.publish_s = phase
        .published
        .last()
        .map_or(0.0, |at| at.duration_since(phase.begin).as_secs_f64());
    r.cpu_measured = phase.cpu.map(|c| share(c, phase.wall, o.workers));
    r.cpu_per_delivery_ms = phase.cpu.map(|c| ms(c) / phase.count.max(1) as f64);
    r.cpu_publishing = phase
        .marks
        .iter()
        .step_by(5)
        .collect::<Vec<_>>()
        .windows(2)
        .filter_map(|w| w[0].zip(*w[1]))
        .map(|(a, b)| share(b.saturating_sub(a), Duration::from_secs(5), o.workers))
        .collect();
    r.expected = expected;
    r.delivered = phase.count;
    r.per_task = (0..TASKS.len())
        .map(|t| {
            let rows = plan
                .iter()
                .zip(&phase.got)
                .filter(|((_, task, _), _)| *task == t);
            rows.fold((0, 0), |(e, d), ((from, _, _), row)| {
                let arrived = row
                    .iter()
                    .enumerate()
                    .filter(|(node, at)| node != from && at.is_some())
                    .count();
                (e + n - 1, d + arrived)
            })
        })
        .collect();
    let from: Vec<usize> = plan.iter().map(|p| p.0).collect();
    let (mut lat, mut to_all) = latencies(&phase.got, &phase.published, &from, n);
    lat.sort();
    to_all.sort();
    r.latency_ms = [0.5, 0.9, 0.99, 1.0].map(|p| ms(percentile(&lat, p)));
    r.to_all_ms = [0.5, 0.99, 1.0].map(|p| ms(percentile(&to_all, p)));
    r.complete = to_all.len();
    // Where the losses are: per receiving node and per message.
    if r.delivered < r.expected {
        let mut node_share: Vec<(f64, usize)> = (0..n)
            .map(|node| {
                let (e, d) = phase
                    .got
                    .iter()
                    .zip(&from)
                    .filter(|(_, f)| **f != node)
                    .fold((0usize, 0usize), |(e, d), (row, _)| {
                        (e + 1, d + usize::from(row[node].is_some()))
                    });
                (d as f64 / e.max(1) as f64, node)
            })
            .collect();
        node_share.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut reach: Vec<usize> = phase
            .got
            .iter()
            .map(|row| row.iter().filter(|at| at.is_some()).count())
            .collect();
        reach.sort_unstable();
        let short = node_share.iter().filter(|(s, _)| *s < 1.0).count();
        println!(
            "  {variant}: losses: {short}/{n} nodes missed messages; worst nodes (share received, node): {:?}; reach per message min/p10/p50: {}/{}/{} of {}",
            node_share
                .iter()
                .take(5)
                .map(|(s, i)| (format!("{:.1}%", 100.0 * s), *i))
                .collect::<Vec<_>>(),
            reach.first().copied().unwrap_or(0),
            reach.get(reach.len() / 10).copied().unwrap_or(0),
            reach.get(reach.len() / 2).copied().unwrap_or(0),
            n - 1
        );
    }

    if let Ok(Some(health)) = tokio::time::timeout(AFTER_POLL, net.gossip_health()).await {
        println!("  {variant}: {health}");
    }

    // With `--watch`: the network left alone, its CPU in 10 s windows (Agora only: bare
    // gossipsub has no periodic chores to watch).
    let watch = Args::read("SCALE_BENCH", &["watch"], &[]).get("watch", 0u64);
    if watch > 0 && cards.is_some() {
        const WINDOW: Duration = Duration::from_secs(10);
        let mut shares = Vec::new();
        let end = tokio::time::Instant::now() + Duration::from_secs(watch);
        let mut mark = (Instant::now(), cpu_time());
        while tokio::time::Instant::now() < end {
            let window_end = tokio::time::Instant::now() + WINDOW;
            while let Ok(Some(_)) = tokio::time::timeout_at(window_end, deliveries.recv()).await {}
            let now = (Instant::now(), cpu_time());
            if let (Some(a), Some(b)) = (mark.1, now.1) {
                shares.push(share(b.saturating_sub(a), now.0 - mark.0, o.workers));
            }
            mark = now;
        }
        let mut sorted = shares.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
        let max = sorted.last().copied().unwrap_or(0.0);
        println!(
            "  {variant}: watched {watch} s with nothing published: CPU per 10 s median {:.1}%, max {:.1}% ({:.2}x the median); windows: {}",
            100.0 * median,
            100.0 * max,
            max / median.max(1e-9),
            percents(&shares)
        );
        if let Ok(Some(health)) = tokio::time::timeout(AFTER_POLL, net.gossip_health()).await {
            println!("  {variant}: after watching: {health}");
        }
    }

    r.rss_end = rss();
    r.rss_peak = proc_status_kb("VmHWM").unwrap_or(0);
    if let Ok(shape) = tokio::time::timeout(AFTER_POLL, net.shape()).await {
        (r.connections_end, r.topics_end) = shape;
    }
    if let Some(a) = cards
        && let Ok(view) = tokio::time::timeout(AFTER_POLL, a.card_view()).await
    {
        (r.cards_nodes_ok_end, r.cards_known_end) = card_figures(&view);
    }
}

/// Connections and topics per node, each (min, mean, max).
trait Shape: Net {
    async fn shape(&self) -> ((usize, f64, usize), (usize, f64, usize));

    /// Agora only: the task topics' mesh sizes per node, what gossipsub dropped for slow peers
    /// and the signatures checked and spared, summed over the nodes (`mesh::Status`), as one
    /// line.
    async fn gossip_health(&self) -> Option<String> {
        None
    }
}

impl Shape for AgoraNet {
    async fn shape(&self) -> ((usize, f64, usize), (usize, f64, usize)) {
        let status = self.status().await;
        let conns: Vec<usize> = status.iter().map(|s| s.connected.len()).collect();
        let topics: Vec<usize> = status.iter().map(|s| s.topics.len()).collect();
        (spread(&conns), spread(&topics))
    }

    async fn gossip_health(&self) -> Option<String> {
        let status = self.status().await;
        let sizes: Vec<usize> = status
            .iter()
            .flat_map(|s| TASKS.iter().map(|t| s.mesh.get(*t).copied().unwrap_or(0)))
            .collect();
        let empty = status
            .iter()
            .filter(|s| {
                TASKS
                    .iter()
                    .any(|t| s.mesh.get(*t).copied().unwrap_or(0) == 0)
            })
            .count();
        let (priority, non_priority) = status.iter().fold((0, 0), |(p, q), s| {
            (p + s.dropped.priority, q + s.dropped.non_priority)
        });
        let (opened, exhausted) = status.iter().fold((0, 0), |(o, x), s| {
            (
                o + s.outbound_streams.opened,
                x + s.outbound_streams.exhausted,
            )
        });
        let (checked, spared) = status.iter().fold((0, 0), |(c, x), s| {
            (c + s.signatures.checked, x + s.signatures.spared)
        });
        let (dialled, denied, exempt) = status.iter().fold((0, 0, 0), |(o, d, x), s| {
            (o + s.dials.opened, d + s.dials.denied, x + s.dials.exempt)
        });
        let nodes = status.len().max(1) as f64;
        let mut queries: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
        for s in &status {
            for (kind, (q, r)) in &s.queries.0 {
                let e = queries.entry(kind).or_default();
                e.0 += q;
                e.1 += r;
            }
        }
        let queries: Vec<String> = queries
            .iter()
            .map(|(k, (q, r))| {
                format!(
                    "{k} {:.1} ({:.0} requests)",
                    *q as f64 / nodes,
                    *r as f64 / nodes
                )
            })
            .collect();
        let (min, mean, max) = spread(&sizes);
        Some(format!(
            "task-topic mesh peers per node min/mean/max {min}/{mean:.1}/{max}, {empty} nodes with an empty task mesh; dropped for slow peers: {priority} priority, {non_priority} non-priority; gossipsub outbound streams opened {opened}, connections closed for a handler that gave up {exhausted}; received messages signature-checked {checked}, copies spared a check {spared}; dials per node since start: {:.1} budgeted, {:.1} denied, {:.1} exempt; DHT queries per node: {}",
            dialled as f64 / nodes,
            denied as f64 / nodes,
            exempt as f64 / nodes,
            queries.join(", "),
        ))
    }
}

impl Shape for common::BareNet {
    async fn shape(&self) -> ((usize, f64, usize), (usize, f64, usize)) {
        let status = self.status().await;
        let conns: Vec<usize> = status.iter().map(|s| s.0).collect();
        let topics: Vec<usize> = status.iter().map(|s| s.1).collect();
        (spread(&conns), spread(&topics))
    }
}

/// Runs `fut`, sampling the process CPU share of `workers` cores every 5 s (a last, shorter
/// sample when it ends); returns its output and the samples.
async fn sampled<F: Future>(fut: F, workers: usize) -> (F::Output, Vec<f64>) {
    const EVERY: Duration = Duration::from_secs(5);
    let mut samples = Vec::new();
    let mut mark = (Instant::now(), cpu_time());
    let mut sample = |samples: &mut Vec<f64>| {
        let now = (Instant::now(), cpu_time());
        if let (Some(a), Some(b)) = (mark.1, now.1) {
            samples.push(share(b.saturating_sub(a), now.0 - mark.0, workers));
        }
        mark = now;
    };
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + EVERY, EVERY);
    tokio::pin!(fut);
    loop {
        tokio::select! {
            out = &mut fut => {
                sample(&mut samples);
                return (out, samples);
            }
            _ = tick.tick() => sample(&mut samples),
        }
    }
}

/// `cpu` as a share of `workers` cores over `wall`.
fn share(cpu: Duration, wall: Duration, workers: usize) -> f64 {
    cpu.as_secs_f64() / (wall.as_secs_f64() * workers as f64).max(1e-9)
}

fn fmt_s(s: Option<f64>) -> String {
    s.map_or_else(|| "never".to_owned(), |s| format!("{s:.1} s"))
}

fn mib(bytes: f64) -> f64 {
    bytes / (1024.0 * 1024.0)
}

// ---------------------------------------------------------------------------------------------
// The parent: one child process per variant, then the comparison

/// Runs `variant` in a child process (this executable, the same arguments), echoing its output;
/// returns its report, or `None` if it failed.
fn child(variant: &str) -> Option<Report> {
    let exe = std::env::current_exe().expect("current executable");
    let mut proc = std::process::Command::new(exe)
        .args(std::env::args().skip(1))
        .env(CHILD_ENV, variant)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn a child bench");
    let mut report = None;
    let stdout = proc.stdout.take().expect("piped stdout");
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        match line.strip_prefix(REPORT_PREFIX) {
            Some(json) => report = serde_json::from_str(json).ok(),
            None => println!("{line}"),
        }
    }
    let status = proc.wait().ok()?;
    if !status.success() {
        println!("  {variant}: child process failed ({status})");
    }
    report
}

fn summary(r: &Report) {
    if let Some(why) = &r.failed {
        println!(
            "{}: {}/{} nodes started in {:.1} s, then {why}; {:.1} connections per node (max {}), {:.1} topics per node (max {}), {:.2} MiB per node; nothing measured",
            r.variant,
            r.started,
            r.nodes,
            r.start_s,
            r.connections.1,
            r.connections.2,
            r.topics.1,
            r.topics.2,
            mib(r.rss_ready.saturating_sub(r.rss_base) as f64) / r.started.max(1) as f64,
        );
        return;
    }
    println!(
        "{}: {} nodes up in {:.1} s; converged: probes {}, ready {} ({} probe messages), cards {}; {}/{} delivered ({}), {} lost by the harness queue",
        r.variant,
        r.nodes,
        r.start_s,
        fmt_s(r.probes_s),
        fmt_s(r.ready_s),
        r.probe_messages,
        if r.variant == "agora" {
            format!(
                "{} ({}/{} nodes hold every neighbour's card; cards per node {}/{:.1}/{} then, {}/{:.1}/{} after measuring, {}/{} nodes complete)",
                fmt_s(r.cards_s),
                r.cards_nodes_ok,
                r.nodes,
                r.cards_known.0,
                r.cards_known.1,
                r.cards_known.2,
                r.cards_known_end.0,
                r.cards_known_end.1,
                r.cards_known_end.2,
                r.cards_nodes_ok_end,
                r.nodes,
            )
        } else {
            "n/a".to_owned()
        },
        r.delivered,
        r.expected,
        r.per_task
            .iter()
            .zip(TASKS)
            .map(|((e, d), t)| format!(
                "{}: {:.2}%",
                t.rsplit('/').next().unwrap_or(t),
                100.0 * *d as f64 / (*e).max(1) as f64
            ))
            .collect::<Vec<_>>()
            .join(", "),
        r.overflow,
    );
    println!(
        "  published {} messages in {:.1} s ({:.2}/s; {:.1}/s asked); measured phase {:.1} s",
        r.messages,
        r.publish_s,
        r.messages.saturating_sub(1) as f64 / r.publish_s.max(1e-9),
        r.rate,
        r.wall_s,
    );
    println!(
        "  connections per node min/mean/max {}/{:.1}/{} (after measuring {}/{:.1}/{}); topics per node {}/{:.1}/{} (after {}/{:.1}/{}); open fds {} (limit {})",
        r.connections.0,
        r.connections.1,
        r.connections.2,
        r.connections_end.0,
        r.connections_end.1,
        r.connections_end.2,
        r.topics.0,
        r.topics.1,
        r.topics.2,
        r.topics_end.0,
        r.topics_end.1,
        r.topics_end.2,
        r.fds_ready,
        r.fd_limit,
    );
    println!(
        "  memory per node: {:.2} MiB converged, {:.2} MiB after measuring, {:.2} MiB peak (process RSS {:.0} MiB before the nodes, {:.0} MiB peak); CPU of {} workers: {} idle, {} measured ({} ms per delivery); settled {}; CPU per 5 s until settled: {}; per 5 s of publishing: {}",
        r.per_node(r.rss_ready),
        r.per_node(r.rss_end),
        r.per_node(r.rss_peak),
        mib(r.rss_base as f64),
        mib(r.rss_peak as f64),
        r.workers,
        percent(r.cpu_idle),
        percent(r.cpu_measured),
        r.cpu_per_delivery_ms
            .map_or_else(|| "n/a".to_owned(), |c| format!("{c:.2}")),
        r.settled,
        percents(&r.cpu_converge),
        percents(&r.cpu_publishing),
    );
}

fn row(r: &Report) -> String {
    if let Some(why) = &r.failed {
        return format!(
            "| {} | {} | not measured: {}/{} nodes started, then {why} | | | | | | | | | |",
            r.variant, r.nodes, r.started, r.nodes
        );
    }
    format!(
        "| {} | {} | {} @ {}/s | {:.2}% ({}) | {:.2} / {:.2} / {:.2} ms | {:.2} / {:.2} / {:.2} ms ({}/{}) | {} / {} | {:.1} / {} | {:.1} | {:.2} MiB | {} / {} | {} |",
        r.variant,
        r.nodes,
        r.messages,
        r.rate,
        100.0 * r.delivered as f64 / r.expected.max(1) as f64,
        r.per_task
            .iter()
            .map(|(e, d)| format!("{:.1}", 100.0 * *d as f64 / (*e).max(1) as f64))
            .collect::<Vec<_>>()
            .join(" / "),
        r.latency_ms[0],
        r.latency_ms[2],
        r.latency_ms[3],
        r.to_all_ms[0],
        r.to_all_ms[1],
        r.to_all_ms[2],
        r.complete,
        r.messages,
        fmt_s(r.probes_s),
        if r.variant == "agora" {
            fmt_s(r.cards_s)
        } else {
            "n/a".to_owned()
        },
        r.topics.1,
        r.topics.2,
        r.connections.1,
        r.per_node(r.rss_end),
        percent(r.cpu_idle),
        percent(r.cpu_measured),
        r.cpu_per_delivery_ms
            .map_or_else(|| "n/a".to_owned(), |c| format!("{c:.2} ms")),
    )
}

fn parent(o: &RunOpts) {
    println!(
        "scale bench: {} nodes, {} messages at {}/s on {} task topics per variant, {} tokio workers, ready timeout {} s",
        o.nodes,
        o.messages,
        o.rate,
        TASKS.len(),
        o.workers,
        o.ready_timeout.as_secs()
    );
    let reports: Vec<Report> = VARIANTS
        .iter()
        .filter(|v| o.wants(v))
        .filter_map(|v| child(v))
        .collect();
    println!();
    for r in &reports {
        summary(r);
    }
    println!();
    println!(
        "| variant | N | msgs @ rate | delivered (per task type) | latency p50 / p99 / max | time-to-all p50 / p99 / max (complete) | converged: probes / cards | topics/node mean / max | conns/node | RSS/node | CPU idle / measured | CPU/delivery |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &reports {
        println!("{}", row(r));
    }
    let find = |v: &str| reports.iter().find(|r| r.variant == v);
    if let (Some(a), Some(b)) = (find("agora"), find("bare")) {
        let ratio = |x: f64, y: f64| x / y.max(1e-9);
        println!();
        println!(
            "agora/bare: latency p50 {:.2}x, p99 {:.2}x; time-to-all p50 {:.2}x, p99 {:.2}x; CPU per delivery {:.2}x; memory per node {:.2}x",
            ratio(a.latency_ms[0], b.latency_ms[0]),
            ratio(a.latency_ms[2], b.latency_ms[2]),
            ratio(a.to_all_ms[0], b.to_all_ms[0]),
            ratio(a.to_all_ms[1], b.to_all_ms[1]),
            ratio(
                a.cpu_per_delivery_ms.unwrap_or(0.0),
                b.cpu_per_delivery_ms.unwrap_or(0.0)
            ),
            ratio(
                a.rss_end.saturating_sub(a.rss_base) as f64,
                b.rss_end.saturating_sub(b.rss_base) as f64
            ),
        );
    }
}

fn main() {
    let o = opts();
    let Ok(variant) = std::env::var(CHILD_ENV) else {
        parent(&o);
        return;
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(o.workers)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(run_variant(&variant, &o));
}
