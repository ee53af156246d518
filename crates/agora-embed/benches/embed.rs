//! Embedding throughput on one thread: MiniLM at batch 1 and batch 16 on short sentences
//! (about 15 words), and the lexical embedder.
//!
//! Run: `cargo bench -p agora-embed` (MiniLM only when `AGORA_MINILM_DIR` names the installed
//! model, e.g. `agora-data/models/all-minilm-l6-v2`). The benchmark runs itself again with
//! `RAYON_NUM_THREADS=1 CANDLE_NUM_THREADS=1` when they are not set, and MiniLM uses
//! `Threads::One`: every call computes on exactly one thread.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
#[cfg(feature = "minilm")]
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use agora_embed::{Embedder, Lexical};
use criterion::{Criterion, Throughput};

/// Sixteen sentences of about 15 words (the same list as the Python comparison in
/// `docs/performance.md`).
const SENTENCES: [&str; 16] = [
    "The new release fixes a memory leak that appeared when clients reconnected many times.",
    "Exponential backoff with jitter keeps thousands of clients from retrying at the same moment.",
    "She planted tomatoes, basil and peppers in the sunny corner of the garden last spring.",
    "The committee postponed its decision until the budget figures for next year are available.",
    "Our hiking group crossed the ridge before noon and reached the lake by early afternoon.",
    "A consistent hash ring spreads keys over nodes so that few keys move when one leaves.",
    "The orchestra rehearsed the second movement slowly until every section entered exactly together.",
    "Customers asked for an export button that saves their reports as spreadsheets or plain text.",
    "Heavy rain flooded the underpass, so buses took the longer route through the old town.",
    "The recipe calls for two cups of flour, one egg and a pinch of salt.",
    "Rate-limited APIs answer with status 429 and often say how long a client should wait.",
    "The museum's new wing displays paintings that were hidden in storage for almost a century.",
    "He trained for the marathon by running a little further every weekend through the winter.",
    "Vector search returns the stored memories whose embeddings are closest to the query embedding.",
    "The train to the coast leaves at seven, and the tickets are cheaper if bought online.",
    "Regular backups and a tested restore procedure matter more than any single storage technology.",
];

#[cfg(feature = "minilm")]
fn model_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("AGORA_MINILM_DIR")?);
    dir.join("model.safetensors").exists().then_some(dir)
}

fn bench_lexical(c: &mut Criterion) {
    let e = Lexical::new();
    let mut g = c.benchmark_group("embed_lexical");
    g.throughput(Throughput::Elements(SENTENCES.len() as u64));
    g.bench_function("batch16", |b| {
        b.iter(|| black_box(e.embed(black_box(&SENTENCES)).unwrap()));
    });
    g.finish();
}

#[cfg(not(feature = "minilm"))]
fn bench_minilm(_: &mut Criterion) {
    println!("skipped: MiniLM benchmarks: built without the minilm feature");
}

#[cfg(feature = "minilm")]
fn bench_minilm(c: &mut Criterion) {
    use agora_embed::{MiniLm, Threads, candle_threads};
    let Some(dir) = model_dir() else {
        println!(
            "skipped: MiniLM benchmarks: AGORA_MINILM_DIR does not name an installed model \
             (agora memory install-model, then AGORA_MINILM_DIR=<data>/models/all-minilm-l6-v2)"
        );
        return;
    };
    let model = MiniLm::load(&dir).unwrap().with_threads(Threads::One);
    println!("candle threads: {:?}", candle_threads());
    let mut g = c.benchmark_group("embed_minilm");
    g.sample_size(20);
    g.throughput(Throughput::Elements(1));
    let mut i = 0;
    g.bench_function("batch1", |b| {
        b.iter(|| {
            i = (i + 1) % SENTENCES.len();
            black_box(model.embed(&[SENTENCES[i]]).unwrap())
        });
    });
    g.throughput(Throughput::Elements(SENTENCES.len() as u64));
    g.bench_function("batch16", |b| {
        b.iter(|| black_box(model.embed(black_box(&SENTENCES)).unwrap()));
    });
    g.finish();
}

/// Runs this benchmark again with one candle thread when the environment does not say so.
fn rerun_on_one_thread() -> Option<ExitCode> {
    let one = |k: &str| std::env::var(k).is_ok_and(|v| v == "1");
    if one("RAYON_NUM_THREADS") && one("CANDLE_NUM_THREADS") {
        return None;
    }
    let exe = std::env::current_exe().expect("own path");
    let status = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env("RAYON_NUM_THREADS", "1")
        .env("CANDLE_NUM_THREADS", "1")
        .status()
        .expect("run the benchmark again");
    Some(ExitCode::from(
        status.code().unwrap_or(1).clamp(0, 255) as u8
    ))
}

fn main() -> ExitCode {
    if let Some(code) = rerun_on_one_thread() {
        return code;
    }
    let mut c = Criterion::default().configure_from_args();
    bench_lexical(&mut c);
    bench_minilm(&mut c);
    c.final_summary();
    ExitCode::SUCCESS
}
