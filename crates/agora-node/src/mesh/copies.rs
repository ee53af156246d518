//! Copies of gossip messages known before their signature is checked (`docs/node.md` "Copies
//! before signatures"; issue 35 item 1).
//!
//! [`Taken`] is the ids of the messages gossipsub took lately, shared by the node's gossipsub
//! behaviour (which records each id as it hands the message on) and every connection's inbound
//! reader (which asks, per published message of an RPC, before gossipsub's decoder would check
//! its signature; `agora_hyperspace::published::take_known`). A copy whose id is here goes to
//! gossipsub as it came, unchecked, and gossipsub drops it as the copy it is (still counting it
//! for scoring and IDONTWANT); every other message is decoded and checked as before.
//!
//! Why that is safe: an id is recorded only once gossipsub has put it in its own duplicate cache
//! (it emits the message only after that), and it is forgotten after [`TAKEN_FOR`], a twelfth of
//! gossipsub's duplicate-cache time, so gossipsub still holds every id this set says it took:
//! a message passed on unchecked can only be dropped as a copy, never delivered. A forged message
//! under the id of one already taken is therefore dropped as a copy instead of being refused for
//! its signature: its sender is not penalised for it, and nothing else changes.
//!
//! Copies come from the other mesh peers within milliseconds and by IWANT within a heartbeat or
//! two, so [`TAKEN_FOR`] is short; a copy later than that is checked as before. The set holds the
//! first 128 bits of each id's SHA-256 (to pass a forged message as a copy, a sender would need
//! a second preimage of a taken id's digest), about 50 bytes per id where the ids themselves
//! took about 190. Bounded: at most [`MAX_TAKEN`] ids; past it the oldest is
//! forgotten early (its copies are then checked again, as before this set).

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use libp2p::gossipsub::MessageId;

/// Gossipsub's duplicate-cache time (its default, which the node keeps).
pub const DUPLICATE_CACHE_TIME: Duration = Duration::from_secs(60);
/// How long an id is known here: long enough for the copies that follow a message (mesh peers'
/// forwards, answers to IWANT), far within [`DUPLICATE_CACHE_TIME`], so that gossipsub's own
/// cache outlives every entry even when gossipsub's event reached the node many seconds late.
pub const TAKEN_FOR: Duration = Duration::from_secs(5);
/// Most ids held: 1,600 messages a second for [`TAKEN_FOR`], at most 1.5 MiB.
pub const MAX_TAKEN: usize = 8 * 1024;

/// What the inbound readers did with the published messages they read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SignatureCounts {
    /// Messages gossipsub's decoder checked (signature and all).
    pub checked: u64,
    /// Copies of messages already taken, passed on without a second check.
    pub spared: u64,
}

#[derive(Debug, Default)]
struct Ids {
    set: HashSet<u128>,
    order: VecDeque<(Instant, u128)>,
}

impl Ids {
    /// `id` as the first 128 bits of its SHA-256.
    fn key(id: &MessageId) -> u128 {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(&id.0);
        let mut first = [0u8; 16];
        first.copy_from_slice(&digest[..16]);
        u128::from_be_bytes(first)
    }

    fn expire(&mut self, now: Instant) {
        while let Some((at, _)) = self.order.front() {
            if now.saturating_duration_since(*at) < TAKEN_FOR && self.order.len() <= MAX_TAKEN {
                break;
            }
            if let Some((_, id)) = self.order.pop_front() {
                self.set.remove(&id);
            }
        }
    }
}

/// The ids of the messages gossipsub took lately; cheap to clone (one shared set).
#[derive(Clone, Debug, Default)]
pub struct Taken {
    ids: Arc<Mutex<Ids>>,
    checked: Arc<AtomicU64>,
    spared: Arc<AtomicU64>,
}

impl Taken {
    fn ids(&self) -> MutexGuard<'_, Ids> {
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that gossipsub took the message `id` (it is in gossipsub's duplicate cache).
    pub fn record(&self, id: &MessageId) {
        let now = Instant::now();
        let key = Ids::key(id);
        let mut ids = self.ids();
        if ids.set.insert(key) {
            ids.order.push_back((now, key));
        }
        ids.expire(now);
    }

    /// Whether gossipsub took the message `id` within the last [`TAKEN_FOR`].
    #[must_use]
    pub fn contains(&self, id: &MessageId) -> bool {
        let key = Ids::key(id);
        let mut ids = self.ids();
        ids.expire(Instant::now());
        ids.set.contains(&key)
    }

    /// Counts messages checked by the decoder and copies spared a check.
    pub fn count(&self, checked: usize, spared: usize) {
        let widen = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        self.checked.fetch_add(widen(checked), Ordering::Relaxed);
        self.spared.fetch_add(widen(spared), Ordering::Relaxed);
    }

    /// The counts so far.
    #[must_use]
    pub fn counts(&self) -> SignatureCounts {
        SignatureCounts {
            checked: self.checked.load(Ordering::Relaxed),
            spared: self.spared.load(Ordering::Relaxed),
        }
    }

    /// How many ids are held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.ids().set.len()
    }

    /// Whether no id is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taken_ids_are_known_and_the_set_stays_bounded() {
        let taken = Taken::default();
        let id = |i: usize| MessageId::new(&i.to_be_bytes());
        assert!(!taken.contains(&id(0)));
        taken.record(&id(0));
        taken.record(&id(0));
        assert!(taken.contains(&id(0)));
        assert_eq!(taken.len(), 1);
        for i in 1..=MAX_TAKEN {
            taken.record(&id(i));
        }
        assert_eq!(taken.len(), MAX_TAKEN);
        assert!(!taken.contains(&id(0)), "the oldest goes first");
        assert!(taken.contains(&id(MAX_TAKEN)));
    }

    #[test]
    fn ids_are_forgotten_well_before_gossipsub_forgets_them() {
        const { assert!(TAKEN_FOR.as_secs() * 10 <= DUPLICATE_CACHE_TIME.as_secs()) };
        let taken = Taken::default();
        let old = MessageId::new(b"old");
        {
            let mut ids = taken.ids();
            let then = Instant::now()
                .checked_sub(TAKEN_FOR)
                .expect("the clock started long ago");
            let key = Ids::key(&old);
            ids.set.insert(key);
            ids.order.push_back((then, key));
        }
        assert!(!taken.contains(&old));
        assert!(taken.is_empty());
    }
}
