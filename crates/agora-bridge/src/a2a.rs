//! A2A (Hyperspace spec §10.2; A2A 1.0, spec v1.0.1): an A2A agent to announce, and the pure
//! logic of both directions of the A2A bridge.
//!
//! | module | owns |
//! |---|---|
//! | this one | [`AgentSpec`], the bridge's methods ([`METHODS`]), the wire constants (topic, header, well-known path, metadata key) |
//! | [`card`] | the Agent Card's shape check (A2A 1.0 §4.4 `AgentCard`), skills → mesh tools (ids, schema, source) |
//! | [`jws`] | signed Agent Cards (A2A §8.4): ES256 JWS over RFC 8785 JCS of the card minus `signatures`, checked against configured keys only |
//! | [`serve`] | the node as an A2A agent: its card from the mesh tools, how a message names a skill and carries arguments, a `tool.invoke` outcome as a task state |
//! | [`task`] | a mesh tool call → `SendMessage`, and the agent's answer → the tool's result or a Hyperspace error |

pub mod card;
pub mod jws;
pub mod serve;
pub mod task;

use agora_hyperspace::payments::Price;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The gossip topic on which a node publishes the Agent Cards it announces (a Hyperspace v2
/// envelope whose `d` is `{name, url, card}`, `card` being the card's original text).
pub const CARDS_TOPIC: &str = "hyperspace/a2a/cards";

/// Where an agent serves its card (RFC 8615, A2A ≥ 0.3).
pub const WELL_KNOWN_CARD: &str = "/.well-known/agent-card.json";

/// The header naming the A2A version of a request (A2A §3.6).
pub const VERSION_HEADER: &str = "A2A-Version";

/// The A2A version spoken.
pub const VERSION: &str = "1.0";

/// The prefix of the metadata keys Agora reads and writes (reverse DNS, owned by the project).
pub const META_PREFIX: &str = "org.agora";

/// `message.metadata` key naming the skill a message is for (A2A has no field for it).
pub const SKILL_ID_KEY: &str = "org.agora-mesh/skillId";

/// `bridge.announceA2AAgent({url} | {agentCard}, name?, tags?, price?)`.
pub const ANNOUNCE: &str = "bridge.announceA2AAgent";
/// `bridge.listA2AAgents()`.
pub const LIST: &str = "bridge.listA2AAgents";
/// `bridge.withdrawA2AAgent({name})`.
pub const WITHDRAW: &str = "bridge.withdrawA2AAgent";
/// The A2A bridge's JSON-RPC methods (the node's call router routes these exact names to it).
pub const METHODS: [&str; 3] = [ANNOUNCE, LIST, WITHDRAW];

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

impl AgentSpec {
    /// Checks that exactly one of `url` and `agentCard` is given, and the name if any.
    ///
    /// # Errors
    ///
    /// What is wrong, for the caller's error.
    pub fn check(&self) -> Result<(), String> {
        match (&self.url, &self.agent_card) {
            (Some(_), Some(_)) => return Err("give either url or agentCard, not both".into()),
            (None, None) => return Err("give url or agentCard".into()),
            (Some(url), None) if !is_http_url(url) => {
                return Err(format!("url {url:?} is not an http(s) URL"));
            }
            _ => {}
        }
        if let Some(name) = &self.name {
            crate::check_name(name)?;
        }
        Ok(())
    }

    /// The URL the card is fetched from (`<url>/.well-known/agent-card.json`; a URL that
    /// already ends with the well-known path is taken as it is).
    #[must_use]
    pub fn card_url(&self) -> Option<String> {
        let url = self.url.as_deref()?;
        if url.ends_with(WELL_KNOWN_CARD) {
            return Some(url.to_owned());
        }
        Some(format!("{}{WELL_KNOWN_CARD}", url.trim_end_matches('/')))
    }
}

/// `http://…` or `https://…` with something after the scheme.
#[must_use]
pub fn is_http_url(url: &str) -> bool {
    ["http://", "https://"]
        .iter()
        .any(|s| url.strip_prefix(s).is_some_and(|rest| !rest.is_empty()))
}

/// A name for an agent on this node from its card's `name`: characters outside
/// `[A-Za-z0-9_-]` become `-`, cut to [`crate::MAX_NAME_BYTES`]; `agent` when nothing is left.
#[must_use]
pub fn name_from_card(card_name: &str) -> String {
    let name: String = card_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(crate::MAX_NAME_BYTES)
        .collect();
    let name = name.trim_matches('-').to_owned();
    if name.is_empty() {
        "agent".into()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_skill_key_is_under_the_vendor_prefix() {
        assert!(SKILL_ID_KEY.starts_with(crate::VENDOR_PREFIX));
    }

    #[test]
    fn specs_and_names() {
        let spec = |v: Value| serde_json::from_value::<AgentSpec>(v).unwrap();
        assert!(
            spec(serde_json::json!({"url": "http://127.0.0.1:1"}))
                .check()
                .is_ok()
        );
        assert!(spec(serde_json::json!({})).check().is_err());
        assert!(spec(serde_json::json!({"url": "ftp://x"})).check().is_err());
        assert!(
            spec(serde_json::json!({"url": "http://a", "agentCard": {}}))
                .check()
                .is_err()
        );
        assert_eq!(
            spec(serde_json::json!({"url": "http://a:1/"}))
                .card_url()
                .unwrap(),
            "http://a:1/.well-known/agent-card.json"
        );
        assert_eq!(name_from_card("Echo Agent!"), "Echo-Agent");
        assert_eq!(name_from_card("   "), "agent");
    }
}
