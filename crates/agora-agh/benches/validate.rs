//! Validation throughput on a mixed-kind corpus, against a bare `serde_json` parse of the same
//! bytes (into `serde_json::Value`, and into `IgnoredAny`, i.e. syntax only), on one core.
//!
//! Corpus: the seven reference envelopes (one per kind), each repeated with unique ids, in
//! rotation; 7,000 envelopes, 366 bytes on average.
//!
//! Run: `cargo bench -p agora-agh --bench validate`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use agora_agh::validate::dedup_deadline;
use agora_agh::{DedupWindow, ValidationPolicy, route_token, validate};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const NOW: i64 = 1_775_822_400;

fn corpus() -> Vec<Vec<u8>> {
    let text = include_str!("../../../tests/vectors/agh/envelopes-valid.ndjson");
    let base: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    (0..1000)
        .flat_map(|i| {
            base.iter().map(move |line| {
                // Give every envelope its own id so deduplication accepts all of them.
                let id_at = line.find("\"id\":\"").expect("id") + 6;
                let mut s = line.to_string();
                s.insert_str(id_at, &format!("{i:05}-"));
                s.into_bytes()
            })
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let corpus = corpus();
    let policy = ValidationPolicy::default();
    let bytes: usize = corpus.iter().map(Vec::len).sum();
    eprintln!(
        "corpus: {} envelopes, {} bytes, {:.0} bytes/envelope",
        corpus.len(),
        bytes,
        bytes as f64 / corpus.len() as f64
    );

    let mut g = c.benchmark_group("agh_validate");
    g.throughput(Throughput::Elements(corpus.len() as u64));
    g.bench_function("serde_json_value_parse", |b| {
        b.iter(|| {
            for e in &corpus {
                black_box(serde_json::from_slice::<serde_json::Value>(black_box(e)).is_ok());
            }
        });
    });
    g.bench_function("serde_json_syntax_only", |b| {
        b.iter(|| {
            for e in &corpus {
                black_box(serde_json::from_slice::<serde::de::IgnoredAny>(black_box(e)).is_ok());
            }
        });
    });
    g.bench_function("validate", |b| {
        b.iter(|| {
            for e in &corpus {
                black_box(validate(black_box(e), NOW, &policy).is_ok());
            }
        });
    });
    g.bench_function("validate_and_dedup", |b| {
        b.iter(|| {
            let mut window = DedupWindow::default();
            for e in &corpus {
                let ok = validate(black_box(e), NOW, &policy).and_then(|v| {
                    let env = &v.envelope;
                    window.insert(&env.id, dedup_deadline(env.ts, env.expires_at, 300), NOW)
                });
                black_box(ok.is_ok());
            }
        });
    });
    g.finish();

    let mut g = c.benchmark_group("agh_misc");
    g.throughput(Throughput::Elements(1));
    g.bench_function("route_token", |b| {
        b.iter(|| route_token(black_box("reviewer.sess-xyz")));
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
