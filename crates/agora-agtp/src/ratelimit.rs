//! Per-Agent-ID rate limiting of DISCOVER (discovery draft §7.2: "ANS servers MUST enforce rate
//! limiting per requesting Agent-ID … SHOULD log high-frequency DISCOVER queries as anomaly
//! signals").
//!
//! A token bucket per Agent-ID (`rate` per second, `burst` deep), driven by an injected clock in
//! milliseconds. A refused request says when to retry; the first refusal of a run is flagged as
//! an anomaly, so the node logs one line per burst rather than one per request. A run ends only
//! when the id's bucket has filled up again (the caller has stayed under the rate for `burst /
//! rate` seconds): under a sustained flood a token trickles back now and then and one request
//! is let through, but that does not start a new run, so the flood is logged once. The number of
//! tracked ids is bounded: the longest-idle buckets (which are full again anyway) are dropped.

use std::collections::HashMap;

/// Limits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateConfig {
    /// Sustained requests per second per Agent-ID.
    pub rate: f64,
    /// Bucket depth (requests allowed at once).
    pub burst: f64,
    /// Most Agent-IDs tracked at once.
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
    /// Refused: 429 with this retry hint; `anomaly` on the first refusal of a run.
    Limited {
        /// Milliseconds until a request would be allowed.
        retry_after_ms: u64,
        /// The first refusal since this id's bucket was last full.
        anomaly: bool,
    },
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at_ms: u64,
    limited: bool,
}

/// Token buckets by Agent-ID.
#[derive(Debug)]
pub struct RateLimiter {
    config: RateConfig,
    buckets: HashMap<String, Bucket>,
}

impl RateLimiter {
    /// A limiter with these limits.
    pub fn new(config: RateConfig) -> Self {
        Self {
            config,
            buckets: HashMap::new(),
        }
    }

    /// Takes one token for `agent_id` at `now_ms`.
    pub fn check(&mut self, agent_id: &str, now_ms: u64) -> Decision {
        let c = self.config;
        if !self.buckets.contains_key(agent_id) && self.buckets.len() >= c.max_keys {
            self.evict(now_ms);
        }
        let b = self.buckets.entry(agent_id.to_owned()).or_insert(Bucket {
            tokens: c.burst,
            at_ms: now_ms,
            limited: false,
        });
        let elapsed = now_ms.saturating_sub(b.at_ms) as f64 / 1000.0;
        b.tokens = (b.tokens + elapsed * c.rate).min(c.burst);
        b.at_ms = b.at_ms.max(now_ms);
        if b.tokens >= c.burst {
            // Full again: whatever run of refusals there was has ended.
            b.limited = false;
        }
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Decision::Allowed
        } else {
            let wait = if c.rate > 0.0 {
                ((1.0 - b.tokens) / c.rate * 1000.0).ceil() as u64
            } else {
                u64::MAX
            };
            let anomaly = !b.limited;
            b.limited = true;
            Decision::Limited {
                retry_after_ms: wait.max(1),
                anomaly,
            }
        }
    }

    /// Drops the buckets idle longest (at least a tenth of the table).
    fn evict(&mut self, now_ms: u64) {
        let mut ages: Vec<(u64, String)> = self
            .buckets
            .iter()
            .map(|(k, b)| (now_ms.saturating_sub(b.at_ms), k.clone()))
            .collect();
        ages.sort_unstable_by(|a, b| b.cmp(a));
        let drop = (self.buckets.len() / 10).max(1);
        for (_, k) in ages.into_iter().take(drop) {
            self.buckets.remove(&k);
        }
    }

    /// Ids tracked.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Nothing tracked.
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
}
