//! Hyperspace across real node processes on 127.0.0.1: a tool registered by an agent on node C
//! is discovered from node A and invoked end to end; a node that joins later finds it too;
//! card records held for the DHT survive a restart and are re-published.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::support::{
    self, Node, connected, discover_tool, eventually, get_json, register_tool, rpc_call,
    rpc_connect, spawn_node,
};

/// Starts A, B (joins A) and C (joins B) and waits until the line is connected.
async fn line(dir: &std::path::Path) -> (Node, Node, Node) {
    let a = spawn_node(&dir.join("a"), &[], 30, &[]);
    let b = spawn_node(&dir.join("b"), &[&a.p2p], 30, &[]);
    let c = spawn_node(&dir.join("c"), &[&b.p2p], 30, &[]);
    let ok = eventually(Duration::from_secs(20), async || {
        let on_b = connected(&b.http).await;
        (on_b.contains(&a.peer_id) && on_b.contains(&c.peer_id)).then_some(())
    })
    .await;
    assert!(ok.is_some(), "A–B–C connect");
    (a, b, c)
}

async fn register_search_tool(provider: &mut support::Ws) -> String {
    register_tool(
        provider,
        json!({
            "name": "web-search",
            "description": "Search the web and return links",
            "schema": {"type": "object", "properties": {"q": {"type": "string"}}},
            "capabilities": ["search", "web"]
        }),
    )
    .await
}

