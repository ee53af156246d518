//! The AI Catalog document a node serves at `/.well-known/ai-catalog.json` (issue 33 item 6).
//!
//! The shape is the Agent Card working group's AI Catalog draft, `specification/ai-catalog.md`
//! of `Agent-Card/ai-catalog` at commit `634a09d` (2026-04-30), `specVersion` "1.0": a catalog
//! `{specVersion, host?, entries, metadata?}` whose entries each carry `identifier`,
//! `displayName`, `mediaType` and exactly one of `url` or `data`. `docs/directory.md` says what
//! a node lists:
//!
//! - the node itself as an A2A agent (`application/a2a-agent-card+json`, its Agent Card's URL);
//! - the node's MCP face (`application/mcp-server-card+json`, a server card inline pointing at
//!   `/mcp`), with the bridged MCP servers' tools behind it;
//! - every bridged A2A agent (its card URL);
//! - every agent and tool hosted here (`application/vnd.agora.directory-record+json`, the
//!   directory record inline: what it does, its trust and how to call it).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::record::{Record, Source};

/// The draft's `specVersion`.
pub const SPEC_VERSION: &str = "1.0";
/// The catalog's media type.
pub const MEDIA_TYPE: &str = "application/ai-catalog+json";
/// An A2A Agent Card.
pub const A2A_CARD: &str = "application/a2a-agent-card+json";
/// An MCP Server Card.
pub const MCP_SERVER_CARD: &str = "application/mcp-server-card+json";
/// A directory record inline.
pub const DIRECTORY_RECORD: &str = "application/vnd.agora.directory-record+json";
/// Most entries one catalog lists (the rest are left out, and `metadata` says how many).
pub const MAX_ENTRIES: usize = 1000;

/// An AI Catalog.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AiCatalog {
    /// `"1.0"`.
    pub spec_version: String,
    /// Who operates it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostInfo>,
    /// The entries.
    pub entries: Vec<CatalogEntry>,
    /// Custom data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// The catalog's operator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostInfo {
    /// Its name.
    pub display_name: String,
    /// A verifiable identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identifier: Option<String>,
    /// Its documentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation_url: Option<String>,
}

/// One artifact.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogEntry {
    /// A URN.
    pub identifier: String,
    /// Its name.
    pub display_name: String,
    /// What kind of artifact.
    pub media_type: String,
    /// Where the artifact is (exactly one of `url` and `data`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The artifact inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Keywords.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Custom data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// What a node knows when it writes its catalog.
#[derive(Clone, Debug)]
pub struct NodeFacts<'a> {
    /// The node's PeerId.
    pub peer_id: &'a str,
    /// The HTTP face's base URL as the client reached it (`http://127.0.0.1:7450`).
    pub base_url: &'a str,
    /// The node's software version.
    pub version: &'a str,
    /// Whether `/mcp` is served.
    pub mcp: bool,
    /// Whether the node's A2A Agent Card is served.
    pub a2a: bool,
    /// Bridged A2A agents: `(name, card URL)`.
    pub a2a_agents: &'a [(String, String)],
}

fn urn(peer_id: &str, rest: &str) -> String {
    format!("urn:agora:{peer_id}:{rest}")
}

