//! Anti-entropy between the owners of the same memories (spec §2.1
//! `hyperspace/crdt/sync/memory`; `docs/hyperspace-wire.md` "Memory").
//!
//! Two members compare the memories both should hold (held entries whose owners, in each one's
//! view, include both): first a [`digest`] of their `(id, version)` pairs; when the digests
//! differ, the version lists, and [`diff`] says which ids to push and which to pull.
//!
//! The digest is SHA-256 over the pairs sorted by id, each as `id ‖ 0x00 ‖ timestamp_ms (8 bytes
//! big-endian) ‖ peerId ‖ 0x00`, so it does not depend on the order the pairs come in.
//!
//! [`SyncLists`] holds what a node compares with each other member, and the entries it holds but
//! does not own, in persistent maps ([`VersionMap`]): after writes, [`SyncLists::update`] walks
//! the ring only for the entries that changed, and rehashes only the lists they touched.

use std::collections::HashMap;
use std::sync::Arc;

use imbl::ordmap::DiffItem;
use sha2::{Digest, Sha256};

use super::record::Version;
use super::ring::Ring;

/// Held entries' versions by id: a persistent map, cloned in O(1) and compared with another
/// version of itself in time that grows with the differences, not the size.
pub type VersionMap = imbl::OrdMap<String, Version>;

/// Digest of a set of `(id, version)` pairs (order-independent).
#[must_use]
pub fn digest<'a>(items: impl IntoIterator<Item = (&'a str, &'a Version)>) -> [u8; 32] {
    let mut pairs: Vec<(&str, &Version)> = items.into_iter().collect();
    pairs.sort_unstable_by(|a, b| a.0.cmp(b.0).then_with(|| a.1.cmp(b.1)));
    digest_sorted(pairs)
}

/// [`digest`] of pairs already sorted by id, one per id (a [`VersionMap`]'s order): no copy, no
/// sort.
#[must_use]
pub fn digest_sorted<'a>(items: impl IntoIterator<Item = (&'a str, &'a Version)>) -> [u8; 32] {
    // Pairs are short (about 80 bytes): gathered into a buffer and hashed in large pieces,
    // not five small updates each.
    const FLUSH: usize = 64 * 1024;
    let mut h = Sha256::new();
    let mut buf: Vec<u8> = Vec::with_capacity(FLUSH + 512);
    for (id, v) in items {
        buf.extend_from_slice(id.as_bytes());
        buf.push(0);
        buf.extend_from_slice(&v.timestamp_ms.to_be_bytes());
        buf.extend_from_slice(v.peer_id.as_bytes());
        buf.push(0);
        if buf.len() >= FLUSH {
            h.update(&buf);
            buf.clear();
        }
    }
    h.update(&buf);
    h.finalize().into()
}

/// A set of `(id, version)` pairs with its [`digest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    /// The pairs.
    pub map: VersionMap,
    /// Their digest.
    pub digest: [u8; 32],
}

impl Versions {
    /// The pairs of `map` with their digest (hashing is linear in the pairs: 100,000 take
    /// milliseconds).
    #[must_use]
    pub fn new(map: VersionMap) -> Self {
        let digest = digest_sorted(map.iter().map(|(id, v)| (id.as_str(), v)));
        Self { map, digest }
    }

    /// Up to `limit` pairs after the id `after` (from the first without it), and the id to ask
    /// after next when more follow.
    #[must_use]
    pub fn page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<(String, Version)>, Option<String>) {
        use std::ops::Bound;
        let rest = match after {
            Some(a) => self
                .map
                .range::<_, str>((Bound::Excluded(a), Bound::Unbounded)),
            None => self.map.range::<_, str>(..),
        };
        // one more than a page, to know whether another follows
        let mut items: Vec<(String, Version)> = rest
            .take(limit.saturating_add(1))
            .map(|(id, v)| (id.clone(), v.clone()))
            .collect();
        let next = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|(id, _)| id.clone())
        } else {
            None
        };
        (items, next)
    }

    /// The pairs as a sorted list.
    #[must_use]
    pub fn to_list(&self) -> Vec<(String, Version)> {
        self.map
            .iter()
            .map(|(id, v)| (id.clone(), v.clone()))
            .collect()
    }
}

impl Default for Versions {
    fn default() -> Self {
        Self::new(VersionMap::new())
    }
}

/// What anti-entropy compares, for one node (`me`) holding some entries under one ring view.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncLists {
    /// For every other member of the ring: the held entries whose owners include both it and
    /// `me`.
    pub pairs: HashMap<String, Arc<Versions>>,
    /// Held entries whose owners do not include `me` (to hand off to their owners).
    pub strays: Arc<Versions>,
}

impl SyncLists {
    /// The lists for `held` (every held entry's version) under `ring`: one owner walk per entry.
    #[must_use]
    pub fn build(held: &VersionMap, ring: &Ring, me: &str) -> Self {
        let mut maps = Maps::new(ring, me, None);
        for (id, version) in held {
            maps.place(ring, me, id, Some(version));
        }
        maps.finish(None)
    }

