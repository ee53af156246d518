//! The exact engine: every vector in one contiguous `Vec<f32>`, a key ↔ slot map, the SIMD dot
//! product and the bounded top-k selection that both engines rank their hits with.
//!
//! The dot product runs through `pulp`, which picks AVX2+FMA (or NEON) at run time and falls back
//! to scalar code elsewhere, with no `unsafe` in this crate. Removal swaps the last slot into the
//! freed one, so the store stays dense and a scan touches only live vectors.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use pulp::{Arch, Simd, WithSimd};

/// Dot product of two equal-length slices (cosine similarity for unit vectors).
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    Arch::new().dispatch(Dot { a, b })
}

struct Dot<'a> {
    a: &'a [f32],
    b: &'a [f32],
}

impl WithSimd for Dot<'_> {
    type Output = f32;

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> f32 {
        dot_with(simd, self.a, self.b)
    }
}

/// The dot product inside an already chosen SIMD context: four independent accumulators so the
/// fused multiply-adds pipeline instead of waiting on one another.
#[inline(always)]
fn dot_with<S: Simd>(simd: S, a: &[f32], b: &[f32]) -> f32 {
    let (a_head, a_tail) = S::as_simd_f32s(a);
    let (b_head, b_tail) = S::as_simd_f32s(b);
    let zero = simd.splat_f32s(0.0);
    let mut acc = [zero; 4];
    let (a4, a_rest) = a_head.as_chunks::<4>();
    let (b4, b_rest) = b_head.as_chunks::<4>();
    for (x, y) in a4.iter().zip(b4) {
        for i in 0..4 {
            acc[i] = simd.mul_add_f32s(x[i], y[i], acc[i]);
        }
    }
    for (x, y) in a_rest.iter().zip(b_rest) {
        acc[0] = simd.mul_add_f32s(*x, *y, acc[0]);
    }
    let sum = simd.add_f32s(simd.add_f32s(acc[0], acc[1]), simd.add_f32s(acc[2], acc[3]));
    let mut total = simd.reduce_sum_f32s(sum);
    for (x, y) in a_tail.iter().zip(b_tail) {
        total += x * y;
    }
    total
}

/// A hit while ranking: ordered so that `a < b` means `a` ranks before `b` (higher score, then
/// lower key). A max-heap of hits therefore keeps the worst kept hit on top.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ranked {
    pub(crate) score: f32,
    pub(crate) key: u64,
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then(self.key.cmp(&other.key))
    }
}

/// The best `k` hits offered to it, in memory `O(k)`.
#[derive(Debug)]
pub(crate) struct TopK {
    k: usize,
    heap: BinaryHeap<Ranked>,
}

impl TopK {
    pub(crate) fn new(k: usize) -> Self {
        Self {
            k,
            heap: BinaryHeap::with_capacity(k.min(4096) + 1),
        }
    }

    pub(crate) fn offer(&mut self, hit: Ranked) {
        if self.heap.len() < self.k {
            self.heap.push(hit);
        } else if let Some(mut worst) = self.heap.peek_mut()
            && hit < *worst
        {
            *worst = hit;
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// The kept hits, best first.
    pub(crate) fn into_sorted(self) -> Vec<(u64, f32)> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|h| (h.key, h.score))
            .collect()
    }
}

/// Every live vector, densely packed, with its key.
#[derive(Debug)]
pub(crate) struct FlatStore {
    dim: usize,
    data: Vec<f32>,
    keys: Vec<u64>,
    slots: HashMap<u64, usize>,
}

