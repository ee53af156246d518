//! # agora-vindex — the vector index behind Hyperspace Memory's semantic search
//!
//! [`VectorIndex`] maps caller-chosen `u64` keys to unit-length `f32` vectors of one dimension
//! and answers top-k searches by cosine similarity (a dot product, since the vectors are unit
//! length). Results are ordered by similarity descending, then key ascending, so a search over an
//! unchanged index always returns the same list.
//!
//! ## Two engines under one type
//! - **Exact scan** ([`exact`](crate::VectorIndex::exact_search)): every vector in one
//!   contiguous `Vec<f32>`, a SIMD dot product chosen at run time (AVX2+FMA, NEON or scalar,
//!   through `pulp`, no `unsafe` here) and a bounded top-k heap. Used below
//!   [`IndexConfig::exact_below`] vectors, for filters that keep few keys, and always by
//!   [`VectorIndex::exact_search`].
//! - **HNSW** from the `usearch` crate (USearch, C++ compiled by cargo through `cxx`, with
//!   NumKong's SIMD kernels chosen at run time), built once the index reaches
//!   [`IndexConfig::exact_below`] vectors (or, with [`IndexConfig::eager_graph`], grown from
//!   the first vector while the scan still answers below it) and grown by incremental inserts
//!   after that. A removed
//!   or replaced key leaves a tombstone in the graph that searches step through but never
//!   return; the graph is rebuilt from the exact store when tombstones pass
//!   [`IndexConfig::rebuild_fraction`] of its nodes, and dropped when the index shrinks below
//!   half of `exact_below`. If the engine ever fails (an allocation refused, every search context
//!   busy), the exact scan answers instead and [`VectorIndex::engine_error`] says why.
//!
//! ## Staged inserts
//! [`VectorIndex::stage`] stores a vector in the exact store only and leaves its graph insert
//! for a later [`VectorIndex::index_staged`]: a writer that must answer quickly (a replica
//! acknowledging a write) pays a copy, not a graph insert, and the owner moves the staged keys
//! into the graph afterwards, a few at a time. Until then searches scan the staged keys exactly
//! and merge them with the graph's hits, so a staged key is found at once. At most
//! [`IndexConfig::max_staged`] keys wait; staging one more first indexes the oldest.
//!
//! ## Filters
//! A filter keeps the keys for which it returns true. On the HNSW engine the index first
//! estimates how many keys the filter keeps by calling it on up to 256 evenly spaced keys; when
//! the estimate is below [`IndexConfig::filter_exact_below`] it scans exactly the kept keys
//! (calling the filter once per key, with a dot product only for kept ones). Otherwise the graph
//! search applies the filter while it walks (USearch's filtered search); if that yields fewer
//! than `k` hits the exact scan answers instead. The filter must be a pure function of the key
//! during one call.
//!
//! ## Bounds, threads, cost
//! - An index holds at most [`IndexConfig::max_vectors`] keys (default 500,000); inserting a new
//!   key into a full index fails with [`IndexError::Full`] and changes nothing (replacing an
//!   existing key always works). At 384 dimensions a vector costs about 1.6 KB in the exact store
//!   plus about 2 KB in the graph (its own copy of the vector and the neighbour lists), so the
//!   default bound is under 2 GB; [`VectorIndex::memory_bytes`] gives the figure for the current
//!   contents.
//! - A search runs on the calling thread and takes `&self`: callers share an index behind a
//!   `RwLock` and parallelise across searches, at most
//!   [`IndexConfig::max_concurrent_searches`] at once on the graph (more fall back to the exact
//!   scan). Graph builds (reaching `exact_below`, a tombstone rebuild, [`VectorIndex::rebuild`],
//!   [`VectorIndex::extend`]) run inside the `&mut self` call that causes them, on one scoped
//!   thread per core unless [`IndexConfig::parallel_build`] is false; a build of 100,000 vectors
//!   took 2–4 minutes on the project's shared two-core machine, an incremental insert a few
//!   milliseconds. With [`IndexConfig::background_rebuild`] the tombstone rebuild leaves the
//!   call: the owner builds from a copy on a thread of its own while searches use the old graph,
//!   and the changes made meanwhile are replayed into the new one when it is installed.
//! - Sans IO: nothing is persisted; the owner rebuilds the index from its store at start.
//!
//! [`synth`] makes the seeded synthetic vectors the tests and the benchmark use.
#![warn(missing_docs)]