    /// The lists for `held`, given that `self` was made for `before` under the same `ring`: only
    /// the entries that differ between `before` and `held` are walked, and only the lists they
    /// touch are rehashed. The result equals [`SyncLists::build`] of `held`.
    #[must_use]
    pub fn update(&self, before: &VersionMap, held: &VersionMap, ring: &Ring, me: &str) -> Self {
        let mut maps = Maps::new(ring, me, Some(self));
        for item in before.diff(held) {
            match item {
                DiffItem::Add(id, version)
                | DiffItem::Update {
                    new: (id, version), ..
                } => maps.place(ring, me, id, Some(version)),
                DiffItem::Remove(id, _) => maps.place(ring, me, id, None),
            }
        }
        maps.finish(Some(self))
    }
}

/// The maps of [`SyncLists`] while they are changed, and which of them were.
struct Maps {
    pairs: HashMap<String, (VersionMap, bool)>,
    strays: (VersionMap, bool),
}

impl Maps {
    fn new(ring: &Ring, me: &str, from: Option<&SyncLists>) -> Self {
        let pairs = ring
            .members()
            .filter(|m| *m != me)
            .map(|m| {
                let map = from
                    .and_then(|f| f.pairs.get(m))
                    .map(|v| v.map.clone())
                    .unwrap_or_default();
                (m.to_owned(), (map, false))
            })
            .collect();
        let strays = from.map(|f| f.strays.map.clone()).unwrap_or_default();
        Self {
            pairs,
            strays: (strays, false),
        }
    }

    /// Puts `id` at `version` (or removes it) in the lists its owners say.
    fn place(&mut self, ring: &Ring, me: &str, id: &str, version: Option<&Version>) {
        let owners = ring.owners(id);
        let set = |slot: &mut (VersionMap, bool)| {
            match version {
                Some(v) => {
                    slot.0.insert(id.to_owned(), v.clone());
                }
                None => {
                    slot.0.remove(id);
                }
            }
            slot.1 = true;
        };
        if owners.contains(&me) {
            for owner in owners {
                if let Some(slot) = self.pairs.get_mut(owner) {
                    set(slot);
                }
            }
        } else {
            set(&mut self.strays);
        }
    }

    fn finish(self, from: Option<&SyncLists>) -> SyncLists {
        let keep_or_hash = |map: VersionMap, changed: bool, old: Option<&Arc<Versions>>| match old {
            Some(old) if !changed => Arc::clone(old),
            _ => Arc::new(Versions::new(map)),
        };
        SyncLists {
            pairs: self
                .pairs
                .into_iter()
                .map(|(m, (map, changed))| {
                    let old = from.and_then(|f| f.pairs.get(&m));
                    let v = keep_or_hash(map, changed, old);
                    (m, v)
                })
                .collect(),
            strays: keep_or_hash(self.strays.0, self.strays.1, from.map(|f| &f.strays)),
        }
    }
}

/// What an exchange moves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    /// Ids the other side has newer, or that this side lacks: pull them.
    pub pull: Vec<String>,
    /// Ids this side has newer, or that the other side lacks: push them.
    pub push: Vec<String>,
}

