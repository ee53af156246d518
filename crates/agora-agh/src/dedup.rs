//! Deduplication by envelope `id` with a bounded replay window.
//!
//! Delivery page ("receivers SHOULD dedup by id"); notes §1.4. Each accepted id is remembered
//! until its deadline, max(`expires_at`, `ts` + replay age) ([`crate::validate::dedup_deadline`]):
//! every instant at which the same envelope could pass the freshness check again is covered. That
//! closes the reference's gap, where an old `ts` with a far `expires_at` was remembered for ~1 s.
//!
//! # Memory bound
//! Ids are remembered as the first 16 bytes of their SHA-256, so an entry costs the same whatever
//! the id's length: 24 bytes in the hash table plus 24 in the expiry heap, at most about 100 bytes
//! with both containers' growth slack. The window holds at most `capacity` entries
//! ([`DEFAULT_DEDUP_CAPACITY`] = 524,288, i.e. ≤ 52 MiB). When it is full after dropping expired
//! entries, a new id is refused with `busy` rather than accepted without replay protection: a
//! flood of unique ids cannot grow memory past the bound, and nothing is ever accepted twice.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use sha2::{Digest as _, Sha256};

use crate::reason::Rejection;

/// Default number of ids a window remembers at once.
pub const DEFAULT_DEDUP_CAPACITY: usize = 1 << 19;

type Key = [u8; 16];

/// Keys are already uniform (SHA-256 prefixes): hash them by taking eight of their bytes.
#[derive(Default)]
struct PrefixHasher(u64);

impl Hasher for PrefixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for (i, b) in bytes.iter().take(8).enumerate() {
            self.0 ^= u64::from(*b) << (8 * i);
        }
    }
}

/// The set of ids seen within their replay windows.
#[derive(Debug)]
pub struct DedupWindow {
    seen: HashMap<Key, i64, BuildHasherDefault<PrefixHasher>>,
    expiry: BinaryHeap<Reverse<(i64, Key)>>,
    capacity: usize,
}

impl std::fmt::Debug for PrefixHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PrefixHasher")
    }
}

impl Default for DedupWindow {
    fn default() -> Self {
        Self::with_capacity(DEFAULT_DEDUP_CAPACITY)
    }
}

fn key_of(id: &str) -> Key {
    let hash = Sha256::digest(id.as_bytes());
    let mut key = [0; 16];
    key.copy_from_slice(&hash[..16]);
    key
}

impl DedupWindow {
    /// A window remembering at most `capacity` ids at once.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            seen: HashMap::default(),
            expiry: BinaryHeap::new(),
            capacity: capacity.max(1),
        }
    }

    /// Number of ids currently remembered (including any not yet swept).
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// `true` when no id is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// The configured bound.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets ids whose deadline is before `now`.
    pub fn sweep(&mut self, now: i64) {
        while let Some(Reverse((deadline, key))) = self.expiry.peek().copied() {
            if deadline >= now {
                break;
            }
            self.expiry.pop();
            self.seen.remove(&key);
        }
    }

    /// `true` when `id` is remembered at `now`.
    pub fn contains(&self, id: &str, now: i64) -> bool {
        self.seen.get(&key_of(id)).is_some_and(|&d| d >= now)
    }

    /// Records `id` until `deadline` (inclusive). `duplicate` if it is already remembered,
    /// `busy` if the window is full.
    pub fn insert(&mut self, id: &str, deadline: i64, now: i64) -> Result<(), Rejection> {
        self.sweep(now);
        let key = key_of(id);
        if self.seen.contains_key(&key) {
            return Err(Rejection::Duplicate(
                format!("field `id`: {id:?} was already accepted").into(),
            ));
        }
        if self.seen.len() >= self.capacity {
            return Err(Rejection::Busy(
                format!(
                    "the deduplication window is full ({} ids); try again later",
                    self.capacity
                )
                .into(),
            ));
        }
        self.seen.insert(key, deadline);
        self.expiry.push(Reverse((deadline, key)));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reason::ReasonCode;

    #[test]
    fn duplicates_are_caught_until_the_deadline() {
        let mut w = DedupWindow::default();
        w.insert("a", 100, 10).unwrap();
        assert_eq!(
            w.insert("a", 100, 50).unwrap_err().reason(),
            ReasonCode::Duplicate
        );
        assert_eq!(
            w.insert("a", 100, 100).unwrap_err().reason(),
            ReasonCode::Duplicate
        );
        assert!(
            w.insert("a", 200, 101).is_ok(),
            "forgotten after the deadline"
        );
    }

    #[test]
    fn flood_is_bounded_and_refused_with_busy() {
        let mut w = DedupWindow::with_capacity(1000);
        for i in 0..1000 {
            w.insert(&format!("id-{i}"), 500, 0).unwrap();
        }
        let err = w.insert("one-more", 500, 0).unwrap_err();
        assert_eq!(err.reason(), ReasonCode::Busy);
        assert_eq!(w.len(), 1000);
        // Once the entries expire there is room again.
        assert!(w.insert("one-more", 900, 501).is_ok());
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn long_ids_cost_no_more_than_short_ones() {
        let mut w = DedupWindow::default();
        let long = "x".repeat(100_000);
        w.insert(&long, 10, 0).unwrap();
        assert!(w.contains(&long, 5));
        assert!(!w.contains(&long[1..], 5));
    }
}
