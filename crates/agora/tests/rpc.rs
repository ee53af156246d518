//! The Hyperspace JSON-RPC face over a real WebSocket: framing conformance (rust-stack §2.2),
//! authentication tiers and rate limits.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use support::{spawn_node, spawn_node_env};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(url: &str, bearer: Option<&str>) -> Result<Ws, String> {
    let mut req = url.into_client_request().unwrap();
    if let Some(b) = bearer {
        req.headers_mut()
            .insert("Authorization", format!("Bearer {b}").parse().unwrap());
    }
    tokio_tungstenite::connect_async(req)
        .await
        .map(|(ws, _)| ws)
        .map_err(|e| e.to_string())
}

/// Sends one text frame; returns the reply frame, or `None` if nothing comes within 300 ms.
async fn ask(ws: &mut Ws, text: &str) -> Option<Value> {
    ws.send(Message::Text(text.into())).await.unwrap();
    let msg = tokio::time::timeout(std::time::Duration::from_millis(300), ws.next())
        .await
        .ok()??
        .ok()?;
    match msg {
        Message::Text(t) => Some(serde_json::from_str(t.as_str()).unwrap()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framing_conformance_over_a_real_websocket() {
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("n"), &[], 30, &[]);
    let mut ws = connect(&node.rpc, None).await.unwrap();

    let r = ask(
        &mut ws,
        r#"{"jsonrpc":"1.0","id":1,"method":"state.getSession"}"#,
    )
    .await
    .unwrap();
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (json!(1), json!(-32600))
    );
    let r = ask(
        &mut ws,
        r#"{"jsonrpc":"2.0","id":1.5,"method":"nope.nothing"}"#,
    )
    .await
    .unwrap();
    assert_eq!(r["id"], json!(1.5), "fractional ids are echoed");
    assert_eq!(r["error"]["code"], -32601);
    let r = ask(&mut ws, r#"{"jsonrpc":"2.0","id":{"x":1},"method":"a.b"}"#)
        .await
        .unwrap();
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (Value::Null, json!(-32600))
    );
    assert!(
        ask(&mut ws, r#"{"jsonrpc":"2.0","method":"a.b"}"#)
            .await
            .is_none(),
        "notifications get no reply"
    );
    let r = ask(
        &mut ws,
        r#"{"jsonrpc":"2.0","id":2,"method":"a.b","params":"str"}"#,
    )
    .await
    .unwrap();
    assert_eq!(r["error"]["code"], -32602);
    let r = ask(&mut ws, r#"{"jsonrpc":"2.0","id":3,"method""#)
        .await
        .unwrap();
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (Value::Null, json!(-32700))
    );
    let r = ask(&mut ws, "[]").await.unwrap();
    assert_eq!(r["error"]["code"], -32600);
    let r = ask(
        &mut ws,
        r#"[{"jsonrpc":"2.0","id":7,"method":"a.b"},{"jsonrpc":"2.0","method":"a.b"},1]"#,
    )
    .await
    .unwrap();
    let arr = r.as_array().unwrap();
    assert_eq!(arr.len(), 2, "no entry for the notification: {r}");
    assert_eq!(arr[0]["id"], 7);
    assert_eq!(arr[1]["error"]["code"], -32600);
    let r = ask(
        &mut ws,
        r#"{"jsonrpc":"2.0","id":9,"method":"a.b","method":"c.d"}"#,
    )
    .await
    .unwrap();
    assert_eq!(r["error"]["code"], -32600, "duplicate members are refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_and_rate_limits() {
    let dir = tempfile::tempdir().unwrap();
    let key = "an-api-key-of-sufficient-length";
    let node = spawn_node_env(
        &dir.path().join("n"),
        &[],
        30,
        &[],
        &[("AGORA_RPC_API_KEY", key)],
    );
    let Err(err) = connect(&node.rpc, None).await else {
        panic!("no header, no connection");
    };
    assert!(err.contains("401"), "{err}");
    assert!(connect(&node.rpc, Some("wrong-key")).await.is_err());
    let mut ws = connect(&node.rpc, Some(key)).await.unwrap();
    // 400 requests in one burst: the per-connection bucket (200/s) refuses some with −32003.
    let mut limited = 0;
    for i in 0..400 {
        let text = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"x.y"}}"#);
        ws.send(Message::Text(text.into())).await.unwrap();
    }
    for _ in 0..400 {
        let Some(Ok(Message::Text(t))) = ws.next().await else {
            panic!("reply expected")
        };
        let v: Value = serde_json::from_str(t.as_str()).unwrap();
        if v["error"]["code"] == -32003 {
            assert!(v["error"]["data"]["retryAfterMs"].as_u64().is_some());
            limited += 1;
        }
    }
    assert!(limited > 0, "a burst beyond the limit is rate limited");
    assert!(limited < 400);
}