/// Polls `tool.discover` on `client` until it lists `tool`; returns the record.
async fn discover_until_found(client: &mut support::Ws, tool: &str) -> Value {
    discover_tool(
        client,
        json!({"query": "web search", "capabilities": ["search"]}),
        tool,
        Duration::from_secs(20),
    )
    .await
    .expect("the tool is discovered")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_on_node_c_is_discovered_from_node_a_and_invoked() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _b, c) = line(dir.path()).await;

    let mut provider = rpc_connect(&c.rpc).await;
    let tool = register_search_tool(&mut provider).await;

    // Spec Example 1 across nodes: a session on A, discovery, invocation with the session.
    let mut client = rpc_connect(&a.rpc).await;
    let r = rpc_call(
        &mut client,
        1,
        "state.createSession",
        json!({"agentName": "research-agent", "agentType": "autonomous", "model": "gemma-3-12b"}),
    )
    .await;
    let session = r["result"]["sessionId"].as_str().unwrap().to_owned();
    let found = discover_until_found(&mut client, &tool).await;
    assert_eq!(found["peerId"], c.peer_id.as_str());
    assert_eq!(found["name"], "web-search");
    assert_eq!(found["capabilities"], json!(["search", "web"]));
    assert_eq!(found["reputation"], 0.5, "no evidence yet: the prior");
    // A fresh tool does not pass Example 1's `minReputation: 0.8` (after the DHT and the
    // gossip ask come back empty-handed).
    let r = rpc_call(
        &mut client,
        2,
        "tool.discover",
        json!({"query": "web search", "minReputation": 0.8}),
    )
    .await;
    assert_eq!(r["result"]["tools"], json!([]), "{r}");

    // Invoke from A: C hands it to the provider's WebSocket; the result comes back to A.
    let invoke = json!({"jsonrpc": "2.0", "id": 7, "method": "tool.invoke",
        "params": {"toolId": tool, "params": {"q": "rust"}, "sessionId": session}});
    client
        .send(Message::Text(invoke.to_string().into()))
        .await
        .unwrap();
    let asked = tokio::time::timeout(Duration::from_secs(20), provider.next())
        .await
        .expect("the provider is asked in time")
        .unwrap()
        .unwrap();
    let req: Value = serde_json::from_str(asked.to_text().unwrap()).unwrap();
    assert_eq!(req["method"], "tool.invoke");
    assert_eq!(req["params"]["toolId"], tool.as_str());
    assert_eq!(req["params"]["params"], json!({"q": "rust"}));
    assert_eq!(req["params"]["sessionId"], session.as_str());
    let answer = json!({"jsonrpc": "2.0", "id": req["id"], "result": {"links": ["https://www.rust-lang.org"]}});
    provider
        .send(Message::Text(answer.to_string().into()))
        .await
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(20), client.next())
        .await
        .expect("the result comes back in time")
        .unwrap()
        .unwrap();
    let resp: Value = serde_json::from_str(resp.to_text().unwrap()).unwrap();
    assert_eq!(resp["id"], 7, "{resp}");
    assert_eq!(
        resp["result"]["result"],
        json!({"links": ["https://www.rust-lang.org"]})
    );
    assert_eq!(resp["result"]["peerId"], c.peer_id.as_str());
    assert!(resp["result"]["duration"].is_u64());

    // A provider's error reaches the caller unchanged.
    let invoke = json!({"jsonrpc": "2.0", "id": 8, "method": "tool.invoke",
        "params": {"toolId": tool, "params": {"q": ""}}});
    client
        .send(Message::Text(invoke.to_string().into()))
        .await
        .unwrap();
    let asked = provider.next().await.unwrap().unwrap();
    let req: Value = serde_json::from_str(asked.to_text().unwrap()).unwrap();
    let answer = json!({"jsonrpc": "2.0", "id": req["id"],
        "error": {"code": -32602, "message": "Invalid params", "data": {"field": "q"}}});
    provider
        .send(Message::Text(answer.to_string().into()))
        .await
        .unwrap();
    let resp = client.next().await.unwrap().unwrap();
    let resp: Value = serde_json::from_str(resp.to_text().unwrap()).unwrap();
    assert_eq!(resp["error"]["code"], -32602, "{resp}");
    assert_eq!(resp["error"]["data"], json!({"field": "q"}));

    // Both invocations are in A's analytics of the tool.
    let r = rpc_call(&mut client, 9, "tool.getAnalytics", json!({"toolId": tool})).await;
    assert_eq!(r["result"]["invocations"], 2, "{r}");
    assert_eq!(r["result"]["successRate"], 0.5);
    let r = rpc_call(
        &mut client,
        10,
        "state.endSession",
        json!({"sessionId": session}),
    )
    .await;
    assert_eq!(r["result"]["ended"], true, "{r}");

    // The provider leaves: C's next card no longer offers the tool, and A stops finding it.
    drop(provider);
    let mut id = 200;
    let gone = eventually(Duration::from_secs(20), async || {
        id += 1;
        let r = rpc_call(
            &mut client,
            id,
            "tool.discover",
            json!({"query": "web search"}),
        )
        .await;
        r["result"]["tools"]
            .as_array()?
            .iter()
            .all(|t| t["id"] != tool.as_str())
            .then_some(())
    })
    .await;
    assert!(gone.is_some(), "the tool disappears from A's discovery");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_joins_later_finds_the_tool() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _b, c) = line(dir.path()).await;
    let mut provider = rpc_connect(&c.rpc).await;
    let tool = register_search_tool(&mut provider).await;
    // Wait until the card went around (A knows it), so that the late node missed the full card.
    let mut on_a = rpc_connect(&a.rpc).await;
    discover_until_found(&mut on_a, &tool).await;

    let d = spawn_node(&dir.path().join("d"), &[&a.p2p], 30, &[]);
    let mut client = rpc_connect(&d.rpc).await;
    let ok = eventually(Duration::from_secs(20), async || {
        connected(&d.http).await.contains(&a.peer_id).then_some(())
    })
    .await;
    assert!(ok.is_some(), "D connects to A");
    // The very first call finds it (through the DHT, or the gossip ask).
    let r = rpc_call(
        &mut client,
        1,
        "tool.discover",
        json!({"query": "web search", "capabilities": ["search"]}),
    )
    .await;
    assert_eq!(r["result"]["tools"][0]["id"], tool.as_str(), "{r}");
    assert_eq!(r["result"]["tools"][0]["peerId"], c.peer_id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_card_records_survive_a_restart_and_are_republished() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = line(dir.path()).await;
    let mut provider = rpc_connect(&c.rpc).await;
    register_search_tool(&mut provider).await;

    // B holds C's card record for the DHT.
    let c_id = c.peer_id.clone();
    let holds_c = async |http: &str| {
        let v = get_json(http, "/hyperspace/cards").await;
        v["held"]
            .as_array()
            .is_some_and(|h| h.iter().any(|r| r["peerId"] == c_id.as_str()))
    };
    let held = eventually(Duration::from_secs(20), async || {
        holds_c(&b.http).await.then_some(())
    })
    .await;
    assert!(held.is_some(), "B holds C's record");

    // C and A go away; B restarts from its store.
    drop(provider);
    drop(c);
    drop(a);
    let b_data = b.data.clone();
    let mut b = b;
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    let b = spawn_node(&b_data, &[], 30, &[]);
    assert!(holds_c(&b.http).await, "B reloads the record it held");

    // A new node that only knows B receives the record from B's re-publication.
    let e = spawn_node(&dir.path().join("e"), &[&b.p2p], 30, &[]);
    let republished = eventually(Duration::from_secs(20), async || {
        holds_c(&e.http).await.then_some(())
    })
    .await;
    assert!(republished.is_some(), "B re-publishes C's record to E");
}
