//! The TypeScript SDK (`sdk/typescript`) against this build's node: `tsc --noEmit` (strict),
//! the build, its `node --test` suites (every namespace, errors, providers, reconnection, the AGH
//! client, and the spec's Examples 1–3 and the §6.4 channel run as programs), and the package
//! made with `npm pack`; then the built SDK in headless Chromium (the browser's own WebSocket).
//! Needs Node.js ≥ 20 and `npm ci` in `sdk/typescript`, and Chromium with its WebDriver.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::support;

fn sdk_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../sdk/typescript")
}

/// Runs `program args…` in `sdk/typescript` with the node binary; asserts it succeeds and
/// returns its output.
fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(sdk_dir())
        .env("AGORA_BIN", env!("CARGO_BIN_EXE_agora"))
        .env("AGORA_REQUIRE_EXTERNAL", "1")
        .env_remove("AGORA_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("the program runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{program} {args:?} failed:\n{text}");
    text
}

#[test]
fn the_typescript_sdk_type_checks_builds_passes_its_tests_and_packs() {
    let present = support::on_path("node")
        && support::on_path("npm")
        && sdk_dir().join("node_modules/typescript").is_dir();
    if !support::external(
        "node, npm and sdk/typescript/node_modules",
        present,
        "Node.js >= 20, then: cd sdk/typescript && npm ci",
    ) {
        return;
    }
    run("npm", &["run", "--silent", "typecheck"]);
    run("npm", &["run", "--silent", "build"]);
    let said = run("npm", &["test", "--silent"]);
    assert!(said.contains("# fail 0"), "{said}");
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_str().unwrap();
    run(
        "npm",
        &["pack", "--ignore-scripts", "--pack-destination", dir],
    );
    let packed: Vec<String> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        packed
            .iter()
            .any(|f| f.starts_with("agora-mesh-") && f.ends_with(".tgz")),
        "{packed:?}"
    );
    in_a_browser();
}

/// The built SDK in headless Chromium, on the browser's own WebSocket: a page served from
/// `sdk/typescript` (`test/browser/index.html`) connects to a node that lets its origin in,
/// provides a tool, discovers and invokes it, pays on a §6.4 channel and catches a typed error.
fn in_a_browser() {
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // The page's server: Python's, printing its port.
        let mut server = Command::new("python3")
            .args(["-u", "-m", "http.server", "0", "--bind", "127.0.0.1"])
            .current_dir(sdk_dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 serves the page");
        let stdout = server.stdout.take().unwrap();
        let first = std::io::BufRead::lines(std::io::BufReader::new(stdout))
            .next()
            .unwrap()
            .unwrap();
        let port = first
            .split(" port ")
            .nth(1)
            .and_then(|p| p.split_whitespace().next())
            .unwrap()
            .to_owned();
        let origin = format!("http://127.0.0.1:{port}");
        let dir = tempfile::tempdir().unwrap();
        let node =
            support::spawn_node(&dir.path().join("n"), &[], 30, &["--allow-origin", &origin]);
        let driver = crate::dashboard_browser::start_driver(&chromedriver).await;
        let page = crate::dashboard_browser::browser(&driver, &chromium).await;
        page.goto(&format!("{origin}/test/browser/index.html#{}", node.rpc))
            .await
            .unwrap();
        let said = support::eventually(std::time::Duration::from_secs(30), async || {
            let text = page
                .find(fantoccini::Locator::Id("result"))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            (text != "running").then_some(text)
        })
        .await
        .expect("the page finishes");
        let _ = page.close().await;
        let _ = server.kill();
        let _ = server.wait();
        let r: serde_json::Value = serde_json::from_str(&said).unwrap();
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(r["globalWebSocket"], true, "{r}");
        assert_eq!(r["peerId"], node.peer_id.as_str(), "{r}");
        assert_eq!(r["discovered"], true, "{r}");
        assert_eq!(r["invoked"]["echoed"], "hello", "{r}");
        assert_eq!(r["receipt"]["totalSpent"], serde_json::json!(0.006), "{r}");
        assert_eq!(r["receipt"]["refund"], serde_json::json!(4.994), "{r}");
        assert_eq!(r["error"]["name"], "SessionNotFound", "{r}");
        assert_eq!(r["error"]["code"], -32001, "{r}");
        assert_eq!(r["error"]["isAgoraError"], true, "{r}");
    });
}
