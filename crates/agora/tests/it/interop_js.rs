//! Interop with an implementation that is not ours: js-libp2p 3 + `@libp2p/gossipsub` 17 peers
//! (StrictSign, the js default) driven through `tests/interop/peer.mjs`, against real `agora node`
//! processes, all on 127.0.0.1. The js side signs and checks Hyperspace envelopes with code
//! written from `docs/hyperspace-wire.md` (`tests/interop/envelope.mjs`), not from ours.
//!
//! Needs `node` and `tests/interop/node_modules` (`npm ci` there); without them every test here
//! says so on one line and passes, unless `AGORA_REQUIRE_EXTERNAL=1` (see `support::external`).
//! `docs/interop.md` says how to run it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, VecDeque};
use std::io::{BufRead, BufReader, Write as _};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::support::{
    self, Node, Ws, discover_tool, eventually, external, get_json, on_path, register_tool,
    rpc_connect, spawn_node,
};

/// The task topic the relay checks use.
const TASKS: &str = "hyperspace/tasks/web-research";
/// The application limit on gossipsub message data: 1 MiB + 4 KiB.
const APP_LIMIT: usize = (1 << 20) + 4096;

fn interop_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop")
}

/// Whether Node.js and the js packages are there (else the test is skipped, see
/// [`support::external`]).
fn js_available() -> bool {
    external("node", on_path("node"), "apt-get install nodejs npm")
        && external(
            "tests/interop/node_modules",
            interop_dir().join("node_modules").is_dir(),
            "cd tests/interop && npm ci",
        )
}

/// A js peer process: commands go to its stdin, events come from its stdout (one JSON line each).
struct JsPeer {
    child: Child,
    stdin: ChildStdin,
    events: mpsc::Receiver<Value>,
    /// Events read while waiting for something else, oldest first.
    backlog: VecDeque<Value>,
    next_id: u64,
    peer_id: String,
}

impl Drop for JsPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl JsPeer {
    /// Starts a peer listening on 127.0.0.1 and waits for its `listening` event.
    async fn spawn() -> Self {
        Self::spawn_with(&[]).await
    }

    /// A js peer started with `args` (see `peer.mjs`).
    async fn spawn_with(args: &[&str]) -> Self {
        let mut child = Command::new("node")
            .arg("peer.mjs")
            .args(args)
            .current_dir(interop_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node peer.mjs starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, events) = mpsc::channel(4096);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let event = serde_json::from_str(&line)
                    .unwrap_or_else(|_| json!({"event": "unparsed", "line": line}));
                if tx.blocking_send(event).is_err() {
                    break;
                }
            }
        });
        let mut peer = Self {
            child,
            stdin,
            events,
            backlog: VecDeque::new(),
            next_id: 0,
            peer_id: String::new(),
        };
        let listening = peer
            .expect(Duration::from_secs(30), |e| e["event"] == "listening")
            .await
            .expect("the js peer starts listening");
        peer.peer_id = listening["peerId"].as_str().unwrap().to_owned();
        peer
    }

    /// The next event matching `pred` (earlier unmatched events first), within `timeout`.
    async fn expect(&mut self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Option<Value> {
        if let Some(i) = self.backlog.iter().position(&pred) {
            return self.backlog.remove(i);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let event = tokio::time::timeout_at(deadline, self.events.recv())
                .await
                .ok()??;
            if pred(&event) {
                return Some(event);
            }
            self.backlog.push_back(event);
        }
    }

    /// Events read so far (not consumed) matching `pred`, for failure messages.
    async fn seen(&mut self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        while let Ok(event) = self.events.try_recv() {
            self.backlog.push_back(event);
        }
        self.backlog.iter().filter(|e| pred(e)).cloned().collect()
    }

    /// Sends `cmd` and returns the event answering it; an `error` answer is `Err(message)`.
    async fn try_call(&mut self, mut cmd: Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        cmd["id"] = json!(id);
        let mut line = cmd.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
        let answer = self
            .expect(Duration::from_secs(60), |e| e["id"] == id)
            .await
            .unwrap_or_else(|| panic!("the js peer answers {cmd}"));
        if answer["event"] == "error" {
            Err(answer["message"].as_str().unwrap_or_default().to_owned())
        } else {
            Ok(answer)
        }
    }

    /// [`Self::try_call`] that must succeed.
    async fn call(&mut self, cmd: Value) -> Value {
        let what = cmd.to_string();
        self.try_call(cmd)
            .await
            .unwrap_or_else(|e| panic!("js command {what} failed: {e}"))
    }

    async fn subscribe(&mut self, topics: &[String]) {
        self.call(json!({"cmd": "subscribe", "topics": topics}))
            .await;
    }

    async fn dial(&mut self, node: &Node) {
        let dialed = self.call(json!({"cmd": "dial", "addr": node.p2p})).await;
        assert_eq!(dialed["peer"], node.peer_id.as_str());
    }

    /// The peers this one is connected to.
    async fn connections(&mut self) -> BTreeSet<String> {
        let r = self.call(json!({"cmd": "connections"})).await;
        strings(&r["peers"])
    }

    /// Waits until `peer` is among this peer's known subscribers (`list` = `"subscribers"`) or
    /// mesh peers (`list` = `"mesh"`) of `topic`.
    async fn wait_for(&mut self, list: &str, topic: &str, peer: &str, timeout: Duration) -> bool {
        eventually(timeout, async || {
            let r = self.call(json!({"cmd": list, "topic": topic})).await;
            strings(&r["peers"]).contains(peer).then_some(())
        })
        .await
        .is_some()
    }

    /// Publishes an envelope on `topic` (`size`: its total bytes) and returns its nonce.
    async fn publish_envelope(&mut self, topic: &str, size: Option<usize>) -> String {
        let r = self
            .call(json!({"cmd": "publish-envelope", "topic": topic, "size": size}))
            .await;
        r["nonce"].as_str().unwrap().to_owned()
    }

    /// Waits for the envelope with `nonce` on `topic`, checked by the js envelope code; returns
    /// the `verified` event.
    async fn receive(&mut self, topic: &str, nonce: &str, timeout: Duration) -> Option<Value> {
        self.expect(timeout, |e| {
            e["event"] == "verified" && e["topic"] == topic && e["nonce"] == nonce
        })
        .await
    }
}

