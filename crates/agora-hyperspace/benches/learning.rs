//! `learning.reflect` and `learning.curate` on a playbook of 1,000 bullets (spec §5.1),
//! one core, the pure code the node runs on its learning worker.
//!
//! Bullets carry 384-dimension unit vectors (as with the MiniLM embedder), so `reflect` pays the
//! near-duplicate scan of its candidates over every bullet of the section and `curate` the
//! all-pairs scan within each section. Vectors are a deterministic pseudo-random sequence; the
//! token counter here counts words (the node's cl100k counter runs once per new bullet, measured
//! by the node's own figures).
//!
//! Run: `cargo bench -p agora-hyperspace --bench learning`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use agora_hyperspace::learning::playbook::Candidate;
use agora_hyperspace::learning::reflect::{self, Execution, Mode, Step};
use agora_hyperspace::learning::{Playbook, PlaybookLimits, Section};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

const DIM: usize = 384;

fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

/// A unit vector from a xorshift sequence seeded by `seed`.
fn vector(seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v: Vec<f32> = (0..DIM)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect();
    let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
    v.iter_mut().for_each(|a| *a /= n);
    v
}

fn playbook(n: usize) -> Playbook {
    let mut p = Playbook::new("bench", 1);
    let limits = PlaybookLimits::default();
    for i in 0..n {
        let section = Section::ALL[i % 4];
        p.add(
            Candidate {
                section,
                content: format!(
                    "Lesson {i}: prefer tool {} for inputs of kind {}",
                    i % 37,
                    i % 11
                ),
                source: "addBullet".into(),
                key: None,
                vector: Some(vector(i as u64)),
            },
            1 + i as u64,
            false,
            &words,
            &limits,
        );
        let id = format!("{}-{:05}", section.as_str(), i + 1);
        for _ in 0..(i % 5) {
            p.vote(&id, i % 3 != 0, 2);
        }
    }
    p.bump();
    p
}

fn execution(i: u64) -> Execution {
    Execution {
        input: serde_json::json!({"query": format!("question {i}")}),
        output: serde_json::Value::Null,
        steps: vec![
            Step {
                action: "search".into(),
                tool: Some(format!("web-search-{}", i % 13)),
                duration: Some(300.0 + (i % 50) as f64),
                error: None,
            },
            Step {
                action: "synthesize".into(),
                tool: Some("summarizer".into()),
                duration: Some(900.0),
                error: None,
            },
        ],
        outcome: "success".into(),
        reward: 0.9,
        feedback: Some(format!("Cite sources for question {i}.")),
        used_bullets: vec!["str-00001".into(), "mis-00003".into()],
    }
}

fn bench(c: &mut Criterion) {
    let base = playbook(1_000);
    let limits = PlaybookLimits::default();
    let mut g = c.benchmark_group("learning_1000_bullets");
    let mut i = 0u64;
    g.bench_function("reflect_online", |b| {
        b.iter_batched(
            || base.clone(),
            |mut p| {
                i += 1;
                let e = execution(i);
                let mut cands = reflect::propose(&p, &e);
                for (k, c) in cands.iter_mut().enumerate() {
                    c.vector = Some(vector(1_000_000 + i * 8 + k as u64));
                }
                black_box(reflect::apply(
                    &mut p,
                    &e,
                    cands,
                    Mode::Online,
                    10,
                    &words,
                    &limits,
                ));
                p
            },
            BatchSize::LargeInput,
        );
    });
    g.bench_function("curate_to_half", |b| {
        let budget = base.token_count() / 2;
        b.iter_batched(
            || base.clone(),
            |mut p| {
                black_box(p.curate(budget, 10));
                p
            },
            BatchSize::LargeInput,
        );
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
