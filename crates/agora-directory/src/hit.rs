//! One search result and the explanation of its score (issue 33 items 2 and 3), apart from the
//! index so that what travels between nodes (`crate::ask`) needs no index.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::record::Record;

/// Why a record scored what it did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Explain {
    /// How the rankers were combined: `hybrid`, `keyword` or `meaning`.
    pub fusion: String,
    /// The raw BM25 score (0 when no query word matched).
    pub bm25: f64,
    /// BM25 over the best BM25 among the candidates, 0 to 1.
    pub keyword: f64,
    /// Cosine similarity of the query's and the record's embeddings (absent without an
    /// embedding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meaning: Option<f64>,
    /// The combined relevance.
    pub relevance: f64,
    /// The liveness factor (1 online).
    pub live: f64,
    /// The trust factor.
    pub trust: f64,
    /// The score: relevance × live × trust.
    pub score: f64,
    /// The same in words.
    pub text: String,
}

/// One search result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Hit {
    /// The record.
    #[serde(flatten)]
    pub record: Record,
    /// Reachable now.
    pub online: bool,
    /// When it was last seen (ms since the epoch).
    pub last_seen_ms: u64,
    /// When it leaves the directory if not seen again (ms since the epoch; absent while its
    /// source lists it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<u64>,
    /// The score (higher is better).
    pub score: f64,
    /// Why.
    pub explain: Explain,
    /// Records of the same agent under other sources, not shown separately.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_as: Vec<String>,
    /// The node that answered with this result (absent: this node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
}