impl FlatStore {
    pub(crate) fn new(dim: usize) -> Self {
        Self {
            dim,
            data: Vec::new(),
            keys: Vec::new(),
            slots: HashMap::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    pub(crate) fn contains(&self, key: u64) -> bool {
        self.slots.contains_key(&key)
    }

    pub(crate) fn get(&self, key: u64) -> Option<&[f32]> {
        self.slots.get(&key).map(|&slot| self.row(slot))
    }

    pub(crate) fn row(&self, slot: usize) -> &[f32] {
        &self.data[slot * self.dim..(slot + 1) * self.dim]
    }

    pub(crate) fn key_at(&self, slot: usize) -> u64 {
        self.keys[slot]
    }

    /// Every `(key, vector)` pair, in slot order.
    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = (u64, &[f32])> {
        self.keys
            .iter()
            .copied()
            .zip(self.data.chunks_exact(self.dim.max(1)))
    }

    /// Stores `vector` under `key`, overwriting in place when the key is present.
    pub(crate) fn upsert(&mut self, key: u64, vector: &[f32]) {
        if let Some(&slot) = self.slots.get(&key) {
            self.data[slot * self.dim..(slot + 1) * self.dim].copy_from_slice(vector);
        } else {
            self.slots.insert(key, self.keys.len());
            self.keys.push(key);
            self.data.extend_from_slice(vector);
        }
    }

    pub(crate) fn remove(&mut self, key: u64) -> bool {
        let Some(slot) = self.slots.remove(&key) else {
            return false;
        };
        let last = self.keys.len() - 1;
        if slot != last {
            let moved = self.keys[last];
            self.keys[slot] = moved;
            self.data
                .copy_within(last * self.dim..(last + 1) * self.dim, slot * self.dim);
            self.slots.insert(moved, slot);
        }
        self.keys.pop();
        self.data.truncate(last * self.dim);
        true
    }

    /// Bytes held by the vectors, keys and map (capacity, not just length).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.data.capacity() * 4
            + self.keys.capacity() * 8
            // a hashbrown bucket of (u64, usize) plus its control byte
            + self.slots.capacity() * 17
    }

    /// The exact top `k` over every vector the filter keeps, best first.
    pub(crate) fn search(
        &self,
        query: &[f32],
        k: usize,
        filter: Option<&dyn Fn(u64) -> bool>,
    ) -> Vec<(u64, f32)> {
        if k == 0 {
            return Vec::new();
        }
        Arch::new().dispatch(Scan {
            store: self,
            query,
            k,
            filter,
        })
    }
}

/// One pass over the store inside a single SIMD dispatch, so the feature check is paid once.
struct Scan<'a> {
    store: &'a FlatStore,
    query: &'a [f32],
    k: usize,
    filter: Option<&'a dyn Fn(u64) -> bool>,
}

impl WithSimd for Scan<'_> {
    type Output = Vec<(u64, f32)>;

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> Vec<(u64, f32)> {
        let store = self.store;
        let mut top = TopK::new(self.k);
        let rows = store.data.chunks_exact(store.dim.max(1));
        for (&key, row) in store.keys.iter().zip(rows) {
            if let Some(keep) = self.filter
                && !keep(key)
            {
                continue;
            }
            top.offer(Ranked {
                score: dot_with(simd, self.query, row),
                key,
            });
        }
        top.into_sorted()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_naive_sum_at_odd_lengths() {
        for len in [0, 1, 7, 8, 15, 16, 33, 64, 383, 384, 385] {
            let a: Vec<f32> = (0..len)
                .map(|i| ((i * 7 % 13) as f32 - 6.0) / 10.0)
                .collect();
            let b: Vec<f32> = (0..len)
                .map(|i| ((i * 5 % 11) as f32 - 5.0) / 10.0)
                .collect();
            let naive: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum();
            assert!((f64::from(dot(&a, &b)) - naive).abs() < 1e-4, "len {len}");
        }
    }

    #[test]
    fn top_k_keeps_the_best_and_breaks_ties_by_key() {
        let mut top = TopK::new(3);
        for (key, score) in [(9, 0.5), (4, 0.9), (7, 0.5), (1, 0.1), (3, 0.5), (8, 0.9)] {
            top.offer(Ranked { score, key });
        }
        assert_eq!(top.into_sorted(), vec![(4, 0.9), (8, 0.9), (3, 0.5)]);
    }

    #[test]
    fn remove_keeps_the_store_dense() {
        let mut s = FlatStore::new(2);
        s.upsert(1, &[1.0, 0.0]);
        s.upsert(2, &[0.0, 1.0]);
        s.upsert(3, &[0.6, 0.8]);
        assert!(s.remove(1));
        assert!(!s.remove(1));
        assert_eq!(s.len(), 2);
        assert_eq!(s.get(3), Some(&[0.6, 0.8][..]));
        assert_eq!(s.get(2), Some(&[0.0, 1.0][..]));
        s.upsert(2, &[1.0, 0.0]);
        assert_eq!(s.get(2), Some(&[1.0, 0.0][..]));
        assert_eq!(s.len(), 2);
    }
}
