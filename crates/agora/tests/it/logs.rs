//! The node's log on a pipe: no ANSI escapes, `--log-format json` gives one JSON object per
//! line with stable field names for the notable events (`listening`, `node started`, `peer
//! connected`, `peer disconnected`, `shutting down`, `node stopped`), and `RUST_LOG`,
//! `AGORA_LOG` and `[log] level` set what is written, in that order of precedence.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::{self, Log, eventually, spawn_node_logged_env};

const WAIT: Duration = Duration::from_secs(20);

/// The environment of a node whose log must not depend on ours: `RUST_LOG` and `AGORA_LOG`
/// empty (as if unset) unless the test sets them.
fn env<'a>(rust_log: &'a str, agora_log: &'a str) -> [(&'static str, &'a str); 2] {
    [("RUST_LOG", rust_log), ("AGORA_LOG", agora_log)]
}

/// Waits for a log line containing `needle`; returns every line so far.
async fn wait_for(log: &Log, needle: &str) -> Vec<String> {
    eventually(WAIT, async || {
        let l = log.lines();
        l.iter().any(|l| l.contains(needle)).then_some(l)
    })
    .await
    .unwrap_or_else(|| panic!("no log line with {needle:?}: {:?}", log.lines()))
}

/// Waits until the node's stderr has been read to its end.
async fn wait_ended(log: &Log) {
    eventually(WAIT, async || log.ended().then_some(()))
        .await
        .expect("the node's stderr ends");
}

