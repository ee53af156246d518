//! Partition and heal (issue 34 item 2; `docs/reliability.md` "A partition"): five nodes on five
//! hosts ([`crate::support::cluster`]) are split 3 + 2 while agents on both sides store and
//! delete memories, publish task messages and come and go in an AGH channel, pay on channels
//! that cross the cut and on channels that do not, and register agents with two name servers
//! (one per side) that federate to each other; after the heal, within the bounds stated there,
//! every memory is on its three owners, no deleted memory is back, task messages published after
//! the heal reach every subscriber, AGH presence agrees on every node, each name server's
//! DISCOVER finds every agent of both again, and both ends of every channel hold the same total,
//! which counts every acknowledged payment and no voucher twice.
//!
//! The cut lasts `AGORA_PARTITION_SECS` seconds (60 by default). Each node's client runs on that
//! node's host, so a side's clients reach only their side during the cut. About 100 s: ignored
//! in CI for its time (`docs/reliability.md`); as root:
//! `cargo test -p agora --test it -- --ignored partition:: --nocapture`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::support::cluster::{Cluster, Start};
use crate::support::{Node, request, rpc_call, ws_with};

const N: usize = 5;
/// The hosts of the smaller side.
const SIDE_B: [usize; 2] = [3, 4];
pub(crate) const CHANNEL: &str = "work";
/// The stated bounds after the heal (`docs/reliability.md` "A partition"; measured 5.1 s and
/// 20.1 s on two cores): every task message published after the heal delivered to every
/// subscriber and AGH presence agreeing on every node…
const MESSAGES_BOUND: Duration = Duration::from_secs(20);
/// …and every memory on its three owners.
const MEMORY_BOUND: Duration = Duration::from_secs(60);

pub(crate) use crate::support::hosted::Ep;
use crate::support::hosted::{AnsAt, Paying, ans_config, auth, discovered};

