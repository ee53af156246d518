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
