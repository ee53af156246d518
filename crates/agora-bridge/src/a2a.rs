//! A2A (Hyperspace spec §10.2; A2A 1.0): an A2A agent to announce.

use agora_hyperspace::payments::Price;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An A2A agent to announce: the params of `bridge.announceA2AAgent` and one `[[bridge.a2a]]`
/// of `agora.toml`. Exactly one of `url` and `agentCard` is given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentSpec {
    /// Its name on this node (from the card when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The agent's base URL: its card is fetched from `<url>/.well-known/agent-card.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The agent's card, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_card: Option<Value>,
    /// Capability tags added to every skill.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// A price per call of every skill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
}
