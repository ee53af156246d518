//! The A2A bridge (Hyperspace spec §10.2; `docs/bridges.md`) against an independent A2A 1.0
//! agent (`tests/fixtures/a2a_agent.py`, Python a2a-sdk 1.3.0, signed card): announced on node
//! A, its skills discovered and invoked from node B (a completed task, an INPUT_REQUIRED
//! continuation), its card gossiped to B; a forged card signature is refused. Node B as an A2A
//! agent, driven by the Python and JS SDKs' clients (`tests/fixtures/a2a_client.{py,mjs}`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

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
    // A relative key path is taken from the configuration file's directory.
    std::fs::write(&config, "[bridge]\na2a_keys = [\"fixture-key.pub.json\"]\n").unwrap();
    let (da, db) = (dir.path().join("a"), dir.path().join("b"));
    // A's bridge methods need its API key (B has none: a keyless loopback caller is refused).
    let key_env = [("AGORA_API_KEY", support::TEST_API_KEY)];
    let a = support::spawn_node_env(
        &da,
        &[],
        30,
        &["--config", config.to_str().unwrap()],
        &key_env,
    );
    let b = support::spawn_node(&db, &[&a.p2p], 30, &[]);
    let mut ra = support::rpc_connect_bearer(&a.rpc, support::TEST_API_KEY).await;
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

    // Announcing needs the API key: B has none, and its keyless loopback caller is refused.
    let r = rpc_call(
        &mut rb,
        10,
        "bridge.announceA2AAgent",
        json!({"url": agent.url}),
    )
    .await;
    assert_eq!(r["error"]["data"]["reason"], "api-key-required", "{r}");

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

    // B as an A2A agent: its card lists the mesh's tools (A's bridged skills) and is signed;
    // the Python and JS SDKs verify it with B's public key and drive SendMessage,
    // SendStreamingMessage, GetTask and CancelTask through B, the mesh and A to the agent.
    a2a_clients_drive_the_node(&python, &b.http, dir.path(), &echo, &tool("slow")).await;

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

/// The Python and JS A2A clients against `http` (a node that can invoke `echo` and `slow`): both
/// verify the card's signature with the node's published key and see a completed task, a stream
/// (task, artifact, final status), GetTask, and a cancelled task that cannot be cancelled again;
/// a request without `A2A-Version` is −32009.
async fn a2a_clients_drive_the_node(
    python: &str,
    http: &str,
    dir: &std::path::Path,
    echo: &str,
    slow: &str,
) {
    let card = support::eventually(Duration::from_secs(10), async || {
        let card = support::get_json(http, "/.well-known/agent-card.json").await;
        let skills = card["skills"].as_array()?;
        (skills.iter().any(|s| s["id"] == echo) && skills.iter().any(|s| s["id"] == slow))
            .then_some(card)
    })
    .await
    .expect("the node's card lists the mesh's skills");
    assert_eq!(card["supportedInterfaces"][0]["url"], format!("{http}/a2a"));
    assert_eq!(card["capabilities"]["pushNotifications"], false);
    let key = dir.join("node-card-key.json");
    std::fs::write(
        &key,
        support::get_json(http, "/.well-known/agent-card-key.json")
            .await
            .to_string(),
    )
    .unwrap();
    let key = key.to_str().unwrap();

    let run = |mut cmd: std::process::Command| {
        let out = cmd.output().expect("the client runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).expect("one JSON line")
    };
    let script = |name: &str| format!("{}/../../tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let mut py = std::process::Command::new(python);
    py.arg(script("a2a_client.py"))
        .args([http, key, echo, slow]);
    let seen = run(py);
    assert_eq!(
        seen["send"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{seen}"
    );
    let result = &seen["send"]["artifacts"][0]["parts"][0]["data"];
    assert_eq!(
        result["artifacts"][0]["parts"][0]["text"], "echo: hi",
        "{seen}"
    );
    assert_eq!(seen["get"], true);
    assert_eq!(seen["listed"], true, "ListTasks by contextId: {seen}");
    assert_eq!(
        seen["stream"],
        json!(["task", "artifact_update", "status_update"])
    );
    assert_eq!(
        seen["streamFinal"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert_eq!(seen["canceled"], "TASK_STATE_CANCELED");
    assert_eq!(seen["again"], "TaskNotCancelableError");

    if support::node_peers() {
        let mut js = std::process::Command::new("node");
        js.arg(script("a2a_client.mjs"))
            .args([http, key, echo, slow])
            .current_dir(support::interop_dir());
        let seen = run(js);
        assert_eq!(seen["verified"], true, "{seen}");
        assert_eq!(seen["send"], "TASK_STATE_COMPLETED", "{seen}");
        assert!(
            seen["sendText"].as_str().unwrap().contains("echo: hi"),
            "{seen}"
        );
        assert_eq!(seen["get"], true);
        assert_eq!(
            seen["stream"],
            json!(["task", "artifactUpdate", "statusUpdate"])
        );
        assert_eq!(seen["streamFinal"], "TASK_STATE_COMPLETED");
        assert_eq!(seen["canceled"], "TASK_STATE_CANCELED");
        assert_eq!(seen["again"], "JsonRpcTaskNotCancelableError");
    }

    // The node's own skill, with the version as a query parameter: a search of the mesh's tools.
    let search = json!({"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": {
        "messageId": "m-search", "role": "ROLE_USER", "parts": [{"text": "echo"}],
        "metadata": {"org.agora-mesh/skillId": "agora.tools.search"}}}});
    let r = support::http_json(
        "POST",
        http,
        "/a2a?A2A-Version=1.0",
        Some(&search.to_string()),
    )
    .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    let found = &task["artifacts"][0]["parts"][0]["data"]["tools"];
    assert!(
        found
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["id"] == echo)),
        "{r}"
    );
    // No A2A-Version header means 0.3, which the node does not speak.
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}).to_string();
    let r = support::http_json("POST", http, "/a2a", Some(&body)).await;
    assert_eq!(r["error"]["code"], -32009, "{r}");
}
