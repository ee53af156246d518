//! The ANS search hot path over 100,000 registered agents: `discover::evaluate` (BM25 capability
//! match over the postings, filters, top-k by `rank_score`) for a rotating set of 2–5 word
//! intents, with and without a governance-zone filter, reusing one [`Scratch`] as a searching
//! thread would (and once with a fresh one per query, as plain `evaluate` does); `query_id`;
//! and registering and deregistering one agent in the full index. Synthetic population:
//! `corpus.rs`.
//!
//! Run: `cargo bench -p agora-agtp --bench index`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/corpus.rs"]
mod corpus;

use std::hint::black_box;

use agora_agtp::discover::{self, Params};
use agora_agtp::index::{Availability, Entry, Index, Scratch};
use agora_agtp::manifest::{Lifecycle, Manifest};
use agora_agtp::rank::Weights;
use criterion::{Criterion, criterion_group, criterion_main};

const AGENTS: usize = 100_000;

fn entry(raw: serde_json::Value) -> Entry {
    Entry {
        manifest: Manifest::from_value(raw).unwrap(),
        state: Lifecycle::Active,
        availability: Availability::Available,
        registered_ms: 0,
        updated_ms: 0,
    }
}

fn bench(c: &mut Criterion) {
    let mut index = Index::new();
    for m in corpus::manifests(AGENTS, 1) {
        index.upsert(entry(m));
    }
    let intents = corpus::intents(512, 2);
    let weights = Weights::default();
    let params: Vec<Params> = intents
        .iter()
        .map(|i| Params {
            intent: Some(i.clone()),
            ..Params::default()
        })
        .collect();
    let zoned: Vec<Params> = params
        .iter()
        .map(|p| Params {
            governance_zone: Some("zone:3".into()),
            ..p.clone()
        })
        .collect();
    let mut g = c.benchmark_group("ans_index_100k");
    let mut i = 0;
    let mut scratch = Scratch::new();
    g.bench_function("evaluate", |b| {
        b.iter(|| {
            i = (i + 1) % params.len();
            black_box(discover::evaluate_with(
                &index,
                &params[i],
                &weights,
                &mut scratch,
            ))
        });
    });
    g.bench_function("evaluate_zone_filter", |b| {
        b.iter(|| {
            i = (i + 1) % zoned.len();
            black_box(discover::evaluate_with(
                &index,
                &zoned[i],
                &weights,
                &mut scratch,
            ))
        });
    });
    g.bench_function("evaluate_fresh_scratch", |b| {
        b.iter(|| {
            i = (i + 1) % params.len();
            black_box(discover::evaluate(&index, &params[i], &weights))
        });
    });
    let digest = index.digest();
    g.bench_function("query_id", |b| {
        b.iter(|| black_box(discover::query_id(&params[7], "agent-caller", &digest)));
    });
    let extra = corpus::manifests(1, 99).pop().unwrap();
    let id = extra["canonical_id"].as_str().unwrap().to_owned();
    g.bench_function("register_and_deregister", |b| {
        b.iter(|| {
            index.upsert(entry(extra.clone()));
            black_box(index.remove(&id))
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
