//! The JSON-RPC face against hostile clients (`docs/node.md` "The JSON-RPC face" under "Limits
//! against hostile clients"), over real sockets to a real node: floods
//! from clients that never read (the node's memory stays bounded and other clients keep a low
//! latency), amplification by malformed batches, a bucket per keyless loopback connection,
//! `tool.invoke` of providers that stop reading or answer too much, the `bearer` scheme in any
//! case, ended session tokens on open connections, and WebSocket close codes.
//!
//! The flood tests print what they measure: `cargo test -p agora --test hostile_rpc --
//! --nocapture`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};

use crate::support::{self, HEAVY, Node, Ws, eventually, register_tool, rss_bytes, spawn_node};

const MIB: u64 = 1 << 20;
/// The node's resident memory stays below this during a flood. Measured peaks (dev profile,
/// 2 cores shared with other builds, 2026-11-29, whole suite in one process): 63.8 MiB (junk
/// frames) and 92.9 MiB (200 KiB replies) from an idle 61-63 MiB; the bound is 1.6x the higher
/// peak, low enough that a flood buffering without limit (hundreds of MiB within 6 s) fails.
const RSS_BOUND: u64 = 150 * MIB;
/// After the flooders leave, the node's resident memory comes back within this of idle (the
/// allocator may keep some of the freed memory for reuse).
const RSS_SETTLED: u64 = 40 * MIB;
/// How long each flood lasts.
const FLOOD: Duration = Duration::from_secs(6);
/// A well-behaved client's 99th percentile latency during a flood (dev profile). Measured:
/// p99 0.22 ms (junk frames) and 43 ms (200 KiB replies), max 156 ms (2026-11-29, 2 cores
/// shared); docs/node.md's seven runs of 2026-11-24 give p99 0.4-103 ms. The bound leaves 5x
/// over the worst p99 seen, for a loaded CI runner; a face that stops serving others while it
/// is flooded answers in seconds, not hundreds of milliseconds.
const P99_BOUND: Duration = Duration::from_millis(500);

/// Opens a JSON-RPC connection with an optional `Authorization` header value.
async fn connect(url: &str, authorization: Option<&str>) -> Result<Ws, String> {
    let mut req = url.into_client_request().unwrap();
    if let Some(a) = authorization {
        req.headers_mut()
            .insert("Authorization", a.parse().unwrap());
    }
    tokio_tungstenite::connect_async(req)
        .await
        .map(|(ws, _)| ws)
        .map_err(|e| e.to_string())
}

/// The next message, within 10 s.
async fn next(ws: &mut Ws) -> Message {
    tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .expect("a message in time")
        .expect("the connection is open")
        .unwrap()
}

/// Reads frames until the response with id `id` (others are skipped).
async fn response(ws: &mut Ws, id: &Value) -> Value {
    loop {
        if let Message::Text(t) = next(ws).await {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["id"] == *id {
                return v;
            }
        }
    }
}

async fn send(ws: &mut Ws, text: impl Into<String>) {
    ws.send(Message::Text(text.into().into())).await.unwrap();
}

async fn call(ws: &mut Ws, id: u64, method: &str, params: Value) -> Value {
    let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    send(ws, req.to_string()).await;
    response(ws, &json!(id)).await
}

/// `state.createSession` for agent `name`: the session id and its token.
async fn new_session(ws: &mut Ws, name: &str) -> (String, String) {
    let r = call(ws, 1, "state.createSession", json!({ "agentName": name })).await;
    let field = |f: &str| r["result"][f].as_str().unwrap().to_owned();
    (field("sessionId"), field("sessionToken"))
}

fn rss(node: &Node) -> u64 {
    rss_bytes(node.child.id()).expect("the node's VmRSS")
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}

/// Latency of calls made one after the other.
#[derive(Debug)]
struct Latency {
    p50: Duration,
    p99: Duration,
    max: Duration,
}

/// `n` calls of `tool.listRegistered`, each waited for before the next.
async fn latency(ws: &mut Ws, n: u64) -> Latency {
    let mut times = Vec::new();
    for i in 0..n {
        let started = Instant::now();
        let r = call(ws, 10_000 + i, "tool.listRegistered", json!({})).await;
        assert!(
            r.get("result").is_some(),
            "a well-behaved client is served: {r}"
        );
        times.push(started.elapsed());
    }
    times.sort();
    let at = |q: usize| times[(times.len() - 1) * q / 100];
    Latency {
        p50: at(50),
        p99: at(99),
        max: at(100),
    }
}

