//! Who serves memory: the members of this node's ring view (`docs/hyperspace-wire.md` "Memory").
//!
//! A node that serves memory (`[memory] serve`, the default) announces itself every
//! [`HEARTBEAT_MS`] with a signed `member` message on `hyperspace/crdt/sync/memory`; every memory
//! node joins that topic, so each learns the others wherever they are in the mesh. A member
//! unheard for [`MEMBER_TTL_MS`] leaves the view; so, at once, does a member a request could not
//! reach (it is *suspected* until it is heard again after the failure). Views may lag and differ
//! between nodes: writes go to the owners of the writer's view, reads ask several owners and
//! anti-entropy repairs the rest.
//!
//! Bounded: at most [`MAX_MEMBERS`] members (750 ring positions each); heartbeats of further
//! peers are ignored until a member leaves.

use std::collections::HashMap;

use agora_hyperspace::memory::ring::Ring;

/// How often a serving node announces itself.
pub(super) const HEARTBEAT_MS: u64 = 5_000;
/// A member unheard this long leaves the view.
pub(super) const MEMBER_TTL_MS: u64 = 16_000;
/// Most members in one view.
pub(super) const MAX_MEMBERS: usize = 1_024;

#[derive(Debug, Clone, Copy)]
struct Seen {
    last_ms: u64,
    /// A request failed at this time: out of the view until heard after it.
    suspected_ms: Option<u64>,
    /// Memories it said it holds in its last heartbeat (older nodes do not say).
    held: Option<u64>,
}

/// The members this node knows and its ring over them.
#[derive(Debug)]
pub(super) struct Members {
    me: String,
    serve: bool,
    seen: HashMap<String, Seen>,
    ring: Ring,
    /// Each member's share of `ring`, computed once per ring (a walk over every position).
    shares: Option<Vec<(String, f64)>>,
}

impl Members {
    /// A view holding only this node (when it serves).
    pub(super) fn new(me: &str, serve: bool) -> Self {
        let mut ring = Ring::new();
        if serve {
            ring.add(me);
        }
        Self {
            me: me.to_owned(),
            serve,
            seen: HashMap::new(),
            ring,
            shares: None,
        }
    }

    /// The ring of the current view.
    pub(super) fn ring(&self) -> &Ring {
        &self.ring
    }

    /// Members in the view (this node included when it serves).
    pub(super) fn len(&self) -> usize {
        self.ring.len()
    }

    /// `peer` announced itself at `now`, holding `held` memories; true when the view changed.
    pub(super) fn heard(&mut self, peer: &str, now: u64, held: Option<u64>) -> bool {
        if peer == self.me {
            return false;
        }
        if !self.seen.contains_key(peer) && self.seen.len() >= MAX_MEMBERS {
            return false;
        }
        let s = self.seen.entry(peer.to_owned()).or_insert(Seen {
            last_ms: now,
            suspected_ms: None,
            held: None,
        });
        if now >= s.last_ms {
            s.held = held;
        }
        s.last_ms = s.last_ms.max(now);
        if s.suspected_ms.is_some_and(|at| now > at) {
            s.suspected_ms = None;
        }
        self.sync_ring(peer)
    }

    /// A request to `peer` failed at `now`: it leaves the view until heard again.
    pub(super) fn suspect(&mut self, peer: &str, now: u64) -> bool {
        let Some(s) = self.seen.get_mut(peer) else {
            return false;
        };
        s.suspected_ms = Some(now);
        self.sync_ring(peer)
    }

    /// Drops members unheard for [`MEMBER_TTL_MS`]; true when the view changed.
    pub(super) fn expire(&mut self, now: u64) -> bool {
        let gone: Vec<String> = self
            .seen
            .iter()
            .filter(|(_, s)| now.saturating_sub(s.last_ms) > MEMBER_TTL_MS)
            .map(|(p, _)| p.clone())
            .collect();
        let mut changed = false;
        for p in gone {
            self.seen.remove(&p);
            changed |= self.ring.remove(&p);
        }
        if changed {
            self.shares = None;
        }
        changed
    }

    fn sync_ring(&mut self, peer: &str) -> bool {
        let live = self
            .seen
            .get(peer)
            .is_some_and(|s| s.suspected_ms.is_none());
        let changed = if live {
            self.ring.add(peer)
        } else {
            self.ring.remove(peer)
        };
        if changed {
            self.shares = None;
        }
        changed
    }

    /// Does this node serve memory?
    pub(super) fn serves(&self) -> bool {
        self.serve
    }

    /// The members of the view with their share of the ring as primary owner and the memories
    /// each said it holds (this node's own count is the caller's), members sorted.
    pub(super) fn view(&mut self) -> Vec<(String, f64, Option<u64>)> {
        let ring = &self.ring;
        let shares = self.shares.get_or_insert_with(|| {
            ring.shares()
                .into_iter()
                .map(|(m, share)| (m.to_owned(), share))
                .collect()
        });
        shares
            .iter()
            .map(|(m, share)| (m.clone(), *share, self.seen.get(m).and_then(|s| s.held)))
            .collect()
    }

    /// The other members, sorted.
    pub(super) fn others(&self) -> Vec<String> {
        self.ring
            .members()
            .filter(|m| *m != self.me)
            .map(str::to_owned)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeats_join_silence_and_failures_leave() {
        let mut m = Members::new("me", true);
        assert_eq!(m.len(), 1);
        assert!(m.heard("a", 1_000, None));
        assert!(!m.heard("a", 2_000, None), "no change");
        assert!(m.heard("b", 2_000, None));
        assert_eq!(m.len(), 3);
        assert!(m.suspect("a", 3_000));
        assert_eq!(m.len(), 2);
        assert!(
            !m.heard("a", 3_000, None),
            "a heartbeat from before the failure"
        );
        assert!(m.heard("a", 3_001, None));
        assert!(m.expire(2_000 + MEMBER_TTL_MS + 1), "b went silent");
        assert_eq!(m.others(), vec!["a".to_owned()]);
        assert!(
            !m.heard("a", 3_002, Some(7)),
            "a count is no change of the view"
        );
        let view = m.view();
        assert_eq!(view.len(), 2);
        assert_eq!((view[0].0.as_str(), view[0].2), ("a", Some(7)));
        assert_eq!((view[1].0.as_str(), view[1].2), ("me", None));
        assert!((view[0].1 + view[1].1 - 1.0).abs() < 1e-9);
        // the cached shares follow the ring
        assert!(m.heard("c", 3_003, None));
        let view = m.view();
        assert_eq!(view.len(), 3);
        assert!((view.iter().map(|v| v.1).sum::<f64>() - 1.0).abs() < 1e-9);
        assert!(m.suspect("c", 3_004));
        assert_eq!(m.view().len(), 2);
        let mut n = Members::new("me", false);
        assert_eq!(n.len(), 0);
        assert!(n.heard("a", 1, None));
        assert_eq!(n.len(), 1);
    }
}
