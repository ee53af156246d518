//! Index freshness (discovery draft §4.4): every indexed agent with an endpoint is re-described
//! on an interval; three consecutive failures remove it from the index (and the governance
//! platform is notified — the node logs and audits it).
//!
//! A schedule driven by an injected clock (milliseconds): the node asks what is due, sends the
//! DESCRIBEs, and reports each outcome. After a failure the agent is retried sooner
//! (`retry_ms`), so a dead agent is removed in minutes rather than days.
//!
//! What the host says is applied ([`host_transition`]): a DESCRIBE document whose lifecycle
//! state (`status`, base draft -09, or the draft's `lifecycle_state`) is `suspended`, `retired`
//! or `deprecated` moves the index entry to Suspended, Revoked or Deprecated (§4.3: the agent
//! leaves discovery). A host can take its agent out of service but never put it back: `active`
//! changes nothing, and only the governance platform's lifecycle methods make the entry Active
//! again.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value};

use crate::manifest::{Lifecycle, Transition};

/// Consecutive failures that remove an agent.
pub const MAX_FAILURES: u32 = 3;

/// Intervals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefreshConfig {
    /// Between successful refreshes (default 24 h).
    pub interval_ms: u64,
    /// After a failed one (default 5 min).
    pub retry_ms: u64,
}

impl Default for RefreshConfig {
    fn default() -> Self {
        Self {
            interval_ms: 24 * 3600 * 1000,
            retry_ms: 5 * 60 * 1000,
        }
    }
}

/// What a failed refresh leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterFailure {
    /// Try again later; this many consecutive failures so far.
    Retry(u32),
    /// The third consecutive failure: remove the agent.
    Remove,
}

/// The refresh schedule.
#[derive(Debug, Default)]
pub struct Schedule {
    config: RefreshConfig,
    /// id → (due at, consecutive failures, in flight).
    agents: HashMap<String, (u64, u32, bool)>,
    /// (due at, id), for cheap `due` scans.
    queue: BTreeSet<(u64, String)>,
}