mod ann;
mod exact;
pub mod synth;

use ann::{Ann, GraphParams};
use exact::{FlatStore, Ranked, TopK, dot};

/// How far a stored vector's squared norm may stray from 1.
const UNIT_TOLERANCE: f32 = 1e-3;

/// Keys sampled to estimate how many keys a filter keeps.
const FILTER_SAMPLE: usize = 256;

/// Index settings. The defaults were chosen by measurement (`cargo bench -p agora-vindex`, see
/// `docs/performance.md`).
#[derive(Clone, Debug, PartialEq)]
pub struct IndexConfig {
    /// Below this many vectors searches scan exactly; at it the HNSW graph is built. Default
    /// 20,000: the measured crossover is near 10,000 (both about 0.35 ms), and up to 20,000 the
    /// scan stays under 1.5 ms with exact results and no graph to build or hold.
    pub exact_below: usize,
    /// Keys the index may hold; a new key beyond it is refused with [`IndexError::Full`].
    pub max_vectors: usize,
    /// HNSW `M`: neighbours kept per point and layer (layer 0 keeps `2·M`). Clamped to 4..=128.
    /// Default 32: on the clustered 100,000 × 384 benchmark set it reaches recall@10 0.9996 at
    /// ef 40, where M 16 needed ef 96 for 0.998–1.0 (its recall stalls near 0.996 from ef 44 to
    /// 80); the graph holds about 0.3 KB more per vector and builds in 1.6× the time.
    pub m: usize,
    /// Candidate list size while inserting into the graph (at least `m`).
    pub ef_construction: usize,
    /// Candidate list size while searching (at least `k`). Default 48: recall@10 0.9998 on the
    /// clustered 100,000 × 384 benchmark set with M 32 (32 gives 0.997, 16 gives 0.956).
    pub ef_search: usize,
    /// A filtered search whose kept keys are estimated below this count scans them exactly.
    pub filter_exact_below: usize,
    /// The graph is rebuilt when its dead points exceed this fraction of all its points.
    pub rebuild_fraction: f32,
    /// Whether graph builds insert from one thread per core.
    pub parallel_build: bool,
    /// Concurrent searches the graph serves (USearch reserves a context for each).
    pub max_concurrent_searches: usize,
    /// Grow the graph from the first vector by incremental inserts (a few milliseconds each),
    /// still answering exactly below `exact_below`, so that reaching `exact_below` costs no
    /// build inside an insert (a bulk build of 20,000 vectors stalls that insert for about 20 s
    /// on two cores). The graph is then never dropped for shrinking. Default false.
    pub eager_graph: bool,
    /// Tombstone rebuilds are left to the owner, off the index's lock: inserts and removes never
    /// rebuild; [`VectorIndex::needs_rebuild`] says when one is due, and the owner runs
    /// [`VectorIndex::begin_rebuild`], [`GraphBuild::run`] (on a thread of its own, the index
    /// still answering from the old graph) and [`VectorIndex::finish_rebuild`]. Default false.
    pub background_rebuild: bool,
    /// The graph keeps its vectors as f16 (half the memory a search reads per visited node);
    /// results are re-scored with the exact store's f32 vectors, so similarities stay exact.
    /// Default true: at 100,000 MiniLM-like vectors it searched 1.3–1.5× faster at the same
    /// ef with equal or better recall, built in half the time and held 27 % less memory
    /// (`docs/performance.md` "Vector index").
    pub graph_f16: bool,
    /// Keys [`VectorIndex::stage`] may hold outside the graph at once; staging one more first
    /// puts the oldest staged key into the graph inside that call. Default 4,096 (an exact scan
    /// of them costs about 0.4 ms per search at 384 dimensions).
    pub max_staged: usize,
}

