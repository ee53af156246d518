//! An MCP `Tool` as a tool of the mesh (Hyperspace spec §4.3 tool cards, §10.1;
//! `../shared/notes/bridges.md` §7.1).
//!
//! | card field | from the MCP tool |
//! |---|---|
//! | id | [`tool_id`]: hex SHA-256 of (hosting peer id, `"mcp"`, server name, tool name), first 32 characters: stable across restarts, distinct across nodes and servers |
//! | name | `<server>.<tool>` (MCP tells aggregators to prefix) |
//! | description | `description`, else `title`, else a sentence naming the tool (cut to [`MAX_DESCRIPTION_BYTES`]) |
//! | schema | `{input: inputSchema verbatim, output: outputSchema}` (`output` only when there is one) |
//! | capabilities | the spec's `tags`, `"mcp"`, then the annotations' hints as `hint:read-only`, `hint:destructive`, `hint:idempotent`, `hint:open-world` (the `hint:` prefix marks them as the server's untrusted claims) |
//! | price | the spec's `price` |
//! | source | `{bridge: "mcp", server, name}` |

use agora_hyperspace::tool::{BridgedTool, RegisterParams};
use agora_hyperspace::tool_record::ToolSource;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::ServerSpec;

/// Characters of a bridged tool's id.
pub const ID_CHARS: usize = 32;
/// Longest description kept (the registry's bound).
pub const MAX_DESCRIPTION_BYTES: usize = 4096;
/// The capability every MCP-bridged tool carries.
pub const MCP_TAG: &str = "mcp";

/// The stable id of MCP tool `tool` of server `server` bridged on peer `peer_id`.
#[must_use]
pub fn tool_id(peer_id: &str, server: &str, tool: &str) -> String {
    let mut h = Sha256::new();
    for part in [peer_id, "mcp", server, tool] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    let digest = h.finalize();
    let mut id = String::with_capacity(ID_CHARS);
    for b in digest.iter().take(ID_CHARS / 2) {
        id.push_str(&format!("{b:02x}"));
    }
    id
}

/// Whether the spec's allow-list (`tools`) admits the MCP tool named `name`.
#[must_use]
pub fn allowed(spec: &ServerSpec, name: &str) -> bool {
    spec.tools
        .as_ref()
        .is_none_or(|list| list.iter().any(|t| t == name))
}

/// Cuts `text` to at most `max` bytes on a character boundary.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// The mesh tool for MCP tool `tool` (its JSON form) of server `server` (named so on this
/// node) bridged by `spec` on peer `peer_id`; `None` when it has no `name`.
#[must_use]
pub fn bridge_tool(
    peer_id: &str,
    server: &str,
    spec: &ServerSpec,
    tool: &Value,
) -> Option<BridgedTool> {
    let name = tool.get("name")?.as_str()?;
    let text = |k: &str| {
        tool.get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
    };
    let description = text("description").or_else(|| text("title")).map_or_else(
        || format!("MCP tool {name} of server {server}"),
        str::to_owned,
    );
    let mut schema = Map::new();
    schema.insert(
        "input".into(),
        tool.get("inputSchema")
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new())),
    );
    if let Some(output) = tool.get("outputSchema").filter(|o| !o.is_null()) {
        schema.insert("output".into(), output.clone());
    }
    let mut capabilities = spec.tags.clone();
    capabilities.push(MCP_TAG.to_owned());
    let annotations = tool.get("annotations");
    for (hint, tag) in [
        ("readOnlyHint", "hint:read-only"),
        ("destructiveHint", "hint:destructive"),
        ("idempotentHint", "hint:idempotent"),
        ("openWorldHint", "hint:open-world"),
    ] {
        if annotations
            .and_then(|a| a.get(hint))
            .and_then(Value::as_bool)
            == Some(true)
        {
            capabilities.push(tag.to_owned());
        }
    }
    Some(BridgedTool {
        id: tool_id(peer_id, server, name),
        params: RegisterParams {
            name: format!("{server}.{name}"),
            description: cut(&description, MAX_DESCRIPTION_BYTES),
            schema: Value::Object(schema),
            capabilities,
            price: spec.price,
        },
        source: ToolSource {
            bridge: ToolSource::MCP.to_owned(),
            server: server.to_owned(),
            name: name.to_owned(),
            verified: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(extra: &Value) -> ServerSpec {
        let mut v = json!({"url": "stdio://everything"});
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn ids_are_stable_and_distinct() {
        let a = tool_id("12D3KooA", "everything", "echo");
        assert_eq!(a, tool_id("12D3KooA", "everything", "echo"));
        assert_eq!(a.len(), ID_CHARS);
        assert_ne!(a, tool_id("12D3KooB", "everything", "echo"));
        assert_ne!(a, tool_id("12D3KooA", "other", "echo"));
        // the parts are length-prefixed: moving a boundary changes the id
        assert_ne!(tool_id("p", "ab", "c"), tool_id("p", "a", "bc"));
    }

    #[test]
    fn a_tool_maps_to_a_card() {
        let s = spec(&json!({"tags": ["demo"], "price": {"points": 5}}));
        let tool = json!({"name": "echo", "description": "Echoes back the input",
            "inputSchema": {"type": "object", "$schema": "x",
                            "properties": {"message": {"type": "string"}}},
            "outputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true, "openWorldHint": false}});
        let t = bridge_tool("P", "everything", &s, &tool).unwrap();
        assert_eq!(t.id, tool_id("P", "everything", "echo"));
        assert_eq!(t.params.name, "everything.echo");
        assert_eq!(t.params.description, "Echoes back the input");
        assert_eq!(t.params.schema["input"], tool["inputSchema"]);
        assert_eq!(t.params.schema["output"], json!({"type": "object"}));
        assert_eq!(t.params.capabilities, ["demo", "mcp", "hint:read-only"]);
        assert_eq!(t.params.price, s.price);
        assert_eq!(t.source.bridge, "mcp");
        assert_eq!(t.source.server, "everything");
        assert_eq!(t.source.name, "echo");
    }

    #[test]
    fn missing_fields_have_defaults_and_the_allow_list_filters() {
        let s = spec(&json!({"tools": ["a"]}));
        let t = bridge_tool("P", "srv", &s, &json!({"name": "a", "title": "The A"})).unwrap();
        assert_eq!(t.params.description, "The A");
        assert!(t.params.schema.get("output").is_none());
        let t = bridge_tool("P", "srv", &s, &json!({"name": "a"})).unwrap();
        assert_eq!(t.params.description, "MCP tool a of server srv");
        assert!(bridge_tool("P", "srv", &s, &json!({"title": "x"})).is_none());
        assert!(allowed(&s, "a"));
        assert!(!allowed(&s, "b"));
        assert!(allowed(&spec(&json!({})), "b"));
        assert_eq!(cut("ééé", 3), "é");
    }
}
