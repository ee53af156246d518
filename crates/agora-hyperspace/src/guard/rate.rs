//! Guard rate limits (Hyperspace spec §4.2 `guard.checkRateLimit`): one sliding log
//! ([`RateWindow`]) per key, keys kept in the namespace of their [`Caller`].

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::CheckRateLimitResult;

/// Who calls `guard.checkRateLimit`: rate-limit keys live in the caller's namespace, so one
/// caller cannot use up (or read) another's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller<'a> {
    /// The node's own clients: the API key or a loopback client without credentials. They share
    /// one namespace.
    Node,
    /// The holder of a session token, by session id: a namespace per session.
    Session(&'a str),
}

impl Caller<'_> {
    /// The stored key of `key` in this namespace: `n:{key}` or `s:{len}:{sessionId}:{key}` (the
    /// length keeps a session id from running into the key).
    pub(super) fn stored_key(self, key: &str) -> String {
        match self {
            Self::Node => format!("n:{key}"),
            Self::Session(id) => format!("s:{}:{id}:{key}", id.len()),
        }
    }

    /// The prefix of every stored key of this namespace.
    pub(super) fn prefix(self) -> String {
        self.stored_key("")
    }
}

/// One rate-limit key's sliding log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RateWindow {
    /// Unix milliseconds of the allowed calls still in the window, oldest first.
    pub hits: VecDeque<u64>,
    /// The window of the last call, in milliseconds.
    pub window_ms: u64,
    /// Unix milliseconds of the last call (allowed or not).
    pub last_seen_ms: u64,
}

impl RateWindow {
    /// One `checkRateLimit` call at `now_ms`: prune, decide, record if allowed.
    pub fn check(&mut self, limit: u64, window_ms: u64, now_ms: u64) -> CheckRateLimitResult {
        let now = self.hits.back().map_or(now_ms, |&last| now_ms.max(last));
        while let Some(&oldest) = self.hits.front() {
            if oldest.saturating_add(window_ms) <= now {
                self.hits.pop_front();
            } else {
                break;
            }
        }
        let counted = self.hits.len() as u64;
        let allowed = counted < limit;
        if allowed {
            self.hits.push_back(now);
        }
        self.window_ms = window_ms;
        self.last_seen_ms = now;
        CheckRateLimitResult {
            allowed,
            remaining: limit.saturating_sub(self.hits.len() as u64),
            reset_at: self
                .hits
                .front()
                .map_or(now, |&oldest| oldest.saturating_add(window_ms)),
        }
    }

    /// No call of the log counts any more at `now_ms`.
    #[must_use]
    pub fn is_idle(&self, now_ms: u64) -> bool {
        self.hits
            .back()
            .is_none_or(|&last| last.saturating_add(self.window_ms) <= now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_window_clock_going_back_is_clamped() {
        let mut window = RateWindow::default();
        assert!(window.check(2, 100, 1000).allowed);
        let second = window.check(2, 100, 900);
        assert!(second.allowed);
        assert_eq!(window.hits, VecDeque::from([1000, 1000]));
        assert_eq!(second.reset_at, 1100);
    }
}