fn strings(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A node and `n` js peers, each connected only to it and subscribed to `topic`, each knowing
/// that the node takes `topic` too (the node must join the topic of its neighbours to relay it).
/// With `n` up to the node's mesh degree (4) every peer also waits until the node is in its mesh
/// for the topic: gossipsub forwards only to mesh peers, and a peer that subscribed a moment ago
/// joins the node's mesh at the next heartbeat, so a message relayed before then never reaches it
/// (gossip about it already went out). Beyond the mesh degree a node prunes some neighbours, which
/// then get messages by gossip, so larger stars wait for the subscription only.
async fn star(dir: &std::path::Path, n: usize, topic: &str) -> (Node, Vec<JsPeer>) {
    let node = spawn_node(&dir.join("a"), &[], 30, &[]);
    let mut peers = Vec::new();
    for _ in 0..n {
        let mut js = JsPeer::spawn().await;
        js.subscribe(&[topic.to_owned()]).await;
        js.dial(&node).await;
        peers.push(js);
    }
    for js in &mut peers {
        assert!(
            js.wait_for("subscribers", topic, &node.peer_id, Duration::from_secs(20))
                .await,
            "the Agora node subscribes to {topic}, which its js neighbour {} uses (it must, to \
             relay it)",
            js.peer_id
        );
        if n <= 4 {
            assert!(
                js.wait_for("mesh", topic, &node.peer_id, Duration::from_secs(20))
                    .await,
                "the Agora node joins js {}'s mesh for {topic}",
                js.peer_id
            );
        }
        assert_eq!(
            js.connections().await,
            BTreeSet::from([node.peer_id.clone()]),
            "each js peer is connected only to the Agora node"
        );
    }
    (node, peers)
}

/// `from` publishes an envelope of `size` bytes on `topic` that `to` must receive, verified.
async fn relayed(from: &mut JsPeer, to: &mut JsPeer, topic: &str, size: Option<usize>) {
    let published = from
        .call(json!({"cmd": "publish-envelope", "topic": topic, "size": size}))
        .await;
    let nonce = published["nonce"].as_str().unwrap().to_owned();
    let Some(got) = to.receive(topic, &nonce, Duration::from_secs(20)).await else {
        // What each side saw, for the failure report.
        let sent_to = strings(&published["recipients"]);
        let mesh = to.call(json!({"cmd": "mesh", "topic": topic})).await;
        let subscribers = to.call(json!({"cmd": "subscribers", "topic": topic})).await;
        panic!(
            "an envelope of {} bytes from js {} on {topic} reaches js {} through Agora \
             (the publisher sent it to {sent_to:?}; the receiver's mesh: {}, its subscribers: {})",
            size.map_or_else(|| "a few".to_owned(), |s| s.to_string()),
            from.peer_id,
            to.peer_id,
            mesh["peers"],
            subscribers["peers"],
        )
    };
    assert_eq!(
        got["ok"], true,
        "the envelope verifies at the receiver: {got}"
    );
    assert_eq!(got["from"], from.peer_id.as_str());
}

/// The node's `/status` `gossip` object (refusal counters and the topic budget).
async fn gossip_status(node: &Node) -> Value {
    get_json(&node.http, "/status").await["gossip"].clone()
}

/// Waits until the node's `/status` counts at least one refusal of `reason`.
async fn refused_at_least_once(node: &Node, reason: &str) {
    let counted = eventually(Duration::from_secs(10), async || {
        let n = gossip_status(node).await["refused"][reason].as_u64()?;
        (n >= 1).then_some(())
    })
    .await;
    assert!(
        counted.is_some(),
        "GET /status counts the refusal as gossip.refused.{reason} >= 1; gossip: {}",
        gossip_status(node).await
    );
}

/// The node's topic budget holds: `topic_budget.topics <= topic_budget.max_topics`.
async fn within_topic_budget(node: &Node) {
    let gossip = gossip_status(node).await;
    let budget = &gossip["topic_budget"];
    let (Some(topics), Some(max)) = (budget["topics"].as_u64(), budget["max_topics"].as_u64())
    else {
        panic!("GET /status has gossip.topic_budget.{{topics, max_topics}}; gossip: {gossip}")
    };
    assert!(topics <= max, "topic budget exceeded: {budget}");
}

/// Registers a tool with one capability tag on `provider`.
async fn register(provider: &mut Ws, name: &str, capability: &str) -> String {
    register_tool(
        provider,
        json!({
            "name": name,
            "description": format!("{name}, for the interop test"),
            "schema": {"type": "object"},
            "capabilities": [capability]
        }),
    )
    .await
}

/// Polls `tool.discover` on `client` for `capability` until it lists `tool`; returns the record.
async fn discover(client: &mut Ws, capability: &str, tool: &str) -> Option<Value> {
    let params = json!({"query": capability, "capabilities": [capability]});
    discover_tool(client, params, tool, Duration::from_secs(30)).await
}

/// The js envelope code agrees with the envelope v2 vectors (an independent signer's and the
/// golden/tamper cases), so the checks below test Agora against the documented wire.
#[test]
fn js_envelope_code_passes_the_vectors() {
    if !external("node", on_path("node"), "apt-get install nodejs npm") {
        return;
    }
    let out = Command::new("node")
        .arg("vectors.mjs")
        .current_dir(interop_dir())
        .output()
        .expect("node vectors.mjs runs");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// 1. Capability cards both ways: a js card is found by `tool.discover` on Agora, and Agora's
///    card reaches a js peer, verifies there and lists the registered tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capability_cards_cross_both_ways() {
    if !js_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("a"), &[], 30, &[]);

    // (a) js → Agora.
    let mut js = JsPeer::spawn().await;
    let own = format!("hyperspace/capabilities/{}", js.peer_id);
    js.subscribe(std::slice::from_ref(&own)).await;
    js.dial(&node).await;
    assert!(
        js.wait_for("subscribers", &own, &node.peer_id, Duration::from_secs(20))
            .await,
        "Agora subscribes to the capabilities topic of its js neighbour"
    );
    js.call(json!({"cmd": "card", "tools": [{
        "id": "js-tool-1",
        "name": "js-summarise",
        "description": "Summarise a page (a js peer's tool)",
        "capabilities": ["jssummarise"],
    }]}))
    .await;
    let mut client = rpc_connect(&node.rpc).await;
    let found = discover(&mut client, "jssummarise", "js-tool-1")
        .await
        .expect("tool.discover on Agora finds the tool of the js peer's card");
    assert_eq!(found["peerId"], js.peer_id.as_str());
    assert_eq!(found["name"], "js-summarise");

    // (b) Agora → js.
    let mut provider = rpc_connect(&node.rpc).await;
    let tool = register(&mut provider, "agora-translate", "agoratranslate").await;
    let mut js2 = JsPeer::spawn().await;
    let agora_cards = format!("hyperspace/capabilities/{}", node.peer_id);
    js2.subscribe(std::slice::from_ref(&agora_cards)).await;
    js2.dial(&node).await;
    let card = js2
        .expect(Duration::from_secs(30), |e| {
            e["event"] == "verified"
                && e["topic"] == agora_cards.as_str()
                && e["ok"] == true
                && e["d"]["card"]["tools"]
                    .as_array()
                    .is_some_and(|t| t.iter().any(|t| t["id"] == tool.as_str()))
        })
        .await;
    if card.is_none() {
        let seen = js2
            .seen(|e| e["event"] == "verified" && e["topic"] == agora_cards.as_str())
            .await;
        panic!(
            "Agora's card reaches the js peer, verifies by the documented rules and lists \
             {tool}; envelopes seen on {agora_cards}: {seen:?}"
        );
    }
    let card = card.unwrap();
    assert_eq!(card["from"], node.peer_id.as_str());
    assert_eq!(card["d"]["card"]["peerId"], node.peer_id.as_str());

    // The gossipsub message id js computed for Agora's message is the one Agora computes, so
    // IHAVE/IWANT refer to the same messages on both sides (docs/hyperspace-wire.md).
    let msg_id = card["msgId"].as_str().unwrap().to_owned();
    let message = js2
        .seen(|e| e["event"] == "message" && e["msgId"] == msg_id.as_str())
        .await;
    let seqno: u64 = message[0]["seqno"].as_str().unwrap().parse().unwrap();
    let publisher = agora_hyperspace::peer_id::base58_decode(&node.peer_id).unwrap();
    use base64::Engine as _;
    assert_eq!(
        base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(&msg_id)
            .unwrap(),
        agora_hyperspace::peer_id::gossip_message_id(&publisher, seqno),
        "js's message id for Agora's card is Agora's own"
    );
    drop(provider);
}

