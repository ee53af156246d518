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
//!   validation, and the mesh parameters of Agora's `build_swarm` (heartbeat 500 ms, mesh_n_low 3,
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

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use agora_node::mesh::{self, Command, Event};
use common::{
    Args, CHANNEL, Net, Recorder, Rng, RunOpts, SEED, connection_counts, envelope, keypair,
    latencies, ms, now_ms, percentile, publish_and_collect, recorder, seq_of, signing_keys,
    start_bare, topology, wait_quiet, wait_ready, wait_settled,
};
use ed25519_dalek::SigningKey;
use libp2p::Multiaddr;
use libp2p::gossipsub::MessageAcceptance;
use tokio::sync::mpsc;

const TOPIC: &str = "hyperspace/tasks/bench";
/// How long one warm-up message may take to reach every other node.
const WARMUP_WAIT: Duration = Duration::from_secs(1);
/// Default quiet threshold: readiness also waits until the process used less than this share
/// of one core (percent) over the last second.
const QUIET_DEFAULT: f64 = 20.0;
/// Default number of interleaved measuring rounds.
const ROUNDS_DEFAULT: usize = 4;

// ---------------------------------------------------------------------------------------------
// Options

#[derive(Clone, Debug)]
struct Opts {
    run: RunOpts,
    timeline: bool,
    rounds: usize,
    /// The Agora nodes' connection manager watermarks (the node's `--peers-low/--peers-high`).
    peers: agora_node::config::PeerLimits,
}

fn opts() -> Opts {
    let names: Vec<&'static str> = RunOpts::NAMES
        .into_iter()
        .chain(["rounds", "peers-low", "peers-high"])
        .collect();
    let args = Args::read("GOSSIP_BENCH", &names, &["timeline"]);
    let run = RunOpts::read(&args, 50, |_| 20.0, |_| 600, 120, QUIET_DEFAULT);
    // The node's own layering and checks, so the bench takes exactly what the node takes.
    let mut node = agora_node::config::Config::default();
    node.apply(agora_node::config::ConfigPatch {
        peers_low: args.parsed("peers-low"),
        peers_high: args.parsed("peers-high"),
        ..agora_node::config::ConfigPatch::default()
    })
    .and_then(|()| node.validate())
    .expect("--peers-low / --peers-high");
    Opts {
        run,
        timeline: args.flag("timeline"),
        rounds: args.get("rounds", ROUNDS_DEFAULT),
        peers: node.peers(),
    }
}

/// The measured messages: (publishing node, envelope bytes).
type Plan = Vec<(usize, Vec<u8>)>;

// --- (a) Agora's mesh ------------------------------------------------------------------------

