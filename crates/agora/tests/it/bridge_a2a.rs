//! The A2A bridge (Hyperspace spec §10.2; `docs/bridges.md`) against an independent A2A 1.0
//! agent (`tests/fixtures/a2a_agent.py`, Python a2a-sdk 1.3.0, signed card): announced on node
//! A, its skills discovered and invoked from node B (a completed task, an INPUT_REQUIRED
//! continuation), its card gossiped to B; a forged card signature is refused.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{self, rpc_call, rpc_connect};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_agent_announced_on_one_node_is_invoked_from_another() {
    let Some(python) = support::bridge_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    support::a2a_card_key(dir.path(), "fixture-key");
    let key = dir.path().join("fixture-key.key.json");
    let agent =
        support::spawn_python_fixture(&python, "a2a_agent.py", &["--key", key.to_str().unwrap()]);
    let config = dir.path().join("a.toml");
    let public = dir.path().join("fixture-key.pub.json");
    std::fs::write(
        &config,
        format!("[bridge]\na2a_keys = [{:?}]\n", public.to_str().unwrap()),
    )
    .unwrap();
    let (da, db) = (dir.path().join("a"), dir.path().join("b"));
    let a = support::spawn_node(&da, &[], 30, &["--config", config.to_str().unwrap()]);
    let b = support::spawn_node(&db, &[&a.p2p], 30, &[]);
    let mut ra = rpc_connect(&a.rpc).await;
    let mut rb = rpc_connect(&b.rpc).await;

    // Announced on A: the card is fetched, its signature verifies under the configured key.
    let r = rpc_call(
        &mut ra,
        1,
        "bridge.announceA2AAgent",
        json!({"url": agent.url, "name": "fx", "tags": ["demo"]}),
    )
    .await;
    let announced = &r["result"];
    assert_eq!(announced["verified"], true, "{r}");
    assert_eq!(announced["kid"], "fixture-key");
    let tool = |skill: &str| {
        announced["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["skillId"] == skill)
            .map(|t| t["toolId"].as_str().unwrap().to_owned())
            .unwrap()
    };
    let (echo, greet) = (tool("echo"), tool("greet"));

    // B finds the skill by tag, marked as bridged from A2A with a verified card.
    let found = support::discover_tool(
        &mut rb,
        json!({"query": "", "capabilities": ["a2a", "echo"]}),
        &echo,
        Duration::from_secs(15),
    )
    .await
    .expect("B discovers the bridged skill");
    assert_eq!(
        found["source"],
        json!({"bridge": "a2a", "server": "fx", "name": "echo", "verified": "signed-card"})
    );
    assert_eq!(found["peerId"], a.peer_id);

    // Invoked from B: SendMessage to the agent, the completed task as the result.
    let invoke = async |ws: &mut support::Ws, id, tool: &str, params: Value| {
        let r = rpc_call(
            ws,
            id,
            "tool.invoke",
            json!({"toolId": tool, "params": params}),
        )
        .await;
        r["result"]["result"].clone()
    };
    let done = invoke(&mut rb, 2, &echo, json!({"text": "hi"})).await;
    assert_eq!(done["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(done["artifacts"][0]["parts"][0]["text"], "echo: hi");

    // INPUT_REQUIRED comes back with the task's ids; invoking again with them continues it.
    let asked = invoke(&mut rb, 3, &greet, json!({"text": "greet"})).await;
    assert_eq!(asked["state"], "TASK_STATE_INPUT_REQUIRED", "{asked}");
    assert_eq!(asked["parts"][0]["text"], "who?");
    let cont = json!({"text": "Ada", "taskId": asked["taskId"], "contextId": asked["contextId"]});
    let greeted = invoke(&mut rb, 4, &greet, cont).await;
    assert_eq!(greeted["state"], "TASK_STATE_COMPLETED", "{greeted}");
    assert_eq!(greeted["artifacts"][0]["parts"][0]["text"], "hello Ada");
    assert_eq!(greeted["taskId"], asked["taskId"]);

    // The card's original text reached B over gossip.
    let remote = support::eventually(Duration::from_secs(10), async || {
        let r = rpc_call(&mut rb, 5, "bridge.listA2AAgents", json!({})).await;
        r["result"]["remote"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == "fx" && c["peerId"] == a.peer_id)
            .cloned()
    })
    .await
    .expect("B keeps A's gossiped card");
    assert_eq!(remote["card"]["name"], "Fixture Agent");

    // A forged card (its text changed under the agent's signature) is refused.
    let card = support::get_json(&agent.url, "/.well-known/agent-card.json").await;
    let mut forged = card.clone();
    forged["description"] = json!("a description the key never signed");
    let r = rpc_call(
        &mut ra,
        6,
        "bridge.announceA2AAgent",
        json!({"agentCard": forged, "name": "forged"}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["data"]["reason"]
            .as_str()
            .unwrap()
            .contains("does not verify"),
        "{r}"
    );
    // The same card as signed is taken.
    let r = rpc_call(
        &mut ra,
        7,
        "bridge.announceA2AAgent",
        json!({"agentCard": card, "name": "inline"}),
    )
    .await;
    assert_eq!(r["result"]["verified"], true, "{r}");

    // Withdrawn: its skills leave, an invoke is −32006.
    let r = rpc_call(&mut ra, 8, "bridge.withdrawA2AAgent", json!({"name": "fx"})).await;
    assert_eq!(r["result"]["withdrawn"], true, "{r}");
    let r = rpc_call(
        &mut ra,
        9,
        "tool.invoke",
        json!({"toolId": echo, "params": {"text": "x"}}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32006, "{r}");
}
