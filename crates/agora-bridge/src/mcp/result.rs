//! An MCP `CallToolResult` as the result of `tool.invoke` (Hyperspace spec §4.3 `tool.invoke`;
//! MCP `server/tools`; `../shared/notes/bridges.md` §7.2). The one place this mapping lives, since
//! MCP plans to redesign its result shape.
//!
//! A bridged MCP tool's `tool.invoke` result is always an object:
//!
//! ```json
//! {"result": <normalised>, "content": [<MCP content blocks, verbatim>], "isError": true}
//! ```
//!
//! - `result`: the `structuredContent` when there is one (any JSON value); else the text of the
//!   `text` blocks joined with `"\n"` (a string); else `null` (images, audio, resources only).
//! - `content`: every content block as the server sent it (`text`, `image`, `audio`,
//!   `resource_link`, `resource`, with their `annotations` and `_meta`), so nothing is lost on
//!   the way back out to MCP.
//! - `isError`: present, `true`, when the tool ran and failed (MCP `isError: true`); such a
//!   result is a result, not a JSON-RPC error, so the caller (often a model) can read why.

use serde_json::{Map, Value};

/// `tool.invoke`'s result for MCP `CallToolResult` `call` (its JSON form).
#[must_use]
pub fn map_result(call: &Value) -> Value {
    let content = match call.get("content") {
        Some(Value::Array(blocks)) => blocks.clone(),
        _ => Vec::new(),
    };
    let result = match call.get("structuredContent") {
        Some(structured) if !structured.is_null() => structured.clone(),
        _ => {
            let texts: Vec<&str> = content
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            if texts.is_empty() {
                Value::Null
            } else {
                Value::String(texts.join("\n"))
            }
        }
    };
    let mut out = Map::new();
    out.insert("result".into(), result);
    out.insert("content".into(), Value::Array(content));
    if call.get("isError").and_then(Value::as_bool) == Some(true) {
        out.insert("isError".into(), Value::Bool(true));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_only_is_the_joined_text() {
        let call = json!({"content": [{"type": "text", "text": "Echo: hi"}]});
        assert_eq!(
            map_result(&call),
            json!({"result": "Echo: hi", "content": [{"type": "text", "text": "Echo: hi"}]})
        );
        let call =
            json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        assert_eq!(map_result(&call)["result"], "a\nb");
    }

    #[test]
    fn structured_content_wins_and_content_is_kept() {
        let call = json!({"content": [{"type": "text", "text": "{\"t\":1}"}],
                          "structuredContent": {"t": 1}});
        let r = map_result(&call);
        assert_eq!(r["result"], json!({"t": 1}));
        assert_eq!(r["content"][0]["text"], "{\"t\":1}");
        // a non-object structured result (2026-07-28) is kept as it is
        assert_eq!(
            map_result(&json!({"content": [], "structuredContent": 3}))["result"],
            3
        );
    }

    #[test]
    fn media_and_resources_are_kept_verbatim() {
        let blocks = json!([
            {"type": "image", "data": "iVBOR", "mimeType": "image/png"},
            {"type": "audio", "data": "UklG", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///x", "name": "x"},
            {"type": "resource", "resource": {"uri": "file:///y", "text": "y"},
             "annotations": {"priority": 1}}
        ]);
        let r = map_result(&json!({"content": blocks}));
        assert_eq!(r["result"], Value::Null);
        assert_eq!(r["content"], blocks);
    }

    #[test]
    fn a_failed_tool_is_a_result_marked_is_error() {
        let r =
            map_result(&json!({"content": [{"type": "text", "text": "boom"}], "isError": true}));
        assert_eq!(
            r,
            json!({"result": "boom", "content": [{"type": "text", "text": "boom"}],
                             "isError": true})
        );
        let r = map_result(&json!({"content": [], "isError": false}));
        assert!(r.get("isError").is_none());
    }
}
