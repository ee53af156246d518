//! The node's wall clock: the one place that reads it for protocol timestamps. The protocol
//! crates take time as an argument; the services pass them these.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix milliseconds now (0 before 1970, `u64::MAX` past the year 584 million).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Unix seconds now.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// How far the peers' clocks may be from this node's before it says that its clock disagrees
/// with theirs: 30 s, a tenth of the 300 s freshness windows (Hyperspace envelopes, AGH
/// replay age), far beyond gossip's delay.
pub const DISAGREE_MS: i64 = 30_000;
/// Peers whose clocks are remembered; a new peer beyond that replaces the one heard from
/// longest ago.
pub const MAX_PEER_CLOCKS: usize = 256;
/// A peer's reading counts for this long after it was taken (10 minutes).
pub const PEER_CLOCK_TTL_MS: u64 = 600_000;

/// What the peers' clocks say, as read from the signed timestamps of the gossip they send
/// (Hyperspace envelopes, verified: freshness, signature and replay window passed): for each
/// peer its last offset `their ts − our now` (gossip's delay included, milliseconds). The
/// median offset over the peers heard from in the last [`PEER_CLOCK_TTL_MS`] is the node's
/// estimate of how far its own clock is off; beyond [`DISAGREE_MS`] the node says so (log and
/// `/status` `clock`). A clock more than 300 s off no longer sees its peers' envelopes pass
/// (they are refused as `stale` and counted), so the last estimate stays until it expires.
///
/// Bounded: [`MAX_PEER_CLOCKS`] peers. Shared between the mesh task (which observes) and the
/// status document (which reads), behind a mutex held for microseconds.
#[derive(Debug, Default)]
pub struct PeerClocks {
    state: std::sync::Mutex<ClockState>,
}

#[derive(Debug, Default)]
struct ClockState {
    /// peer → (its last offset in ms, our ms when it was read)
    peers: std::collections::HashMap<String, (i64, u64)>,
    /// Whether the last estimate disagreed (to log a change once).
    disagreed: bool,
    /// When the estimate was last recomputed for the log.
    checked_ms: u64,
}

/// The estimate: the median offset of the peers' clocks from ours (of an even count's two
/// middle readings, the one nearer to zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockView {
    /// Median of `peer ts − our now` (ms); positive: the peers are ahead of this node.
    pub offset_ms: Option<i64>,
    /// Peers heard from within [`PEER_CLOCK_TTL_MS`].
    pub peers: usize,
    /// `|offset_ms| > DISAGREE_MS`.
    pub disagrees: bool,
}

impl ClockView {
    /// The `/status` `clock` section.
    pub fn to_json(self) -> serde_json::Value {
        serde_json::json!({
            "offset_ms": self.offset_ms,
            "peers": self.peers,
            "disagrees": self.disagrees,
            "threshold_ms": DISAGREE_MS,
        })
    }
}

impl PeerClocks {
    /// `peer` sent an envelope stamped `their_ms`, verified at our `now_ms`. Logs (once per
    /// change, at most once a second) when the estimate starts or stops disagreeing.
    pub fn observe(&self, peer: &str, their_ms: u64, now_ms: u64) {
        let offset = i64::try_from(their_ms)
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(now_ms).unwrap_or(i64::MAX));
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(slot) = s.peers.get_mut(peer) {
            *slot = (offset, now_ms);
        } else {
            if s.peers.len() >= MAX_PEER_CLOCKS {
                let oldest = s
                    .peers
                    .iter()
                    .min_by_key(|(_, (_, at))| *at)
                    .map(|(p, _)| p.clone());
                if let Some(p) = oldest {
                    s.peers.remove(&p);
                }
            }
            s.peers.insert(peer.to_owned(), (offset, now_ms));
        }
        if now_ms.saturating_sub(s.checked_ms) < 1_000 {
            return;
        }
        s.checked_ms = now_ms;
        let view = estimate(&s.peers, now_ms);
        if view.disagrees != s.disagreed {
            s.disagreed = view.disagrees;
            let offset_ms = view.offset_ms.unwrap_or(0);
            if view.disagrees {
                tracing::warn!(
                    offset_ms,
                    peers = view.peers,
                    "the clock disagrees with the peers': their envelopes are {offset_ms} ms ahead of it (median); envelopes more than 300 s off are refused"
                );
            } else {
                tracing::info!(
                    offset_ms,
                    peers = view.peers,
                    "the clock agrees with the peers' again"
                );
            }
        }
    }

    /// The estimate at `now_ms`.
    pub fn view(&self, now_ms: u64) -> ClockView {
        let s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        estimate(&s.peers, now_ms)
    }
}

fn estimate(peers: &std::collections::HashMap<String, (i64, u64)>, now_ms: u64) -> ClockView {
    let mut offsets: Vec<i64> = peers
        .values()
        .filter(|(_, at)| now_ms.saturating_sub(*at) <= PEER_CLOCK_TTL_MS)
        .map(|(o, _)| *o)
        .collect();
    offsets.sort_unstable();
    // The median; of two middle readings, the one nearer to agreement, so that one peer in
    // two that is off does not make this node doubt its own clock.
    let offset_ms = match offsets.len() {
        0 => None,
        n if n % 2 == 1 => Some(offsets[n / 2]),
        n => Some(if offsets[n / 2 - 1].abs() <= offsets[n / 2].abs() {
            offsets[n / 2 - 1]
        } else {
            offsets[n / 2]
        }),
    };
    ClockView {
        offset_ms,
        peers: offsets.len(),
        disagrees: offset_ms.is_some_and(|o| o.abs() > DISAGREE_MS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_fresh_readings_decides() {
        let clocks = PeerClocks::default();
        let now = 1_000_000_000;
        assert_eq!(clocks.view(now).offset_ms, None);
        assert!(!clocks.view(now).disagrees);
        // Four peers agree with us, one is two minutes ahead: we agree.
        for (i, off) in [0_i64, 200, -150, 50, 120_000].iter().enumerate() {
            let ts = u64::try_from(i64::try_from(now).unwrap() + off).unwrap();
            clocks.observe(&format!("p{i}"), ts, now);
        }
        let v = clocks.view(now);
        assert_eq!((v.offset_ms, v.peers, v.disagrees), (Some(50), 5, false));
        // Two peers, one of them off: the nearer middle reading decides.
        let two = PeerClocks::default();
        two.observe("a", now, now);
        two.observe("b", now + 120_000, now);
        assert_eq!(two.view(now).offset_ms, Some(0));
        // Every peer two minutes behind us: our clock is ahead.
        for i in 0..5 {
            clocks.observe(&format!("p{i}"), now + 2_000 - 120_000, now + 2_000);
        }
        let v = clocks.view(now + 2_000);
        assert_eq!((v.offset_ms, v.disagrees), (Some(-120_000), true));
        // Readings older than the TTL no longer count.
        let later = now + 2_000 + PEER_CLOCK_TTL_MS + 1;
        assert_eq!(clocks.view(later).peers, 0);
        assert!(!clocks.view(later).disagrees);
    }

    #[test]
    fn the_table_is_bounded_by_replacing_the_oldest() {
        let clocks = PeerClocks::default();
        for i in 0..MAX_PEER_CLOCKS + 10 {
            let at = 1_000 + i as u64;
            clocks.observe(&format!("p{i}"), at, at);
        }
        let v = clocks.view(1_000 + MAX_PEER_CLOCKS as u64 + 10);
        assert_eq!(v.peers, MAX_PEER_CLOCKS);
    }
}
