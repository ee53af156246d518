//! Parameters of the six `memory.*` methods (spec §4.4 "Methods"), with their limits, and the
//! methods' descriptors ([`DOCS`]: params, results, errors, examples) for the OpenRPC document.
//!
//! Params come as an object (or positionally, in the spec's order); members this crate does not
//! know are ignored, as for the other primitives. Every refusal is −32602 naming the field.
//!
//! | bound ([`MemoryLimits`], default) | applies to | beyond it |
//! |---|---|---|
//! | `content` 1..=32,768 bytes, not blank | `memory.store` | −32602 |
//! | `metadata` an object (or null) of at most 8,192 bytes serialized | `memory.store` | −32602 |
//! | `query` 1..=4,096 bytes, not blank | `memory.search` | −32602 |
//! | `sessionId` 1..=128 bytes | store, search, list | −32602 |
//! | `id` a valid memory id ([`valid_memory_id`]) | get, delete, archive | −32602 |
//! | `limit` 1..=100, default 10 | `memory.search` | −32602 |
//! | `threshold` 0..=1, default 0 (MiniLM scores related ideas 0.15–0.35: no cut by default) | `memory.search` | −32602 |
//! | `limit` 1..=1,000, default 50; `offset` 0..=100,000, default 0 | `memory.list` | −32602 |
//! | `tier` `working` (default) or `archival` | store, search | −32602 |

use serde::Deserialize;
use serde_json::Value;

use super::record::{Tier, valid_memory_id};
use crate::jsonrpc::RpcError;
use schemars::{JsonSchema, Schema, json_schema};
use serde_json::json;

use super::{ARCHIVE, DELETE, GET, LIST, SEARCH, STORE};
use crate::jsonrpc::RpcCode;
use crate::openrpc::{MethodDoc, params_of};
use crate::params::{invalid_params, parse_params, text};

/// Size limits of the memory methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimits {
    /// Longest `content`, in bytes.
    pub max_content_bytes: usize,
    /// Longest `metadata`, serialized, in bytes.
    pub max_metadata_bytes: usize,
    /// Longest `query`, in bytes.
    pub max_query_bytes: usize,
    /// Longest `sessionId`, in bytes.
    pub max_session_bytes: usize,
    /// Largest `limit` of `memory.search`.
    pub max_search_limit: usize,
    /// Largest `limit` of `memory.list`.
    pub max_list_limit: usize,
    /// Largest `offset` of `memory.list`.
    pub max_list_offset: usize,
}

impl Default for MemoryLimits {
    fn default() -> Self {
        Self {
            max_content_bytes: 32 * 1024,
            max_metadata_bytes: 8 * 1024,
            max_query_bytes: 4096,
            max_session_bytes: 128,
            max_search_limit: 100,
            max_list_limit: 1000,
            max_list_offset: 100_000,
        }
    }
}

/// Default `limit` of `memory.search`.
pub const DEFAULT_SEARCH_LIMIT: usize = 10;
/// Default `limit` of `memory.list`.
pub const DEFAULT_LIST_LIMIT: usize = 50;

/// `memory.store(content, sessionId?, metadata?, tier?)`.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreParams {
    /// The text.
    pub content: String,
    /// Session.
    pub session_id: Option<String>,
    /// Metadata (an object, or null).
    pub metadata: Value,
    /// Tier.
    pub tier: Tier,
}

/// `memory.search(query, sessionId?, limit?, threshold?, tier?)`.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchParams {
    /// The text searched for.
    pub query: String,
    /// Only this session's memories.
    pub session_id: Option<String>,
    /// Most results.
    pub limit: usize,
    /// Least similarity.
    pub threshold: f32,
    /// Tier searched.
    pub tier: Tier,
}

/// `memory.get(id)`, `memory.delete(id)`, `memory.archive(id)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdParams {
    /// Memory id.
    pub id: String,
}

/// `memory.get(id)`.
pub type GetParams = IdParams;
/// `memory.delete(id)`.
pub type DeleteParams = IdParams;
/// `memory.archive(id)`.
pub type ArchiveParams = IdParams;

/// `memory.list(sessionId, limit?, offset?)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListParams {
    /// Session.
    pub session_id: String,
    /// Most memories returned.
    pub limit: usize,
    /// Memories skipped (oldest first).
    pub offset: usize,
}

