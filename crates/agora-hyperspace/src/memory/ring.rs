//! The consistent hash ring of the Memory primitive (spec §4.4 "Architecture": "750 virtual nodes
//! across physical peers", "3x replication", "SHA-256 hash routing", "O(log V) lookup").
//!
//! Pinned (`docs/hyperspace-wire.md` "Memory"; vectors in
//! `tests/vectors/hyperspace/memory-ring.json`):
//!
//! - every member (a PeerId string) has [`VNODES_PER_MEMBER`] positions, labelled
//!   `"{peerId}#{i}"` for `i` in `0..750`; a position is the first 8 bytes of SHA-256(label) as a
//!   big-endian u64;
//! - a memory's key position is the first 8 bytes of SHA-256(memory id), big-endian;
//! - its owners are the first [`REPLICAS`] distinct members met walking clockwise from the key:
//!   the walk starts at the first position strictly greater than the key's, wrapping at 2^64;
//!   the first owner is the primary.
//!
//! Lookup is a binary search over the sorted positions. Two positions that collide (never seen in
//! practice, 2^-64 per pair) are ordered by member, so every node orders the ring alike.
//!
//! Bounded: at most [`MAX_MEMBERS`] members ([`Ring::add`] refuses more), i.e. 768,000 positions
//! of 16 bytes. Adding or removing a member recomputes every position (750 SHA-256 per member).

use sha2::{Digest, Sha256};

/// Ring positions per member.
pub const VNODES_PER_MEMBER: u32 = 750;
/// Owners per memory (primary + 2).
pub const REPLICAS: usize = 3;
/// Most members of one ring.
pub const MAX_MEMBERS: usize = 1024;

/// A position on the ring: the first 8 bytes of SHA-256(`text`), big-endian.
#[must_use]
pub fn position(text: &str) -> u64 {
    let d = Sha256::digest(text.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_be_bytes(b)
}

/// The key position of memory `id`.
#[must_use]
pub fn key_position(id: &str) -> u64 {
    position(id)
}

/// The ring over a set of members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    vnodes: u32,
    /// Members, sorted.
    members: Vec<String>,
    /// (position, index into `members`), sorted.
    points: Vec<(u64, u32)>,
}

impl Default for Ring {
    fn default() -> Self {
        Self::new()
    }
}

/// A memory whose owners differ between two rings ([`moved`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// Memory id.
    pub id: String,
    /// Owners before, primary first.
    pub before: Vec<String>,
    /// Owners after, primary first.
    pub after: Vec<String>,
}

impl Ring {
    /// An empty ring with [`VNODES_PER_MEMBER`] positions per member.
    #[must_use]
    pub fn new() -> Self {
        Self::with_vnodes(VNODES_PER_MEMBER)
    }

    /// An empty ring with `vnodes` positions per member (at least 1).
    #[must_use]
    pub fn with_vnodes(vnodes: u32) -> Self {
        Self {
            vnodes: vnodes.max(1),
            members: Vec::new(),
            points: Vec::new(),
        }
    }

    fn rebuild(&mut self) {
        self.points.clear();
        self.points
            .reserve(self.members.len() * self.vnodes as usize);
        for (i, m) in self.members.iter().enumerate() {
            let idx = u32::try_from(i).unwrap_or(u32::MAX);
            for v in 0..self.vnodes {
                self.points.push((position(&format!("{m}#{v}")), idx));
            }
        }
        self.points.sort_unstable();
    }

    /// Adds `member`; false when it was there already or the ring holds [`MAX_MEMBERS`].
    pub fn add(&mut self, member: &str) -> bool {
        match self.members.binary_search_by(|m| m.as_str().cmp(member)) {
            Ok(_) => false,
            Err(_) if self.members.len() >= MAX_MEMBERS => false,
            Err(at) => {
                self.members.insert(at, member.to_owned());
                self.rebuild();
                true
            }
        }
    }

    /// Removes `member`; false when it was not there.
    pub fn remove(&mut self, member: &str) -> bool {
        match self.members.binary_search_by(|m| m.as_str().cmp(member)) {
            Ok(at) => {
                self.members.remove(at);
                self.rebuild();
                true
            }
            Err(_) => false,
        }
    }

    /// Is `member` on the ring?
    #[must_use]
    pub fn contains(&self, member: &str) -> bool {
        self.members
            .binary_search_by(|m| m.as_str().cmp(member))
            .is_ok()
    }

    /// The members, sorted.
    pub fn members(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(String::as_str)
    }

