//! # agora-window — bounded, expiring sets of hashed keys
//!
//! The one structure behind AGH's deduplication window (`agora_agh::dedup`) and Hyperspace's
//! replay window (`agora_hyperspace::envelope::ReplayWindow`): remember a key until a deadline,
//! refuse a key seen again before then, and never hold more than a fixed number of keys.
//!
//! Keys are 16-byte prefixes of SHA-256 ([`key_of`]), so an entry costs the same whatever the
//! caller hashed: 24 bytes in the table plus 24 in the expiry heap, at most about 100 bytes with
//! both containers' growth slack. Sans IO: time is a parameter, in whatever unit the caller uses.
#![warn(missing_docs)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use sha2::{Digest as _, Sha256};

/// A remembered key.
pub type Key = [u8; 16];

/// The first 16 bytes of SHA-256 over `parts`, each followed by a 0x00 separator except the last.
pub fn key_of(parts: &[&[u8]]) -> Key {
    let mut h = Sha256::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            h.update([0]);
        }
        h.update(part);
    }
    let digest = h.finalize();
    let mut key = [0u8; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

/// Keys are already uniform (hash prefixes): hash them by taking eight of their bytes.
#[derive(Debug, Default)]
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

/// Why a key was not recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The key is already remembered.
    Duplicate,
    /// The set holds its maximum number of keys.
    Full,
}

/// A set of keys, each remembered until its deadline (inclusive), at most `capacity` at once.
#[derive(Debug)]
pub struct ExpiringSet {
    seen: HashMap<Key, u64, BuildHasherDefault<PrefixHasher>>,
    expiry: BinaryHeap<Reverse<(u64, Key)>>,
    capacity: usize,
}

impl ExpiringSet {
    /// A set holding at most `capacity` keys.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            seen: HashMap::default(),
            expiry: BinaryHeap::new(),
            capacity: capacity.max(1),
        }
    }

    /// Keys remembered now (including any not yet swept).
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// `true` when no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// The bound.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets keys whose deadline is before `now`.
    pub fn sweep(&mut self, now: u64) {
        while let Some(Reverse((deadline, key))) = self.expiry.peek().copied() {
            if deadline >= now {
                break;
            }
            self.expiry.pop();
            // A key forgotten and recorded again has a newer deadline: this entry is stale.
            if self.seen.get(&key) == Some(&deadline) {
                self.seen.remove(&key);
            }
        }
    }

    /// Forgets `key` before its deadline (its record was undone); whether it was remembered.
    /// Its entry in the expiry heap stays until its deadline and then goes without effect.
    pub fn forget(&mut self, key: &Key) -> bool {
        self.seen.remove(key).is_some()
    }

    /// `true` when `key` is remembered at `now`.
    pub fn contains(&self, key: &Key, now: u64) -> bool {
        self.seen.get(key).is_some_and(|&d| d >= now)
    }

    /// Forgets expired keys, then records `key` until `deadline`.
    pub fn insert(&mut self, key: Key, deadline: u64, now: u64) -> Result<(), Refused> {
        self.sweep(now);
        if self.seen.contains_key(&key) {
            return Err(Refused::Duplicate);
        }
        // Forgotten keys leave their heap entries behind; the heap is bounded too.
        if self.seen.len() >= self.capacity || self.expiry.len() >= 2 * self.capacity {
            return Err(Refused::Full);
        }
        self.seen.insert(key, deadline);
        self.expiry.push(Reverse((deadline, key)));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forgotten_key_is_taken_again_and_its_old_deadline_does_not_expire_it() {
        let mut s = ExpiringSet::with_capacity(4);
        let a = key_of(&[b"a"]);
        s.insert(a, 10, 0).unwrap();
        assert!(s.forget(&a));
        assert!(!s.contains(&a, 5));
        s.insert(a, 30, 5).unwrap();
        s.sweep(20);
        assert!(
            s.contains(&a, 20),
            "the stale entry (deadline 10) left it alone"
        );
        assert_eq!(s.insert(a, 40, 20), Err(Refused::Duplicate));
        s.sweep(31);
        assert!(s.is_empty());
        // Forgetting and recording again cannot grow the heap past its bound.
        let b = key_of(&[b"b"]);
        let mut full = false;
        for _ in 0..10 {
            if s.insert(b, 100, 31) == Err(Refused::Full) {
                full = true;
                break;
            }
            s.forget(&b);
        }
        assert!(full, "the heap is bounded at twice the capacity");
    }

    #[test]
    fn keys_live_until_their_deadline_and_the_set_is_bounded() {
        let mut s = ExpiringSet::with_capacity(2);
        let (a, b, c) = (key_of(&[b"a"]), key_of(&[b"b"]), key_of(&[b"c"]));
        s.insert(a, 10, 0).unwrap();
        assert_eq!(
            s.insert(a, 20, 10),
            Err(Refused::Duplicate),
            "live at its deadline"
        );
        s.insert(b, 30, 0).unwrap();
        assert_eq!(s.insert(c, 30, 5), Err(Refused::Full));
        assert!(s.insert(c, 30, 11).is_ok(), "a expired at 11 and made room");
        assert!(!s.contains(&a, 11));
        assert!(s.contains(&b, 30));
    }

    #[test]
    fn separators_keep_parts_apart() {
        assert_ne!(key_of(&[b"ab", b"c"]), key_of(&[b"a", b"bc"]));
        assert_eq!(key_of(&[b"x"]), key_of(&[b"x"]));
    }
}
