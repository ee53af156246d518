//! Node-to-node memory messages on the request-response protocol `/agora/memory/1.0.0`
//! (`docs/hyperspace-wire.md` "Memory"): one JSON object per request and per response, tagged by
//! `type`, camelCase members.
//!
//! | request | response | use |
//! |---|---|---|
//! | `put {entry}` | `ack {durable}` or `error` | a write (store, archive, delete, undo, repair) to an owner; `durable` once it is in the store |
//! | `get {id}` | `found {entry}` or `notHere` | a read; the entry carries its vector |
//! | `search {query, vector, embedder, sessionId, tier, limit, threshold}` | `hits {hits, skipped}` | one member's part of `memory.search` |
//! | `list {sessionId, limit, offset}` | `listed {entries, total}` | one member's part of `memory.list` (vectors stripped) |
//! | `digest {peer, digest, count}` | `digestMatch` / `digestMismatch` | anti-entropy: compare the memories both should hold |
//! | `versions {peer, after, limit}` | `versionList {items, next}` | anti-entropy: the `(id, version)` pairs, a page at a time |
//! | `pull {ids}` | `entries {entries}` | anti-entropy: fetch entries |
//!
//! [`decode_request`] / [`decode_response`] check every field before anything is used: the size,
//! ids, text lengths against [`MemoryLimits`], vectors (at most [`MAX_DIMS`] finite numbers) and
//! list lengths ([`MAX_ITEMS`]).

use serde::{Deserialize, Serialize};

use super::params::MemoryLimits;
use super::record::{Entry, MemoryRecord, Tier, Version, valid_memory_id};
use super::search::SearchHit;

/// Largest message accepted (matches the node's response limit).
pub const MAX_WIRE_BYTES: usize = 8 * 1024 * 1024;
/// Largest vector dimension.
pub const MAX_DIMS: usize = 4096;
/// Most items in one list (hits, entries, ids, versions).
pub const MAX_ITEMS: usize = 10_000;

/// A request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum MemoryRequest {
    /// Hold this entry (merged by last writer wins).
    Put {
        /// The entry.
        entry: Entry,
    },
    /// The entry of `id`, if held.
    Get {
        /// Memory id.
        id: String,
    },
    /// This member's best hits.
    Search {
        /// The query text (to re-embed for memories of another embedder).
        query: String,
        /// The query embedded by `embedder`.
        vector: Vec<f32>,
        /// The embedder of `vector`.
        embedder: String,
        /// Only this session's memories.
        session_id: Option<String>,
        /// Tier searched.
        tier: Tier,
        /// Most hits.
        limit: u32,
        /// Least similarity.
        threshold: f32,
    },
    /// This member's memories of a session, oldest first.
    List {
        /// Session.
        session_id: String,
        /// Most entries.
        limit: u32,
        /// Entries skipped.
        offset: u32,
    },
    /// Compare the memories both sides should hold.
    Digest {
        /// The asking member.
        peer: String,
        /// Its digest ([`super::sync::digest`]), hex on the wire.
        #[serde(with = "hex32")]
        digest: [u8; 32],
        /// How many pairs it covers.
        count: u64,
    },
    /// A page of the `(id, version)` pairs both sides should hold, ids after `after`.
    Versions {
        /// The asking member.
        peer: String,
        /// Last id of the previous page.
        after: Option<String>,
        /// Most pairs.
        limit: u32,
    },
    /// These entries.
    Pull {
        /// Ids.
        ids: Vec<String>,
    },
}