impl Schedule {
    /// An empty schedule.
    pub fn new(config: RefreshConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// Tracks an agent (newly registered or refreshed): first refresh one interval from now.
    pub fn track(&mut self, id: &str, now_ms: u64) {
        self.untrack(id);
        let due = now_ms.saturating_add(self.config.interval_ms);
        self.agents.insert(id.to_owned(), (due, 0, false));
        self.queue.insert((due, id.to_owned()));
    }

    /// Stops tracking an agent.
    pub fn untrack(&mut self, id: &str) {
        if let Some((due, _, _)) = self.agents.remove(id) {
            self.queue.remove(&(due, id.to_owned()));
        }
    }

    /// The agents due at `now_ms`, at most `max`; they are marked in flight until reported.
    pub fn due(&mut self, now_ms: u64, max: usize) -> Vec<String> {
        let ids: Vec<(u64, String)> = self
            .queue
            .iter()
            .take_while(|(due, _)| *due <= now_ms)
            .take(max)
            .cloned()
            .collect();
        for key in &ids {
            self.queue.remove(key);
            if let Some(a) = self.agents.get_mut(&key.1) {
                a.2 = true;
            }
        }
        ids.into_iter().map(|(_, id)| id).collect()
    }

    /// When the next refresh is due, if any.
    pub fn next_due(&self) -> Option<u64> {
        self.queue.first().map(|(d, _)| *d)
    }

    fn requeue(&mut self, id: &str, due: u64, failures: u32) {
        if let Some((old, _, _)) = self.agents.get(id) {
            self.queue.remove(&(*old, id.to_owned()));
        }
        self.agents.insert(id.to_owned(), (due, failures, false));
        self.queue.insert((due, id.to_owned()));
    }

    /// The DESCRIBE answered.
    pub fn succeeded(&mut self, id: &str, now_ms: u64) {
        if self.agents.contains_key(id) {
            self.requeue(id, now_ms.saturating_add(self.config.interval_ms), 0);
        }
    }

    /// The DESCRIBE failed (no answer, error status, unusable document).
    pub fn failed(&mut self, id: &str, now_ms: u64) -> AfterFailure {
        let failures = self.agents.get(id).map_or(0, |a| a.1) + 1;
        if failures >= MAX_FAILURES {
            self.untrack(id);
            return AfterFailure::Remove;
        }
        self.requeue(id, now_ms.saturating_add(self.config.retry_ms), failures);
        AfterFailure::Retry(failures)
    }

    /// Agents tracked.
    pub fn len(&self) -> usize {
        self.agents.len()
    }

    /// Nothing tracked.
    pub fn is_empty(&self) -> bool {
        self.agents.is_empty()
    }
}

/// The transition a host's DESCRIBE document asks for, if any: the entry is in `current`
/// and the document declares `suspended` (DEACTIVATE), `retired`/`revoked` (REVOKE) or
/// `deprecated` (DEPRECATE). `None` when the document declares no state, an unknown one,
/// `active`, or the state the entry is already in, and when the transition is not allowed
/// from `current` (a Revoked entry stays Revoked).
pub fn host_transition(doc: &Map<String, Value>, current: Lifecycle) -> Option<Transition> {
    let declared = ["status", "lifecycle_state"]
        .iter()
        .find_map(|k| doc.get(*k).and_then(Value::as_str))?
        .parse::<Lifecycle>()
        .ok()?;
    let transition = match declared {
        Lifecycle::Active => return None,
        Lifecycle::Suspended => Transition::Deactivate,
        Lifecycle::Revoked => Transition::Revoke,
        Lifecycle::Deprecated => Transition::Deprecate,
    };
    match transition.apply(Some(current)) {
        Ok(to) if to != current => Some(transition),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_lifecycle_state_is_applied_one_way() {
        let doc = |v: Value| v.as_object().cloned().unwrap_or_default();
        use serde_json::json;
        for (state, want) in [
            ("suspended", Some(Transition::Deactivate)),
            ("Suspended", Some(Transition::Deactivate)),
            ("retired", Some(Transition::Revoke)),
            ("Revoked", Some(Transition::Revoke)),
            ("deprecated", Some(Transition::Deprecate)),
            ("active", None),
            ("paused", None),
        ] {
            assert_eq!(
                host_transition(&doc(json!({"status": state})), Lifecycle::Active),
                want,
                "{state}"
            );
        }
        // The draft's field name too; `status` wins when both are sent.
        assert_eq!(
            host_transition(
                &doc(json!({"lifecycle_state": "Deprecated"})),
                Lifecycle::Active
            ),
            Some(Transition::Deprecate)
        );
        assert_eq!(
            host_transition(
                &doc(json!({"status": "active", "lifecycle_state": "suspended"})),
                Lifecycle::Active
            ),
            None
        );
        // No state, not a string, already there, or not allowed from there: nothing.
        assert_eq!(host_transition(&doc(json!({})), Lifecycle::Active), None);
        assert_eq!(
            host_transition(&doc(json!({"status": 3})), Lifecycle::Active),
            None
        );
        assert_eq!(
            host_transition(&doc(json!({"status": "suspended"})), Lifecycle::Suspended),
            None
        );
        assert_eq!(
            host_transition(&doc(json!({"status": "active"})), Lifecycle::Suspended),
            None
        );
        assert_eq!(
            host_transition(&doc(json!({"status": "suspended"})), Lifecycle::Revoked),
            None
        );
        assert_eq!(
            host_transition(&doc(json!({"status": "retired"})), Lifecycle::Suspended),
            Some(Transition::Revoke)
        );
    }

    #[test]
    fn three_failures_remove_and_a_success_resets() {
        let mut s = Schedule::new(RefreshConfig {
            interval_ms: 1000,
            retry_ms: 100,
        });
        s.track("a", 0);
        s.track("b", 0);
        assert!(s.due(999, 10).is_empty());
        assert_eq!(s.due(1000, 10), vec!["a", "b"]);
        // In flight: not due again until reported.
        assert!(s.due(5000, 10).is_empty());
        assert_eq!(s.failed("a", 1000), AfterFailure::Retry(1));
        s.succeeded("b", 1000);
        assert_eq!(s.due(1100, 10), vec!["a"]);
        assert_eq!(s.failed("a", 1100), AfterFailure::Retry(2));
        assert_eq!(s.due(1200, 10), vec!["a"]);
        assert_eq!(s.failed("a", 1200), AfterFailure::Remove);
        assert_eq!(s.len(), 1);
        assert_eq!(s.next_due(), Some(2000));
        // b: a failure, then a success, starts counting again.
        assert_eq!(s.due(2000, 10), vec!["b"]);
        assert_eq!(s.failed("b", 2000), AfterFailure::Retry(1));
        s.succeeded("b", 2100);
        assert_eq!(s.due(3100, 10), vec!["b"]);
        assert_eq!(s.failed("b", 3100), AfterFailure::Retry(1));
    }
}
