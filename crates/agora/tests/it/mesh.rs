//! AGH across real node processes: a line of three nodes A–B–C on 127.0.0.1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{self, Agent, connected, eventually, peer_ids, see_each_other, spawn_node};

const GREET: u64 = 1;
const CH: &str = "builders";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_in_a_line_discover_and_work_together() {
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_node(&dir.path().join("a"), &[], GREET, &[]);
    let b = spawn_node(&dir.path().join("b"), &[&a.p2p], GREET, &[]);
    let c_data = dir.path().join("c");
    let c = spawn_node(&c_data, &[&b.p2p], GREET, &[]);

    // The line forms: B sees A and C.
    let (a_id, c_id) = (a.peer_id.clone(), c.peer_id.clone());
    let b_http = b.http.clone();
    eventually(Duration::from_secs(20), async || {
        let conn = connected(&b_http).await;
        (conn.contains(&a_id) && conn.contains(&c_id)).then_some(())
    })
    .await
    .expect("B connects to A and C");

    // Agents on A and C greet; each node sees the other's agent within 2 s.
    let mut alice = Agent::connect(&a.agh, "alice.sess-1", CH).await;
    let mut carol = Agent::connect(&c.agh, "carol.sess-1", CH).await;
    alice.greet(&["code.review"]).await;
    carol.greet(&["test.run"]).await;
    let greeted = Instant::now();
    assert!(
        see_each_other(
            (&a.http, "alice.sess-1"),
            (&c.http, "carol.sess-1"),
            CH,
            Duration::from_secs(2)
        )
        .await,
        "agents on A and C see each other within 2 s of greeting"
    );
    eprintln!("discovery across A–B–C took {:?}", greeted.elapsed());

    // whois from A finds C's agent by capability.
    let whois = alice.envelope(
        "whois",
        None,
        json!({"type": "request", "query": "test.run"}),
    );
    alice.send(&whois).await;
    let answer = alice
        .expect(Duration::from_secs(5), |v| {
            v["kind"] == "whois" && v["reply_to"] == whois["id"]
        })
        .await
        .expect("carol answers the whois");
    assert_eq!(answer["from"], "carol.sess-1");
    assert_eq!(
        answer["body"]["peer_card"]["capabilities"],
        json!(["test.run"])
    );

    // A direct interaction A→C: receipt(accepted), trace(working), trace(completed).
    let iid = "int-line-1";
    let mut direct = alice.envelope(
        "direct",
        Some("carol.sess-1"),
        json!({"text": "run the tests"}),
    );
    direct["interaction_id"] = json!(iid);
    alice.send(&direct).await;
    let got = carol
        .expect(Duration::from_secs(5), |v| v["kind"] == "direct")
        .await
        .expect("carol receives the direct");
    assert_eq!(got["id"], direct["id"]);
    for (kind, body) in [
        (
            "receipt",
            json!({"for_id": direct["id"], "status": "accepted"}),
        ),
        ("trace", json!({"state": "working"})),
        (
            "trace",
            json!({"state": "completed", "message": "all green"}),
        ),
    ] {
        let mut env = carol.envelope(kind, Some("alice.sess-1"), body);
        env["interaction_id"] = json!(iid);
        carol.send(&env).await;
        let seen = alice
            .expect(Duration::from_secs(5), |v| v["id"] == env["id"])
            .await
            .unwrap_or_else(|| panic!("alice receives the {kind}"));
        assert_eq!(seen["interaction_id"], iid);
    }

    // Killing C makes carol expire on A within 2 × greet interval (plus the sweep period).
    drop(carol);
    drop(c);
    let killed = Instant::now();
    let a_http = a.http.clone();
    eventually(Duration::from_secs(2 * GREET + 2), async || {
        (!peer_ids(&a_http, CH)
            .await
            .iter()
            .any(|p| p == "carol.sess-1"))
        .then_some(())
    })
    .await
    .expect("carol expires on A");
    let gone_after = killed.elapsed();
    eprintln!("carol expired on A {gone_after:?} after C was killed");
    assert!(gone_after <= Duration::from_millis(2 * GREET * 1000 + 1500));

    // Restarting C (same data, same identity) restores carol once she reconnects.
    let c2 = spawn_node(&c_data, &[&b.p2p], GREET, &[]);
    assert_eq!(c2.peer_id, c_id, "the node key survives a restart");
    let mut carol = Agent::connect(&c2.agh, "carol.sess-1", CH).await;
    carol.greet(&["test.run"]).await;
    eventually(Duration::from_secs(10), async || {
        peer_ids(&a_http, CH)
            .await
            .iter()
            .any(|p| p == "carol.sess-1")
            .then_some(())
    })
    .await
    .expect("carol is back on A after C restarts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capability_transfer_and_mesh_wide_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_node(&dir.path().join("a"), &[], GREET, &[]);
    let b = spawn_node(&dir.path().join("b"), &[&a.p2p], GREET, &[]);
    let c = spawn_node(&dir.path().join("c"), &[&b.p2p], GREET, &[]);
    let mut alice = Agent::connect(&a.agh, "alice.sess-2", CH).await;
    let mut carol = Agent::connect(&c.agh, "carol.sess-2", CH).await;
    alice.greet(&[]).await;
    carol.greet(&[]).await;
    assert!(
        see_each_other(
            (&a.http, "alice.sess-2"),
            (&c.http, "carol.sess-2"),
            CH,
            Duration::from_secs(20)
        )
        .await,
        "alice and carol see each other"
    );

    // A capability document with a correct digest crosses the mesh unchanged...
    let doc = json!({"id": "review-fix", "summary": "Review Fix Flow",
        "outcome": "A reusable review fix workflow.", "version": "1.0.0",
        "execution_outline": ["Inspect the issue", "Draft the fix"],
        "requirements": ["workspace-write"],
        "digest": "sha256:edb42ce4ca23d905aeeba399001ca6d23420610775ba41ef66e90f47f14dba0d"});
    let good = alice.envelope("capability", None, json!({"capability": doc}));
    alice.send(&good).await;
    let got = carol
        .expect(Duration::from_secs(5), |v| v["id"] == good["id"])
        .await
        .expect("carol receives the capability");
    assert_eq!(got, good);
    // ...and one whose digest does not verify is refused before it leaves A.
    let mut bad_doc = doc.clone();
    bad_doc["summary"] = json!("Edited after sealing");
    let bad = alice.envelope("capability", None, json!({"capability": bad_doc}));
    alice.send(&bad).await;
    let err = alice
        .expect(Duration::from_secs(5), |v| v.get("error").is_some())
        .await
        .expect("alice gets an error frame");
    assert_eq!(err["error"]["reason"], "verification_failed");
    assert_eq!(err["error"]["id"], bad["id"]);
    assert!(
        carol
            .expect(Duration::from_millis(500), |v| v["id"] == bad["id"])
            .await
            .is_none(),
        "the bad capability never reaches carol"
    );

    // Duplicate ids are refused mesh-wide: carol's node has seen alice's id, so an envelope from
    // carol reusing it is a duplicate there.
    let mut reuse = carol.envelope("say", None, json!({"text": "same id, other sender"}));
    reuse["id"] = good["id"].clone();
    carol.send(&reuse).await;
    let err = carol
        .expect(Duration::from_secs(5), |v| v.get("error").is_some())
        .await
        .expect("carol gets an error frame");
    assert_eq!(err["error"]["reason"], "duplicate");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_node_that_comes_back_is_reconnected() {
    let dir = tempfile::tempdir().unwrap();
    let a_data = dir.path().join("a");
    let a = spawn_node(&a_data, &[], GREET, &[]);
    let a_id = a.peer_id.clone();
    let a_addr = a.p2p.clone();
    let b = spawn_node(&dir.path().join("b"), &[&a_addr], GREET, &[]);
    let b_http = b.http.clone();
    let up = async |want: bool| {
        let id = a_id.clone();
        let http = b_http.clone();
        eventually(Duration::from_secs(20), async || {
            (connected(&http).await.contains(&id) == want).then_some(())
        })
        .await
    };
    up(true).await.expect("B joins A");
    drop(a);
    up(false).await.expect("B notices A is gone");
    // A comes back on the same address with the same identity; B redials it by itself.
    let port = a_addr.split('/').nth(4).unwrap().to_owned();
    let listen = format!("/ip4/127.0.0.1/tcp/{port}");
    let a2 = spawn_node(&a_data, &[], GREET, &["--p2p-listen", &listen]);
    assert_eq!(a2.p2p, a_addr);
    up(true).await.expect("B reconnects to A");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_topic_is_left_when_its_last_local_agent_goes() {
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_node(&dir.path().join("a"), &[], GREET, &[]);
    let topic = format!("agh/v0/{CH}");
    let joined = async |want: bool| {
        let http = a.http.clone();
        let topic = topic.clone();
        eventually(Duration::from_secs(10), async || {
            let status = support::get_json(&http, "/status").await;
            let has = status["topics"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == topic.as_str()));
            (has == want).then_some(status)
        })
        .await
    };
    let mut alice = Agent::connect(&a.agh, "alice.sess-9", CH).await;
    alice.greet(&[]).await;
    let status = joined(true)
        .await
        .expect("the node joins the channel's topic");
    // The node's card topic, discovery, memory sync, the current and next settlement rounds,
    // the A2A cards topic, the directory's asks, pulse proofs, and the channel.
    assert_eq!(status["gossip"]["topic_budget"]["by_class"]["local"], 9);
    alice.close().await;
    joined(false)
        .await
        .expect("the node leaves the channel's topic once alice is gone");
}

/// Copies before signatures (`docs/node.md`): in a triangle every message reaches each node twice
/// (from its publisher and forwarded by the third node). Each agent still gets every message
/// once, and the nodes pass copies to gossipsub without checking their signatures again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_reach_gossipsub_without_a_second_signature_check() {
    const MESSAGES: usize = 30;
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_node(&dir.path().join("a"), &[], GREET, &[]);
    let b = spawn_node(&dir.path().join("b"), &[&a.p2p], GREET, &[]);
    let c = spawn_node(&dir.path().join("c"), &[&a.p2p, &b.p2p], GREET, &[]);
    let mut alice = Agent::connect(&a.agh, "alice.sess-3", CH).await;
    let mut bob = Agent::connect(&b.agh, "bob.sess-3", CH).await;
    let mut carol = Agent::connect(&c.agh, "carol.sess-3", CH).await;
    alice.greet(&[]).await;
    bob.greet(&[]).await;
    carol.greet(&[]).await;
    for (x, y) in [(&a, &b), (&a, &c), (&b, &c)] {
        let (x_id, y_http) = (x.peer_id.clone(), y.http.clone());
        eventually(Duration::from_secs(20), async || {
            connected(&y_http).await.contains(&x_id).then_some(())
        })
        .await
        .expect("the triangle forms");
    }
    for (agent, node) in [("bob.sess-3", &b), ("carol.sess-3", &c)] {
        assert!(
            see_each_other(
                (&a.http, "alice.sess-3"),
                (&node.http, agent),
                CH,
                Duration::from_secs(20)
            )
            .await,
            "alice and {agent} see each other"
        );
    }
    // Every node meshes both others on the channel's topic.
    let topic_meshed = async |http: &str| {
        let http = http.to_owned();
        eventually(Duration::from_secs(20), async || {
            let status = support::get_json(&http, "/status").await;
            let full = status["gossip"]["mesh"]
                .as_object()?
                .iter()
                .any(|(t, n)| t.contains(CH) && n.as_u64() == Some(2));
            full.then_some(())
        })
        .await
    };
    for node in [&a, &b, &c] {
        topic_meshed(&node.http)
            .await
            .expect("each node meshes both others on the channel");
    }
    let spared = async || {
        let mut total = 0;
        for node in [&a, &b, &c] {
            let status = support::get_json(&node.http, "/status").await;
            total += status["gossip"]["signatures"]["spared"].as_u64().unwrap();
        }
        total
    };
    let before = spared().await;

    let mut ids = Vec::new();
    for i in 0..MESSAGES {
        let say = alice.envelope("say", None, json!({"text": format!("copy test {i}")}));
        ids.push(say["id"].clone());
        alice.send(&say).await;
    }
    for agent in [&mut bob, &mut carol] {
        for id in &ids {
            agent
                .expect(Duration::from_secs(10), |v| v["id"] == *id)
                .await
                .expect("every message arrives");
        }
        assert!(
            agent
                .expect(Duration::from_millis(500), |v| ids.contains(&v["id"]))
                .await
                .is_none(),
            "and none twice"
        );
    }
    let spared_now = eventually(Duration::from_secs(10), async || {
        let n = spared().await;
        (n > before).then_some(n)
    })
    .await
    .expect("copies were passed on unchecked");
    let b_status = support::get_json(&b.http, "/status").await;
    assert!(
        b_status["gossip"]["signatures"]["checked"]
            .as_u64()
            .unwrap()
            >= MESSAGES as u64,
        "each message was checked once: {}",
        b_status["gossip"]["signatures"]
    );
    eprintln!(
        "copies spared a signature check: {} for {MESSAGES} messages to two nodes",
        spared_now - before
    );
    // The DHT side of `/status`: B joined by dialling A (a bootstrap address, outside the dial
    // budget), provides its rendezvous keys, and has run Kademlia queries.
    let dht = &b_status["dht"];
    assert!(
        dht["dials"]["opened"].is_u64()
            && dht["dials"]["denied"].as_u64() == Some(0)
            && dht["dials"]["exempt"].as_u64() >= Some(1),
        "GET /status dht.dials: {dht}"
    );
    assert!(dht["provided_keys"].as_u64() >= Some(1), "{dht}");
    assert!(
        dht["queries"]
            .as_object()
            .is_some_and(|q| q.values().any(|v| v[0].as_u64() >= Some(1))),
        "GET /status dht.queries counts ended queries: {dht}"
    );
}
