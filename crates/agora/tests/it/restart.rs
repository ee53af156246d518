//! What a node keeps across a restart, and how it stops: SIGTERM shuts it down cleanly, and its
//! identity, catalogs and interactions survive.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::json;

use crate::support::{Agent, spawn_node};

const CH: &str = "builders";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactions_survive_a_restart_and_sigterm_stops_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a");
    let mut a = spawn_node(&data, &[], 1, &[]);
    let mut alice = Agent::connect(&a.agh, "alice.sess-1", CH).await;
    let mut bob = Agent::connect(&a.agh, "bob.sess-1", CH).await;
    alice.greet(&[]).await;
    bob.greet(&[]).await;

    // alice hands bob work; bob finishes it.
    let mut direct = alice.envelope("direct", Some("bob.sess-1"), json!({"text": "do it"}));
    direct["interaction_id"] = json!("int-keep");
    // bob may greet after alice's direct is processed; retry until bob is present.
    let mut delivered = None;
    for _ in 0..40 {
        alice.send(&direct).await;
        if let Some(v) = bob
            .expect(Duration::from_millis(250), |v| v["kind"] == "direct")
            .await
        {
            delivered = Some(v);
            break;
        }
        direct["id"] = json!(alice.next_id());
    }
    delivered.expect("bob receives the direct");
    let mut done = bob.envelope("trace", Some("alice.sess-1"), json!({"state": "completed"}));
    done["interaction_id"] = json!("int-keep");
    bob.send(&done).await;
    alice
        .expect(Duration::from_secs(5), |v| v["id"] == done["id"])
        .await
        .expect("alice sees completion");

    // SIGTERM: the node exits on its own, successfully.
    let exit = a.terminate().await;
    assert!(exit.success(), "graceful shutdown exits 0, got {exit:?}");
    drop(a);

    // Restart: the finished interaction is still known, so more work into it is refused with
    // interaction_closed, and alice gets the automatic receipt.
    let a2 = spawn_node(&data, &[], 1, &[]);
    let mut alice = Agent::connect(&a2.agh, "alice.sess-1", CH).await;
    let mut bob = Agent::connect(&a2.agh, "bob.sess-1", CH).await;
    bob.greet(&[]).await;
    alice.greet(&[]).await;
    let mut late = alice.envelope("direct", Some("bob.sess-1"), json!({"text": "one more"}));
    late["interaction_id"] = json!("int-keep");
    let mut refused = None;
    for _ in 0..40 {
        alice.send(&late).await;
        let answer = alice
            .expect(Duration::from_millis(250), |v| v.get("error").is_some())
            .await;
        late["id"] = json!(alice.next_id());
        // `not_found` only means bob's greet has not been processed yet: try again.
        if let Some(v) = answer.filter(|v| v["error"]["reason"] != "not_found") {
            refused = Some(v);
            break;
        }
    }
    let refused = refused.expect("the late direct is refused");
    assert_eq!(
        refused["error"]["reason"], "interaction_closed",
        "{refused}"
    );
    let receipt = alice
        .expect(Duration::from_secs(5), |v| {
            v["kind"] == "receipt" && v["body"]["reason_code"] == "interaction_closed"
        })
        .await
        .expect("the automatic receipt follows the error frame");
    assert_eq!(receipt["body"]["status"], "rejected");
    assert_eq!(receipt["body"]["reason_code"], "interaction_closed");
    assert_eq!(receipt["from"], "bob.sess-1");
}

/// `agora node` with no arguments on a fresh machine: default data directory in the working
/// directory, default loopback listeners, and a clean stop.
#[test]
fn no_arguments_work_on_a_fresh_machine() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agora"))
        .arg("node")
        .current_dir(dir.path())
        .env_remove("AGORA_CONFIG")
        .env_remove("AGORA_DATA")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut faces = Vec::new();
    while faces.len() < 5 {
        let line = lines.next().expect("a listening line").unwrap();
        let mut parts = line.splitn(4, ' ');
        assert_eq!(
            (parts.next(), parts.next()),
            (Some("listening"), Some("on")),
            "{line}"
        );
        let face = parts.next().unwrap().to_owned();
        let addr = parts.next().unwrap().to_owned();
        match face.as_str() {
            "p2p" => assert!(
                addr.starts_with("/ip4/127.0.0.1/tcp/4001/p2p/12D3KooW"),
                "{addr}"
            ),
            "agh" => assert_eq!(addr, "ws://127.0.0.1:4410/agh/v0"),
            "http" => assert_eq!(addr, "http://127.0.0.1:4411"),
            "rpc" => assert_eq!(addr, "ws://127.0.0.1:3100"),
            "agtp" => assert_eq!(addr, "agtp://127.0.0.1:4480"),
            other => panic!("unexpected face {other}"),
        }
        faces.push(face);
    }
    assert!(dir.path().join("agora-data/node.key").exists());
    assert!(dir.path().join("agora-data/agora.redb").exists());
    assert!(dir.path().join("agora-data/ans-key.json").exists());
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "SIGINT stops the node cleanly: {status:?}"
    );
}

/// Settings that do not parse, or do not fit together, stop `agora node` before it starts
/// anything: exit 2, one `agora: configuration: <key>: …` line, no data directory created.
#[test]
fn bad_settings_exit_two_before_starting() {
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case<'_>; 5] = [
        (
            &["--peers-low", "10", "--peers-high", "4"],
            &[],
            "peers_high:",
        ),
        (&["--peers-low", "0"], &[], "peers_low:"),
        (
            &[],
            &[("AGORA_GREET_INTERVAL", "30s")],
            "AGORA_GREET_INTERVAL:",
        ),
        (&[], &[("AGORA_AGTP_TLS", "maybe")], "AGORA_AGTP_TLS:"),
        (
            &[],
            &[("AGORA_MEMORY_EMBEDDER", "openai")],
            "memory.base_url:",
        ),
    ];
    for (args, env, key) in cases {
        let child = Command::new(env!("CARGO_BIN_EXE_agora"))
            .arg("node")
            .arg("--data")
            .arg(&data)
            .args(args)
            .envs(env.iter().copied())
            .current_dir(dir.path())
            .env_remove("AGORA_CONFIG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A node that started anyway would run until killed: wait for its exit with a deadline.
        let pid = child.id().to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(child.wait_with_output()));
        let Ok(out) = rx.recv_timeout(Duration::from_secs(20)) else {
            let _ = Command::new("kill").args(["-9", &pid]).status();
            panic!("{args:?} {env:?}: the node started instead of refusing its settings");
        };
        let out = out.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!("agora: configuration: {key}")),
            "{stderr}"
        );
        assert!(out.stdout.is_empty());
        assert!(!data.exists());
    }
}
