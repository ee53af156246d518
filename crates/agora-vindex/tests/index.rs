//! Behaviour of `VectorIndex` on both engines: exact top-k against a naive sort, the tie-break,
//! remove / replace / filter, bounds, engine switching, recall at 20,000 vectors, and property
//! tests for ordering and determinism.

use agora_vindex::synth::{DEFAULT_CENTRES, DEFAULT_NOISE, Generator, normalise};
use agora_vindex::{Engine, IndexConfig, IndexError, VectorIndex};
use proptest::prelude::*;

fn naive(
    data: &[(u64, Vec<f32>)],
    q: &[f32],
    k: usize,
    keep: impl Fn(u64) -> bool,
) -> Vec<(u64, f32)> {
    let mut all: Vec<(u64, f32)> = data
        .iter()
        .filter(|(key, _)| keep(*key))
        .map(|(key, v)| (*key, v.iter().zip(q).map(|(a, b)| a * b).sum::<f32>()))
        .collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

fn keys(hits: &[(u64, f32)]) -> Vec<u64> {
    hits.iter().map(|h| h.0).collect()
}

/// `n` clustered vectors of `dim` dimensions under keys `1000 + i`.
fn dataset(dim: usize, n: usize, seed: u64) -> Vec<(u64, Vec<f32>)> {
    let g = Generator::clustered(dim, 20, 0.2, seed);
    g.sample(n, seed + 1)
        .chunks_exact(dim)
        .enumerate()
        .map(|(i, v)| (1000 + i as u64, v.to_vec()))
        .collect()
}

fn small_graph_config() -> IndexConfig {
    IndexConfig {
        exact_below: 300,
        filter_exact_below: 100,
        parallel_build: false,
        ..IndexConfig::default()
    }
}

fn filled(dim: usize, data: &[(u64, Vec<f32>)], config: IndexConfig) -> VectorIndex {
    let mut index = VectorIndex::new(dim, config);
    for (k, v) in data {
        index
            .insert(*k, v)
            .expect("a unit vector of the right length");
    }
    index
}

fn assert_close(a: &[(u64, f32)], b: &[(u64, f32)]) {
    assert_eq!(keys(a), keys(b));
    for (x, y) in a.iter().zip(b) {
        assert!((x.1 - y.1).abs() < 1e-5, "{x:?} vs {y:?}");
    }
}

#[test]
fn exact_top_k_matches_a_naive_sort() {
    let data = dataset(32, 500, 1);
    let index = filled(32, &data, IndexConfig::default());
    assert_eq!(index.engine(), Engine::Exact);
    for (i, (_, q)) in data.iter().enumerate().step_by(50) {
        for k in [1, 10, 499, 600] {
            let got = index.search(q, k, None);
            assert_close(&got, &naive(&data, q, k, |_| true));
            assert_eq!(got, index.exact_search(q, k, None), "query {i}");
        }
    }
    assert!(index.search(&data[0].1, 0, None).is_empty());
    assert!(
        index.search(&[1.0; 31], 5, None).is_empty(),
        "a query of the wrong length finds nothing"
    );
}

#[test]
fn equal_similarities_are_ordered_by_key() {
    let mut index = VectorIndex::new(2, IndexConfig::default());
    for key in [9, 3, 7, 1] {
        index.insert(key, &[1.0, 0.0]).unwrap();
    }
    index.insert(5, &[0.0, 1.0]).unwrap();
    let hits = index.search(&[1.0, 0.0], 3, None);
    assert_eq!(keys(&hits), vec![1, 3, 7]);
    assert!(hits.iter().all(|h| h.1 == 1.0));
}

#[test]
fn insert_replaces_and_remove_forgets() {
    let mut index = VectorIndex::new(2, IndexConfig::default());
    index.insert(1, &[1.0, 0.0]).unwrap();
    index.insert(2, &[0.0, 1.0]).unwrap();
    index.insert(1, &[0.0, 1.0]).unwrap();
    assert_eq!(index.len(), 2);
    assert_eq!(index.get(1), Some(&[0.0, 1.0][..]));
    assert_eq!(
        keys(&index.search(&[1.0, 0.0], 1, None)),
        vec![1],
        "ties at 0 go to the lower key"
    );
    assert_eq!(index.search(&[0.0, 1.0], 2, None), vec![(1, 1.0), (2, 1.0)]);
    assert!(index.remove(1));
    assert!(!index.remove(1));
    assert!(!index.contains(1));
    assert_eq!(index.search(&[0.0, 1.0], 5, None), vec![(2, 1.0)]);
}

#[test]
fn bad_vectors_are_refused_and_change_nothing() {
    let mut index = VectorIndex::new(
        3,
        IndexConfig {
            max_vectors: 2,
            ..IndexConfig::default()
        },
    );
    assert_eq!(
        index.insert(1, &[1.0, 0.0]),
        Err(IndexError::Dimension {
            expected: 3,
            got: 2
        })
    );
    assert_eq!(
        index.insert(1, &[f32::NAN, 0.0, 0.0]),
        Err(IndexError::NotFinite)
    );
    assert!(matches!(
        index.insert(1, &[1.0, 1.0, 0.0]),
        Err(IndexError::NotUnit { .. })
    ));
    index.insert(1, &[1.0, 0.0, 0.0]).unwrap();
    index.insert(2, &[0.0, 1.0, 0.0]).unwrap();
    assert_eq!(
        index.insert(3, &[0.0, 0.0, 1.0]),
        Err(IndexError::Full { max: 2 })
    );
    index.insert(2, &[0.0, 0.0, 1.0]).unwrap();
    assert_eq!(index.len(), 2);
    assert!(!index.contains(3));
}

#[test]
fn filters_keep_only_what_they_accept_on_both_engines() {
    let data = dataset(16, 1_000, 2);
    for config in [IndexConfig::default(), small_graph_config()] {
        let index = filled(16, &data, config);
        let q = &data[17].1;
        // a filter that keeps most keys (graph path) and one that keeps a few (exact fallback)
        let most = |k: u64| !k.is_multiple_of(5);
        let few = |k: u64| k.is_multiple_of(97);
        let none = |_: u64| false;
        let got = index.search(q, 10, Some(&most));
        assert!(got.iter().all(|h| most(h.0)));
        assert_eq!(got.len(), 10);
        assert_close(&index.search(q, 10, Some(&few)), &naive(&data, q, 10, few));
        assert!(index.search(q, 10, Some(&none)).is_empty());
        assert_close(
            &index.exact_search(q, 10, Some(&most)),
            &naive(&data, q, 10, most),
        );
    }
}

#[test]
fn the_graph_comes_and_goes_with_size_and_tombstones_trigger_a_rebuild() {
    let data = dataset(16, 400, 3);
    let mut index = filled(16, &data[..299], small_graph_config());
    assert_eq!(index.engine(), Engine::Exact);
    index.insert(data[299].0, &data[299].1).unwrap();
    assert_eq!(index.engine(), Engine::Hnsw);
    for (k, v) in &data[300..] {
        index.insert(*k, v).unwrap();
    }
    // replacing a key leaves one tombstone
    index.insert(data[0].0, &data[1].1).unwrap();
    assert_eq!(index.tombstones(), 1);
    // removals beyond 20% of the graph's points rebuild it
    for (k, _) in &data[100..180] {
        assert!(index.remove(*k));
    }
    assert!(index.tombstones() < 81, "{} tombstones", index.tombstones());
    let q = &data[5].1;
    let hits = index.search(q, 10, None);
    assert!(hits.iter().all(|h| index.contains(h.0)));
    assert_eq!(hits.len(), 10);
    // shrinking below half the threshold goes back to the exact scan
    for (k, _) in &data[180..] {
        index.remove(*k);
    }
    assert_eq!(index.engine(), Engine::Exact);
    assert_eq!(index.len(), 100);
}

#[test]
fn a_background_rebuild_answers_meanwhile_and_replays_what_changed() {
    let data = dataset(16, 600, 5);
    let config = IndexConfig {
        background_rebuild: true,
        ..small_graph_config()
    };
    let mut index = filled(16, &data[..500], config);
    assert_eq!(index.engine(), Engine::Hnsw);
    // Removals past 20% of the graph's points rebuild nothing by themselves.
    for (k, _) in &data[..120] {
        assert!(index.remove(*k));
    }
    assert_eq!(index.tombstones(), 120);
    assert!(index.needs_rebuild());
    let job = index.begin_rebuild().expect("a rebuild is due");
    assert_eq!(job.len(), 380);
    assert!(!index.needs_rebuild(), "one at a time");
    assert!(index.begin_rebuild().is_none());
    // While it builds: a new key, a replaced key, a removed key; searches still answer.
    index.insert(data[500].0, &data[500].1).unwrap();
    index.insert(data[200].0, &data[501].1).unwrap();
    assert!(index.remove(data[300].0));
    assert_eq!(index.search(&data[400].1, 10, None).len(), 10);
    let built = job.run();
    index.finish_rebuild(built);
    assert_eq!(index.engine(), Engine::Hnsw);
    // The new graph: the snapshot's tombstones gone, the changes replayed (the replaced and
    // the removed key each leave one).
    assert_eq!(index.tombstones(), 2);
    assert!(!index.needs_rebuild());
    let hits = index.search(&data[500].1, 1, None);
    assert_eq!(hits[0].0, data[500].0, "the key added meanwhile is found");
    let hits = index.search(&data[501].1, 1, None);
    assert_eq!(
        hits[0].0, data[200].0,
        "the replaced key answers with its new vector"
    );
    for (_, v) in data.iter().step_by(7) {
        let hits = index.search(v, 10, None);
        assert!(hits.iter().all(|h| index.contains(h.0)));
        assert_close(&hits, &index.exact_search(v, 10, None));
    }
}

#[test]
fn an_eager_graph_grows_from_the_first_vector_and_answers_from_the_threshold() {
    let data = dataset(16, 400, 5);
    let config = IndexConfig {
        eager_graph: true,
        ..small_graph_config()
    };
    let mut index = VectorIndex::new(16, config);
    index.insert(data[0].0, &data[0].1).unwrap();
    // The graph exists (its kernels are known) but the scan answers below the threshold.
    assert!(index.graph_kernels().is_some());
    assert_eq!(index.engine(), Engine::Exact);
    for (k, v) in &data[1..299] {
        index.insert(*k, v).unwrap();
    }
    assert_eq!(index.engine(), Engine::Exact);
    let q = &data[7].1;
    assert_close(
        &index.search(q, 10, None),
        &naive(&data[..299], q, 10, |_| true),
    );
    index.insert(data[299].0, &data[299].1).unwrap();
    assert_eq!(index.engine(), Engine::Hnsw);
    assert_eq!(index.tombstones(), 0, "no rebuild at the threshold");
    for (k, v) in &data[300..] {
        index.insert(*k, v).unwrap();
    }
    let hits = index.search(q, 10, None);
    let exact = naive(&data, q, 10, |_| true);
    let found = keys(&hits)
        .iter()
        .filter(|k| keys(&exact).contains(k))
        .count();
    assert!(found >= 9, "recall {found}/10");
    // Shrinking keeps the graph; the scan answers again below the threshold.
    for (k, _) in &data[100..] {
        index.remove(*k);
    }
    assert_eq!(index.engine(), Engine::Exact);
    assert!(index.graph_kernels().is_some());
}

#[test]
fn staged_keys_are_found_at_once_and_enter_the_graph_later() {
    let data = dataset(16, 700, 6);
    let mut index = filled(16, &data[..500], small_graph_config());
    assert_eq!(index.engine(), Engine::Hnsw);
    // New keys and a replaced key, staged: searchable at once, exactly.
    for (k, v) in &data[500..600] {
        index.stage(*k, v).unwrap();
    }
    index.stage(data[10].0, &data[650].1).unwrap();
    assert_eq!(index.staged(), 101);
    assert_eq!(
        index.tombstones(),
        1,
        "the replaced key's old node is retired at once"
    );
    for (k, v) in data[500..600].iter().step_by(9) {
        assert_eq!(index.search(v, 1, None)[0].0, *k);
    }
    let hits = index.search(&data[650].1, 1, None);
    assert_eq!(
        hits[0].0, data[10].0,
        "the replaced key answers with its new vector"
    );
    let hits = index.search(&data[10].1, 10, None);
    assert!(hits.iter().filter(|h| h.0 == data[10].0).count() <= 1);
    // Filters apply to staged keys too.
    let odd = |k: u64| k % 2 == 1;
    assert!(
        index
            .search(&data[501].1, 5, Some(&odd))
            .iter()
            .all(|h| h.0 % 2 == 1)
    );
    // A staged key removed before it is indexed is gone.
    assert!(index.remove(data[599].0));
    assert!(
        index
            .search(&data[599].1, 10, None)
            .iter()
            .all(|h| h.0 != data[599].0)
    );
    assert_eq!(index.staged(), 100);
    // Indexing drains oldest first, a bounded number per call.
    assert_eq!(index.index_staged(40), 40);
    assert_eq!(index.staged(), 60);
    while index.index_staged(16) > 0 {}
    assert_eq!(index.staged(), 0);
    let all: Vec<(u64, Vec<f32>)> = data[..599]
        .iter()
        .map(|(k, v)| {
            (
                *k,
                if *k == data[10].0 {
                    data[650].1.clone()
                } else {
                    v.clone()
                },
            )
        })
        .collect();
    for (_, v) in all.iter().step_by(13) {
        let hits = index.search(v, 10, None);
        let exact = naive(&all, v, 10, |_| true);
        let found = keys(&hits)
            .iter()
            .filter(|k| keys(&exact).contains(k))
            .count();
        assert!(found >= 9, "recall {found}/10");
    }
    // The staging set is bounded: past it the oldest goes into the graph inside `stage`.
    let config = IndexConfig {
        max_staged: 8,
        ..small_graph_config()
    };
    let mut small = filled(16, &data[..400], config);
    for (k, v) in &data[400..420] {
        small.stage(*k, v).unwrap();
        assert!(small.staged() <= 8);
    }
    assert_eq!(small.len(), 420);
}

#[test]
fn a_background_rebuild_keeps_what_was_staged_meanwhile() {
    let data = dataset(16, 700, 7);
    let config = IndexConfig {
        background_rebuild: true,
        ..small_graph_config()
    };
    let mut index = filled(16, &data[..500], config);
    for (k, _) in &data[..120] {
        assert!(index.remove(*k));
    }
    // Staged before the copy (goes into the new graph with it) and after it (stays staged).
    index.stage(data[500].0, &data[500].1).unwrap();
    let job = index.begin_rebuild().expect("a rebuild is due");
    index.stage(data[501].0, &data[501].1).unwrap();
    index.stage(data[200].0, &data[502].1).unwrap();
    index.finish_rebuild(job.run());
    assert_eq!(
        index.staged(),
        2,
        "only the keys staged after the copy wait"
    );
    assert_eq!(index.search(&data[500].1, 1, None)[0].0, data[500].0);
    assert_eq!(index.search(&data[501].1, 1, None)[0].0, data[501].0);
    assert_eq!(index.search(&data[502].1, 1, None)[0].0, data[200].0);
    while index.index_staged(16) > 0 {}
    assert_eq!(index.search(&data[502].1, 1, None)[0].0, data[200].0);
    assert_eq!(index.search(&data[501].1, 1, None)[0].0, data[501].0);
}

#[test]
fn a_deferred_load_answers_exactly_until_its_graph_is_installed() {
    let data = dataset(16, 700, 8);
    let mut index = VectorIndex::new(16, small_graph_config());
    let job = index
        .extend_deferred(data[..500].iter().map(|(k, v)| (*k, v.as_slice())))
        .unwrap()
        .expect("500 vectors want a graph");
    assert_eq!(index.engine(), Engine::Exact);
    assert_eq!(index.len(), 500);
    // Writes while it builds: no build inside them, replayed into the graph afterwards.
    index.insert(data[500].0, &data[500].1).unwrap();
    index.stage(data[501].0, &data[501].1).unwrap();
    assert!(index.remove(data[0].0));
    assert_eq!(index.engine(), Engine::Exact);
    let q = &data[7].1;
    let live: Vec<(u64, Vec<f32>)> = data[1..502].to_vec();
    assert_close(&index.search(q, 10, None), &naive(&live, q, 10, |_| true));
    index.finish_rebuild(job.run());
    assert_eq!(index.engine(), Engine::Hnsw);
    assert_eq!(index.search(&data[500].1, 1, None)[0].0, data[500].0);
    assert_eq!(index.search(&data[501].1, 1, None)[0].0, data[501].0);
    assert!(
        index
            .search(&data[0].1, 10, None)
            .iter()
            .all(|h| h.0 != data[0].0)
    );
}

#[test]
fn extend_builds_the_graph_once() {
    let data = dataset(16, 600, 4);
    let mut index = VectorIndex::new(16, small_graph_config());
    index
        .extend(data.iter().map(|(k, v)| (*k, v.as_slice())))
        .unwrap();
    assert_eq!(index.engine(), Engine::Hnsw);
    assert_eq!(index.len(), 600);
    assert_eq!(index.tombstones(), 0);
    let q = &data[42].1;
    assert_eq!(index.search(q, 1, None)[0].0, data[42].0);
    assert!(index.memory_bytes() > 600 * 16 * 4 * 2);
}

#[test]
fn the_index_can_be_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<VectorIndex>();
}

