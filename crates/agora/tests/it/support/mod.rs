//! Test harness: real `agora node` processes on 127.0.0.1 with ephemeral ports, and agents that
//! speak AGH over the node's WebSocket face. Nothing here sleeps to synchronise: every wait polls
//! a condition until a deadline.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::needless_pass_by_value
)]

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

#[path = "../../../src/http.rs"]
mod http;

pub(crate) mod cluster;
pub(crate) mod hosted;

pub(crate) type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Held by the tests that measure a node's latency or memory under load (floods in
/// `hostile_rpc` and `hostile_faces`), so they run one at a time: every module shares this
/// process, and the cores, with the others.
pub(crate) static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Unix seconds now.
pub(crate) fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A running node process.
pub(crate) struct Node {
    pub(crate) child: Child,
    pub(crate) data: PathBuf,
    pub p2p: String,
    pub(crate) agh: String,
    pub(crate) http: String,
    pub(crate) rpc: String,
    /// `agtp://127.0.0.1:PORT`.
    pub(crate) agtp: String,
    pub(crate) peer_id: String,
}

impl Node {
    /// Sends SIGTERM and waits (up to 10 s) for the node to exit; returns how it exited.
    pub(crate) async fn terminate(&mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < deadline, "node did not stop after SIGTERM");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `agora node` with its data in `data`, joining `bootstrap`.
pub(crate) fn spawn_node(
    data: &Path,
    bootstrap: &[&str],
    greet_interval: u64,
    extra: &[&str],
) -> Node {
    spawn_node_env(data, bootstrap, greet_interval, extra, &[])
}

/// [`spawn_node`] with extra environment variables.
pub(crate) fn spawn_node_env(
    data: &Path,
    bootstrap: &[&str],
    greet_interval: u64,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Node {
    spawn_at(
        Place::LOOPBACK,
        data,
        bootstrap,
        greet_interval,
        extra,
        env,
        None,
    )
}

/// The lines a node has written to stderr (its log), collected as they arrive, and whether
/// its stderr has ended (the process is gone and every line has been read).
#[derive(Clone, Default)]
pub(crate) struct Log(Arc<Mutex<Vec<String>>>, Arc<AtomicBool>);

impl Log {
    /// Whether the node's stderr has been read to its end.
    pub(crate) fn ended(&self) -> bool {
        self.1.load(Ordering::SeqCst)
    }

    /// Lines containing every one of `needles`.
    pub(crate) fn count(&self, needles: &[&str]) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|line| needles.iter().all(|n| line.contains(n)))
            .count()
    }

    /// Every line so far.
    #[allow(dead_code)]
    pub(crate) fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// [`spawn_node`] (no bootstrap) with its log collected (and passed on to our stderr).
pub(crate) fn spawn_node_logged(data: &Path, extra: &[&str]) -> (Node, Log) {
    spawn_node_logged_env(data, &[], 30, extra, &[])
}

/// [`spawn_node_env`] with its log collected (and passed on to our stderr).
pub(crate) fn spawn_node_logged_env(
    data: &Path,
    bootstrap: &[&str],
    greet_interval: u64,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Node, Log) {
    let log = Log::default();
    let node = spawn_at(
        Place::LOOPBACK,
        data,
        bootstrap,
        greet_interval,
        extra,
        env,
        Some(log.clone()),
    );
    (node, log)
}

/// Where a node runs: the command its `agora node` is started under (empty: directly; the
/// cluster's `ip netns exec <host>`) and the address its faces bind — loopback with ports the
/// system picks, or a host's own address with the default ports.
#[derive(Clone, Copy)]
pub(crate) struct Place<'a> {
    pub(crate) wrap: &'a [&'a str],
    pub(crate) ip: &'a str,
    pub(crate) default_ports: bool,
}

impl Place<'_> {
    pub(crate) const LOOPBACK: Place<'static> = Place {
        wrap: &[],
        ip: "127.0.0.1",
        default_ports: false,
    };

    fn addr(&self, port: u16) -> String {
        let port = if self.default_ports { port } else { 0 };
        format!("{}:{port}", self.ip)
    }
}

