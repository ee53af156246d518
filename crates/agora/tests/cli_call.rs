//! `agora call`, `--batch`, `agora tools` and `agora session` against a real node: the output
//! and exit-code contract of `crates/agora/src/call.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::{Command, Output};

use serde_json::{Value, json};
use support::spawn_node;

fn agora(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agora"))
        .args(args)
        .env_remove("AGORA_RPC")
        .env_remove("AGORA_TOKEN")
        .output()
        .expect("agora runs")
}

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn call_prints_results_and_errors_by_contract() {
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_node(&dir.path().join("a"), &[], 30, &[]);
    let rpc = a.rpc.as_str();
    let created = agora(&["call", "state.createSession", "{}", "--rpc", rpc]);
    assert_eq!(created.status.code(), Some(0));
    let session = stdout_json(&created);
    let id = session["sessionId"]
        .as_str()
        .expect("a session id")
        .to_owned();
    let got = agora(&[
        "call",
        "state.getSession",
        &json!({"sessionId": id}).to_string(),
        "--rpc",
        rpc,
    ]);
    assert_eq!(got.status.code(), Some(0));
    assert_eq!(stdout_json(&got)["sessionId"], id.as_str());

    let unknown = agora(&["call", "no.such", "--rpc", rpc]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).starts_with("error -32601: "));
    assert!(unknown.stdout.is_empty());

    let bad = agora(&["call", "state.getSession", "{not json", "--rpc", rpc]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not JSON"));

    let nobody = agora(&["call", "state.createSession", "--rpc", "ws://127.0.0.1:1"]);
    assert_eq!(nobody.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&nobody.stderr).starts_with("agora: cannot connect"));

    let file = dir.path().join("batch.json");
    std::fs::write(
        &file,
        json!([{"method": "state.createSession", "params": {}}, {"method": "no.such"}]).to_string(),
    )
    .unwrap();
    let batch = agora(&["call", "--batch", file.to_str().unwrap(), "--rpc", rpc]);
    assert_eq!(batch.status.code(), Some(1));
    let answers = stdout_json(&batch);
    assert_eq!(answers.as_array().map(Vec::len), Some(2));
    assert!(answers[0]["result"]["sessionId"].is_string());
    assert_eq!(answers[1]["error"]["code"], -32601);

    let ended = agora(&["session", "end", &id, "--rpc", rpc]);
    assert_eq!(
        ended.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ended.stderr)
    );
    let unknown_id = json!({"sessionId": "sess-nope"}).to_string();
    let again = agora(&["call", "state.getSession", &unknown_id, "--rpc", rpc]);
    assert_eq!(again.status.code(), Some(1));
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.starts_with("error -32001: ") && err.contains("\ndata: {"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tools_lists_a_registered_tool_and_the_key_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let a = support::spawn_node_with_key(dir.path());
    let mut provider = support::rpc_connect_bearer(&a.rpc, support::TEST_API_KEY).await;
    let tool = support::register_tool(
        &mut provider,
        json!({"name": "cli-echo", "description": "echoes for the CLI test",
               "schema": {"type": "object"}, "capabilities": ["echo"]}),
    )
    .await;
    let rpc = a.rpc.as_str();
    let refused = agora(&["tools", "--rpc", rpc]);
    assert_ne!(refused.status.code(), Some(0), "no key, no call");
    let listed = agora(&["tools", "--rpc", rpc, "--token", support::TEST_API_KEY]);
    assert_eq!(
        listed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let table = String::from_utf8_lossy(&listed.stdout);
    assert!(
        table.contains(&tool) && table.contains("cli-echo"),
        "{table}"
    );
    let json = agora(&[
        "tools",
        "--json",
        "--rpc",
        rpc,
        "--token",
        support::TEST_API_KEY,
    ]);
    let v = stdout_json(&json);
    assert!(
        v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == tool.as_str())
    );
    let created = agora(&[
        "session",
        "create",
        "--rpc",
        rpc,
        "--token",
        support::TEST_API_KEY,
    ]);
    assert_eq!(created.status.code(), Some(0));
    assert!(stdout_json(&created)["sessionToken"].is_string());
}