/// What a flood did to the node.
#[derive(Debug)]
struct Flood {
    idle: u64,
    peak: u64,
    settled: u64,
    latency: Latency,
    frames: u64,
    bytes: u64,
}

/// Runs `flooders` clients that send `frame(n)` as fast as the node takes them and never read,
/// for [`FLOOD`]; meanwhile samples the node's memory and measures the latency of `good`. Then
/// the flooders leave and the node's memory is given time to settle.
async fn flood(
    node: &Node,
    good: &mut Ws,
    flooders: usize,
    frame: impl Fn(u64) -> String + Send + Sync + 'static,
) -> Flood {
    let frame = Arc::new(frame);
    latency(good, 20).await;
    let idle = rss(node);
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(idle));
    let pid = node.child.id();
    let sampler = tokio::spawn({
        let (stop, peak) = (Arc::clone(&stop), Arc::clone(&peak));
        async move {
            let mut every = tokio::time::interval(Duration::from_millis(50));
            while !stop.load(Ordering::Relaxed) {
                every.tick().await;
                if let Some(now) = rss_bytes(pid) {
                    peak.fetch_max(now, Ordering::Relaxed);
                }
            }
        }
    });
    let mut tasks = Vec::new();
    for _ in 0..flooders {
        let mut ws = connect(&node.rpc, None).await.unwrap();
        let (stop, sent, frame) = (Arc::clone(&stop), Arc::clone(&sent), Arc::clone(&frame));
        tasks.push(tokio::spawn(async move {
            let (mut n, mut bytes) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let text = frame(n);
                let len = text.len() as u64;
                match tokio::time::timeout(
                    Duration::from_millis(100),
                    ws.send(Message::Text(text.into())),
                )
                .await
                {
                    Ok(Ok(())) => {
                        n += 1;
                        bytes += len;
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Err(_)) => break,
                    // The node does not take more: keep pushing.
                    Err(_) => {}
                }
            }
            (n, bytes)
        }));
    }
    let started = Instant::now();
    eventually(Duration::from_secs(10), async || {
        (sent.load(Ordering::Relaxed) >= 1_000).then_some(())
    })
    .await
    .expect("the flood is under way");
    let latency = latency(good, 50).await;
    eventually(FLOOD, async || (started.elapsed() >= FLOOD).then_some(())).await;
    stop.store(true, Ordering::Relaxed);
    let (mut frames, mut bytes) = (0, 0);
    for task in tasks {
        let (n, b) = task.await.unwrap();
        frames += n;
        bytes += b;
    }
    sampler.await.unwrap();
    let peak = peak.load(Ordering::Relaxed);
    // What the node gives back once the allocator has returned freed pages (jemalloc, which the
    // binary uses, purges them over 10 s), polled for up to 20 s.
    let settled = eventually(Duration::from_secs(20), async || {
        let now = rss(node);
        (now <= idle + 4 * MIB).then_some(now)
    })
    .await
    .unwrap_or_else(|| rss(node));
    Flood {
        idle,
        peak,
        settled,
        latency,
        frames,
        bytes,
    }
}