/// Params of `memory.store(content, sessionId?, metadata?, tier?)`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RawStore {
    /// The text to remember (embedded once, by the node that takes the call).
    content: String,
    /// The session it belongs to (a session token's own session when absent).
    #[serde(default)]
    session_id: Option<String>,
    /// Any JSON object kept with it.
    #[serde(default)]
    metadata: Value,
    /// `working` (default) or `archival`.
    #[serde(default)]
    tier: Option<Tier>,
}

/// Params of `memory.search(query, sessionId?, limit?, threshold?, tier?)`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RawSearch {
    /// The text to search for.
    query: String,
    /// Only this session's memories.
    #[serde(default)]
    session_id: Option<String>,
    /// Most memories returned (default 10, at most 100).
    #[serde(default)]
    limit: Option<u64>,
    /// Lowest similarity, 0..1 (default 0).
    #[serde(default)]
    threshold: Option<f64>,
    /// The tier searched (default `working`).
    #[serde(default)]
    tier: Option<Tier>,
}

/// Params of `memory.get(id)`, `memory.delete(id)` and `memory.archive(id)`.
#[derive(Deserialize, JsonSchema)]
struct RawId {
    /// The memory's id.
    id: String,
}

/// Params of `memory.list(sessionId, limit?, offset?)`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RawList {
    /// The session.
    session_id: String,
    /// Most memories returned.
    #[serde(default)]
    limit: Option<u64>,
    /// Memories skipped (oldest first).
    #[serde(default)]
    offset: Option<u64>,
}

/// A memory as `memory.get` (and, with `similarity`, `memory.search`) shows it.
fn record_schema() -> Value {
    json!({
        "type": "object",
        "required": ["id", "content", "metadata", "peerId", "tier", "createdAt", "embedder"],
        "properties": {
            "id": {"type": "string"},
            "content": {"type": "string"},
            "metadata": {},
            "peerId": {"type": "string", "description": "The node that stored it."},
            "sessionId": {"type": ["string", "null"]},
            "tier": {"type": "string", "enum": ["working", "archival"]},
            "createdAt": {"type": "string", "description": "RFC 3339 UTC."},
            "embedder": {"type": "string", "description": "The embedder of its vector."},
            "similarity": {"type": "number", "description": "Search results only: 0..1."}
        }
    })
}

fn id_example() -> Value {
    json!({"id": "mem-5f2c9a1e0b7d4c3a8e6f1b2d"})
}

/// Most memories one `memory.reembed` call moves.
pub const MAX_REEMBED: usize = 4096;
/// How many `memory.reembed` moves when `limit` is not given.
pub const DEFAULT_REEMBED: usize = 256;

