//! A newcomer at the wrong address: every face answers a client speaking another face's
//! protocol with one line naming the right face and its address; the CLI gives up at once on a
//! face that is not JSON-RPC; a port in use suggests port 0; `--ephemeral-ports` starts a second
//! node next to a first; `agora status` shows every face and the embedder.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::support::{self, spawn_node};

/// One raw HTTP/1.1 exchange with `addr` (`host:port`); the whole answer as text.
fn raw_http(addr: &str, request: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn host_of(url: &str) -> &str {
    let rest = url.split("://").nth(1).unwrap();
    rest.split('/').next().unwrap()
}

/// The first text frame a WebSocket at `url` answers to `text`.
async fn ws_answer(url: &str, text: &str) -> Value {
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    ws.send(Message::Text(text.to_owned().into()))
        .await
        .unwrap();
    let deadline = Duration::from_secs(10);
    loop {
        let msg = tokio::time::timeout(deadline, ws.next())
            .await
            .expect("an answer")
            .unwrap()
            .unwrap();
        if let Message::Text(t) = msg {
            return serde_json::from_str(t.as_str()).unwrap();
        }
    }
}

fn agora(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_agora"))
        .args(args)
        .env_remove("AGORA_RPC")
        .env_remove("AGORA_NODE")
        .env_remove("AGORA_TOKEN")
        .env_remove("AGORA_API_KEY")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_face_names_the_right_one_to_a_client_at_the_wrong_one() {
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("n"), &[], 30, &[]);

    // JSON-RPC to the AGH face: a JSON-RPC error naming the JSON-RPC face.
    let request = json!({"jsonrpc": "2.0", "id": 7, "method": "state.createSession", "params": {}});
    let r = ws_answer(&node.agh, &request.to_string()).await;
    assert_eq!(r["id"], 7, "{r}");
    assert_eq!(r["error"]["code"], -32600, "{r}");
    let line = r["error"]["message"].as_str().unwrap();
    assert!(
        line.contains("AGH face") && line.ends_with(&node.rpc),
        "{line}"
    );

    // An AGH envelope to the JSON-RPC face: one line naming the AGH face.
    let envelope = json!({"id": "e1", "kind": "say", "channel": "lobby", "from": node.peer_id,
                          "ts": 1, "body": {"text": "hi"}});
    let r = ws_answer(&node.rpc, &envelope.to_string()).await;
    let line = r["error"]["message"].as_str().unwrap();
    assert!(
        line.contains("JSON-RPC face") && line.ends_with(&node.agh),
        "{line}"
    );

    // Plain HTTP to the WebSocket faces: 426 naming the HTTP API.
    for (url, face) in [(&node.rpc, "JSON-RPC"), (&node.agh, "AGH")] {
        let host = host_of(url);
        for request in [
            format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
            format!("GET /agh/v0 HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
            format!(
                "POST / HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
                 Content-Length: 2\r\nConnection: close\r\n\r\n{{}}"
            ),
        ] {
            let answer = raw_http(host, &request);
            assert!(answer.starts_with("HTTP/1.1 426"), "{face}: {answer}");
            assert!(
                answer.contains(&format!("this is the {face} face")) && answer.contains(&node.http),
                "{face}: {answer}"
            );
        }
    }

    // A WebSocket or JSON-RPC client at the HTTP API: 400 naming the WebSocket faces.
    let host = host_of(&node.http);
    let post = format!(
        "POST / HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: \
         {}\r\nConnection: close\r\n\r\n{request}",
        request.to_string().len()
    );
    let answer = raw_http(host, &post);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        answer.contains(&node.rpc) && answer.contains(&node.agh),
        "{answer}"
    );
    let err = tokio_tungstenite::connect_async(format!("ws://{host}/"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("400"), "{err}");
    let answer = raw_http(
        host,
        &format!("GET /nowhere HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    );
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert!(answer.contains("/nowhere"), "{answer}");

    // HTTP to the AGTP face: the AGTP 400 of the drafts, its message naming the HTTP API.
    let agtp = host_of(&node.agtp);
    let answer = raw_http(
        agtp,
        &format!("GET / HTTP/1.1\r\nHost: {agtp}\r\nConnection: close\r\n\r\n"),
    );
    assert!(answer.starts_with("AGTP/1.0 400"), "{answer}");
    assert!(answer.contains("invalid-wire-format"), "{answer}");
    assert!(
        answer.contains("AGTP face") && answer.contains(&node.http),
        "{answer}"
    );

    // `agora call` at the AGH face gives up at once, naming the JSON-RPC face's line.
    let started = Instant::now();
    let out = agora(&["call", "state.createSession", "{}", "--rpc", &node.agh]);
    assert!(started.elapsed() < Duration::from_secs(10), "no 60 s wait");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains(&node.rpc), "{said}");

    // `agora status` shows every face, the wallet and the embedder.
    let out = agora(&["status", "--node", &node.http]);
    assert!(out.status.success(), "{out:?}");
    let table = String::from_utf8_lossy(&out.stdout);
    for url in [&node.agh, &node.rpc, &node.http, &node.agtp] {
        assert!(table.contains(url.as_str()), "{url}: {table}");
    }
    for field in ["mcp face", "a2a face", "wallet", "embedder"] {
        assert!(table.contains(field), "{field}: {table}");
    }
    // Without a node there: what to do, not just "connection refused".
    let out = agora(&["status", "--node", "http://127.0.0.1:9"]);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("--node") && said.contains("agora node"),
        "{said}"
    );

    // A second node on the first's ports fails before writing anything, and says port 0.
    let second = dir.path().join("second");
    let out = Command::new(env!("CARGO_BIN_EXE_agora"))
        .args(["node", "--data"])
        .arg(&second)
        .args(["--rpc-listen", host_of(&node.rpc)])
        .args([
            "--agh-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
        ])
        .args(["--agtp-listen", "127.0.0.1:0"])
        .args(["--p2p-listen", "/ip4/127.0.0.1/tcp/0"])
        .env_remove("AGORA_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("--rpc-listen")
            && said.contains("port 0")
            && said.contains("--ephemeral-ports"),
        "{said}"
    );
    let written: Vec<_> = std::fs::read_dir(&second)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(written.is_empty(), "nothing written: {written:?}");

    // `--ephemeral-ports`: the second node, next to the first with every default address taken
    // by the first's ports, starts and joins it.
    let mut child = Command::new(env!("CARGO_BIN_EXE_agora"))
        .args(["node", "--ephemeral-ports", "--data"])
        .arg(&second)
        .args([
            "--rpc-listen",
            host_of(&node.rpc),
            "--agh-listen",
            host_of(&node.agh),
        ])
        .args(["--http-listen", host_of(&node.http), "--agtp-listen", agtp])
        .args(["--bootstrap", &node.p2p])
        .env_remove("AGORA_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut http = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(url) = line.strip_prefix("listening on http ") {
            http = Some(url.to_owned());
        }
        if line.starts_with("listening on agtp ") {
            break;
        }
    }
    let http = http.expect("the second node's http face");
    assert_ne!(http, node.http);
    let peer = node.peer_id.clone();
    let joined = support::eventually(Duration::from_secs(20), async || {
        support::connected(&http)
            .await
            .contains(&peer)
            .then_some(())
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
    assert!(joined.is_some(), "the second node joins the first");
}
