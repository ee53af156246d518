//! End-to-end benchmarks of real `agora node` processes on 127.0.0.1 (bench profile):
//! - AGH delivery latency (agent → node → mesh → node → agent), p50/p99, across 3 and 20 nodes;
//! - say-broadcast throughput between two agents on different nodes;
//! - idle node resident memory and start-up time (process start → all `listening on` lines).
//!
//! - Hyperspace tools across 3 nodes: `tool.discover` latency (card known, and the first call on a
//!   node that just joined) and `tool.invoke` round trips.
//!
//! - Hyperspace memory across 3 nodes: `memory.store` round trips (lexical embedder, and
//!   all-MiniLM-L6-v2 when `AGORA_MINILM_DIR` names the installed model), `memory.search` with
//!   `MEMORY_BENCH_N` (default 100,000) memories spread over the 3 nodes, and `state.getSession`
//!   answered while the memory workers embed.
//!
//! - Hyperspace self-improving across 3 nodes in a line: `improving.recordTrajectory` on A →
//!   admitted on B (1 hop) and C (2 hops), p50/p99, beside AGH delivery over the same kind of
//!   line in the same run; `improving.getExemplars` on a 10,000-trajectory library, p50/p99,
//!   beside the same selection in process (`Library::exemplars`).
//!
//! - Micropayments: `micropayments.channel.pay` on one channel, latency (one client) and
//!   throughput (16 clients on the same channel, payments serialised by the channel), with the
//!   payee on the same node and on another node (each payment durable before its answer).
//!
//! - The directory across 3 nodes in a line (issue 33): `directory.search` on A with scope
//!   `mesh` finding an AGH agent hosted on C (its catalog is only on C: the gossip ask and C's
//!   answer), scope `local` on A, and `tool.discover` on A of a tool on C in the same run.
//!
//! Run: `cargo bench -p agora --bench mesh` (prints a table; figures go in docs/performance.md);
//! `-- rpc` for JSON-RPC calls only, `-- tools` for the Hyperspace tool figures only, `-- memory`
//! for the memory figures only, `-- improving` for the self-improving figures only, `-- payments`
//! for the payment channel figures only, `-- dashboard` for the dashboard's CPU cost to the node, `-- directory` for the directory
//! across nodes
//! (one minute each with no, one and eight event streams open).
//! This is a measurement harness, not a test: it asserts nothing about the numbers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{Agent, Node, connected, eventually, peer_ids, spawn_node};

const CH: &str = "bench";

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// Starts `n` nodes; node i bootstraps to nodes i-1 and (i-1)/2, giving a connected sparse mesh
/// (a line for n = 3).
async fn network(dir: &std::path::Path, n: usize) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    for i in 0..n {
        let mut boot: Vec<String> = Vec::new();
        if i > 0 {
            boot.push(nodes[i - 1].p2p.clone());
            let j = (i - 1) / 2;
            if i >= 2 && j != i - 1 {
                boot.push(nodes[j].p2p.clone());
            }
        }
        let boot_refs: Vec<&str> = boot.iter().map(String::as_str).collect();
        nodes.push(spawn_node(&dir.join(format!("n{i}")), &boot_refs, 2, &[]));
    }
    for node in nodes.iter().skip(1) {
        let http = node.http.clone();
        eventually(Duration::from_secs(30), async || {
            (!connected(&http).await.is_empty()).then_some(())
        })
        .await
        .expect("node joins");
    }
    nodes
}

/// One agent per node, all greeted and visible from node 0.
async fn agents(nodes: &[Node]) -> Vec<Agent> {
    let mut out = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let mut a = Agent::connect(&n.agh, &format!("agent.n{i}"), CH).await;
        a.greet(&[]).await;
        out.push(a);
    }
    let http = nodes[0].http.clone();
    let want = nodes.len();
    eventually(Duration::from_secs(60), async || {
        (peer_ids(&http, CH).await.len() >= want).then_some(())
    })
    .await
    .expect("every agent is visible from node 0");
    out
}

/// Latency of `say` from the agent on node 0 to the agents on every other node.
async fn latency(n: usize, messages: usize) -> (Duration, Duration, usize) {
    let dir = tempfile::tempdir().unwrap();
    let nodes = network(dir.path(), n).await;
    let mut agents = agents(&nodes).await;
    let mut sender = agents.remove(0);
    // Warm up the meshes.
    for _ in 0..20 {
        let env = sender.envelope("say", None, json!({"text": "warm-up"}));
        sender.send(&env).await;
    }
    for a in &mut agents {
        while a
            .expect(Duration::from_millis(300), |v| {
                v["body"]["text"] == "warm-up"
            })
            .await
            .is_some()
        {}
    }
    let mut samples = Vec::new();
    for k in 0..messages {
        let env = sender.envelope("say", None, json!({"text": format!("m{k}")}));
        let sent = Instant::now();
        sender.send(&env).await;
        for a in &mut agents {
            if a.expect(Duration::from_secs(5), |v| v["id"] == env["id"])
                .await
                .is_some()
            {
                samples.push(sent.elapsed());
            }
        }
    }
    samples.sort();
    let lost = messages * agents.len() - samples.len();
    (percentile(&samples, 0.5), percentile(&samples, 0.99), lost)
}

/// Sustained says per second from an agent on node 0 to an agent on node 2 (line of three),
/// with at most `window` messages in flight (sent and not yet received). Gossip has no flow
/// control of its own, so an unbounded burst measures queue overflow, not throughput.
async fn throughput(count: usize, window: usize) -> (f64, usize) {
    let dir = tempfile::tempdir().unwrap();
    let nodes = network(dir.path(), 3).await;
    let mut agents = agents(&nodes).await;
    let mut rx = agents.pop().unwrap();
    let mut tx = agents.remove(0);
    // Nobody reads for the middle agent: let it leave so its node does not queue frames for it.
    for idle in agents {
        idle.close().await;
    }
    let start = Instant::now();
    let (mut sent, mut got) = (0, 0);
    while got < count {
        while sent < count && sent - got < window {
            let env = tx.envelope("say", None, json!({"text": format!("t{sent}")}));
            tx.send(&env).await;
            sent += 1;
        }
        if rx
            .expect(Duration::from_secs(5), |v| v["kind"] == "say")
            .await
            .is_none()
        {
            break;
        }
        got += 1;
    }
    (got as f64 / start.elapsed().as_secs_f64(), got)
}