/// What each `memory.*` method takes, returns and may fail with ([`crate::openrpc`]).
pub const DOCS: [MethodDoc; 7] = [
    MethodDoc {
        name: STORE,
        summary: "Stores a memory on its owners in the ring (3 replicas).",
        params: params_of::<RawStore>,
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["id", "peerId", "replicas"],
                "properties": {
                    "id": {"type": "string"},
                    "peerId": {"type": "string", "description": "The primary owner."},
                    "replicas": {"type": "integer", "description": "Owners that hold it durably."}
                }
            })
        },
        errors: &[RpcCode::REPLICATION_FAILED, RpcCode::RATE_LIMITED],
        example: || json!({"content": "Solid-state cells reached 500 Wh/kg in 2026 trials", "metadata": {"topic": "batteries"}}),
    },
    MethodDoc {
        name: SEARCH,
        summary: "Searches memories by meaning across the mesh, best first.",
        params: params_of::<RawSearch>,
        result: |_| {
            Schema::try_from(json!({
                "type": "object",
                "required": ["memories", "searchTime", "embedder"],
                "properties": {
                    "memories": {"type": "array", "items": record_schema()},
                    "searchTime": {"type": "integer", "description": "Milliseconds."},
                    "embedder": {"type": "string"},
                    "skippedEmbedders": {"type": "array", "items": {"type": "string"}},
                    "partial": {"type": "object", "properties": {"asked": {"type": "integer"}, "answered": {"type": "integer"}}}
                }
            }))
            .unwrap_or_default()
        },
        errors: &[RpcCode::RATE_LIMITED],
        example: || {
            json!({
                "query": "error handling patterns for rate-limited APIs",
                "limit": 5,
                "threshold": 0.75,
                "tier": "working"
            })
        },
    },
    MethodDoc {
        name: GET,
        summary: "One memory by id.",
        params: params_of::<RawId>,
        result: |_| Schema::try_from(record_schema()).unwrap_or_default(),
        errors: &[],
        example: id_example,
    },
    MethodDoc {
        name: LIST,
        summary: "A session's memories, oldest first, every tier.",
        params: params_of::<RawList>,
        result: |_| {
            Schema::try_from(json!({
                "type": "object",
                "required": ["memories", "total"],
                "properties": {
                    "memories": {"type": "array", "items": record_schema()},
                    "total": {"type": "integer"}
                }
            }))
            .unwrap_or_default()
        },
        errors: &[RpcCode::SESSION_NOT_FOUND],
        example: || json!({"sessionId": "sess-a8c3f210", "limit": 20}),
    },
    MethodDoc {
        name: DELETE,
        summary: "Deletes a memory on every owner (a sealed tombstone).",
        params: params_of::<RawId>,
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["deleted"],
                "properties": {"deleted": {"type": "boolean", "description": "False when there was none."}}
            })
        },
        errors: &[RpcCode::REPLICATION_FAILED],
        example: id_example,
    },
    MethodDoc {
        name: ARCHIVE,
        summary: "Moves a memory to the archival tier.",
        params: params_of::<RawId>,
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["archived", "tier"],
                "properties": {"archived": {"type": "boolean"}, "tier": {"const": "archival"}}
            })
        },
        errors: &[RpcCode::REPLICATION_FAILED],
        example: id_example,
    },
    MethodDoc {
        name: super::REEMBED,
        summary: "Agora's: moves up to `limit` of the memories this node holds from the lexical fallback to its embedder (API key only).",
        params: |_| {
            json_schema!({
                "type": "object",
                "properties": {
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_REEMBED, "default": DEFAULT_REEMBED}
                }
            })
        },
        result: |_| {
            json_schema!({
                "type": "object",
                "required": ["reembedded", "failed", "remaining", "from", "to"],
                "properties": {
                    "reembedded": {"type": "integer"},
                    "failed": {"type": "integer", "description": "Re-embedded but written to no owner."},
                    "remaining": {"type": "integer", "description": "Lexical memories this node still holds."},
                    "from": {"const": "lexical-v1"},
                    "to": {"type": "string", "description": "The node's embedder."},
                    "note": {"type": "string", "description": "When the node's embedder is the lexical fallback: nothing moves, and what to do."}
                }
            })
        },
        errors: &[RpcCode::RATE_LIMITED],
        example: || json!({"limit": 64}),
    },
];

fn session(value: Option<String>, limits: &MemoryLimits) -> Result<Option<String>, RpcError> {
    if let Some(s) = &value {
        text(s, "sessionId", limits.max_session_bytes)?;
    }
    Ok(value)
}

fn bounded(
    value: Option<u64>,
    field: &str,
    default: usize,
    lo: usize,
    hi: usize,
) -> Result<usize, RpcError> {
    let Some(v) = value else {
        return Ok(default);
    };
    match usize::try_from(v) {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        _ => Err(invalid_params(
            format!("{field}: {v} is not within {lo}..={hi}"),
            Some(field),
        )),
    }
}

fn memory_id(id: String) -> Result<IdParams, RpcError> {
    if valid_memory_id(&id) {
        Ok(IdParams { id })
    } else {
        Err(invalid_params("id: not a memory id", Some("id")))
    }
}

impl StoreParams {
    /// Parses and checks `memory.store` params.
    pub fn parse(params: &Value, limits: &MemoryLimits) -> Result<Self, RpcError> {
        let raw: RawStore = parse_params(params, &["content", "sessionId", "metadata", "tier"])?;
        text(&raw.content, "content", limits.max_content_bytes)?;
        match &raw.metadata {
            Value::Null | Value::Object(_) => {}
            _ => {
                return Err(invalid_params(
                    "metadata: must be an object",
                    Some("metadata"),
                ));
            }
        }
        let size = serde_json::to_string(&raw.metadata).map_or(usize::MAX, |s| s.len());
        if size > limits.max_metadata_bytes {
            return Err(invalid_params(
                format!(
                    "metadata: {size} bytes, at most {}",
                    limits.max_metadata_bytes
                ),
                Some("metadata"),
            ));
        }
        Ok(Self {
            content: raw.content,
            session_id: session(raw.session_id, limits)?,
            metadata: raw.metadata,
            tier: raw.tier.unwrap_or_default(),
        })
    }
}

