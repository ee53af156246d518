//! The A2A bridge's cost (Hyperspace spec §10.2; `docs/bridges.md`): one A2A 1.0 `SendMessage`
//! to the Python a2a-sdk fixture agent (`tests/fixtures/a2a_agent.py`, skill `echo`), measured
//! four ways in the same run, interleaved call by call:
//! - **direct**: an HTTP client → the agent (the baseline);
//! - **bridge, same node**: `tool.invoke` on node A (JSON-RPC WebSocket) → A's bridge → agent;
//! - **bridge, over the mesh**: `tool.invoke` on node B → mesh → A's bridge → agent;
//! - **A2A face**: an HTTP client → B's `POST /a2a` (`SendMessage` naming the skill) →
//!   `tool.invoke` → mesh → A's bridge → agent.
//!
//! Run: `cargo bench -p agora --bench bridge_a2a` (needs `AGORA_BRIDGE_PYTHON`, a Python with
//! a2a-sdk 1.3.0 and uvicorn; `BRIDGE_BENCH_N` calls per way, default 300). Prints p50/p99 and
//! the overhead over direct. A measurement harness, not a test: it asserts nothing about the
//! numbers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// One keep-alive HTTP client for the direct and A2A-face calls.
fn post(agent: &ureq::Agent, url: &str, body: &Value) -> Value {
    let mut r = agent
        .post(url)
        .header("A2A-Version", "1.0")
        .header("content-type", "application/json")
        .send(body.to_string())
        .unwrap();
    serde_json::from_slice(&r.body_mut().read_to_vec().unwrap()).unwrap()
}

fn send_message(text: &str, skill: Option<&str>) -> Value {
    let mut message =
        json!({"messageId": format!("m-{text}"), "role": "ROLE_USER", "parts": [{"text": text}]});
    if let Some(s) = skill {
        message["parts"] = json!([{"data": {"text": text}}]);
        message["metadata"] = json!({"org.agora-mesh/skillId": s});
    }
    json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}})
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let Some(python) = support::bridge_python() else {
        return;
    };
    let n: usize = std::env::var("BRIDGE_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    rt.block_on(async move {
        let dir = tempfile::tempdir().unwrap();
        let agent = support::spawn_python_fixture(&python, "a2a_agent.py", &[]);
        let key_env = [("AGORA_API_KEY", support::TEST_API_KEY)];
        let a = support::spawn_node_env(&dir.path().join("a"), &[], 30, &[], &key_env);
        let b = support::spawn_node(&dir.path().join("b"), &[&a.p2p], 30, &[]);
        let mut ra = support::rpc_connect_bearer(&a.rpc, support::TEST_API_KEY).await;
        let mut rb = support::rpc_connect(&b.rpc).await;
        let r = support::rpc_call(&mut ra, 1, "bridge.announceA2AAgent", json!({"url": agent.url, "name": "fx"})).await;
        let echo = r["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["skillId"] == "echo")
            .map(|t| t["toolId"].as_str().unwrap().to_owned())
            .unwrap();
        support::discover_tool(&mut rb, json!({"query": "", "capabilities": ["a2a"]}), &echo, Duration::from_secs(20))
            .await
            .expect("B discovers the skill");
        let http: ureq::Agent = ureq::Agent::config_builder().proxy(None).build().into();
        let (direct_url, face_url) = (format!("{}/", agent.url), format!("{}/a2a", b.http));
        let mut samples: [Vec<Duration>; 4] = Default::default();
        for i in 0..n + 20 {
            let text = format!("hi{i}");
            let t = Instant::now();
            let d = {
                let (http, url, body) = (http.clone(), direct_url.clone(), send_message(&text, None));
                tokio::task::spawn_blocking(move || post(&http, &url, &body)).await.unwrap()
            };
            let direct = t.elapsed();
            assert_eq!(d["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{d}");
            let params = json!({"toolId": echo, "params": {"text": text}});
            let t = Instant::now();
            let r = support::rpc_call(&mut ra, 2, "tool.invoke", params.clone()).await;
            let local = t.elapsed();
            assert_eq!(r["result"]["result"]["state"], "TASK_STATE_COMPLETED", "{r}");
            let t = Instant::now();
            let r = support::rpc_call(&mut rb, 3, "tool.invoke", params).await;
            let mesh = t.elapsed();
            assert_eq!(r["result"]["result"]["state"], "TASK_STATE_COMPLETED", "{r}");
            let t = Instant::now();
            let f = {
                let (http, url, body) = (http.clone(), face_url.clone(), send_message(&text, Some(&echo)));
                tokio::task::spawn_blocking(move || post(&http, &url, &body)).await.unwrap()
            };
            let face = t.elapsed();
            assert_eq!(f["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{f}");
            if i >= 20 {
                for (s, d) in samples.iter_mut().zip([direct, local, mesh, face]) {
                    s.push(d);
                }
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        for s in &mut samples {
            s.sort();
        }
        let base = (percentile(&samples[0], 0.5), percentile(&samples[0], 0.99));
        println!("| SendMessage to the Python A2A agent ({n} calls each, interleaved) | p50 | p99 | p50 overhead over direct |");
        println!("|---|---|---|---|");
        let names = [
            "direct (HTTP client → agent)",
            "bridge, same node (`tool.invoke` on A → agent)",
            "bridge, over the mesh (`tool.invoke` on B → A → agent)",
            "A2A face (`POST /a2a` on B → mesh → A → agent)",
        ];
        for (name, s) in names.iter().zip(&samples) {
            let (p50, p99) = (percentile(s, 0.5), percentile(s, 0.99));
            println!(
                "| {name} | {:.2} ms | {:.2} ms | {:+.2} ms |",
                ms(p50),
                ms(p99),
                ms(p50) - ms(base.0)
            );
        }
        let _ = base.1;
    });
}
