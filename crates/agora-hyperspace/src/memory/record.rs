//! Memory records, tombstones and their versions (spec §4.4 `memory.store` / `memory.get`
//! fields; §9.3 "GDPR-compliant data deletion").
//!
//! - A [`MemoryRecord`] carries the spec's camelCase fields (`id`, `content`, `sessionId`,
//!   `metadata`, `tier`, `createdAt`, `peerId`) plus the `embedder` that made its `vector` and
//!   its [`Version`]. `createdAt` is RFC 3339 UTC with milliseconds on the wire
//!   (`2026-03-17T08:30:00.000Z`), Unix milliseconds in memory.
//! - A [`Tombstone`] replaces a deleted memory on every replica and is kept, so a replica that
//!   was away cannot bring the memory back.
//! - Every change (store, archive, delete) has a version `(timestamp_ms, peerId)` of the node
//!   that made it; replicas keep the entry with the greatest version (last writer wins, a total
//!   order). At an equal version a tombstone wins over a live record ([`merge`]).
//! - Ids are `mem-` and 24 lowercase hex digits from 12 random bytes ([`new_memory_id`]).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::timestamp::{format_timestamp, parse_timestamp};

/// Longest memory id accepted (ids made here are 28 bytes; others may come from peers).
pub const MAX_ID_BYTES: usize = 128;

/// A memory's tier (spec §4.4 `tier?`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// The hot tier searches look at by default.
    #[default]
    Working,
    /// Long-term: left out of working-tier searches, reachable with `tier: "archival"`.
    Archival,
}

/// The version of a change: last writer wins by `(timestamp_ms, peer_id)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Version {
    /// When the change was made (Unix ms, the writer's clock).
    pub timestamp_ms: u64,
    /// The node that made it.
    pub peer_id: String,
}

/// A stored memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryRecord {
    /// `mem-…`.
    pub id: String,
    /// The text.
    pub content: String,
    /// The session it belongs to, if any.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Client metadata: an object, or null.
    #[serde(default)]
    pub metadata: Value,
    /// Tier.
    #[serde(default)]
    pub tier: Tier,
    /// Creation time (Unix ms; RFC 3339 on the wire).
    #[serde(with = "rfc3339")]
    pub created_at: u64,
    /// The embedder that made `vector` (`minilm-l6-v2`, `lexical-v1`).
    pub embedder: String,
    /// Unit-length embedding of `content`.
    #[serde(default)]
    pub vector: Vec<f32>,
    /// The primary owner when it was stored.
    pub peer_id: String,
    /// Version of the last change.
    pub version: Version,
}

/// A deleted memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tombstone {
    /// The memory's id.
    pub id: String,
    /// When it was deleted (Unix ms; RFC 3339 on the wire).
    #[serde(with = "rfc3339")]
    pub deleted_at: u64,
    /// Version of the delete.
    pub version: Version,
}

/// What a replica holds for an id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Entry {
    /// A live memory.
    Live(MemoryRecord),
    /// A deleted one.
    Tombstone(Tombstone),
}

impl Entry {
    /// The memory id.
    #[must_use]
    pub fn id(&self) -> &str {
        match self {
            Self::Live(r) => &r.id,
            Self::Tombstone(t) => &t.id,
        }
    }

    /// The version of its last change.
    #[must_use]
    pub fn version(&self) -> &Version {
        match self {
            Self::Live(r) => &r.version,
            Self::Tombstone(t) => &t.version,
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Self::Live(_) => 0,
            Self::Tombstone(_) => 1,
        }
    }
}

/// What to do with an incoming entry ([`merge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// The held entry is as new or newer: keep it.
    Keep,
    /// The incoming entry is newer: replace.
    Replace,
}

/// Last writer wins: the incoming entry replaces the held one when its version is greater, or
/// equal with the incoming a tombstone and the held one live. Commutative and idempotent.
#[must_use]
pub fn merge(current: Option<&Entry>, incoming: &Entry) -> Resolution {
    match current {
        None => Resolution::Replace,
        Some(c) => {
            if (incoming.version(), incoming.rank()) > (c.version(), c.rank()) {
                Resolution::Replace
            } else {
                Resolution::Keep
            }
        }
    }
}

/// A new memory id from 12 random bytes: `mem-` and 24 lowercase hex digits.
#[must_use]
pub fn new_memory_id(random: [u8; 12]) -> String {
    format!("mem-{}", hex::encode(random))
}

/// Whether `id` is acceptable as a memory id: 1..=[`MAX_ID_BYTES`] bytes of ASCII letters,
/// digits, `-`, `_`, `.`, `:`.
#[must_use]
pub fn valid_memory_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// Formats Unix ms as the wire's `createdAt`.
#[must_use]
pub fn format_time(ms: u64) -> String {
    format_timestamp(ms)
}