/// JSON-RPC calls per second on one connection, `window` requests in flight.
async fn rpc_calls(count: usize, window: usize) -> f64 {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let dir = tempfile::tempdir().unwrap();
    // Lift the per-connection rate limit so that the node itself is measured.
    let node = support::spawn_node_env(
        &dir.path().join("n"),
        &[],
        30,
        &[],
        &[
            ("AGORA_RPC_CONN_RATE", "10000000"),
            ("AGORA_RPC_KEY_RATE", "10000000"),
        ],
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(node.rpc.as_str())
        .await
        .unwrap();
    let create = json!({"jsonrpc": "2.0", "id": 0, "method": "state.createSession", "params": {"agentName": "bench"}});
    ws.send(Message::Text(create.to_string().into()))
        .await
        .unwrap();
    let Some(Ok(Message::Text(t))) = ws.next().await else {
        panic!("session")
    };
    let session =
        serde_json::from_str::<serde_json::Value>(t.as_str()).unwrap()["result"]["sessionId"]
            .clone();
    let start = Instant::now();
    let (mut sent, mut got) = (0usize, 0usize);
    while got < count {
        while sent < count && sent - got < window {
            let req = json!({"jsonrpc": "2.0", "id": sent + 1, "method": "guard.checkBudget",
                             "params": {"sessionId": session, "estimatedCost": 0.01}});
            ws.send(Message::Text(req.to_string().into()))
                .await
                .unwrap();
            sent += 1;
        }
        match ws.next().await {
            Some(Ok(Message::Text(_))) => got += 1,
            _ => break,
        }
    }
    got as f64 / start.elapsed().as_secs_f64()
}

/// Hyperspace across 3 nodes (A–B–C): a tool registered on C, discovered and invoked from A.
/// Returns (warm discover p50/p99, first discover on a newly joined node p50/max, invoke p50/p99).
async fn hyperspace_tools(samples: usize) -> [(Duration, Duration); 3] {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let dir = tempfile::tempdir().unwrap();
    // Lift the JSON-RPC rate limits so that the nodes themselves are measured.
    let unlimited = [
        ("AGORA_RPC_CONN_RATE", "10000000"),
        ("AGORA_RPC_KEY_RATE", "10000000"),
    ];
    let a = &support::spawn_node_env(&dir.path().join("a"), &[], 30, &[], &unlimited);
    let b = &support::spawn_node_env(&dir.path().join("b"), &[&a.p2p], 30, &[], &unlimited);
    let c = &support::spawn_node_env(&dir.path().join("c"), &[&b.p2p], 30, &[], &unlimited);
    eventually(Duration::from_secs(20), async || {
        let on_b = connected(&b.http).await;
        (on_b.contains(&a.peer_id) && on_b.contains(&c.peer_id)).then_some(())
    })
    .await
    .expect("A–B–C connect");
    let mut provider = support::rpc_connect(&c.rpc).await;
    let r = support::rpc_call(
        &mut provider,
        1,
        "tool.register",
        json!({
        "name": "web-search", "description": "Search the web", "schema": {},
        "capabilities": ["search"]}),
    )
    .await;
    let tool = r["result"]["toolId"].as_str().unwrap().to_owned();
    // The provider answers every invocation at once.
    let (mut tx, mut rx) = provider.split();
    tokio::spawn(async move {
        while let Some(Ok(Message::Text(t))) = rx.next().await {
            let req: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
            let answer = json!({"jsonrpc": "2.0", "id": req["id"], "result": {"ok": true}});
            if tx
                .send(Message::Text(answer.to_string().into()))
                .await
                .is_err()
            {
                break;
            }
        }
    });
    let query = json!({"query": "web search", "capabilities": ["search"]});
    let found = |r: &serde_json::Value| {
        r["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    };
    let mut client = support::rpc_connect(&a.rpc).await;
    let mut id = 10;
    eventually(Duration::from_secs(30), async || {
        id += 1;
        found(&support::rpc_call(&mut client, id, "tool.discover", query.clone()).await)
            .then_some(())
    })
    .await
    .expect("A discovers C's tool");
    let mut warm = Vec::new();
    for _ in 0..samples {
        id += 1;
        let t = Instant::now();
        let r = support::rpc_call(&mut client, id, "tool.discover", query.clone()).await;
        warm.push(t.elapsed());
        assert!(found(&r), "{r}");
    }
    // A miss goes through every tier: local, the DHT, and the gossip ask's 1.5 s wait.
    let mut miss = Vec::new();
    for _ in 0..5 {
        id += 1;
        let t = Instant::now();
        let r = support::rpc_call(
            &mut client,
            id,
            "tool.discover",
            json!({"query": "", "capabilities": ["teleport"]}),
        )
        .await;
        miss.push(t.elapsed());
        assert_eq!(r["result"]["tools"], json!([]), "{r}");
    }
    miss.sort();
    println!(
        "| tool.discover on A that nobody can answer (local → DHT → gossip ask), 5 calls | p50 {:.0} ms |",
        percentile(&miss, 0.5).as_secs_f64() * 1e3
    );
    let mut invoke = Vec::new();
    for _ in 0..samples {
        id += 1;
        let t = Instant::now();
        let r = support::rpc_call(
            &mut client,
            id,
            "tool.invoke",
            json!({"toolId": tool, "params": {}}),
        )
        .await;
        invoke.push(t.elapsed());
        assert_eq!(r["result"]["result"]["ok"], true, "{r}");
    }
    let mut cold = Vec::new();
    let mut knew = 0;
    for i in 0..10 {
        let d = spawn_node(&dir.path().join(format!("d{i}")), &[&a.p2p], 30, &[]);
        eventually(Duration::from_secs(20), async || {
            connected(&d.http).await.contains(&a.peer_id).then_some(())
        })
        .await
        .expect("D joins");
        let mut on_d = support::rpc_connect(&d.rpc).await;
        let before = support::get_json(&d.http, "/hyperspace/cards").await;
        if before["cards"].as_array().is_some_and(|c| !c.is_empty()) {
            knew += 1;
        }
        let t = Instant::now();
        let r = support::rpc_call(&mut on_d, 1, "tool.discover", query.clone()).await;
        cold.push(t.elapsed());
        if !found(&r) {
            println!(
                "first discover on a new node found nothing after {:?}: {r}",
                t.elapsed()
            );
        }
    }
    for v in [&mut warm, &mut invoke, &mut cold] {
        v.sort();
    }
    println!("(new nodes that already knew a card before their first call: {knew} of 10)");
    [
        (percentile(&warm, 0.5), percentile(&warm, 0.99)),
        (percentile(&cold, 0.5), percentile(&cold, 1.0)),
        (percentile(&invoke, 0.5), percentile(&invoke, 0.99)),
    ]
}

/// CPU time (user + system) of process `pid` in seconds, from `/proc/<pid>/stat`.
fn cpu_secs(pid: u32) -> f64 {
    let ticks = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // the fields after the command name, which is in parentheses
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    // USER_HZ is 100 on Linux
    ticks as f64 / 100.0
}

/// The dashboard's cost to the node (`docs/performance.md` "The dashboard's cost"): A's CPU over a minute with no dashboard open,
/// then with one and with eight event streams open (each read as a browser would), on a line of
/// three nodes with an agent in a channel on each and a tool on C.
async fn dashboard_bench() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const SPAN: Duration = Duration::from_secs(60);
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_node(&dir.path().join("a"), &[], 30, &[]);
    let b = spawn_node(&dir.path().join("b"), &[&a.p2p], 30, &[]);
    let c = spawn_node(&dir.path().join("c"), &[&b.p2p], 30, &[]);
    let mut agents = Vec::new();
    for (i, n) in [&a, &b, &c].iter().enumerate() {
        let mut agent = Agent::connect(&n.agh, &format!("bench-agent-{i}"), "ops").await;
        agent.greet(&["echo"]).await;
        agents.push(agent);
    }
    let mut provider = support::rpc_connect(&c.rpc).await;
    let _tool = support::register_tool(
        &mut provider,
        serde_json::json!({"name": "bench-echo", "description": "echoes", "schema": {"type": "object"}, "capabilities": ["echo"]}),
    )
    .await;
    // settle: connections, greets, cards
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pid = a.child.id();
    let measure = async |viewers: usize| {
        let host = a.http.trim_start_matches("http://").to_owned();
        let mut streams = Vec::new();
        for _ in 0..viewers {
            let mut s = tokio::net::TcpStream::connect(&host).await.unwrap();
            s.write_all(
                format!("GET /dashboard/events HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
            streams.push(tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut bytes = 0usize;
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    bytes += n;
                }
                bytes
            }));
        }
        let before = cpu_secs(pid);
        tokio::time::sleep(SPAN).await;
        let used = cpu_secs(pid) - before;
        for s in streams {
            s.abort();
        }
        used / SPAN.as_secs_f64() * 100.0
    };
    let idle = measure(0).await;
    let one = measure(1).await;
    let eight = measure(8).await;
    let snapshot = support::get_json(&a.http, "/dashboard/snapshot").await;
    println!("| measure | value |");
    println!("|---|---|");
    println!("| node A's CPU, no dashboard open, 60 s | {idle:.2} % of a core |");
    println!(
        "| … one dashboard open (event stream read) | {one:.2} % (+{:.2}) |",
        one - idle
    );
    println!(
        "| … eight dashboards open | {eight:.2} % (+{:.2}) |",
        eight - idle
    );
    println!("| snapshot size | {} bytes |", snapshot.to_string().len());
    drop(agents);
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let only_rpc = std::env::args().any(|a| a == "rpc");
    let only_tools = std::env::args().any(|a| a == "tools");
    let only_memory = std::env::args().any(|a| a == "memory");
    let only_improving = std::env::args().any(|a| a == "improving");
    let only_payments = std::env::args().any(|a| a == "payments");
    let only_dashboard = std::env::args().any(|a| a == "dashboard");
    let only_directory = std::env::args().any(|a| a == "directory");
    rt.block_on(async {
        if only_directory {
            let samples = std::env::var("DIRECTORY_BENCH_N").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
            directory_bench(samples).await;
            return;
        }
        if only_dashboard {
            dashboard_bench().await;
            return;
        }
        if only_payments {
            payments_bench().await;
            return;
        }
        if only_improving {
            improving_bench().await;
            return;
        }
        if only_memory {
            memory_bench().await;
            return;
        }
        if only_tools {
            let [warm, cold, invoke] = hyperspace_tools(500).await;
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            println!("| tool.discover on A of a tool on C (card known), 500 calls | p50 {:.2} ms, p99 {:.2} ms |", ms(warm.0), ms(warm.1));
            println!("| first tool.discover on a node that just joined A, 10 nodes | p50 {:.1} ms, max {:.1} ms |", ms(cold.0), ms(cold.1));
            println!("| tool.invoke from A of C's tool (provider answers at once), 500 calls | p50 {:.2} ms, p99 {:.2} ms |", ms(invoke.0), ms(invoke.1));
            return;
        }
        if only_rpc {
            for window in [1, 64] {
                let rate = rpc_calls(20_000, window).await;
                println!("| JSON-RPC guard.checkBudget calls on one connection, {window} in flight | {rate:.0} calls/s |");
            }
            return;
        }
        // Start-up time and idle memory of a fresh node.
        let mut starts = Vec::new();
        let mut rss = Vec::new();
        for _ in 0..10 {
            let dir = tempfile::tempdir().unwrap();
            let t = Instant::now();
            let node = spawn_node(&dir.path().join("n"), &[], 30, &[]);
            starts.push(t.elapsed());
            let http = node.http.clone();
            // Idle: served one request, nothing else going on.
            let _ = support::get_json(&http, "/healthz").await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            rss.push(rss_kib(node.child.id()));
        }
        starts.sort();
        rss.sort_unstable();
        println!("| measure | value |");
        println!("|---|---|");
        println!("| start-up (spawn → listening lines), median of 10 | {:.1} ms |", percentile(&starts, 0.5).as_secs_f64() * 1e3);
        println!("| idle RSS, median of 10 | {:.1} MiB |", rss[rss.len() / 2] as f64 / 1024.0);
        for (n, msgs) in [(3, 500), (20, 200)] {
            let (p50, p99, lost) = latency(n, msgs).await;
            println!(
                "| say delivery latency, {n} nodes ({msgs} messages × {} receivers) | p50 {:.2} ms, p99 {:.2} ms, {lost} lost |",
                n - 1,
                p50.as_secs_f64() * 1e3,
                p99.as_secs_f64() * 1e3
            );
        }
        for window in [64, 512] {
            let (rate, got) = throughput(20_000, window).await;
            println!("| say broadcast throughput A→C over B, 20,000 messages, {window} in flight | {rate:.0} envelopes/s ({got} delivered) |");
        }
    });
}

/// The directory across A–B–C: `directory.search` from A (scope `mesh`, finding an AGH agent
/// whose catalog only C holds), scope `local` on A, and `tool.discover` from A of C's tool.
async fn directory_bench(samples: usize) {
    let dir = tempfile::tempdir().unwrap();
    let unlimited = [
        ("AGORA_RPC_CONN_RATE", "10000000"),
        ("AGORA_RPC_KEY_RATE", "10000000"),
    ];
    let a = &support::spawn_node_env(&dir.path().join("a"), &[], 30, &[], &unlimited);
    let b = &support::spawn_node_env(&dir.path().join("b"), &[&a.p2p], 30, &[], &unlimited);
    let c = &support::spawn_node_env(&dir.path().join("c"), &[&b.p2p], 30, &[], &unlimited);
    eventually(Duration::from_secs(20), async || {
        let on_b = connected(&b.http).await;
        (on_b.contains(&a.peer_id) && on_b.contains(&c.peer_id)).then_some(())
    })
    .await
    .expect("A–B–C connect");
    let mut agent = Agent::connect(&c.agh, "scribe-bench", "general").await;
    agent.greet(&[]).await;
    let catalog = json!([{"id": "meeting-transcripts",
        "summary": "Transcribes recorded meetings and phone calls into text",
        "outcome": "a timestamped transcript with speaker labels"}]);
    eventually(Duration::from_secs(20), async || {
        let r = support::http_json(
            "PUT",
            &c.http,
            "/agh/v0/catalogs/scribe-bench",
            Some(&catalog.to_string()),
        )
        .await;
        (r["peer_id"] == "scribe-bench").then_some(())
    })
    .await
    .expect("C holds the catalog");
    let mut provider = support::rpc_connect(&c.rpc).await;
    let r = support::rpc_call(
        &mut provider,
        1,
        "tool.register",
        json!({"name": "web-search",
        "description": "Search the web", "schema": {}, "capabilities": ["search"]}),
    )
    .await;
    assert!(r["result"]["toolId"].is_string(), "{r}");
    let mut client = support::rpc_connect(&a.rpc).await;
    let mesh = json!({"query": "meeting transcripts", "filters": {"source": "agh"}});
    let has = |r: &serde_json::Value| r["result"]["count"].as_u64().unwrap_or(0) > 0;
    let mut id = 10;
    eventually(Duration::from_secs(30), async || {
        id += 1;
        has(&support::rpc_call(&mut client, id, "directory.search", mesh.clone()).await)
            .then_some(())
    })
    .await
    .expect("A finds C's agent");
    let mut timed = async |method: &str, params: serde_json::Value, want: bool| {
        let mut times = Vec::with_capacity(samples);
        for _ in 0..samples {
            id += 1;
            let t = Instant::now();
            let r = support::rpc_call(&mut client, id, method, params.clone()).await;
            times.push(t.elapsed());
            if want {
                let found = has(&r)
                    || r["result"]["tools"]
                        .as_array()
                        .is_some_and(|t| !t.is_empty());
                assert!(found, "{r}");
            }
        }
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        (ms(percentile(&times, 0.5)), ms(percentile(&times, 0.99)))
    };
    let m = timed("directory.search", mesh.clone(), true).await;
    let mut local = mesh.clone();
    local["scope"] = json!("local");
    let l = timed("directory.search", local, false).await;
    let t = timed(
        "tool.discover",
        json!({"query": "web search", "capabilities": ["search"]}),
        true,
    )
    .await;
    println!(
        "| directory.search on A, scope mesh, of C's AGH agent (3 nodes in a line), {samples} calls | p50 {:.2} ms, p99 {:.2} ms |",
        m.0, m.1
    );
    println!(
        "| directory.search on A, scope local (nothing found), {samples} calls | p50 {:.2} ms, p99 {:.2} ms |",
        l.0, l.1
    );
    println!(
        "| tool.discover on A of C's tool (card known), same run, {samples} calls | p50 {:.2} ms, p99 {:.2} ms |",
        t.0, t.1
    );
    agent.close().await;
}

/// Three memory nodes in a line (A–B–C), embedding with `embedder`; waits until each sees 3
/// members. The MiniLM model is linked into each data directory from `AGORA_MINILM_DIR`.
async fn memory_nodes(dir: &std::path::Path, embedder: &str) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    for i in 0..3 {
        let data = dir.join(format!("{embedder}-{i}"));
        if embedder == "minilm" {
            let model = std::env::var_os("AGORA_MINILM_DIR").expect("AGORA_MINILM_DIR");
            let link = data.join("models").join("all-minilm-l6-v2");
            if !link.exists() {
                std::fs::create_dir_all(data.join("models")).unwrap();
                std::os::unix::fs::symlink(model, link).unwrap();
            }
        }
        let boot: Vec<&str> = nodes.last().map(|n| n.p2p.as_str()).into_iter().collect();
        nodes.push(support::spawn_node_env(
            &data,
            &boot,
            30,
            &[],
            &[("AGORA_MEMORY_EMBEDDER", embedder)],
        ));
    }
    for node in &nodes {
        let http = node.http.clone();
        eventually(Duration::from_secs(60), async || {
            (support::get_json(&http, "/status").await["memory"]["members"] == 3).then_some(())
        })
        .await
        .expect("3 memory members");
    }
    // Nodes on kept data build their graphs after they start (searches scan exactly until
    // then): measure the running state, not the start-up.
    let t = Instant::now();
    for node in &nodes {
        let http = node.http.clone();
        eventually(Duration::from_secs(600), async || {
            let s = support::get_json(&http, "/status").await;
            let indexes = s["memory"]["indexes"].as_object()?.clone();
            indexes
                .values()
                .all(|ix| ix["building"] == false)
                .then_some(())
        })
        .await
        .expect("the vector graphs are built");
    }
    if t.elapsed() > Duration::from_secs(1) {
        println!(
            "| {embedder} nodes: graphs built from the store after start | {:.1} s |",
            t.elapsed().as_secs_f64()
        );
    }
    nodes
}