/// Starts `agora node` at `place` (see [`spawn_node`]).
pub(crate) fn spawn_at(
    place: Place<'_>,
    data: &Path,
    bootstrap: &[&str],
    greet_interval: u64,
    extra: &[&str],
    env: &[(&str, &str)],
    log: Option<Log>,
) -> Node {
    let agora = env!("CARGO_BIN_EXE_agora");
    let mut cmd = match place.wrap.split_first() {
        Some((program, args)) => {
            let mut cmd = Command::new(program);
            cmd.args(args).arg(agora);
            cmd
        }
        None => Command::new(agora),
    };
    cmd.envs(env.iter().copied());
    cmd.arg("node")
        .arg("--data")
        .arg(data)
        .args(["--agh-listen", &place.addr(4410)])
        .args(["--http-listen", &place.addr(4411)])
        .args(["--rpc-listen", &place.addr(3100)])
        .args(["--greet-interval", &greet_interval.to_string()])
        .args(extra)
        .env_remove("AGORA_CONFIG")
        .current_dir(data.parent().unwrap_or(data))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(if log.is_some() {
            Stdio::piped()
        } else {
            Stdio::inherit()
        });
    if !extra.contains(&"--p2p-listen") {
        let port = if place.default_ports { 4001 } else { 0 };
        cmd.args(["--p2p-listen", &format!("/ip4/{}/tcp/{port}", place.ip)]);
    }
    if !extra.contains(&"--agtp-listen") {
        cmd.args(["--agtp-listen", &place.addr(4480)]);
    }
    for b in bootstrap {
        cmd.args(["--bootstrap", b]);
    }
    let mut child = cmd.spawn().expect("agora node starts");
    if let (Some(log), Some(stderr)) = (log, child.stderr.take()) {
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                eprintln!("{line}");
                log.0.lock().unwrap().push(line);
            }
            log.1.store(true, Ordering::SeqCst);
        });
    }
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std_mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // AGORA_NODE_START_SECS: for nodes on large kept data directories (a redb file closed
    // uncleanly is repaired at open, minutes at 100,000 memories).
    let start_secs = std::env::var("AGORA_NODE_START_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let deadline = Instant::now() + Duration::from_secs(start_secs);
    let (mut p2p, mut agh, mut http, mut rpc, mut agtp) = (None, None, None, None, None);
    while p2p.is_none() || agh.is_none() || http.is_none() || rpc.is_none() || agtp.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("node prints its listening lines");
        let mut parts = line.splitn(4, ' ');
        if let (Some("listening"), Some("on"), Some(face), Some(addr)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        {
            match face {
                "p2p" => p2p = Some(addr.to_owned()),
                "agh" => agh = Some(addr.to_owned()),
                "http" => http = Some(addr.to_owned()),
                "rpc" => rpc = Some(addr.to_owned()),
                "agtp" => agtp = Some(addr.to_owned()),
                _ => {}
            }
        }
    }
    let p2p = p2p.unwrap();
    let peer_id = p2p.rsplit('/').next().unwrap().to_owned();
    Node {
        child,
        data: data.to_path_buf(),
        p2p,
        agh: agh.unwrap(),
        http: http.unwrap(),
        rpc: rpc.unwrap(),
        agtp: agtp.unwrap(),
        peer_id,
    }
}

/// Opens a JSON-RPC WebSocket to a node's rpc face.
pub(crate) async fn rpc_connect(url: &str) -> Ws {
    tokio_tungstenite::connect_async(url).await.unwrap().0
}

/// Connects to the JSON-RPC face at `url` presenting `token` (a session token or the API key)
/// as `Authorization: Bearer`.
pub(crate) async fn rpc_connect_bearer(url: &str, token: &str) -> Ws {
    let mut req =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(url)
            .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    tokio_tungstenite::connect_async(req).await.unwrap().0
}

/// Calls `method(params)` on `ws` and returns the whole response (frames that are not the
/// response, such as requests to a tool provider, are an error here), waiting up to 20 s.
pub(crate) async fn rpc_call(ws: &mut Ws, id: u64, method: &str, params: Value) -> Value {
    let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    ws.send(Message::Text(req.to_string().into()))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("a response in time")
            .expect("the connection is open")
            .unwrap();
        let text = match msg {
            Message::Text(text) => text,
            // The face pings long-lived connections; tungstenite answers by itself.
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("expected a text frame, got {other:?}"),
        };
        let v: Value = serde_json::from_str(text.as_str()).unwrap();
        assert_eq!(v["id"], id, "response to call {id}: {v}");
        return v;
    }
}