impl Default for IndexConfig {
    fn default() -> Self {
        Self {
            exact_below: 20_000,
            max_vectors: 500_000,
            m: 32,
            ef_construction: 100,
            ef_search: 48,
            filter_exact_below: 20_000,
            rebuild_fraction: 0.2,
            parallel_build: true,
            max_concurrent_searches: 64,
            eager_graph: false,
            background_rebuild: false,
            graph_f16: true,
            max_staged: 4096,
        }
    }
}

/// A graph rebuild taken out of an index ([`VectorIndex::begin_rebuild`]): a copy of its
/// vectors and the graph parameters. [`run`](Self::run) builds the graph without the index.
pub struct GraphBuild {
    dim: usize,
    params: GraphParams,
    items: Vec<(u64, Vec<f32>)>,
}

impl std::fmt::Debug for GraphBuild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphBuild")
            .field("vectors", &self.items.len())
            .finish_non_exhaustive()
    }
}

impl GraphBuild {
    /// Vectors to build from.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there is nothing to build from.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Builds the graph (the long part: seconds to minutes at 100,000 vectors).
    pub fn run(self) -> BuiltGraph {
        let ann = Ann::build(
            self.dim,
            self.params,
            self.items.iter().map(|(k, v)| (*k, v.as_slice())),
        );
        BuiltGraph { ann }
    }
}

/// A graph built by [`GraphBuild::run`], for [`VectorIndex::finish_rebuild`].
pub struct BuiltGraph {
    ann: Result<Ann, String>,
}

impl std::fmt::Debug for BuiltGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltGraph")
            .field("ok", &self.ann.is_ok())
            .finish_non_exhaustive()
    }
}

/// Keys changed since a background rebuild's copy was taken; `None` once more changed than
/// the index holds (the build is then thrown away and another becomes due).
#[derive(Debug, Default)]
struct Journal {
    changed: Option<std::collections::HashSet<u64>>,
}

/// Why a vector was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum IndexError {
    /// The vector's length is not the index's dimension.
    #[error("vector has {got} dimensions, the index holds {expected}")]
    Dimension {
        /// The index's dimension.
        expected: usize,
        /// The vector's length.
        got: usize,
    },
    /// A component is NaN or infinite.
    #[error("vector has a non-finite component")]
    NotFinite,
    /// The vector is not unit length (cosine needs normalised vectors).
    #[error("vector is not unit length (norm {norm})")]
    NotUnit {
        /// The vector's L2 norm.
        norm: f32,
    },
    /// The index holds `max` keys already.
    #[error("index is full ({max} vectors)")]
    Full {
        /// [`IndexConfig::max_vectors`].
        max: usize,
    },
}

/// Which engine answers [`VectorIndex::search`] without a filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// The exact scan.
    Exact,
    /// The HNSW graph.
    Hnsw,
}

/// Unit vectors under `u64` keys, searched by cosine similarity (see the crate documentation).
#[derive(Debug)]
pub struct VectorIndex {
    dim: usize,
    config: IndexConfig,
    flat: FlatStore,
    ann: Option<Ann>,
    engine_error: Option<String>,
    /// A background rebuild in progress ([`IndexConfig::background_rebuild`]).
    journal: Option<Journal>,
    /// Keys stored in the exact store but not yet in the graph ([`VectorIndex::stage`]),
    /// oldest (lowest) first; searches scan them exactly beside the graph.
    staged: std::collections::BTreeSet<u64>,
}

