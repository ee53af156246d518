//! Anti-entropy between the owners of the same memories (spec §2.1
//! `hyperspace/crdt/sync/memory`; `docs/hyperspace-wire.md` "Memory").
//!
//! Two members compare the memories both should hold (held entries whose owners, in each one's
//! view, include both): first a [`digest`] of their `(id, version)` pairs; when the digests
//! differ, the version lists, and [`diff`] says which ids to push and which to pull.
//!
//! The digest is SHA-256 over the pairs sorted by id, each as `id ‖ 0x00 ‖ timestamp_ms (8 bytes
//! big-endian) ‖ peerId ‖ 0x00`, so it does not depend on the order the pairs come in.

use sha2::{Digest, Sha256};

use super::record::Version;

/// Digest of a set of `(id, version)` pairs (order-independent).
#[must_use]
pub fn digest<'a>(items: impl IntoIterator<Item = (&'a str, &'a Version)>) -> [u8; 32] {
    let mut pairs: Vec<(&str, &Version)> = items.into_iter().collect();
    pairs.sort_unstable_by(|a, b| a.0.cmp(b.0).then_with(|| a.1.cmp(b.1)));
    let mut h = Sha256::new();
    for (id, v) in pairs {
        h.update(id.as_bytes());
        h.update([0]);
        h.update(v.timestamp_ms.to_be_bytes());
        h.update(v.peer_id.as_bytes());
        h.update([0]);
    }
    h.finalize().into()
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