/// A response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum MemoryResponse {
    /// The write is held (durably when `durable`).
    Ack {
        /// Written to the store.
        durable: bool,
    },
    /// The held entry.
    Found {
        /// Entry.
        entry: Entry,
    },
    /// Nothing held for that id.
    NotHere,
    /// Search hits.
    Hits {
        /// Best first.
        hits: Vec<SearchHit>,
        /// Embedders of held memories the query could not be embedded with.
        skipped: Vec<String>,
    },
    /// A session's memories.
    Listed {
        /// Oldest first.
        entries: Vec<Entry>,
        /// How many this member holds.
        total: u64,
    },
    /// The digests agree.
    DigestMatch,
    /// The digests differ.
    DigestMismatch,
    /// A page of pairs.
    VersionList {
        /// `(id, version)`, by id.
        items: Vec<(String, Version)>,
        /// Where the next page starts, if any.
        next: Option<String>,
    },
    /// Pulled entries.
    Entries {
        /// The held ones among those asked.
        entries: Vec<Entry>,
    },
    /// The request was refused.
    Error {
        /// A JSON-RPC code (−32602, −32003, −32007…).
        code: i32,
        /// Why.
        message: String,
    },
}

/// A message did not decode or broke a limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Larger than [`MAX_WIRE_BYTES`].
    #[error("message of {0} bytes, at most {MAX_WIRE_BYTES}")]
    TooLarge(usize),
    /// Not a message of this protocol.
    #[error("malformed: {0}")]
    Malformed(String),
    /// A field breaks a limit.
    #[error("{0}")]
    Invalid(String),
}

mod hex32 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(b: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(b))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let text = String::deserialize(d)?;
        crate::envelope::unhex::<32>(&text)
            .ok_or_else(|| serde::de::Error::custom("digest: 64 lowercase hex digits expected"))
    }
}

fn invalid(what: impl Into<String>) -> WireError {
    WireError::Invalid(what.into())
}

fn check_id(id: &str) -> Result<(), WireError> {
    if valid_memory_id(id) {
        Ok(())
    } else {
        Err(invalid("not a memory id"))
    }
}

fn check_short(text: &str, what: &str) -> Result<(), WireError> {
    if text.len() <= 256 {
        Ok(())
    } else {
        Err(invalid(format!("{what} longer than 256 bytes")))
    }
}

fn check_vector(v: &[f32]) -> Result<(), WireError> {
    if v.len() > MAX_DIMS {
        return Err(invalid(format!("vector of {} dimensions", v.len())));
    }
    if v.iter().any(|x| !x.is_finite()) {
        return Err(invalid("vector with a number that is not finite"));
    }
    Ok(())
}

fn check_record(r: &MemoryRecord, limits: &MemoryLimits) -> Result<(), WireError> {
    check_id(&r.id)?;
    if r.content.len() > limits.max_content_bytes {
        return Err(invalid("content over the limit"));
    }
    if let Some(s) = &r.session_id
        && s.len() > limits.max_session_bytes
    {
        return Err(invalid("sessionId over the limit"));
    }
    if !(r.metadata.is_null() || r.metadata.is_object()) {
        return Err(invalid("metadata is not an object"));
    }
    let meta = serde_json::to_string(&r.metadata).map_or(usize::MAX, |s| s.len());
    if meta > limits.max_metadata_bytes {
        return Err(invalid("metadata over the limit"));
    }
    check_short(&r.embedder, "embedder")?;
    check_short(&r.peer_id, "peerId")?;
    check_short(&r.version.peer_id, "version.peerId")?;
    check_vector(&r.vector)
}

fn check_entry(e: &Entry, limits: &MemoryLimits) -> Result<(), WireError> {
    match e {
        Entry::Live(r) => check_record(r, limits),
        Entry::Tombstone(t) => {
            check_id(&t.id)?;
            check_short(&t.version.peer_id, "version.peerId")
        }
    }
}

fn check_len<T>(items: &[T], what: &str) -> Result<(), WireError> {
    if items.len() <= MAX_ITEMS {
        Ok(())
    } else {
        Err(invalid(format!("{what}: more than {MAX_ITEMS}")))
    }
}

fn parse<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, WireError> {
    if bytes.len() > MAX_WIRE_BYTES {
        return Err(WireError::TooLarge(bytes.len()));
    }
    serde_json::from_slice(bytes).map_err(|e| WireError::Malformed(e.to_string()))
}

