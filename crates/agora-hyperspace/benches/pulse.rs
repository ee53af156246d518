//! The cost of a pulse round (spec §9.4, `agora_hyperspace::pulse`):
//!
//! - `prove`: one node's work for one round (the leaves' hash chains, the Merkle tree, the
//!   openings) — what every honest node spends once per round;
//! - `verify`: checking one received proof (the challenged leaves recomputed, their paths);
//! - `decode_verify`: the same from the envelope's `d` text, as the node does it.
//!
//! Run: `cargo bench -p agora-hyperspace --bench pulse`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use agora_hyperspace::pulse::{DEFAULT_ROUND_MS, Proof};
use criterion::{Criterion, criterion_group, criterion_main};

const ME: &str = "12D3KooWProverA1111111111111111111111111111111111111";

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("pulse");
    g.sample_size(10);
    g.bench_function("prove", |b| {
        b.iter(|| Proof::prove(black_box(20_000_000), DEFAULT_ROUND_MS, ME));
    });
    let proof = Proof::prove(20_000_000, DEFAULT_ROUND_MS, ME);
    let d = serde_json::to_string(&proof).unwrap();
    g.bench_function("verify", |b| {
        b.iter(|| {
            black_box(&proof)
                .verify(20_000_000, DEFAULT_ROUND_MS)
                .unwrap();
        });
    });
    g.bench_function("decode_verify", |b| {
        b.iter(|| {
            Proof::decode(black_box(&d), ME)
                .unwrap()
                .verify(20_000_000, DEFAULT_ROUND_MS)
                .unwrap();
        });
    });
    g.finish();
    println!("proof d: {} bytes", d.len());
}

criterion_group!(benches, bench);
criterion_main!(benches);
