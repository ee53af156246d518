//! Gossip topic names and their owner rules.
//!
//! Spec §2.1 "Gossip Topics" and §7.1: every topic is `hyperspace/{dataType}/{scope}`. On the
//! owner topics `hyperspace/capabilities/{peerId}` and `hyperspace/reputation/{peerId}` only
//! `{peerId}` itself may publish (a wire decision the spec leaves open, pinned in `docs/hyperspace-wire.md`).

use std::fmt;

/// Prefix of every Hyperspace topic.
pub const PREFIX: &str = "hyperspace/";

/// A Hyperspace gossip topic.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Topic {
    /// `hyperspace/capabilities/{peerId}`: a peer's capability card (owner topic).
    Capabilities(String),
    /// `hyperspace/tasks/{taskType}`: task requests and routing.
    Tasks(String),
    /// `hyperspace/trajectories/{taskType}`: execution traces for learning.
    Trajectories(String),
    /// `hyperspace/reputation/{peerId}`: reputation updates about a peer (owner topic).
    Reputation(String),
    /// `hyperspace/crdt/sync/memory`: distributed memory synchronisation.
    CrdtSyncMemory,
    /// `hyperspace/settlements/{round}`: payment receipt gossip.
    Settlements(String),
}

/// The string is not a Hyperspace topic.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a Hyperspace topic (hyperspace/{{capabilities|tasks|trajectories|reputation|settlements}}/<scope> or hyperspace/crdt/sync/memory)"
)]
pub struct TopicError(pub String);

fn valid_scope(s: &str) -> bool {
    !s.is_empty() && s.len() <= 256 && !s.contains('/') && s.bytes().all(|b| b.is_ascii_graphic())
}

impl Topic {
    /// Parses a full topic string.
    pub fn parse(topic: &str) -> Result<Self, TopicError> {
        let err = || TopicError(topic.to_owned());
        let rest = topic.strip_prefix(PREFIX).ok_or_else(err)?;
        if rest == "crdt/sync/memory" {
            return Ok(Self::CrdtSyncMemory);
        }
        let (kind, scope) = rest.split_once('/').ok_or_else(err)?;
        if !valid_scope(scope) {
            return Err(err());
        }
        let scope = scope.to_owned();
        Ok(match kind {
            "capabilities" => Self::Capabilities(scope),
            "tasks" => Self::Tasks(scope),
            "trajectories" => Self::Trajectories(scope),
            "reputation" => Self::Reputation(scope),
            "settlements" => Self::Settlements(scope),
            _ => return Err(err()),
        })
    }

    /// The peer that alone may publish on this topic, for owner topics.
    pub fn owner(&self) -> Option<&str> {
        match self {
            Self::Capabilities(p) | Self::Reputation(p) => Some(p),
            _ => None,
        }
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Capabilities(s) => write!(f, "{PREFIX}capabilities/{s}"),
            Self::Tasks(s) => write!(f, "{PREFIX}tasks/{s}"),
            Self::Trajectories(s) => write!(f, "{PREFIX}trajectories/{s}"),
            Self::Reputation(s) => write!(f, "{PREFIX}reputation/{s}"),
            Self::CrdtSyncMemory => write!(f, "{PREFIX}crdt/sync/memory"),
            Self::Settlements(s) => write!(f, "{PREFIX}settlements/{s}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_round_trip_and_owners() {
        for t in [
            "hyperspace/capabilities/12D3KooWC4T1AXU2s2YBgGJ2FeaYVtsKoHZWJeubnWe9SnuSE7Zb",
            "hyperspace/tasks/web-research",
            "hyperspace/trajectories/web-research",
            "hyperspace/reputation/12D3KooWabc",
            "hyperspace/crdt/sync/memory",
            "hyperspace/settlements/42",
        ] {
            assert_eq!(Topic::parse(t).unwrap().to_string(), t);
        }
        assert_eq!(
            Topic::parse("hyperspace/reputation/p").unwrap().owner(),
            Some("p")
        );
        assert_eq!(Topic::parse("hyperspace/tasks/x").unwrap().owner(), None);
        for bad in [
            "hyperspace/tasks/",
            "hyperspace/tasks/a/b",
            "hyperspace/other/x",
            "tasks/x",
            "hyperspace/crdt/sync",
            "hyperspace/tasks/a b",
        ] {
            assert!(Topic::parse(bad).is_err(), "{bad}");
        }
    }
}
