//! Deduplication by envelope `id` with a bounded replay window.
//!
//! Delivery page ("receivers SHOULD dedup by id"), as the Go reference runtime does. Each accepted id is remembered
//! until its deadline, max(`expires_at`, `ts` + replay age) ([`crate::validate::dedup_deadline`]):
//! every instant at which the same envelope could pass the freshness check again is covered. That
//! closes the reference's gap, where an old `ts` with a far `expires_at` was remembered for ~1 s.
//!
//! # Memory bound
//! Ids are remembered as the first 16 bytes of their SHA-256 (the shared `agora_window` set), so
//! an entry costs the same whatever the id's length: 24 bytes in the hash table plus 24 in the
//! expiry heap, at most about 100 bytes with both containers' growth slack. The window holds at most `capacity` entries
//! ([`DEFAULT_DEDUP_CAPACITY`] = 524,288, i.e. ≤ 52 MiB). When it is full after dropping expired
//! entries, a new id is refused with `busy` rather than accepted without replay protection: a
//! flood of unique ids cannot grow memory past the bound, and nothing is ever accepted twice.

use agora_window::{ExpiringSet, Refused, key_of};

use crate::reason::Rejection;

/// Default number of ids a window remembers at once.
pub const DEFAULT_DEDUP_CAPACITY: usize = 1 << 19;

/// The set of ids seen within their replay windows.
#[derive(Debug)]
pub struct DedupWindow {
    set: ExpiringSet,
}

impl Default for DedupWindow {
    fn default() -> Self {
        Self::with_capacity(DEFAULT_DEDUP_CAPACITY)
    }
}

/// Unix seconds as the window's clock (times before 1970 count as 0).
fn clock(t: i64) -> u64 {
    u64::try_from(t).unwrap_or(0)
}

impl DedupWindow {
    /// A window remembering at most `capacity` ids at once.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            set: ExpiringSet::with_capacity(capacity),
        }
    }

    /// Number of ids currently remembered (including any not yet swept).
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// `true` when no id is remembered.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// The configured bound.
    pub fn capacity(&self) -> usize {
        self.set.capacity()
    }

    /// Forgets ids whose deadline is before `now`.
    pub fn sweep(&mut self, now: i64) {
        self.set.sweep(clock(now));
    }

    /// `true` when `id` is remembered at `now`.
    pub fn contains(&self, id: &str, now: i64) -> bool {
        self.set.contains(&key_of(&[id.as_bytes()]), clock(now))
    }

    /// Forgets `id` (its envelope was undone: the node could not keep what it did), so that
    /// the same envelope is taken when it is sent again.
    pub fn forget(&mut self, id: &str) {
        self.set.forget(&key_of(&[id.as_bytes()]));
    }

    /// Records `id` until `deadline` (inclusive). `duplicate` if it is already remembered,
    /// `busy` if the window is full.
    pub fn insert(&mut self, id: &str, deadline: i64, now: i64) -> Result<(), Rejection> {
        match self
            .set
            .insert(key_of(&[id.as_bytes()]), clock(deadline), clock(now))
        {
            Ok(()) => Ok(()),
            Err(Refused::Duplicate) => Err(Rejection::Duplicate(
                format!("field `id`: {id:?} was already accepted").into(),
            )),
            Err(Refused::Full) => Err(Rejection::Busy(
                format!(
                    "the deduplication window is full ({} ids); try again later",
                    self.set.capacity()
                )
                .into(),
            )),
        }
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
