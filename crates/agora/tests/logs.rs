//! The node's log on a pipe: no ANSI escapes, `--log-format json` gives one JSON object per
//! line with stable field names, and `[log] level` sets what is written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{eventually, spawn_node_logged};

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread")]
async fn a_piped_log_has_no_colour_escapes() {
    let dir = tempfile::tempdir().unwrap();
    let (_node, log) = spawn_node_logged(&dir.path().join("n"), &[]);
    let lines = eventually(WAIT, async || {
        let l = log.lines();
        l.iter().any(|l| l.contains("payments wallet")).then_some(l)
    })
    .await
    .expect("the node logs its start");
    for line in &lines {
        assert!(!line.contains('\u{1b}'), "an escape in {line:?}");
    }
    assert!(lines.iter().any(|l| l.contains(" INFO ")), "{lines:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn json_lines_parse_with_stable_fields() {
    let dir = tempfile::tempdir().unwrap();
    let (_node, log) = spawn_node_logged(&dir.path().join("n"), &["--log-format", "json"]);
    let lines = eventually(WAIT, async || {
        let l = log.lines();
        l.iter().any(|l| l.contains("payments wallet")).then_some(l)
    })
    .await
    .expect("the node logs its start");
    for line in &lines {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert!(v["timestamp"].is_string(), "{line}");
        assert!(v["level"].is_string(), "{line}");
        assert!(v["target"].is_string(), "{line}");
        assert!(v["fields"]["message"].is_string(), "{line}");
    }
    let wallet = lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["fields"]["message"] == "payments wallet")
        .unwrap();
    assert!(
        wallet["fields"]["wallet"]
            .as_str()
            .is_some_and(|w| w.starts_with("0x")),
        "the event's fields are keys of their own: {wallet}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_configured_level_is_honoured_and_a_bad_format_is_refused() {
    if std::env::var_os("RUST_LOG").is_some() || std::env::var_os("AGORA_LOG").is_some() {
        // they take precedence over [log] level by design
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("quiet.toml");
    std::fs::write(&cfg, "[log]\nlevel = \"error\"\n").unwrap();
    let (node, log) =
        spawn_node_logged(&dir.path().join("n"), &["--config", cfg.to_str().unwrap()]);
    // The node is up (it printed its listening lines); give it a request and read its log.
    let _ = support::get_json(&node.http, "/healthz").await;
    let lines = log.lines();
    assert!(
        lines
            .iter()
            .all(|l| !l.contains(" INFO ") && !l.contains(" WARN ")),
        "{lines:?}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agora"))
        .args(["node", "--log-format", "xml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("log-format"));
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[log]\nformat = \"xml\"\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agora"))
        .args(["node", "--config", bad.to_str().unwrap()])
        .args(["--data", dir.path().join("m").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("log.format"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
