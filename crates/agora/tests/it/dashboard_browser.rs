//! The dashboard in a real browser: headless Chromium driven through WebDriver (`chromedriver`,
//! the `fantoccini` client) against three real nodes in a line A–B–C on 127.0.0.1, with an agent
//! on each face — AGH agents in a channel, Hyperspace tools registered over JSON-RPC on A and on
//! B, an agent registered in A's Agent Name Service over AGTP. A's page must show what A holds
//! (its PeerId, its connected peers, the channel's present agents as A's HTTP API lists them, the
//! local and the remote tool, the ANS agent), then show an agent joining the channel on C
//! without a reload, and its directory search box find A's tool with its source, trust, online
//! state and explanation. Screenshots are saved under the target directory
//! (`target/tmp/dashboard.png`, `dashboard-directory.png` with the search's results;
//! `dashboard-failed.png` when the page does not show the mesh).
//!
//! Needs Debian's `chromium` and `chromium-driver`; without them the test prints one `skipped:`
//! line, unless `AGORA_REQUIRE_EXTERNAL=1` (CI), which makes that a failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agora_agtp::manifest::Transition;
use agora_node::faces::agtp::client::{self, Transport};
use agora_node::faces::agtp::tls::Roots;
use fantoccini::{Client, ClientBuilder, Locator};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::json;

use crate::support::{self, Agent, Node, connected, eventually, peer_ids, rpc_connect, spawn_node};

const WAIT: Duration = Duration::from_secs(30);
const CHANNEL: &str = "ops";

/// `chromedriver` on a free loopback port, in a process group of its own with the Chromium it
/// starts; the whole group is killed on drop, so a failing test leaves no browser behind.
pub(crate) struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // chromedriver leaves its browser running when it is killed: kill the whole group.
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) async fn start_driver(chromedriver: &Path) -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(chromedriver)
        .arg(format!("--port={port}"))
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let up = eventually(Duration::from_secs(20), async || {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    assert!(up.is_some(), "chromedriver listens on {port}");
    driver
}

pub(crate) async fn browser(driver: &Driver, chromium: &Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1400,2200"],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a WebDriver session")
}

/// The `attr` attribute of every element matching `css`.
async fn attrs(page: &Client, css: &str, attr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in page.find_all(Locator::Css(css)).await.unwrap_or_default() {
        if let Ok(Some(v)) = e.attr(attr).await {
            out.insert(v);
        }
    }
    out
}