/// Runs `f` on `rt` (a host's client) and waits for it here; a panic there is raised here.
pub(crate) async fn on<T: Send + 'static>(
    rt: &Runtime,
    f: impl Future<Output = T> + Send + 'static,
) -> T {
    rt.spawn(f)
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

async fn call(ep: Ep, method: &'static str, params: Value) -> Value {
    let a = auth();
    let mut ws = ws_with(&ep.rpc, &[("Authorization", &a)]).await.unwrap();
    let r = rpc_call(&mut ws, 1, method, params).await;
    let _ = ws.close(None).await;
    r
}

async fn get(ep: Ep, path: String) -> Value {
    let a = auth();
    let (code, body) = request(&ep.http, "GET", &path, &[("Authorization", &a)], "").await;
    assert_eq!(code, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// An AGH agent held open by a task on its host's runtime: it greets into [`CHANNEL`], says
/// what it is told to, and records the `say` texts it receives and when.
pub(crate) struct Agent {
    say: mpsc::Sender<Option<String>>,
    heard: Arc<Mutex<BTreeMap<String, Instant>>>,
}

impl Agent {
    pub(crate) fn start(rt: &Runtime, ep: &Ep, peer: &str) -> Self {
        let (say, mut rx) = mpsc::channel::<Option<String>>(1024);
        let heard = Arc::new(Mutex::new(BTreeMap::new()));
        let (url, peer, log) = (ep.agh.clone(), peer.to_owned(), heard.clone());
        rt.spawn(async move {
            let a = auth();
            let mut ws = ws_with(&url, &[("Authorization", &a)]).await.unwrap();
            let mut seq = 0u64;
            let mut envelope = |kind: &str, body: Value| {
                seq += 1;
                json!({"protocol": "agh-network/v0", "id": format!("{peer}-{seq}"),
                    "kind": kind, "channel": CHANNEL, "from": peer, "to": null,
                    "ts": crate::support::now(), "body": body, "proof": null})
                .to_string()
            };
            let greet = envelope(
                "greet",
                json!({"peer_card": {"peer_id": peer, "profiles_supported": ["agh-network/v0"],
                    "capabilities": ["task.write"], "artifacts_supported": ["capability"],
                    "trust_modes_supported": ["unverified"]}}),
            );
            ws.send(Message::Text(greet.into())).await.unwrap();
            loop {
                tokio::select! {
                    cmd = rx.recv() => match cmd {
                        Some(Some(text)) => {
                            let say = envelope("say", json!({"text": text}));
                            // During a cut a send may stall or fail; the test counts deliveries.
                            let _ = ws.send(Message::Text(say.into())).await;
                        }
                        _ => {
                            let _ = ws.close(None).await;
                            return;
                        }
                    },
                    frame = ws.next() => match frame {
                        Some(Ok(Message::Text(t))) => {
                            let v: Value = serde_json::from_str(t.as_str()).unwrap_or_default();
                            if v["kind"] == "say"
                                && let Some(text) = v["body"]["text"].as_str()
                            {
                                log.lock().unwrap().insert(text.to_owned(), Instant::now());
                            }
                        }
                        Some(Ok(_)) => {}
                        _ => return,
                    },
                }
            }
        });
        Self { say, heard }
    }

    pub(crate) fn say(&self, text: &str) {
        assert!(
            self.say.try_send(Some(text.to_owned())).is_ok(),
            "the agent keeps up"
        );
    }

    pub(crate) fn leave(&self) {
        let _ = self.say.try_send(None);
    }

    fn heard(&self, text: &str) -> bool {
        self.heard.lock().unwrap().contains_key(text)
    }

    /// When the agent received `text`.
    pub(crate) fn heard_at(&self, text: &str) -> Option<Instant> {
        self.heard.lock().unwrap().get(text).copied()
    }
}

/// Polls `check` (every 200 ms) until it holds; fails when `limit` has passed since `from`.
async fn until(from: Instant, limit: Duration, what: &str, mut check: impl AsyncFnMut() -> bool) {
    loop {
        if check().await {
            return;
        }
        assert!(from.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn cut_secs() -> u64 {
    std::env::var("AGORA_PARTITION_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60)
}

#[test]
#[ignore = "100 s of partition (root): run by hand, docs/reliability.md"]
fn split_three_two_then_heal_converges_within_the_stated_bounds() {
    let Some(cluster) = crate::hosts::cluster(N) else {
        return;
    };
    let mut nodes = start_nodes(&cluster);
    // The name servers of hosts 0 and 3, one on each side, federate to each other: both are
    // started again with that configuration once each has generated its key and certificate.
    let dir = cluster.host(0).data.parent().unwrap().to_owned();
    let gov = crate::support::agtp_governance_key(&dir);
    let peers: Vec<String> = (0..N)
        .map(|i| cluster.host(i).p2p(&nodes[i].peer_id))
        .collect();
    for (i, j) in [(0, 3), (3, 0)] {
        let config = ans_config(&cluster, i, &dir.join("gov.pub.json"), &[j]);
        let _ = nodes[i].child.kill();
        let _ = nodes[i].child.wait();
        let start = Start {
            bootstrap: (0..N)
                .filter(|&k| k != i)
                .map(|k| peers[k].clone())
                .collect(),
            args: vec!["--config".into(), config.display().to_string()],
            greet_secs: Some(2),
            ..Start::default()
        };
        nodes[i] = cluster.start(i, &start);
    }
    let eps: Vec<Ep> = nodes.iter().map(Ep::of).collect();
    let world = World {
        ans: nodes.iter().map(AnsAt::of).collect(),
        peer_ids: nodes.iter().map(|n| n.peer_id.clone()).collect(),
        gov,
    };
    let rts: Vec<Runtime> = (0..N).map(|i| cluster.runtime(i)).collect();
    let main = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    main.block_on(scenario(&cluster, &eps, &rts, &world));
    drop(main);
    for rt in rts {
        rt.shutdown_background();
    }
}

/// Node 0 first, then each node joining every node started before it.
fn start_nodes(cluster: &Cluster) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    for i in 0..N {
        let bootstrap = nodes
            .iter()
            .enumerate()
            .map(|(j, n)| cluster.host(j).p2p(&n.peer_id))
            .collect();
        let start = Start {
            bootstrap,
            greet_secs: Some(2),
            ..Start::default()
        };
        nodes.push(cluster.start(i, &start));
    }
    nodes
}

async fn store(rt: &Runtime, ep: &Ep, content: String) -> Option<String> {
    let r = on(
        rt,
        call(ep.clone(), "memory.store", json!({"content": content})),
    )
    .await;
    r["result"]["id"].as_str().map(str::to_owned)
}

async fn delete(rt: &Runtime, ep: &Ep, id: &str) -> Value {
    on(rt, call(ep.clone(), "memory.delete", json!({"id": id}))).await
}

async fn memory_status(rt: &Runtime, ep: &Ep) -> Value {
    on(rt, get(ep.clone(), "/status".into())).await["memory"].clone()
}

/// The rest of what the scenario needs of the nodes.
struct World {
    ans: Vec<AnsAt>,
    peer_ids: Vec<String>,
    gov: agora_agtp::signature::AnsSigningKey,
}

/// The federating name servers, one on each side.
const NAME_SERVERS: [usize; 2] = [0, 3];
/// What every registered agent does, and what DISCOVER asks for.
const JOB: &str = "Analyses invoices for fraud";
const INTENT: &str = "invoice fraud";
/// Payment channels (payer's host, payee's host): two across the cut (one each way), one
/// within each side.
const CHANNELS: [(usize, usize); 4] = [(0, 3), (4, 1), (1, 2), (3, 4)];

async fn activate(rts: &[Runtime], w: &World, host: usize, id: String) -> bool {
    let (ans, gov) = (w.ans[host].clone(), w.gov.clone());
    on(
        &rts[host],
        async move { ans.activate(&gov, &id, JOB).await },
    )
    .await
}

async fn discover(rts: &[Runtime], w: &World, host: usize) -> Option<Value> {
    let ans = w.ans[host].clone();
    on(&rts[host], async move { ans.discover(INTENT).await }).await
}

/// Whether each federating name server's DISCOVER lists every agent of `registered` and names
/// both name servers in its `federation_path`.
async fn federation_agrees(rts: &[Runtime], w: &World, registered: &[String]) -> bool {
    for host in NAME_SERVERS {
        let Some(result) = discover(rts, w, host).await else {
            return false;
        };
        let listed: BTreeSet<String> = discovered(&result).into_iter().collect();
        let path = result["federation_path"].to_string();
        if !registered.iter().all(|id| listed.contains(id))
            || NAME_SERVERS
                .iter()
                .any(|n| !path.contains(&format!("\"ans.{n}\"")))
        {
            return false;
        }
    }
    true
}

/// Pays on `channel` from its payer's host every 300 ms (amounts 1 to 7) until `stop`.
fn keep_paying(
    rts: &[Runtime],
    eps: &[Ep],
    mut channel: Paying,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Paying> {
    let ep = eps[channel.payer].clone();
    rts[channel.payer].spawn(async move {
        let mut k = 0u64;
        while !stop.load(Ordering::SeqCst) {
            channel.pay(&ep, 1 + k % 7).await;
            k += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        channel
    })
}

async fn scenario(cluster: &Cluster, eps: &[Ep], rts: &[Runtime], w: &World) {
    let limit = Duration::from_secs(90);
    // Every node sees five memory members.
    let t = Instant::now();
    until(Instant::now(), limit, "five members", async || {
        for i in 0..N {
            if memory_status(&rts[i], &eps[i]).await["members"] != N as u64 {
                return false;
            }
        }
        true
    })
    .await;
    eprintln!("partition: ring of {N} formed in {:?}", t.elapsed());

    // Before the cut: ten memories, and an agent on every node.
    let mut live: BTreeMap<String, String> = BTreeMap::new();
    let mut deleted: BTreeSet<String> = BTreeSet::new();
    let mut before = Vec::new();
    for k in 0..10 {
        let id = store(&rts[0], &eps[0], format!("before the cut, note {k}"))
            .await
            .expect("stored before the cut");
        live.insert(id.clone(), format!("before-{k}"));
        before.push(id);
    }
    let mut agents: BTreeMap<String, (usize, Agent)> = BTreeMap::new();
    for i in 0..N {
        let name = format!("agent-{i}");
        agents.insert(name.clone(), (i, Agent::start(&rts[i], &eps[i], &name)));
    }
    let names: BTreeSet<String> = agents.keys().cloned().collect();
    until(
        Instant::now(),
        limit,
        "presence before the cut",
        async || presence_agrees(eps, rts, &names).await,
    )
    .await;

    // ANS: an agent on each federating name server, found from both.
    let mut registered = Vec::new();
    for host in NAME_SERVERS {
        let id = format!("agt-{host}-before");
        assert!(activate(rts, w, host, id.clone()).await, "ACTIVATE {id}");
        registered.push(id);
    }
    until(
        Instant::now(),
        limit,
        "ANS federation before the cut",
        async || federation_agrees(rts, w, &registered).await,
    )
    .await;
    // Payments: the channels opened, then paid on from now until after the heal.
    let stop_paying = Arc::new(AtomicBool::new(false));
    let mut paying = Vec::new();
    for (a, b) in CHANNELS {
        let (ep, peer) = (eps[a].clone(), w.peer_ids[b].clone());
        let channel = on(&rts[a], async move { Paying::open(&ep, a, b, &peer).await }).await;
        paying.push(keep_paying(rts, eps, channel, Arc::clone(&stop_paying)));
    }

    // The cut: hosts 3 and 4 on one side, 0–2 on the other.
    cluster.split(&SIDE_B);
    let cut = Duration::from_secs(cut_secs());
    let started = Instant::now();
    let mut refused = [0usize; 2];
    let mut acked = 0;
    let mut k = 0;
    // Deletes of memories stored before the cut, from both sides: a side that reaches none of
    // a memory's owners answers `deleted: false` (it finds no such memory), and it stays.
    let mut not_found = 0;
    for (side, node) in [(0usize, 1usize), (1, 4)] {
        for id in &before[side * 3..side * 3 + 3] {
            let r = delete(&rts[node], &eps[node], id).await;
            match r["result"]["deleted"].as_bool() {
                Some(true) => {
                    live.remove(id);
                    deleted.insert(id.clone());
                }
                Some(false) => not_found += 1,
                None => panic!("delete {id}: {r}"),
            }
        }
    }
    // The agent on host 4 leaves; a new one arrives on host 1.
    agents.remove("agent-4").unwrap().1.leave();
    agents.insert(
        "agent-late".into(),
        (1, Agent::start(&rts[1], &eps[1], "agent-late")),
    );
    while started.elapsed() < cut {
        for (side, node) in [(0usize, 0usize), (1, 3)] {
            match store(
                &rts[node],
                &eps[node],
                format!("during the cut, side {side}, note {k}"),
            )
            .await
            {
                Some(id) => {
                    acked += 1;
                    if k % 4 == 0 {
                        let r = delete(&rts[node], &eps[node], &id).await;
                        assert_eq!(r["result"]["deleted"], true, "{r}");
                        deleted.insert(id);
                    } else {
                        live.insert(id, format!("cut-{side}-{k}"));
                    }
                }
                None => refused[side] += 1,
            }
            for (i, agent) in agents.values() {
                if *i == node {
                    agent.say(&format!("during the cut {k}"));
                }
            }
        }
        if k % 4 == 0 {
            for host in NAME_SERVERS {
                let id = format!("agt-{host}-cut-{k}");
                if activate(rts, w, host, id.clone()).await {
                    registered.push(id);
                }
            }
        }
        if k == 20 {
            // The cut is real for the name servers too: each answers alone.
            for (host, other) in [(0, 3), (3, 0)] {
                let result = discover(rts, w, host)
                    .await
                    .expect("DISCOVER during the cut");
                assert!(
                    !result["federation_path"]
                        .to_string()
                        .contains(&format!("\"ans.{other}\"")),
                    "{host} reached across the cut: {result}"
                );
            }
        }
        k += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "partition: during the {cut:?} cut {acked} stores acknowledged, {refused:?} refused (side A, side B), {} deletes ({not_found} found no owner)",
        deleted.len()
    );

    // The heal.
    cluster.join();
    let healed = Instant::now();
    let heal_ms = crate::support::now() as u64 * 1000;
    // Task messages published from the heal on, from both sides.
    let mut published = Vec::new();
    for j in 0..20 {
        for (name, (_, agent)) in &agents {
            if name == "agent-0" || name == "agent-3" {
                let text = format!("after the heal {j} from {name}");
                agent.say(&text);
                published.push((name.clone(), text));
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let missing = || {
        let mut missing = Vec::new();
        for (from, text) in &published {
            for (name, (_, agent)) in &agents {
                if name != from && !agent.heard(text) {
                    missing.push(format!("{name} lacks {text:?}"));
                }
            }
        }
        missing
    };
    let delivered = crate::support::eventually(
        MESSAGES_BOUND.saturating_sub(healed.elapsed()),
        async || missing().is_empty().then_some(()),
    )
    .await;
    assert!(
        delivered.is_some(),
        "task messages after the heal: not within {MESSAGES_BOUND:?}: {:?}",
        missing()
    );
    let delivered = healed.elapsed();
    eprintln!("partition: every task message after the heal delivered {delivered:?} after it");

    let names: BTreeSet<String> = agents.keys().cloned().collect();
    until(healed, MESSAGES_BOUND, "AGH presence agrees", async || {
        presence_agrees(eps, rts, &names).await
    })
    .await;
    let presence = healed.elapsed();
    eprintln!("partition: AGH presence agreed on every node {presence:?} after the heal");

    until(
        healed,
        MESSAGES_BOUND,
        "ANS federation caught up",
        async || federation_agrees(rts, w, &registered).await,
    )
    .await;
    eprintln!(
        "partition: ANS federation caught up {:?} after the heal ({} agents)",
        healed.elapsed(),
        registered.len()
    );

    // Payments: each channel is paid on again (the first payment after the heal settles what
    // the cut left unanswered), then both ends hold the same total, which counts every
    // acknowledged payment and no voucher twice; closing agrees on it.
    stop_paying.store(true, Ordering::SeqCst);
    let mut channels = Vec::new();
    for p in paying {
        channels.push(p.await.unwrap());
    }
    for mut channel in channels {
        let ep = eps[channel.payer].clone();
        let paid_again = crate::support::eventually(
            MESSAGES_BOUND.saturating_sub(healed.elapsed()),
            async || {
                let mut c = channel.clone();
                let ep = ep.clone();
                let (ok, c) = on(&rts[c.payer], async move { (c.pay(&ep, 1).await, c) }).await;
                channel = c;
                ok.then_some(())
            },
        )
        .await;
        assert!(
            paid_again.is_some(),
            "paid again after the heal: {channel:?}"
        );
        if SIDE_B.contains(&channel.payer) != SIDE_B.contains(&channel.payee) {
            assert!(
                channel.pending_named > 0,
                "a payment across the cut failed naming its pending voucher: {channel:?}"
            );
        }
        let spent = on(&rts[channel.payer], {
            let (c, eps) = (channel.clone(), eps.to_vec());
            async move { c.ends_agree(&eps).await }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let closed = on(
            &rts[channel.payer],
            call(
                ep,
                "micropayments.channel.close",
                json!({"channelId": channel.id}),
            ),
        )
        .await;
        assert_eq!(
            closed["result"]["totalSpentAtomic"],
            spent.to_string(),
            "{closed}"
        );
        eprintln!(
            "partition: channel {} → {}: {} paid ({} acknowledged, {} unanswered), both ends {spent}",
            channel.payer, channel.payee, channel.paid, channel.acked, channel.failed
        );
    }
    eprintln!(
        "partition: every channel paid again, both ends agreeing, {:?} after the heal",
        healed.elapsed()
    );

    // Every node's view has the five members, and its first anti-entropy round after the heal
    // found every memory it holds on all of that memory's owners (or, finding one short, put it
    // there; the next round then finds none short).
    let mut held = 0;
    until(
        healed,
        MEMORY_BOUND,
        "every memory on its 3 owners",
        async || {
            held = 0;
            for i in 0..N {
                let m = memory_status(&rts[i], &eps[i]).await;
                held += m["held"].as_u64().unwrap_or(0);
                let ok = m["members"] == N as u64
                    && m["replicas"]["under_target"] == 0
                    && m["replicas"]["checked_ms"].as_u64() > Some(heal_ms);
                if !ok {
                    return false;
                }
            }
            true
        },
    )
    .await;
    eprintln!(
        "partition: every memory on its 3 owners {:?} after the heal ({} live, {} deleted; {held} entries held in all, strays included)",
        healed.elapsed(),
        live.len(),
        deleted.len()
    );

    // Every live memory reads from every node; no deleted one comes back anywhere.
    for i in 0..N {
        for id in live.keys() {
            let r = on(
                &rts[i],
                call(eps[i].clone(), "memory.get", json!({"id": id})),
            )
            .await;
            assert!(r["result"]["content"].is_string(), "node {i}, {id}: {r}");
        }
        for id in &deleted {
            let r = on(
                &rts[i],
                call(eps[i].clone(), "memory.get", json!({"id": id})),
            )
            .await;
            assert_eq!(r["error"]["code"], -32602, "node {i}, deleted {id}: {r}");
        }
    }
    for (_, agent) in agents.into_values() {
        agent.leave();
    }
}

/// Whether every node lists exactly `names` in [`CHANNEL`].
pub(crate) async fn presence_agrees(eps: &[Ep], rts: &[Runtime], names: &BTreeSet<String>) -> bool {
    for i in 0..eps.len() {
        let v = on(
            &rts[i],
            get(eps[i].clone(), format!("/agh/v0/peers?channel={CHANNEL}")),
        )
        .await;
        let seen: BTreeSet<String> = v["peers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["peer_id"].as_str().map(str::to_owned))
            .collect();
        if &seen != names {
            return false;
        }
    }
    true
}