impl VectorIndex {
    /// An empty index of `dim`-dimensional vectors. Out-of-range settings are clamped (see
    /// [`IndexConfig`]).
    pub fn new(dim: usize, config: IndexConfig) -> Self {
        let mut config = config;
        config.m = config.m.clamp(4, 128);
        config.ef_construction = config.ef_construction.max(config.m);
        config.ef_search = config.ef_search.max(1);
        config.exact_below = config.exact_below.max(1);
        config.rebuild_fraction = config.rebuild_fraction.clamp(0.01, 1.0);
        config.max_concurrent_searches = config.max_concurrent_searches.max(1);
        config.max_staged = config.max_staged.max(1);
        Self {
            dim,
            config,
            flat: FlatStore::new(dim),
            ann: None,
            engine_error: None,
            journal: None,
            staged: std::collections::BTreeSet::new(),
        }
    }

    /// The dimension of the stored vectors.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The settings in force (after clamping).
    pub fn config(&self) -> &IndexConfig {
        &self.config
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.flat.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.flat.len() == 0
    }

    /// Whether `key` is held.
    pub fn contains(&self, key: u64) -> bool {
        self.flat.contains(key)
    }

    /// The vector stored under `key`.
    pub fn get(&self, key: u64) -> Option<&[f32]> {
        self.flat.get(key)
    }

    /// The engine an unfiltered search uses now.
    pub fn engine(&self) -> Engine {
        if self.ann.is_some() && !self.exact_while_eager() {
            Engine::Hnsw
        } else {
            Engine::Exact
        }
    }

    /// Dead nodes waiting in the graph for the next rebuild (0 on the exact engine).
    pub fn tombstones(&self) -> usize {
        self.ann.as_ref().map_or(0, Ann::dead)
    }

    /// Why the graph engine was given up, if it was: searches then scan exactly until
    /// [`rebuild`](Self::rebuild) succeeds.
    pub fn engine_error(&self) -> Option<&str> {
        self.engine_error.as_deref()
    }

    /// The SIMD kernels the graph engine picked on this machine (e.g. `skylake`, `haswell`),
    /// when there is a graph.
    pub fn graph_kernels(&self) -> Option<String> {
        self.ann.as_ref().map(Ann::kernels)
    }

    /// Sets the HNSW `ef` used by searches from now on (at least 1).
    pub fn set_ef_search(&mut self, ef: usize) {
        self.config.ef_search = ef.max(1);
        if let Some(ann) = &mut self.ann {
            ann.set_ef_search(self.config.ef_search);
        }
    }

    /// The bytes held: the exact store (by capacity) plus the graph's own count.
    pub fn memory_bytes(&self) -> usize {
        self.flat.memory_bytes() + self.ann.as_ref().map_or(0, Ann::memory_bytes)
    }

    /// Checks that `vector` could be stored: the right length, finite, unit length within 1e-3
    /// of squared norm.
    pub fn check(&self, vector: &[f32]) -> Result<(), IndexError> {
        if vector.len() != self.dim {
            return Err(IndexError::Dimension {
                expected: self.dim,
                got: vector.len(),
            });
        }
        if !vector.iter().all(|x| x.is_finite()) {
            return Err(IndexError::NotFinite);
        }
        let sq: f32 = vector.iter().map(|x| x * x).sum();
        if (sq - 1.0).abs() > UNIT_TOLERANCE {
            return Err(IndexError::NotUnit { norm: sq.sqrt() });
        }
        Ok(())
    }

    /// Refuses a new key when the index is full.
    fn check_room(&self, key: u64) -> Result<(), IndexError> {
        if !self.flat.contains(key) && self.flat.len() >= self.config.max_vectors {
            return Err(IndexError::Full {
                max: self.config.max_vectors,
            });
        }
        Ok(())
    }

    /// An eager graph is kept below `exact_below`, where the exact scan still answers.
    fn exact_while_eager(&self) -> bool {
        self.config.eager_graph && self.flat.len() < self.config.exact_below
    }

    /// Whether the index holds enough vectors for a graph.
    fn wants_graph(&self) -> bool {
        if self.config.eager_graph {
            self.flat.len() > 0
        } else {
            self.flat.len() >= self.config.exact_below
        }
    }

