//! Beyond one host (issue 34; `docs/reliability.md`): nodes on the hosts of a cluster of network
//! namespaces ([`crate::support::cluster`]), bound to their host's address with the API key and
//! AGTP over TLS, driven by a client on another host.
//!
//! Needs root (namespaces, veth, bridges); without it each test prints one `skipped:` line,
//! unless `AGORA_REQUIRE_EXTERNAL=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::cluster::{Cluster, Start};
use crate::support::{self, Node, TEST_API_KEY, eventually, request, rpc_call, ws_with};

const WAIT: Duration = Duration::from_secs(30);

/// A cluster of `n` hosts, or `None` (after the one `skipped:` line) when namespaces cannot be
/// made here.
pub(crate) fn cluster(n: usize) -> Option<Cluster> {
    let cluster = Cluster::create(n);
    support::external(
        "network namespaces (root, iproute2)",
        cluster.is_some(),
        "run the tests as root on a machine with iproute2",
    )
    .then_some(cluster)
    .flatten()
}

/// `host:port` of a `scheme://host:port[/path]` address.
fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

fn bearer() -> (&'static str, String) {
    ("Authorization", format!("Bearer {TEST_API_KEY}"))
}

/// `/status` of `node` with the key.
async fn status(node: &Node) -> Value {
    let auth = bearer();
    let (code, body) = request(
        authority(&node.http),
        "GET",
        "/status",
        &[(auth.0, &auth.1)],
        "",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// `agora args…` run on host `i`; its exit code and stderr.
fn cli_on(cluster: &Cluster, i: usize, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", &cluster.host(i).ns])
        .arg(env!("CARGO_BIN_EXE_agora"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn off_loopback_every_face_wants_the_key_and_agtp_wants_tls() {
    let Some(cluster) = cluster(3) else { return };
    let a = cluster.start(0, &Start::default());
    let b = cluster.start(
        1,
        &Start {
            bootstrap: vec![cluster.host(0).p2p(&a.peer_id)],
            ..Start::default()
        },
    );
    assert!(a.http.contains("198.18.0.11"), "{}", a.http);
    let auth = bearer();
    let key = [(auth.0, auth.1.as_str())];
    let http = authority(&a.http).to_owned();
    cluster.run(2, || async {
        // The nodes found each other across hosts.
        let seen = eventually(WAIT, async || {
            let s = status(&a).await;
            s["connected"]
                .as_array()?
                .iter()
                .any(|p| p == b.peer_id.as_str())
                .then_some(())
        })
        .await;
        assert!(seen.is_some(), "A and B connect across hosts");

        // Every face refuses a client without the key, and one with a wrong key.
        let wrong = [("Authorization", "Bearer not-the-key-not-the-key")];
        for url in [a.agh.as_str(), a.rpc.as_str()] {
            assert_eq!(ws_with(url, &[]).await.err(), Some(401), "{url}");
            assert_eq!(ws_with(url, &wrong).await.err(), Some(401), "{url}");
        }
        let mcp_init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}});
        for (method, path, body) in [
            ("GET", "/status", String::new()),
            ("GET", "/directory/search?q=echo", String::new()),
            ("GET", "/dashboard/snapshot", String::new()),
            ("POST", "/mcp", mcp_init.to_string()),
            ("POST", "/a2a", "{}".to_owned()),
        ] {
            let json = [("Content-Type", "application/json")];
            let (code, _) = request(&http, method, path, &json, &body).await;
            assert_eq!(code, 401, "{method} {path} without the key");
        }

        // With the key every face answers.
        let mut agh = ws_with(&a.agh, &key).await.expect("AGH with the key");
        let _ = futures::SinkExt::close(&mut agh).await;
        let mut rpc = ws_with(&a.rpc, &key).await.expect("JSON-RPC with the key");
        let r = rpc_call(&mut rpc, 1, "directory.search", json!({"query": "echo"})).await;
        assert!(r["result"]["results"].is_array(), "{r}");

        // The dashboard: its page is open, its data needs the key and shows the mesh.
        let (code, page) = request(&http, "GET", "/", &[], "").await;
        assert_eq!(code, 200);
        assert!(
            page.contains("<html") || page.contains("<!doctype"),
            "{page}"
        );
        let (code, body) = request(&http, "GET", "/dashboard/snapshot", &key, "").await;
        assert_eq!(code, 200, "{body}");
        let snap: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(snap["status"]["peer_id"], a.peer_id.as_str());
        assert!(body.contains(&b.peer_id), "the snapshot shows B: {body}");

        // A foreign Origin is refused; the node's own (its HTTP face's address) is not.
        let evil = [key[0], ("Origin", "http://evil.example")];
        assert_eq!(ws_with(&a.rpc, &evil).await.err(), Some(403));
        assert_eq!(ws_with(&a.agh, &evil).await.err(), Some(403));
        let own_origin = format!("http://{http}");
        let own = [key[0], ("Origin", own_origin.as_str())];
        ws_with(&a.rpc, &own).await.expect("the node's own origin");
        let post = [
            key[0],
            ("Origin", "http://evil.example"),
            ("Content-Type", "application/json"),
        ];
        let (code, _) = request(&http, "POST", "/mcp", &post, &mcp_init.to_string()).await;
        assert_eq!(code, 403, "a foreign Origin's POST");
    });

    // AGTP: over TLS with the node's certificate from host 2 it answers; plain AGTP is refused.
    let ans = authority(&a.agtp).to_owned();
    let cert = a.data.join("agtp-cert.pem");
    let cert = cert.to_str().unwrap();
    let tls = ["--tls", "--ca", cert];
    let mut args = vec!["discover", "--ans", &ans, "--intent", "audit contracts"];
    args.extend(tls);
    let (code, err) = cli_on(&cluster, 2, &args);
    assert_eq!(code, Some(0), "discover over TLS: {err}");
    let (code, err) = cli_on(
        &cluster,
        2,
        &["discover", "--ans", &ans, "--intent", "audit contracts"],
    );
    assert_eq!(
        code,
        Some(1),
        "plain AGTP beyond loopback is refused: {err}"
    );
}

/// `GET path` on `node` with the key; its body.
async fn get_keyed(node: &Node, path: &str) -> String {
    let auth = bearer();
    let (code, body) = request(authority(&node.http), "GET", path, &[(auth.0, &auth.1)], "").await;
    assert_eq!(code, 200, "{path}: {body}");
    body
}

/// `agora_agh_network_envelopes_total{outcome, reason}` of `node`.
async fn agh_from_network(node: &Node, outcome: &str, reason: &str) -> f64 {
    let text = get_keyed(node, "/metrics").await;
    crate::dashboard::sample(
        &crate::dashboard::scrape(&text),
        "agora_agh_network_envelopes_total",
        &[("outcome", outcome), ("reason", reason)],
    )
    .unwrap_or(0.0)
}

/// An AGH `say` into `channel` stamped `ts`.
fn say(from: &str, channel: &str, text: &str, ts: i64) -> Value {
    json!({"protocol": "agh-network/v0", "id": format!("{from}-{channel}-{text}"), "kind": "say",
        "channel": channel, "from": from, "to": null, "ts": ts, "body": {"text": text},
        "proof": null})
}

/// Waits until `node`'s `/status` `clock` satisfies `ok`; the section.
async fn clock_until(node: &Node, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let seen = eventually(WAIT, async || {
        last = status(node).await["clock"].clone();
        ok(&last).then(|| last.clone())
    })
    .await;
    seen.unwrap_or_else(|| panic!("{what}: {last}"))
}

/// One node (S) whose clock runs two minutes ahead, then two minutes behind, among two whose
/// clocks are right (A, B): S says in its log and `/status` that its clock disagrees with its
/// peers' while A and B do not; every node keeps taking the others' gossip (inside the
/// freshness windows); an AGH envelope that A takes but that is outside the replay age on S's
/// clock is refused there as `expired` and counted, and one inside it is delivered.
#[test]
fn a_clock_two_minutes_off_is_reported_and_the_windows_hold() {
    let Some(cluster) = cluster(4) else { return };
    if !support::external(
        "libfaketime",
        support::cluster::faketime_library().is_some(),
        "apt-get install faketime",
    ) {
        return;
    }
    let a = cluster.start(0, &Start::default());
    let boot_a = cluster.host(0).p2p(&a.peer_id);
    let b = cluster.start(
        1,
        &Start {
            bootstrap: vec![boot_a.clone()],
            ..Start::default()
        },
    );
    let boot = vec![boot_a, cluster.host(1).p2p(&b.peer_id)];
    for skew in [120_i64, -120] {
        let log = support::Log::default();
        let s = cluster.start(
            2,
            &Start {
                bootstrap: boot.clone(),
                skew_secs: Some(skew),
                log: Some(log.clone()),
                ..Start::default()
            },
        );
        cluster.run(3, || async {
            // S reads its peers' clocks off their envelopes: they are `skew` behind it.
            let want = -skew * 1000;
            let c = clock_until(&s, "S says its clock disagrees", |c| {
                c["disagrees"] == true
                    && c["offset_ms"]
                        .as_i64()
                        .is_some_and(|o| (o - want).abs() < 5_000)
            })
            .await;
            assert_eq!(c["peers"], 2, "{c}");
            // A and B took S's envelopes (inside the 300 s window) and trust their own clocks.
            for n in [&a, &b] {
                clock_until(n, "A and B agree with their peers", |c| {
                    c["peers"] == 2 && c["disagrees"] == false
                })
                .await;
            }

            // AGH: an agent on A and one on S in one channel.
            let auth = bearer();
            let key = [(auth.0, auth.1.as_str())];
            let channel = if skew > 0 { "ahead" } else { "behind" };
            let mut on_s = support::Agent::connect_with(&s.agh, "on-s", channel, &key).await;
            on_s.greet(&["listen"]).await;
            let mut on_a = support::Agent::connect_with(&a.agh, "on-a", channel, &key).await;
            on_a.greet(&["talk"]).await;
            let both = eventually(WAIT, async || {
                let body = get_keyed(&a, &format!("/agh/v0/peers?channel={channel}")).await;
                body.contains("on-s").then_some(())
            })
            .await;
            assert!(both.is_some(), "A sees S's agent");
            // 200 s off true time on the side S's clock is off: A takes it (200 < 300), S
            // finds it 320 s off and refuses it as expired. 60 s off: both take it.
            let expired_before = agh_from_network(&s, "rejected", "expired").await;
            let far = support::now() - skew.signum() * 200;
            let near = support::now() - skew.signum() * 60;
            on_a.send(&say("on-a", channel, "far", far)).await;
            on_a.send(&say("on-a", channel, "near", near)).await;
            let heard = on_s
                .expect(WAIT, |v| v["kind"] == "say" && v["body"]["text"] == "near")
                .await;
            assert!(heard.is_some(), "S delivers the envelope inside its window");
            let counted = eventually(WAIT, async || {
                (agh_from_network(&s, "rejected", "expired").await > expired_before).then_some(())
            })
            .await;
            assert!(
                counted.is_some(),
                "S counts the refused envelope as expired"
            );
            on_a.close().await;
            on_s.close().await;
        });
        assert!(
            log.count(&["the clock disagrees"]) >= 1,
            "S says so in its log"
        );
        drop(s);
    }
}

/// Delivery figures of one gossip run.
struct Figures {
    delivered: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

/// Agents on `nodes` (one each, its client on `rts[i]`) in one channel; the first says
/// `MESSAGES` texts, one every 10 ms; every other agent's receipt time of each.
fn gossip_figures(nodes: &[Node], rts: &[tokio::runtime::Runtime]) -> Figures {
    const MESSAGES: usize = 300;
    use crate::partition::{Agent, Ep, presence_agrees};
    let eps: Vec<Ep> = nodes.iter().map(Ep::of).collect();
    let main = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    main.block_on(async {
        let agents: Vec<Agent> = (0..nodes.len())
            .map(|i| Agent::start(&rts[i], &eps[i], &format!("bench-{i}")))
            .collect();
        let names = (0..nodes.len()).map(|i| format!("bench-{i}")).collect();
        let formed = eventually(Duration::from_secs(90), async || {
            presence_agrees(&eps, rts, &names).await.then_some(())
        })
        .await;
        assert!(formed.is_some(), "every node sees every agent");
        // Warm up until a message reaches every agent: the topic's mesh has formed.
        let mut w = 0;
        let warm = eventually(Duration::from_secs(60), async || {
            w += 1;
            let text = format!("warm-{w}");
            agents[0].say(&text);
            tokio::time::sleep(Duration::from_millis(500)).await;
            agents[1..]
                .iter()
                .all(|a| a.heard_at(&text).is_some())
                .then_some(())
        })
        .await;
        assert!(warm.is_some(), "the channel's mesh forms");
        let mut sent = Vec::new();
        for k in 0..MESSAGES {
            let text = format!("m-{k}");
            sent.push((text.clone(), std::time::Instant::now()));
            agents[0].say(&text);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = eventually(Duration::from_secs(20), async || {
            sent.iter()
                .all(|(t, _)| agents[1..].iter().all(|a| a.heard_at(t).is_some()))
                .then_some(())
        })
        .await;
        let mut lat: Vec<Duration> = Vec::new();
        for (text, at) in &sent {
            for a in &agents[1..] {
                if let Some(got) = a.heard_at(text) {
                    lat.push(got.saturating_duration_since(*at));
                }
            }
        }
        for a in &agents {
            a.leave();
        }
        let want = sent.len() * (agents.len() - 1);
        lat.sort_unstable();
        let pick = |q: f64| lat[((lat.len() as f64 - 1.0) * q) as usize];
        Figures {
            delivered: lat.len() as f64 / want as f64,
            p50: pick(0.5),
            p99: pick(0.99),
            max: lat.last().copied().unwrap_or_default(),
        }
    })
}

/// Gossip across ten namespaced hosts against the same ten nodes on loopback, in one run
/// (`docs/performance.md` "Gossip across hosts"): an AGH agent on every node in one channel,
/// 300 `say` messages from one of them, each node's agent's receipt time. A benchmark, not run by
/// CI (about 15 s); as root:
/// `cargo test -p agora --test it -- --ignored hosts::gossip_across --nocapture`.
#[test]
#[ignore = "a benchmark (about 15 s, root): run by hand"]
fn gossip_across_ten_hosts_against_loopback() {
    const NODES: usize = 10;
    let Some(cluster) = cluster(NODES) else {
        return;
    };
    let runtimes = |n: usize, f: &dyn Fn(usize) -> tokio::runtime::Runtime| -> Vec<_> {
        (0..n).map(f).collect()
    };
    // Every node joins node 0 and the node started just before it.
    let mut hosts: Vec<Node> = Vec::new();
    for i in 0..NODES {
        let mut bootstrap = Vec::new();
        for j in [0, i.saturating_sub(1)] {
            if j < i && !bootstrap.contains(&cluster.host(j).p2p(&hosts[j].peer_id)) {
                bootstrap.push(cluster.host(j).p2p(&hosts[j].peer_id));
            }
        }
        let start = Start {
            bootstrap,
            greet_secs: Some(5),
            ..Start::default()
        };
        hosts.push(cluster.start(i, &start));
    }
    let rts = runtimes(NODES, &|i| cluster.runtime(i));
    let across = gossip_figures(&hosts, &rts);
    drop(hosts);
    for rt in rts {
        rt.shutdown_background();
    }

    let dir = tempfile::tempdir().unwrap();
    let key = [("AGORA_API_KEY", TEST_API_KEY)];
    let mut local: Vec<Node> = Vec::new();
    for i in 0..NODES {
        let mut bootstrap: Vec<String> = Vec::new();
        for j in [0, i.saturating_sub(1)] {
            if j < i && !bootstrap.contains(&local[j].p2p) {
                bootstrap.push(local[j].p2p.clone());
            }
        }
        let boot: Vec<&str> = bootstrap.iter().map(String::as_str).collect();
        local.push(support::spawn_node_env(
            &dir.path().join(format!("n{i}")),
            &boot,
            5,
            &[],
            &key,
        ));
    }
    let rts = runtimes(NODES, &|_| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    });
    let loopback = gossip_figures(&local, &rts);
    for rt in rts {
        rt.shutdown_background();
    }
    for (name, f) in [("10 hosts", &across), ("loopback", &loopback)] {
        eprintln!(
            "gossip {name}: delivered {:.2} %, p50 {:?}, p99 {:?}, max {:?}",
            f.delivered * 100.0,
            f.p50,
            f.p99,
            f.max
        );
    }
    eprintln!(
        "ratio hosts/loopback: p50 {:.2}, p99 {:.2}",
        across.p50.as_secs_f64() / loopback.p50.as_secs_f64(),
        across.p99.as_secs_f64() / loopback.p99.as_secs_f64()
    );
    assert!(across.delivered > 0.99 && loopback.delivered > 0.99);
}
