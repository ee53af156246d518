//! # agora-bucket — token buckets, sans IO
//!
//! A [`TokenBucket`] holds up to `burst` tokens and gains `rate` tokens a second; a request takes
//! one, and a refused request learns how many milliseconds until one is there. Time is an
//! argument (Unix or any other milliseconds, as long as one bucket always gets the same clock):
//! no clock is read, nothing blocks, nothing is spawned.
//!
//! | item | what it is | used by |
//! |---|---|---|
//! | [`TokenBucket`] | one bucket, its limits passed on every call | the JSON-RPC face's per-connection and per-credential limits (`rate` deep, one second of burst) |
//! | [`RateLimiter`], [`RateConfig`], [`Decision`] | a bounded table of buckets by key; a refusal carries a retry hint and flags the first refusal of a run as an anomaly | AGTP `DISCOVER` per Agent-ID (AGTP discovery draft §7.2), the memory service's per-peer limits |
//!
//! Why a crate of its own: both the AGTP face (a sans-IO protocol crate) and the node's JSON-RPC
//! face need the same bucket, and neither should depend on the other for it. `governor` was
//! considered: it reads its own clock (or needs a clock trait implemented), keys its state by
//! `Hash` in a concurrent map, and has no "first refusal of a run" signal; these 200 lines do
//! exactly what both callers need and are tested here.
//!
//! # Time
//!
//! Time is whole milliseconds. A call whose `now_ms` is earlier than the bucket's last call is
//! taken as happening at that last call (no refill, and the bucket's time does not go back).
//! Refill is `elapsed_ms / 1000 × rate`, capped at `burst`.

use std::collections::HashMap;

/// One token bucket: at most `burst` tokens, `rate` more each second.
///
/// The limits are passed on each call rather than stored, so a table of many buckets with the
/// same limits keeps them once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenBucket {
    tokens: f64,
    at_ms: u64,
}

impl TokenBucket {
    /// A bucket holding `tokens` (usually `burst`: a new bucket is full) at `now_ms`.
    #[must_use]
    pub fn new(tokens: f64, now_ms: u64) -> Self {
        Self {
            tokens,
            at_ms: now_ms,
        }
    }

    /// Adds the tokens earned since the last call (at most up to `burst`); `true` when the
    /// bucket is then full.
    pub fn refill(&mut self, rate: f64, burst: f64, now_ms: u64) -> bool {
        #[allow(clippy::cast_precision_loss)] // milliseconds below 2^53 are exact
        let elapsed = now_ms.saturating_sub(self.at_ms) as f64 / 1000.0;
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.at_ms = self.at_ms.max(now_ms);
        self.tokens >= burst
    }

    /// Takes one token if there is one (no refill); otherwise the milliseconds until there is
    /// one at `rate` (at least 1; `u64::MAX` when `rate` is not positive).
    ///
    /// # Errors
    ///
    /// The retry hint, in milliseconds, when the bucket holds less than one token.
    pub fn try_take(&mut self, rate: f64) -> Result<(), u64> {
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        let wait = if rate > 0.0 {
            // Positive and finite for a positive rate; `as` saturates anyway.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let ms = ((1.0 - self.tokens) / rate * 1000.0).ceil() as u64;
            ms
        } else {
            u64::MAX
        };
        Err(wait.max(1))
    }

    /// [`refill`](Self::refill) at `now_ms`, then [`try_take`](Self::try_take).
    ///
    /// # Errors
    ///
    /// The retry hint, in milliseconds, when no token is left.
    pub fn take(&mut self, rate: f64, burst: f64, now_ms: u64) -> Result<(), u64> {
        self.refill(rate, burst, now_ms);
        self.try_take(rate)
    }

    /// The time of the last call (the latest `now_ms` seen).
    #[must_use]
    pub fn last_ms(&self) -> u64 {
        self.at_ms
    }

    /// Tokens held at the last call.
    #[must_use]
    pub fn tokens(&self) -> f64 {
        self.tokens
    }
}

/// Limits of a [`RateLimiter`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateConfig {
    /// Sustained requests per second per key.
    pub rate: f64,
    /// Bucket depth (requests allowed at once).
    pub burst: f64,
    /// Most keys tracked at once.
    pub max_keys: usize,
}

impl Default for RateConfig {
    fn default() -> Self {
        Self {
            rate: 20.0,
            burst: 40.0,
            max_keys: 100_000,
        }
    }
}

/// The decision on one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead.
    Allowed,
    /// Refused (AGTP answers 429) with this retry hint; `anomaly` on the first refusal of a run.
    Limited {
        /// Milliseconds until a request would be allowed.
        retry_after_ms: u64,
        /// The first refusal since this key's bucket was last full.
        anomaly: bool,
    },
}

#[derive(Clone, Copy, Debug)]
struct Keyed {
    bucket: TokenBucket,
    limited: bool,
}

/// Token buckets by key (an Agent-ID, a peer id), `burst` deep and `rate` per second each.
///
/// A refused request says when to retry; the first refusal of a run is flagged as an anomaly,
/// so a caller logs one line per burst rather than one per request. A run ends only when the
/// key's bucket has filled up again (the caller has stayed under the rate for `burst / rate`
/// seconds): under a sustained flood a token trickles back now and then and one request is let
/// through, but that does not start a new run, so the flood is logged once. The number of
/// tracked keys is bounded: the longest-idle buckets (which are full again anyway) are dropped.
#[derive(Debug)]
pub struct RateLimiter {
    config: RateConfig,
    buckets: HashMap<String, Keyed>,
}

