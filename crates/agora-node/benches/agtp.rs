//! Signed DISCOVER under load: the node's Agent Name Service with 100,000 registered agents,
//! behind the real AGTP listener on 127.0.0.1, driven by C client connections (default 2), each
//! sending DISCOVER requests back to back (one outstanding request per connection, as AGTP is
//! sequential per connection) with rotating 2–5 word intents over a synthetic population
//! (`crates/agora-agtp/benches/support/corpus.rs`: Zipf-skewed vocabulary, the most common word
//! in about 14 % of the manifests).
//!
//! Every response is a full answer: parameters validated, scope and rate limit checked, BM25
//! search with filters and top-k over the whole index, result object, RFC 8785 canonical bytes,
//! ES256 `ans_signature`, serialised and framed. The client checks the status of every response
//! and verifies the signature of the first 50 of each connection (verification is not on the
//! timed path otherwise: it costs more than signing).
//!
//! Latency is from just before the request is written until its response is decoded (client
//! side, one process clock). Throughput is completed requests over the measured phase. Server and
//! clients share one process and the machine's cores: tokio multi-thread runtime, 2 workers.
//!
//! Run: `cargo bench -p agora-node --bench agtp`. Options (after `--`): `--agents N` (100000),
//! `--connections C` (2), `--seconds S` (10, measured; 2 more of warm-up), `--limit L` (10,
//! DISCOVER `limit`), `--tls` (TLS 1.3 with a generated certificate instead of plain AGTP).
//!
//! A measurement harness, not a test: the project goal is p99 ≤ 5 ms and ≥ 5,000 requests/s
//! with 2 connections.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../../agora-agtp/benches/support/corpus.rs"]
mod corpus;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agora_agtp::ScopeViolationCode;
use agora_agtp::Status;
use agora_agtp::codec::Request;
use agora_agtp::index::{Availability, Entry};
use agora_agtp::manifest::{Lifecycle, Manifest};
use agora_agtp::rank::Weights;
use agora_agtp::refresh::RefreshConfig;
use agora_agtp::signature::verify_result_with;
use agora_bucket::RateConfig;
use agora_node::ans::{self, Ans, AnsHandler, Settings};
use agora_node::faces::agtp::client::{Connection, Transport};
use agora_node::faces::agtp::listener::{self, ListenerConfig};
use agora_node::faces::agtp::tls;
use agora_node::store::Store;
use serde_json::json;

struct Options {
    agents: usize,
    connections: usize,
    seconds: u64,
    limit: usize,
    tls: bool,
}

fn options() -> Options {
    let mut o = Options {
        agents: 100_000,
        connections: 2,
        seconds: 10,
        limit: 10,
        tls: false,
    };
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        let value = || args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--agents" => o.agents = value().parse().expect("--agents N"),
            "--connections" => o.connections = value().parse().expect("--connections C"),
            "--seconds" => o.seconds = value().parse().expect("--seconds S"),
            "--limit" => o.limit = value().parse().expect("--limit L"),
            "--tls" => {
                o.tls = true;
                i += 1;
                continue;
            }
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    o
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn main() {
    let o = options();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(&o));
}