/// The JSON events of `lines` whose `fields.message` is `message`.
fn events<'a>(lines: &'a [Value], message: &'a str) -> impl Iterator<Item = &'a Value> {
    lines
        .iter()
        .filter(move |v| v["fields"]["message"] == message)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_piped_log_has_no_colour_escapes() {
    let dir = tempfile::tempdir().unwrap();
    let (_node, log) = spawn_node_logged_env(&dir.path().join("n"), &[], 30, &[], &env("", ""));
    let lines = wait_for(&log, "node started").await;
    for line in &lines {
        assert!(!line.contains('\u{1b}'), "an escape in {line:?}");
    }
    assert!(lines.iter().any(|l| l.contains(" INFO ")), "{lines:?}");
    // text lines show an event's fields as key=value after its message
    assert!(
        lines
            .iter()
            .any(|l| l.contains("listening face=\"rpc\" addr=\"ws://127.0.0.1:")),
        "{lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn json_lines_parse_with_stable_fields() {
    let dir = tempfile::tempdir().unwrap();
    let json = ["--log-format", "json"];
    let (a, a_log) = spawn_node_logged_env(&dir.path().join("a"), &[], 30, &json, &env("", ""));
    let (mut b, b_log) =
        spawn_node_logged_env(&dir.path().join("b"), &[&a.p2p], 30, &json, &env("", ""));
    wait_for(&a_log, &format!("\"peer_id\":\"{}\"", b.peer_id)).await;
    assert!(b.terminate().await.success());
    wait_ended(&b_log).await;
    wait_for(&a_log, "peer disconnected").await;

    let parse = |log: &Log| -> Vec<Value> {
        log.lines()
            .iter()
            .map(|line| {
                let v: Value =
                    serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
                assert!(v["timestamp"].is_string(), "{line}");
                assert!(v["level"].is_string(), "{line}");
                assert!(v["target"].is_string(), "{line}");
                assert!(v["fields"]["message"].is_string(), "{line}");
                v
            })
            .collect()
    };
    let (a_events, b_events) = (parse(&a_log), parse(&b_log));

    // one `listening` event per face, the address as a field of its own
    let mut faces: Vec<&str> = events(&a_events, "listening")
        .map(|v| {
            assert!(v["fields"]["addr"].is_string(), "{v}");
            assert!(v["fields"]["tls"].is_boolean(), "{v}");
            assert_eq!(v["level"], "INFO");
            v["fields"]["face"].as_str().unwrap()
        })
        .collect();
    faces.sort_unstable();
    assert_eq!(faces, ["agh", "agtp", "http", "p2p", "rpc"]);
    let rpc = events(&a_events, "listening")
        .find(|v| v["fields"]["face"] == "rpc")
        .unwrap();
    assert_eq!(rpc["fields"]["addr"], a.rpc.as_str());

    let started = events(&a_events, "node started")
        .next()
        .expect("node started");
    assert_eq!(started["fields"]["peer_id"], a.peer_id.as_str());
    assert_eq!(started["fields"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(started["fields"]["data_dir"].is_string(), "{started}");
    assert!(started["fields"]["startup_ms"].is_f64(), "{started}");

    let connected = events(&a_events, "peer connected")
        .find(|v| v["fields"]["peer_id"] == b.peer_id.as_str())
        .expect("a logs b's connection");
    assert_eq!(connected["fields"]["direction"], "inbound");
    assert!(connected["fields"]["address"].is_string(), "{connected}");
    let dialled = events(&b_events, "peer connected")
        .find(|v| v["fields"]["peer_id"] == a.peer_id.as_str())
        .expect("b logs its connection to a");
    assert_eq!(dialled["fields"]["direction"], "outbound");
    let gone = events(&a_events, "peer disconnected")
        .find(|v| v["fields"]["peer_id"] == b.peer_id.as_str())
        .expect("a logs b's departure");
    assert!(gone["fields"]["cause"].is_string(), "{gone}");

    let stopping = events(&b_events, "shutting down").next().expect("b stops");
    assert!(stopping["fields"]["uptime_secs"].is_u64(), "{stopping}");
    assert_eq!(
        b_events.last().map(|v| &v["fields"]["message"]),
        Some(&Value::from("node stopped"))
    );
}

/// Starts a node with `[log] level = "warn"` and `env`, stops it, and returns its whole log.
async fn log_of_a_warn_node(dir: &Path, name: &str, env: &[(&str, &str)]) -> Vec<String> {
    let cfg = dir.join("warn.toml");
    std::fs::write(&cfg, "[log]\nlevel = \"warn\"\n").unwrap();
    let (mut node, log) = spawn_node_logged_env(
        &dir.join(name),
        &[],
        30,
        &["--config", cfg.to_str().unwrap()],
        env,
    );
    let _ = support::get_json(&node.http, "/healthz").await;
    assert!(node.terminate().await.success());
    wait_ended(&log).await;
    log.lines()
}

#[tokio::test(flavor = "multi_thread")]
async fn rust_log_then_agora_log_then_the_configured_level() {
    let dir = tempfile::tempdir().unwrap();
    let has = |lines: &[String], level: &str| lines.iter().any(|l| l.contains(level));

    // [log] level alone: nothing below WARN, not even the INFO events of a whole run
    let quiet = log_of_a_warn_node(dir.path(), "quiet", &env("", "")).await;
    assert!(
        !has(&quiet, " INFO ") && !has(&quiet, " DEBUG "),
        "{quiet:?}"
    );
    assert!(!has(&quiet, "shutting down"), "{quiet:?}");

    // AGORA_LOG over [log] level
    let alias = log_of_a_warn_node(dir.path(), "alias", &env("", "info")).await;
    assert!(
        has(&alias, " INFO ") && has(&alias, "node started"),
        "{alias:?}"
    );
    assert!(!has(&alias, " DEBUG "), "{alias:?}");

    // RUST_LOG over both
    let debug = log_of_a_warn_node(dir.path(), "debug", &env("debug", "warn")).await;
    assert!(
        has(&debug, " DEBUG ") && has(&debug, "node started"),
        "{debug:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_format_or_level_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agora"))
        .args(["node", "--log-format", "xml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("log-format"));
    for (key, toml) in [
        ("log.format", "[log]\nformat = \"xml\"\n"),
        ("log.level", "[log]\nlevel = \"agora_node=loud\"\n"),
    ] {
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, toml).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agora"))
            .args(["node", "--config", bad.to_str().unwrap()])
            .args(["--data", dir.path().join("m").to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.starts_with(&format!("agora: configuration: {key}")),
            "{err}"
        );
    }
}
