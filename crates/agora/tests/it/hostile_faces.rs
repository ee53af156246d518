//! Hostile clients against the HTTP and WebSocket faces of a real node process on 127.0.0.1
//! (`agora_node::faces::serve`; `docs/node.md` "Limits against hostile clients"): connection floods, slow and idle clients, foreign origins
//! and hosts, faces beyond loopback without a key, agents that do not read, agents that greet
//! thousands of channels. Every wait polls with a deadline; the clients that trickle bytes pace
//! themselves, they do not synchronise by sleeping.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::{self, Message};

use crate::support::{HEAVY, eventually, now, request, ws_with as ws};

const KEY: &str = "a-node-key-of-sufficient-length";

/// A node process whose stderr is kept (to count its log lines).
struct Node {
    child: Child,
    /// face → announced URL (`http://…`, `ws://…`).
    faces: HashMap<String, String>,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    /// `host:port` of a face, on 127.0.0.1 (faces bound to 0.0.0.0 are reached over loopback).
    fn addr(&self, face: &str) -> String {
        let url = &self.faces[face];
        let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
        let authority = rest.split('/').next().unwrap();
        let port = authority.rsplit_once(':').unwrap().1;
        format!("127.0.0.1:{port}")
    }

    fn ws_url(&self, face: &str) -> String {
        let path = if face == "agh" { "/agh/v0" } else { "/" };
        format!("ws://{}{path}", self.addr(face))
    }

    fn log_lines(&self, needle: &str) -> Vec<String> {
        let lines = self.stderr.lock().unwrap();
        lines
            .iter()
            .filter(|l| l.contains(needle))
            .cloned()
            .collect()
    }

    fn rss_kib(&self) -> u64 {
        proc_status(self.child.id(), "RssAnon:")
    }
}

