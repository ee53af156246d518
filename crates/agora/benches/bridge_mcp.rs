//! The cost of the MCP → mesh bridge (Hyperspace spec §10.1): `tool.invoke` from node B of a
//! tool bridged on node A (B → mesh → A → stdio child → A → mesh → B, measured at B's JSON-RPC
//! client), against the same `tools/call` made directly by a Python `mcp` client to the same
//! kind of server (`tests/fixtures/mcp_direct_bench.py`, timed inside Python). The server is
//! `tests/fixtures/mcp_dynamic.py` (Python `mcp` 2.3.0, stdio, tool `echo`). Same run, after a
//! warm-up; p50/p99 of each and the overhead (bridged − direct).
//!
//! Run: `AGORA_BRIDGE_PYTHON=<python with mcp 2.3.0> cargo bench -p agora --bench bridge_mcp`
//! (`BRIDGE_BENCH_N`, default 500 calls). Figures go in docs/performance.md ("MCP bridge").
//! This is a measurement harness, not a test: it asserts nothing about the numbers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{TEST_API_KEY, rpc_call, rpc_connect, rpc_connect_bearer, spawn_node_env};

const WARMUP: usize = 50;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

#[tokio::main]
async fn main() {
    let Some(python) = support::bridge_python() else {
        return;
    };
    let n: usize = std::env::var("BRIDGE_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(500);
    let dir = tempfile::tempdir().unwrap();
    // the calls are measured, not the face's rate limits
    let unlimited = [
        ("AGORA_RPC_CONN_RATE", "10000000"),
        ("AGORA_RPC_KEY_RATE", "10000000"),
    ];
    let mut env_a = unlimited.to_vec();
    env_a.push(("AGORA_API_KEY", TEST_API_KEY));
    let a = spawn_node_env(&dir.path().join("a"), &[], 30, &[], &env_a);
    let b = spawn_node_env(
        &dir.path().join("b"),
        &[a.p2p.as_str()],
        30,
        &[],
        &unlimited,
    );
    let mut at_a = rpc_connect_bearer(&a.rpc, TEST_API_KEY).await;
    let r = rpc_call(
        &mut at_a,
        1,
        "bridge.registerMCPServer",
        json!({"url": "stdio://bench", "command": python, "args": [fixture("mcp_dynamic.py")],
               "tools": ["echo"]}),
    )
    .await;
    let tool = r["result"]["tools"][0]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned();
    let mut at_b = rpc_connect(&b.rpc).await;
    support::discover_tool(
        &mut at_b,
        json!({"query": "bench.echo"}),
        &tool,
        Duration::from_secs(30),
    )
    .await
    .expect("B discovers the bridged tool");

    let mut bridged = Vec::with_capacity(n);
    for i in 0..(WARMUP + n) {
        let params = json!({"toolId": tool, "params": {"message": format!("m{i}")}});
        let t = Instant::now();
        let r = rpc_call(&mut at_b, 10 + i as u64, "tool.invoke", params).await;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        assert!(r["result"]["result"]["result"].is_string(), "{r}");
        if i >= WARMUP {
            bridged.push(ms);
        }
    }
    let out = std::process::Command::new(&python)
        .args([
            fixture("mcp_direct_bench.py"),
            n.to_string(),
            WARMUP.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let direct: Vec<f64> = serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    bridged.sort_by(f64::total_cmp);
    let mut direct = direct;
    direct.sort_by(f64::total_cmp);
    let (bp50, bp99) = (percentile(&bridged, 0.5), percentile(&bridged, 0.99));
    let (dp50, dp99) = (percentile(&direct, 0.5), percentile(&direct, 0.99));
    println!(
        "MCP bridge, {n} calls after {WARMUP} warm-up, echo of a Python mcp 2.3.0 stdio server"
    );
    println!("| path | p50 ms | p99 ms |");
    println!("|---|---|---|");
    println!("| direct (Python mcp client → server, stdio) | {dp50:.2} | {dp99:.2} |");
    println!("| bridged (B tool.invoke → mesh → A → server) | {bp50:.2} | {bp99:.2} |");
    println!(
        "| overhead (bridged − direct) | {:.2} | {:.2} |",
        bp50 - dp50,
        bp99 - dp99
    );
}
