//! A client that speaks one face's protocol to another face gets one line naming the right
//! face and its address, instead of a parse error about a field it never meant to send.
//!
//! | sent | to | answer |
//! |---|---|---|
//! | a JSON-RPC request (WebSocket) | the AGH face | a JSON-RPC −32600 with the request's id: "this is the AGH face …; JSON-RPC is at ws://…" |
//! | an AGH envelope (WebSocket) | the JSON-RPC face | −32600 id `null`: "this is the JSON-RPC face …; AGH envelopes go to ws://…/agh/v0" |
//! | plain HTTP (no WebSocket upgrade) | the JSON-RPC or AGH face | 426 Upgrade Required: "this is the … WebSocket face …; the HTTP API is at http://…" |
//! | a WebSocket upgrade, or a JSON-RPC POST | the HTTP face (any path that is not its own) | 400: "this is the HTTP API; JSON-RPC is a WebSocket at ws://…, AGH at ws://…/agh/v0, MCP at http://…/mcp" |
//! | an HTTP request | the AGTP face | the AGTP 400 the drafts prescribe (`invalid-wire-format`), its message ending "this is the AGTP face …; HTTP is served at http://…" |
//!
//! The faces' addresses come from [`Faces`], made once the listeners are bound.

use std::sync::Arc;

use serde_json::Value;