fn report(what: &str, f: &Flood) {
    eprintln!(
        "{what}: {} frames ({:.1} MiB) sent; node RSS idle {:.1} MiB, peak {:.1} MiB, after {:.1} MiB; \
         well-behaved client p50 {:?} p99 {:?} max {:?}",
        f.frames,
        mib(f.bytes),
        mib(f.idle),
        mib(f.peak),
        mib(f.settled),
        f.latency.p50,
        f.latency.p99,
        f.latency.max,
    );
    assert!(f.peak < RSS_BOUND, "{what}: node RSS {} MiB", mib(f.peak));
    assert!(
        f.settled <= f.idle + RSS_SETTLED,
        "{what}: the node's memory comes back near idle"
    );
    assert!(f.latency.p99 < P99_BOUND, "{what}: {:?}", f.latency);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_junk_flood_from_clients_that_never_read_is_bounded() {
    let _heavy = HEAVY.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("n"), &[], 30, &[]);
    let mut good = connect(&node.rpc, None).await.unwrap();
    let batch = format!("[{}]", vec!["1"; 256].join(","));
    let unterminated = format!("\"{}", "a".repeat(64 << 10));
    let f = flood(&node, &mut good, 3, move |n| match n % 4 {
        0 => batch.clone(),
        1 => unterminated.clone(),
        _ => "x".to_owned(),
    })
    .await;
    report("junk flood", &f);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_call_flood_that_never_reads_is_bounded() {
    let _heavy = HEAVY.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("n"), &[], 30, &[]);
    let mut good = connect(&node.rpc, None).await.unwrap();
    let (session, _) = new_session(&mut good, "big").await;
    let value = "v".repeat(200 << 10);
    let r = call(
        &mut good,
        2,
        "state.setState",
        json!({"sessionId": session, "key": "big", "value": value}),
    )
    .await;
    assert_eq!(r["result"]["updated"], true, "{r}");
    // Every answer is ~200 KiB (a `state.getState` of the value) or a −32003 once over the rate.
    let f = flood(&node, &mut good, 3, move |n| {
        json!({"jsonrpc": "2.0", "id": n, "method": "state.getState",
               "params": {"sessionId": session, "key": "big"}})
        .to_string()
    })
    .await;
    report("valid-call flood (200 KiB replies)", &f);
    let f = flood(&node, &mut good, 3, |n| {
        json!({"jsonrpc": "2.0", "id": n, "method": "guard.checkRateLimit",
               "params": {"key": format!("k{}", n % 7), "limit": 5, "window": 1000}})
        .to_string()
    })
    .await;
    report("valid-call flood (small replies, mostly −32003)", &f);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_batches_are_rate_limited_and_replies_stay_small() {
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("n"), &[], 30, &[]);
    let mut ws = connect(&node.rpc, None).await.unwrap();
    let batch = format!("[{}]", vec!["1"; 256].join(","));
    assert_eq!(batch.len(), 513);
    for _ in 0..20 {
        send(&mut ws, batch.as_str()).await;
    }
    let end = r#"{"jsonrpc":"2.0","id":"end","method":"tool.listRegistered","params":{}}"#;
    send(&mut ws, end).await;
    let input = 20 * batch.len() + end.len();
    // Replies to frames that need no call come in order: everything before "end" is in.
    let (mut output, mut replies, mut limited, mut largest) = (0, 0, 0, 0);
    loop {
        let Message::Text(t) = next(&mut ws).await else {
            continue;
        };
        output += t.len();
        replies += 1;
        largest = largest.max(t.len());
        let v: Value = serde_json::from_str(t.as_str()).unwrap();
        let entries = v.as_array().cloned().unwrap_or_else(|| vec![v.clone()]);
        limited += entries
            .iter()
            .filter(|e| e["error"]["code"] == -32003)
            .count();
        if v["id"] == "end" {
            break;
        }
    }
    eprintln!(
        "malformed batches: {input} bytes in, {output} bytes out in {replies} replies \
         (ratio {:.2}, largest reply {largest} bytes), {limited} × −32003",
        output as f64 / input as f64
    );
    assert!(limited >= 1, "a flood of malformed items is rate limited");
    assert!(output <= 3 * input, "{output} bytes answer {input}");
    assert!(largest <= 2 * batch.len() + 1024, "{largest}");

    // Every element of a batch of valid requests takes a token too.
    let mut ws = connect(&node.rpc, None).await.unwrap();
    let items: Vec<String> = (0..256)
        .map(|i| format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"tool.listRegistered"}}"#))
        .collect();
    send(&mut ws, format!("[{}]", items.join(","))).await;
    let Message::Text(t) = next(&mut ws).await else {
        panic!("a batch reply")
    };
    let v: Value = serde_json::from_str(t.as_str()).unwrap();
    let entries = v.as_array().unwrap();
    assert_eq!(entries.len(), 256);
    let limited = entries
        .iter()
        .filter(|e| e["error"]["code"] == -32003)
        .count();
    assert!((40..=56).contains(&limited), "{limited} of 256 limited");
    assert!(
        entries
            .iter()
            .all(|e| e.get("result").is_some() || e["error"]["data"]["retryAfterMs"].is_u64())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_keyless_client_does_not_rate_limit_another() {
    let _heavy = HEAVY.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("n"), &[], 30, &[]);
    let flooder = connect(&node.rpc, None).await.unwrap();
    let mut other = connect(&node.rpc, None).await.unwrap();
    let flooding = tokio::spawn(async move {
        let (mut sink, mut stream) = flooder.split();
        for b in 0..5 {
            let items: Vec<String> = (0..250)
                .map(|i| {
                    format!(
                        r#"{{"jsonrpc":"2.0","id":{},"method":"tool.listRegistered"}}"#,
                        b * 1000 + i
                    )
                })
                .collect();
            let text = format!("[{}]", items.join(","));
            sink.send(Message::Text(text.into())).await.unwrap();
        }
        let mut limited = 0;
        for _ in 0..5 {
            let Some(Ok(Message::Text(t))) = stream.next().await else {
                panic!("batch replies")
            };
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            limited += v
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["error"]["code"] == -32003)
                .count();
        }
        limited
    });
    let mut other_limited = 0;
    for i in 0..150 {
        let r = call(&mut other, i, "tool.listRegistered", json!({})).await;
        if r["error"]["code"] == -32003 {
            other_limited += 1;
        }
    }
    let flooder_limited = flooding.await.unwrap();
    assert!(flooder_limited > 0, "1,250 requests at once are limited");
    assert_eq!(other_limited, 0, "the other connection has its own bucket");
}

