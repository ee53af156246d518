//! Catch-up of channel traffic across a healed link (`docs/reliability.md` "A partition").
//!
//! Gossip delivers a channel's messages to the nodes connected when they are published; a node
//! cut off by a partition, or reconnected after its link healed, never sees the ones it missed,
//! and the first seconds after a heal (before the nodes have dialled each other again) are
//! exactly such a time. So the AGH service keeps the channel messages it published or took from
//! the mesh within the replay age ([`Recent`]), and when a neighbour subscribes to a channel —
//! which a node does on every new connection for the channels it is in — it sends that
//! neighbour the channel's recent messages on the directed-envelope protocol, one at a time
//! (a burst would overrun the neighbour's inbound streams, which request-response drops). The neighbour
//! takes the ones it has not seen (its dedup window refuses the others as `duplicate`) and
//! publishes those to the channel's topic, so that the rest of its side of the partition gets
//! them too.
//!
//! Only channel traffic is kept: `say`, `capability`, `direct` without a target, `receipt` and
//! `trace` broadcasts — never `greet` or `whois`, which make presence: a greet replayed later
//! would make an agent that has left look present again. Messages older than the replay age are
//! never sent (receivers would refuse them as `expired`).
//!
//! Bounded: [`MAX_ENTRIES`] messages and [`MAX_BYTES`] bytes; when full the oldest go first; a
//! message larger than [`MAX_ENTRY_BYTES`] is not kept.

use std::collections::VecDeque;

use agora_agh::Kind;

/// Messages kept.
pub(super) const MAX_ENTRIES: usize = 1024;
/// Bytes kept.
pub(super) const MAX_BYTES: usize = 4 << 20;
/// The largest message kept.
pub(super) const MAX_ENTRY_BYTES: usize = 64 << 10;

struct Entry {
    at: i64,
    channel: String,
    bytes: Vec<u8>,
}

/// The channel messages of the last replay age; see the module doc.
pub(super) struct Recent {
    entries: VecDeque<Entry>,
    bytes: usize,
    age_secs: i64,
}

impl Recent {
    /// Keeps messages for `age_secs` (the replay age).
    pub(super) fn new(age_secs: i64) -> Self {
        Self {
            entries: VecDeque::new(),
            bytes: 0,
            age_secs,
        }
    }

    /// Whether a broadcast envelope of `kind` is channel traffic to keep.
    pub(super) fn keeps(kind: Kind) -> bool {
        !matches!(kind, Kind::Greet | Kind::Whois)
    }

    /// Keeps `bytes`, a message of `channel` taken at `now` (Unix seconds).
    pub(super) fn push(&mut self, now: i64, channel: &str, bytes: &[u8]) {
        if bytes.len() > MAX_ENTRY_BYTES {
            return;
        }
        self.expire(now);
        while self.entries.len() >= MAX_ENTRIES || self.bytes + bytes.len() > MAX_BYTES {
            let Some(old) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= old.bytes.len();
        }
        self.bytes += bytes.len();
        self.entries.push_back(Entry {
            at: now,
            channel: channel.to_owned(),
            bytes: bytes.to_vec(),
        });
    }

    /// The messages of `channel` still within the replay age at `now`, oldest first.
    pub(super) fn of(&mut self, now: i64, channel: &str) -> Vec<Vec<u8>> {
        self.expire(now);
        self.entries
            .iter()
            .filter(|e| e.channel == channel)
            .map(|e| e.bytes.clone())
            .collect()
    }

    fn expire(&mut self, now: i64) {
        while let Some(e) = self.entries.front() {
            if now - e.at <= self.age_secs {
                break;
            }
            self.bytes -= e.bytes.len();
            self.entries.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_a_channels_messages_for_the_replay_age_within_its_bounds() {
        let mut r = Recent::new(300);
        r.push(1_000, "a", b"one");
        r.push(1_010, "b", b"two");
        r.push(1_200, "a", b"three");
        assert_eq!(r.of(1_250, "a"), vec![b"one".to_vec(), b"three".to_vec()]);
        assert_eq!(
            r.of(1_305, "a"),
            vec![b"three".to_vec()],
            "one is past 300 s"
        );
        assert_eq!(r.entries.len(), 2);
        // Bounded by count: the oldest go first.
        for i in 0..MAX_ENTRIES + 5 {
            r.push(1_400, "c", format!("m{i}").as_bytes());
        }
        assert_eq!(r.entries.len(), MAX_ENTRIES);
        assert_eq!(r.of(1_400, "c")[0], b"m5".to_vec());
        // Bounded by bytes; a message too large is not kept.
        r.push(1_400, "d", &vec![0; MAX_ENTRY_BYTES + 1]);
        assert!(r.of(1_400, "d").is_empty());
        for _ in 0..100 {
            r.push(1_400, "e", &vec![1; MAX_ENTRY_BYTES]);
        }
        assert!(r.bytes <= MAX_BYTES);
        assert!(!r.entries.is_empty());
    }

    #[test]
    fn presence_is_not_kept() {
        assert!(!Recent::keeps(Kind::Greet));
        assert!(!Recent::keeps(Kind::Whois));
        assert!(Recent::keeps(Kind::Say));
        assert!(Recent::keeps(Kind::Trace));
    }
}
