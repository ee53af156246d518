//! A full disk (issue 34 item 5; `agora_node::store`): a node whose data directory is a small
//! tmpfs that fills up refuses durable writes on every face with a clear error that names no
//! path — JSON-RPC −32603 (a session, a payment challenge, a channel payment, a learning
//! bullet) or −32007 (a memory no owner could hold), AGTP 500 (an ACTIVATE), AGH reason
//! `internal` (a `direct` opening an interaction) — keeps nothing of a refused write (no session,
//! no registered agent, no playbook, no voucher counted, no interaction, and the refused envelope
//! is taken when sent again), keeps answering reads, and takes writes again once space comes
//! back, without a restart (the store reopens its database after the I/O error); the database
//! opens cleanly afterwards.
//!
//! Needs to mount a tmpfs (root, as on CI); without it the test prints one `skipped:` line,
//! unless `AGORA_REQUIRE_EXTERNAL=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agora_agtp::Status;
use agora_agtp::codec::{Request, Response};
use agora_agtp::manifest::Transition;
use agora_agtp::signature::AnsSigningKey;
use agora_node::faces::agtp::client::{self, Transport};
use serde_json::{Value, json};

use crate::support::{self, Agent, rpc_call, rpc_connect, spawn_node};

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

const CH: &str = "disk";
/// The amount of each channel payment, in points.
const PAY: u64 = 7;

fn no_path(text: &str, data: &Path) {
    assert!(
        !text.contains(data.to_str().unwrap()) && !text.contains("agora.redb"),
        "no path reaches the client: {text}"
    );
}

async fn agtp_send(addr: &str, request: &Request) -> Response {
    client::request(addr, &Transport::Plain, request, Duration::from_secs(10))
        .await
        .expect("the name server answers")
}

/// ACTIVATE of agent `id`, with a large job description (to use up pages).
async fn activate(addr: &str, gov: &AnsSigningKey, id: &str) -> Response {
    let text = format!("Audits contracts {}", "z".repeat(4 * 1024));
    let m = support::hosted::manifest(id, &text);
    let req = support::agtp_lifecycle_request(gov, Transition::Activate, id, Some(&m), None);
    agtp_send(addr, &req).await
}

/// DISCOVER of contract audits: the raw answer.
async fn agtp_discover(addr: &str) -> String {
    let req = Request::new("DISCOVER")
        .with_header("Agent-ID", "agent-caller")
        .with_header("Authority-Scope", "discovery:query")
        .with_json_body(&json!({"parameters": {"intent": "audits contracts", "limit": 100}}));
    let r = agtp_send(addr, &req).await;
    assert_eq!(r.status, Status::OK);
    String::from_utf8_lossy(&r.body).into_owned()
}

/// alice opens interaction `iid` with bob by a `direct`: the refusal she gets (`None` when
/// bob received it), and the envelope.
async fn open_interaction(alice: &mut Agent, bob: &mut Agent, iid: &str) -> (Option<Value>, Value) {
    let mut direct = alice.envelope("direct", Some("bob.sess-1"), json!({"text": "do it"}));
    direct["interaction_id"] = json!(iid);
    // bob's greet may not have been processed yet (`not_target`): send again with a new id.
    for _ in 0..40 {
        alice.send(&direct).await;
        if bob
            .expect(Duration::from_millis(250), |v| v["id"] == direct["id"])
            .await
            .is_some()
        {
            return (None, direct);
        }
        let answer = alice
            .expect(Duration::from_millis(250), |v| v.get("error").is_some())
            .await;
        match answer {
            Some(a) if a["error"]["reason"] != "not_target" => return (Some(a), direct),
            _ => direct["id"] = json!(alice.next_id()),
        }
    }
    panic!("bob never becomes a target in {CH}");
}