/// Registers a tool named `name` on a new connection to `node`.
async fn provider(node: &Node, name: &str) -> (Ws, String) {
    let mut ws = connect(&node.rpc, None).await.unwrap();
    let tool = register_tool(
        &mut ws,
        json!({"name": name, "description": format!("{name} for the hostile tests"),
               "schema": {"type": "object"}, "capabilities": [name]}),
    )
    .await;
    (ws, tool)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_invoke_answers_within_its_bound_whatever_the_provider_does() {
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("n"), &[], 30, &[]);

    // A provider that answers more than a message may hold is disconnected: −32006 at once.
    let (mut huge, huge_tool) = provider(&node, "huge").await;
    let mut invoker = connect(&node.rpc, None).await.unwrap();
    let invoke = |id: u64, tool: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tool.invoke",
               "params": {"toolId": tool, "params": params}})
        .to_string()
    };
    let started = Instant::now();
    send(&mut invoker, invoke(1, &huge_tool, json!({}))).await;
    let Message::Text(req) = next(&mut huge).await else {
        panic!("the provider is asked")
    };
    let req: Value = serde_json::from_str(req.as_str()).unwrap();
    let answer = json!({"jsonrpc": "2.0", "id": req["id"], "result": "r".repeat(3 << 19)});
    let _ = huge.send(Message::Text(answer.to_string().into())).await;
    let r = response(&mut invoker, &json!(1)).await;
    assert_eq!(r["error"]["code"], -32006, "{r}");
    // "At once": 12 ms measured (2026-11-29, 2 cores shared). 5 s is far above that and far
    // below the 30 s the node would take if it waited for the provider's write timeout.
    assert!(started.elapsed() < Duration::from_secs(5));

    // A provider that stops reading (and so never answers), while invocations with large
    // parameters pile up on its connection.
    let (_deaf, tool) = provider(&node, "deaf").await;
    let started = Instant::now();
    let mut invokers = Vec::new();
    for i in 0..4 {
        let mut ws = connect(&node.rpc, None).await.unwrap();
        let mut sent = vec![];
        for id in 1..=4 {
            let blob = if id == 1 {
                String::new()
            } else {
                "p".repeat(700 << 10)
            };
            send(
                &mut ws,
                invoke(id, &tool, json!({ "blob": blob, "from": i })),
            )
            .await;
            sent.push(Instant::now());
        }
        invokers.push((ws, sent));
    }
    // Frames are answered as their calls complete: in any order.
    let mut slowest = Duration::ZERO;
    let mut reasons = std::collections::BTreeSet::new();
    for (ws, sent) in &mut invokers {
        let mut answered = std::collections::BTreeSet::new();
        while answered.len() < 4 {
            let left = Duration::from_secs(40).saturating_sub(started.elapsed());
            let message = tokio::time::timeout(left, ws.next())
                .await
                .expect("every tool.invoke is answered")
                .expect("the connection is open")
                .unwrap();
            let Message::Text(t) = message else { continue };
            let r: Value = serde_json::from_str(t.as_str()).unwrap();
            assert_eq!(r["error"]["code"], -32006, "{r}");
            reasons.insert(
                r["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
            let id = r["id"].as_u64().unwrap();
            answered.insert(id);
            slowest = slowest.max(sent[usize::try_from(id).unwrap() - 1].elapsed());
        }
    }
    eprintln!(
        "tool.invoke of a provider that stops reading: −32006 after at most {slowest:?} ({reasons:?})"
    );
    assert!(slowest <= Duration::from_secs(31), "{slowest:?}");

    // The provider took nothing for the write timeout: the node closed its connection, and its
    // tool with it.
    let gone = eventually(Duration::from_secs(20), async || {
        let r = call(&mut invoker, 50, "tool.listRegistered", json!({})).await;
        let listed = r["result"]["tools"]
            .as_array()?
            .iter()
            .any(|t| t["id"] == tool);
        (!listed).then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "a provider that reads nothing is disconnected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_in_any_case_and_ended_session_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let key = support::TEST_API_KEY;
    let node = support::spawn_node_with_key(dir.path());
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let auth = format!("{scheme} {key}");
        assert!(connect(&node.rpc, Some(&auth)).await.is_ok(), "{auth}");
    }
    let err = connect(&node.rpc, Some("bearer wrong-key")).await.err();
    assert!(err.is_some_and(|e| e.contains("401")));

    let mut admin = connect(&node.rpc, Some(&format!("Bearer {key}")))
        .await
        .unwrap();
    let (session, token) = new_session(&mut admin, "a").await;
    let mut scoped = connect(&node.rpc, Some(&format!("bearer {token}")))
        .await
        .unwrap();
    let r = call(
        &mut scoped,
        2,
        "guard.getBudgetStatus",
        json!({"sessionId": session}),
    )
    .await;
    assert!(r.get("result").is_some(), "{r}");
    let r = call(
        &mut admin,
        3,
        "state.endSession",
        json!({"sessionId": session}),
    )
    .await;
    assert_eq!(r["result"]["ended"], true);
    // The open connection of the ended session's token: refused, then closed.
    let r = call(
        &mut scoped,
        4,
        "guard.checkRateLimit",
        json!({"key": "k", "limit": 5, "window": 1000}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    let Message::Close(Some(close)) = next(&mut scoped).await else {
        panic!("the connection is closed")
    };
    assert_eq!(u16::from(close.code), 1008);
    assert!(
        connect(&node.rpc, Some(&format!("bearer {token}")))
            .await
            .is_err()
    );
}

/// Sends raw WebSocket frames and returns the code of the close frame the node answers with.
async fn close_code_after(node: &Node, frames: Vec<Frame>) -> u16 {
    let mut ws = connect(&node.rpc, None).await.unwrap();
    for f in frames {
        ws.send(Message::Frame(f)).await.unwrap();
    }
    loop {
        match next(&mut ws).await {
            Message::Close(Some(close)) => return close.code.into(),
            Message::Close(None) => panic!("a close frame without a code"),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_errors_close_with_their_status_code() {
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("n"), &[], 30, &[]);
    let text = |data: Vec<u8>, fin| Frame::message(data, OpCode::Data(Data::Text), fin);
    // A message over 1 MiB, in two frames each under the limit.
    let half = vec![b' '; 600 << 10];
    let too_big = vec![
        text(half.clone(), false),
        Frame::message(half, OpCode::Data(Data::Continue), true),
    ];
    assert_eq!(close_code_after(&node, too_big).await, 1009);
    // A text frame that is not UTF-8.
    let invalid = vec![text(vec![b'"', 0xff, 0xfe, b'"'], true)];
    assert_eq!(close_code_after(&node, invalid).await, 1007);
    // A frame with a reserved bit set.
    let mut reserved = text(b"{}".to_vec(), true);
    reserved.header_mut().rsv1 = true;
    assert_eq!(close_code_after(&node, vec![reserved]).await, 1002);
    // The node still serves.
    let mut ws = connect(&node.rpc, None).await.unwrap();
    let r = call(&mut ws, 1, "tool.listRegistered", json!({})).await;
    assert!(r.get("result").is_some());
}