#[test]
fn more_concurrent_searches_than_graph_contexts_still_answer() {
    let data = dataset(16, 1_000, 5);
    let config = IndexConfig {
        max_concurrent_searches: 1,
        ..small_graph_config()
    };
    let index = filled(16, &data, config);
    assert_eq!(index.engine(), Engine::Hnsw);
    std::thread::scope(|s| {
        for t in 0..4 {
            let index = &index;
            let data = &data;
            s.spawn(move || {
                for (i, (_, q)) in data.iter().enumerate().skip(t).step_by(4).take(100) {
                    let hits = index.search(q, 10, None);
                    assert_eq!(hits.len(), 10, "query {i}");
                    assert!(hits.windows(2).all(|w| w[0].1 >= w[1].1));
                }
            });
        }
    });
}

/// recall@10 of the HNSW engine with the default settings at 20,000 clustered 384-d vectors.
#[test]
fn hnsw_recall_at_10_is_at_least_0_95_on_20000_clustered_vectors() {
    let dim = 384;
    let g = Generator::clustered(dim, DEFAULT_CENTRES, DEFAULT_NOISE, 11);
    let base = g.sample(20_000, 12);
    let queries = g.sample(200, 13);
    let mut index = VectorIndex::new(dim, IndexConfig::default());
    index
        .extend(
            base.chunks_exact(dim)
                .enumerate()
                .map(|(i, v)| (i as u64, v)),
        )
        .unwrap();
    assert_eq!(index.engine(), Engine::Hnsw);
    let mut hits = 0;
    for q in queries.chunks_exact(dim) {
        let truth = keys(&index.exact_search(q, 10, None));
        hits += index
            .search(q, 10, None)
            .iter()
            .filter(|h| truth.contains(&h.0))
            .count();
    }
    let recall = hits as f64 / 2_000.0;
    assert!(recall >= 0.95, "recall@10 {recall}");
}