/// A js node that runs no ping service still answers nothing to Agora's ping, but its connection
/// monitor pings Agora (here every 300 ms instead of every 10 s): Agora keeps answering, so the
/// connection stays up (`agora_node::mesh::pings`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_js_peer_without_ping_stays_connected() {
    if !js_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("a"), &[], 30, &[]);
    let mut js = JsPeer::spawn_with(&["--no-ping", "--monitor-ms", "300"]).await;
    js.dial(&node).await;
    // Twenty monitor rounds: each is a ping that must be answered.
    let until = tokio::time::Instant::now() + Duration::from_secs(6);
    while tokio::time::Instant::now() < until {
        assert_eq!(
            js.connections().await,
            BTreeSet::from([node.peer_id.clone()]),
            "the js peer stays connected to the Agora node"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// 2. Two js peers that each know only the Agora node exchange envelopes on a task topic through
///    it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_envelopes_relay_from_js_through_agora_to_js() {
    if !js_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_node, mut js) = star(dir.path(), 2, TASKS).await;
    let (a, b) = js.split_at_mut(1);
    for _ in 0..3 {
        relayed(&mut a[0], &mut b[0], TASKS, None).await;
        relayed(&mut b[0], &mut a[0], TASKS, None).await;
    }
}

/// 3. Ten js listeners and one js publisher, each connected only to Agora: every listener gets
///    every message, and no listener's score of the Agora peer ever drops below 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_js_listeners_get_every_message_and_keep_scoring_agora_non_negative() {
    const MESSAGES: usize = 30;
    if !js_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (node, mut listeners) = star(dir.path(), 10, TASKS).await;
    for js in &mut listeners {
        js.call(json!({"cmd": "watch-score", "peer": node.peer_id}))
            .await;
    }
    let mut publisher = JsPeer::spawn().await;
    publisher.dial(&node).await;
    assert!(
        publisher
            .wait_for("subscribers", TASKS, &node.peer_id, Duration::from_secs(20))
            .await,
        "the publisher learns that Agora takes {TASKS}"
    );
    let mut nonces = Vec::new();
    for _ in 0..MESSAGES {
        nonces.push(publisher.publish_envelope(TASKS, None).await);
    }
    for js in &mut listeners {
        for (i, nonce) in nonces.iter().enumerate() {
            let got = js.receive(TASKS, nonce, Duration::from_secs(20)).await;
            assert!(
                got.is_some_and(|g| g["ok"] == true),
                "listener {} receives message {i} of {MESSAGES}",
                js.peer_id
            );
        }
    }
    // Scores keep being sampled (every 200 ms) for a while after the last delivery, when broken
    // gossip promises would be penalised.
    let watch_until = Instant::now() + Duration::from_secs(6);
    loop {
        for js in &mut listeners {
            let r = js
                .call(json!({"cmd": "score-min", "peer": node.peer_id}))
                .await;
            assert!(
                r["min"].as_f64().is_some_and(|m| m >= 0.0),
                "listener {}'s score of the Agora peer stays >= 0: {r}",
                js.peer_id
            );
        }
        if Instant::now() >= watch_until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// 4. Messages just under the application limit and a small one right after them all arrive.
///    Several big ones in a row also make the node's yamux grow the stream's receive window;
///    js-libp2p's yamux then sends data frames as large as that window, and rust-yamux closes
///    the connection on a frame body over 1 MiB unless the window is capped
///    (`agora_node::mesh::YAMUX_MAX_STREAMS`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_just_under_the_limit_and_the_next_both_arrive() {
    if !js_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_node, mut js) = star(dir.path(), 2, TASKS).await;
    let (a, b) = js.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    let size = APP_LIMIT - 872; // 1,051,800 bytes of envelope, gossipsub framing on top.
    let mut big = Vec::new();
    for _ in 0..4 {
        big.push(a.publish_envelope(TASKS, Some(size)).await);
    }
    let small = a.publish_envelope(TASKS, None).await;
    for (i, nonce) in big.iter().enumerate() {
        let got = b.receive(TASKS, nonce, Duration::from_secs(30)).await;
        assert!(
            got.as_ref()
                .is_some_and(|g| g["ok"] == true && g["size"] == size),
            "the {size}-byte envelope #{i} reaches the other js peer: {got:?}"
        );
    }
    let got = b.receive(TASKS, &small, Duration::from_secs(20)).await;
    assert!(
        got.is_some_and(|g| g["ok"] == true),
        "the small envelope right after them arrives too"
    );
}