/// The catalog of `node` listing `records` (those hosted here; others are skipped).
#[must_use]
pub fn build<'a>(node: &NodeFacts<'_>, records: impl Iterator<Item = &'a Record>) -> AiCatalog {
    let base = node.base_url.trim_end_matches('/');
    let mut entries = Vec::new();
    if node.a2a {
        entries.push(CatalogEntry {
            identifier: urn(node.peer_id, "a2a"),
            display_name: format!("Agora node {}", short(node.peer_id)),
            media_type: A2A_CARD.into(),
            url: Some(format!("{base}/.well-known/agent-card.json")),
            data: None,
            description: Some(
                "This Agora node as an A2A agent: every tool it can invoke, on its mesh or bridged, as a skill."
                    .into(),
            ),
            tags: vec!["agora".into(), "a2a".into()],
            metadata: None,
        });
    }
    if node.mcp {
        entries.push(CatalogEntry {
            identifier: urn(node.peer_id, "mcp"),
            display_name: format!("Agora node {} (MCP)", short(node.peer_id)),
            media_type: MCP_SERVER_CARD.into(),
            url: None,
            data: Some(json!({
                "name": format!("agora/{}", node.peer_id),
                "version": node.version,
                "description": "The tools this Agora node can invoke (its own, its mesh's and its bridged MCP servers'), the directory search and memory.",
                "remotes": [{"type": "streamable-http", "url": format!("{base}/mcp")}],
            })),
            description: Some("This Agora node as an MCP server (Streamable HTTP).".into()),
            tags: vec!["agora".into(), "mcp".into()],
            metadata: None,
        });
    }
    for (name, url) in node.a2a_agents {
        entries.push(CatalogEntry {
            identifier: urn(node.peer_id, &format!("a2a:{name}")),
            display_name: name.clone(),
            media_type: A2A_CARD.into(),
            url: Some(url.clone()),
            data: None,
            description: Some("An A2A agent bridged into the mesh by this node.".into()),
            tags: vec!["a2a".into(), "bridged".into()],
            metadata: None,
        });
    }
    let mut left_out = 0usize;
    for r in records.filter(|r| r.provenance.node == node.peer_id) {
        if entries.len() >= MAX_ENTRIES {
            left_out += 1;
            continue;
        }
        entries.push(record_entry(r));
    }
    let mut metadata = Map::new();
    metadata.insert("agora.peerId".into(), Value::String(node.peer_id.into()));
    metadata.insert(
        "agora.directorySearch".into(),
        Value::String(format!("{base}/directory/search?q=")),
    );
    if left_out > 0 {
        metadata.insert("agora.leftOut".into(), Value::from(left_out));
    }
    AiCatalog {
        spec_version: SPEC_VERSION.into(),
        host: Some(HostInfo {
            display_name: format!("Agora node {}", short(node.peer_id)),
            identifier: Some(node.peer_id.into()),
            documentation_url: None,
        }),
        entries,
        metadata: Some(metadata),
    }
}

/// One hosted record as an entry: the directory record inline.
fn record_entry(r: &Record) -> CatalogEntry {
    let mut tags: Vec<String> = vec![r.source.as_str().into(), r.kind.as_str().into()];
    if matches!(r.source, Source::Mcp | Source::A2a) {
        tags.push("bridged".into());
    }
    tags.extend(r.capabilities.iter().take(16).cloned());
    CatalogEntry {
        identifier: format!("urn:agora:{}", r.id),
        display_name: r.name.clone(),
        media_type: DIRECTORY_RECORD.into(),
        url: None,
        data: serde_json::to_value(r).ok(),
        description: (!r.description.is_empty()).then(|| r.description.clone()),
        tags,
        metadata: None,
    }
}

fn short(peer_id: &str) -> &str {
    let start = peer_id.len().saturating_sub(8);
    peer_id.get(start..).unwrap_or(peer_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::tests::tool;

    #[test]
    fn lists_hosted_records_and_faces() {
        let here = tool("a", "Scribe", "transcribes", &["asr"]);
        let mut elsewhere = tool("b", "Other", "", &[]);
        elsewhere.provenance.node = "node-b".into();
        let facts = NodeFacts {
            peer_id: "node-a",
            base_url: "http://127.0.0.1:7450/",
            version: "0.1.0",
            mcp: true,
            a2a: true,
            a2a_agents: &[("helper".into(), "http://127.0.0.1:9/card".into())],
        };
        let doc = build(&facts, [here, elsewhere].iter());
        assert_eq!(doc.spec_version, "1.0");
        let ids: Vec<&str> = doc.entries.iter().map(|e| e.identifier.as_str()).collect();
        assert_eq!(
            ids,
            [
                "urn:agora:node-a:a2a",
                "urn:agora:node-a:mcp",
                "urn:agora:node-a:a2a:helper",
                "urn:agora:hyperspace:node-a:a"
            ]
        );
        assert_eq!(
            doc.entries[0].url.as_deref(),
            Some("http://127.0.0.1:7450/.well-known/agent-card.json")
        );
        for e in &doc.entries {
            assert!(
                e.url.is_some() != e.data.is_some(),
                "exactly one of url and data"
            );
        }
    }
}