fn unit_vectors(dim: usize, max: usize) -> impl Strategy<Value = Vec<Vec<f32>>> {
    // small integer grids make exact ties (equal vectors, equal similarities) common
    prop::collection::vec(prop::collection::vec(-2i8..=2, dim), 1..max).prop_map(|rows| {
        rows.into_iter()
            .map(|r| {
                let mut v: Vec<f32> = r.into_iter().map(f32::from).collect();
                if v.iter().all(|x| *x == 0.0) {
                    v[0] = 1.0;
                }
                normalise(&mut v);
                v
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn exact_results_are_sorted_complete_and_match_a_naive_sort(
        rows in unit_vectors(6, 80), k in 0usize..90, modulus in 1u64..5, q in 0usize..80,
    ) {
        let data: Vec<(u64, Vec<f32>)> = rows.iter().enumerate().map(|(i, v)| ((i as u64 * 7919) % 1009, v.clone())).collect();
        let data: Vec<(u64, Vec<f32>)> = {
            let mut seen = std::collections::HashSet::new();
            data.into_iter().filter(|(k, _)| seen.insert(*k)).collect()
        };
        let index = filled(6, &data, IndexConfig::default());
        let query = &rows[q % rows.len()];
        let keep = |key: u64| key.is_multiple_of(modulus);
        let got = index.search(query, k, Some(&keep));
        let want = naive(&data, query, k, keep);
        prop_assert_eq!(keys(&got), keys(&want));
        prop_assert_eq!(&got, &index.search(query, k, Some(&keep)));
    }

    #[test]
    fn graph_results_are_ordered_deterministic_and_live(
        rows in unit_vectors(8, 200), removed in prop::collection::vec(0u64..200, 0..60), q in 0usize..200,
    ) {
        let config = IndexConfig { exact_below: 40, filter_exact_below: 10, parallel_build: false, ..IndexConfig::default() };
        let mut index = VectorIndex::new(8, config);
        for (i, v) in rows.iter().enumerate() {
            index.insert(i as u64, v).unwrap();
        }
        for key in &removed {
            index.remove(*key);
        }
        let query = &rows[q % rows.len()];
        let got = index.search(query, 10, None);
        prop_assert_eq!(got.len(), index.len().min(10));
        prop_assert!(got.windows(2).all(|w| w[0].1 > w[1].1 || (w[0].1 == w[1].1 && w[0].0 < w[1].0)));
        prop_assert!(got.iter().all(|h| index.contains(h.0)));
        prop_assert_eq!(&got, &index.search(query, 10, None));
    }
}