    /// Stores `vector` under `key`, replacing the key's previous vector. May build or rebuild
    /// the HNSW graph (see the crate documentation); on error nothing changes.
    pub fn insert(&mut self, key: u64, vector: &[f32]) -> Result<(), IndexError> {
        self.check(vector)?;
        self.check_room(key)?;
        self.flat.upsert(key, vector);
        self.note(key);
        let wants_graph = self.wants_graph() && self.engine_error.is_none();
        match &mut self.ann {
            Some(ann) => match ann.insert(key, vector) {
                Ok(()) => self.maybe_rebuild(),
                Err(e) => self.give_up_graph(e),
            },
            // A graph being built apart (`begin_rebuild`) gets this key replayed into it.
            None if wants_graph && self.journal.is_none() => self.rebuild(),
            None => {}
        }
        Ok(())
    }

    /// Stores `vector` under `key` like [`insert`](Self::insert), but leaves the graph insert
    /// (milliseconds at 100,000 vectors) for a later [`index_staged`](Self::index_staged): the
    /// key is searchable at once (searches scan the staged keys exactly beside the graph) and the
    /// call costs a copy into the exact store. The key's previous graph node, if any, is retired
    /// now. Without a graph this is [`insert`](Self::insert). At most
    /// [`IndexConfig::max_staged`] keys wait: beyond it the oldest is put into the graph first.
    pub fn stage(&mut self, key: u64, vector: &[f32]) -> Result<(), IndexError> {
        if self.ann.is_none() {
            return self.insert(key, vector);
        }
        self.check(vector)?;
        self.check_room(key)?;
        if self.staged.len() >= self.config.max_staged && !self.staged.contains(&key) {
            self.index_staged(1);
        }
        self.flat.upsert(key, vector);
        self.note(key);
        if let Some(ann) = &mut self.ann {
            match ann.remove(key) {
                Ok(()) => {
                    self.staged.insert(key);
                    self.maybe_rebuild();
                }
                Err(e) => self.give_up_graph(e),
            }
        }
        Ok(())
    }

    /// Whether a graph is being built apart ([`begin_rebuild`](Self::begin_rebuild) or
    /// [`extend_deferred`](Self::extend_deferred)) and not yet installed.
    pub fn building(&self) -> bool {
        self.journal.is_some()
    }

    /// Staged keys waiting for the graph.
    pub fn staged(&self) -> usize {
        self.staged.len()
    }

    /// Puts up to `max` staged keys into the graph, oldest first; returns how many it took
    /// from the staging set.
    pub fn index_staged(&mut self, max: usize) -> usize {
        let mut done = 0;
        while done < max {
            let Some(key) = self.staged.pop_first() else {
                break;
            };
            done += 1;
            let (Some(ann), Some(v)) = (self.ann.as_mut(), self.flat.get(key)) else {
                continue;
            };
            if let Err(e) = ann.insert(key, v) {
                self.give_up_graph(e);
                break;
            }
            self.maybe_rebuild();
        }
        done
    }

    /// Stores many vectors at once: like [`insert`](Self::insert) for each, but a graph needed at
    /// the end is built once with all of them (the fast way to load an index at start). Stops
    /// at the first refused vector, with the vectors before it stored.
    pub fn extend<'a>(
        &mut self,
        items: impl IntoIterator<Item = (u64, &'a [f32])>,
    ) -> Result<(), IndexError> {
        let mut result = Ok(());
        for (key, vector) in items {
            result = self.check(vector).and_then(|()| self.check_room(key));
            if result.is_err() {
                break;
            }
            self.flat.upsert(key, vector);
        }
        if self.ann.is_some() || self.wants_graph() {
            self.rebuild();
        }
        result
    }