/// Compares two version lists (each with one entry per id).
#[must_use]
pub fn diff(mine: &[(String, Version)], theirs: &[(String, Version)]) -> Diff {
    use std::collections::HashMap;
    let m: HashMap<&str, &Version> = mine.iter().map(|(i, v)| (i.as_str(), v)).collect();
    let t: HashMap<&str, &Version> = theirs.iter().map(|(i, v)| (i.as_str(), v)).collect();
    let mut out = Diff::default();
    for (id, v) in &m {
        match t.get(id) {
            Some(tv) if tv >= v => {}
            _ => out.push.push((*id).to_owned()),
        }
    }
    for (id, v) in &t {
        match m.get(id) {
            Some(mv) if mv >= v => {}
            _ => out.pull.push((*id).to_owned()),
        }
    }
    out.push.sort();
    out.pull.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(ts: u64) -> Version {
        Version {
            timestamp_ms: ts,
            peer_id: "p".into(),
        }
    }

    #[test]
    fn digests_ignore_order_and_see_versions() {
        let a = [("x".to_owned(), v(1)), ("y".to_owned(), v(2))];
        let b = [("y".to_owned(), v(2)), ("x".to_owned(), v(1))];
        let d = |s: &[(String, Version)]| digest(s.iter().map(|(i, v)| (i.as_str(), v)));
        assert_eq!(d(&a), d(&b));
        assert_ne!(d(&a), d(&[("x".to_owned(), v(1)), ("y".to_owned(), v(3))]));
        assert_ne!(d(&a), d(&a[..1]));
    }

    fn held(n: u64, ts: u64) -> VersionMap {
        (0..n)
            .map(|i| {
                (
                    format!("mem-{:024x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                    v(ts),
                )
            })
            .collect()
    }

    #[test]
    fn sorted_digests_equal_digests() {
        let h = held(50, 7);
        let sorted = digest_sorted(h.iter().map(|(i, v)| (i.as_str(), v)));
        let mut shuffled: Vec<(&String, &Version)> = h.iter().collect();
        shuffled.reverse();
        assert_eq!(
            sorted,
            digest(shuffled.into_iter().map(|(i, v)| (i.as_str(), v)))
        );
        assert_eq!(Versions::default().digest, digest([]));
    }

    #[test]
    fn pages_walk_every_pair_once() {
        let all = Versions::new(held(25, 1));
        for limit in [1, 7, 25, 100] {
            let (mut seen, mut after) = (Vec::new(), None::<String>);
            loop {
                let (items, next) = all.page(after.as_deref(), limit);
                assert!(items.len() <= limit);
                seen.extend(items);
                match next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
            assert_eq!(seen, all.to_list(), "limit {limit}");
        }
        let (items, next) = all.page(Some("mem-zzzz"), 10);
        assert!(items.is_empty() && next.is_none());
    }

    /// Equal by their sorted pairs and digests (not by the maps' own equality, which in imbl
    /// is built on the difference walk under test).
    fn same_lists(a: &SyncLists, b: &SyncLists) {
        assert_eq!(a.pairs.len(), b.pairs.len());
        for (m, v) in &b.pairs {
            assert_eq!(a.pairs[m].to_list(), v.to_list(), "{m}");
            assert_eq!(a.pairs[m].digest, v.digest, "{m}");
        }
        assert_eq!(a.strays.to_list(), b.strays.to_list());
        assert_eq!(a.strays.digest, b.strays.digest);
    }

    /// imbl 6.0–7.0.1 (`OrdMap::diff`, imbl issue 161) skipped the first difference after a run
    /// of shared nodes, so some single writes into a large map were never seen: every one of
    /// these single-entry updates must change the lists exactly as a rebuild does.
    #[test]
    fn every_single_write_into_a_large_map_is_seen() {
        let mut ring = Ring::new();
        for m in ["me", "p1", "p2"] {
            ring.add(m);
        }
        let before = held(20_000, 1);
        let lists = SyncLists::build(&before, &ring, "me");
        for (k, (id, _)) in before.iter().enumerate().step_by(97) {
            let after = before.update(id.clone(), v(2 + k as u64));
            assert_eq!(before.diff(&after).count(), 1, "{id}");
            let updated = lists.update(&before, &after, &ring, "me");
            assert_eq!(
                updated.pairs["p1"].map.get(id),
                Some(&v(2 + k as u64)),
                "{id}"
            );
            assert_ne!(updated.pairs["p1"].digest, lists.pairs["p1"].digest, "{id}");
        }
    }

    #[test]
    fn updated_lists_equal_lists_built_anew() {
        let mut ring = Ring::new();
        for m in ["me", "p1", "p2", "p3", "p4"] {
            ring.add(m);
        }
        let before = held(2_000, 1);
        let lists = SyncLists::build(&before, &ring, "me");
        assert_eq!(lists.pairs.len(), 4);
        // every held entry is in a pair list of each of its other owners, or a stray
        for (id, version) in &before {
            let owners = ring.owners(id);
            if owners.contains(&"me") {
                for o in owners.iter().filter(|o| **o != "me") {
                    assert_eq!(lists.pairs[*o].map.get(id), Some(version));
                }
            } else {
                assert_eq!(lists.strays.map.get(id), Some(version));
            }
        }
        // writes: new entries, newer versions, removals
        let mut after = before.clone();
        for (i, (id, _)) in before.iter().enumerate().take(300) {
            match i % 3 {
                0 => {
                    after.insert(id.clone(), v(2));
                }
                1 => {
                    after.remove(id);
                }
                _ => {}
            }
        }
        after.insert("mem-ffffffffffffffffffffffff".to_owned(), v(3));
        let updated = lists.update(&before, &after, &ring, "me");
        same_lists(&updated, &SyncLists::build(&after, &ring, "me"));
        // nothing changed: every list (and its digest) is the same allocation
        let same = updated.update(&after, &after, &ring, "me");
        for (m, v) in &same.pairs {
            assert!(Arc::ptr_eq(v, &updated.pairs[m]), "{m}");
        }
        assert!(Arc::ptr_eq(&same.strays, &updated.strays));
    }

    #[test]
    fn diffs_push_newer_and_missing_and_pull_the_rest() {
        let mine = vec![
            ("a".to_owned(), v(2)),
            ("b".to_owned(), v(1)),
            ("c".to_owned(), v(1)),
        ];
        let theirs = vec![
            ("a".to_owned(), v(1)),
            ("b".to_owned(), v(3)),
            ("d".to_owned(), v(1)),
        ];
        let d = diff(&mine, &theirs);
        assert_eq!(d.push, vec!["a".to_owned(), "c".to_owned()]);
        assert_eq!(d.pull, vec!["b".to_owned(), "d".to_owned()]);
        assert_eq!(diff(&mine, &mine), Diff::default());
    }
}