/// 5. After a message over the application limit, and after one over the transport frame limit,
///    the next valid message still arrives, and `/status` counts each refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_oversized_message_the_next_valid_one_arrives() {
    if !js_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (node, mut js) = star(dir.path(), 2, TASKS).await;
    let (a, b) = js.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);

    // (a) Over the application limit, under the frame limit.
    a.publish_envelope(TASKS, Some(1_120_000)).await;
    let small = a.publish_envelope(TASKS, None).await;
    assert!(
        b.receive(TASKS, &small, Duration::from_secs(20))
            .await
            .is_some_and(|g| g["ok"] == true),
        "after a 1,120,000-byte envelope the next small one reaches the other js peer"
    );
    refused_at_least_once(&node, "over_limit").await;

    // (b) Over the transport frame limit.
    a.publish_envelope(TASKS, Some(2_000_000)).await;
    let small = a.publish_envelope(TASKS, None).await;
    assert!(
        b.receive(TASKS, &small, Duration::from_secs(20))
            .await
            .is_some_and(|g| g["ok"] == true),
        "after a 2,000,000-byte envelope the next small one reaches the other js peer"
    );
    refused_at_least_once(&node, "frame_too_large").await;
}

/// The topics a node has joined (`GET /status`).
async fn topics_of(node: &Node) -> BTreeSet<String> {
    strings(&get_json(&node.http, "/status").await["topics"])
}