/// The faces' addresses, by name (`rpc` → `ws://…`), as `listening on` prints them.
#[derive(Clone, Debug, Default)]
pub struct Faces(Arc<Vec<(&'static str, String)>>);

impl Faces {
    /// The faces `urls` (from [`crate::faces::serving::Listeners::urls`]).
    pub fn new(urls: Arc<Vec<(&'static str, String)>>) -> Self {
        Self(urls)
    }

    /// The address of `face`, or a placeholder naming its `listening on` line.
    pub fn url(&self, face: &str) -> String {
        self.0.iter().find(|(name, _)| *name == face).map_or_else(
            || format!("the address of its `listening on {face}` line"),
            |(_, url)| url.clone(),
        )
    }

    /// What the AGH face says to a JSON-RPC client.
    pub fn jsonrpc_on_agh(&self) -> String {
        format!(
            "this is the AGH face (AGH Network v0 envelopes); JSON-RPC is served at {}",
            self.url("rpc")
        )
    }

    /// What the JSON-RPC face says to an AGH agent.
    pub fn envelope_on_rpc(&self) -> String {
        format!(
            "this is the JSON-RPC face (Hyperspace JSON-RPC 2.0); AGH envelopes go to {}",
            self.url("agh")
        )
    }

    /// What a WebSocket face (`face`: `JSON-RPC` or `AGH`) says to a plain HTTP request.
    pub fn http_on_ws(&self, face: &str, ws_url: &str) -> String {
        format!(
            "this is the {face} face, a WebSocket at {ws_url} (send an Upgrade: websocket \
             request); the HTTP API is at {}",
            self.url("http")
        )
    }

    /// What the HTTP face says to a WebSocket or JSON-RPC client at a path it does not serve.
    pub fn rpc_on_http(&self) -> String {
        format!(
            "this is the HTTP API; JSON-RPC is a WebSocket at {}, AGH envelopes a WebSocket at {}, \
             MCP is at {}/mcp",
            self.url("rpc"),
            self.url("agh"),
            self.url("http")
        )
    }

    /// What the AGTP face says to an HTTP client.
    pub fn http_on_agtp(&self) -> String {
        format!(
            "this is the AGTP face (AGTP/1.0, the Agent Name Service); HTTP is served at {}",
            self.url("http")
        )
    }
}

/// The id of a JSON-RPC request in `text` (`Some(Value::Null)` for a batch or an id-less one),
/// or `None` when `text` is not JSON-RPC. Cheap for envelopes: nothing is parsed unless the
/// text names `"jsonrpc"`.
pub fn jsonrpc_id(text: &str) -> Option<Value> {
    if !text.contains("\"jsonrpc\"") {
        return None;
    }
    match serde_json::from_str::<Value>(text).ok()? {
        Value::Object(m) if m.contains_key("jsonrpc") && m.contains_key("method") => {
            Some(m.get("id").cloned().unwrap_or(Value::Null))
        }
        Value::Array(items) if items.first().is_some_and(|i| i.get("jsonrpc").is_some()) => {
            Some(Value::Null)
        }
        _ => None,
    }
}

/// Whether `text` is an AGH envelope (an object with `kind`, `channel` and `from`, and no
/// `jsonrpc`).
pub fn is_envelope(text: &str) -> bool {
    if !text.contains("\"kind\"") || text.contains("\"jsonrpc\"") {
        return false;
    }
    serde_json::from_str::<Value>(text).is_ok_and(|v| {
        ["kind", "channel", "from"]
            .iter()
            .all(|k| v.get(k).is_some())
    })
}

/// Whether an HTTP request line (`GET / HTTP/1.1`) starts `head`.
pub fn is_http_request(head: &[u8]) -> bool {
    let line = head.split(|&b| b == b'\n').next().unwrap_or(head);
    let line = String::from_utf8_lossy(line);
    let line = line.trim_end();
    let mut parts = line.split(' ');
    let (Some(method), Some(_target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    version.starts_with("HTTP/")
        && !method.is_empty()
        && method.bytes().all(|b| b.is_ascii_uppercase())
}

/// The HTTP answer of a WebSocket-only face to a request that is not a WebSocket upgrade: 426
/// with [`Faces::http_on_ws`].
pub fn upgrade_required(faces: &Faces, face: &str, ws_url: &str) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let mut r = crate::faces::serve::json_error(
        axum::http::StatusCode::UPGRADE_REQUIRED,
        faces.http_on_ws(face, ws_url),
    );
    r.headers_mut().insert(
        axum::http::header::UPGRADE,
        axum::http::HeaderValue::from_static("websocket"),
    );
    r.into_response()
}

/// A handler answering [`upgrade_required`] for the WebSocket face `face` (its URL is the face
/// named `key`): the fallback of the JSON-RPC and AGH routers.
pub fn not_upgraded<S: Clone + Send + Sync + 'static>(
    faces: Faces,
    face: &'static str,
    key: &'static str,
) -> impl axum::handler::Handler<((),), S> {
    move || {
        let faces = faces.clone();
        async move { upgrade_required(&faces, face, &faces.url(key)) }
    }
}

/// The HTTP face's answer at a path it does not serve: a WebSocket upgrade or a POST (a
/// JSON-RPC or MCP client at the wrong address) is 400 with [`Faces::rpc_on_http`]; anything
/// else is 404 naming the path.
pub fn http_fallback(
    faces: &Faces,
    method: &axum::http::Method,
    headers: &axum::http::HeaderMap,
    path: &str,
) -> axum::response::Response {
    use axum::http::StatusCode;
    let upgrade = headers
        .get(axum::http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if upgrade || method == axum::http::Method::POST {
        return crate::faces::serve::json_error(StatusCode::BAD_REQUEST, faces.rpc_on_http());
    }
    crate::faces::serve::json_error(
        StatusCode::NOT_FOUND,
        format!("the HTTP API has no {path} (its paths are listed in docs/node.md)"),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_protocol_is_told_apart() {
        assert_eq!(
            jsonrpc_id(r#"{"jsonrpc":"2.0","id":7,"method":"state.createSession"}"#),
            Some(json!(7))
        );
        assert_eq!(
            jsonrpc_id(r#"[{"jsonrpc":"2.0","id":7,"method":"m"}]"#),
            Some(Value::Null)
        );
        let envelope =
            r#"{"id":"e1","kind":"say","channel":"lobby","from":"12D3KooW","ts":1,"body":{}}"#;
        assert_eq!(jsonrpc_id(envelope), None);
        assert!(is_envelope(envelope));
        assert!(!is_envelope(r#"{"jsonrpc":"2.0","id":1,"method":"kind"}"#));
        assert!(!is_envelope("not json"));
        assert!(is_http_request(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert!(is_http_request(b"POST /mcp HTTP/1.1\r\n"));
        assert!(!is_http_request(b"AGTP/1.0 DISCOVER\r\n"));
        assert!(!is_http_request(b"DISCOVER agtp://x AGTP/1.0\r\n"));
    }

    #[test]
    fn the_lines_name_the_right_face_and_its_address() {
        let faces = Faces::new(Arc::new(vec![
            ("agh", "ws://127.0.0.1:1/agh/v0".into()),
            ("rpc", "ws://127.0.0.1:2".into()),
            ("http", "http://127.0.0.1:3".into()),
        ]));
        assert!(faces.jsonrpc_on_agh().ends_with("ws://127.0.0.1:2"));
        assert!(faces.envelope_on_rpc().ends_with("ws://127.0.0.1:1/agh/v0"));
        assert!(faces.rpc_on_http().contains("http://127.0.0.1:3/mcp"));
        assert!(faces.http_on_agtp().ends_with("http://127.0.0.1:3"));
        assert!(faces.url("agtp").contains("listening on agtp"));
    }
}
