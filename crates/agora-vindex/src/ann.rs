//! The approximate engine: an HNSW graph from the `usearch` crate (C++ USearch with NumKong's
//! run-time dispatched SIMD kernels, built by cargo with the system C++ compiler) over the same
//! vectors as the exact store.
//!
//! USearch keys are our `u64` keys. A removed or replaced key's node stays in the graph as a
//! tombstone that searches step through but never return; the owner
//! ([`crate::VectorIndex`]) rebuilds the graph from the exact store when tombstones pass a
//! configured fraction. The metric is inner product (USearch's distance is `1 − dot`); hits are
//! re-scored by the caller with the exact store's dot product, so both engines report identical
//! similarities for the same key.
//!
//! USearch serves concurrent searches from a fixed set of per-thread contexts reserved here
//! ([`GraphParams::contexts`]); a search that finds every context busy fails, and the caller
//! answers it with the exact scan instead.

use std::fmt;
use std::num::NonZeroUsize;

use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

/// Graph parameters, fixed for a graph's life (except `ef_search`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct GraphParams {
    pub(crate) m: usize,
    pub(crate) ef_construction: usize,
    pub(crate) ef_search: usize,
    pub(crate) parallel: bool,
    pub(crate) contexts: usize,
    /// The graph keeps its vectors as f16 (half the memory read per visited node); hits are
    /// re-scored from the exact store's f32 vectors anyway.
    pub(crate) f16: bool,
}

/// An HNSW graph with tombstones.
pub(crate) struct Ann {
    index: Index,
    params: GraphParams,
    /// Nodes ever added since the build, dead ones included.
    points: usize,
    dead: usize,
}

impl fmt::Debug for Ann {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ann")
            .field("params", &self.params)
            .field("points", &self.points)
            .field("dead", &self.dead)
            .finish_non_exhaustive()
    }
}

fn engine_error(e: impl fmt::Display) -> String {
    format!("usearch: {e}")
}

impl Ann {
    /// A graph over `items`; with `params.parallel` the points are added from one scoped thread
    /// per available core.
    pub(crate) fn build<'a>(
        dim: usize,
        params: GraphParams,
        items: impl ExactSizeIterator<Item = (u64, &'a [f32])>,
    ) -> Result<Self, String> {
        let options = IndexOptions {
            dimensions: dim,
            metric: MetricKind::IP,
            quantization: if params.f16 {
                ScalarKind::F16
            } else {
                ScalarKind::F32
            },
            connectivity: params.m,
            expansion_add: params.ef_construction,
            expansion_search: params.ef_search,
            multi: false,
        };
        let index = Index::new(&options).map_err(engine_error)?;
        let n = items.len();
        let threads = if params.parallel {
            std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
        } else {
            1
        };
        index
            .reserve_capacity_and_threads(n.max(1024), params.contexts.max(threads))
            .map_err(engine_error)?;
        let items: Vec<(u64, &[f32])> = items.collect();
        let chunk = n.div_ceil(threads).max(1);
        let added: Result<(), String> = std::thread::scope(|s| {
            let workers: Vec<_> = items
                .chunks(chunk)
                .map(|part| {
                    let index = &index;
                    s.spawn(move || {
                        part.iter()
                            .try_for_each(|(key, v)| index.add(*key, v).map_err(engine_error))
                    })
                })
                .collect();
            workers.into_iter().try_for_each(|w| {
                w.join()
                    .map_err(|_| "usearch: a build thread panicked".to_string())?
            })
        });
        added?;
        Ok(Self {
            index,
            params,
            points: n,
            dead: 0,
        })
    }

    /// Nodes in the graph, dead ones included.
    pub(crate) fn points(&self) -> usize {
        self.points
    }

    pub(crate) fn dead(&self) -> usize {
        self.dead
    }

    pub(crate) fn set_ef_search(&mut self, ef: usize) {
        self.params.ef_search = ef;
        self.index.change_expansion_search(ef);
    }

    /// Adds `vector` as `key`'s node, retiring the key's previous node.
    pub(crate) fn insert(&mut self, key: u64, vector: &[f32]) -> Result<(), String> {
        self.remove(key)?;
        let needed = self.index.size() + 1;
        if needed > self.index.capacity() {
            let capacity = (self.index.capacity() * 2).max(needed);
            self.index
                .reserve_capacity_and_threads(capacity, self.params.contexts)
                .map_err(engine_error)?;
        }
        self.index.add(key, vector).map_err(engine_error)?;
        self.points += 1;
        Ok(())
    }

    /// Retires `key`'s node, if it has one.
    pub(crate) fn remove(&mut self, key: u64) -> Result<(), String> {
        let removed = self.index.remove(key).map_err(engine_error)?;
        self.dead += removed;
        Ok(())
    }

    /// Up to `k` live keys near `query` that `keep` accepts, nearest first (by the graph's
    /// distance; the caller re-scores).
    pub(crate) fn search(
        &self,
        query: &[f32],
        k: usize,
        keep: Option<&dyn Fn(u64) -> bool>,
    ) -> Result<Vec<u64>, String> {
        let found = match keep {
            None => self.index.search(query, k),
            Some(f) => self.index.filtered_search(query, k, f),
        };
        found.map(|m| m.keys).map_err(engine_error)
    }

    /// The graph's own count of the bytes it holds (vectors, neighbour lists, contexts).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.index.memory_usage()
    }

    /// The SIMD kernels USearch picked on this machine (e.g. `skylake`, `haswell`, `serial`).
    pub(crate) fn kernels(&self) -> String {
        self.index.hardware_acceleration()
    }
}