/// Two agents on different nodes that use the same task type reach each other, whatever lies
/// between their nodes: js A on node 1 and js B on node 3 of a line 1–2–3. Node 2 has no interest
/// in the topic and does not join it (no contagion); nodes 1 and 3 relay it for their js
/// neighbours and provide the topic's rendezvous key (in so small a mesh Kademlia's bootstrap
/// has connected 1 and 3 already; the benchmark of 200 and 500 nodes is where rendezvous has to
/// bring nodes together). When the agents leave the topic, the nodes leave it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_on_different_nodes_meet_on_a_task_topic_and_nodes_leave_it_after_them() {
    if !js_available() {
        return;
    }
    const TOPIC: &str = "hyperspace/tasks/translate-fr";
    let dir = tempfile::tempdir().unwrap();
    let n1 = spawn_node(&dir.path().join("n1"), &[], 30, &[]);
    let n2 = spawn_node(&dir.path().join("n2"), &[&n1.p2p], 30, &[]);
    let n3 = spawn_node(&dir.path().join("n3"), &[&n2.p2p], 30, &[]);
    let line = eventually(Duration::from_secs(20), async || {
        let on2 = support::connected(&n2.http).await;
        (on2.contains(&n1.peer_id) && on2.contains(&n3.peer_id)).then_some(())
    })
    .await;
    assert!(line.is_some(), "1–2–3 connect");

    let mut a = JsPeer::spawn().await;
    let mut b = JsPeer::spawn().await;
    for (js, node) in [(&mut a, &n1), (&mut b, &n3)] {
        js.subscribe(&[TOPIC.to_owned()]).await;
        js.dial(node).await;
    }
    // Nodes 1 and 3 join the topic for their js neighbours (after identify says they are not
    // Agora nodes), find each other and form the topic's mesh; A's envelopes reach B and back.
    for (js, node) in [(&mut a, &n1), (&mut b, &n3)] {
        assert!(
            js.wait_for("subscribers", TOPIC, &node.peer_id, Duration::from_secs(20))
                .await,
            "node {} joins {TOPIC} for its js neighbour",
            node.peer_id
        );
    }
    let met = eventually(Duration::from_secs(30), async || {
        let nonce = a.publish_envelope(TOPIC, None).await;
        b.receive(TOPIC, &nonce, Duration::from_millis(500)).await?;
        let nonce = b.publish_envelope(TOPIC, None).await;
        a.receive(TOPIC, &nonce, Duration::from_millis(500)).await
    })
    .await;
    assert!(
        met.is_some(),
        "js A on node 1 and js B on node 3 reach each other on {TOPIC}"
    );
    // Every node also meets the other memory nodes on `hyperspace/crdt/sync/memory`.
    for (node, n) in [(&n1, 2), (&n2, 1), (&n3, 2)] {
        assert_eq!(
            gossip_status(node).await["topic_budget"]["rendezvous"],
            n,
            "rendezvous topics on {}",
            node.peer_id
        );
    }
    assert!(
        !topics_of(&n2).await.contains(TOPIC),
        "node 2, with no agent on {TOPIC}, did not join it"
    );

    // The agents leave the topic: so do their nodes.
    for js in [&mut a, &mut b] {
        js.call(json!({"cmd": "unsubscribe", "topics": [TOPIC]}))
            .await;
    }
    for node in [&n1, &n3] {
        let left = eventually(Duration::from_secs(20), async || {
            (!topics_of(node).await.contains(TOPIC)).then_some(())
        })
        .await;
        assert!(left.is_some(), "node {} leaves {TOPIC}", node.peer_id);
    }
}