/// Agora's meshes, each with its validator task.
type AgoraNet = common::AgoraNet<()>;

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
    limits: agora_node::config::PeerLimits,
) -> AgoraNet {
    let mut nodes = Vec::with_capacity(n);
    let mut addrs: Vec<Multiaddr> = Vec::with_capacity(n);
    for (i, boot) in topo.iter().enumerate().take(n) {
        let bootstrap = boot.iter().map(|&j| addrs[j].clone()).collect();
        let cfg = common::agora_mesh_config(i, bootstrap, limits, deliveries);
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
        nodes.push(common::AgoraNode {
            mesh: commands,
            swarm: mesh,
            helpers: vec![validator],
            extra: (),
        });
    }
    common::AgoraNet(nodes)
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
    let n = o.run.nodes;
    let variant = report.variant;
    let (rec, mut deliveries, overflow) = recorder();
    let t0 = Instant::now();
    let deadline = tokio::time::Instant::from_std(t0 + o.run.ready_timeout);
    let net = start(rec).await;
    let started = t0.elapsed();
    let warmup = wait_ready(
        &net,
        n,
        keys,
        &[TOPIC],
        WARMUP_WAIT,
        &mut deliveries,
        deadline,
    )
    .await;
    let (ready, warmups) = (warmup.ready, warmup.sent);
    let ready = ready.then(|| t0.elapsed());
    if ready.is_none() {
        println!(
            "  round {round} {variant}: NOT ready after {:.1} s ({warmups} warm-up messages); measuring anyway",
            t0.elapsed().as_secs_f64()
        );
    }
    let quiet = ready.is_some()
        && wait_quiet(o.run.quiet, deadline).await
        && (o.run.quiet <= 0.0 || wait_settled(&net, net.transient_idle(), deadline).await);
    let quiet = quiet.then(|| t0.elapsed());
    if ready.is_some() && quiet.is_none() {
        println!(
            "  round {round} {variant}: NOT quiet (< {}% of a core, connections settled) after {:.1} s; measuring anyway",
            o.run.quiet,
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
                (from, envelope(&keys[from], TOPIC, k as u64, &mut rng))
            })
            .collect()
    };
    // Late warm-up copies are not measured.
    while deliveries.try_recv().is_ok() {}

    let expected = plan.len() * (n - 1);
    let phase = publish_and_collect(
        &net,
        n,
        plan.len(),
        o.run.rate,
        |k| (plan[k].0, TOPIC, plan[k].1.clone()),
        &mut deliveries,
    )
    .await;
    net.shutdown().await;

    let from: Vec<usize> = plan.iter().map(|(from, _)| *from).collect();
    let (mut lat, to_all) = latencies(&phase.got, &phase.published, &from, n);
    lat.sort();
    let per = phase
        .cpu
        .map(|c| c / u32::try_from(phase.count.max(1)).unwrap_or(u32::MAX));
    println!(
        "  round {round} {variant:<5}: {}/{expected} delivered, p50 {:>6.2} ms, p99 {:>6.2} ms, CPU {} per delivery, {:.1} connections per node, quiet after {}",
        phase.count,
        ms(percentile(&lat, 0.5)),
        ms(percentile(&lat, 0.99)),
        per.map_or_else(|| "n/a".to_owned(), |c| format!("{:.2} ms", ms(c))),
        connections.1,
        quiet.map_or_else(|| "-".to_owned(), |q| format!("{:.1} s", q.as_secs_f64())),
    );
    if o.timeline {
        for line in timeline(
            &phase.got,
            &phase.published,
            &plan,
            phase.begin,
            &phase.marks,
        ) {
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
    r.delivered += phase.count;
    r.complete += to_all.len();
    r.latencies.extend(lat);
    r.time_to_all.extend(to_all);
    r.wall += phase.wall;
    r.cpu = if first {
        phase.cpu
    } else {
        r.cpu.zip(phase.cpu).map(|(a, b)| a + b)
    };
    r.overflow += overflow.load(Ordering::Relaxed);
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
        o.run.nodes,
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
                100.0 * c.as_secs_f64() / (r.wall.as_secs_f64() * o.run.workers as f64),
                ms(c) / r.delivered.max(1) as f64
            )
        },
    );
    format!(
        "| {} | {} | {} @ {}/s | {} B | {} | {:.2}% | {:.2} / {:.2} / {:.2} ms | {:.2} / {:.2} ms ({}/{}) | {} | {:.1} | {} | {} |",
        r.variant,
        o.run.nodes,
        o.run.messages,
        o.run.rate,
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
        o.run.messages,
        cpu,
        r.connections.1,
        r.ready.map_or_else(
            || "not ready".to_owned(),
            |d| format!("{:.1} s ({} msgs)", d.as_secs_f64(), r.warmups)
        ),
        match (r.quiet, o.run.quiet > 0.0) {
            (_, false) => "off".to_owned(),
            (Some(q), true) => format!("{:.1} s", q.as_secs_f64()),
            (None, true) => "not quiet".to_owned(),
        },
    )
}

async fn bench(o: Opts) {
    let n = o.run.nodes;
    let topo = topology(n);
    let topo = &topo[..n];
    let keys = signing_keys(n);
    let size = envelope(&keys[0], TOPIC, o.run.messages as u64 / 2, &mut Rng(SEED)).len();
    let rounds = o.rounds.clamp(1, o.run.messages.max(1));
    println!(
        "gossip bench: {n} nodes, {} messages at {}/s per variant in {rounds} rounds, envelope ≈ {size} B, topic {TOPIC}, {} tokio workers, Agora peers {}..{}",
        o.run.messages, o.run.rate, o.run.workers, o.peers.low, o.peers.high
    );

    let mut reports: Vec<Report> = VARIANTS
        .iter()
        .filter(|v| o.run.wants(v))
        .map(|&variant| Report {
            variant,
            ..Report::default()
        })
        .collect();
    // Each round starts every network afresh, one after the other, and rotates which goes
    // first, so that a slow spell of the machine falls on every variant alike.
    for k in 0..rounds {
        let messages = (k + 1) * o.run.messages / rounds - k * o.run.messages / rounds;
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
                        start_bare(n, topo, &rec, gate, &[TOPIC]).await
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
        o.run.workers
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
        .worker_threads(o.run.workers)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(bench(o));
}
