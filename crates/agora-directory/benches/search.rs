//! Directory search at 100,000 records (issue 33 item 8): p50 and p99 of one search, the
//! query's MiniLM embedding included, on the hybrid ranking; beside it, in the same run, the
//! `bm25` crate's own in-memory search engine over the same texts (keywords only, the nearest
//! off-the-shelf competitor) and our ranking's parts alone.
//!
//! The records: the 424 labelled capability descriptions of `tests/vectors/directory/`, each
//! repeated with a different id, two extra words drawn from the corpus's vocabulary and its
//! MiniLM vector perturbed (Gaussian noise, σ 0.05, normalised again) up to 100,000, so term
//! statistics and vector neighbourhoods stay those of real descriptions. The queries: the 79
//! labelled queries, 20 rounds. Needs `AGORA_MINILM_DIR`; prints one `skipped:` line without it.
//! The vectors are loaded in bulk and their HNSW graph built apart, as the node does.
//!
//! `cargo bench -p agora-directory --bench search` (`DIRECTORY_RECORDS=…` to change the size).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agora_directory::record::{Call, Kind, Provenance, Record, Source, Trust, TrustLevel};
use agora_directory::{Directory, FeedItem, Fusion, Query};
use agora_embed::{Embedder, MiniLm};
use serde_json::Value;

fn load(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/vectors/directory")
        .join(name);
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// A small deterministic generator (xorshift) for the variants.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 11) as f32 / (1u64 << 53) as f32
    }
    fn gauss(&mut self) -> f32 {
        let (u, v) = (self.unit().max(1e-9), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn report(name: &str, mut times: Vec<Duration>) {
    times.sort();
    println!(
        "{name:<46} p50 {:>7.3} ms   p99 {:>7.3} ms   max {:>7.3} ms   ({} searches)",
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        percentile(&times, 1.0),
        times.len()
    );
}

fn main() {
    let Some(dir) = std::env::var_os("AGORA_MINILM_DIR").map(PathBuf::from) else {
        println!(
            "skipped: directory search bench: AGORA_MINILM_DIR is not set (the installed MiniLM model)"
        );
        return;
    };
    let size: usize = std::env::var("DIRECTORY_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let model = MiniLm::load(&dir).unwrap();
    let corpus = load("corpus.json");
    let base: Vec<&Value> = corpus["records"].as_array().unwrap().iter().collect();
    let texts: Vec<String> = base
        .iter()
        .map(|r| {
            format!(
                "{}. {}",
                r["name"].as_str().unwrap(),
                r["description"].as_str().unwrap()
            )
        })
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut base_vecs = Vec::new();
    for chunk in refs.chunks(64) {
        base_vecs.extend(model.embed(chunk).unwrap());
    }
    let vocabulary: Vec<&str> = texts
        .iter()
        .flat_map(|t| t.split_whitespace())
        .filter(|w| w.len() > 3)
        .collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let started = Instant::now();
    let mut items = Vec::with_capacity(size);
    let mut plain: Vec<(u32, String)> = Vec::with_capacity(size);
    for i in 0..size {
        let b = base[i % base.len()];
        let extra = format!(
            "{} {}",
            vocabulary[(rng.next() as usize) % vocabulary.len()],
            vocabulary[(rng.next() as usize) % vocabulary.len()]
        );
        let mut v: Vec<f32> = base_vecs[i % base.len()]
            .iter()
            .map(|x| x + 0.05 * rng.gauss())
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        let record = Record {
            id: format!("r{i}"),
            kind: Kind::Tool,
            source: Source::Hyperspace,
            name: b["name"].as_str().unwrap().to_owned(),
            description: format!("{} {extra}", b["description"].as_str().unwrap()),
            capabilities: b["capabilities"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap().to_owned())
                .collect(),
            provenance: Provenance {
                face: "rpc".into(),
                node: "bench".into(),
                signer: None,
            },
            trust: Trust::at(TrustLevel::Signed, "bench"),
            call: Call {
                face: "rpc".into(),
                method: None,
                target: None,
                address: None,
            },
            identities: Vec::new(),
            price_atomic: None,
            latency_ms: None,
            ttl_ms: 60_000,
        };
        plain.push((u32::try_from(i).unwrap(), record.search_text()));
        items.push(FeedItem {
            record,
            online: i % 10 != 0,
            last_seen_ms: 1,
            vector: Some(v),
        });
    }
    let mut directory = Directory::new(agora_directory::Config::for_embedder(model.id()));
    let applied = directory.apply_feed("bench", items, 1);
    println!(
        "directory of {} records applied in {:.1} s ({} refused)",
        directory.len(),
        started.elapsed().as_secs_f64(),
        applied.refused
    );
    let started = Instant::now();
    if let Some((generation, build)) = directory.graph_build() {
        let built = build.run();
        directory.finish_graph(generation, built);
    }
    println!(
        "its vector graph built apart in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let engine = bm25::SearchEngineBuilder::<u32>::with_documents(
        bm25::Language::English,
        plain
            .into_iter()
            .map(|(id, text)| bm25::Document::new(id, text)),
    )
    .build();
    println!(
        "bm25 crate search engine built in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let queries: Vec<String> = load("queries.json")["queries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["query"].as_str().unwrap().to_owned())
        .collect();
    let rounds = 20;
    let (mut hybrid, mut embed, mut rank, mut keyword, mut meaning, mut competitor) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    // One warm-up round.
    for q in &queries {
        let v = model.embed(&[q.as_str()]).unwrap().pop().unwrap();
        let _ = directory.search(&Query::words(q), Some(&v), 2);
    }
    for _ in 0..rounds {
        for q in &queries {
            let query = Query::words(q);
            let t0 = Instant::now();
            let v = model.embed(&[q.as_str()]).unwrap().pop().unwrap();
            let t1 = Instant::now();
            let hits = directory.search(&query, Some(&v), 2);
            let t2 = Instant::now();
            assert!(!hits.is_empty());
            hybrid.push(t2 - t0);
            embed.push(t1 - t0);
            rank.push(t2 - t1);
            let t = Instant::now();
            let _ = directory.search_with(&query, Some(&v), 2, Fusion::Keyword);
            keyword.push(t.elapsed());
            let t = Instant::now();
            let _ = directory.search_with(&query, Some(&v), 2, Fusion::Meaning);
            meaning.push(t.elapsed());
            let t = Instant::now();
            let _ = engine.search(q, 10);
            competitor.push(t.elapsed());
        }
    }
    println!(
        "search over {size} records, {} queries × {rounds} rounds:",
        queries.len()
    );
    report("hybrid search, query embedding included", hybrid);
    report("  of which the query's MiniLM embedding", embed);
    report("  of which the ranking (BM25 + vectors)", rank);
    report("BM25 alone (our index)", keyword);
    report("embeddings alone (our index)", meaning);
    report("bm25 crate SearchEngine (keywords, top 10)", competitor);
}
