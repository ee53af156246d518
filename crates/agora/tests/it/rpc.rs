//! The Hyperspace JSON-RPC face over a real WebSocket: framing conformance (rust-stack §2.2),
//! authentication tiers and rate limits.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::support::{self, eventually, spawn_node};

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
    let key = support::TEST_API_KEY;
    let node = support::spawn_node_with_key(dir.path());
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

/// Calls `method` with `params` and returns the whole response.
async fn call(ws: &mut Ws, id: u64, method: &str, params: Value) -> Value {
    let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    ask(ws, &req.to_string()).await.expect("a response")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_lifecycle_budget_guard_tokens_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("n");
    let node = spawn_node(&data, &[], 30, &[]);
    let mut ws = connect(&node.rpc, None).await.unwrap();

    // What a client needs first: the node's PeerId, wallet, faces and embedder.
    let r = call(&mut ws, 99, "node.info", json!({})).await;
    let info = &r["result"];
    assert_eq!(info["peerId"], node.peer_id.as_str(), "{r}");
    let status = support::get_json(&node.http, "/status").await;
    assert_eq!(
        info["walletAddress"], status["payments"]["walletAddress"],
        "{r}"
    );
    for (face, url) in [
        ("rpc", &node.rpc),
        ("agh", &node.agh),
        ("http", &node.http),
        ("agtp", &node.agtp),
    ] {
        assert_eq!(info["faces"][face], url.as_str(), "{face}: {r}");
    }
    assert_eq!(info["faces"]["mcp"], format!("{}/mcp", node.http), "{r}");
    assert_eq!(info["faces"]["p2p"][0], node.p2p.as_str(), "{r}");
    assert!(info["embedder"]["dimensions"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(info["embedder"]["id"], status["memory"]["embedder"], "{r}");

    // Example 1, step 1: create a session.
    let r = call(
        &mut ws,
        1,
        "state.createSession",
        json!({"agentName": "research-agent", "agentType": "autonomous", "model": "gemma-3-12b"}),
    )
    .await;
    let session = r["result"]["sessionId"].as_str().unwrap().to_owned();
    assert!(r["result"]["createdAt"].as_str().unwrap().ends_with('Z'));
    let token = r["result"]["sessionToken"].as_str().unwrap().to_owned();

    // State round trip and an episode.
    let r = call(
        &mut ws,
        2,
        "state.setState",
        json!({"sessionId": session, "key": "goal", "value": {"topic": "p2p"}}),
    )
    .await;
    assert_eq!(r["result"]["updated"], true);
    let r = call(
        &mut ws,
        3,
        "state.getState",
        json!({"sessionId": session, "key": "goal"}),
    )
    .await;
    assert_eq!(r["result"]["value"], json!({"topic": "p2p"}));
    let r = call(
        &mut ws,
        4,
        "state.recordEpisode",
        json!({"sessionId": session, "outcome": "success", "reward": 0.8}),
    )
    .await;
    assert!(r["result"]["episodeId"].is_string());
    let r = call(
        &mut ws,
        5,
        "state.getSession",
        json!({"sessionId": "sess-unknown"}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32001);

    // Example 3: the budget guard (default limit 1.00).
    let r = call(
        &mut ws,
        10,
        "guard.consumeBudget",
        json!({"sessionId": session, "amount": 0.88, "description": "search"}),
    )
    .await;
    assert_eq!(r["result"]["remaining"], 0.12);
    let r = call(
        &mut ws,
        11,
        "guard.checkBudget",
        json!({"sessionId": session, "estimatedCost": 5.00}),
    )
    .await;
    assert_eq!(r["result"]["allowed"], false);
    let r = call(
        &mut ws,
        12,
        "guard.consumeBudget",
        json!({"sessionId": session, "amount": 5.00, "description": "large-model-inference"}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32002);
    assert_eq!(r["error"]["message"], "Budget exceeded");
    assert_eq!(
        r["error"]["data"],
        json!({"remaining": 0.12, "requested": 5.00, "limit": 1.00})
    );
    assert_eq!(r["id"], 12);

    // Recursion guard.
    let r = call(&mut ws, 20, "recursive.analyze",
        json!({"sessionId": session, "currentStep": "a", "callStack": ["a", "b", "c", "a", "b", "c", "a", "b", "c"]})).await;
    assert_eq!(r["result"]["isLooping"], true);
    assert_eq!(r["result"]["pattern"], "a -> b -> c");

    // A session token grants that session's calls only.
    let mut scoped = connect(&node.rpc, Some(&token)).await.unwrap();
    let r = call(
        &mut scoped,
        30,
        "guard.getBudgetStatus",
        json!({"sessionId": session}),
    )
    .await;
    assert_eq!(r["result"]["consumed"], 0.88);
    let other = call(
        &mut ws,
        31,
        "state.createSession",
        json!({"agentName": "other"}),
    )
    .await;
    let other_id = other["result"]["sessionId"].as_str().unwrap().to_owned();
    let r = call(
        &mut scoped,
        32,
        "state.getSession",
        json!({"sessionId": other_id}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32600, "{r}");

    // Restart: sessions, state and budgets survive; the live token still works.
    drop(scoped);
    drop(ws);
    drop(node);
    let node = spawn_node(&data, &[], 30, &[]);
    let mut scoped = connect(&node.rpc, Some(&token)).await.unwrap();
    let r = call(
        &mut scoped,
        40,
        "state.getState",
        json!({"sessionId": session, "key": "goal"}),
    )
    .await;
    assert_eq!(r["result"]["value"], json!({"topic": "p2p"}));
    let r = call(
        &mut scoped,
        41,
        "guard.getBudgetStatus",
        json!({"sessionId": session}),
    )
    .await;
    assert_eq!(r["result"]["remaining"], 0.12);
    // Ending the session withdraws its token.
    let r = call(
        &mut scoped,
        42,
        "state.endSession",
        json!({"sessionId": session}),
    )
    .await;
    assert_eq!(r["result"]["ended"], true);
    drop(scoped);
    assert!(
        connect(&node.rpc, Some(&token)).await.is_err(),
        "the token ends with the session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_tool_is_discovered_and_invoked_on_its_provider() {
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("n"), &[], 30, &[]);
    let mut provider = connect(&node.rpc, None).await.unwrap();
    let r = call(
        &mut provider,
        1,
        "tool.register",
        json!({
        "name": "web-search", "description": "Search the web and return links",
        "schema": {"type": "object", "properties": {"q": {"type": "string"}}},
        "capabilities": ["search", "web"]}),
    )
    .await;
    let tool = r["result"]["toolId"].as_str().unwrap().to_owned();

    let mut client = connect(&node.rpc, None).await.unwrap();
    let r = call(
        &mut client,
        2,
        "tool.discover",
        json!({"query": "web search", "capabilities": ["search"]}),
    )
    .await;
    assert_eq!(r["result"]["tools"][0]["id"], tool.as_str(), "{r}");

    // Params that do not match the tool's input schema never reach the provider (the next
    // request it gets is the good one below): −32602 with every schema error.
    for (id, bad) in [(20, json!("not-an-object")), (21, json!({"q": 7}))] {
        let r = call(
            &mut client,
            id,
            "tool.invoke",
            json!({"toolId": tool, "params": bad}),
        )
        .await;
        assert_eq!(r["error"]["code"], -32602, "{r}");
        assert_eq!(r["error"]["data"]["field"], "params", "{r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("input schema"),
            "{r}"
        );
        assert!(!r["error"]["data"]["errors"].as_array().unwrap().is_empty());
    }

    // The client's invoke reaches the provider as a JSON-RPC request on its own connection.
    let invoke = json!({"jsonrpc": "2.0", "id": 3, "method": "tool.invoke",
                        "params": {"toolId": tool, "params": {"q": "rust"}}});
    client
        .send(Message::Text(invoke.to_string().into()))
        .await
        .unwrap();
    let Some(Ok(Message::Text(req))) = provider.next().await else {
        panic!("provider is asked")
    };
    let req: Value = serde_json::from_str(req.as_str()).unwrap();
    assert_eq!(req["method"], "tool.invoke");
    assert_eq!(req["params"]["params"], json!({"q": "rust"}));
    let answer = json!({"jsonrpc": "2.0", "id": req["id"], "result": {"links": ["https://www.rust-lang.org"]}});
    provider
        .send(Message::Text(answer.to_string().into()))
        .await
        .unwrap();
    let Some(Ok(Message::Text(resp))) = client.next().await else {
        panic!("client gets the result")
    };
    let resp: Value = serde_json::from_str(resp.as_str()).unwrap();
    assert_eq!(resp["id"], 3);
    assert_eq!(
        resp["result"]["result"]["links"][0],
        "https://www.rust-lang.org"
    );
    assert!(resp["result"]["duration"].is_u64());
    assert_eq!(resp["result"]["peerId"], node.peer_id);

    let r = call(&mut client, 4, "tool.getAnalytics", json!({"toolId": tool})).await;
    assert_eq!(r["result"]["invocations"], 1);
    assert_eq!(r["result"]["successRate"], 1.0);

    // The tool belongs to its provider's connection: when it closes, the tool is gone.
    drop(provider);
    let mut id = 10;
    eventually(std::time::Duration::from_secs(1), async || {
        id += 1;
        let r = call(&mut client, id, "tool.listRegistered", json!({})).await;
        r["result"]["tools"]
            .as_array()
            .is_some_and(Vec::is_empty)
            .then_some(())
    })
    .await
    .expect("the tool leaves with its provider");
    let r = call(
        &mut client,
        99,
        "tool.invoke",
        json!({"toolId": tool, "params": {}}),
    )
    .await;
    // Its id is kept for the provider's return: meanwhile it is unavailable, not unknown.
    assert_eq!(r["error"]["code"], -32006, "{r}");
}
