//! Connection manager: keeps the number of open connections near a target instead of one per
//! peer ever met.
//!
//! Kademlia dials whoever its queries visit, and gossipsub keeps a stream open on every
//! connection, so without trimming a node ends up connected to the whole network: every message
//! is then flooded to, checked by and gossiped about with every peer. This type decides which
//! connections to close, in the manner of a low/high watermark manager: when more than `high`
//! peers are connected, close the least recently used unprotected ones until `low` remain.
//!
//! A peer is protected while it is in a gossipsub mesh or a configured bootstrap peer (the caller
//! passes those), while a request to or from it is in flight, and for `grace` after it connected
//! or was last used. Pure logic with an injected clock; the mesh task calls it.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use libp2p::PeerId;

use crate::config::PeerLimits;

/// What the manager knows about the peers.
#[derive(Debug, Default)]
pub struct ConnManager {
    limits: PeerLimits,
    /// Connected peers and when each was last used (connected, sent or received a request).
    last_used: HashMap<PeerId, Instant>,
    /// Requests in flight per peer (both directions), connected or not.
    in_flight: HashMap<PeerId, u32>,
}

impl ConnManager {
    /// A manager with these limits.
    pub fn new(limits: PeerLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// The first connection to `peer` was established.
    pub fn connected(&mut self, peer: PeerId, now: Instant) {
        self.last_used.insert(peer, now);
    }

    /// The last connection to `peer` closed.
    pub fn disconnected(&mut self, peer: &PeerId) {
        self.last_used.remove(peer);
    }

    /// A request to or from `peer` started.
    pub fn begin(&mut self, peer: PeerId, now: Instant) {
        *self.in_flight.entry(peer).or_default() += 1;
        self.touch(&peer, now);
    }

    /// A request to or from `peer` ended (answered, failed or timed out).
    pub fn end(&mut self, peer: &PeerId, now: Instant) {
        if let Some(n) = self.in_flight.get_mut(peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.in_flight.remove(peer);
            }
        }
        self.touch(peer, now);
    }

    fn touch(&mut self, peer: &PeerId, now: Instant) {
        if let Some(t) = self.last_used.get_mut(peer) {
            *t = (*t).max(now);
        }
    }

    /// Number of connected peers.
    pub fn connected_count(&self) -> usize {
        self.last_used.len()
    }

    /// The peers to disconnect now, least recently used first; empty while at most `high` are
    /// connected. `protected` are the mesh and bootstrap peers.
    pub fn to_trim(&self, now: Instant, protected: &HashSet<PeerId>) -> Vec<PeerId> {
        let n = self.last_used.len();
        if n <= self.limits.high {
            return Vec::new();
        }
        let mut candidates: Vec<(Instant, PeerId)> = self
            .last_used
            .iter()
            .filter(|(peer, used)| {
                !protected.contains(peer)
                    && !self.in_flight.contains_key(peer)
                    && now.saturating_duration_since(**used) >= self.limits.grace
            })
            .map(|(peer, used)| (*used, *peer))
            .collect();
        // Oldest use first; the peer id breaks ties so the choice does not depend on map order.
        candidates.sort_unstable();
        let excess = n.saturating_sub(self.limits.low);
        candidates
            .into_iter()
            .take(excess)
            .map(|(_, p)| p)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits() -> PeerLimits {
        PeerLimits {
            low: 2,
            high: 3,
            grace: Duration::from_secs(10),
        }
    }

    fn peers(n: usize) -> Vec<PeerId> {
        (0..n).map(|_| PeerId::random()).collect()
    }

    #[test]
    fn nothing_is_trimmed_at_or_below_high() {
        let t0 = Instant::now();
        let mut m = ConnManager::new(limits());
        for p in peers(3) {
            m.connected(p, t0);
        }
        assert!(
            m.to_trim(t0 + Duration::from_secs(60), &HashSet::new())
                .is_empty()
        );
    }

    #[test]
    fn above_high_trims_least_recently_used_down_to_low() {
        let t0 = Instant::now();
        let mut m = ConnManager::new(limits());
        let p = peers(5);
        for (i, peer) in p.iter().enumerate() {
            m.connected(*peer, t0 + Duration::from_secs(i as u64));
        }
        let trimmed = m.to_trim(t0 + Duration::from_secs(60), &HashSet::new());
        assert_eq!(trimmed, vec![p[0], p[1], p[2]]);
    }

    #[test]
    fn protected_busy_and_recent_peers_are_kept() {
        let t0 = Instant::now();
        let mut m = ConnManager::new(limits());
        let p = peers(6);
        for peer in &p {
            m.connected(*peer, t0);
        }
        let now = t0 + Duration::from_secs(30);
        // p0 is in a mesh, p1 has a request in flight, p2 was used 5 s ago.
        m.begin(p[1], t0);
        m.begin(p[2], t0);
        m.end(&p[2], now - Duration::from_secs(5));
        let protected: HashSet<PeerId> = [p[0]].into();
        let trimmed = m.to_trim(now, &protected);
        assert_eq!(trimmed.len(), 3);
        assert!(trimmed.iter().all(|x| [p[3], p[4], p[5]].contains(x)));
        // Once the grace passes, p2 is a candidate too, the most recently used one last.
        let later = now + Duration::from_secs(11);
        let trimmed = m.to_trim(later, &protected);
        assert_eq!(trimmed.len(), 4);
        assert_eq!(trimmed[3], p[2]);
        assert!(!trimmed.contains(&p[1]));
    }

    #[test]
    fn a_peer_is_a_candidate_again_once_its_requests_end() {
        let t0 = Instant::now();
        let mut m = ConnManager::new(limits());
        let p = peers(4);
        for peer in &p {
            m.connected(*peer, t0);
        }
        m.begin(p[0], t0);
        m.begin(p[0], t0);
        let now = t0 + Duration::from_secs(30);
        assert!(!m.to_trim(now, &HashSet::new()).contains(&p[0]));
        m.end(&p[0], t0);
        assert!(!m.to_trim(now, &HashSet::new()).contains(&p[0]));
        m.end(&p[0], t0);
        assert_eq!(m.to_trim(now, &HashSet::new()).len(), 2);
    }

    #[test]
    fn a_disconnected_peer_is_forgotten_and_unbalanced_ends_are_harmless() {
        let t0 = Instant::now();
        let mut m = ConnManager::new(limits());
        let p = peers(1)[0];
        m.end(&p, t0);
        m.connected(p, t0);
        m.disconnected(&p);
        assert_eq!(m.connected_count(), 0);
    }
}
