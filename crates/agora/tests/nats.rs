//! The AGH NATS bridge: two nodes that share only a real `nats-server` (no libp2p link) carry
//! greets, says, whois and a directed interaction between their agents over the reference
//! subjects `agh.network.v0.<channel>.broadcast` and `….peer.<route_token>`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::json;
use support::{Agent, connected, see_each_other, spawn_nats, spawn_node_env};

const CH: &str = "builders";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_sharing_only_a_nats_server_exchange_envelopes() {
    let Some(nats) = spawn_nats() else { return };
    let dir = tempfile::tempdir().unwrap();
    let env = [("AGORA_AGH_NATS_URL", nats.url.as_str())];
    let a = spawn_node_env(&dir.path().join("a"), &[], 1, &[], &env);
    let b = spawn_node_env(&dir.path().join("b"), &[], 1, &[], &env);
    assert!(
        connected(&a.http).await.is_empty(),
        "no libp2p link between the nodes"
    );

    let mut alice = Agent::connect(&a.agh, "alice.sess-1", CH).await;
    let mut bob = Agent::connect(&b.agh, "bob.sess-1", CH).await;
    alice.greet(&["code.review"]).await;
    bob.greet(&["test.run"]).await;
    assert!(
        see_each_other(
            (&a.http, "alice.sess-1"),
            (&b.http, "bob.sess-1"),
            CH,
            Duration::from_secs(10)
        )
        .await,
        "greets cross the NATS server"
    );

    // Broadcast.
    let say = alice.envelope("say", None, json!({"text": "over nats"}));
    alice.send(&say).await;
    let got = bob
        .expect(Duration::from_secs(5), |v| v["id"] == say["id"])
        .await
        .expect("bob hears alice");
    assert_eq!(got, say, "the envelope arrives unchanged");

    // whois, answered over the peer subject of the requester.
    let whois = alice.envelope(
        "whois",
        None,
        json!({"type": "request", "query": "test.run"}),
    );
    alice.send(&whois).await;
    let answer = alice
        .expect(Duration::from_secs(5), |v| v["reply_to"] == whois["id"])
        .await
        .expect("bob's node answers");
    assert_eq!(answer["from"], "bob.sess-1");

    // A directed interaction both ways.
    let mut direct = alice.envelope("direct", Some("bob.sess-1"), json!({"text": "please test"}));
    direct["interaction_id"] = json!("int-nats-1");
    alice.send(&direct).await;
    bob.expect(Duration::from_secs(5), |v| v["id"] == direct["id"])
        .await
        .expect("bob receives the direct");
    let mut receipt = bob.envelope(
        "receipt",
        Some("alice.sess-1"),
        json!({"for_id": direct["id"], "status": "accepted"}),
    );
    receipt["interaction_id"] = json!("int-nats-1");
    bob.send(&receipt).await;
    alice
        .expect(Duration::from_secs(5), |v| v["id"] == receipt["id"])
        .await
        .expect("alice receives the receipt");
}

/// A password-protected `nats-server`: nodes with the right user and password (from the
/// environment, and from `[agh.nats] user` + `password_file`) bridge envelopes; a node with a
/// wrong password logs the server's refusal and keeps serving its other faces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_protected_server_bridges_only_with_the_right_password() {
    let Some(nats) = support::spawn_nats_with(&["--user", "agora", "--pass", "s3cret-pass"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("AGORA_AGH_NATS_URL", nats.url.as_str()),
        ("AGORA_AGH_NATS_USER", "agora"),
        ("AGORA_AGH_NATS_PASSWORD", "s3cret-pass"),
    ];
    let a = spawn_node_env(&dir.path().join("a"), &[], 1, &[], &env);
    std::fs::write(dir.path().join("pw"), "s3cret-pass\n").unwrap();
    let cfg = dir.path().join("b.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agh.nats]\nurl = \"{}\"\nuser = \"agora\"\npassword_file = \"{}\"\n",
            nats.url,
            dir.path().join("pw").display()
        ),
    )
    .unwrap();
    let b = spawn_node_env(
        &dir.path().join("b"),
        &[],
        1,
        &["--config", cfg.to_str().unwrap()],
        &[],
    );
    let mut alice = Agent::connect(&a.agh, "alice.sess-2", CH).await;
    let mut bob = Agent::connect(&b.agh, "bob.sess-2", CH).await;
    alice.greet(&["code.review"]).await;
    bob.greet(&["test.run"]).await;
    assert!(
        see_each_other(
            (&a.http, "alice.sess-2"),
            (&b.http, "bob.sess-2"),
            CH,
            Duration::from_secs(10)
        )
        .await,
        "greets cross the authenticated NATS server"
    );

    let (c, log) = {
        let cfg = dir.path().join("c.toml");
        std::fs::write(
            &cfg,
            format!(
                "[agh.nats]\nurl = \"{}\"\nuser = \"agora\"\npassword_file = \"{}\"\n",
                nats.url,
                dir.path().join("bad-pw").display()
            ),
        )
        .unwrap();
        std::fs::write(dir.path().join("bad-pw"), "wrong-password").unwrap();
        support::spawn_node_logged(&dir.path().join("c"), &["--config", cfg.to_str().unwrap()])
    };

    let refused = support::eventually(Duration::from_secs(15), async || {
        (log.count(&["NATS"]) > 0
            && log
                .lines()
                .iter()
                .any(|l| l.to_ascii_lowercase().contains("authorization")))
        .then_some(())
    })
    .await;
    assert!(
        refused.is_some(),
        "the refusal is logged: {:#?}",
        log.lines()
    );
    assert_eq!(support::get_json(&c.http, "/healthz").await["status"], "ok");
    let mut carol = Agent::connect(&c.agh, "carol.sess-2", CH).await;
    carol.greet(&["x"]).await;
    let say = alice.envelope("say", None, json!({"text": "authenticated"}));
    alice.send(&say).await;
    bob.expect(Duration::from_secs(5), |v| v["id"] == say["id"])
        .await
        .expect("bob hears alice");
    assert!(
        carol
            .expect(Duration::from_secs(2), |v| v["id"] == say["id"])
            .await
            .is_none(),
        "the node with the wrong password gets nothing"
    );
}
