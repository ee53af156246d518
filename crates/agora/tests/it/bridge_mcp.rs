//! The MCP → mesh bridge (Hyperspace spec §10.1 `registerMCPServer`) over real node processes and
//! independent MCP servers: node A bridges them, node B (bootstrapped to A) discovers and invokes
//! their tools. Peers: `@modelcontextprotocol/server-everything` (legacy era, stdio and Streamable
//! HTTP) and `server-filesystem` (stdio) from `tests/interop`, and a Python `mcp` 2.3.0 server of
//! ours (`tests/fixtures/mcp_dynamic.py`, modern era; also the deprecated HTTP+SSE transport).
//! One pair of nodes serves every scenario, to keep the suite's wall time small.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    self, TEST_API_KEY, Ws, eventually, rpc_call, rpc_connect_bearer, spawn_node_env,
};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn peer_dist(package: &str) -> String {
    support::interop_dir()
        .join("node_modules/@modelcontextprotocol")
        .join(package)
        .join("dist/index.js")
        .display()
        .to_string()
}

/// A free loopback port (bound then released).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A child process killed when dropped.
struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `program args` with `env`, then waits until `port` accepts connections.
async fn serve_on(program: &str, args: &[&str], env: &[(&str, &str)], port: u16) -> Peer {
    let child = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let peer = Peer(child);
    let up = eventually(Duration::from_secs(15), async || {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()
    })
    .await;
    assert!(up.is_some(), "{program} listens on {port}");
    peer
}

async fn register(ws: &mut Ws, id: u64, spec: Value) -> Value {
    rpc_call(ws, id, "bridge.registerMCPServer", spec).await
}