/// Calls `method` with `params(i)` (ids from `first`) until a call is refused, at most 500
/// times (redb may find a free page for a write now and then); the refusal, and the `i` of the
/// refused call (the number of calls taken before it).
async fn until_refused(
    ws: &mut support::Ws,
    first: u64,
    method: &str,
    params: impl Fn(u64) -> Value,
) -> (Value, u64) {
    for i in 0..500 {
        let r = rpc_call(ws, first + i, method, params(i)).await;
        if r.get("error").is_some() {
            return (r, i);
        }
    }
    panic!("{method} is refused on a full disk");
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
    // The name server takes the test's governance key (its config lives outside the tmpfs).
    let gov = support::agtp_governance_key(dir.path());
    let config = dir.path().join("agora.toml");
    std::fs::write(
        &config,
        format!(
            "[agtp]\ngovernance_keys = [\"{}\"]\n",
            dir.path().join("gov.pub.json").display()
        ),
    )
    .unwrap();
    let args = ["--config", config.to_str().unwrap()];
    let mut node = spawn_node(&data, &[], 30, &args);
    let mut ws = rpc_connect(&node.rpc).await;
    let before = create_session(&mut ws, 1, "before").await;
    let before = before["result"]["sessionId"].as_str().unwrap().to_owned();
    let agtp = node.agtp.trim_start_matches("agtp://").to_owned();
    assert_eq!(activate(&agtp, &gov, "agt-before").await.status, Status::OK);
    let mut alice = Agent::connect(&node.agh, "alice.sess-1", CH).await;
    let mut bob = Agent::connect(&node.agh, "bob.sess-1", CH).await;
    alice.greet(&[]).await;
    bob.greet(&[]).await;
    let (reason, _) = open_interaction(&mut alice, &mut bob, "int-before").await;
    assert_eq!(reason, None, "an interaction opens while there is room");
    // A points channel from this node to itself, opened and paid once while there is room.
    let opened = rpc_call(
        &mut ws,
        50,
        "micropayments.channel.open",
        json!({"payee": node.peer_id, "budgetAtomic": 1_000_000_000_u64, "currency": "points"}),
    )
    .await;
    let channel = opened["result"]["channelId"]
        .as_str()
        .unwrap_or_else(|| panic!("{opened}"))
        .to_owned();
    let pay = json!({"channelId": channel, "amountAtomic": PAY});
    let r = rpc_call(&mut ws, 51, "micropayments.channel.pay", pay.clone()).await;
    assert_eq!(r["result"]["nonce"], 1, "{r}");

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

    // Every face refuses its writes clearly while the disk stays full. redb may still find a
    // free page for a small write now and then, so each face writes until one is refused.
    // JSON-RPC: a memory.
    let (refused, _) = until_refused(
        &mut ws,
        2_000,
        "memory.store",
        |i| json!({"content": format!("note {i} {}", "y".repeat(4 * 1024))}),
    )
    .await;
    // Replication Failed (spec §8): none of the memory's owners — here the one node — holds it.
    assert_eq!(refused["error"]["code"], -32007, "{refused}");
    assert_eq!(refused["error"]["data"]["acknowledged"], 0, "{refused}");
    no_path(&refused.to_string(), &data);
    // JSON-RPC: a payment challenge.
    let (refused, _) = until_refused(
        &mut ws,
        3_000,
        "micropayments.challenge",
        |_| json!({"priceUsdc": 0.01, "pricePoints": 5, "resource": "z".repeat(500)}),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    no_path(&refused.to_string(), &data);
    // JSON-RPC: a payment on a channel; the refused voucher is not counted (the channel's total
    // at its close, below, is that of the payments taken).
    let (refused, paid_full) = until_refused(
        &mut ws,
        3_500,
        "micropayments.channel.pay",
        |_| json!({"channelId": channel, "amountAtomic": PAY, "memo": "m".repeat(200)}),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    no_path(&refused.to_string(), &data);
    // JSON-RPC: a learning bullet, in a new playbook each time; the refused one's playbook does
    // not exist.
    let (refused, k) = until_refused(&mut ws, 4_000, "learning.addBullet", |i| {
        json!({"playbookId": format!("full-{i}"), "section": "fbk", "content": "w".repeat(1_900)})
    })
    .await;
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    no_path(&refused.to_string(), &data);
    let missing = rpc_call(
        &mut ws,
        4_900,
        "learning.getPlaybook",
        json!({"playbookId": format!("full-{k}")}),
    )
    .await;
    assert_eq!(missing["error"]["data"]["reason"], "not-found", "{missing}");
    // AGTP: an ACTIVATE is 500 and leaves no agent behind.
    let mut refused = None;
    for i in 0..500 {
        let id = format!("agt-full-{i}");
        let r = activate(&agtp, &gov, &id).await;
        if r.status != Status::OK {
            refused = Some((id, r));
            break;
        }
    }
    let (agent, r) = refused.expect("an ACTIVATE is refused on a full disk");
    let body = String::from_utf8_lossy(&r.body).into_owned();
    assert_eq!(r.status, Status::SERVER_ERROR, "{body}");
    assert!(body.contains("could not be saved"), "{body}");
    no_path(&body, &data);
    let described = agtp_send(
        &agtp,
        &Request::new("DESCRIBE").with_target(format!("/agents/{agent}")),
    )
    .await;
    assert_eq!(
        described.status,
        Status::NOT_FOUND,
        "nothing of {agent} was kept"
    );
    // AGH: a direct that opens an interaction is refused with reason `internal`, not delivered,
    // and not kept (the same envelope is taken once there is room again, below).
    let mut refused = None;
    for i in 0..500 {
        let iid = format!("int-full-{i}");
        if let (Some(answer), envelope) = open_interaction(&mut alice, &mut bob, &iid).await {
            refused = Some((iid, answer, envelope));
            break;
        }
    }
    let (iid, answer, held_back) = refused.expect("an AGH interaction is refused on a full disk");
    assert_eq!(answer["error"]["reason"], "internal", "{answer}");
    let detail = answer["error"]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("nothing was kept"), "{answer}");
    no_path(detail, &data);
    let snapshot = support::get_json(&node.http, "/dashboard/snapshot").await;
    let listed = snapshot["agh"]["interactions"].to_string();
    assert!(listed.contains("int-before"), "{listed}");
    assert!(!listed.contains(&iid), "{iid} was not kept: {listed}");
    // Reads go on: the session, the memory service, the registry, the AGH directory.
    let found = agtp_discover(&agtp).await;
    assert!(found.contains("agt-before"), "{found}");

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
    // On every face.
    assert_eq!(activate(&agtp, &gov, &agent).await.status, Status::OK);
    let r = rpc_call(&mut ws, 6_900, "micropayments.channel.pay", pay).await;
    assert_eq!(r["result"]["nonce"], paid_full + 2, "{r}");
    let closed = rpc_call(
        &mut ws,
        6_901,
        "micropayments.channel.close",
        json!({"channelId": channel}),
    )
    .await;
    assert_eq!(
        closed["result"]["totalSpentAtomic"],
        ((paid_full + 2) * PAY).to_string(),
        "only the payments taken are counted: {closed}"
    );
    alice.send(&held_back).await;
    let delivered = bob
        .expect(Duration::from_secs(5), |v| v["id"] == held_back["id"])
        .await;
    assert!(
        delivered.is_some(),
        "the refused envelope, sent again, is taken"
    );

    // Both sessions are there after a restart: the database opens cleanly.
    drop(ws);
    assert!(node.terminate().await.success());
    drop(node);
    let node = spawn_node(&data, &[], 30, &args);
    let agtp = node.agtp.trim_start_matches("agtp://").to_owned();
    let found = agtp_discover(&agtp).await;
    assert!(
        found.contains("agt-before") && found.contains(&agent),
        "{found}"
    );
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

/// On a cluster ([`crate::support::cluster`]): the node of a host whose data directory fills up
/// refuses writes but keeps gossiping — an AGH channel's messages still cross both ways between
/// it and a node on another host.
#[test]
fn a_node_on_a_full_disk_keeps_gossiping() {
    use crate::partition::{Agent, Ep, on, presence_agrees};
    use crate::support::cluster::Start;
    use crate::support::hosted::try_call;

    let Some(mut cluster) = crate::hosts::cluster(2) else {
        return;
    };
    let full = cluster.small_disk(1, "32m").to_owned();
    let a = cluster.start(0, &Start::default());
    let start = Start {
        bootstrap: vec![cluster.host(0).p2p(&a.peer_id)],
        greet_secs: Some(2),
        ..Start::default()
    };
    let b = cluster.start(1, &start);
    let eps = [Ep::of(&a), Ep::of(&b)];
    let rts = [cluster.runtime(0), cluster.runtime(1)];
    let main = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    main.block_on(async {
        let here = Agent::start(&rts[0], &eps[0], "agent-here");
        let there = Agent::start(&rts[1], &eps[1], "agent-full");
        let names = ["agent-here", "agent-full"].map(str::to_owned).into();
        let met = support::eventually(Duration::from_secs(30), async || {
            presence_agrees(&eps, &rts, &names).await.then_some(())
        })
        .await;
        assert!(met.is_some(), "the agents see each other");
        let filler = fill(&full);
        let ep = eps[1].clone();
        let refused = on(&rts[1], async move {
            for i in 0..500 {
                let params = json!({"agentName": format!("w{i}"), "metadata": {"pad": "x".repeat(8 * 1024)}});
                if let Some(r) = try_call(&ep, "state.createSession", params).await
                    && r.get("error").is_some()
                {
                    return Some(r);
                }
            }
            None
        })
        .await;
        let refused = refused.expect("the full node refuses a write");
        assert_eq!(refused["error"]["code"], -32603, "{refused}");
        for k in 0..3 {
            here.say(&format!("to the full node {k}"));
            there.say(&format!("from the full node {k}"));
        }
        let crossed = support::eventually(Duration::from_secs(15), async || {
            (0..3)
                .all(|k| {
                    there.heard_at(&format!("to the full node {k}")).is_some()
                        && here.heard_at(&format!("from the full node {k}")).is_some()
                })
                .then_some(())
        })
        .await;
        assert!(crossed.is_some(), "messages cross both ways with a full disk");
        std::fs::remove_file(filler).unwrap();
        here.leave();
        there.leave();
    });
    drop(main);
    for rt in rts {
        rt.shutdown_background();
    }
}
