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