    /// Stores many vectors at once like [`extend`](Self::extend), but leaves the graph to the
    /// caller: returns the build to run (on a thread of its own) and hand to
    /// [`finish_rebuild`](Self::finish_rebuild), or `None` when no graph is wanted. Until then
    /// searches scan exactly, and writes meanwhile are replayed into the graph when it is
    /// installed. The way to load a large index at start without waiting for its graph.
    pub fn extend_deferred<'a>(
        &mut self,
        items: impl IntoIterator<Item = (u64, &'a [f32])>,
    ) -> Result<Option<GraphBuild>, IndexError> {
        for (key, vector) in items {
            self.check(vector)?;
            self.check_room(key)?;
            self.flat.upsert(key, vector);
        }
        self.ann = None;
        self.staged.clear();
        self.journal = None;
        Ok(self.begin_rebuild())
    }

    /// Removes `key`; false when it was not held.
    pub fn remove(&mut self, key: u64) -> bool {
        if !self.flat.remove(key) {
            return false;
        }
        self.staged.remove(&key);
        self.note(key);
        if let Some(ann) = &mut self.ann {
            if let Err(e) = ann.remove(key) {
                self.give_up_graph(e);
            } else if !self.config.eager_graph && self.flat.len() < self.config.exact_below / 2 {
                self.ann = None;
            } else {
                self.maybe_rebuild();
            }
        }
        true
    }

    /// Rebuilds the graph from the exact store (dropping every tombstone), or drops it when the
    /// index is below [`IndexConfig::exact_below`] (empty, with [`IndexConfig::eager_graph`]).
    pub fn rebuild(&mut self) {
        self.ann = None;
        self.staged.clear();
        if !self.wants_graph() {
            return;
        }
        match Ann::build(self.dim, self.graph_params(), self.flat.iter()) {
            Ok(ann) => {
                self.ann = Some(ann);
                self.engine_error = None;
            }
            Err(e) => self.give_up_graph(e),
        }
    }

    /// Drops the graph after an engine failure; the exact scan serves until a rebuild succeeds.
    fn give_up_graph(&mut self, error: String) {
        self.ann = None;
        self.staged.clear();
        self.engine_error = Some(error);
    }

    fn maybe_rebuild(&mut self) {
        if !self.config.background_rebuild && self.tombstones_due() {
            self.rebuild();
        }
    }

    /// Whether the graph's dead nodes passed the rebuild fraction.
    fn tombstones_due(&self) -> bool {
        self.ann.as_ref().is_some_and(|ann| {
            ann.dead() as f32 > self.config.rebuild_fraction * ann.points() as f32
        })
    }

    /// Records a changed key for the background rebuild in progress.
    fn note(&mut self, key: u64) {
        let limit = self.flat.len().max(1024);
        if let Some(Journal { changed }) = &mut self.journal
            && let Some(c) = changed
        {
            c.insert(key);
            if c.len() > limit {
                *changed = None;
            }
        }
    }

    /// With [`IndexConfig::background_rebuild`]: whether a tombstone rebuild is due and none is
    /// in progress.
    pub fn needs_rebuild(&self) -> bool {
        self.journal.is_none() && self.tombstones_due()
    }

    /// Takes a copy of the vectors to rebuild the graph from and starts recording the keys
    /// changed from now on; `None` when a rebuild is already in progress or the index wants no
    /// graph. The copy costs a memcpy of the vectors (about 150 MB at 100,000 × 384).
    pub fn begin_rebuild(&mut self) -> Option<GraphBuild> {
        if self.journal.is_some() || !self.wants_graph() {
            return None;
        }
        self.journal = Some(Journal {
            changed: Some(std::collections::HashSet::new()),
        });
        Some(GraphBuild {
            dim: self.dim,
            params: self.graph_params(),
            items: self.flat.iter().map(|(k, v)| (k, v.to_vec())).collect(),
        })
    }

