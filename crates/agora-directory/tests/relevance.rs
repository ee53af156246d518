//! The directory's relevance on the labelled set of `tests/vectors/directory/` (issue 33 item
//! 3): 424 hand-written capability descriptions across 38 domains and 79 queries with graded
//! judgments. For BM25 alone, embeddings alone and the hybrid, in one run over one index:
//! mean nDCG@10 and recall@10, printed as a table (`docs/performance.md` "Directory" quotes
//! it), and the hybrid must beat BM25 alone on both.
//!
//! Embeddings: all-MiniLM-L6-v2 from `AGORA_MINILM_DIR` (the installed model); without it the
//! MiniLM test prints one `skipped: …` line and passes, unless `AGORA_REQUIRE_EXTERNAL=1`.
//! The lexical fallback (`lexical-v1`) is measured too, always.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use agora_directory::eval::{ndcg_at, recall_at};
use agora_directory::record::{Call, Kind, Provenance, Record, Source, Trust, TrustLevel};
use agora_directory::{Directory, FeedItem, Fusion, Query};
use agora_embed::{Embedder, Lexical, MiniLm};
use serde_json::Value;

fn load(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/vectors/directory")
        .join(name);
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn record(v: &Value) -> Record {
    let s = |k: &str| v[k].as_str().unwrap().to_owned();
    Record {
        id: s("id"),
        kind: Kind::Tool,
        source: Source::Hyperspace,
        name: s("name"),
        description: s("description"),
        capabilities: v["capabilities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_owned())
            .collect(),
        provenance: Provenance {
            face: "rpc".into(),
            node: "eval".into(),
            signer: None,
        },
        trust: Trust::at(TrustLevel::Verified, "labelled set"),
        call: Call {
            face: "rpc".into(),
            method: None,
            target: None,
            address: None,
        },
        identities: Vec::new(),
        price_atomic: None,
        latency_ms: None,
        ttl_ms: 0,
    }
}

struct Labelled {
    records: Vec<Record>,
    queries: Vec<(String, String, HashMap<String, u8>)>,
}

fn labelled() -> Labelled {
    let corpus = load("corpus.json");
    let records: Vec<Record> = corpus["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(record)
        .collect();
    let queries = load("queries.json")["queries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            let grades = q["relevance"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(id, g)| (id.clone(), u8::try_from(g.as_u64().unwrap()).unwrap()))
                .collect();
            (
                q["query"].as_str().unwrap().to_owned(),
                q["style"].as_str().unwrap().to_owned(),
                grades,
            )
        })
        .collect();
    Labelled { records, queries }
}

fn index(set: &Labelled, embedder: &dyn Embedder) -> Directory {
    let texts: Vec<String> = set.records.iter().map(Record::search_text).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut vectors = Vec::new();
    for chunk in refs.chunks(64) {
        vectors.extend(embedder.embed(chunk).unwrap());
    }
    let items = set
        .records
        .iter()
        .cloned()
        .zip(vectors)
        .map(|(record, v)| FeedItem {
            record,
            online: true,
            last_seen_ms: 1,
            vector: Some(v),
        })
        .collect();
    let mut d = Directory::new(agora_directory::Config::for_embedder(embedder.id()));
    let applied = d.apply_feed("eval", items, 1);
    assert_eq!(applied.added, set.records.len());
    d
}

/// Mean nDCG@10 and recall@10 over the queries (all, or of one style).
fn measure(
    set: &Labelled,
    d: &Directory,
    qvecs: &[Vec<f32>],
    fusion: Fusion,
    style: Option<&str>,
) -> (f64, f64, usize) {
    let (mut ndcg, mut recall, mut n) = (0.0, 0.0, 0);
    for ((text, s, grades), qv) in set.queries.iter().zip(qvecs) {
        if style.is_some_and(|want| want != s) {
            continue;
        }
        let hits = d.search_with(&Query::words(text), Some(qv), 2, fusion);
        let ranked: Vec<&str> = hits.iter().map(|h| h.record.id.as_str()).collect();
        ndcg += ndcg_at(10, &ranked, grades);
        recall += recall_at(10, &ranked, grades);
        n += 1;
    }
    (ndcg / n as f64, recall / n as f64, n)
}

/// The table for one embedder; returns (BM25, hybrid) on all queries.
fn report(embedder: &dyn Embedder) -> ((f64, f64), (f64, f64)) {
    let set = labelled();
    let d = index(&set, embedder);
    let texts: Vec<&str> = set.queries.iter().map(|q| q.0.as_str()).collect();
    let qvecs = embedder.embed(&texts).unwrap();
    let default = d.config().fusion;
    let mut out = format!(
        "directory relevance, {} records, {} queries, embedder {}\n{:<36} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
        set.records.len(),
        set.queries.len(),
        embedder.id(),
        "ranking",
        "nDCG@10",
        "recall@10",
        "kw nDCG",
        "para nDCG",
        "task nDCG",
    );
    let mut rankings = vec![
        ("BM25 alone".to_owned(), Fusion::Keyword),
        ("embeddings alone".to_owned(), Fusion::Meaning),
    ];
    for w in [0.05, 0.1, 0.2, 0.3, 0.5, 0.7] {
        let mark = if (Fusion::Hybrid { keyword_weight: w }) == default {
            " (default)"
        } else {
            ""
        };
        rankings.push((
            format!("hybrid, keyword weight {w}{mark}"),
            Fusion::Hybrid { keyword_weight: w },
        ));
    }
    rankings.push(("reciprocal rank, k 60".to_owned(), Fusion::Rrf { k: 60.0 }));
    for (name, fusion) in &rankings {
        let (ndcg, recall, _) = measure(&set, &d, &qvecs, *fusion, None);
        let style = |s| measure(&set, &d, &qvecs, *fusion, Some(s)).0;
        out.push_str(&format!(
            "{name:<36} {ndcg:>9.3} {recall:>9.3} {:>9.3} {:>9.3} {:>9.3}\n",
            style("keyword"),
            style("paraphrase"),
            style("task"),
        ));
    }
    let _ = std::io::stderr().write_all(out.as_bytes());
    let bm25 = measure(&set, &d, &qvecs, Fusion::Keyword, None);
    let hybrid = measure(&set, &d, &qvecs, default, None);
    ((bm25.0, bm25.1), (hybrid.0, hybrid.1))
}

fn minilm_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("AGORA_MINILM_DIR").map(PathBuf::from);
    let why = match &dir {
        Some(d) if d.join("model.safetensors").is_file() => return dir,
        Some(d) => format!(
            "AGORA_MINILM_DIR={} holds no model.safetensors",
            d.display()
        ),
        None => "AGORA_MINILM_DIR is not set".to_owned(),
    };
    assert!(
        std::env::var("AGORA_REQUIRE_EXTERNAL").as_deref() != Ok("1"),
        "{why}, and AGORA_REQUIRE_EXTERNAL=1 makes that a failure"
    );
    let line = format!(
        "skipped: minilm relevance: {why} (agora memory install-model --data DIR, then AGORA_MINILM_DIR=DIR/models/all-minilm-l6-v2)\n"
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
    None
}

#[test]
fn the_labelled_set_is_whole() {
    let set = labelled();
    assert!(set.records.len() >= 300);
    assert!(set.queries.len() >= 60);
    let ids: std::collections::HashSet<&str> = set.records.iter().map(|r| r.id.as_str()).collect();
    for (q, _, grades) in &set.queries {
        assert!(grades.values().any(|&g| g == 3), "{q} has no grade 3");
        for id in grades.keys() {
            assert!(ids.contains(id.as_str()), "{q} judges unknown {id}");
        }
    }
}

#[test]
fn hybrid_beats_bm25_with_minilm() {
    let Some(dir) = minilm_dir() else { return };
    let model = MiniLm::load(&dir).unwrap();
    let ((bm25_ndcg, bm25_recall), (ndcg, recall)) = report(&model);
    assert!(
        ndcg > bm25_ndcg,
        "hybrid nDCG@10 {ndcg:.3} <= BM25 {bm25_ndcg:.3}"
    );
    assert!(
        recall > bm25_recall,
        "hybrid recall@10 {recall:.3} <= BM25 {bm25_recall:.3}"
    );
}

#[test]
fn lexical_fallback_is_measured() {
    // The fallback knows words and character n-grams, not meaning: measured, not required to
    // beat BM25 (docs/performance.md says by how much it does or does not).
    let ((bm25, _), (hybrid, _)) = report(&Lexical::new());
    assert!(
        bm25 > 0.3 && hybrid > 0.3,
        "BM25 {bm25:.3}, hybrid {hybrid:.3}"
    );
}