/// 6. A js peer following 250 topics does not stop the node from carrying one of them both
///    ways, and the node stays within its topic budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_js_peer_following_250_topics_keeps_working() {
    if !js_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("a"), &[], 30, &[]);
    let topics: Vec<String> = (0..250)
        .map(|i| format!("hyperspace/tasks/t-{i:03}"))
        .collect();
    let topic = topics[123].clone();
    let mut many = JsPeer::spawn().await;
    many.subscribe(&topics).await;
    many.dial(&node).await;
    let mut one = JsPeer::spawn().await;
    one.subscribe(std::slice::from_ref(&topic)).await;
    one.dial(&node).await;
    for js in [&mut many, &mut one] {
        assert!(
            js.wait_for(
                "subscribers",
                &topic,
                &node.peer_id,
                Duration::from_secs(20)
            )
            .await,
            "the Agora node subscribes to {topic}, which js {} uses",
            js.peer_id
        );
        // As in `star`: a message relayed to a peer before it is in the node's mesh reaches it
        // only by gossip, which is not what this test is about.
        assert!(
            js.wait_for("mesh", &topic, &node.peer_id, Duration::from_secs(20))
                .await,
            "the Agora node joins js {}'s mesh for {topic}",
            js.peer_id
        );
    }
    // `/status` shows the node's own side of it: both js peers in its mesh for the topic.
    let in_mesh = eventually(Duration::from_secs(20), async || {
        let n = gossip_status(&node).await["mesh"][topic.as_str()].as_u64()?;
        (n == 2).then_some(())
    })
    .await;
    assert!(
        in_mesh.is_some(),
        "GET /status gossip.mesh counts both js peers on {topic}: {}",
        gossip_status(&node).await
    );
    relayed(&mut many, &mut one, &topic, None).await;
    relayed(&mut one, &mut many, &topic, None).await;
    within_topic_budget(&node).await;
}

