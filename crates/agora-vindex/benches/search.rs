//! `cargo bench -p agora-vindex`: the vector index at 100,000 × 384 against FAISS in the same run.
//!
//! For the clustered workload (the main one, see `agora_vindex::synth`) and the uniform one:
//! build time and memory of the index, single-thread query latency p50/p99 of the exact scan and
//! of HNSW at several `ef`, and HNSW recall@10 against the exact scan over the queries. The same
//! base and query vectors are written as raw little-endian f32 to a temporary directory and
//! `benches/faiss_compare.py` builds FAISS `IndexFlatIP` and `IndexHNSWFlat` (inner product, same
//! M / efConstruction / efSearch, one thread) on them; its figures are printed next to ours with
//! the ratios ours / FAISS. Without an interpreter that imports `faiss` the comparison prints one
//! `skipped: faiss …` line. A criterion group then times one search of each engine.
//!
//! Environment: `VINDEX_PYTHON` (default `python3`) runs the FAISS script; `VINDEX_N` (default
//! 100,000) and `VINDEX_QUERIES` (default 500) size the run; `VINDEX_WORKLOADS`
//! (`clustered,uniform`) picks the workloads; `VINDEX_CROSSOVER=0` skips the exact/HNSW crossover
//! sweep; `VINDEX_M` and `VINDEX_EF_CONSTRUCTION` change the graph parameters of both engines,
//! `VINDEX_PARALLEL_BUILD=0` builds ours from one thread, `VINDEX_F16=1` keeps our graph's
//! vectors as f16 (hits re-scored in f32).
//! Graph builds add from one thread per core. After the sweep 500 new vectors are added one at a
//! time (`insert`, then `stage` and one `index_staged`), and FAISS adds the same ones to its graph.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agora_vindex::synth::{DEFAULT_CENTRES, DEFAULT_NOISE, Generator};
use agora_vindex::{Engine, IndexConfig, VectorIndex};
use criterion::Criterion;
use serde_json::Value;

const DIM: usize = 384;
const K: usize = 10;
const EF_SWEEP: [usize; 15] = [16, 20, 24, 28, 32, 36, 40, 44, 48, 56, 64, 80, 96, 128, 256];
/// Vectors added one at a time after the sweep (the write path of `memory.store`).
const ADDS: usize = 500;
const CROSSOVER_SIZES: [usize; 3] = [5_000, 10_000, 20_000];

