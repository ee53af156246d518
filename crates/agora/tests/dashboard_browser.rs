//! The dashboard in a real browser: headless Chromium driven through WebDriver (`chromedriver`,
//! the `fantoccini` client) against three real nodes on 127.0.0.1 with an agent on each face —
//! an AGH agent in a channel, a Hyperspace tool registered over JSON-RPC, an agent registered in
//! the Agent Name Service over AGTP. The page must show what the nodes hold, and show a second
//! agent joining the channel without a reload. A screenshot is saved under the target directory.
//!
//! Needs Debian's `chromium` and `chromium-driver`; without them the test prints one `skipped:`
//! line, unless `AGORA_REQUIRE_EXTERNAL=1` (CI), which makes that a failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agora_agtp::manifest::Transition;
use agora_node::agtp::client::{self, Transport};
use agora_node::agtp::tls::Roots;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use support::{Agent, eventually, rpc_connect, spawn_node};

const WAIT: Duration = Duration::from_secs(30);

/// `chromedriver` on a free loopback port, killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_driver() -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let url = format!("http://127.0.0.1:{port}");
    let up = eventually(Duration::from_secs(20), async || {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    assert!(up.is_some(), "chromedriver listens on {port}");
    Driver { child, url }
}

async fn browser(driver: &Driver) -> Client {
    // More than one rustls provider is linked into the test; the workspace's is ring.
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1400,2200"],
        }),
    );
    ClientBuilder::rustls()
        .expect("a TLS provider")
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a WebDriver session")
}

/// The `attr` attribute of every element matching `css`.
async fn attrs(page: &Client, css: &str, attr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in page.find_all(Locator::Css(css)).await.unwrap_or_default() {
        if let Ok(Some(v)) = e.attr(attr).await {
            out.push(v);
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

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_shows_the_live_mesh_in_chromium() {
    let present = support::on_path("chromium") && support::on_path("chromedriver");
    if !support::external(
        "chromium and chromedriver",
        present,
        "apt-get install chromium chromium-driver",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let gov = support::agtp_governance_key(dir.path());
    let cfg = dir.path().join("agora.toml");
    std::fs::write(&cfg, "[agtp]\ngovernance_keys = [\"gov.pub.json\"]\n").unwrap();
    let a = spawn_node(
        &dir.path().join("a"),
        &[],
        30,
        &["--config", cfg.to_str().unwrap()],
    );
    let b = spawn_node(&dir.path().join("b"), &[&a.p2p], 30, &[]);
    let c = spawn_node(&dir.path().join("c"), &[&b.p2p], 30, &[]);

    // An agent on each face: AGH on A, a Hyperspace tool on A (so its card is A's own), ANS on A.
    let mut first = Agent::connect(&a.agh, "browser-agent-1", "ops").await;
    first.greet(&["echo"]).await;
    let mut provider = rpc_connect(&a.rpc).await;
    let tool = support::register_tool(
        &mut provider,
        json!({"name": "browser-echo", "description": "echoes", "schema": {"type": "object"},
               "capabilities": ["echo"]}),
    )
    .await;
    let agtp = a.agtp.strip_prefix("agtp://").unwrap().to_owned();
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
    let activated = client::request(
        &agtp,
        &transport,
        &support::agtp_lifecycle_request(
            &gov,
            Transition::Activate,
            "agt-browser",
            Some(&manifest),
            None,
        ),
        WAIT,
    )
    .await
    .expect("the name server answers");
    assert_eq!(
        activated.status.0,
        200,
        "{}",
        String::from_utf8_lossy(&activated.body)
    );

    let driver = start_driver().await;
    let page = browser(&driver).await;
    page.goto(&format!("{}/", a.http)).await.unwrap();
    let shown = eventually(WAIT, async || {
        let peer_id = text(&page, "#node-peer-id").await;
        let peers = attrs(&page, "#peers [data-peer]", "data-peer").await;
        let agents = attrs(
            &page,
            "#agh-channels [data-channel=ops] [data-agent]",
            "data-agent",
        )
        .await;
        let tools = attrs(&page, "#hs-tools [data-tool]", "data-tool").await;
        let ans = attrs(&page, "#ans-agents [data-agent-id]", "data-agent-id").await;
        (peer_id == a.peer_id
            && peers.contains(&b.peer_id)
            && agents.contains(&"browser-agent-1".to_owned())
            && tools.contains(&tool)
            && ans.contains(&"agt-browser".to_owned()))
        .then_some(())
    })
    .await;
    if shown.is_none() {
        let source = page.source().await.unwrap_or_default();
        panic!(
            "the page shows A's PeerId, B connected, the agent in ops, the tool and the ANS agent; page:\n{}",
            &source[..source.len().min(4000)]
        );
    }
    // A second agent joins: the same page (no reload) shows it, with more snapshots applied.
    let seq = |s: String| s.parse::<u64>().unwrap_or(0);
    let before = seq(attrs(&page, "#last-update", "data-seq").await.concat());
    assert!(before >= 1);
    let marker = page
        .execute("window.__sameDocument = true; return true;", vec![])
        .await
        .unwrap();
    assert_eq!(marker, json!(true));
    let mut second = Agent::connect(&a.agh, "browser-agent-2", "ops").await;
    second.greet(&["echo"]).await;
    let updated = eventually(WAIT, async || {
        let agents = attrs(
            &page,
            "#agh-channels [data-channel=ops] [data-agent]",
            "data-agent",
        )
        .await;
        agents.contains(&"browser-agent-2".to_owned()).then_some(())
    })
    .await;
    assert!(
        updated.is_some(),
        "the joining agent appears without a reload"
    );
    let same = page
        .execute("return window.__sameDocument === true;", vec![])
        .await
        .unwrap();
    assert_eq!(same, json!(true), "the page was not reloaded");
    let after = seq(attrs(&page, "#last-update", "data-seq").await.concat());
    assert!(after > before, "snapshots kept coming ({before} → {after})");

    let png = page.screenshot().await.unwrap();
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    std::fs::write(&path, png).unwrap();
    println!("dashboard screenshot: {}", path.display());
    page.close().await.unwrap();
    drop((first, second, c));
}
