//! `directory.search` on the JSON-RPC face: its name (the constant dispatch, the metric labels
//! and the OpenRPC document use), its params by position, its description and its result.

use agora_hyperspace::openrpc::{MethodDoc, params_of, result_of};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::hit::Hit;
use crate::query::SearchParams;

/// The JSON-RPC method.
pub const SEARCH: &str = "directory.search";
/// The directory's methods.
pub const METHODS: [&str; 1] = [SEARCH];
/// `directory.search`'s params by position.
pub const SEARCH_PARAMS: [&str; 4] = ["query", "filters", "limit", "scope"];
/// What `directory.search` takes and returns (for the node's OpenRPC document).
pub const DOCS: [MethodDoc; 1] = [MethodDoc {
    name: SEARCH,
    summary: "Searches every agent and tool known from every face (AGH, the ANS, Hyperspace, bridged MCP and A2A) by words and by meaning, the live first, each result explained.",
    params: params_of::<SearchParams>,
    result: result_of::<SearchResult>,
    errors: &[],
    example: || serde_json::json!({"query": "turn a recorded meeting into text", "filters": {"online": true, "trust": "signed"}, "limit": 5}),
}];

/// Result of `directory.search`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchResult {
    /// The results, best first.
    pub results: Vec<Hit>,
    /// How many.
    pub count: usize,
    /// The embedder of the query (`minilm-l6-v2`, `lexical-v1`, …).
    pub embedder: String,
    /// The nodes whose directories answered (this node first).
    pub answered_by: Vec<String>,
    /// How long the search took, in milliseconds.
    pub took_ms: f64,
}
