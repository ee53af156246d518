//! `agora call`, `--batch`, `agora tools` and `agora session` against a real node: the output
//! and exit-code contract of `crates/agora/src/call.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use crate::support::{self, spawn_node};

fn agora(args: &[&str]) -> Output {
    agora_with(args, &[], None)
}

/// `agora ARGS` with extra environment variables and, if given, `input` on its stdin.
fn agora_with(args: &[&str], env: &[(&str, &str)], input: Option<&str>) -> Output {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_agora"))
        .args(args)
        .env_remove("AGORA_RPC")
        .env_remove("AGORA_TOKEN")
        .env_remove("AGORA_API_KEY")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agora runs");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.unwrap_or("").as_bytes()).unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
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
    // the parameters from stdin, and the environment's URL
    let from_stdin = agora_with(
        &["call", "state.getSession", "-"],
        &[("AGORA_RPC", rpc)],
        Some(&json!({"sessionId": id}).to_string()),
    );
    assert_eq!(from_stdin.status.code(), Some(0), "{}", stderr(&from_stdin));
    assert_eq!(stdout_json(&from_stdin)["sessionId"], id.as_str());

    let unknown = agora(&["call", "no.such", "--rpc", rpc]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).starts_with("error -32601: "));
    assert!(unknown.stdout.is_empty());

    let bad = agora(&["call", "state.getSession", "{not json", "--rpc", rpc]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).starts_with("agora: the parameters are not JSON"),
        "{}",
        stderr(&bad)
    );
    assert!(bad.stdout.is_empty());
    let scalar = agora_with(
        &["call", "state.getSession", "-", "--rpc", rpc],
        &[],
        Some("42"),
    );
    assert_eq!(scalar.status.code(), Some(2));
    assert!(
        stderr(&scalar).contains("object or array"),
        "{}",
        stderr(&scalar)
    );

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
    assert_eq!(answers[0]["id"], 1);
    assert_eq!(answers[1]["error"]["code"], -32601);
    assert_eq!(answers[1]["id"], 2);
    assert!(stderr(&batch).starts_with("error: at least one call of the batch failed"));
    std::fs::write(&file, "{}").unwrap();
    let not_array = agora(&["call", "--batch", file.to_str().unwrap(), "--rpc", rpc]);
    assert_eq!(not_array.status.code(), Some(2));
    assert!(stderr(&not_array).contains("is not a JSON array"));

    let ended = agora(&["session", "end", &id, "--rpc", rpc]);
    assert_eq!(ended.status.code(), Some(0), "{}", stderr(&ended));
    assert_eq!(stdout_json(&ended)["ended"], true);
    let ended_info = agora(&[
        "call",
        "state.getSession",
        &json!({"sessionId": id}).to_string(),
        "--rpc",
        rpc,
    ]);
    assert_eq!(stdout_json(&ended_info)["status"], "ended");
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
    assert_eq!(refused.status.code(), Some(2), "no key, no call");
    assert_eq!(
        stderr(&refused).trim_end(),
        format!(
            "agora: {rpc} refused the connection (HTTP 401 Unauthorized): an Authorization: \
             Bearer <API key or session token> header is required (the agora CLI sends the key \
             given with --api-key KEY or AGORA_API_KEY)"
        )
    );
    let wrong = agora(&[
        "call",
        "tool.discover",
        "{\"query\":\"\"}",
        "--rpc",
        rpc,
        "--token",
        "nope",
    ]);
    assert_eq!(wrong.status.code(), Some(2));
    assert_eq!(
        stderr(&wrong).trim_end(),
        format!(
            "agora: {rpc} refused the connection (HTTP 401 Unauthorized): unknown API key or \
             session token (the agora CLI sends the key given with --api-key KEY or AGORA_API_KEY)"
        )
    );
    assert!(wrong.stdout.is_empty());
    let listed = agora(&["tools", "--rpc", rpc, "--api-key", support::TEST_API_KEY]);
    assert_eq!(
        listed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let table = String::from_utf8_lossy(&listed.stdout);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "ID",
            "NAME",
            "REPUTATION",
            "LATENCY_MS",
            "CAPABILITIES",
            "PEER",
            "DESCRIPTION"
        ]
    );
    let row = lines
        .find(|l| l.starts_with(&tool))
        .unwrap_or_else(|| panic!("{table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[1], "cli-echo");
    assert_eq!(cells[4], "echo");
    assert_eq!(cells[5], a.peer_id);
    assert!(row.ends_with("echoes for the CLI test"), "{row}");
    let none = agora(&[
        "tools",
        "--capability",
        "no-such-capability",
        "--rpc",
        rpc,
        "--token",
        support::TEST_API_KEY,
    ]);
    assert_eq!(none.status.code(), Some(0), "{}", stderr(&none));
    assert_eq!(String::from_utf8_lossy(&none.stdout), "no tools found\n");
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
        "--agent-name",
        "cli-agent",
        "--metadata",
        r#"{"budget": 5}"#,
        "--rpc",
        rpc,
        "--token",
        support::TEST_API_KEY,
    ]);
    assert_eq!(created.status.code(), Some(0), "{}", stderr(&created));
    let session = stdout_json(&created);
    let (id, token) = (
        session["sessionId"].as_str().unwrap(),
        session["sessionToken"].as_str().unwrap(),
    );
    // the session's token is a credential of its own, for that session's calls
    let params = json!({"sessionId": id}).to_string();
    let get = || {
        agora(&[
            "call",
            "state.getSession",
            &params,
            "--rpc",
            rpc,
            "--token",
            token,
        ])
    };
    let info = get();
    assert_eq!(info.status.code(), Some(0), "{}", stderr(&info));
    let info = stdout_json(&info);
    assert_eq!(info["agentName"], "cli-agent");
    assert_eq!(info["metadata"]["budget"], 5);
    let ended = agora(&["session", "end", id, "--rpc", rpc, "--token", token]);
    assert_eq!(ended.status.code(), Some(0), "{}", stderr(&ended));
    // an ended session's token no longer opens the face
    let after = get();
    assert_eq!(after.status.code(), Some(2), "{}", stderr(&after));
    assert!(stderr(&after).contains("HTTP 401"), "{}", stderr(&after));
    let bad_meta = agora(&["session", "create", "--metadata", "[1]", "--rpc", rpc]);
    assert_eq!(bad_meta.status.code(), Some(2));
    assert!(stderr(&bad_meta).contains("--metadata must be a JSON object"));
}