/// Decodes and checks a request.
pub fn decode_request(bytes: &[u8], limits: &MemoryLimits) -> Result<MemoryRequest, WireError> {
    let r: MemoryRequest = parse(bytes)?;
    match &r {
        MemoryRequest::Put { entry } => check_entry(entry, limits)?,
        MemoryRequest::Get { id } => check_id(id)?,
        MemoryRequest::Search {
            query,
            vector,
            embedder,
            session_id,
            limit,
            threshold,
            ..
        } => {
            if query.len() > limits.max_query_bytes {
                return Err(invalid("query over the limit"));
            }
            check_vector(vector)?;
            check_short(embedder, "embedder")?;
            if session_id
                .as_ref()
                .is_some_and(|s| s.len() > limits.max_session_bytes)
            {
                return Err(invalid("sessionId over the limit"));
            }
            if *limit as usize > limits.max_search_limit {
                return Err(invalid("limit over the limit"));
            }
            if !(0.0..=1.0).contains(threshold) {
                return Err(invalid("threshold not within 0..=1"));
            }
        }
        MemoryRequest::List { session_id, .. } => {
            if session_id.len() > limits.max_session_bytes {
                return Err(invalid("sessionId over the limit"));
            }
        }
        MemoryRequest::Digest { peer, .. } => check_short(peer, "peer")?,
        MemoryRequest::Versions { peer, after, .. } => {
            check_short(peer, "peer")?;
            if let Some(a) = after {
                check_id(a)?;
            }
        }
        MemoryRequest::Pull { ids } => {
            check_len(ids, "ids")?;
            ids.iter().try_for_each(|i| check_id(i))?;
        }
    }
    Ok(r)
}

/// Decodes and checks a response.
pub fn decode_response(bytes: &[u8], limits: &MemoryLimits) -> Result<MemoryResponse, WireError> {
    let r: MemoryResponse = parse(bytes)?;
    match &r {
        MemoryResponse::Found { entry } => check_entry(entry, limits)?,
        MemoryResponse::Hits { hits, skipped } => {
            check_len(hits, "hits")?;
            check_len(skipped, "skipped")?;
            for h in hits {
                check_id(&h.id)?;
                if h.content.len() > limits.max_content_bytes || !h.similarity.is_finite() {
                    return Err(invalid("a hit over the limits"));
                }
            }
        }
        MemoryResponse::Listed { entries, .. } | MemoryResponse::Entries { entries } => {
            check_len(entries, "entries")?;
            entries.iter().try_for_each(|e| check_entry(e, limits))?;
        }
        MemoryResponse::VersionList { items, next } => {
            check_len(items, "items")?;
            items.iter().try_for_each(|(id, _)| check_id(id))?;
            if let Some(n) = next {
                check_id(n)?;
            }
        }
        MemoryResponse::Error { message, .. } => check_short(message, "message").or_else(|_| {
            if message.len() <= 4096 {
                Ok(())
            } else {
                Err(invalid("message too long"))
            }
        })?,
        MemoryResponse::Ack { .. }
        | MemoryResponse::NotHere
        | MemoryResponse::DigestMatch
        | MemoryResponse::DigestMismatch => {}
    }
    Ok(r)
}

impl MemoryRequest {
    /// The request's bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// [`decode_request`].
    pub fn decode(bytes: &[u8], limits: &MemoryLimits) -> Result<Self, WireError> {
        decode_request(bytes, limits)
    }
}