/// `micropayments.channel.pay` on a channel from A to `payee`: p50/p99 of 500 payments from one
/// client, then payments per second with [`CLIENTS`] clients on the same channel.
async fn channel_pay(a: &Node, payee: &str, label: &str) {
    /// Clients paying at once (each paced under the face's 200 requests/s per connection, so
    /// together they can offer 3,200 payments/s).
    const CLIENTS: u64 = 16;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut ws = support::rpc_connect(&a.rpc).await;
    let opened = support::rpc_call(
        &mut ws,
        1,
        "micropayments.channel.open",
        json!({"payee": payee, "budgetAtomic": "1000000000000", "currency": "USDC"}),
    )
    .await;
    let ch = opened["result"]["channelId"].as_str().unwrap().to_owned();
    let pay =
        |id: u64| json!({"channelId": ch, "amountAtomic": 3000, "memo": format!("call {id}")});
    for i in 0..WARM_UP {
        support::rpc_call(&mut ws, 10 + i, "micropayments.channel.pay", pay(i)).await;
    }
    let mut times = Vec::new();
    let mut pace = tokio::time::interval(Duration::from_millis(5));
    for i in 0..500 {
        pace.tick().await;
        let t = Instant::now();
        let r = support::rpc_call(&mut ws, 1000 + i, "micropayments.channel.pay", pay(i)).await;
        times.push(t.elapsed());
        assert!(r["result"]["nonce"].is_u64(), "{r}");
    }
    times.sort();
    println!(
        "| channel.pay {label}, one client, 500 payments | p50 {:.2} ms, p99 {:.2} ms |",
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.99))
    );
    let started = Instant::now();
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let rpc = a.rpc.clone();
        let ch = ch.clone();
        clients.push(tokio::spawn(async move {
            let mut ws = support::rpc_connect(&rpc).await;
            let mut pace = tokio::time::interval(Duration::from_millis(5));
            for i in 0..2_000 / CLIENTS {
                pace.tick().await;
                let r = support::rpc_call(
                    &mut ws,
                    i + 1,
                    "micropayments.channel.pay",
                    json!({"channelId": ch, "amountAtomic": 3000, "memo": format!("client {c}")}),
                )
                .await;
                assert!(r["result"]["nonce"].is_u64(), "{r}");
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    let rate = 2000.0 / started.elapsed().as_secs_f64();
    println!(
        "| channel.pay {label}, {CLIENTS} clients on the channel (each paced under 200/s), 2,000 payments | {rate:.0} payments/s |"
    );
}

async fn payments_bench() {
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_node(&dir.path().join("a"), &[], 30, &[]);
    let b = spawn_node(&dir.path().join("b"), &[a.p2p.as_str()], 30, &[]);
    let (http, peer) = (a.http.clone(), b.peer_id.clone());
    eventually(Duration::from_secs(20), async || {
        connected(&http).await.contains(&peer).then_some(())
    })
    .await
    .expect("connected");
    channel_pay(&a, &a.peer_id, "payee on the same node").await;
    channel_pay(&a, &b.peer_id, "payee on another node").await;
}

/// Calls made before a latency is measured (not counted).
const WARM_UP: u64 = 50;

/// Synthetic sentences on many subjects (deterministic).
fn sentence(i: usize) -> String {
    const WHO: [&str; 12] = [
        "The engineer",
        "A chef",
        "Our team",
        "The runner",
        "My neighbour",
        "The pilot",
        "A student",
        "The gardener",
        "The doctor",
        "An artist",
        "The farmer",
        "The driver",
    ];
    const DID: [&str; 12] = [
        "fixed the flaky build",
        "cooked a spicy curry",
        "shipped the release",
        "ran a marathon",
        "painted the fence",
        "landed in heavy wind",
        "passed the exam",
        "planted tomatoes",
        "treated a fever",
        "sketched the harbour",
        "harvested wheat",
        "crossed the mountain pass",
    ];
    const WHEN: [&str; 10] = [
        "on Monday",
        "before dawn",
        "after lunch",
        "in the rain",
        "last winter",
        "during the storm",
        "at the weekend",
        "in spring",
        "late at night",
        "this morning",
    ];
    format!(
        "{} {} {} (note {i}).",
        WHO[i % 12],
        DID[(i / 12) % 12],
        WHEN[(i / 144) % 10]
    )
}

async fn store_latency(node: &Node, n: usize) -> (Duration, Duration) {
    let mut ws = support::rpc_connect(&node.rpc).await;
    // Warm-up, not counted (the node's first embeddings make their thread pool).
    for i in 0..WARM_UP {
        support::rpc_call(
            &mut ws,
            1_000_000 + i,
            "memory.store",
            json!({"content": format!("warm-up note {i}")}),
        )
        .await;
    }
    let mut times = Vec::with_capacity(n);
    // Paced under the JSON-RPC face's 200 requests/s per connection.
    let mut pace = tokio::time::interval(Duration::from_millis(6));
    for i in 0..n {
        pace.tick().await;
        let t = Instant::now();
        let r = support::rpc_call(
            &mut ws,
            i as u64 + 1,
            "memory.store",
            json!({"content": sentence(i)}),
        )
        .await;
        times.push(t.elapsed());
        assert_eq!(r["result"]["replicas"], 3, "{r}");
    }
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

async fn memory_bench() {
    use futures::{SinkExt, StreamExt};
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let temp = tempfile::tempdir().unwrap();
    // MEMORY_BENCH_DIR keeps the filled nodes' data directories: a later run with the same
    // directory and N restarts the nodes on them (each rebuilds its index from its store) and
    // goes straight to the searches. (A kept node killed by an earlier run's panic has its
    // redb file repaired at open, which can take minutes: set AGORA_NODE_START_SECS.)
    let kept = std::env::var_os("MEMORY_BENCH_DIR").map(std::path::PathBuf::from);
    let dir = kept.clone().unwrap_or_else(|| temp.path().to_path_buf());
    let minilm = std::env::var_os("AGORA_MINILM_DIR").is_some();
    let n: usize = std::env::var("MEMORY_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let marker = dir.join(format!("filled-{n}"));
    let refill = !marker.exists();
    if refill {
        let lexical = memory_nodes(&dir, "lexical").await;
        let (p50, p99) = store_latency(&lexical[0], 500).await;
        println!(
            "| memory.store on A, 3 nodes, 3 replicas, lexical embedder, 500 calls | p50 {:.2} ms, p99 {:.2} ms |",
            ms(p50),
            ms(p99)
        );
    }
    if !minilm {
        println!("skipped: MiniLM figures (set AGORA_MINILM_DIR to the installed model)");
        return;
    }
    let nodes = memory_nodes(&dir, "minilm").await;
    let (p50, p99) = store_latency(&nodes[0], 500).await;
    println!(
        "| memory.store on A, 3 nodes, 3 replicas, all-MiniLM-L6-v2, 500 calls | p50 {:.2} ms, p99 {:.2} ms |",
        ms(p50),
        ms(p99)
    );
    if refill {
        fill(&nodes, n).await;
        if kept.is_some() {
            std::fs::write(&marker, b"").unwrap();
        }
    } else {
        println!(
            "| reused the filled nodes of {} | {n} memories |",
            marker.display()
        );
    }
    let searches: u64 = std::env::var("MEMORY_BENCH_SEARCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let mut search = support::rpc_connect(&nodes[1].rpc).await;
    // Warm-up, not counted: B has not embedded anything yet when the nodes were restarted on
    // kept data (its first embeddings make their thread pool and touch the weights).
    let mut warm = Vec::new();
    for q in 0..WARM_UP {
        let t = Instant::now();
        support::rpc_call(
            &mut search,
            1_000_000 + q,
            "memory.search",
            json!({"query": sentence(q as usize * 11 + 5), "limit": 10}),
        )
        .await;
        warm.push(t.elapsed());
    }
    warm.sort();
    println!(
        "| memory.search on B, warm-up ({WARM_UP} calls, not counted below) | p50 {:.2} ms, max {:.2} ms |",
        ms(percentile(&warm, 0.5)),
        ms(warm.last().copied().unwrap_or_default())
    );
    let mut times = Vec::new();
    let mut reported = Vec::new();
    for q in 0..searches {
        let t = Instant::now();
        let r = support::rpc_call(
            &mut search,
            q + 1,
            "memory.search",
            json!({"query": sentence(q as usize * 7 + 3), "limit": 10}),
        )
        .await;
        times.push((t.elapsed(), q));
        reported.push(r["result"]["searchTime"].as_u64().unwrap_or(0));
        assert!(
            r["result"]["memories"]
                .as_array()
                .is_some_and(|m| !m.is_empty()),
            "{r}"
        );
    }
    let mut slowest = times.clone();
    slowest.sort_by_key(|s| std::cmp::Reverse(s.0));
    let slowest: Vec<String> = slowest
        .iter()
        .take(5)
        .map(|(d, q)| {
            format!(
                "#{q} at {:.1} s: {:.1} ms (searchTime {} ms)",
                times[..usize::try_from(*q).unwrap()]
                    .iter()
                    .map(|(d, _)| d.as_secs_f64())
                    .sum::<f64>(),
                ms(*d),
                reported[usize::try_from(*q).unwrap()]
            )
        })
        .collect();
    let mut times: Vec<Duration> = times.into_iter().map(|(d, _)| d).collect();
    times.sort();
    reported.sort_unstable();
    println!(
        "| memory.search on B, {n} memories over 3 nodes, MiniLM query embedding included, {searches} calls | p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms (searchTime p50 {} ms) |",
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.99)),
        ms(percentile(&times, 0.999)),
        reported[reported.len() / 2]
    );
    println!("slowest searches: {}", slowest.join("; "));
    // state.* stays fast while the memory workers embed: a session call on A during a stream of
    // stores on A.
    let mut state = support::rpc_connect(&nodes[0].rpc).await;
    let created = support::rpc_call(
        &mut state,
        1,
        "state.createSession",
        json!({"agentName": "bench"}),
    )
    .await;
    let session = created["result"]["sessionId"].as_str().unwrap().to_owned();
    let mut idle = Vec::new();
    for k in 0..200 {
        let t = Instant::now();
        support::rpc_call(
            &mut state,
            10 + k,
            "state.getSession",
            json!({"sessionId": session}),
        )
        .await;
        idle.push(t.elapsed());
    }
    let loader_rpc = nodes[0].rpc.clone();
    let loader = tokio::spawn(async move {
        let mut ws = support::rpc_connect(&loader_rpc).await;
        for j in 0..400usize {
            let batch: Vec<serde_json::Value> = (0..8).map(|k| json!({"jsonrpc": "2.0", "id": j * 8 + k, "method": "memory.store", "params": {"content": sentence(n + j * 8 + k)}})).collect();
            ws.send(tokio_tungstenite::tungstenite::Message::Text(
                serde_json::to_string(&batch).unwrap().into(),
            ))
            .await
            .unwrap();
            let _ = ws.next().await;
        }
    });
    let mut busy = Vec::new();
    for k in 0..200 {
        let t = Instant::now();
        support::rpc_call(
            &mut state,
            1000 + k,
            "state.getSession",
            json!({"sessionId": session}),
        )
        .await;
        busy.push(t.elapsed());
    }
    loader.abort();
    idle.sort();
    busy.sort();
    println!(
        "| state.getSession on A, idle / while A embeds memory.store batches | p50 {:.2} / {:.2} ms, p99 {:.2} / {:.2} ms |",
        ms(percentile(&idle, 0.5)),
        ms(percentile(&busy, 0.5)),
        ms(percentile(&idle, 0.99)),
        ms(percentile(&busy, 0.99))
    );
}

/// Fills the three nodes to `n` memories (500 are already there): batches of 64 stores spread
/// over the three nodes.
async fn fill(nodes: &[Node], n: usize) {
    // Fill: batches of 64 stores, spread over the three nodes.
    let started = Instant::now();
    let mut conns = Vec::new();
    for node in nodes {
        conns.push(support::rpc_connect(&node.rpc).await);
    }
    // A store refused under the fill's load (−32007: a replica did not answer within 3 s; −32003)
    // is stored again in a later batch, as a client would; the refusals are counted.
    let mut i = 500;
    let mut retry: Vec<usize> = Vec::new();
    let mut refused = 0usize;
    let mut round = 0usize;
    while i < n || !retry.is_empty() {
        let mut ids: Vec<usize> = std::mem::take(&mut retry);
        let fresh = (i..(i + 64).min(n)).take(64usize.saturating_sub(ids.len()));
        let fresh: Vec<usize> = fresh.collect();
        i += fresh.len();
        ids.extend(fresh);
        let batch: Vec<serde_json::Value> = ids
            .iter()
            .map(|&j| json!({"jsonrpc": "2.0", "id": j, "method": "memory.store", "params": {"content": sentence(j)}}))
            .collect();
        let ws = &mut conns[round % 3];
        round += 1;
        for item in send_batch(ws, &batch).await {
            if item["result"]["id"].is_string() {
                continue;
            }
            let code = item["error"]["code"].as_i64();
            assert!(matches!(code, Some(-32007 | -32003)), "{item}");
            refused += 1;
            retry.push(usize::try_from(item["id"].as_u64().unwrap()).unwrap());
        }
    }
    println!("| stores refused during the fill and stored again | {refused} |");
    println!(
        "| filling {n} memories (MiniLM, batches of 64 over 3 nodes) | {:.0} s, {:.0} stores/s |",
        started.elapsed().as_secs_f64(),
        n as f64 / started.elapsed().as_secs_f64()
    );
}

/// Sends `batch` (JSON-RPC requests) on `ws` as one frame and returns the answers, skipping the
/// face's pings (tungstenite answers them itself).
async fn send_batch(ws: &mut support::Ws, batch: &[serde_json::Value]) -> Vec<serde_json::Value> {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    ws.send(Message::Text(serde_json::to_string(batch).unwrap().into()))
        .await
        .unwrap();
    loop {
        let t = match ws.next().await {
            Some(Ok(Message::Text(t))) => t,
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("connection closed: {other:?}"),
        };
        let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
        if let serde_json::Value::Array(items) = v {
            return items;
        }
    }
}

/// A distinct run `i` of the task type `bench` (1 to 4 steps, rewards spread over [0, 1]).
fn bench_run(i: usize, share: bool) -> serde_json::Value {
    let steps: Vec<serde_json::Value> = (0..1 + i % 4)
        .map(|k| json!({"action": format!("step{k}"), "tool": format!("tool-{}", (i + k) % 13), "duration": 10 + (i * 7 + k) % 500}))
        .collect();
    json!({
        "taskType": "bench",
        "input": {"query": sentence(i)},
        "output": {"answer": i},
        "steps": steps,
        "reward": ((i * 37) % 101) as f64 / 100.0,
        "share": share,
    })
}

/// Admitted trajectories on `node` (its `/status`).
async fn admitted(node: &Node) -> u64 {
    support::get_json(&node.http, "/status").await["improving"]["received"]["admitted"]
        .as_u64()
        .unwrap_or(0)
}

async fn improving_bench() {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("AGORA_IMPROVING_TASK_TYPES", "bench"),
        ("AGORA_IMPROVING_MAX_LIBRARY", "20000"),
    ];
    let mut nodes: Vec<Node> = Vec::new();
    for i in 0..3 {
        let boot: Vec<String> = nodes.last().map(|n| n.p2p.clone()).into_iter().collect();
        let boot: Vec<&str> = boot.iter().map(String::as_str).collect();
        nodes.push(support::spawn_node_env(
            &dir.path().join(format!("i{i}")),
            &boot,
            30,
            &[],
            &env,
        ));
    }
    for node in [&nodes[0], &nodes[2]] {
        let http = node.http.clone();
        eventually(Duration::from_secs(30), async || {
            let s = support::get_json(&http, "/status").await;
            (s["gossip"]["mesh"]["hyperspace/trajectories/bench"].as_u64()? >= 1).then_some(())
        })
        .await
        .expect("a trajectory mesh");
    }
    // recordTrajectory on A → admitted on B and on C.
    let mut ws = support::rpc_connect(&nodes[0].rpc).await;
    let (mut hop1, mut hop2) = (Vec::new(), Vec::new());
    for k in 0..220 {
        let (b0, c0) = (admitted(&nodes[1]).await, admitted(&nodes[2]).await);
        let t = Instant::now();
        let r = support::rpc_call(
            &mut ws,
            k + 1,
            "improving.recordTrajectory",
            bench_run(1_000_000 + k as usize, true),
        )
        .await;
        assert!(r["result"]["gossipedTo"].as_u64().unwrap_or(0) >= 1, "{r}");
        let (mut on_b, mut on_c) = (None, None);
        while on_b.is_none() || on_c.is_none() {
            if t.elapsed() > Duration::from_secs(10) {
                break;
            }
            if on_b.is_none() && admitted(&nodes[1]).await > b0 {
                on_b = Some(t.elapsed());
            }
            if on_c.is_none() && admitted(&nodes[2]).await > c0 {
                on_c = Some(t.elapsed());
            }
        }
        // The first 20 warm the meshes up.
        if k >= 20 {
            hop1.extend(on_b);
            hop2.extend(on_c);
        }
    }
    hop1.sort();
    hop2.sort();
    println!(
        "| improving.recordTrajectory on A → admitted on B (1 hop) / C (2 hops), 3 nodes, 200 runs | p50 {:.2} / {:.2} ms, p99 {:.2} / {:.2} ms, {} / {} of 200 arrived |",
        ms(percentile(&hop1, 0.5)),
        ms(percentile(&hop2, 0.5)),
        ms(percentile(&hop1, 0.99)),
        ms(percentile(&hop2, 0.99)),
        hop1.len(),
        hop2.len()
    );
    let (p50, p99, lost) = latency(3, 200).await;
    println!(
        "| AGH say delivery over a line of 3 nodes, same run (baseline) | p50 {:.2} ms, p99 {:.2} ms, {lost} lost |",
        ms(p50),
        ms(p99)
    );
    // A 10,000-trajectory library on B: batches of 50 unshared runs.
    let n = 10_000;
    let started = Instant::now();
    let mut ws = support::rpc_connect(&nodes[1].rpc).await;
    let mut i = 0;
    // Paced under the JSON-RPC face's 200 requests/s per connection (a batch counts each call).
    let mut pace = tokio::time::interval(Duration::from_millis(300));
    while i < n {
        pace.tick().await;
        let batch: Vec<serde_json::Value> = (i..(i + 50).min(n))
            .map(|j| json!({"jsonrpc": "2.0", "id": j, "method": "improving.recordTrajectory", "params": bench_run(j, false)}))
            .collect();
        for item in send_batch(&mut ws, &batch).await {
            assert!(item["result"]["trajectoryId"].is_string(), "{item}");
        }
        i += 50;
    }
    let fill = started.elapsed();
    let stats = support::rpc_call(
        &mut ws,
        1,
        "improving.getLibraryStats",
        json!({"taskType": "bench"}),
    )
    .await;
    let size = stats["result"]["total"].as_u64().unwrap_or(0);
    println!(
        "| filling a library of {size} trajectories on B (recordTrajectory, batches of 50 paced at 167 calls/s, each written before it is answered) | {:.1} s, {:.0} records/s |",
        fill.as_secs_f64(),
        n as f64 / fill.as_secs_f64()
    );
    let mut times = Vec::new();
    let mut pace = tokio::time::interval(Duration::from_millis(10));
    for q in 0..300 {
        pace.tick().await;
        let strategy = ["EXEMPLAR_LEVEL", "HYBRID", "ACCUMULATE", "DATABASE_LEVEL"][q % 4];
        let t = Instant::now();
        let r = support::rpc_call(
            &mut ws,
            q as u64 + 2,
            "improving.getExemplars",
            json!({"taskType": "bench", "limit": 3, "strategy": strategy, "minReward": 0.5}),
        )
        .await;
        times.push(t.elapsed());
        assert_eq!(
            r["result"]["exemplars"].as_array().map(Vec::len),
            Some(3),
            "{r}"
        );
    }
    times.sort();
    // The same selection in this process, on an equivalent library.
    let mut lib = agora_hyperspace::improving::Library::new(20_000);
    let rep = agora_hyperspace::improving::Reputation::new(100);
    for j in 0..n {
        let p = agora_hyperspace::improving::RecordParams::parse(
            &bench_run(j, false),
            &Default::default(),
        )
        .unwrap();
        let t = agora_hyperspace::improving::Trajectory {
            trajectory_id: format!("traj-{j:08x}"),
            task_type: p.task_type,
            input: p.input,
            output: p.output,
            steps: p.steps,
            reward: p.reward,
            metadata: p.metadata,
            peer_id: "12D3KooWbench".into(),
            created_at: j as u64,
        };
        lib.admit(
            agora_hyperspace::improving::library::Held::new(t, j as u64),
            None,
            &rep,
        );
    }
    let mut local = Vec::new();
    for q in 0..300 {
        let strategy = [
            agora_hyperspace::improving::Strategy::ExemplarLevel,
            agora_hyperspace::improving::Strategy::Hybrid,
            agora_hyperspace::improving::Strategy::Accumulate,
            agora_hyperspace::improving::Strategy::DatabaseLevel,
        ][q % 4];
        let t = Instant::now();
        let picked = lib.exemplars(3, strategy, 0.5, &rep);
        local.push(t.elapsed());
        assert_eq!(picked.len(), 3);
    }
    local.sort();
    println!(
        "| improving.getExemplars on B, library of {size}, limit 3, 4 strategies, 300 calls | p50 {:.2} ms, p99 {:.2} ms; in process (Library::exemplars) p50 {:.2} ms, p99 {:.2} ms; ratio p99 {:.1}x |",
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.99)),
        ms(percentile(&local, 0.5)),
        ms(percentile(&local, 0.99)),
        percentile(&times, 0.99).as_secs_f64() / percentile(&local, 0.99).as_secs_f64().max(1e-9)
    );
}
