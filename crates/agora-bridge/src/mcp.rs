//! MCP (Hyperspace spec §10.1; the MCP specification, revisions 2025-11-25 and 2026-07-28): an
//! MCP server to bridge.

use std::collections::BTreeMap;

use agora_hyperspace::payments::Price;
use serde::{Deserialize, Serialize};

/// An MCP server to bridge: the params of `bridge.registerMCPServer` and one `[[bridge.mcp]]`
/// of `agora.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerSpec {
    /// Its name on this node (tools are named `<name>.<tool>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `stdio://<name>` (a child process: `command`, `args`) or `http(s)://…` (Streamable HTTP).
    pub url: String,
    /// The program of a stdio server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Variables added to the child's environment (which is otherwise built from an allow-list).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The child's working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Only these tools are bridged (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Capability tags added to every bridged tool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// A price per call of every bridged tool (a priced tool, spec §6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
}