impl MemoryResponse {
    /// The response's bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// [`decode_response`].
    pub fn decode(bytes: &[u8], limits: &MemoryLimits) -> Result<Self, WireError> {
        decode_response(bytes, limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::record::Tombstone;
    use serde_json::{Value, json};

    fn record() -> MemoryRecord {
        MemoryRecord {
            id: "mem-1".into(),
            content: "hello".into(),
            session_id: Some("s".into()),
            metadata: json!({"a": 1}),
            tier: Tier::Working,
            created_at: 1_773_736_200_000,
            embedder: "lexical-v1".into(),
            vector: vec![0.6, 0.8],
            peer_id: "12D3KooWA".into(),
            version: Version {
                timestamp_ms: 1,
                peer_id: "12D3KooWA".into(),
            },
        }
    }

    #[test]
    fn every_message_round_trips() {
        let l = MemoryLimits::default();
        let v = Version {
            timestamp_ms: 2,
            peer_id: "p".into(),
        };
        let requests = vec![
            MemoryRequest::Put {
                entry: Entry::Live(record()),
            },
            MemoryRequest::Put {
                entry: Entry::Tombstone(Tombstone {
                    id: "mem-1".into(),
                    deleted_at: 5,
                    version: v.clone(),
                }),
            },
            MemoryRequest::Get { id: "mem-1".into() },
            MemoryRequest::Search {
                query: "q".into(),
                vector: vec![1.0],
                embedder: "lexical-v1".into(),
                session_id: None,
                tier: Tier::Archival,
                limit: 10,
                threshold: 0.5,
            },
            MemoryRequest::List {
                session_id: "s".into(),
                limit: 5,
                offset: 0,
            },
            MemoryRequest::Digest {
                peer: "p".into(),
                digest: [7; 32],
                count: 3,
            },
            MemoryRequest::Versions {
                peer: "p".into(),
                after: Some("mem-1".into()),
                limit: 100,
            },
            MemoryRequest::Pull {
                ids: vec!["mem-1".into()],
            },
        ];
        for r in requests {
            let bytes = r.encode();
            assert_eq!(decode_request(&bytes, &l).unwrap(), r);
        }
        let responses = vec![
            MemoryResponse::Ack { durable: true },
            MemoryResponse::Found {
                entry: Entry::Live(record()),
            },
            MemoryResponse::NotHere,
            MemoryResponse::Hits {
                hits: vec![SearchHit::from_record(&record(), 0.5)],
                skipped: vec!["minilm-l6-v2".into()],
            },
            MemoryResponse::Listed {
                entries: vec![Entry::Live(record())],
                total: 1,
            },
            MemoryResponse::DigestMatch,
            MemoryResponse::DigestMismatch,
            MemoryResponse::VersionList {
                items: vec![("mem-1".into(), v)],
                next: None,
            },
            MemoryResponse::Entries { entries: vec![] },
            MemoryResponse::Error {
                code: -32007,
                message: "no".into(),
            },
        ];
        for r in responses {
            let bytes = r.encode();
            assert_eq!(decode_response(&bytes, &l).unwrap(), r);
        }
        let text: Value =
            serde_json::from_slice(&MemoryRequest::Get { id: "mem-1".into() }.encode()).unwrap();
        assert_eq!(text, json!({"type": "get", "id": "mem-1"}));
    }

    #[test]
    fn bad_messages_are_refused() {
        let l = MemoryLimits::default();
        let mut big = record();
        big.content = "x".repeat(l.max_content_bytes + 1);
        let mut nan = record();
        nan.vector = vec![f32::NAN];
        let mut wide = record();
        wide.vector = vec![0.0; MAX_DIMS + 1];
        let mut bad_id = record();
        bad_id.id = "mem 1".into();
        for r in [big, wide, bad_id] {
            let bytes = MemoryRequest::Put {
                entry: Entry::Live(r),
            }
            .encode();
            assert!(matches!(
                decode_request(&bytes, &l),
                Err(WireError::Invalid(_))
            ));
        }
        // NaN does not even serialise as a number.
        let bytes = MemoryRequest::Put {
            entry: Entry::Live(nan),
        }
        .encode();
        assert!(decode_request(&bytes, &l).is_err());
        for bytes in [
            &b"not json"[..],
            br#"{"type":"nope"}"#,
            br#"{"type":"digest","peer":"p","digest":"zz","count":1}"#,
            br#"{"type":"search","query":"q","vector":[1],"embedder":"e","sessionId":null,"tier":"working","limit":101,"threshold":0}"#,
        ] {
            assert!(decode_request(bytes, &l).is_err(), "{}", String::from_utf8_lossy(bytes));
        }
        assert!(matches!(
            decode_request(&vec![b' '; MAX_WIRE_BYTES + 1], &l),
            Err(WireError::TooLarge(_))
        ));
    }
}