impl RateLimiter {
    /// A limiter with these limits.
    #[must_use]
    pub fn new(config: RateConfig) -> Self {
        Self {
            config,
            buckets: HashMap::new(),
        }
    }

    /// Takes one token for `key` at `now_ms`.
    pub fn check(&mut self, key: &str, now_ms: u64) -> Decision {
        let c = self.config;
        if !self.buckets.contains_key(key) && self.buckets.len() >= c.max_keys {
            self.evict(now_ms);
        }
        let b = self.buckets.entry(key.to_owned()).or_insert_with(|| Keyed {
            bucket: TokenBucket::new(c.burst, now_ms),
            limited: false,
        });
        if b.bucket.refill(c.rate, c.burst, now_ms) {
            // Full again: whatever run of refusals there was has ended.
            b.limited = false;
        }
        match b.bucket.try_take(c.rate) {
            Ok(()) => Decision::Allowed,
            Err(retry_after_ms) => {
                let anomaly = !b.limited;
                b.limited = true;
                Decision::Limited {
                    retry_after_ms,
                    anomaly,
                }
            }
        }
    }

    /// Drops the buckets idle longest (at least a tenth of the table).
    fn evict(&mut self, now_ms: u64) {
        let mut ages: Vec<(u64, String)> = self
            .buckets
            .iter()
            .map(|(k, b)| (now_ms.saturating_sub(b.bucket.last_ms()), k.clone()))
            .collect();
        ages.sort_unstable_by(|a, b| b.cmp(a));
        let drop = (self.buckets.len() / 10).max(1);
        for (_, k) in ages.into_iter().take(drop) {
            self.buckets.remove(&k);
        }
    }

    /// Keys tracked.
    #[must_use]
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Nothing tracked.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter() -> RateLimiter {
        RateLimiter::new(RateConfig {
            rate: 10.0,
            burst: 3.0,
            max_keys: 4,
        })
    }

    #[test]
    fn burst_then_refusal_with_retry_hint_and_one_anomaly() {
        let mut l = limiter();
        for _ in 0..3 {
            assert_eq!(l.check("a", 0), Decision::Allowed);
        }
        assert_eq!(
            l.check("a", 0),
            Decision::Limited {
                retry_after_ms: 100,
                anomaly: true
            }
        );
        assert_eq!(
            l.check("a", 50),
            Decision::Limited {
                retry_after_ms: 50,
                anomaly: false
            }
        );
        assert_eq!(l.check("a", 100), Decision::Allowed);
        // Other ids are independent.
        assert_eq!(l.check("b", 100), Decision::Allowed);
    }

    #[test]
    fn a_sustained_flood_is_one_anomaly_until_the_bucket_refills() {
        let mut l = RateLimiter::new(RateConfig {
            rate: 20.0,
            burst: 40.0,
            max_keys: 4,
        });
        // 200 requests a second for ten seconds: refused most of the time, let through as
        // tokens trickle back (20 a second), flagged once.
        let mut anomalies = 0;
        let mut allowed = 0;
        for i in 0..2000u64 {
            match l.check("hot", i * 5) {
                Decision::Allowed => allowed += 1,
                Decision::Limited { anomaly, .. } => anomalies += u32::from(anomaly),
            }
        }
        assert_eq!(anomalies, 1);
        assert!((230..=250).contains(&allowed), "{allowed}");
        // Quiet until the bucket is full again (2 s): the next burst is a new run.
        let t = 2000 * 5 + 2000;
        for k in 0..40 {
            assert_eq!(l.check("hot", t + k), Decision::Allowed);
        }
        assert!(matches!(
            l.check("hot", t + 40),
            Decision::Limited { anomaly: true, .. }
        ));
        // Quiet for less than that: still the same run.
        let t2 = t + 40 + 1000;
        let mut flagged = false;
        for k in 0..40 {
            if let Decision::Limited { anomaly, .. } = l.check("hot", t2 + k) {
                flagged |= anomaly;
            }
        }
        assert!(!flagged);
    }

    #[test]
    fn the_table_is_bounded() {
        let mut l = limiter();
        for i in 0..20 {
            l.check(&format!("id{i}"), i);
        }
        assert!(l.len() <= 4);
    }
    #[test]
    fn one_bucket_refills_at_its_rate() {
        // Two tokens, two a second: the third take waits 500 ms.
        let mut b = TokenBucket::new(2.0, 1_000);
        assert!(b.take(2.0, 2.0, 1_000).is_ok());
        assert!(b.take(2.0, 2.0, 1_000).is_ok());
        assert_eq!(b.take(2.0, 2.0, 1_000), Err(500));
        assert!(b.take(2.0, 2.0, 1_500).is_ok());
    }

    #[test]
    fn time_going_back_earns_nothing() {
        let mut b = TokenBucket::new(1.0, 1_000);
        assert!(b.take(1.0, 1.0, 1_000).is_ok());
        assert_eq!(b.take(1.0, 1.0, 500), Err(1000));
        assert_eq!(b.last_ms(), 1_000);
        assert!(b.take(1.0, 1.0, 2_000).is_ok());
    }

    #[test]
    fn refill_is_capped_at_the_burst() {
        let mut b = TokenBucket::new(0.0, 0);
        assert!(b.refill(10.0, 3.0, 60_000));
        assert!((b.tokens() - 3.0).abs() < f64::EPSILON);
        assert_eq!(TokenBucket::new(0.0, 0).try_take(0.0), Err(u64::MAX));
    }
}
