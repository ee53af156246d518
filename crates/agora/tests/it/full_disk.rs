//! A full disk (issue 34 item 5; `agora_node::store`): a node whose data directory is a small
//! tmpfs that fills up refuses durable writes with a clear error that names no path, keeps
//! nothing of a refused write (a session whose write was refused is not created), keeps
//! answering reads, and takes writes again once space comes back, without a restart (the store
//! reopens its database after the I/O error); the database opens cleanly afterwards.
//!
//! Needs to mount a tmpfs (root, as on CI); without it the test prints one `skipped:` line,
//! unless `AGORA_REQUIRE_EXTERNAL=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{self, rpc_call, rpc_connect, spawn_node};

/// A size-limited tmpfs, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Self(dir.to_owned()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the file system of `dir` with `dir/filler` until it is full.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0x5a_u8; 64 * 1024];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
    path
}

async fn create_session(ws: &mut support::Ws, id: u64, name: &str) -> Value {
    rpc_call(
        ws,
        id,
        "state.createSession",
        json!({"agentName": name, "metadata": {"pad": "x".repeat(8 * 1024)}}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_clearly_keeps_reads_and_recovers_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let fs = Tmpfs::mount(&data, "32m");
    if !support::external(
        "a tmpfs mount (root)",
        fs.is_some(),
        "run the tests as root",
    ) {
        return;
    }
    let mut node = spawn_node(&data, &[], 30, &[]);
    let mut ws = rpc_connect(&node.rpc).await;
    let before = create_session(&mut ws, 1, "before").await;
    let before = before["result"]["sessionId"].as_str().unwrap().to_owned();

    // The disk fills: some durable write is refused, clearly and without a path.
    let filler = fill(&data);
    let mut refused = None;
    let mut created = 1;
    for i in 0..2_000 {
        let r = create_session(&mut ws, 100 + i, &format!("agent-{i}")).await;
        if r.get("error").is_some() {
            refused = Some(r);
            break;
        }
        created += 1;
    }
    let refused = refused.expect("a write is refused once the disk is full");
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    let text = refused["error"].to_string();
    assert!(text.contains("storage"), "{text}");
    assert!(
        !text.contains(data.to_str().unwrap()),
        "no path reaches the client: {text}"
    );
    assert!(
        !text.contains("agora.redb"),
        "no file name reaches the client: {text}"
    );

    // Nothing of the refused write stays: the node holds the sessions whose writes were taken.
    let cards = support::get_json(&node.http, "/hyperspace/cards").await;
    assert_eq!(cards["sessions"], created, "{cards}");

    // Reads go on.
    let read = rpc_call(
        &mut ws,
        5_000,
        "state.getSession",
        json!({"sessionId": before}),
    )
    .await;
    assert_eq!(read["result"]["sessionId"], before.as_str(), "{read}");

    // Space comes back: writes resume, on the same node process.
    std::fs::remove_file(&filler).unwrap();
    let mut id = 6_000;
    let after = support::eventually(Duration::from_secs(15), async || {
        id += 1;
        let r = create_session(&mut ws, id, "after").await;
        r["result"]["sessionId"].as_str().map(str::to_owned)
    })
    .await
    .expect("writes resume without a restart");

    // Both sessions are there after a restart: the database opens cleanly.
    drop(ws);
    assert!(node.terminate().await.success());
    drop(node);
    let node = spawn_node(&data, &[], 30, &[]);
    let mut ws = rpc_connect(&node.rpc).await;
    for (i, s) in [&before, &after].into_iter().enumerate() {
        let r = rpc_call(
            &mut ws,
            9_000 + i as u64,
            "state.getSession",
            json!({"sessionId": s}),
        )
        .await;
        assert_eq!(r["result"]["sessionId"], s.as_str(), "{r}");
    }
}