impl SearchParams {
    /// Parses and checks `memory.search` params.
    pub fn parse(params: &Value, limits: &MemoryLimits) -> Result<Self, RpcError> {
        let raw: RawSearch = parse_params(
            params,
            &["query", "sessionId", "limit", "threshold", "tier"],
        )?;
        text(&raw.query, "query", limits.max_query_bytes)?;
        let limit = bounded(
            raw.limit,
            "limit",
            DEFAULT_SEARCH_LIMIT,
            1,
            limits.max_search_limit,
        )?;
        let threshold = match raw.threshold {
            None => 0.0,
            Some(t) if (0.0..=1.0).contains(&t) => t as f32,
            Some(t) => {
                return Err(invalid_params(
                    format!("threshold: {t} is not within 0..=1"),
                    Some("threshold"),
                ));
            }
        };
        Ok(Self {
            query: raw.query,
            session_id: session(raw.session_id, limits)?,
            limit,
            threshold,
            tier: raw.tier.unwrap_or_default(),
        })
    }
}

impl IdParams {
    /// Parses and checks `memory.get`, `memory.delete` or `memory.archive` params.
    pub fn parse(params: &Value, _limits: &MemoryLimits) -> Result<Self, RpcError> {
        let raw: RawId = parse_params(params, &["id"])?;
        memory_id(raw.id)
    }
}

impl ListParams {
    /// Parses and checks `memory.list` params.
    pub fn parse(params: &Value, limits: &MemoryLimits) -> Result<Self, RpcError> {
        let raw: RawList = parse_params(params, &["sessionId", "limit", "offset"])?;
        text(&raw.session_id, "sessionId", limits.max_session_bytes)?;
        Ok(Self {
            session_id: raw.session_id,
            limit: bounded(
                raw.limit,
                "limit",
                DEFAULT_LIST_LIMIT,
                1,
                limits.max_list_limit,
            )?,
            offset: bounded(raw.offset, "offset", 0, 0, limits.max_list_offset)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(e: &RpcError) -> String {
        e.data
            .as_ref()
            .map(|d| d["field"].to_string())
            .unwrap_or_default()
    }

    #[test]
    fn defaults_and_bounds() {
        let l = MemoryLimits::default();
        let s = SearchParams::parse(&json!({"query": "q"}), &l).unwrap();
        assert_eq!((s.limit, s.threshold, s.tier), (10, 0.0, Tier::Working));
        let s = SearchParams::parse(&json!(["q", "s", 100, 0.75, "archival"]), &l).unwrap();
        assert_eq!((s.limit, s.tier), (100, Tier::Archival));
        assert!((s.threshold - 0.75).abs() < 1e-6);
        for (p, f) in [
            (json!({"query": "q", "limit": 101}), "limit"),
            (json!({"query": "q", "limit": 0}), "limit"),
            (json!({"query": "q", "threshold": 1.5}), "threshold"),
            (json!({"query": "q", "threshold": -0.1}), "threshold"),
            (json!({"query": "q", "tier": "cold"}), "tier"),
            (json!({"query": "  "}), "query"),
            (json!({"query": "q".repeat(4097)}), "query"),
            (json!({}), "query"),
        ] {
            let e = SearchParams::parse(&p, &l).unwrap_err();
            assert_eq!(e.code, RpcCode::INVALID_PARAMS);
            assert!(field(&e).contains(f), "{p}: {e:?}");
        }
        let st = StoreParams::parse(&json!({"content": "c", "metadata": {"a": 1}}), &l).unwrap();
        assert_eq!(st.tier, Tier::Working);
        for (p, f) in [
            (json!({"content": ""}), "content"),
            (json!({"content": "c".repeat(32 * 1024 + 1)}), "content"),
            (json!({"content": "c", "metadata": [1]}), "metadata"),
            (
                json!({"content": "c", "metadata": {"x": "y".repeat(9000)}}),
                "metadata",
            ),
            (json!({"content": "c", "sessionId": ""}), "sessionId"),
        ] {
            let e = StoreParams::parse(&p, &l).unwrap_err();
            assert!(field(&e).contains(f), "{p}: {e:?}");
        }
        let li = ListParams::parse(&json!({"sessionId": "s"}), &l).unwrap();
        assert_eq!((li.limit, li.offset), (50, 0));
        assert!(ListParams::parse(&json!({"sessionId": "s", "limit": 1001}), &l).is_err());
        assert!(ListParams::parse(&json!({}), &l).is_err());
        assert!(IdParams::parse(&json!({"id": "mem-1"}), &l).is_ok());
        assert!(IdParams::parse(&json!({"id": "mem 1"}), &l).is_err());
        assert!(IdParams::parse(&json!(["mem-1"]), &l).is_ok());
    }
}