async fn text(page: &Client, css: &str) -> String {
    match page.find(Locator::Css(css)).await {
        Ok(e) => e.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// The agents the page shows present in [`CHANNEL`].
async fn shown_agents(page: &Client) -> BTreeSet<String> {
    let css = format!("#agh-channels [data-channel={CHANNEL}] [data-agent]");
    attrs(page, &css, "data-agent").await
}

/// How many snapshots the page has applied (`#last-update[data-seq]`).
async fn applied(page: &Client) -> u64 {
    let seq = attrs(page, "#last-update", "data-seq").await;
    seq.first().and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// Where the test's files go: `target/tmp`.
fn artefact(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// Saves a screenshot of `page` to `target/tmp/<name>` and says where, past the harness's
/// output capture (so CI logs show it for a passing test too).
async fn screenshot(page: &Client, name: &str) {
    let path = artefact(name);
    match page.screenshot().await {
        Ok(png) => {
            std::fs::write(&path, png).unwrap();
            let line = format!("dashboard screenshot: {}\n", path.display());
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "no screenshot: {e}");
        }
    }
}

/// Fails the test with `what`, a screenshot and the start of the page's source.
async fn give_up(page: &Client, what: &str) -> ! {
    screenshot(page, "dashboard-failed.png").await;
    let source = page.source().await.unwrap_or_default();
    let end = source
        .char_indices()
        .map(|(i, _)| i)
        .nth(6000)
        .unwrap_or(source.len());
    panic!("{what}; the page:\n{}", &source[..end]);
}

/// A–B–C in a line (A with the ANS governance key in `config`), once B is connected to both.
async fn line(dir: &Path, config: &Path) -> (Node, Node, Node) {
    let a = spawn_node(
        &dir.join("a"),
        &[],
        30,
        &["--config", config.to_str().unwrap()],
    );
    let b = spawn_node(&dir.join("b"), &[&a.p2p], 30, &[]);
    let c = spawn_node(&dir.join("c"), &[&b.p2p], 30, &[]);
    let formed = eventually(WAIT, async || {
        let on_b = connected(&b.http).await;
        (on_b.contains(&a.peer_id) && on_b.contains(&c.peer_id)).then_some(())
    })
    .await;
    assert!(formed.is_some(), "A–B–C connect");
    (a, b, c)
}

async fn register_tool(rpc: &str, name: &str) -> (support::Ws, String) {
    let mut provider = rpc_connect(rpc).await;
    let tool = support::register_tool(
        &mut provider,
        json!({"name": name, "description": "echoes its input", "schema": {"type": "object"},
               "capabilities": ["echo"]}),
    )
    .await;
    (provider, tool)
}

/// Registers and activates `agt-browser` in `node`'s Agent Name Service over AGTP.
async fn activate_ans_agent(node: &Node, gov: &agora_agtp::signature::AnsSigningKey) {
    let agtp = node.agtp.strip_prefix("agtp://").unwrap().to_owned();
    let transport = Transport::for_host("127.0.0.1", false, false, &Roots::WebPki).unwrap();
    let manifest = json!({
        "canonical_id": "agt-browser",
        "manifest_uri": "agtp://127.0.0.1/agents/agt-browser",
        "agent_label": "browser test agent",
        "org_domain": "example.org",
        "governance_zone": "zone:test",
        "trust_tier": 2,
        "behavioral_trust_score": 0.9,
        "supported_methods": ["QUERY"],
        "authority_scope_categories": ["documents:query"],
        "job_description": "answers questions in the dashboard test",
    });
    let request = support::agtp_lifecycle_request(
        gov,
        Transition::Activate,
        "agt-browser",
        Some(&manifest),
        None,
    );
    let activated = client::request(&agtp, &transport, &request, WAIT)
        .await
        .expect("the name server answers");
    assert_eq!(
        activated.status.0,
        200,
        "{}",
        String::from_utf8_lossy(&activated.body)
    );
}

/// The attribute `attr` of the first element matching `css`, if any.
async fn attr(page: &Client, css: &str, attr: &str) -> Option<String> {
    page.find(Locator::Css(css))
        .await
        .ok()?
        .attr(attr)
        .await
        .ok()?
}

/// The directory panel: a query typed into the search box lists `tool` (registered on `node`)
/// with its source, trust, online state, how to call it and a non-empty explanation; an empty
/// query shows the hint and no result; a query the node refuses shows its message.
async fn search_the_directory(page: &Client, node: &Node, tool: &str) {
    let hint = text(page, "#dir-status").await;
    assert!(hint.starts_with("Type what you need"), "the hint: {hint}");
    let input = page.find(Locator::Css("#dir-query")).await.unwrap();
    input
        .send_keys("a tool that echoes its input")
        .await
        .unwrap();
    let record = format!("hyperspace:{}:{tool}", node.peer_id);
    let item = format!("#dir-results [data-result=\"{record}\"]");
    let shown = eventually(WAIT, async || {
        let source = attr(page, &item, "data-source").await?;
        let trust = attr(page, &item, "data-trust").await?;
        let online = attr(page, &item, "data-online").await?;
        let call = text(page, &format!("{item} [data-field=call]")).await;
        let explain = text(page, &format!("{item} [data-field=explain]")).await;
        let tags = (
            text(page, &format!("{item} [data-field=source]")).await,
            text(page, &format!("{item} [data-field=trust]")).await,
            text(page, &format!("{item} [data-field=online]")).await,
        );
        (source == "hyperspace"
            && trust == "signed"
            && online == "true"
            && tags == ("hyperspace".into(), "signed".into(), "online".into())
            && call == format!("rpc tool.invoke {tool}")
            && explain.contains("relevance"))
        .then_some(())
    })
    .await;
    if shown.is_none() {
        give_up(
            page,
            "the directory panel lists the tool registered on A with its source, trust, online \
             state, call and explanation",
        )
        .await;
    }
    screenshot(page, "dashboard-directory.png").await;
    // Online only: the live tool stays.
    page.find(Locator::Css("#dir-online"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let kept = eventually(WAIT, async || {
        let status = text(page, "#dir-status").await;
        (status.contains("result") && attr(page, &item, "data-online").await? == "true")
            .then_some(())
    })
    .await;
    assert!(kept.is_some(), "online only keeps the live tool");
    // Cleared: no result, the hint again.
    input.clear().await.unwrap();
    input.send_keys(" ").await.unwrap();
    let cleared = eventually(WAIT, async || {
        let results = page
            .find_all(Locator::Css("#dir-results li"))
            .await
            .unwrap_or_default();
        (results.is_empty()
            && text(page, "#dir-status")
                .await
                .starts_with("Type what you need"))
        .then_some(())
    })
    .await;
    assert!(
        cleared.is_some(),
        "an empty query shows the hint and nothing else"
    );
    // Refused (a query over 1024 bytes): the node's message, in the page.
    page.execute(
        "const q = document.getElementById('dir-query'); q.removeAttribute('maxlength'); \
         q.value = 'x'.repeat(1100); q.dispatchEvent(new Event('input')); return true;",
        vec![],
    )
    .await
    .unwrap();
    let refused = eventually(WAIT, async || {
        let status = text(page, "#dir-status").await;
        let class = attr(page, "#dir-status", "class").await?;
        (status.contains("1024") && class.contains("bad")).then_some(status)
    })
    .await;
    assert!(
        refused.is_some(),
        "a refused query shows the node's message"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_shows_the_live_mesh_in_chromium() {
    let (Some(chromium), Some(chromedriver)) = (
        support::find_on_path("chromium"),
        support::find_on_path("chromedriver"),
    ) else {
        support::external(
            "chromium and chromedriver",
            false,
            "apt-get install chromium chromium-driver",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let gov = support::agtp_governance_key(dir.path());
    let cfg = dir.path().join("agora.toml");
    std::fs::write(&cfg, "[agtp]\ngovernance_keys = [\"gov.pub.json\"]\n").unwrap();
    let (a, b, c) = line(dir.path(), &cfg).await;

    // An agent on each face: AGH in a channel on A; Hyperspace tools on A (local to the page) and
    // on B (known to A from B's capability card); the ANS on A.
    let mut first = Agent::connect(&a.agh, "browser-agent-1", CHANNEL).await;
    first.greet(&["echo"]).await;
    let (_local_provider, local_tool) = register_tool(&a.rpc, "browser-echo-a").await;
    let (_remote_provider, remote_tool) = register_tool(&b.rpc, "browser-echo-b").await;
    activate_ans_agent(&a, &gov).await;

    let driver = start_driver(&chromedriver).await;
    let page = browser(&driver, &chromium).await;
    page.goto(&format!("{}/", a.http)).await.unwrap();

    // The page shows A's live state: what A's own HTTP API says at the same time.
    let shown = eventually(WAIT, async || {
        let peer_id = text(&page, "#node-peer-id").await;
        let peers = attrs(&page, "#peers [data-peer]", "data-peer").await;
        let live_peers: BTreeSet<String> = connected(&a.http).await.into_iter().collect();
        let agents = shown_agents(&page).await;
        let live_agents: BTreeSet<String> = peer_ids(&a.http, CHANNEL).await.into_iter().collect();
        let tools = attrs(&page, "#hs-tools [data-tool]", "data-tool").await;
        let ans = attrs(&page, "#ans-agents [data-agent-id]", "data-agent-id").await;
        let ring = attrs(&page, "#hs-ring [data-member]", "data-member").await;
        let live_ring: BTreeSet<String> =
            support::get_json(&a.http, "/status").await["memory"]["ring"]
                .as_array()
                .map(|r| {
                    r.iter()
                        .filter_map(|m| m["peer_id"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
        (peer_id == a.peer_id
            && peers.contains(&b.peer_id)
            && peers == live_peers
            && agents.contains("browser-agent-1")
            && agents == live_agents
            && tools.contains(&local_tool)
            && tools.contains(&remote_tool)
            && ans.contains("agt-browser")
            && ring.len() == 3
            && ring == live_ring)
            .then_some(())
    })
    .await;
    if shown.is_none() {
        give_up(
            &page,
            "the page shows A's PeerId, A's connected peers (B among them), the agents present \
             in ops, the tools of A and B, the ANS agent and the three members of the memory ring",
        )
        .await;
    }

    // An agent joins the channel on C: the same document (no reload) shows it on A's page, with
    // more snapshots applied.
    let before = applied(&page).await;
    assert!(before >= 1, "snapshots applied: {before}");
    let marker = page
        .execute("window.__sameDocument = true; return true;", vec![])
        .await
        .unwrap();
    assert_eq!(marker, json!(true));
    let mut joiner = Agent::connect(&c.agh, "browser-agent-2", CHANNEL).await;
    joiner.greet(&["echo"]).await;
    let updated = eventually(WAIT, async || {
        let agents = shown_agents(&page).await;
        (agents.contains("browser-agent-1") && agents.contains("browser-agent-2")).then_some(())
    })
    .await;
    if updated.is_none() {
        give_up(
            &page,
            "A's page shows the agent that joined ops on C without a reload",
        )
        .await;
    }
    let same = page
        .execute("return window.__sameDocument === true;", vec![])
        .await
        .unwrap();
    assert_eq!(same, json!(true), "the page was not reloaded");
    let after = applied(&page).await;
    assert!(after > before, "snapshots kept coming ({before} → {after})");

    search_the_directory(&page, &a, &local_tool).await;

    screenshot(&page, "dashboard.png").await;
    page.close().await.unwrap();
    drop((first, joiner, a, b, c));
}