async fn servers(ws: &mut Ws, id: u64) -> Vec<Value> {
    let r = rpc_call(ws, id, "bridge.listMCPServers", json!({})).await;
    r["result"]["servers"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .clone()
}

async fn server(ws: &mut Ws, id: u64, name: &str) -> Value {
    servers(ws, id)
        .await
        .into_iter()
        .find(|s| s["serverId"] == name)
        .unwrap_or_else(|| panic!("{name} is listed"))
}

async fn invoke(ws: &mut Ws, id: u64, tool: &str, params: Value) -> Value {
    rpc_call(
        ws,
        id,
        "tool.invoke",
        json!({"toolId": tool, "params": params}),
    )
    .await
}

/// The tool named `name` among `tool.discover`'s answer on `ws`, once it is there.
async fn discovered(ws: &mut Ws, name: &str) -> Value {
    let mut id = 5000;
    eventually(Duration::from_secs(30), async || {
        id += 1;
        let r = rpc_call(ws, id, "tool.discover", json!({"query": name})).await;
        r["result"]["tools"]
            .as_array()?
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
    })
    .await
    .unwrap_or_else(|| panic!("{name} is discovered"))
}

/// The id of the tool named `name` in `list` (a server of `bridge.listMCPServers`).
fn tool_id(list: &Value, name: &str) -> String {
    list["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == name))
        .and_then(|t| t["toolId"].as_str())
        .unwrap_or_else(|| panic!("{name} in {list}"))
        .to_owned()
}

fn cli(node: &support::Node, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_agora"))
        .args(["bridge", "mcp"])
        .args(args)
        .args(["--rpc", &node.rpc, "--api-key", TEST_API_KEY])
        .env_remove("AGORA_TOKEN")
        .env_remove("AGORA_RPC")
        .output()
        .unwrap()
}

fn spawn_a(dir: &Path, extra: &[&str]) -> support::Node {
    spawn_node_env(dir, &[], 30, extra, &[("AGORA_API_KEY", TEST_API_KEY)])
}

#[tokio::test]
async fn mcp_servers_are_bridged_into_the_mesh() {
    if !support::node_peers() {
        return;
    }
    let Some(python) = support::bridge_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a_dir = dir.path().join("a");
    let mut a = spawn_a(&a_dir, &[]);
    let b = spawn_node_env(&dir.path().join("b"), &[a.p2p.as_str()], 30, &[], &[]);
    let mut at_a = rpc_connect_bearer(&a.rpc, TEST_API_KEY).await;
    let mut at_b = support::rpc_connect(&b.rpc).await;
    let dynamic = fixture("mcp_dynamic.py").display().to_string();

    // only the API key may bridge a server: a session token is refused
    let s = rpc_call(
        &mut at_a,
        1,
        "state.createSession",
        json!({"agentName": "x"}),
    )
    .await;
    let token = s["result"]["sessionToken"].as_str().unwrap().to_owned();
    let mut as_session = rpc_connect_bearer(&a.rpc, &token).await;
    let r = register(
        &mut as_session,
        2,
        json!({"url": "stdio://x", "command": "true"}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["data"]["reason"], "api-key-required", "{r}");

    // server-everything over stdio: the legacy era
    let r = register(
        &mut at_a,
        3,
        json!({"url": "stdio://everything", "command": "node",
               "args": [peer_dist("server-everything"), "stdio"], "tags": ["demo"]}),
    )
    .await;
    assert_eq!(r["result"]["serverId"], "everything", "{r}");
    assert!(r["result"]["tools"].as_array().unwrap().len() >= 5, "{r}");
    let everything = server(&mut at_a, 4, "everything").await;
    assert_eq!(everything["era"], "legacy", "{everything}");
    assert_eq!(everything["state"], "running", "{everything}");

    // B finds the tools, marked as bridged from MCP, and invokes them through A
    let echo = discovered(&mut at_b, "everything.echo").await;
    assert_eq!(echo["source"]["bridge"], "mcp", "{echo}");
    assert_eq!(echo["source"]["server"], "everything", "{echo}");
    assert_eq!(echo["source"]["name"], "echo", "{echo}");
    assert_eq!(echo["peerId"], a.peer_id, "{echo}");
    let caps = echo["capabilities"].as_array().unwrap();
    assert!(
        caps.contains(&json!("mcp")) && caps.contains(&json!("demo")),
        "{echo}"
    );
    let echo_id = echo["id"].as_str().unwrap().to_owned();
    let r = invoke(&mut at_b, 10, &echo_id, json!({"message": "hi"})).await;
    assert_eq!(r["result"]["result"]["result"], "Echo: hi", "{r}");
    assert_eq!(r["result"]["result"]["content"][0]["type"], "text", "{r}");
    let sum = tool_id(&everything, "everything.get-sum");
    let r = invoke(&mut at_b, 11, &sum, json!({"a": 2, "b": 3})).await;
    assert!(
        r["result"]["result"]["result"]
            .as_str()
            .unwrap_or("")
            .contains('5'),
        "{r}"
    );
    let structured = tool_id(&everything, "everything.get-structured-content");
    let r = invoke(&mut at_b, 12, &structured, json!({"location": "Chicago"})).await;
    let weather = &r["result"]["result"]["result"];
    assert!(
        weather["temperature"].is_number() && weather["conditions"].is_string(),
        "{r}"
    );
    let image = tool_id(&everything, "everything.get-tiny-image");
    let r = invoke(&mut at_b, 13, &image, json!({})).await;
    let content = r["result"]["result"]["content"].as_array().unwrap();
    let img = content
        .iter()
        .find(|c| c["type"] == "image")
        .unwrap_or_else(|| panic!("{r}"));
    assert_eq!(img["mimeType"], "image/png", "{r}");
    assert!(img["data"].as_str().unwrap().len() > 10, "{r}");
    // an MCP error is translated, never forwarded: an unknown argument value is −32602 or a result
    let r = invoke(&mut at_b, 14, &sum, json!("not an object")).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");

    // server-everything over Streamable HTTP
    let port = free_port();
    let p = port.to_string();
    let _http = serve_on(
        "node",
        &[&peer_dist("server-everything"), "streamableHttp"],
        &[("PORT", &p)],
        port,
    )
    .await;
    let r = register(
        &mut at_a,
        20,
        json!({"url": format!("http://127.0.0.1:{port}/mcp"), "name": "everything-http"}),
    )
    .await;
    assert_eq!(r["result"]["serverId"], "everything-http", "{r}");
    let listed = server(&mut at_a, 21, "everything-http").await;
    assert_eq!(listed["era"], "legacy", "{listed}");
    let echo_http = tool_id(&listed, "everything-http.echo");
    let r = invoke(&mut at_a, 22, &echo_http, json!({"message": "over http"})).await;
    assert_eq!(r["result"]["result"]["result"], "Echo: over http", "{r}");

    // server-filesystem over stdio on a temporary directory
    let files = dir.path().join("files");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("hello.txt"), "hello").unwrap();
    let files = files.canonicalize().unwrap().display().to_string();
    let r = register(
        &mut at_a,
        30,
        json!({"url": "stdio://fs", "command": "node",
               "args": [peer_dist("server-filesystem"), files],
               "tools": ["list_directory", "read_text_file"]}),
    )
    .await;
    assert_eq!(
        r["result"]["tools"].as_array().map(Vec::len),
        Some(2),
        "{r}"
    );
    let fs = server(&mut at_a, 31, "fs").await;
    let list_directory = tool_id(&fs, "fs.list_directory");
    let r = invoke(&mut at_a, 32, &list_directory, json!({"path": files})).await;
    // it answers structured content ({content: "<listing>"}) next to the text
    let listing = &r["result"]["result"]["result"]["content"];
    assert!(
        listing.as_str().unwrap_or("").contains("[FILE] hello.txt"),
        "{r}"
    );
    assert_eq!(r["result"]["result"]["content"][0]["type"], "text", "{r}");

    // our Python server: the modern era; its environment is the allow-list plus its own `env`
    let r = register(
        &mut at_a,
        40,
        json!({"url": "stdio://dynamic", "command": python, "args": [dynamic],
               "env": {"FIXTURE_VAR": "given"}}),
    )
    .await;
    assert_eq!(r["result"]["serverId"], "dynamic", "{r}");
    let dyn_server = server(&mut at_a, 41, "dynamic").await;
    assert_eq!(dyn_server["era"], "modern", "{dyn_server}");
    assert_eq!(dyn_server["protocolVersion"], "2026-07-28", "{dyn_server}");
    let getenv = tool_id(&dyn_server, "dynamic.getenv");
    for (name, want) in [("AGORA_API_KEY", "<unset>"), ("FIXTURE_VAR", "given")] {
        let r = invoke(&mut at_a, 42, &getenv, json!({"name": name})).await;
        assert_eq!(r["result"]["result"]["result"], want, "{name}: {r}");
    }
    let r = invoke(&mut at_a, 43, &getenv, json!({"name": "PATH"})).await;
    assert_ne!(r["result"]["result"]["result"], "<unset>", "{r}");

    // a tool added at runtime, announced: B discovers it; removed: it is gone
    let grow = tool_id(&dyn_server, "dynamic.grow");
    let shrink = tool_id(&dyn_server, "dynamic.shrink");
    let r = invoke(&mut at_a, 44, &grow, json!({})).await;
    assert_eq!(r["result"]["result"]["result"], "grown", "{r}");
    let extra = discovered(&mut at_b, "dynamic.extra").await;
    let extra_id = extra["id"].as_str().unwrap().to_owned();
    let r = invoke(&mut at_b, 45, &extra_id, json!({})).await;
    assert_eq!(r["result"]["result"]["result"], "extra", "{r}");
    let r = invoke(&mut at_a, 46, &shrink, json!({})).await;
    assert_eq!(r["result"]["result"]["result"], "shrunk", "{r}");
    let mut id = 6000;
    let gone = eventually(Duration::from_secs(30), async || {
        id += 1;
        let r = rpc_call(
            &mut at_b,
            id,
            "tool.discover",
            json!({"query": "dynamic.extra"}),
        )
        .await;
        let tools = r["result"]["tools"].as_array()?;
        (!tools.iter().any(|t| t["id"] == extra_id.as_str())).then_some(())
    })
    .await;
    assert!(gone.is_some(), "dynamic.extra leaves B's view");

    // the child dies: its tools answer −32006, then it is restarted and they come back
    let echo_dyn = tool_id(&dyn_server, "dynamic.echo");
    let pid = dyn_server["pid"].as_u64().unwrap().to_string();
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .unwrap()
            .success()
    );
    let r = invoke(&mut at_a, 50, &echo_dyn, json!({"message": "x"})).await;
    assert_eq!(r["error"]["code"], -32006, "{r}");
    let mut id = 7000;
    let back = eventually(Duration::from_secs(15), async || {
        id += 1;
        let r = invoke(&mut at_a, id, &echo_dyn, json!({"message": "back"})).await;
        (r["result"]["result"]["result"] == "back").then_some(())
    })
    .await;
    assert!(
        back.is_some(),
        "the restarted server serves its tools again"
    );
    let restarted = server(&mut at_a, 51, "dynamic").await;
    assert_eq!(restarted["restarts"], 1, "{restarted}");

    // a priced bridged tool asks for payment like any priced tool; the allow-list filters
    let r = register(
        &mut at_a,
        60,
        json!({"url": "stdio://priced", "command": python, "args": [dynamic],
               "tools": ["echo"], "price": {"points": 5}}),
    )
    .await;
    let priced = r["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .clone();
    assert_eq!(priced.len(), 1, "{r}");
    let r = invoke(
        &mut at_a,
        61,
        priced[0].as_str().unwrap(),
        json!({"message": "m"}),
    )
    .await;
    assert_eq!(r["error"]["code"], -32002, "{r}");

    // a 2024-11-05 HTTP+SSE server: a clear "unsupported transport", at once
    let port = free_port();
    let p = port.to_string();
    let _sse = serve_on(&python, &[&dynamic, "sse", &p], &[], port).await;
    let started = std::time::Instant::now();
    let r = register(
        &mut at_a,
        70,
        json!({"url": format!("http://127.0.0.1:{port}/sse"), "name": "old"}),
    )
    .await;
    let message = r["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(message.contains("unsupported transport"), "{r}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert!(
        !servers(&mut at_a, 71)
            .await
            .iter()
            .any(|s| s["serverId"] == "old")
    );

    // the command line: add, list, remove
    let out = cli(
        &a,
        &[
            "add",
            "stdio://cli",
            "--command",
            &python,
            "--arg",
            &dynamic,
            "--tag",
            "t1",
            "--env",
            "K=V",
            "--tool",
            "echo",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let added: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(added["serverId"], "cli", "{added}");
    let out = cli(&a, &["list"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("cli") && table.contains("modern"), "{table}");
    let out = cli(&a, &["remove", "cli"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(&a, &["list", "--json"]);
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        !listed["servers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["serverId"] == "cli")
    );

    // servers registered over JSON-RPC come back after a restart; [[bridge.mcp]] is bridged too
    drop(at_a);
    a.terminate().await;
    let toml = dir.path().join("agora.toml");
    std::fs::write(
        &toml,
        format!(
            "[[bridge.mcp]]\nname = \"configured\"\nurl = \"stdio://dynamic\"\ncommand = {:?}\nargs = [{:?}]\n",
            python, dynamic
        ),
    )
    .unwrap();
    let a = spawn_a(&a_dir, &["--config", toml.to_str().unwrap()]);
    let mut at_a = rpc_connect_bearer(&a.rpc, TEST_API_KEY).await;
    let mut id = 8000;
    let up = eventually(Duration::from_secs(20), async || {
        id += 1;
        let list = servers(&mut at_a, id).await;
        let running = |n: &str| {
            list.iter()
                .any(|s| s["serverId"] == n && s["state"] == "running")
        };
        (running("dynamic") && running("configured") && running("everything")).then_some(list)
    })
    .await
    .expect("the stored and configured servers run again");
    let configured = up.iter().find(|s| s["serverId"] == "configured").unwrap();
    assert_eq!(configured["origin"], "config", "{configured}");
    let r = rpc_call(
        &mut at_a,
        90,
        "bridge.unregisterMCPServer",
        json!({"serverId": "configured"}),
    )
    .await;
    assert_eq!(r["error"]["data"]["reason"], "config", "{r}");
    // the ids are stable across the restart
    let r = invoke(&mut at_a, 91, &echo_id, json!({"message": "again"})).await;
    assert_eq!(r["result"]["result"]["result"], "Echo: again", "{r}");
}