/// One HTTP/1.1 request on its own connection; the status (0 when nothing readable came back)
/// and the body. `Host` is `addr` unless `headers` names one.
pub(crate) async fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return (0, String::new());
    };
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    // A refusal may come (and the socket close) before the request is written.
    let _ = tokio::io::AsyncWriteExt::write_all(&mut s, head.as_bytes()).await;
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::io::AsyncReadExt::read_to_end(&mut s, &mut raw),
    )
    .await;
    let text = String::from_utf8_lossy(&raw);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Opens a WebSocket with extra upgrade headers; a refusal is its HTTP status.
pub(crate) async fn ws_with(url: &str, headers: &[(&str, &str)]) -> Result<Ws, u16> {
    let mut req =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(url)
            .unwrap();
    for (k, v) in headers {
        req.headers_mut().insert(
            tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => Err(r.status().as_u16()),
        Err(e) => panic!("upgrade to {url} failed: {e}"),
    }
}

/// Polls `f` until it returns `Some` or `timeout` passes.
pub(crate) async fn eventually<T>(
    timeout: Duration,
    mut f: impl AsyncFnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// `tool.register(params)` on `provider`, which must stay open while the tool is to exist;
/// returns the tool id.
pub(crate) async fn register_tool(provider: &mut Ws, params: Value) -> String {
    let r = rpc_call(provider, 1, "tool.register", params).await;
    r["result"]["toolId"]
        .as_str()
        .unwrap_or_else(|| panic!("tool.register answers a tool id: {r}"))
        .to_owned()
}

/// Polls `tool.discover(params)` on `client` until it lists `tool`, for up to `timeout`;
/// returns the record.
pub(crate) async fn discover_tool(
    client: &mut Ws,
    params: Value,
    tool: &str,
    timeout: Duration,
) -> Option<Value> {
    let mut id = 100;
    eventually(timeout, async || {
        id += 1;
        let r = rpc_call(client, id, "tool.discover", params.clone()).await;
        r["result"]["tools"]
            .as_array()?
            .iter()
            .find(|t| t["id"] == tool)
            .cloned()
    })
    .await
}

/// GET a JSON document from a node's HTTP API.
pub(crate) async fn get_json(base: &str, path: &str) -> Value {
    http_json("GET", base, path, None).await
}

/// One request to a node's JSON API (`base` is `http://HOST:PORT`), by the client commands'
/// [`http::exchange`]; the body as JSON, or `null`.
pub(crate) async fn http_json(method: &str, base: &str, path: &str, body: Option<&str>) -> Value {
    let req = ureq::http::Request::builder()
        .method(method)
        .uri(format!("{base}{path}"))
        .header("connection", "close")
        .body(body.unwrap_or("").to_owned())
        .unwrap();
    let (_, body) = tokio::task::spawn_blocking(move || http::exchange(req))
        .await
        .unwrap()
        .unwrap();
    body
}

/// Peer IDs present in `channel` according to a node.
pub(crate) async fn peer_ids(node_http: &str, channel: &str) -> Vec<String> {
    let v = get_json(node_http, &format!("/agh/v0/peers?channel={channel}")).await;
    v["peers"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| p["peer_id"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until node `a` lists `peer_b` and node `b` lists `peer_a` in `channel`.
pub(crate) async fn see_each_other(
    (a_http, peer_a): (&str, &str),
    (b_http, peer_b): (&str, &str),
    channel: &str,
    timeout: Duration,
) -> bool {
    eventually(timeout, async || {
        let on_a = peer_ids(a_http, channel).await;
        let on_b = peer_ids(b_http, channel).await;
        (on_a.iter().any(|p| p == peer_b) && on_b.iter().any(|p| p == peer_a)).then_some(())
    })
    .await
    .is_some()
}

/// Nodes a node is connected to.
pub(crate) async fn connected(node_http: &str) -> Vec<String> {
    let v = get_json(node_http, "/status").await;
    v["connected"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| p.as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// An agent connected to a node's AGH face.
pub(crate) struct Agent {
    pub(crate) peer_id: String,
    pub(crate) channel: String,
    ws: Ws,
    seq: u64,
}

impl Agent {
    pub(crate) async fn connect(agh_url: &str, peer_id: &str, channel: &str) -> Self {
        Self::connect_with(agh_url, peer_id, channel, &[]).await
    }

    /// [`Agent::connect`] with extra upgrade headers (an `Authorization` with the API key).
    pub(crate) async fn connect_with(
        agh_url: &str,
        peer_id: &str,
        channel: &str,
        headers: &[(&str, &str)],
    ) -> Self {
        let ws = ws_with(agh_url, headers).await.expect("ws connects");
        Self {
            peer_id: peer_id.to_owned(),
            channel: channel.to_owned(),
            ws,
            seq: 0,
        }
    }

    pub(crate) fn next_id(&mut self) -> String {
        self.seq += 1;
        format!("{}-{}-{}", self.peer_id, now(), self.seq)
    }

    /// An envelope from this agent.
    pub(crate) fn envelope(&mut self, kind: &str, to: Option<&str>, body: Value) -> Value {
        json!({
            "protocol": "agh-network/v0",
            "id": self.next_id(),
            "kind": kind,
            "channel": self.channel,
            "from": self.peer_id,
            "to": to,
            "ts": now(),
            "body": body,
            "proof": null,
        })
    }

    pub(crate) async fn send(&mut self, envelope: &Value) {
        self.ws
            .send(Message::Text(envelope.to_string().into()))
            .await
            .unwrap();
    }

    pub(crate) async fn greet(&mut self, capabilities: &[&str]) {
        let env = self.envelope(
            "greet",
            None,
            json!({"peer_card": {
                "peer_id": self.peer_id,
                "profiles_supported": ["agh-network/v0"],
                "capabilities": capabilities,
                "artifacts_supported": ["capability"],
                "trust_modes_supported": ["unverified"],
            }}),
        );
        self.send(&env).await;
    }

    /// The next frame matching `pred`, within `timeout`.
    pub(crate) async fn expect(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let msg = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .ok()??
                .ok()?;
            if let Message::Text(t) = msg {
                let v: Value = serde_json::from_str(t.as_str()).ok()?;
                if pred(&v) {
                    return Some(v);
                }
            }
        }
    }

    pub(crate) async fn close(mut self) {
        let _ = self.ws.close(None).await;
    }
}

/// A `nats-server` on 127.0.0.1 with a port of its own choosing.
/// A server a test started (`nats-server`, the embeddings fixture), killed on drop.
pub(crate) struct Server {
    child: Child,
    pub(crate) url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether something a test needs from outside the workspace (`what`: a program, or the
/// Node.js packages of `tests/interop`) is `present`. When it is not, prints one line saying so
/// and how to get it (`install`) and returns `false`, and the test returns early and passes as
/// skipped; with `AGORA_REQUIRE_EXTERNAL=1` (as `.ci/run` sets) it panics instead, so CI never
/// skips.
pub(crate) fn external(what: &str, present: bool, install: &str) -> bool {
    if present {
        return true;
    }
    assert!(
        std::env::var("AGORA_REQUIRE_EXTERNAL").as_deref() != Ok("1"),
        "{what} not found ({install}), and AGORA_REQUIRE_EXTERNAL=1 makes that a failure"
    );
    // The test harness names the thread after the test.
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let line = format!(
        "skipped: {test}: {what} not found ({install}); set AGORA_REQUIRE_EXTERNAL=1 to make this a failure\n"
    );
    // Straight to the process's stderr, in one write: the harness would capture `eprintln!` of
    // a passing test.
    let _ = std::io::stderr().write_all(line.as_bytes());
    false
}

/// Whether an executable named `program` is in a directory of `PATH`.
pub(crate) fn on_path(program: &str) -> bool {
    find_on_path(program).is_some()
}

/// The first executable named `program` in the directories of `PATH`.
pub(crate) fn find_on_path(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(program))
        .find(|file| {
            std::fs::metadata(file)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Starts `nats-server` (Debian package `nats-server`; `.ci/run` installs it), or `None` when it
/// is not installed (see [`external`]).
// The child is reaped by `Server::drop`; a panic before that is a failing test anyway.
pub(crate) fn spawn_nats() -> Option<Server> {
    spawn_nats_with(&[]).map(|n| n.server)
}

/// A `nats-server` of [`spawn_nats_with`].
pub(crate) struct Nats {
    pub(crate) server: Server,
    /// `nats://127.0.0.1:PORT` of its cluster (route) listener, when it has one.
    pub(crate) route: Option<String>,
}

/// [`spawn_nats`] with extra arguments (`--user`/`--pass`, `--auth`, `-p PORT`, `--cluster …`);
/// with `--cluster` it also waits for the route listener's port.
pub(crate) fn spawn_nats_with(args: &[&str]) -> Option<Nats> {
    if !external(
        "nats-server",
        on_path("nats-server"),
        "apt-get install nats-server",
    ) {
        return None;
    }
    let port_given = args.contains(&"-p");
    let mut child = Command::new("nats-server")
        .args(["-a", "127.0.0.1"])
        .args(if port_given {
            &[][..]
        } else {
            &["-p", "-1"][..]
        })
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nats-server runs");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std_mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let wants_route = args.contains(&"--cluster");
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut url, mut route) = (None, None);
    while url.is_none() || (wants_route && route.is_none()) {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("nats-server reports its ports");
        if let Some(addr) = line.split("Listening for client connections on ").nth(1) {
            url = Some(format!("nats://{}", addr.trim()));
        }
        if let Some(addr) = line.split("Listening for route connections on ").nth(1) {
            route = Some(format!("nats://{}", addr.trim()));
        }
    }
    Some(Nats {
        server: Server {
            child,
            url: url.unwrap(),
        },
        route,
    })
}

/// Starts `tests/fixtures/openai_server.py`, an OpenAI-compatible server (embeddings: models
/// `hash-embed`, `slow`, `short`; chat completions: `lessons`, `garbage`, `slow`; see the
/// script) on Python's `http.server`, or `None` when
/// `python3` is not installed (see [`external`]). Its `url` is the API root
/// (`http://127.0.0.1:PORT/v1`).
#[allow(clippy::zombie_processes)]
pub(crate) fn spawn_openai_server() -> Option<Server> {
    if !external("python3", on_path("python3"), "apt-get install python3") {
        return None;
    }
    let mut server = spawn_python_fixture("python3", "openai_server.py", &[]);
    server.url.push_str("/v1");
    Some(server)
}

/// Resident memory of process `pid` in bytes (`VmRSS` of `/proc/<pid>/status`), or `None` when
/// it cannot be read (the process is gone, or this is not Linux).
pub(crate) fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The API key of [`spawn_node_with_key`].
pub(crate) const TEST_API_KEY: &str = "an-api-key-of-sufficient-length";

/// A node in `dir` (as `dir/n`) whose faces need [`TEST_API_KEY`] (given by its older name,
/// `AGORA_RPC_API_KEY`).
pub(crate) fn spawn_node_with_key(dir: &Path) -> Node {
    spawn_node_env(
        &dir.join("n"),
        &[],
        30,
        &[],
        &[("AGORA_RPC_API_KEY", TEST_API_KEY)],
    )
}

/// A governance key pair for the Agent Name Service: the public JWK is written to
/// `<dir>/gov.pub.json` (for `[agtp] governance_keys`); the signing key is returned.
pub(crate) fn agtp_governance_key(dir: &Path) -> agora_agtp::signature::AnsSigningKey {
    let key = agora_node::ans::generate_key(Some("gov-test")).unwrap();
    std::fs::write(
        dir.join("gov.pub.json"),
        key.verifying_key().to_jwk().to_string(),
    )
    .unwrap();
    key
}

/// A governance-signed lifecycle request (fresh time and nonce) from `governance-platform`.
pub(crate) fn agtp_lifecycle_request(
    gov: &agora_agtp::signature::AnsSigningKey,
    t: agora_agtp::manifest::Transition,
    id: &str,
    manifest: Option<&Value>,
    reason: Option<&str>,
) -> agora_agtp::codec::Request {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).unwrap();
    let nonce: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let body = agora_agtp::governance::signed_body(
        gov,
        t,
        id,
        manifest,
        reason,
        agora_node::clock::now_ms(),
        &nonce,
        "task-gov",
    );
    agora_agtp::codec::Request::new(t.method())
        .with_header("Agent-ID", "governance-platform")
        .with_header("Authority-Scope", "discovery:register")
        .with_json_body(&body)
}

/// Serves `handler` as an AGTP host (the node's own listener, default limits) on an ephemeral
/// loopback port; returns its address and the sender that stops it.
pub(crate) async fn serve_agtp_host<H: agora_node::faces::agtp::listener::Handler>(
    handler: Arc<H>,
) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(agora_node::faces::agtp::listener::serve(
        socket,
        agora_node::faces::agtp::listener::ListenerConfig::default(),
        handler,
        async move {
            let _ = stop_rx.await;
        },
    ));
    (addr, stop_tx)
}

/// `tests/interop`: the Node.js peers (`node_modules`, after `npm ci` there) and the Python
/// peers' pins (`requirements.txt`).
pub(crate) fn interop_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop")
}

/// `node` and the Node.js peers of `tests/interop` (MCP servers and SDK, A2A JS SDK); `false`
/// (after [`external`]'s line) when either is missing.
pub(crate) fn node_peers() -> bool {
    let present = on_path("node")
        && interop_dir()
            .join("node_modules/@modelcontextprotocol")
            .is_dir();
    external(
        "node and tests/interop/node_modules",
        present,
        "Node.js >= 20, then: cd tests/interop && npm ci",
    )
}

/// The Python with the bridge tests' peers (the MCP and A2A SDKs): `AGORA_BRIDGE_PYTHON`, else
/// `python3` when it imports both; `None` (after [`external`]'s line) otherwise.
pub(crate) fn bridge_python() -> Option<String> {
    let candidate = std::env::var("AGORA_BRIDGE_PYTHON").unwrap_or_else(|_| "python3".into());
    let present = Command::new(&candidate)
        .args(["-c", "import mcp, a2a, uvicorn"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    external(
        "a Python with mcp, a2a-sdk and uvicorn",
        present,
        "python3 -m venv v && v/bin/pip install -r tests/interop/requirements.txt, then AGORA_BRIDGE_PYTHON=v/bin/python",
    )
    .then_some(candidate)
}

/// Starts `python tests/fixtures/<script> <args…>`, which prints `listening <port>` once it
/// serves on 127.0.0.1; the server's URL is `http://127.0.0.1:<port>`.
#[allow(clippy::zombie_processes)]
pub(crate) fn spawn_python_fixture(python: &str, script: &str, args: &[&str]) -> Server {
    let path = format!(
        "{}/../../tests/fixtures/{script}",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut child = Command::new(python)
        .arg(path)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the fixture's python runs");
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let port: u16 = first
        .trim()
        .strip_prefix("listening ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the fixture {script} said {first:?}"));
    Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
    }
}

/// An ES256 key for signing A2A Agent Cards: writes its private JWK to `<dir>/<kid>.key.json`
/// and its public JWK to `<dir>/<kid>.pub.json`.
pub(crate) fn a2a_card_key(dir: &Path, kid: &str) -> agora_agtp::signature::AnsSigningKey {
    let key = agora_node::ans::generate_key(Some(kid)).unwrap();
    let public = key.verifying_key().to_jwk();
    let private = agora_node::ans::private_jwk(&key);
    std::fs::write(dir.join(format!("{kid}.key.json")), private.to_string()).unwrap();
    std::fs::write(dir.join(format!("{kid}.pub.json")), public.to_string()).unwrap();
    key
}

/// The installed MiniLM model (`AGORA_MINILM_DIR`), or `None` after [`external`]'s line.
pub(crate) fn minilm_model() -> Option<PathBuf> {
    let model = std::env::var_os("AGORA_MINILM_DIR").map(PathBuf::from);
    let present = model
        .as_ref()
        .is_some_and(|m| m.join("model.safetensors").exists());
    external(
        "the MiniLM model (AGORA_MINILM_DIR)",
        present,
        "agora memory install-model --data DIR; AGORA_MINILM_DIR=DIR/models/all-minilm-l6-v2",
    )
    .then_some(model)
    .flatten()
}

/// Puts `model` where a node with data in `data` finds it (a symlink).
pub(crate) fn install_minilm(data: &Path, model: &Path) {
    std::fs::create_dir_all(data.join("models")).unwrap();
    std::os::unix::fs::symlink(model, data.join("models").join("all-minilm-l6-v2")).unwrap();
}
