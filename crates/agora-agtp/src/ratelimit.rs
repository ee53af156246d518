//! Per-Agent-ID rate limiting of DISCOVER (discovery draft §7.2: "ANS servers MUST enforce rate
//! limiting per requesting Agent-ID … SHOULD log high-frequency DISCOVER queries as anomaly
//! signals").
//!
//! A token bucket per Agent-ID (`rate` per second, `burst` deep), driven by an injected clock in
//! milliseconds; a refused request says when to retry, and the first refusal of a run is flagged
//! as an anomaly. The buckets live in the [`agora_bucket`] crate, which the node's JSON-RPC face
//! and memory service use too; they are re-exported here under their AGTP names.

pub use agora_bucket::{Decision, RateConfig, RateLimiter};