/// 7. A node that has seen 500 capability topics still lets a second node join it: tools
///    registered on either are discovered from the other, and both stay within their topic
///    budgets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_node_joins_a_node_that_has_seen_500_capability_topics() {
    if !js_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_node(&dir.path().join("a"), &[], 30, &[]);
    let mut js = JsPeer::spawn().await;
    let ids = js.call(json!({"cmd": "peer-ids", "count": 500})).await;
    let topics: Vec<String> = strings(&ids["ids"])
        .iter()
        .map(|id| format!("hyperspace/capabilities/{id}"))
        .collect();
    assert_eq!(topics.len(), 500);
    js.subscribe(&topics).await;
    js.dial(&a).await;
    // The js peer's subscriptions are the first thing it sends on its gossipsub stream; once
    // Agora's own have arrived at the js peer, that exchange has happened.
    js.expect(Duration::from_secs(20), |e| {
        e["event"] == "subscription-change" && e["peer"] == a.peer_id.as_str()
    })
    .await
    .expect("the js peer and node A exchange subscriptions");

    let b = spawn_node(&dir.path().join("b"), &[&a.p2p], 30, &[]);
    let mut on_a = rpc_connect(&a.rpc).await;
    let mut on_b = rpc_connect(&b.rpc).await;
    let tool_a = register(&mut on_a, "a-tool", "ontoola").await;
    let tool_b = register(&mut on_b, "b-tool", "ontoolb").await;
    let mut client_a = rpc_connect(&a.rpc).await;
    let mut client_b = rpc_connect(&b.rpc).await;
    let found = discover(&mut client_a, "ontoolb", &tool_b)
        .await
        .expect("tool.discover on A finds the tool registered on B");
    assert_eq!(found["peerId"], b.peer_id.as_str());
    let found = discover(&mut client_b, "ontoola", &tool_a)
        .await
        .expect("tool.discover on B finds the tool registered on A");
    assert_eq!(found["peerId"], a.peer_id.as_str());
    within_topic_budget(&a).await;
    within_topic_budget(&b).await;
}

/// 8. js peers that follow many capability topics when they connect (as a Hyperspace js node
///    that knows many peers does) still have their own cards followed: Agora joins
///    `hyperspace/capabilities/{PeerId}` of each, and the card each then publishes is found by
///    `tool.discover`. Four such peers at once: the proxy topics they bring (8 per peer, 24 in
///    all) run out, and each own card topic is still followed, from the moment the peer is known
///    not to be an Agora node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_peers_following_200_card_topics_have_their_own_cards_found() {
    if !js_available() {
        return;
    }
    const PEERS: usize = 4;
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("a"), &[], 30, &[]);
    let mut peers = Vec::new();
    for i in 0..PEERS {
        let mut js = JsPeer::spawn().await;
        let own = format!("hyperspace/capabilities/{}", js.peer_id);
        let ids = js.call(json!({"cmd": "peer-ids", "count": 199})).await;
        let mut topics: Vec<String> = strings(&ids["ids"])
            .iter()
            .map(|id| format!("hyperspace/capabilities/{id}"))
            .collect();
        // Its own topic among the others (first, in the middle, last…), as a node that learned
        // of peers before it started.
        topics.insert((i * 66).min(topics.len()), own.clone());
        assert_eq!(topics.len(), 200);
        js.subscribe(&topics).await;
        js.dial(&node).await;
        peers.push((js, own));
    }
    // At once: within 10 s, before the 15 s an Agora neighbour takes to count as lasting
    // (`agora_node::mesh::topics::NEIGHBOUR_SETTLE`), so a card published then is not lost.
    for (i, (js, own)) in peers.iter_mut().enumerate() {
        assert!(
            js.wait_for("subscribers", own, &node.peer_id, Duration::from_secs(10))
                .await,
            "Agora subscribes to the capabilities topic of js peer {i}, which follows 200 card \
             topics; gossip: {}",
            gossip_status(&node).await
        );
        // It publishes once Agora is in its mesh for the topic, as `star` explains.
        assert!(
            js.wait_for("mesh", own, &node.peer_id, Duration::from_secs(20))
                .await,
            "the Agora node joins js peer {i}'s mesh for its own card topic"
        );
        js.call(json!({"cmd": "card", "tools": [{
            "id": format!("js-many-{i}"),
            "name": format!("js-many-{i}"),
            "description": "A tool of a js peer that follows 200 card topics",
            "capabilities": [format!("jsmanytopics{i}")],
        }]}))
        .await;
    }
    let mut client = rpc_connect(&node.rpc).await;
    for (i, (js, _)) in peers.iter().enumerate() {
        let found = discover(
            &mut client,
            &format!("jsmanytopics{i}"),
            &format!("js-many-{i}"),
        )
        .await
        .unwrap_or_else(|| {
            panic!("tool.discover on Agora finds the tool of the card of js peer {i}")
        });
        assert_eq!(found["peerId"], js.peer_id.as_str());
    }
    within_topic_budget(&node).await;
}