/// Parses `YYYY-MM-DDTHH:MM:SS.mmmZ` (milliseconds optional) into Unix ms.
#[must_use]
pub fn parse_time(text: &str) -> Option<u64> {
    parse_timestamp(text)
}

pub(crate) mod rfc3339 {
    use super::{Deserialize, Deserializer, Serializer, format_time, parse_time};

    pub(crate) fn serialize<S: Serializer>(ms: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_time(*ms))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let text = String::deserialize(d)?;
        parse_time(&text).ok_or_else(|| {
            serde::de::Error::custom(format!("{text:?} is not an RFC 3339 UTC time"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn live(ts: u64, peer: &str) -> Entry {
        Entry::Live(MemoryRecord {
            id: "mem-1".into(),
            content: "c".into(),
            session_id: None,
            metadata: Value::Null,
            tier: Tier::Working,
            created_at: 1,
            embedder: "lexical-v1".into(),
            vector: vec![1.0],
            peer_id: "p".into(),
            version: Version {
                timestamp_ms: ts,
                peer_id: peer.into(),
            },
        })
    }

    fn dead(ts: u64, peer: &str) -> Entry {
        Entry::Tombstone(Tombstone {
            id: "mem-1".into(),
            deleted_at: ts,
            version: Version {
                timestamp_ms: ts,
                peer_id: peer.into(),
            },
        })
    }

    #[test]
    fn last_writer_wins_and_tombstones_win_ties() {
        assert_eq!(merge(None, &live(1, "a")), Resolution::Replace);
        assert_eq!(
            merge(Some(&live(1, "a")), &live(2, "a")),
            Resolution::Replace
        );
        assert_eq!(merge(Some(&live(2, "a")), &live(1, "b")), Resolution::Keep);
        assert_eq!(
            merge(Some(&live(2, "a")), &live(2, "b")),
            Resolution::Replace
        );
        assert_eq!(
            merge(Some(&live(2, "a")), &dead(2, "a")),
            Resolution::Replace
        );
        assert_eq!(merge(Some(&dead(2, "a")), &live(2, "a")), Resolution::Keep);
        assert_eq!(merge(Some(&dead(3, "a")), &live(2, "z")), Resolution::Keep);
        assert_eq!(merge(Some(&live(2, "a")), &live(2, "a")), Resolution::Keep);
    }

    proptest! {
        #[test]
        fn merging_in_any_order_ends_with_the_same_entry(
            ops in proptest::collection::vec((0u64..5, 0u8..3, any::<bool>()), 1..12)
        ) {
            let entries: Vec<Entry> = ops
                .iter()
                .map(|(ts, p, d)| {
                    let peer = ["a", "b", "c"][usize::from(*p)];
                    if *d { dead(*ts, peer) } else { live(*ts, peer) }
                })
                .collect();
            let fold = |order: &mut dyn Iterator<Item = &Entry>| {
                let mut held: Option<Entry> = None;
                for e in order {
                    if merge(held.as_ref(), e) == Resolution::Replace {
                        held = Some(e.clone());
                    }
                }
                held
            };
            let forward = fold(&mut entries.iter());
            let backward = fold(&mut entries.iter().rev());
            prop_assert_eq!(forward, backward);
        }

        #[test]
        fn times_round_trip(ms in 0u64..253_402_300_799_999) {
            prop_assert_eq!(parse_time(&format_time(ms)), Some(ms));
        }
    }

    #[test]
    fn ids_and_times() {
        let id = new_memory_id([0xab; 12]);
        assert_eq!(id, "mem-abababababababababababab");
        assert!(valid_memory_id(&id));
        assert!(!valid_memory_id(""));
        assert!(!valid_memory_id("mem 1"));
        assert!(!valid_memory_id(&"m".repeat(129)));
        assert_eq!(
            parse_time("2026-03-17T08:30:00.000Z"),
            Some(1_773_736_200_000)
        );
        assert_eq!(parse_time("2026-03-17T08:30:00Z"), Some(1_773_736_200_000));
        for bad in [
            "2026-02-30T00:00:00Z",
            "2026-03-17 08:30:00Z",
            "x",
            "2026-03-17T08:30:00.0Z",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
        let e = live(5, "a");
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["kind"], "live");
        assert_eq!(json["createdAt"], "1970-01-01T00:00:00.001Z");
        assert_eq!(json["sessionId"], Value::Null);
        let back: Entry = serde_json::from_value(json).unwrap();
        assert_eq!(back, e);
    }
}
