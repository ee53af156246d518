//! Envelope v2 sign and verify throughput (one core; verify also with the sender's key cached, as
//! the node's gossip gate does), and JSON-RPC framing of a typical call.
//!
//! Run: `cargo bench -p agora-hyperspace --bench envelope`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use agora_hyperspace::jsonrpc;
use agora_hyperspace::{KeyCache, ReplayWindow, sign, verify, verify_keyed};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ed25519_dalek::SigningKey;

const TOPIC: &str = "hyperspace/tasks/web-research";
const TS: u64 = 1_776_366_000_000;
const D: &str = r#"{"taskType":"web-research","query":"rust gossipsub mesh formation","budget":0.25,"tags":["p2p","libp2p"]}"#;

fn nonce(i: u64) -> String {
    format!("{i:032x}")
}

fn bench(c: &mut Criterion) {
    let key = SigningKey::from_bytes(&[0x42; 32]);
    let mut g = c.benchmark_group("hyperspace_envelope");
    g.throughput(Throughput::Elements(1));
    let mut i = 0u64;
    g.bench_function("sign", |b| {
        b.iter(|| {
            i += 1;
            black_box(sign(&key, TOPIC, TS, &nonce(i), black_box(D)).unwrap())
        });
    });
    let envelopes: Vec<String> = (0..4096)
        .map(|i| sign(&key, TOPIC, TS, &nonce(i), D).unwrap())
        .collect();
    g.bench_function("verify", |b| {
        let mut window = ReplayWindow::default();
        let mut k = 0usize;
        b.iter(|| {
            k = (k + 1) % envelopes.len();
            if k == 0 {
                window = ReplayWindow::default();
            }
            black_box(verify(black_box(&envelopes[k]), TOPIC, TS, &mut window).is_ok())
        });
    });
    // As the node's gossip gate does: the sender's parsed key and PeerId are cached.
    g.bench_function("verify_cached_key", |b| {
        let mut window = ReplayWindow::default();
        let mut keys = KeyCache::with_capacity(16);
        let mut k = 0usize;
        b.iter(|| {
            k = (k + 1) % envelopes.len();
            if k == 0 {
                window = ReplayWindow::default();
            }
            black_box(
                verify_keyed(black_box(&envelopes[k]), TOPIC, TS, &mut window, &mut keys).is_ok(),
            )
        });
    });
    g.finish();

    let mut g = c.benchmark_group("jsonrpc");
    g.throughput(Throughput::Elements(1));
    let call = r#"{"jsonrpc":"2.0","id":42,"method":"guard.checkBudget","params":{"sessionId":"sess_8f3a2b1c","estimatedCost":0.05}}"#;
    g.bench_function("parse_and_reply", |b| {
        b.iter(|| {
            jsonrpc::handle_frame(black_box(call), |_| {
                Ok(serde_json::json!({"allowed": true}))
            })
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