async fn run(o: &Options) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let signer = ans::generate_key(None).unwrap();
    let settings = Settings {
        name: "ans.bench".into(),
        scope_code: ScopeViolationCode::Draft451,
        weights: Weights::default(),
        rate: RateConfig {
            rate: 1e9,
            burst: 1e9,
            ..RateConfig::default()
        },
        refresh: RefreshConfig::default(),
        refresh_timeout: Duration::from_secs(10),
        peers: Vec::new(),
        federation_deadline: Duration::from_secs(1),
        unregistered_claims: agora_agtp::scope::UnregisteredClaims::Asserted,
        population_open: true,
    };
    let ans = Arc::new(Ans::open(settings, signer, Vec::new(), store).unwrap());
    let built = Instant::now();
    ans.preload(corpus::manifests(o.agents, 1).into_iter().map(|raw| Entry {
        manifest: Manifest::from_value(raw).unwrap(),
        state: Lifecycle::Active,
        availability: Availability::Available,
        registered_ms: 0,
        updated_ms: 0,
    }));
    println!(
        "index: {} agents loaded in {:.1} s",
        ans.len(),
        built.elapsed().as_secs_f64()
    );
    let key = ans.verifying_key();

    let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap().to_string();
    let (acceptor, transport) = if o.tls {
        let server = tls::load_or_generate(dir.path(), &[]).unwrap();
        let roots = tls::Roots::Pem(server.cert_pem().into_bytes());
        (
            Some(server.acceptor().unwrap()),
            Transport::for_host("127.0.0.1", true, false, &roots).unwrap(),
        )
    } else {
        (None, Transport::Plain)
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(listener::serve(
        socket,
        ListenerConfig {
            tls: acceptor,
            ..ListenerConfig::default()
        },
        Arc::new(AnsHandler(Arc::clone(&ans))),
        async move {
            let _ = stop_rx.await;
        },
    ));

    let intents = Arc::new(corpus::intents(4096, 2));
    let warmup = Duration::from_secs(2);
    let measured = Duration::from_secs(o.seconds);
    let start = Instant::now() + Duration::from_millis(200);
    let mut tasks = Vec::new();
    for c in 0..o.connections {
        let (addr, transport, intents, key) = (
            addr.clone(),
            transport.clone(),
            Arc::clone(&intents),
            key.clone(),
        );
        let limit = o.limit;
        tasks.push(tokio::spawn(async move {
            let mut conn = Connection::connect(&addr, &transport, Duration::from_secs(5))
                .await
                .unwrap();
            let mut latencies = Vec::new();
            let mut verified = 0;
            let mut i = c * 1000;
            tokio::time::sleep_until(start.into()).await;
            let measure_from = start + warmup;
            let end = measure_from + measured;
            loop {
                i += 1;
                let request = Request::new("DISCOVER")
                    .with_header("Agent-ID", format!("bench-client-{c}"))
                    .with_header("Authority-Scope", "discovery:query")
                    .with_header("Task-ID", format!("t-{i}"))
                    .with_json_body(&json!({"method": "DISCOVER", "parameters": {
                        "intent": intents[i % intents.len()], "limit": limit}}));
                let sent = Instant::now();
                if sent >= end {
                    break;
                }
                let response = conn.send(&request, Duration::from_secs(10)).await.unwrap();
                let took = sent.elapsed();
                assert_eq!(response.status, Status::OK);
                if verified < 50 {
                    let text = std::str::from_utf8(&response.body).unwrap();
                    let body = agora_agtp::jcs::parse(text).unwrap();
                    verify_result_with(std::slice::from_ref(&key), &body["result"]).unwrap();
                    verified += 1;
                }
                if sent >= measure_from {
                    latencies.push(took);
                }
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let _ = stop_tx.send(());
    all.sort_unstable();
    let n = all.len();
    let mean = all.iter().sum::<Duration>() / u32::try_from(n.max(1)).unwrap();
    println!(
        "signed DISCOVER, {} agents, {} connection(s), limit {}, {}: {} requests in {} s",
        o.agents,
        o.connections,
        o.limit,
        if o.tls { "TLS 1.3" } else { "plain AGTP" },
        n,
        o.seconds
    );
    println!(
        "  throughput {:.0} requests/s; latency p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms, mean {:.3} ms",
        n as f64 / measured.as_secs_f64(),
        percentile(&all, 50.0).as_secs_f64() * 1e3,
        percentile(&all, 90.0).as_secs_f64() * 1e3,
        percentile(&all, 99.0).as_secs_f64() * 1e3,
        all.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        mean.as_secs_f64() * 1e3,
    );
}