/// A trajectory shared by an Agora node, as a js-libp2p peer receives it on
/// `hyperspace/trajectories/{taskType}`: the raw gossiped bytes hold neither the e-mail address
/// nor the API key recorded, the js envelope code verifies the envelope, and the trajectory is
/// attributed to the node that signed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_trajectory_reaches_a_js_peer_redacted_and_verified() {
    if !js_available() {
        return;
    }
    const TRAJECTORIES: &str = "hyperspace/trajectories/web-research";
    let dir = tempfile::tempdir().unwrap();
    let node = support::spawn_node_env(
        &dir.path().join("a"),
        &[],
        30,
        &[],
        &[
            ("AGORA_IMPROVING_SHARE", "true"),
            ("AGORA_IMPROVING_TASK_TYPES", "web-research"),
        ],
    );
    let mut js = JsPeer::spawn().await;
    js.subscribe(&[TRAJECTORIES.to_owned()]).await;
    js.dial(&node).await;
    assert!(
        js.wait_for("mesh", TRAJECTORIES, &node.peer_id, Duration::from_secs(20))
            .await,
        "the Agora node joins the js peer's mesh for {TRAJECTORIES}"
    );
    let mut ws = rpc_connect(&node.rpc).await;
    let r = support::rpc_call(
        &mut ws,
        1,
        "improving.recordTrajectory",
        json!({
            "taskType": "web-research",
            "input": {"query": "write to ana.lopez@agents.localhost about batteries"},
            "output": {"summary": "sent"},
            "steps": [{"action": "mail", "tool": "smtp", "params": {"token": "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD"}, "duration": 40}],
            "reward": 0.9
        }),
    )
    .await;
    assert_eq!(r["result"]["gossipedTo"], 1, "{r}");
    let id = r["result"]["trajectoryId"].as_str().unwrap().to_owned();
    let message = js
        .expect(Duration::from_secs(20), |e| {
            e["event"] == "message" && e["topic"] == TRAJECTORIES
        })
        .await
        .expect("the js peer receives the trajectory");
    let raw = message["data"].as_str().expect("the gossiped bytes");
    assert!(!raw.contains("ana.lopez@agents.localhost"), "{raw}");
    assert!(!raw.contains("sk-abcdefghij"), "{raw}");
    assert!(raw.contains("[REDACTED:pii.email]") && raw.contains("[REDACTED:secret.api_key]"));
    let verified = js
        .expect(Duration::from_secs(5), |e| {
            e["event"] == "verified" && e["topic"] == TRAJECTORIES
        })
        .await
        .expect("the js envelope code checks it");
    assert_eq!(verified["ok"], true, "{verified}");
    assert_eq!(verified["d"]["trajectoryId"], id.as_str());
    assert_eq!(verified["d"]["peerId"], node.peer_id.as_str());
    assert_eq!(verified["d"]["reward"], 0.9);
}
