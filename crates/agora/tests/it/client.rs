//! The CLI client against real nodes: status, peers, whois (with catalogs), say, send, and
//! capability catalogs that survive a node restart.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Agent, connected, eventually, peer_ids, spawn_node};

const CH: &str = "builders";

fn agora(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agora"))
        .args(args)
        .output()
        .unwrap()
}

async fn agora_async(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_agora"))
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn json_out(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_client_against_two_nodes_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_node(&dir.path().join("a"), &[], 1, &[]);
    let b_data = dir.path().join("b");
    let b = spawn_node(&b_data, &[&a.p2p], 1, &[]);
    let b_id = b.peer_id.clone();
    let a_http = a.http.clone();
    eventually(Duration::from_secs(20), async || {
        connected(&a_http).await.contains(&b_id).then_some(())
    })
    .await
    .expect("A and B connect");

    // status, both forms.
    let st = json_out(&agora(&["status", "--node", &a.http, "--json"]));
    assert_eq!(st["peer_id"], a.peer_id);
    assert_eq!(st["faces"]["agh"], a.agh);
    let table = agora(&["status", "--node", &a.http]);
    assert!(String::from_utf8_lossy(&table.stdout).contains(&a.peer_id));

    // A catalog for tester on B, then tester connects and greets with no capabilities of its own.
    let catalog = dir.path().join("catalog.json");
    std::fs::write(
        &catalog,
        json!({"peer_id": "tester.sess-1", "capabilities": [
            {"id": "test.run", "summary": "Run the tests.", "outcome": "A test report."},
            {"id": "test.flaky", "summary": "Find flaky tests.", "outcome": "A list."}
        ]})
        .to_string(),
    )
    .unwrap();
    let published = json_out(&agora(&[
        "capability",
        "publish",
        catalog.to_str().unwrap(),
        "--node",
        &b.http,
        "--json",
    ]));
    assert_eq!(published["capabilities"], json!(["test.run", "test.flaky"]));
    let mut tester = Agent::connect(&b.agh, "tester.sess-1", CH).await;
    tester.greet(&[]).await;
    eventually(Duration::from_secs(5), async || {
        peer_ids(&a_http, CH)
            .await
            .iter()
            .any(|p| p == "tester.sess-1")
            .then_some(())
    })
    .await
    .expect("A sees tester");

    // peers on A shows tester as remote, with the brief projection of its catalog.
    let peers = json_out(&agora(&[
        "peers",
        "--node",
        &a.http,
        "--channel",
        CH,
        "--json",
    ]));
    let t = peers["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["peer_id"] == "tester.sess-1")
        .unwrap();
    assert_eq!(t["presence"], "remote");
    assert_eq!(
        t["peer_card"]["capabilities"],
        json!(["test.run", "test.flaky"])
    );
    // A channel that is not a channel name reaches the node whole (encoded in the query) and
    // is refused there: exit 1 with the node's reason, never a second query parameter.
    for bad in ["a b", "x&channel=ok"] {
        let out = agora(&["peers", "--node", &a.http, "--channel", bad]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{bad}: {err}");
        assert!(err.contains("is not a channel name"), "{bad}: {err}");
    }

    // whois by capability with the rich catalog.
    let answers = json_out(&agora(&[
        "whois",
        "--node",
        &a.http,
        "--channel",
        CH,
        "test.run",
        "--catalog",
        "--json",
    ]));
    let ans = &answers["answers"][0];
    assert_eq!(ans["from"], "tester.sess-1");
    let ids: Vec<&str> = ans["ext"]["agh.capability_catalog"]["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["test.run", "test.flaky"]);
    let none = agora(&[
        "whois",
        "--node",
        &a.http,
        "--channel",
        CH,
        "no.such.thing",
        "--wait",
        "0.5",
    ]);
    assert_eq!(
        none.status.code(),
        Some(1),
        "nobody answers an unmatched query"
    );

    // say reaches tester.
    let said = agora(&[
        "say",
        "--node",
        &a.http,
        "--channel",
        CH,
        "--as",
        "cli.alice",
        "hello tester",
    ]);
    assert!(
        said.status.success(),
        "{}",
        String::from_utf8_lossy(&said.stderr)
    );
    let heard = tester
        .expect(Duration::from_secs(5), |v| v["kind"] == "say")
        .await
        .expect("tester hears the say");
    assert_eq!(heard["body"]["text"], "hello tester");
    assert_eq!(heard["from"], "cli.alice");

    // send: the CLI hands work to tester and follows the interaction to its end.
    let send = tokio::spawn(agora_async(
        [
            "send",
            "--node",
            &a.http,
            "--channel",
            CH,
            "--to",
            "tester.sess-1",
            "--interaction",
            "int-cli-1",
            "--json",
            "--wait",
            "10",
            "run everything",
        ]
        .map(str::to_owned)
        .to_vec(),
    ));
    let direct = tester
        .expect(Duration::from_secs(10), |v| v["kind"] == "direct")
        .await
        .expect("tester receives the direct");
    let requester = direct["from"].as_str().unwrap().to_owned();
    for (kind, body) in [
        (
            "receipt",
            json!({"for_id": direct["id"], "status": "accepted"}),
        ),
        (
            "trace",
            json!({"state": "completed", "message": "42 passed"}),
        ),
    ] {
        let mut env = tester.envelope(kind, Some(&requester), body);
        env["interaction_id"] = json!("int-cli-1");
        tester.send(&env).await;
    }
    let out = send.await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["body"]["status"], "accepted");
    assert_eq!(lines[1]["body"]["state"], "completed");

    // Restart B: its identity and tester's catalog survive.
    tester.close().await;
    drop(b);
    let b2 = spawn_node(&b_data, &[&a.p2p], 1, &[]);
    assert_eq!(b2.peer_id, b_id);
    let mut tester = Agent::connect(&b2.agh, "tester.sess-1", CH).await;
    tester.greet(&[]).await;
    let a_http = a.http.clone();
    let answer = eventually(Duration::from_secs(10), async || {
        let out = agora_async(
            [
                "whois",
                "--node",
                &a_http,
                "--channel",
                CH,
                "test.flaky",
                "--catalog",
                "--json",
                "--wait",
                "1",
            ]
            .map(str::to_owned)
            .to_vec(),
        )
        .await;
        out.status
            .success()
            .then(|| serde_json::from_slice::<Value>(&out.stdout).unwrap())
    })
    .await
    .expect("tester answers again after B restarts");
    assert_eq!(
        answer["answers"][0]["ext"]["agh.capability_catalog"]["capabilities"][1]["id"],
        "test.flaky"
    );
    tester.close().await;
}