    /// How many members.
    #[must_use]
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// No members?
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The owners of the key at `pos`, primary first (fewer than [`REPLICAS`] when the ring has
    /// fewer members).
    fn owners_at(&self, pos: u64) -> Vec<&str> {
        let want = REPLICAS.min(self.members.len());
        let mut out: Vec<&str> = Vec::with_capacity(want);
        if want == 0 {
            return out;
        }
        let start = self.points.partition_point(|(p, _)| *p <= pos);
        let n = self.points.len();
        for k in 0..n {
            let (_, idx) = self.points[(start + k) % n];
            let m = self.members[idx as usize].as_str();
            if !out.contains(&m) {
                out.push(m);
                if out.len() == want {
                    break;
                }
            }
        }
        out
    }

    /// The owners of memory `id`, primary first.
    #[must_use]
    pub fn owners(&self, id: &str) -> Vec<&str> {
        self.owners_at(key_position(id))
    }

    /// Is `member` an owner of memory `id`?
    #[must_use]
    pub fn is_owner(&self, id: &str, member: &str) -> bool {
        self.owners(id).contains(&member)
    }

    /// A set of members such that every key has at least one owner in it, starting with `first`
    /// when it is a member: what a scatter-gather search asks.
    ///
    /// The owner set is constant between two consecutive ring positions, so the arcs between
    /// positions are the only distinct cases. Greedy: take `first`, then, walking the arcs in
    /// ring order, take the primary of every arc none of whose owners is taken yet. With at most
    /// [`REPLICAS`] members, one member covers every key. Cost: one owner walk per position
    /// (O(V)); callers with large rings keep the result until the ring changes.
    #[must_use]
    pub fn cover(&self, first: &str) -> Vec<&str> {
        let mut taken: Vec<&str> = Vec::new();
        if self.contains(first) {
            taken.push(self.members[self.index_of(first)].as_str());
            if self.members.len() <= REPLICAS {
                return taken;
            }
        }
        if self.points.is_empty() {
            return taken;
        }
        // Every arc is identified by the position that starts it: keys at [p_i, p_{i+1}) walk
        // from p_{i+1}, so the owner sets are those of each position minus one.
        for &(p, _) in &self.points {
            let owners = self.owners_at(p);
            if !owners.iter().any(|o| taken.contains(o))
                && let Some(primary) = owners.first()
            {
                taken.push(primary);
            }
        }
        taken
    }

    /// Each member's share of the key space as primary owner, members sorted: the fraction of all
    /// 2^64 key positions whose walk meets one of its positions first. The shares sum to 1 (0
    /// members: empty). Keys in `[p_{i-1}, p_i)` walk from `p_i`, so every position owns the arc
    /// that ends at it. Cost: one pass over the positions (O(V)).
    #[must_use]
    pub fn shares(&self) -> Vec<(&str, f64)> {
        let mut arcs = vec![0u128; self.members.len()];
        let mut prev = self.points.last().map_or(0, |(p, _)| *p);
        for &(p, idx) in &self.points {
            // the arc from the previous position (wrapping at 2^64); a lone position owns it all
            let len = if self.points.len() == 1 {
                1u128 << 64
            } else {
                u128::from(p.wrapping_sub(prev))
            };
            if let Some(a) = arcs.get_mut(idx as usize) {
                *a += len;
            }
            prev = p;
        }
        #[allow(clippy::cast_precision_loss)] // shares are for display; f64 keeps 53 bits
        let whole = (1u128 << 64) as f64;
        self.members
            .iter()
            .zip(arcs)
            .map(|(m, a)| {
                #[allow(clippy::cast_precision_loss)]
                let share = a as f64 / whole;
                (m.as_str(), share)
            })
            .collect()
    }

    fn index_of(&self, member: &str) -> usize {
        self.members
            .binary_search_by(|m| m.as_str().cmp(member))
            .unwrap_or(0)
    }
}

/// The memories among `ids` whose owner set differs between `before` and `after`.
pub fn moved<'a>(
    before: &Ring,
    after: &Ring,
    ids: impl IntoIterator<Item = &'a str>,
) -> Vec<Moved> {
    ids.into_iter()
        .filter_map(|id| {
            let b = before.owners(id);
            let a = after.owners(id);
            (b != a).then(|| Moved {
                id: id.to_owned(),
                before: b.into_iter().map(str::to_owned).collect(),
                after: a.into_iter().map(str::to_owned).collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_key_space_and_follow_the_walk() {
        assert!(Ring::new().shares().is_empty());
        let mut ring = Ring::new();
        ring.add("12D3KooWA");
        assert_eq!(ring.shares(), vec![("12D3KooWA", 1.0)]);
        for m in ["12D3KooWB", "12D3KooWC"] {
            ring.add(m);
        }
        let shares = ring.shares();
        let sum: f64 = shares.iter().map(|(_, s)| s).sum();
        assert!((sum - 1.0).abs() < 1e-9, "{sum}");
        // 750 positions each: every member near a third
        for (m, s) in &shares {
            assert!((s - 1.0 / 3.0).abs() < 0.05, "{m}: {s}");
        }
        // the shares are the primaries' shares: sample keys and count primaries
        let mut counts = std::collections::HashMap::new();
        let n = 30_000;
        for i in 0..n {
            *counts
                .entry(ring.owners(&format!("m{i}"))[0])
                .or_insert(0u32) += 1;
        }
        for (m, s) in &shares {
            let seen = f64::from(counts[m]) / f64::from(n);
            assert!(
                (seen - s).abs() < 0.015,
                "{m}: sampled {seen}, computed {s}"
            );
        }
        // one position of one member only: it owns everything
        let mut tiny = Ring::with_vnodes(1);
        tiny.add("x");
        assert_eq!(tiny.shares(), vec![("x", 1.0)]);
    }

    fn ring(n: usize) -> Ring {
        let mut r = Ring::new();
        for i in 0..n {
            assert!(r.add(&format!("12D3KooWTestPeer{i}")));
        }
        r
    }

    fn suffix(owners: &[&str]) -> Vec<usize> {
        owners
            .iter()
            .map(|o| o.trim_start_matches("12D3KooWTestPeer").parse().unwrap())
            .collect()
    }

    #[test]
    fn the_notes_regression_anchor_holds() {
        let r = ring(5);
        assert_eq!(key_position("mem-0001"), 0x283e_f742_628f_3522);
        assert_eq!(suffix(&r.owners("mem-0001")), vec![3, 0, 2]);
        assert_eq!(key_position("mem-0002"), 0xdb14_83f4_0992_3004);
        assert_eq!(suffix(&r.owners("mem-0002")), vec![3, 0, 4]);
        assert_eq!(suffix(&r.owners("hello")), vec![0, 3, 1]);
        assert_eq!(
            key_position("error handling patterns"),
            0xf105_c101_0b19_ceb3
        );
        assert_eq!(suffix(&r.owners("error handling patterns")), vec![3, 4, 0]);
    }

    #[test]
    fn owners_are_distinct_and_fewer_on_small_rings() {
        assert!(Ring::new().owners("x").is_empty());
        let one = ring(1);
        assert_eq!(one.owners("x").len(), 1);
        let two = ring(2);
        assert_eq!(two.owners("x").len(), 2);
        let r = ring(10);
        for i in 0..500 {
            let o = r.owners(&format!("mem-{i}"));
            assert_eq!(o.len(), 3);
            assert!(o[0] != o[1] && o[1] != o[2] && o[0] != o[2]);
        }
    }

    #[test]
    fn load_is_balanced() {
        let r = ring(10);
        let mut primary = std::collections::HashMap::new();
        for i in 0..20_000 {
            *primary
                .entry(r.owners(&format!("mem-{i}"))[0])
                .or_insert(0u32) += 1;
        }
        let max = *primary.values().max().unwrap();
        let min = *primary.values().min().unwrap();
        assert!(max < 2_400 && min > 1_600, "{primary:?}");
    }

    #[test]
    fn only_keys_of_a_changed_member_move() {
        let before = ring(6);
        let mut after = before.clone();
        assert!(after.remove("12D3KooWTestPeer2"));
        assert!(!after.remove("12D3KooWTestPeer2"));
        let ids: Vec<String> = (0..3_000).map(|i| format!("mem-{i}")).collect();
        let m = moved(&before, &after, ids.iter().map(String::as_str));
        assert!(!m.is_empty());
        for mv in &m {
            assert!(mv.before.iter().any(|o| o == "12D3KooWTestPeer2"), "{mv:?}");
            assert!(mv.after.iter().all(|o| o != "12D3KooWTestPeer2"));
        }
        // About R/N of the keys move.
        assert!(m.len() > 1_000 && m.len() < 2_000, "{}", m.len());
    }

    #[test]
    fn a_cover_holds_an_owner_of_every_key() {
        for n in [1, 2, 3, 4, 7, 12] {
            let r = ring(n);
            let first = "12D3KooWTestPeer0";
            let cover = r.cover(first);
            assert_eq!(cover[0], first);
            if n <= REPLICAS {
                assert_eq!(cover.len(), 1);
            }
            // Every arc: its owners are those of the position that ends it.
            for &(p, _) in &r.points {
                let owners = r.owners_at(p);
                assert!(owners.iter().any(|o| cover.contains(o)), "n={n}");
            }
            for i in 0..2_000 {
                let owners = r.owners(&format!("k{i}"));
                assert!(owners.iter().any(|o| cover.contains(o)));
            }
        }
        assert!(ring(3).cover("not-a-member").len() == 1);
    }

    #[test]
    fn members_are_bounded() {
        let mut r = Ring::with_vnodes(1);
        for i in 0..MAX_MEMBERS {
            assert!(r.add(&format!("m{i}")));
        }
        assert!(!r.add("one-more"));
        assert_eq!(r.len(), MAX_MEMBERS);
    }
}
