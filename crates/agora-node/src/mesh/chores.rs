//! The mesh's periodic DHT chores on schedules of its own, each wait stretched by a random
//! fraction (`docs/node.md` "DHT chores").
//!
//! Kademlia (libp2p-kad 0.49) refreshes its routing table and re-provides every provided key on
//! fixed intervals counted from the node's start. Nodes started together (a restart of a site, a
//! 500-node bench) therefore do both at the same moment, every hour, and every re-provide of one
//! node goes out at once: one DHT walk per key, each dialling peers the connection manager
//! closes again. The node turns both off in Kademlia's configuration and asks for them here:
//! - a routing table refresh ([`Chore::Bootstrap`]) every [`BOOTSTRAP_EVERY`], stretched by a
//!   random fraction in [0, 1);
//! - each provided key re-provided ([`Chore::Reprovide`]) on its own, every [`REPROVIDE_EVERY`]
//!   stretched by a random fraction in [0, [`REPROVIDE_STRETCH`]), which keeps it well inside the
//!   provider records' lifetime.
//!
//! Pure logic with an injected clock and random seed; the mesh task executes what falls due.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How often the routing table is refreshed (before the stretch). libp2p's default is 5
/// minutes; each refresh is a lookup per bucket that dials whoever it visits, and the node's own
/// lookups (cards, providers, rendezvous) keep the table fresh in between. At 120 nodes the
/// 5-minute refreshes alone kept both cores busy and cut task gossip delivery to 70 %.
pub const BOOTSTRAP_EVERY: Duration = Duration::from_secs(60 * 60);
/// How often a provided key is provided again (before the stretch).
pub const REPROVIDE_EVERY: Duration = Duration::from_secs(60 * 60);
/// The largest stretch of a re-provide interval: 1 h × 1.5 stays under the 2 h provider record
/// lifetime.
pub const REPROVIDE_STRETCH: f64 = 0.5;
/// Most keys scheduled, as many as Kademlia's memory store provides (past it `start_providing`
/// fails, so no key is lost from the schedule that the store holds).
pub const MAX_PROVIDED: usize = 1024;

/// `d` stretched by a random fraction in [0, `most`).
pub fn stretch(rng: &mut fastrand::Rng, d: Duration, most: f64) -> Duration {
    d + d.mul_f64(rng.f64() * most)
}

/// A chore that fell due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Chore {
    /// Refresh the routing table (`kad::Behaviour::bootstrap`).
    Bootstrap,
    /// Provide this key again (`kad::Behaviour::start_providing`).
    Reprovide(Vec<u8>),
}

/// The schedule.
#[derive(Debug)]
pub struct Chores {
    bootstrap: Instant,
    provided: BTreeMap<Vec<u8>, Instant>,
    rng: fastrand::Rng,
}

impl Chores {
    /// A schedule starting at `now`, its jitter seeded with `seed`.
    pub fn new(now: Instant, seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        Self {
            bootstrap: now + stretch(&mut rng, BOOTSTRAP_EVERY, 1.0),
            provided: BTreeMap::new(),
            rng,
        }
    }

    /// The node (just) provided `key`: it is provided again in about [`REPROVIDE_EVERY`].
    /// Returns false when the schedule is full ([`MAX_PROVIDED`]) and the key is not in it.
    pub fn provided(&mut self, key: Vec<u8>, now: Instant) -> bool {
        if self.provided.len() >= MAX_PROVIDED && !self.provided.contains_key(&key) {
            return false;
        }
        let at = now + stretch(&mut self.rng, REPROVIDE_EVERY, REPROVIDE_STRETCH);
        self.provided.insert(key, at);
        true
    }

    /// The node no longer provides `key`.
    pub fn unprovided(&mut self, key: &[u8]) {
        self.provided.remove(key);
    }

    /// Keys scheduled.
    pub fn keys(&self) -> usize {
        self.provided.len()
    }

    /// The chores due at `now`, each rescheduled.
    pub fn due(&mut self, now: Instant) -> Vec<Chore> {
        let mut out = Vec::new();
        if now >= self.bootstrap {
            out.push(Chore::Bootstrap);
            self.bootstrap = now + stretch(&mut self.rng, BOOTSTRAP_EVERY, 1.0);
        }
        let keys: Vec<Vec<u8>> = self
            .provided
            .iter()
            .filter(|(_, at)| now >= **at)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let at = now + stretch(&mut self.rng, REPROVIDE_EVERY, REPROVIDE_STRETCH);
            self.provided.insert(key.clone(), at);
            out.push(Chore::Reprovide(key));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_comes_once_per_stretched_period() {
        let now = Instant::now();
        let mut c = Chores::new(now, 3);
        assert!(c.due(now).is_empty());
        let first = c.bootstrap;
        assert!(first >= now + BOOTSTRAP_EVERY && first < now + 2 * BOOTSTRAP_EVERY);
        assert!(c.due(first - Duration::from_secs(1)).is_empty());
        assert_eq!(c.due(first), [Chore::Bootstrap]);
        assert!(c.due(first).is_empty(), "rescheduled");
        assert!(c.bootstrap >= first + BOOTSTRAP_EVERY);
    }

    #[test]
    fn keys_are_reprovided_each_on_its_own_within_the_record_lifetime() {
        let now = Instant::now();
        let mut c = Chores::new(now, 5);
        for k in 0..100u8 {
            assert!(c.provided(vec![k], now));
        }
        let ats: Vec<Instant> = c.provided.values().copied().collect();
        let lifetime = Duration::from_secs(2 * 60 * 60);
        assert!(
            ats.iter()
                .all(|at| *at >= now + REPROVIDE_EVERY && *at < now + lifetime)
        );
        let (lo, hi) = (
            ats.iter().min().copied().unwrap_or(now),
            ats.iter().max().copied().unwrap_or(now),
        );
        assert!(hi - lo > REPROVIDE_EVERY / 4, "spread over {:?}", hi - lo);
        // Walking the clock by a minute never brings more than a handful at once.
        let mut t = now + REPROVIDE_EVERY;
        let mut seen = 0;
        while t < now + lifetime {
            let due = c
                .due(t)
                .into_iter()
                .filter(|c| matches!(c, Chore::Reprovide(_)))
                .count();
            assert!(due <= 10, "{due} keys re-provided in one minute");
            seen += due;
            t += Duration::from_secs(60);
        }
        assert_eq!(seen, 100, "each key once in the first period");
        c.unprovided(&[7]);
        assert_eq!(c.keys(), 99);
    }

    #[test]
    fn the_schedule_is_bounded() {
        let now = Instant::now();
        let mut c = Chores::new(now, 1);
        for k in 0..MAX_PROVIDED as u32 {
            assert!(c.provided(k.to_be_bytes().to_vec(), now));
        }
        assert!(!c.provided(b"one more".to_vec(), now));
        assert!(
            c.provided(0u32.to_be_bytes().to_vec(), now),
            "a known key is rescheduled"
        );
        assert_eq!(c.keys(), MAX_PROVIDED);
    }
}