/// A `/proc/<pid>/status` figure in kB.
fn proc_status(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// The `agora node` command with every listener on 127.0.0.1 and an ephemeral port unless
/// `args` says otherwise.
fn node_command(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agora"));
    cmd.arg("node").arg("--data").arg(data);
    for (flag, default) in [
        ("--agh-listen", "127.0.0.1:0"),
        ("--http-listen", "127.0.0.1:0"),
        ("--rpc-listen", "127.0.0.1:0"),
        ("--agtp-listen", "127.0.0.1:0"),
        ("--p2p-listen", "/ip4/127.0.0.1/tcp/0"),
    ] {
        if !args.contains(&flag) {
            cmd.args([flag, default]);
        }
    }
    for var in ["AGORA_CONFIG", "AGORA_API_KEY", "AGORA_RPC_API_KEY"] {
        cmd.env_remove(var);
    }
    cmd.args(args)
        .env("AGORA_LOG", "warn,libp2p_kad=error,agora_node=info")
        .envs(env.iter().copied())
        .current_dir(data.parent().unwrap())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Starts a node and waits for its five `listening on` lines.
fn start(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Node {
    let mut child = node_command(data, args, env).spawn().unwrap();
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let err = BufReader::new(child.stderr.take().unwrap());
    let kept = Arc::clone(&stderr);
    std::thread::spawn(move || {
        for line in err.lines().map_while(Result::ok) {
            kept.lock().unwrap().push(line);
        }
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let out = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut faces = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while faces.len() < 5 {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = rx.recv_timeout(left) else {
            panic!("the node did not start: {:?}", stderr.lock().unwrap());
        };
        if let Some(rest) = line.strip_prefix("listening on ")
            && let Some((face, url)) = rest.split_once(' ')
        {
            faces.insert(face.to_owned(), url.to_owned());
        }
    }
    Node {
        child,
        faces,
        stderr,
    }
}

/// Runs a node that must refuse to start; its exit code and stderr.
fn start_fails(data: &Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let child = node_command(data, args, env).spawn().unwrap();
    let pid = child.id().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let Ok(out) = rx.recv_timeout(Duration::from_secs(20)) else {
        let _ = Command::new("kill").arg(&pid).status();
        panic!("the node started with {args:?} {env:?}");
    };
    let out = out.unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn status_json(node: &Node, headers: &[(&str, &str)]) -> Value {
    let (code, body) = request(&node.addr("http"), "GET", "/status", headers, "").await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn greet(peer: &str, channel: &str, seq: usize) -> String {
    json!({
        "protocol": "agh-network/v0",
        "id": format!("{peer}-{}-{seq}", now()),
        "kind": "greet",
        "channel": channel,
        "from": peer,
        "to": null,
        "ts": now(),
        "body": {"peer_card": {
            "peer_id": peer,
            "profiles_supported": ["agh-network/v0"],
            "capabilities": [],
            "artifacts_supported": ["capability"],
            "trust_modes_supported": ["unverified"],
        }},
        "proof": null,
    })
    .to_string()
}

fn say(peer: &str, channel: &str, seq: usize, text: &str) -> String {
    json!({
        "protocol": "agh-network/v0",
        "id": format!("{peer}-say-{}-{seq}", now()),
        "kind": "say",
        "channel": channel,
        "from": peer,
        "to": null,
        "ts": now(),
        "body": {"text": text},
        "proof": null,
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_get_503_and_the_face_serves_again_after() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir.path().join("n"), &["--max-connections", "20"], &[]);
    for face in ["http", "agh"] {
        let addr = node.addr(face);
        let mut held = Vec::new();
        for _ in 0..20 {
            held.push(TcpStream::connect(&addr).await.unwrap());
        }
        // Once the 20 are accepted, every further connection is answered 503 and closed.
        let body = eventually(Duration::from_secs(10), async || {
            let (code, body) = request(&addr, "GET", "/healthz", &[], "").await;
            (code == 503).then_some(body)
        })
        .await
        .unwrap_or_else(|| panic!("{face}: no 503 beyond 20 connections"));
        assert!(body.contains("too many connections"), "{body}");
        let flood =
            futures::future::join_all((0..40).map(|_| request(&addr, "GET", "/healthz", &[], "")))
                .await;
        // Refusals in progress are bounded by the limit too: beyond, connections are dropped.
        let refused = flood.iter().filter(|(code, _)| *code == 503).count();
        assert!(
            refused >= 20 && flood.iter().all(|(code, _)| *code == 503 || *code == 0),
            "{face}: {flood:?}"
        );
        // Each face has a limit of its own.
        if face == "agh" {
            assert_eq!(ws(&node.ws_url("agh"), &[]).await.err(), Some(503));
            assert_eq!(
                request(&node.addr("http"), "GET", "/status", &[], "")
                    .await
                    .0,
                200
            );
        } else {
            ws(&node.ws_url("agh"), &[])
                .await
                .expect("the AGH face is not full");
        }
        drop(held);
        eventually(Duration::from_secs(10), async || {
            (request(&addr, "GET", "/healthz", &[], "").await.0 != 503).then_some(())
        })
        .await
        .unwrap_or_else(|| panic!("{face}: served again once the flood is gone"));
    }
    assert_eq!(
        request(&node.addr("http"), "GET", "/healthz", &[], "")
            .await
            .0,
        200
    );
    ws(&node.ws_url("agh"), &[])
        .await
        .expect("an agent connects again");
}

/// Connects, sends `first`, then one more byte every 300 ms; how long until the node closes.
async fn trickle(addr: &str, first: &str) -> Duration {
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(first.as_bytes()).await.unwrap();
    let mut buf = [0u8; 1024];
    let mut pace = tokio::time::interval(Duration::from_millis(300));
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{addr}: still open after 10 s"
        );
        tokio::select! {
            read = s.read(&mut buf) => match read {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            },
            _ = pace.tick() => {
                if s.write_all(b"x").await.is_err() {
                    return started.elapsed();
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_and_idle_keep_alive_are_closed_within_the_header_timeout() {
    let _heavy = HEAVY.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir.path().join("n"), &["--header-timeout", "1"], &[]);
    let (http, agh, rpc) = (node.addr("http"), node.addr("agh"), node.addr("rpc"));
    let upgrade = "GET /agh/v0 HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nX-Slow: ";
    let (a, b, c) = tokio::join!(
        trickle(&http, "GET /healthz HTTP/1.1\r\nX-Slow: "),
        trickle(&agh, upgrade),
        trickle(&rpc, "GET / HTTP/1.1\r\nX-Slow: "),
    );
    // Measured 1.0007-1.0023 s on each face (three runs, 2026-11-29, 2 cores shared): the
    // header timeout itself. The upper bound of 3 s gives 2 s to a loaded runner and still fails
    // a face that lets the trickle go on (the client gives up at 10 s).
    for (face, took) in [("http", a), ("agh", b), ("rpc", c)] {
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(3),
            "{face}: a trickled request head was closed after {took:?} (header timeout 1 s)"
        );
    }
    // A keep-alive connection waiting for its next request is closed as well.
    let mut s = TcpStream::connect(&http).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let answered = Instant::now();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut raw))
        .await
        .expect("the idle keep-alive connection is closed")
        .unwrap();
    assert!(String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 200"));
    // Measured 1.0005-1.0015 s (the header timeout; three runs, 2026-11-29); the 5 s read
    // timeout above is what catches a connection never closed, this bound one closed late.
    assert!(answered.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_websockets_are_closed_and_ones_that_answer_pings_are_not() {
    let dir = tempfile::tempdir().unwrap();
    // Idle bound 2 s: the node pings every 667 ms.
    let node = start(&dir.path().join("n"), &["--ws-idle-timeout", "2"], &[]);
    let mut silent_agent = ws(&node.ws_url("agh"), &[]).await.unwrap();
    let mut silent_client = ws(&node.ws_url("rpc"), &[]).await.unwrap();
    let mut reader = ws(&node.ws_url("agh"), &[]).await.unwrap();
    // An agent that only reads (and so answers the node's pings) stays open past the bound.
    let reading = tokio::spawn(async move {
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut pings = 0;
        while let Ok(next) = tokio::time::timeout_at(until, reader.next()).await {
            match next {
                Some(Ok(Message::Ping(_))) => pings += 1,
                Some(Ok(Message::Close(frame))) => panic!("a reading agent was closed: {frame:?}"),
                None | Some(Err(_)) => panic!("a reading agent's connection ended"),
                Some(Ok(_)) => {}
            }
        }
        pings
    });
    let pings = reading.await.unwrap();
    assert!(
        pings >= 3,
        "the node pinged a quiet agent {pings} times in 5 s"
    );
    // The two that were not read from answered no ping: closed after 2 s. The agent's close
    // frame (1001) lies behind the pings; reading a ping makes the client write a pong into the
    // closed socket, so the end may show as that error instead.
    let close = tokio::time::timeout(Duration::from_secs(6), async {
        loop {
            match silent_agent.next().await {
                Some(Ok(Message::Close(frame))) => return frame,
                Some(Ok(_)) => {}
                None | Some(Err(_)) => return None,
            }
        }
    })
    .await
    .expect("the silent agent is closed");
    if let Some(frame) = close {
        assert_eq!(u16::from(frame.code), 1001, "{frame:?}");
        assert!(frame.reason.contains("idle"), "{frame:?}");
    }
    let end = tokio::time::timeout(Duration::from_secs(6), async {
        loop {
            match silent_client.next().await {
                None | Some(Err(_) | Ok(Message::Close(_))) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(end.is_ok(), "the silent JSON-RPC client is closed");
}

/// The close frame an agent gets after sending `message`.
async fn closed_with(node: &Node, message: Message) -> (u16, String) {
    let mut agent = ws(&node.ws_url("agh"), &[]).await.unwrap();
    // The node may close before the whole message is written.
    let _ = agent.send(message).await;
    loop {
        match tokio::time::timeout(Duration::from_secs(10), agent.next()).await {
            Ok(Some(Ok(Message::Close(Some(f))))) => {
                return (u16::from(f.code), f.reason.to_string());
            }
            Ok(Some(Ok(_))) => {}
            other => panic!("no close frame: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_that_break_the_websocket_protocol_get_close_codes() {
    use tungstenite::protocol::frame::Frame;
    use tungstenite::protocol::frame::coding::{Data, OpCode};
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir.path().join("n"), &[], &[]);
    let big = Message::Text("x".repeat((1 << 20) + 2048).into());
    let (code, reason) = closed_with(&node, big).await;
    assert_eq!(code, 1009, "{reason}");
    assert!(reason.contains("limit"), "{reason}");
    let not_utf8 = Frame::message(vec![0xff, 0xfe, 0x41], OpCode::Data(Data::Text), true);
    assert_eq!(closed_with(&node, Message::Frame(not_utf8)).await.0, 1007);
    let reserved = Frame::message(vec![1, 2, 3], OpCode::Data(Data::Reserved(3)), true);
    assert_eq!(closed_with(&node, Message::Frame(reserved)).await.0, 1002);
    // The face is still there for agents that keep to the protocol.
    let mut agent = ws(&node.ws_url("agh"), &[]).await.unwrap();
    agent.send(Message::Binary(vec![1].into())).await.unwrap();
    let Some(Ok(Message::Text(t))) = agent.next().await else {
        panic!("a binary frame is answered with an error frame")
    };
    assert!(t.contains("text frames"), "{t}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_origins_are_refused_on_upgrades_and_changes() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(
        &dir.path().join("n"),
        &["--allow-origin", "https://app.example"],
        &[],
    );
    let evil = [("Origin", "http://evil.example")];
    let http_ws = format!("ws://{}/status", node.addr("http"));
    for url in [node.ws_url("agh"), node.ws_url("rpc"), http_ws] {
        assert_eq!(ws(&url, &evil).await.err(), Some(403), "{url}");
    }
    let own = format!(
        "http://localhost:{}",
        node.addr("http").rsplit_once(':').unwrap().1
    );
    for origin in ["https://app.example", own.as_str()] {
        ws(&node.ws_url("agh"), &[("Origin", origin)])
            .await
            .expect(origin);
        ws(&node.ws_url("rpc"), &[("Origin", origin)])
            .await
            .expect(origin);
    }
    ws(&node.ws_url("agh"), &[])
        .await
        .expect("no Origin: not a browser");

    // A page's cross-site text/plain POST is refused before it is read.
    let http = node.addr("http");
    let line = greet("page.sess-1", "lobby", 1);
    let evil_post = [
        ("Origin", "http://evil.example"),
        ("Content-Type", "text/plain"),
    ];
    let (code, body) = request(&http, "POST", "/agh/v0/envelopes", &evil_post, &line).await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("allowed_origins"), "{body}");
    for method in ["PUT", "DELETE"] {
        let (code, _) = request(&http, method, "/agh/v0/catalogs/page.sess-1", &evil, "[]").await;
        assert_eq!(code, 403, "{method}");
    }
    assert_eq!(
        status_json(&node, &evil).await["agh"]["sent"],
        0,
        "a read is the browser's to refuse; nothing was sent"
    );
    let allowed = [("Origin", "https://app.example")];
    let (code, body) = request(&http, "POST", "/agh/v0/envelopes", &allowed, &line).await;
    assert_eq!(code, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_that_do_not_name_the_node_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(
        &dir.path().join("n"),
        &["--allow-host", "node.example"],
        &[],
    );
    let http = node.addr("http");
    let port = http.rsplit_once(':').unwrap().1;
    for host in [
        "evil.example",
        &format!("evil.example:{port}"),
        "localhost.evil.example",
    ] {
        let (code, body) = request(&http, "GET", "/status", &[("Host", host)], "").await;
        assert_eq!(code, 421, "{host}: {body}");
        assert!(body.contains("allowed_hosts"), "{body}");
    }
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        "localhost".to_owned(),
        format!("node.example:{port}"),
    ] {
        let (code, body) = request(&http, "GET", "/status", &[("Host", &host)], "").await;
        assert_eq!(code, 200, "{host}: {body}");
    }
    for face in ["agh", "rpc"] {
        assert_eq!(
            ws(&node.ws_url(face), &[("Host", "evil.example")])
                .await
                .err(),
            Some(421),
            "{face}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faces_beyond_loopback_need_the_key_which_is_checked_on_every_face() {
    let dir = tempfile::tempdir().unwrap();
    // Refused before anything is created: no data directory, exit 2, one clear line.
    for (flag, face) in [
        ("--agh-listen", "agh_listen"),
        ("--http-listen", "http_listen"),
        ("--rpc-listen", "rpc_listen"),
    ] {
        let data = dir.path().join(format!("refused-{face}"));
        let (code, stderr) = start_fails(&data, &[flag, "0.0.0.0:0"], &[]);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.starts_with("agora: configuration: api_key: "),
            "{stderr}"
        );
        assert!(stderr.contains(face), "{stderr}");
        assert!(!data.exists(), "nothing is created for {flag}");
    }
    for (args, env, key) in [
        (&["--max-connections", "0"][..], &[][..], "max_connections:"),
        (
            &[],
            &[("AGORA_ALLOWED_ORIGINS", "evil.example")][..],
            "allowed_origins:",
        ),
        (&[], &[("AGORA_API_KEY", "short")][..], "api_key:"),
    ] {
        let data = dir.path().join("refused-setting");
        let (code, stderr) = start_fails(&data, args, env);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("agora: configuration: {key}")),
            "{stderr}"
        );
        assert!(!data.exists());
    }

    // With the key the faces start beyond loopback, and every one of them wants it.
    let node = start(
        &dir.path().join("wide"),
        &["--agh-listen", "0.0.0.0:0", "--http-listen", "0.0.0.0:0"],
        &[("AGORA_API_KEY", KEY)],
    );
    assert!(node.faces["http"].contains("0.0.0.0"));
    let http = node.addr("http");
    let (code, body) = request(&http, "GET", "/status", &[], "").await;
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("Authorization: Bearer"), "{body}");
    let wrong = [("Authorization", "Bearer not-the-key-at-all")];
    assert_eq!(request(&http, "GET", "/healthz", &wrong, "").await.0, 401);
    let lower = format!("bearer {KEY}");
    assert_eq!(
        request(&http, "GET", "/status", &[("Authorization", &lower)], "")
            .await
            .0,
        200
    );
    let bearer = format!("Bearer {KEY}");
    let auth = [("Authorization", bearer.as_str())];
    assert_eq!(ws(&node.ws_url("agh"), &[]).await.err(), Some(401));
    let mut agent = ws(&node.ws_url("agh"), &auth)
        .await
        .expect("an agent with the key");
    agent
        .send(Message::Text(greet("keyed.sess-1", "lobby", 1).into()))
        .await
        .unwrap();
    assert_eq!(ws(&node.ws_url("rpc"), &[]).await.err(), Some(401));
    ws(&node.ws_url("rpc"), &auth)
        .await
        .expect("a JSON-RPC client with the key");
    ws(&node.ws_url("rpc"), &[("Authorization", &lower)])
        .await
        .expect("the scheme in any case, on the JSON-RPC face too");
    let peers = eventually(Duration::from_secs(5), async || {
        let (code, body) = request(&http, "GET", "/agh/v0/peers", &auth, "").await;
        (code == 200 && body.contains("keyed.sess-1")).then_some(())
    })
    .await;
    assert!(peers.is_some(), "the keyed agent greeted");

    // Once set, the key is needed on loopback too; public_reads opens the read-only endpoints.
    let open = start(
        &dir.path().join("open"),
        &["--public-reads"],
        &[("AGORA_API_KEY", KEY)],
    );
    let http = open.addr("http");
    for path in [
        "/healthz",
        "/status",
        "/agh/v0/peers",
        "/hyperspace/cards",
        "/openrpc.json",
    ] {
        assert_eq!(request(&http, "GET", path, &[], "").await.0, 200, "{path}");
    }
    let line = greet("anon.sess-1", "lobby", 1);
    assert_eq!(
        request(&http, "POST", "/agh/v0/envelopes", &[], &line)
            .await
            .0,
        401
    );
    assert_eq!(ws(&open.ws_url("agh"), &[]).await.err(), Some(401));
    assert_eq!(
        request(&http, "POST", "/agh/v0/envelopes", &auth, &line)
            .await
            .0,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_does_not_read_costs_few_log_lines_and_its_drops_are_counted() {
    let _heavy = HEAVY.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir.path().join("n"), &[], &[]);
    let started = Instant::now();
    let mut deaf = ws(&node.ws_url("agh"), &[]).await.unwrap();
    deaf.send(Message::Text(greet("deaf.sess-1", "flood", 1).into()))
        .await
        .unwrap();
    let (mut talk, mut replies) = ws(&node.ws_url("agh"), &[]).await.unwrap().split();
    let drain = tokio::spawn(async move { while let Some(Ok(_)) = replies.next().await {} });
    talk.send(Message::Text(greet("loud.sess-1", "flood", 1).into()))
        .await
        .unwrap();
    let http = node.addr("http");
    eventually(Duration::from_secs(10), async || {
        let (_, body) = request(&http, "GET", "/agh/v0/peers?channel=flood", &[], "").await;
        (body.contains("deaf.sess-1") && body.contains("loud.sess-1")).then_some(())
    })
    .await
    .expect("both agents greeted");
    // 4,000 says of 16 KiB: far more than the deaf agent's queue (1,024) and socket buffers.
    let text = "x".repeat(16 * 1024);
    for seq in 0..4_000 {
        talk.send(Message::Text(
            say("loud.sess-1", "flood", seq, &text).into(),
        ))
        .await
        .unwrap();
    }
    let dropped = eventually(Duration::from_secs(30), async || {
        let s = status_json(&node, &[]).await;
        let (sent, dropped) = (s["agh"]["sent"].as_u64()?, s["agh"]["dropped"].as_u64()?);
        (sent >= 4_002 && dropped > 0).then_some(dropped)
    })
    .await
    .expect("the says are handled and drops counted");
    // The deaf agent's queue is bounded (1,024 frames, 16 MiB of these), so is the node.
    // Measured 108.8 MiB (2026-11-29, dev profile, 2 cores shared) with the queue full; the
    // bound is 1.4x that. Without the bound on the queue the 4,000 says (62.5 MiB) would all be
    // held, on top of the node's idle ~60 MiB and the socket buffers.
    let rss = node.rss_kib();
    assert!(rss < 150 * 1024, "the node holds {rss} KiB under the flood");
    let lines = node.log_lines("not reading its frames");
    let allowed = 2 + started.elapsed().as_secs() / 10;
    eprintln!(
        "{dropped} frames dropped; {} log lines about it; node RSS {rss} KiB",
        lines.len()
    );
    assert!(dropped >= 1_000, "{dropped}");
    assert!(
        !lines.is_empty() && lines.len() as u64 <= allowed,
        "at most one line per 10 s: {lines:#?}"
    );
    drop(deaf);
    let summary = eventually(Duration::from_secs(10), async || {
        node.log_lines("dropped frames that were not logged").pop()
    })
    .await;
    assert!(
        summary.is_some(),
        "the disconnect says how many drops went unlogged"
    );
    drain.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_per_connection_are_capped_and_their_topics_left_after_disconnect() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir.path().join("n"), &[], &[]);
    // The settlement rounds (joined by the payments service soon after start, and rotating
    // every 90 s) are not the channels' business: not counted.
    let topics = async || {
        let s = status_json(&node, &[]).await;
        s["topics"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| {
                !t.as_str()
                    .is_some_and(|t| t.starts_with("hyperspace/settlements/"))
            })
            .count()
    };
    let baseline = topics().await;
    let (mut sink, mut frames) = ws(&node.ws_url("agh"), &[]).await.unwrap().split();
    // Refusals counted so far: the sender stays within a few hundred frames of the reader, so a
    // loaded machine never fills the node's queue for this agent (which would drop, not refuse).
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    let refusals = tokio::spawn(async move {
        let mut busy = 0;
        while busy < 5_000 - 64 {
            let Some(Ok(Message::Text(t))) = frames.next().await else {
                break;
            };
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["error"]["reason"] == "busy" {
                assert!(
                    v["error"]["detail"]
                        .as_str()
                        .unwrap()
                        .contains("max_channels"),
                    "{v}"
                );
                busy += 1;
                counted.store(busy, Ordering::Relaxed);
            }
        }
        busy
    });
    for seq in 0..5_000usize {
        if seq % 250 == 0 {
            let want = seq.saturating_sub(64 + 250);
            let caught_up = eventually(Duration::from_secs(30), async || {
                (seen.load(Ordering::Relaxed) >= want).then_some(())
            })
            .await;
            assert!(
                caught_up.is_some(),
                "refusals keep up: {want} by greet {seq}"
            );
        }
        let line = greet("hoarder.sess-1", &format!("ch-{seq}"), seq);
        sink.send(Message::Text(line.into())).await.unwrap();
    }
    let busy = tokio::time::timeout(Duration::from_secs(60), refusals)
        .await
        .expect("refusals arrive")
        .unwrap();
    assert_eq!(
        busy,
        5_000 - 64,
        "greets beyond 64 channels are refused with busy"
    );
    let s = status_json(&node, &[]).await;
    assert_eq!(s["agh"]["local_peers"], 64);
    let during = s["topics"].as_array().unwrap().len();
    assert!(during > baseline && during <= 128, "{baseline} → {during}");
    drop(sink);
    let left = eventually(Duration::from_secs(20), async || {
        let t = topics().await;
        (t <= baseline).then_some(t)
    })
    .await;
    assert!(
        left.is_some(),
        "the node leaves the channels' topics: baseline {baseline}, {} now",
        topics().await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_idle_connections_is_bounded_and_its_memory_comes_back() {
    let _heavy = HEAVY.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir.path().join("n"), &[], &[]);
    let pid = node.child.id();
    let http = node.addr("http");
    let fds = || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count()
    };
    let (fds_before, before, vm_before) = (fds(), node.rss_kib(), proc_status(pid, "VmRSS:"));
    let mut held = Vec::new();
    for _ in 0..2_000 {
        held.push(TcpStream::connect(&http).await.unwrap());
    }
    // Default limit: 1,024 are served (idle), the rest answered 503.
    let answers = futures::future::join_all(held.iter_mut().map(async |s| {
        let mut buf = [0u8; 16];
        matches!(
            tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf)).await,
            Ok(Ok(n)) if buf[..n].starts_with(b"HTTP/1.1 503")
        )
    }))
    .await;
    let refused = answers.iter().filter(|r| **r).count();
    let (during, vm_during) = (node.rss_kib(), proc_status(pid, "VmRSS:"));
    let fds_during = fds();
    drop(held);
    let after = eventually(Duration::from_secs(40), async || {
        let rss = node.rss_kib();
        (fds() <= fds_before + 2 && rss <= before + (during.saturating_sub(before)) / 4 + 1024)
            .then_some(rss)
    })
    .await;
    eprintln!(
        "2,000 idle connections: {refused} refused with 503; RssAnon {before} kB before, \
         {during} kB during ({fds_during} fds), {} kB after; VmRSS {vm_before} kB before, \
         {vm_during} kB during, {} kB after",
        after.map_or_else(|| node.rss_kib().to_string(), |r| r.to_string()),
        proc_status(pid, "VmRSS:")
    );
    assert!(
        (2_000 - 1_024 - 50..=2_000 - 1_024).contains(&refused),
        "{refused}"
    );
    assert!(fds_during < fds_before + 1_024 + 100, "{fds_during}");
    assert!(
        after.is_some(),
        "memory comes back after the connections close"
    );
}

/// Samples `field` of `/proc/<pid>/status` every 20 ms until dropped; the peak in kB.
struct Peak {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Peak {
    fn watch(pid: u32, field: &'static str) -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            let tick = crossbeam_tick();
            while !flag.load(Ordering::SeqCst) {
                peak = peak.max(proc_status(pid, field));
                let _ = tick.recv_timeout(Duration::from_millis(20));
            }
            peak
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    fn end(mut self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().map_or(0, |t| t.join().unwrap())
    }
}

/// A channel nothing is ever sent on: `recv_timeout` on it paces the sampler without sleeping.
fn crossbeam_tick() -> std::sync::mpsc::Receiver<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::mem::forget(tx);
    rx
}

/// A client sending frames of the largest size each face takes (1 MiB: AGH envelopes over the
/// WebSocket and HTTP, JSON-RPC requests, AGTP requests), as fast as it can, holds the node under 200 MiB
/// (`RssAnon`), and the memory comes back once it disconnects. Measured (dev profile, two
/// cores): peaks of 90 MiB (AGH, 3,000 frames), 90 MiB (JSON-RPC), 48 MiB (HTTP) from 26 MiB
/// idle, back to 42 MiB within the 30 s. The bound on the AGH face is `agh::BYTES_IN_FLIGHT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maximum_size_frames_as_fast_as_possible_hold_the_node_to_a_bound() {
    /// Frames per face: each a MiB, far beyond every queue's bound.
    const FRAMES: usize = 1_000;
    let _heavy = HEAVY.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir.path().join("n"), &[], &[]);
    let pid = node.child.id();
    let idle = node.rss_kib();
    let mut report = Vec::new();

    // AGH: one agent, says of nearly 1 MiB (the envelope limit).
    let peak = Peak::watch(pid, "RssAnon:");
    let started = Instant::now();
    {
        let (mut talk, mut replies) = ws(&node.ws_url("agh"), &[]).await.unwrap().split();
        let drain = tokio::spawn(async move { while let Some(Ok(_)) = replies.next().await {} });
        talk.send(Message::Text(greet("big.sess-1", "big", 1).into()))
            .await
            .unwrap();
        // One template, a fresh id per frame: the client spends its time sending.
        let template = say("big.sess-1", "big", 0, &"y".repeat((1 << 20) - 400));
        let (head, tail) = template.split_once("-say-").unwrap();
        for seq in 0..FRAMES {
            let frame = format!("{head}-say-{seq}x{tail}");
            if talk.send(Message::Text(frame.into())).await.is_err() {
                break;
            }
        }
        let _ = talk.close().await;
        drain.abort();
    }
    report.push(("agh", started.elapsed(), peak.end()));

    // JSON-RPC: requests of nearly 1 MiB each.
    let peak = Peak::watch(pid, "RssAnon:");
    let started = Instant::now();
    {
        let (mut rpc, mut replies) = ws(&node.ws_url("rpc"), &[]).await.unwrap().split();
        let drain = tokio::spawn(async move { while let Some(Ok(_)) = replies.next().await {} });
        let pad = "z".repeat((1 << 20) - 200);
        let tail = format!(r#","method":"state.getSession","params":{{"sessionId":"{pad}"}}}}"#);
        for id in 0..FRAMES {
            let req = format!(r#"{{"jsonrpc":"2.0","id":{id}{tail}"#);
            if rpc.send(Message::Text(req.into())).await.is_err() {
                break;
            }
        }
        let _ = rpc.close().await;
        drain.abort();
    }
    report.push(("rpc", started.elapsed(), peak.end()));

    // HTTP: envelope posts of nearly 1 MiB, one connection after another.
    let peak = Peak::watch(pid, "RssAnon:");
    let started = Instant::now();
    let http = node.addr("http");
    let body = say("post.sess-1", "big", 0, &"w".repeat((1 << 20) - 400));
    for _ in 0..FRAMES / 4 {
        let json = [("Content-Type", "application/json")];
        let _ = request(&http, "POST", "/agh/v0/envelopes", &json, &body).await;
    }
    report.push(("http", started.elapsed(), peak.end()));

    // AGTP: DESCRIBE requests with bodies of nearly 1 MiB (the codec's limit), written back to
    // back on one connection while the answers are drained; a connection the listener closes
    // (after a refusal) is opened again.
    let peak = Peak::watch(pid, "RssAnon:");
    let started = Instant::now();
    let agtp = node.addr("agtp");
    let body = json!({"pad": "v".repeat((1 << 20) - 100)});
    let frame = agora_agtp::codec::Request::new("DESCRIBE")
        .with_header("Agent-ID", "agent-big")
        .with_json_body(&body)
        .encode();
    let (mut sent, mut answered) = (0, 0);
    while sent < FRAMES {
        let Ok(stream) = TcpStream::connect(&agtp).await else {
            break;
        };
        let (mut rx, mut tx) = stream.into_split();
        // Counts the answers' status lines (a line may straddle two reads).
        let drain = tokio::spawn(async move {
            let (mut buf, mut seen, mut answers) = (vec![0u8; 64 * 1024], Vec::new(), 0);
            while let Ok(n) = rx.read(&mut buf).await
                && n > 0
            {
                seen.extend_from_slice(&buf[..n]);
                answers += seen.windows(9).filter(|w| w == b"AGTP/1.0 ").count();
                seen.drain(..seen.len().saturating_sub(8));
            }
            answers
        });
        while sent < FRAMES {
            sent += 1;
            if tx.write_all(&frame).await.is_err() {
                break;
            }
        }
        drop(tx);
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(10), drain).await {
            answered += n;
        }
    }
    eprintln!("large frames on agtp: {answered} of {sent} requests answered");
    assert!(
        answered >= FRAMES / 2,
        "the name server answered {answered} of {sent}"
    );
    report.push(("agtp", started.elapsed(), peak.end()));

    for (face, took, peak) in &report {
        eprintln!(
            "large frames on {face}: {took:?}, peak RssAnon {} MiB (idle {} MiB)",
            peak / 1024,
            idle / 1024
        );
        assert!(*peak < 200 * 1024, "{face}: the node held {peak} KiB");
    }
    // jemalloc's background thread gives the freed pages back (10 s decay).
    let after = eventually(Duration::from_secs(30), async || {
        let rss = node.rss_kib();
        (rss < idle + 30 * 1024).then_some(rss)
    })
    .await;
    assert!(
        after.is_some(),
        "the memory comes back: {} KiB, idle {idle} KiB",
        node.rss_kib()
    );
}
