//! The approximate engine: an HNSW graph from the `hnsw_rs` crate over the same vectors as the
//! exact store, with removals kept as tombstones until the graph is rebuilt.
//!
//! `hnsw_rs` numbers points with a `usize` data id that it never reuses here: a replaced or
//! removed key leaves its old point in the graph, marked dead, and searches skip it. The owner
//! ([`crate::VectorIndex`]) rebuilds the graph from the exact store when the dead points pass a
//! configured fraction. The graph's distance is `1 − dot`, clamped at zero because `hnsw_rs`
//! asserts non-negative distances and rounding can push the dot product of near-identical unit
//! vectors a hair above 1. Results are re-scored by the caller with the exact store's dot
//! product, so both engines report identical similarities for the same key.

use std::collections::HashMap;
use std::fmt;

use hnsw_rs::prelude::{Distance, Hnsw};

use crate::exact::dot;

/// The HNSW layer cap (`hnsw_rs` allows at most 16).
const MAX_LAYERS: usize = 16;

/// `1 − dot` for unit vectors, never negative.
#[derive(Clone, Copy, Debug, Default)]
struct CosineDistance;

impl Distance<f32> for CosineDistance {
    fn eval(&self, a: &[f32], b: &[f32]) -> f32 {
        (1.0 - dot(a, b)).max(0.0)
    }
}

/// Graph parameters, fixed for a graph's life.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GraphParams {
    pub(crate) m: usize,
    pub(crate) ef_construction: usize,
    pub(crate) parallel: bool,
}

/// An HNSW graph with tombstones.
pub(crate) struct Ann {
    graph: Hnsw<'static, f32, CosineDistance>,
    params: GraphParams,
    dim: usize,
    /// data id → key
    keys: Vec<u64>,
    /// data id → still the key's current point
    live: Vec<bool>,
    /// key → its current data id
    ids: HashMap<u64, usize>,
    dead: usize,
}

impl fmt::Debug for Ann {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ann")
            .field("params", &self.params)
            .field("points", &self.keys.len())
            .field("dead", &self.dead)
            .finish_non_exhaustive()
    }
}

impl Ann {
    /// A graph over `items`; with `params.parallel` the points are inserted on rayon's pool.
    pub(crate) fn build<'a>(
        dim: usize,
        params: GraphParams,
        items: impl ExactSizeIterator<Item = (u64, &'a [f32])>,
    ) -> Self {
        let n = items.len();
        let graph = Hnsw::new(
            params.m,
            n.max(1),
            MAX_LAYERS,
            params.ef_construction,
            CosineDistance,
        );
        let mut ann = Self {
            graph,
            params,
            dim,
            keys: Vec::with_capacity(n),
            live: Vec::with_capacity(n),
            ids: HashMap::with_capacity(n),
            dead: 0,
        };
        let batch: Vec<(&[f32], usize)> = items
            .enumerate()
            .map(|(id, (key, v))| {
                ann.keys.push(key);
                ann.live.push(true);
                ann.ids.insert(key, id);
                (v, id)
            })
            .collect();
        if params.parallel {
            ann.graph.parallel_insert_slice(&batch);
        } else {
            for &item in &batch {
                ann.graph.insert_slice(item);
            }
        }
        ann
    }

    /// Points in the graph, dead ones included.
    pub(crate) fn points(&self) -> usize {
        self.keys.len()
    }

    pub(crate) fn dead(&self) -> usize {
        self.dead
    }

    /// Adds `vector` as `key`'s point, retiring the key's previous point.
    pub(crate) fn insert(&mut self, key: u64, vector: &[f32]) {
        self.remove(key);
        let id = self.keys.len();
        self.keys.push(key);
        self.live.push(true);
        self.ids.insert(key, id);
        self.graph.insert_slice((vector, id));
    }

    /// Retires `key`'s point; false when the key has none.
    pub(crate) fn remove(&mut self, key: u64) -> bool {
        let Some(id) = self.ids.remove(&key) else {
            return false;
        };
        self.live[id] = false;
        self.dead += 1;
        true
    }

    /// Up to `ef` live candidates near `query` that `keep` accepts, as keys, nearest first
    /// (by the graph's distance; the caller re-scores).
    pub(crate) fn candidates<'a>(
        &'a self,
        query: &[f32],
        ef: usize,
        keep: Option<&'a dyn Fn(u64) -> bool>,
    ) -> impl Iterator<Item = u64> + 'a {
        let found = self.graph.search(query, ef, ef);
        found.into_iter().filter_map(move |n| {
            let id = n.d_id;
            if !self.live.get(id).copied().unwrap_or(false) {
                return None;
            }
            let key = self.keys[id];
            match keep {
                Some(f) if !f(key) => None,
                _ => Some(key),
            }
        })
    }

    /// An estimate of the bytes the graph holds: its own copy of every vector, the layer-0
    /// neighbour lists (up to `2·M` entries, each an `Arc` to a heap record) and per-point
    /// bookkeeping.
    pub(crate) fn memory_bytes(&self) -> usize {
        let per_point = self.dim * 4 + 2 * self.params.m * 40 + 200;
        self.keys.len() * per_point
            + self.keys.capacity() * 8
            + self.live.capacity()
            + self.ids.capacity() * 17
    }
}