/// The graph parameters measured: the defaults, or `VINDEX_M` and `VINDEX_EF_CONSTRUCTION`
/// (FAISS gets the same); `VINDEX_PARALLEL_BUILD=0` builds our graph from one thread, as FAISS
/// builds its own here.
fn bench_config() -> IndexConfig {
    let d = IndexConfig::default();
    IndexConfig {
        m: env_usize("VINDEX_M", d.m),
        ef_construction: env_usize("VINDEX_EF_CONSTRUCTION", d.ef_construction),
        parallel_build: env_usize("VINDEX_PARALLEL_BUILD", usize::from(d.parallel_build)) != 0,
        graph_f16: env_usize("VINDEX_F16", usize::from(d.graph_f16)) != 0,
        ..d
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Resident set size of this process, from `/proc/self/status` (Linux only).
fn rss_bytes() -> Option<usize> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[derive(Clone, Copy, Debug)]
struct Latency {
    p50_us: f64,
    p99_us: f64,
}

/// Times `search` once per query (after a warm-up pass over 20 queries).
fn time_queries(
    queries: &[f32],
    mut search: impl FnMut(&[f32]) -> Vec<(u64, f32)>,
) -> (Latency, Vec<Vec<u64>>) {
    for q in queries.chunks_exact(DIM).take(20) {
        std::hint::black_box(search(q));
    }
    let mut times = Vec::new();
    let mut found = Vec::new();
    for q in queries.chunks_exact(DIM) {
        let t = Instant::now();
        let hits = std::hint::black_box(search(q));
        times.push(t.elapsed().as_secs_f64() * 1e6);
        found.push(hits.into_iter().map(|h| h.0).collect());
    }
    times.sort_by(f64::total_cmp);
    (
        Latency {
            p50_us: percentile(&times, 50.0),
            p99_us: percentile(&times, 99.0),
        },
        found,
    )
}

fn recall(found: &[Vec<u64>], truth: &[Vec<u64>]) -> f64 {
    let hits: usize = found
        .iter()
        .zip(truth)
        .map(|(f, t)| f.iter().filter(|k| t.contains(k)).count())
        .sum();
    hits as f64 / (K * truth.len()) as f64
}

#[derive(Debug)]
struct OursRow {
    ef: usize,
    recall: f64,
    lat: Latency,
}

struct Report {
    build_s: f64,
    rss_mb: Option<f64>,
    estimate_mb: f64,
    exact: Latency,
    sweep: Vec<OursRow>,
    kernels: String,
    /// One graph insert of a new vector (`insert`).
    insert: Latency,
    /// One `stage` of a new vector, and the mean graph insert when `index_staged` drains them.
    stage: Latency,
    drain_mean_us: f64,
}

fn build(base: &[f32], config: IndexConfig) -> (VectorIndex, f64) {
    let mut index = VectorIndex::new(DIM, config);
    let t = Instant::now();
    let loaded = index.extend(
        base.chunks_exact(DIM)
            .enumerate()
            .map(|(i, v)| (i as u64, v)),
    );
    assert!(loaded.is_ok(), "loading the base vectors: {loaded:?}");
    (index, t.elapsed().as_secs_f64())
}

/// Times `f` once per vector of `extra`.
fn time_each(extra: &[f32], mut f: impl FnMut(usize, &[f32])) -> Latency {
    let mut times: Vec<f64> = extra
        .chunks_exact(DIM)
        .enumerate()
        .map(|(i, v)| {
            let t = Instant::now();
            f(i, v);
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    Latency {
        p50_us: percentile(&times, 50.0),
        p99_us: percentile(&times, 99.0),
    }
}

fn measure(base: &[f32], queries: &[f32], extra: &[f32]) -> (VectorIndex, Report) {
    let rss_before = rss_bytes();
    let (mut index, build_s) = build(base, bench_config());
    assert_eq!(index.engine(), Engine::Hnsw);
    let rss_mb = rss_before
        .zip(rss_bytes())
        .map(|(b, a)| a.saturating_sub(b) as f64 / 1e6);
    let (exact, truth) = time_queries(queries, |q| index.exact_search(q, K, None));
    let sweep = EF_SWEEP
        .iter()
        .map(|&ef| {
            index.set_ef_search(ef);
            let (lat, found) = time_queries(queries, |q| index.search(q, K, None));
            OursRow {
                ef,
                recall: recall(&found, &truth),
                lat,
            }
        })
        .collect();
    index.set_ef_search(IndexConfig::default().ef_search);
    let n = base.len() / DIM;
    let insert = time_each(extra, |i, v| {
        let added = index.insert((n + i) as u64, v);
        assert!(added.is_ok(), "insert: {added:?}");
    });
    let stage = time_each(extra, |i, v| {
        let added = index.stage((n + ADDS + i) as u64, v);
        assert!(added.is_ok(), "stage: {added:?}");
    });
    let t = Instant::now();
    let drained = index.index_staged(usize::MAX);
    let drain_mean_us = t.elapsed().as_secs_f64() * 1e6 / drained.max(1) as f64;
    let estimate_mb = index.memory_bytes() as f64 / 1e6;
    let kernels = index.graph_kernels().unwrap_or_default();
    (
        index,
        Report {
            build_s,
            rss_mb,
            estimate_mb,
            exact,
            sweep,
            kernels,
            insert,
            stage,
            drain_mean_us,
        },
    )
}

fn write_f32(path: &Path, values: &[f32]) -> std::io::Result<()> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    fs::write(path, bytes)
}

/// Runs the FAISS script on the same vectors; `Err` carries the reason it was skipped.
fn faiss(base: &[f32], queries: &[f32], extra: &[f32]) -> Result<Value, String> {
    let python = std::env::var("VINDEX_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python).args(["-c", "import faiss"]).output();
    match probe {
        Ok(out) if out.status.success() => {}
        Ok(_) => {
            return Err(format!(
                "`{python} -c \"import faiss\"` failed (set VINDEX_PYTHON)"
            ));
        }
        Err(e) => return Err(format!("cannot run `{python}`: {e}")),
    }
    let dir: PathBuf =
        std::env::temp_dir().join(format!("agora-vindex-bench-{}", std::process::id()));
    fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (base_path, query_path) = (dir.join("base.f32"), dir.join("queries.f32"));
    let extra_path = dir.join("extra.f32");
    let written = write_f32(&base_path, base)
        .and_then(|()| write_f32(&query_path, queries))
        .and_then(|()| write_f32(&extra_path, extra));
    let config = bench_config();
    let efs: Vec<String> = EF_SWEEP.iter().map(usize::to_string).collect();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/faiss_compare.py");
    let output = written.map_err(|e| e.to_string()).and_then(|()| {
        Command::new(&python)
            .arg(script)
            .arg("--base")
            .arg(&base_path)
            .arg("--queries")
            .arg(&query_path)
            .arg("--extra")
            .arg(&extra_path)
            .args(["--dim", &DIM.to_string(), "--m", &config.m.to_string()])
            .args(["--ef-construction", &config.ef_construction.to_string()])
            .args(["--ef-search", &efs.join(","), "--k", &K.to_string()])
            .output()
            .map_err(|e| e.to_string())
    });
    let _ = fs::remove_dir_all(&dir);
    let output = output?;
    if !output.status.success() {
        return Err(format!(
            "the script failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    serde_json::from_slice(&output.stdout).map_err(|e| format!("unreadable output: {e}"))
}

fn num(v: &Value, path: &[&str]) -> f64 {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_f64()
        .unwrap_or(f64::NAN)
}

fn print_report(name: &str, n: usize, nq: usize, ours: &Report, faiss: Result<&Value, &String>) {
    let config = bench_config();
    println!(
        "\n== {name}: {n} × {DIM}, {nq} queries, k = {K}, M = {}, efConstruction = {}, our graph's vectors {} ==",
        config.m,
        config.ef_construction,
        if config.graph_f16 { "f16" } else { "f32" }
    );
    let rss = ours
        .rss_mb
        .map_or_else(|| "n/a".into(), |m| format!("{m:.0} MB"));
    println!(
        "ours  build (exact store + HNSW, {} threads) {:.1} s; memory: RSS +{rss}, memory_bytes {:.0} MB ({:.0} B/vector); usearch kernels: {}",
        if config.parallel_build {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            1
        },
        ours.build_s,
        ours.estimate_mb,
        ours.estimate_mb * 1e6 / n as f64,
        ours.kernels
    );
    let faiss = match faiss {
        Ok(f) => f,
        Err(reason) => {
            println!(
                "ours  exact      p50 {:8.1} µs  p99 {:8.1} µs",
                ours.exact.p50_us, ours.exact.p99_us
            );
            for r in &ours.sweep {
                println!(
                    "ours  hnsw ef {:3} p50 {:8.1} µs  p99 {:8.1} µs  recall@10 {:.4}",
                    r.ef, r.lat.p50_us, r.lat.p99_us, r.recall
                );
            }
            println!(
                "ours  insert p50 {:.1} µs p99 {:.1} µs; stage p50 {:.2} µs, indexed later {:.1} µs each",
                ours.insert.p50_us, ours.insert.p99_us, ours.stage.p50_us, ours.drain_mean_us
            );
            println!("skipped: faiss: {reason}");
            return;
        }
    };
    println!(
        "faiss {} ({}), 1 thread: HNSW build {:.1} s (ours / faiss {:.2}); a Python call costs p50 {:.1} µs (included in faiss figures)",
        faiss["faiss_version"].as_str().unwrap_or("?"),
        faiss["simd"].as_str().unwrap_or("?"),
        num(faiss, &["hnsw", "build_s"]),
        ours.build_s / num(faiss, &["hnsw", "build_s"]),
        num(faiss, &["call_overhead", "p50_us"]),
    );
    println!(
        "{:<14} {:>10} {:>10} {:>9} | {:>10} {:>10} {:>9} | {:>7} {:>7}",
        "engine",
        "ours p50",
        "ours p99",
        "recall",
        "faiss p50",
        "faiss p99",
        "recall",
        "p50 ×",
        "p99 ×"
    );
    let (fp50, fp99) = (
        num(faiss, &["flat", "p50_us"]),
        num(faiss, &["flat", "p99_us"]),
    );
    println!(
        "{:<14} {:>8.1}µs {:>8.1}µs {:>9} | {:>8.1}µs {:>8.1}µs {:>9} | {:>7.2} {:>7.2}",
        "exact / Flat",
        ours.exact.p50_us,
        ours.exact.p99_us,
        "1",
        fp50,
        fp99,
        "1",
        ours.exact.p50_us / fp50,
        ours.exact.p99_us / fp99
    );
    let fsweep = faiss["hnsw"]["sweep"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (r, f) in ours.sweep.iter().zip(&fsweep) {
        let (fp50, fp99) = (num(f, &["p50_us"]), num(f, &["p99_us"]));
        println!(
            "{:<14} {:>8.1}µs {:>8.1}µs {:>9.4} | {:>8.1}µs {:>8.1}µs {:>9.4} | {:>7.2} {:>7.2}",
            format!("hnsw ef {}", r.ef),
            r.lat.p50_us,
            r.lat.p99_us,
            r.recall,
            fp50,
            fp99,
            num(f, &["recall"]),
            r.lat.p50_us / fp50,
            r.lat.p99_us / fp99
        );
    }
    // at matched recall: for each FAISS row, our cheapest ef reaching at least its recall
    for f in &fsweep {
        let want = num(f, &["recall"]);
        match ours.sweep.iter().find(|r| r.recall >= want) {
            Some(r) => println!(
                "matched recall: faiss ef {} ({want:.4}) ↔ ours ef {} ({:.4}): p50 × {:.2}, p99 × {:.2}",
                num(f, &["ef"]),
                r.ef,
                r.recall,
                r.lat.p50_us / num(f, &["p50_us"]),
                r.lat.p99_us / num(f, &["p99_us"])
            ),
            None => println!(
                "matched recall: faiss ef {} ({want:.4}) ↔ ours: no ef in the sweep reaches it",
                num(f, &["ef"])
            ),
        }
    }
    println!(
        "adds of one new vector at {n} (ef_construction {}): ours insert p50 {:.1} µs p99 {:.1} µs; ours stage p50 {:.2} µs p99 {:.2} µs, then {:.1} µs each when indexed | faiss add p50 {:.1} µs p99 {:.1} µs | insert p50 × {:.2}",
        config.ef_construction,
        ours.insert.p50_us,
        ours.insert.p99_us,
        ours.stage.p50_us,
        ours.stage.p99_us,
        ours.drain_mean_us,
        num(faiss, &["add", "p50_us"]),
        num(faiss, &["add", "p99_us"]),
        ours.insert.p50_us / num(faiss, &["add", "p50_us"]),
    );
}

/// Exact vs HNSW p50 at sizes around the default `exact_below`, on clustered prefixes.
fn crossover(base: &[f32], queries: &[f32]) {
    println!(
        "\n== crossover: exact scan vs HNSW (ef {}), clustered prefixes ==",
        IndexConfig::default().ef_search
    );
    for n in CROSSOVER_SIZES {
        let config = IndexConfig {
            exact_below: 1,
            ..IndexConfig::default()
        };
        let (index, build_s) = build(&base[..n * DIM], config);
        let (exact, truth) = time_queries(queries, |q| index.exact_search(q, K, None));
        let (hnsw, found) = time_queries(queries, |q| index.search(q, K, None));
        println!(
            "n {n:>6}: exact p50 {:7.1} µs p99 {:7.1} µs | hnsw p50 {:7.1} µs p99 {:7.1} µs recall@10 {:.4} | build {build_s:.1} s",
            exact.p50_us,
            exact.p99_us,
            hnsw.p50_us,
            hnsw.p99_us,
            recall(&found, &truth)
        );
    }
}

fn main() {
    let n = env_usize("VINDEX_N", 100_000);
    let nq = env_usize("VINDEX_QUERIES", 500);
    let workloads =
        std::env::var("VINDEX_WORKLOADS").unwrap_or_else(|_| "clustered,uniform".into());
    println!(
        "agora-vindex bench: {n} × {DIM}, {nq} queries; profile: {}",
        if cfg!(debug_assertions) {
            "dev"
        } else {
            "release (bench)"
        }
    );
    let mut kept: Option<(VectorIndex, Vec<f32>)> = None;
    for name in workloads.split(',') {
        let generator = match name {
            "clustered" => Generator::clustered(DIM, DEFAULT_CENTRES, DEFAULT_NOISE, 1),
            "uniform" => Generator::uniform(DIM),
            other => {
                println!("unknown workload {other}");
                continue;
            }
        };
        let base = generator.sample(n, 2);
        let queries = generator.sample(nq, 3);
        let extra = generator.sample(ADDS, 4);
        let (index, report) = measure(&base, &queries, &extra);
        let faiss = faiss(&base, &queries, &extra);
        print_report(name, n, nq, &report, faiss.as_ref());
        if name == "clustered" {
            if std::env::var("VINDEX_CROSSOVER").as_deref() != Ok("0") {
                crossover(&base, &queries);
            }
            kept = Some((index, queries));
        }
    }
    if let Some((index, queries)) = kept {
        let mut c = Criterion::default()
            .configure_from_args()
            .sample_size(30)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(4));
        let mut rows = queries.chunks_exact(DIM).cycle();
        c.bench_function("exact_search 100k clustered", |b| {
            b.iter(|| index.exact_search(rows.next().unwrap_or_default(), K, None));
        });
        c.bench_function("hnsw search 100k clustered", |b| {
            b.iter(|| index.search(rows.next().unwrap_or_default(), K, None));
        });
        c.final_summary();
    }
}
