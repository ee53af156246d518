//! The operator's view of real nodes on 127.0.0.1: `/metrics` scraped and parsed by an
//! independent Prometheus text parser (`prometheus-parse`) with counts that follow real traffic;
//! the dashboard's page, snapshot and event stream showing what the mesh holds; and the API key
//! guarding everything but the static assets.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{self, Agent, eventually, rpc_call, rpc_connect, spawn_node};

const WAIT: Duration = Duration::from_secs(20);

/// One HTTP/1.1 GET; `(status, content-type, body)`.
async fn get(base: &str, path: &str, bearer: Option<&str>) -> (u16, String, String) {
    let host = base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    let auth = bearer.map_or(String::new(), |k| format!("Authorization: Bearer {k}\r\n"));
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_default();
    (status, content_type, body.to_owned())
}

async fn snapshot(base: &str) -> Value {
    let (status, _, body) = get(base, "/dashboard/snapshot", None).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("the snapshot is JSON")
}

pub(crate) fn scrape(text: &str) -> prometheus_parse::Scrape {
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    prometheus_parse::Scrape::parse(lines).expect("the exposition parses")
}

/// The value of the sample `name` whose labels include `labels`. (`prometheus-parse` reads an
/// OpenMetrics counter's `_total` sample as untyped: its `# TYPE` line names the family without
/// the suffix.)
pub(crate) fn sample(
    scrape: &prometheus_parse::Scrape,
    name: &str,
    labels: &[(&str, &str)],
) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(k).is_some_and(|x| x == *v))
        })
        .and_then(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => Some(v),
            _ => None,
        })
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_parse_with_a_real_parser_and_follow_real_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_node(&dir.path().join("a"), &[], 30, &[]);
    let b = spawn_node(&dir.path().join("b"), &[&a.p2p], 30, &[]);
    let mut ws = rpc_connect(&a.rpc).await;
    let created = rpc_call(&mut ws, 1, "state.createSession", json!({})).await;
    assert!(created["result"].is_object(), "{created}");
    for i in 0..3 {
        let r = rpc_call(&mut ws, 2 + i, "no.such", json!({})).await;
        assert_eq!(r["error"]["code"], -32601);
    }
    let mut agent = Agent::connect(&a.agh, "metrics-agent", "ops").await;
    agent.greet(&["echo"]).await;
    let (status, content_type, text) = get(&a.http, "/metrics", None).await;
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let parsed = scrape(&text);
    assert_eq!(
        sample(
            &parsed,
            "agora_rpc_calls_total",
            &[("method", "state.createSession"), ("outcome", "ok")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &parsed,
            "agora_rpc_calls_total",
            &[("method", "other"), ("outcome", "-32601")]
        ),
        Some(3.0),
        "unknown methods share one label"
    );
    assert!(
        sample(&parsed, "agora_queue_depth", &[("queue", "agh")]).is_some(),
        "queue depths are sampled"
    );
    // libp2p's own metrics are in the same registry, and B's connection shows up in them.
    let connected = eventually(WAIT, async || {
        let (_, _, text) = get(&a.http, "/metrics", None).await;
        let parsed = scrape(&text);
        let n: f64 = parsed
            .samples
            .iter()
            .filter(|s| s.metric == "agora_libp2p_swarm_connections_established_total")
            .filter_map(|s| match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => {
                    Some(v)
                }
                _ => None,
            })
            .sum();
        let accepted = sample(
            &parsed,
            "agora_agh_envelopes_total",
            &[("outcome", "accepted")],
        );
        (n >= 1.0 && accepted >= Some(1.0)).then_some(())
    })
    .await;
    if connected.is_none() {
        let (_, _, text) = get(&a.http, "/metrics", None).await;
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("connections_established") || l.contains("agh_envelopes"))
            .collect();
        panic!("B's connection and the agent's greet are counted: {lines:#?}");
    }
    drop(b);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_shows_the_mesh_and_streams_updates() {
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_node(&dir.path().join("a"), &[], 30, &[]);
    let b = spawn_node(&dir.path().join("b"), &[&a.p2p], 30, &[]);
    let (status, content_type, page) = get(&a.http, "/", None).await;
    assert_eq!(status, 200);
    assert!(content_type.starts_with("text/html"));
    assert!(page.contains("/dashboard/app.js") && page.contains("id=\"node-peer-id\""));
    for (path, kind) in [
        ("/dashboard/app.js", "text/javascript"),
        ("/dashboard/style.css", "text/css"),
    ] {
        let (status, content_type, body) = get(&a.http, path, None).await;
        assert_eq!(status, 200, "{path}");
        assert!(content_type.starts_with(kind), "{path}: {content_type}");
        let body = body.replace("http://www.w3.org/2000/svg", "");
        assert!(
            !body.contains("http://") && !body.contains("https://"),
            "{path} loads nothing from the network"
        );
    }
    // A tool on B, an agent in a channel on A.
    let mut provider = rpc_connect(&b.rpc).await;
    let tool = support::register_tool(
        &mut provider,
        json!({"name": "dashboard-echo", "description": "echoes", "schema": {"type": "object"}, "capabilities": ["echo"]}),
    )
    .await;
    let mut agent = Agent::connect(&a.agh, "dash-agent", "ops").await;
    agent.greet(&["echo"]).await;
    let seen = eventually(WAIT, async || {
        let s = snapshot(&a.http).await;
        let peers = s["status"]["connected"].as_array()?.clone();
        let channel = s["agh"]["peers"]
            .as_array()?
            .iter()
            .any(|p| p["channel"] == "ops" && p["peer_id"] == "dash-agent");
        let tool_seen = s["hyperspace"]["cards"].as_array()?.iter().any(|c| {
            c["tools"]
                .as_array()
                .is_some_and(|t| t.iter().any(|x| *x == tool.as_str()))
        });
        (peers.iter().any(|p| *p == b.peer_id.as_str()) && channel && tool_seen).then_some(s)
    })
    .await
    .expect("A's snapshot shows B, the agent in its channel and B's tool");
    assert_eq!(seen["status"]["peer_id"], a.peer_id.as_str());
    assert!(seen["ans"]["name"].is_string());
    assert!(seen["node"]["version"].is_string());
    assert!(seen["traffic"]["faces"]["agh"].as_u64() >= Some(1));
    assert!(
        seen["events"].as_array().is_some_and(|e| e
            .iter()
            .any(|e| e["peer"] == b.peer_id.as_str() && e["kind"] == "connected")),
        "the connection event is logged"
    );
    // The event stream: snapshots keep coming, each newer than the last.
    let host = a.http.trim_start_matches("http://").to_owned();
    let mut s = tokio::net::TcpStream::connect(&host).await.unwrap();
    s.write_all(
        format!(
            "GET /dashboard/events HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    let mut stamps = Vec::new();
    let read = tokio::time::timeout(WAIT, async {
        let mut chunk = [0u8; 8192];
        while stamps.len() < 3 {
            let n = s.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the stream stays open");
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).into_owned();
            stamps = text
                .split("event: snapshot")
                .skip(1)
                .filter_map(|block| {
                    let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
                    let v: Value = serde_json::from_str(data).ok()?;
                    v["at_ms"].as_u64()
                })
                .collect();
        }
    })
    .await;
    assert!(read.is_ok(), "three snapshots within {WAIT:?}");
    assert!(stamps.windows(2).all(|w| w[1] > w[0]), "{stamps:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn with_an_api_key_only_the_page_and_its_assets_are_open() {
    let dir = tempfile::tempdir().unwrap();
    let a = support::spawn_node_with_key(dir.path());
    for path in ["/", "/dashboard/app.js", "/dashboard/style.css"] {
        assert_eq!(get(&a.http, path, None).await.0, 200, "{path}");
    }
    for path in ["/dashboard/snapshot", "/dashboard/events", "/metrics"] {
        assert_eq!(
            get(&a.http, path, None).await.0,
            401,
            "{path} without the key"
        );
        assert_eq!(
            get(&a.http, path, Some("wrong-key-wrong-key-wrong"))
                .await
                .0,
            401,
            "{path} with a wrong key"
        );
    }
    let (status, _, body) = get(&a.http, "/dashboard/snapshot", Some(support::TEST_API_KEY)).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"]["peer_id"], a.peer_id.as_str());
    let (status, _, _) = get(&a.http, "/metrics", Some(support::TEST_API_KEY)).await;
    assert_eq!(status, 200);
}