    /// Installs a graph built from [`begin_rebuild`](Self::begin_rebuild)'s copy: the keys
    /// changed since are replayed into it (inserted again or removed), then it replaces the old
    /// graph. A build that failed leaves the exact scan answering ([`engine_error`](
    /// Self::engine_error)); one overtaken by more changes than the index holds is dropped (the
    /// old graph stays, and the next rebuild is due at once).
    pub fn finish_rebuild(&mut self, built: BuiltGraph) {
        let Some(Journal { changed }) = self.journal.take() else {
            return;
        };
        let Some(changed) = changed else {
            return;
        };
        if !self.wants_graph() {
            return;
        }
        let mut ann = match built.ann {
            Ok(ann) => ann,
            Err(e) => return self.give_up_graph(e),
        };
        for &key in &changed {
            // A key staged since the copy stays staged (and out of the new graph).
            let replayed = match self.flat.get(key) {
                Some(v) if !self.staged.contains(&key) => ann.insert(key, v),
                _ => ann.remove(key),
            };
            if let Err(e) = replayed {
                return self.give_up_graph(e);
            }
        }
        // Keys staged before the copy and unchanged since are in the new graph as they are.
        self.staged.retain(|k| changed.contains(k));
        self.ann = Some(ann);
        self.engine_error = None;
    }

    /// Ends a background rebuild whose build could not run (its thread did not start).
    pub fn abandon_rebuild(&mut self) {
        self.journal = None;
    }

    fn graph_params(&self) -> GraphParams {
        GraphParams {
            m: self.config.m,
            ef_construction: self.config.ef_construction,
            ef_search: self.config.ef_search,
            parallel: self.config.parallel_build,
            contexts: self.config.max_concurrent_searches,
            f16: self.config.graph_f16,
        }
    }

    /// The `k` keys most similar to `query` that `filter` keeps, with their similarities,
    /// ordered by similarity descending then key ascending. Approximate on the HNSW engine;
    /// empty when `query` does not have the index's dimension.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        filter: Option<&dyn Fn(u64) -> bool>,
    ) -> Vec<(u64, f32)> {
        if k == 0 || query.len() != self.dim {
            return Vec::new();
        }
        let Some(ann) = self.ann.as_ref().filter(|_| !self.exact_while_eager()) else {
            return self.flat.search(query, k, filter);
        };
        if let Some(keep) = filter
            && self.estimate_kept(keep) < self.config.filter_exact_below
        {
            return self.flat.search(query, k, filter);
        }
        // Ask the graph for twice as many candidates (still within its `ef` list, so almost
        // free) and keep the best `k` by the exact dot product: near-ties that the graph's own
        // distances (f16 with `graph_f16`) order wrongly are not lost.
        let wanted = (2 * k).max(k + 8).min(self.config.ef_search.max(k));
        if let Ok(keys) = ann.search(query, wanted, filter) {
            let mut top = TopK::new(k);
            // Staged keys are scanned exactly; the graph may still hold an older copy of one.
            for key in keys.into_iter().filter(|key| !self.staged.contains(key)) {
                if let Some(v) = self.flat.get(key) {
                    top.offer(Ranked {
                        score: dot(query, v),
                        key,
                    });
                }
            }
            for &key in &self.staged {
                if filter.is_some_and(|keep| !keep(key)) {
                    continue;
                }
                if let Some(v) = self.flat.get(key) {
                    top.offer(Ranked {
                        score: dot(query, v),
                        key,
                    });
                }
            }
            if top.len() >= k.min(self.flat.len()) {
                return top.into_sorted();
            }
        }
        self.flat.search(query, k, filter)
    }

    /// The exact `k` nearest keys (same contract as [`search`](Self::search)), always by a scan.
    pub fn exact_search(
        &self,
        query: &[f32],
        k: usize,
        filter: Option<&dyn Fn(u64) -> bool>,
    ) -> Vec<(u64, f32)> {
        if query.len() != self.dim {
            return Vec::new();
        }
        self.flat.search(query, k, filter)
    }

    /// How many keys `keep` accepts, estimated from up to [`FILTER_SAMPLE`] evenly spaced keys.
    fn estimate_kept(&self, keep: &dyn Fn(u64) -> bool) -> usize {
        let n = self.flat.len();
        let samples = n.min(FILTER_SAMPLE);
        if samples == 0 {
            return 0;
        }
        let kept = (0..samples)
            .filter(|i| keep(self.flat.key_at(i * n / samples)))
            .count();
        kept * n / samples
    }
}
