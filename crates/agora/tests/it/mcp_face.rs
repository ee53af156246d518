//! The node as an MCP server (`/mcp`, both eras) and `agora mcp`, against independent MCP
//! clients: the Python SDK (`mcp` 2.3.0, auto → 2026-07-28), the TypeScript SDK
//! (`@modelcontextprotocol/sdk` 1.32.2, 2025-11-25) and the MCP conformance suite in both eras
//! (`@modelcontextprotocol/conformance` 0.1.16 for 2025-11-25, with
//! `tests/interop/mcp-server-expected-failures.yml`; 0.2.0-alpha.12, installed as
//! `mcp-conformance-2026-07-28`, for 2026-07-28, with `mcp-server-expected-failures-2026-07-28.yml`).
//! The tool called is hosted on another node: node B's provider registers it, node A serves it.
//! Both SDKs' clients reach it through `/mcp` (HTTP) and through `agora mcp` (stdio).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::support::{
    self, Node, bridge_python, connected, discover_tool, eventually, interop_dir, node_peers,
    register_tool, rpc_connect, spawn_node,
};

/// The fixtures directory (`tests/fixtures`).
fn fixture(name: &str) -> String {
    format!("{}/../../tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A fixture client driven line by line (see `tests/fixtures/mcp_client.py`).
struct Driven {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Value>,
}

impl Driven {
    fn start(program: &str, args: &[&str]) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .current_dir(interop_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{program} starts: {e}"));
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        // Bounded: the reader thread waits while the test has not read 64 lines.
        let (tx, lines) = mpsc::channel(64);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let v = serde_json::from_str(&line).unwrap_or(Value::String(line));
                if tx.blocking_send(v).is_err() {
                    return;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
        }
    }

    async fn next(&mut self, what: &str) -> Value {
        tokio::time::timeout(Duration::from_secs(20), self.lines.recv())
            .await
            .unwrap_or_else(|_| panic!("{what} in time"))
            .unwrap_or_else(|| panic!("{what}: the client ended"))
    }

    async fn ask(&mut self, cmd: Value) -> Value {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
        self.next(&cmd.to_string()).await
    }

    async fn list(&mut self) -> Vec<Value> {
        let r = self.ask(json!({"op": "list"})).await;
        r["tools"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Registers `name` (with `price`, if any) on `node` through a new provider connection that
/// answers every `tool.invoke`: `{"echo": message}`, or −32006 when the message is `"down"`.
/// Returns the id.
async fn provide(node: &Node, name: &str, price: Option<Value>) -> String {
    let mut provider = rpc_connect(&node.rpc).await;
    let mut params = json!({
        "name": name,
        "description": format!("{name}: echoes a message"),
        "schema": {"type": "object", "properties": {"message": {"type": "string"}},
                   "required": ["message"]},
        "capabilities": ["echo"]
    });
    if let Some(price) = price {
        params["price"] = price;
    }
    let id = register_tool(&mut provider, params).await;
    tokio::spawn(async move {
        while let Some(Ok(msg)) = provider.next().await {
            let Ok(text) = msg.to_text() else { continue };
            let Ok(req) = serde_json::from_str::<Value>(text) else {
                continue;
            };
            if req["method"] != "tool.invoke" {
                continue;
            }
            let message = req["params"]["params"]["message"].clone();
            let answer = if message == "down" {
                json!({"jsonrpc": "2.0", "id": req["id"],
                       "error": {"code": -32006, "message": "Peer Unavailable"}})
            } else {
                json!({"jsonrpc": "2.0", "id": req["id"], "result": {"echo": message}})
            };
            let _ = provider
                .send(Message::Text(answer.to_string().into()))
                .await;
        }
    });
    id
}

/// A and B (joined to A), connected, with B's tools `echo-text` and `priced-echo` (5 points a
/// call) known to A.
async fn pair(dir: &std::path::Path) -> (Node, Node, String) {
    let a = spawn_node(&dir.join("a"), &[], 30, &[]);
    let b = spawn_node(&dir.join("b"), &[&a.p2p], 30, &[]);
    let ok = eventually(Duration::from_secs(20), async || {
        connected(&a.http).await.contains(&b.peer_id).then_some(())
    })
    .await;
    assert!(ok.is_some(), "A and B connect");
    let tool = provide(&b, "echo-text", None).await;
    let priced = provide(&b, "priced-echo", Some(json!({"points": 5}))).await;
    let mut client = rpc_connect(&a.rpc).await;
    for id in [&tool, &priced] {
        let found = discover_tool(
            &mut client,
            json!({"query": "echo"}),
            id,
            Duration::from_secs(20),
        )
        .await;
        assert!(found.is_some(), "A finds B's tool {id}");
    }
    (a, b, tool)
}

/// `agora mcp --node <node> <extra>` driven by the Python client over stdio.
fn agora_mcp(python: &str, node: &str, extra: &[&str]) -> Driven {
    let script = fixture("mcp_client.py");
    let mut args = vec![
        script.as_str(),
        "stdio",
        env!("CARGO_BIN_EXE_agora"),
        "mcp",
        "--node",
        node,
    ];
    args.extend_from_slice(extra);
    Driven::start(python, &args)
}

fn named<'t>(tools: &'t [Value], name: &str) -> Option<&'t Value> {
    tools.iter().find(|t| t["name"] == name)
}

/// One plain HTTP request; the status.
fn status(method: &str, url: &str, headers: &[(&str, &str)], body: &str) -> u16 {
    let mut req = ureq::http::Request::builder()
        .method(method)
        .uri(url)
        .header("connection", "close");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .into();
    agent
        .run(req.body(body.to_owned()).unwrap())
        .unwrap()
        .status()
        .as_u16()
}

/// The node's own `agora.directory.search` on `/mcp`, through rmcp's Streamable HTTP client (no
/// external program): listed; a Hyperspace tool registered on the node is found with its
/// source, trust, online state and how to call it, as structured content and as one text line;
/// a bad `limit` is a tool error naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_is_searched_through_the_mcp_face() {
    use rmcp::ServiceExt as _;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::StreamableHttpClientTransport;

    const TOOL: &str = "agora.directory.search";
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("n"), &[], 30, &[]);
    let mut provider = rpc_connect(&node.rpc).await;
    let id = register_tool(
        &mut provider,
        json!({"name": "invoice-reader", "description": "Reads supplier invoices and extracts totals",
               "schema": {"input": {"type": "object"}}, "capabilities": ["invoices", "ocr"]}),
    )
    .await;
    let transport = StreamableHttpClientTransport::from_uri(format!("{}/mcp", node.http));
    let client = ().serve(transport).await.expect("an MCP session");
    let tools = client.list_all_tools().await.unwrap();
    let listed = tools.iter().find(|t| t.name == TOOL).expect("listed");
    assert_eq!(listed.input_schema["required"], json!(["query"]));
    assert!(listed.input_schema["properties"]["filters"]["properties"]["online"].is_object());

    let call = async |arguments: Value| -> Value {
        let params =
            CallToolRequestParams::new(TOOL).with_arguments(arguments.as_object().unwrap().clone());
        serde_json::to_value(client.call_tool(params).await.unwrap()).unwrap()
    };
    let found = eventually(Duration::from_secs(15), async || {
        let r = call(json!({"query": "extract totals from invoices",
                            "filters": {"source": "hyperspace", "online": true}, "limit": 5}))
        .await;
        let hits = r["structuredContent"]["results"].as_array()?;
        hits.iter()
            .any(|h| h["call"]["target"] == id.as_str())
            .then_some(r)
    })
    .await
    .expect("the registered tool is found through /mcp");
    assert_ne!(found["isError"], true, "{found}");
    let hit = &found["structuredContent"]["results"][0];
    assert_eq!(hit["call"]["target"], id.as_str(), "{found}");
    assert_eq!(
        (&hit["source"], &hit["trust"]["level"], &hit["online"]),
        (&json!("hyperspace"), &json!("signed"), &json!(true))
    );
    assert!(!hit["explain"]["text"].as_str().unwrap().is_empty());
    let text = found["content"][0]["text"].as_str().unwrap();
    let line = text.lines().next().unwrap();
    assert!(
        line.contains("hyperspace signed online invoice-reader")
            && line.ends_with(&format!("call: rpc tool.invoke {id}")),
        "{text}"
    );

    // Bad arguments: a tool error naming the field.
    for (arguments, field) in [
        (json!({"query": "invoices", "limit": 0}), "limit"),
        (
            json!({"query": "invoices", "filters": {"trust": "sworn"}}),
            "filters.trust",
        ),
    ] {
        let bad = call(arguments).await;
        assert_eq!(bad["isError"], true, "{bad}");
        let text = bad["content"][0]["text"].as_str().unwrap();
        assert!(text.contains(field), "{field}: {text}");
    }
    let _ = client.cancel().await;
    drop(provider);
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// Python (modern), TypeScript (legacy) and `agora mcp` (stdio, driven by Python) list and call
/// B's tool through A; each sees a new tool appear (`list_changed`); a foreign Origin is 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_clients_of_both_eras_list_and_call_a_tool_of_another_node() {
    if !node_peers() {
        return;
    }
    let Some(python) = bridge_python() else {
        return;
    };
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (a, b, tool) = pair(dir.path()).await;
    let url = format!("{}/mcp", a.http);

    // Python, auto → 2026-07-28.
    let mut py = Driven::start(&python, &[&fixture("mcp_client.py"), &url]);
    assert_eq!(py.next("the era").await["era"], "2026-07-28");
    let tools = py.list().await;
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names[..4],
        [
            "agora.tools.search",
            "agora.memory.store",
            "agora.memory.search",
            "agora.directory.search"
        ]
    );
    let echo = named(&tools, "echo-text").expect("B's tool is listed");
    assert_eq!(echo["_meta"]["org.agora-mesh/toolId"], tool.as_str());
    assert_eq!(echo["_meta"]["org.agora-mesh/peerId"], b.peer_id.as_str());
    assert_eq!(
        echo["inputSchema"]["properties"]["message"]["type"],
        "string"
    );
    let r = py
        .ask(json!({"op": "call", "name": "echo-text", "arguments": {"message": "hi"}}))
        .await;
    assert_eq!(r["structuredContent"], json!({"echo": "hi"}), "{r}");
    assert_eq!(r["content"][0]["text"], r#"{"echo":"hi"}"#);
    assert_eq!(r["isError"], false);
    let r = py
        .ask(json!({"op": "call", "name": "echo-text", "arguments": {"message": "down"}}))
        .await;
    assert_eq!(r["isError"], true, "{r}");
    assert!(
        r["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("peer unavailable")
    );
    // A priced tool called without payment: a tool error naming the challenge.
    let priced = named(&tools, "priced-echo").expect("the priced tool is listed");
    // As the card states it (amounts are decimal strings).
    assert_eq!(
        priced["_meta"]["org.agora-mesh/price"],
        json!({"points": "5"})
    );
    let r = py
        .ask(json!({"op": "call", "name": "priced-echo", "arguments": {"message": "hi"}}))
        .await;
    assert_eq!(r["isError"], true, "{r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("payment required") && text.contains("challenge"),
        "{text}"
    );
    // The node's own memory tools.
    let r = py
        .ask(json!({"op": "call", "name": "agora.memory.store",
                    "arguments": {"content": "the mesh speaks MCP"}}))
        .await;
    assert_eq!(r["isError"], false, "{r}");
    let r = py
        .ask(json!({"op": "call", "name": "agora.memory.search",
                    "arguments": {"query": "mesh speaks MCP"}}))
        .await;
    assert_eq!(
        r["structuredContent"]["memories"][0]["content"], "the mesh speaks MCP",
        "{r}"
    );
    let r = py.ask(json!({"op": "call", "name": "no-such-tool"})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = py
        .ask(json!({"op": "call", "name": "agora.tools.search", "arguments": {"query": "echo"}}))
        .await;
    assert_eq!(
        r["structuredContent"]["tools"][0]["id"],
        tool.as_str(),
        "{r}"
    );

    // TypeScript SDK 1.32.2: a legacy session.
    let mut ts = Driven::start("node", &[&fixture("mcp_client.mjs"), &url]);
    assert_eq!(ts.next("the era").await["era"], "2025-11-25");
    assert!(named(&ts.list().await, "echo-text").is_some());
    let r = ts
        .ask(json!({"op": "call", "name": "echo-text", "arguments": {"message": "legacy"}}))
        .await;
    assert_eq!(r["structuredContent"], json!({"echo": "legacy"}), "{r}");

    // `agora mcp` over stdio, driven by the Python client.
    let mut stdio = agora_mcp(&python, &a.http, &[]);
    assert_eq!(stdio.next("the era").await["era"], "2026-07-28");
    assert!(named(&stdio.list().await, "echo-text").is_some());
    let r = stdio
        .ask(json!({"op": "call", "name": "echo-text", "arguments": {"message": "stdio"}}))
        .await;
    assert_eq!(r["structuredContent"], json!({"echo": "stdio"}), "{r}");

    // `agora mcp` over stdio, driven by the TypeScript client (a legacy session on stdio).
    let agora = env!("CARGO_BIN_EXE_agora");
    let ts_stdio_args = [
        fixture("mcp_client.mjs"),
        "--stdio".into(),
        agora.into(),
        "mcp".into(),
        "--node".into(),
        a.http.clone(),
    ];
    let ts_stdio_args: Vec<&str> = ts_stdio_args.iter().map(String::as_str).collect();
    let mut ts_stdio = Driven::start("node", &ts_stdio_args);
    assert_eq!(ts_stdio.next("the era").await["era"], "2025-11-25");
    let r = ts_stdio
        .ask(json!({"op": "call", "name": "echo-text", "arguments": {"message": "ts-stdio"}}))
        .await;
    assert_eq!(r["structuredContent"], json!({"echo": "ts-stdio"}), "{r}");

    // list_changed: a new tool on B reaches every client.
    for client in [&mut py, &mut ts, &mut stdio, &mut ts_stdio] {
        assert_eq!(client.ask(json!({"op": "listen"})).await["listening"], true);
    }
    let _second = provide(&b, "second-tool", None).await;
    for client in [&mut py, &mut ts, &mut stdio, &mut ts_stdio] {
        assert_eq!(client.next("tools/list_changed").await["changed"], true);
        assert!(named(&client.list().await, "second-tool").is_some());
    }

    // A foreign Origin: 403 on POST (the serving layer) and on the GET stream (rmcp).
    let url2 = url.clone();
    let (post, get) = tokio::task::spawn_blocking(move || {
        let evil = ("origin", "http://evil.example");
        let json_ct = ("content-type", "application/json");
        let accept = ("accept", "application/json, text/event-stream");
        (
            status("POST", &url2, &[evil, json_ct, accept], INIT),
            status("GET", &url2, &[evil, ("accept", "text/event-stream")], ""),
        )
    })
    .await
    .unwrap();
    assert_eq!((post, get), (403, 403));
    // A foreign Host (DNS rebinding): refused by the serving layer.
    let addr = a.http.trim_start_matches("http://").to_owned();
    let answer = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "POST /mcp HTTP/1.1\r\nhost: evil.example\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{INIT}",
            INIT.len()
        )
        .unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        answer
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 421"), "{answer}");
    eprintln!("mcp_face clients: {:?}", started.elapsed());
}

/// The conformance suite's server scenarios of both eras (0.1.16: 2025-06-18 and 2025-11-25;
/// 0.2.0-alpha.12: 2026-07-28) against a node's `/mcp`, with the committed baselines; and the API key on `/mcp` and `agora mcp` when
/// the node has one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_conformance_suite_passes_with_its_baseline() {
    if !node_peers() {
        return;
    }
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("c"), &[], 30, &[]);
    let keyed = support::spawn_node_with_key(dir.path());
    // A tool in the mesh: discovery answers at once (an empty one waits for the DHT and gossip).
    let _tool = provide(&node, "echo-text", None).await;

    // Both suites run in the background while the keyed node is checked: 0.1.16's 2025-11-25
    // scenarios (cumulative: 2025-06-18 too), and 0.2.0-alpha.12's for 2026-07-28 (0.1.16 has
    // none), each with its committed baseline.
    let run_suite = |package: &str, era: &[&str], baseline: &str| {
        let url = format!("{}/mcp", node.http);
        let bundle = format!("node_modules/{package}/dist/index.js");
        let mut args = vec![
            "--import".to_owned(),
            fixture("mcp_conformance_node20.mjs"),
            bundle,
            "server".into(),
            "--url".into(),
            url,
            "--expected-failures".into(),
            baseline.to_owned(),
        ];
        args.extend(era.iter().map(|a| (*a).to_owned()));
        tokio::task::spawn_blocking(move || {
            Command::new("node")
                .current_dir(interop_dir())
                .args(args)
                .output()
                .unwrap()
        })
    };
    let legacy = run_suite(
        "@modelcontextprotocol/conformance",
        &["--spec-version", "2025-11-25"],
        "mcp-server-expected-failures.yml",
    );
    let modern = run_suite(
        "mcp-conformance-2026-07-28",
        &["--requirements", "2026-07-28"],
        "mcp-server-expected-failures-2026-07-28.yml",
    );
    let keyed_url = format!("{}/mcp", keyed.http);
    let (without, with) = tokio::task::spawn_blocking(move || {
        let h = [
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ];
        let auth = format!("Bearer {}", support::TEST_API_KEY);
        let mut with_key = h.to_vec();
        with_key.push(("authorization", &auth));
        (
            status("POST", &keyed_url, &h, INIT),
            status("POST", &keyed_url, &with_key, INIT),
        )
    })
    .await
    .unwrap();
    assert_eq!((without, with), (401, 200));
    // `agora mcp` takes the key as the other client commands do.
    let agora = env!("CARGO_BIN_EXE_agora");
    let refused = Command::new(agora)
        .args(["mcp", "--node", &keyed.http])
        .env_remove("AGORA_API_KEY")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1), "no key: exit 1");
    if let Some(python) = bridge_python() {
        let mut stdio = agora_mcp(&python, &keyed.http, &["--api-key", support::TEST_API_KEY]);
        assert_eq!(stdio.next("the era").await["era"], "2026-07-28");
        assert!(named(&stdio.list().await, "agora.tools.search").is_some());
    }

    for (suite, passes) in [
        (legacy, &["✓ tools-list", "✓ server-initialize"][..]),
        (modern, &["✓ tools-list", "✓ http-header-validation"][..]),
    ] {
        let output = suite.await.unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "conformance: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        for pass in passes {
            assert!(stdout.contains(pass), "{pass}: {stdout}");
        }
    }
    eprintln!("mcp_face conformance: {:?}", started.elapsed());
}
