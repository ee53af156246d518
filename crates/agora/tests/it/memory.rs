//! The memory primitive (`memory.*`) across real node processes on 127.0.0.1: replication to
//! three owners, reads and searches from another node, an owner that dies, a delete that a
//! returning owner must not undo, restarts, a node alone, encryption at rest and session tokens.
//! Nodes here embed with the built-in lexical embedder (no model in their data directories); the
//! MiniLM scenario of spec §4.4 runs when the model is installed (`AGORA_MINILM_DIR`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    self, Node, eventually, get_json, rpc_call, rpc_connect, spawn_node, spawn_node_env,
    spawn_openai_server,
};

/// `/status` `memory` of a node.
async fn memory_status(node: &Node) -> Value {
    get_json(&node.http, "/status").await["memory"].clone()
}

/// Waits until every node sees `n` members.
async fn members(nodes: &[&Node], n: u64) {
    let ok = eventually(Duration::from_secs(30), async || {
        for node in nodes {
            if memory_status(node).await["members"] != n {
                return None;
            }
        }
        Some(())
    })
    .await;
    assert!(ok.is_some(), "every node sees {n} memory members");
}

async fn call(node: &Node, method: &str, params: Value) -> Value {
    let mut ws = rpc_connect(&node.rpc).await;
    rpc_call(&mut ws, 1, method, params).await
}

async fn store(node: &Node, content: &str, extra: Value) -> Value {
    let mut params = json!({ "content": content });
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    let r = call(node, "memory.store", params).await;
    assert!(r["result"]["id"].is_string(), "stored: {r}");
    r["result"].clone()
}

fn ids(search: &Value) -> Vec<String> {
    search["result"]["memories"]
        .as_array()
        .unwrap_or_else(|| panic!("a search result: {search}"))
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

/// A, B (joins A) and C (joins B), all serving memory.
fn three(dir: &Path) -> (Node, Node, Node) {
    let a = spawn_node(&dir.join("a"), &[], 30, &[]);
    let b = spawn_node(&dir.join("b"), &[&a.p2p], 30, &[]);
    let c = spawn_node(&dir.join("c"), &[&b.p2p], 30, &[]);
    (a, b, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_on_a_it_is_read_and_found_from_c() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = three(dir.path());
    members(&[&a, &b, &c], 3).await;
    let stored = store(
        &a,
        "Exponential backoff with jitter prevents thundering herd on 429 responses.",
        json!({"metadata": {"source": "test", "tags": ["api"]}}),
    )
    .await;
    assert_eq!(stored["replicas"], 3, "{stored}");
    let id = stored["id"].as_str().unwrap();
    assert!(id.starts_with("mem-"));
    for other in [
        "Roast the peppers until the skins blister.",
        "The match went to extra time.",
    ] {
        store(&b, other, json!({})).await;
    }
    let got = call(&c, "memory.get", json!({ "id": id })).await;
    assert_eq!(
        got["result"]["content"],
        "Exponential backoff with jitter prevents thundering herd on 429 responses."
    );
    assert_eq!(got["result"]["metadata"]["tags"][0], "api");
    assert_eq!(got["result"]["peerId"], stored["peerId"]);
    let found = call(
        &c,
        "memory.search",
        json!({"query": "backoff and jitter for 429 responses", "limit": 2}),
    )
    .await;
    assert_eq!(ids(&found).first().map(String::as_str), Some(id), "{found}");
    assert_eq!(found["result"]["embedder"], "lexical-v1");
    assert!(found["result"]["searchTime"].is_u64());
    let m = &found["result"]["memories"][0];
    for field in [
        "id",
        "content",
        "similarity",
        "metadata",
        "peerId",
        "createdAt",
    ] {
        assert!(m.get(field).is_some(), "{field} in {m}");
    }
    // Every node holds every memory (3 members, 3 replicas).
    for node in [&a, &b, &c] {
        assert_eq!(memory_status(node).await["held"], 3);
    }
    let bad = call(
        &c,
        "memory.get",
        json!({ "id": "mem-000000000000000000000000" }),
    )
    .await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let bad = call(&c, "memory.search", json!({ "query": "x", "limit": 101 })).await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ring_shares_holdings_and_replicas_under_target_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    // A node alone: the whole ring, and every memory short of its replicas.
    let a = spawn_node(&dir.path().join("a"), &[], 30, &[]);
    store(&a, "first note about ring shares", json!({})).await;
    store(&a, "second note about replica targets", json!({})).await;
    let m = memory_status(&a).await;
    assert_eq!(m["ring"].as_array().unwrap().len(), 1, "{m}");
    assert_eq!(m["ring"][0]["peer_id"], a.peer_id.as_str());
    assert_eq!(m["ring"][0]["share"], 1.0);
    assert_eq!(m["ring"][0]["me"], true);
    assert_eq!(m["ring"][0]["held"], 2);
    assert_eq!(
        m["replicas"],
        json!({"target": 3, "owners": 1, "under_target": 2, "checked_ms": null}),
        "{m}"
    );
    // Two more: three members, about a third of the ring each; a's anti-entropy round gives
    // them the two memories, their heartbeats say so, and no memory is under target any more.
    let b = spawn_node(&dir.path().join("b"), &[&a.p2p], 30, &[]);
    let c = spawn_node(&dir.path().join("c"), &[&b.p2p], 30, &[]);
    let nodes = [&a, &b, &c];
    let settled = eventually(Duration::from_secs(45), async || {
        let mut last = Value::Null;
        for node in nodes {
            let m = memory_status(node).await;
            let ring = m["ring"].as_array()?;
            if ring.len() != 3
                || ring.iter().any(|r| r["held"] != 2)
                || m["replicas"]["owners"] != 3
                || m["replicas"]["under_target"] != 0
                || !m["replicas"]["checked_ms"].is_u64()
            {
                return None;
            }
            last = m;
        }
        Some(last)
    })
    .await;
    let m =
        settled.expect("every node sees three members holding both memories, none under target");
    let ring = m["ring"].as_array().unwrap();
    let shares: Vec<f64> = ring.iter().map(|r| r["share"].as_f64().unwrap()).collect();
    assert!(
        (shares.iter().sum::<f64>() - 1.0).abs() < 1e-9,
        "{shares:?}"
    );
    assert!(
        shares.iter().all(|s| (0.25..0.42).contains(s)),
        "{shares:?}"
    );
    let mut peers: Vec<&str> = ring
        .iter()
        .map(|r| r["peer_id"].as_str().unwrap())
        .collect();
    peers.sort_unstable();
    let mut want = vec![a.peer_id.as_str(), b.peer_id.as_str(), c.peer_id.as_str()];
    want.sort_unstable();
    assert_eq!(peers, want);
    assert_eq!(ring.iter().filter(|r| r["me"] == true).count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_owner_is_replaced_and_every_memory_stays_readable() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = three(dir.path());
    let d = spawn_node(&dir.path().join("d"), &[&c.p2p, &a.p2p], 30, &[]);
    members(&[&a, &b, &c, &d], 4).await;
    let mut stored = Vec::new();
    for i in 0..24 {
        let s = store(
            &a,
            &format!("note number {i} about topic {}", i % 5),
            json!({}),
        )
        .await;
        assert_eq!(s["replicas"], 3, "{s}");
        stored.push(s["id"].as_str().unwrap().to_owned());
    }
    drop(d);
    // Within the bound (60 s) every memory is on its three live owners: with three nodes left,
    // on every one of them.
    let started = std::time::Instant::now();
    let ok = eventually(Duration::from_secs(60), async || {
        for node in [&a, &b, &c] {
            let s = memory_status(node).await;
            if s["members"] != 3 || s["held"] != 24 {
                return None;
            }
        }
        Some(())
    })
    .await;
    assert!(
        ok.is_some(),
        "re-replicated to the 3 live owners within 60 s"
    );
    eprintln!("re-replicated in {:?}", started.elapsed());
    for id in &stored {
        let got = call(&b, "memory.get", json!({ "id": id })).await;
        assert!(got["result"]["content"].is_string(), "{got}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_while_an_owner_was_down_it_stays_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = three(dir.path());
    members(&[&a, &b, &c], 3).await;
    let id = store(&a, "the launch code is in the blue folder", json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let keep = store(&a, "the folder itself is in the desk", json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let c_data = c.data.clone();
    let c_p2p_port = c.p2p.split('/').nth(4).unwrap().to_owned();
    drop(c);
    let deleted = call(&a, "memory.delete", json!({ "id": id })).await;
    assert_eq!(deleted["result"]["deleted"], true, "{deleted}");
    let c = spawn_node(
        &c_data,
        &[&b.p2p],
        30,
        &["--p2p-listen", &format!("/ip4/127.0.0.1/tcp/{c_p2p_port}")],
    );
    members(&[&a, &b, &c], 3).await;
    // C comes back with the memory it held; anti-entropy brings it the tombstone.
    let gone = eventually(Duration::from_secs(60), async || {
        let found = call(
            &c,
            "memory.search",
            json!({ "query": "launch code blue folder" }),
        )
        .await;
        let s = memory_status(&c).await;
        (!ids(&found).contains(&id) && s["counters"]["sync_rounds"].as_u64() >= Some(1))
            .then_some(())
    })
    .await;
    assert!(gone.is_some(), "the returning owner took the tombstone");
    let got = call(&c, "memory.get", json!({ "id": id })).await;
    assert_eq!(got["error"]["code"], -32602, "{got}");
    let kept = call(&c, "memory.get", json!({ "id": keep })).await;
    assert!(kept["result"]["content"].is_string(), "{kept}");
    let again = call(&a, "memory.delete", json!({ "id": id })).await;
    assert_eq!(again["result"]["deleted"], false, "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_alone_keeps_memories_tiers_and_tombstones_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("solo");
    let node = spawn_node(&data, &[], 30, &[]);
    let session = json!({ "sessionId": "s-1" });
    let first = store(&node, "first note of the session", session.clone()).await;
    assert_eq!(first["replicas"], 1, "a node alone: {first}");
    assert_eq!(first["peerId"], node.peer_id.as_str());
    let second = store(&node, "second note, to be archived", session.clone()).await;
    let third = store(&node, "third note, to be deleted", session.clone()).await;
    let archived = call(&node, "memory.archive", json!({ "id": second["id"] })).await;
    assert_eq!(
        archived["result"],
        json!({"archived": true, "tier": "archival"})
    );
    let deleted = call(&node, "memory.delete", json!({ "id": third["id"] })).await;
    assert_eq!(deleted["result"]["deleted"], true);
    drop(node);
    let node = spawn_node(&data, &[], 30, &[]);
    let list = call(&node, "memory.list", json!({ "sessionId": "s-1" })).await;
    assert_eq!(list["result"]["total"], 2, "{list}");
    let listed: Vec<&Value> = list["result"]["memories"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    assert_eq!(listed[0]["id"], first["id"], "oldest first");
    assert_eq!(listed[1]["tier"], "archival");
    let working = call(&node, "memory.search", json!({ "query": "note archived" })).await;
    assert!(!ids(&working).contains(&second["id"].as_str().unwrap().to_owned()));
    let archival = call(
        &node,
        "memory.search",
        json!({ "query": "note archived", "tier": "archival" }),
    )
    .await;
    assert_eq!(
        ids(&archival),
        vec![second["id"].as_str().unwrap().to_owned()]
    );
    let gone = call(&node, "memory.get", json!({ "id": third["id"] })).await;
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
    let page = call(
        &node,
        "memory.list",
        json!({ "sessionId": "s-1", "limit": 1, "offset": 1 }),
    )
    .await;
    assert_eq!(page["result"]["memories"][0]["id"], second["id"], "{page}");
    assert_eq!(page["result"]["total"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_is_encrypted_at_rest() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("n");
    let node = spawn_node(&data, &[], 30, &[]);
    let sentence = "the quarterly numbers live in the cellar spreadsheet";
    store(
        &node,
        sentence,
        json!({"metadata": {"secret": "metadata-marker-xyz"}}),
    )
    .await;
    drop(node);
    let bytes = std::fs::read(data.join("agora.redb")).unwrap();
    for needle in [
        sentence.as_bytes(),
        b"cellar spreadsheet",
        b"metadata-marker-xyz",
    ] {
        assert!(
            !bytes.windows(needle.len()).any(|w| w == needle),
            "{:?} is not in the database file",
            String::from_utf8_lossy(needle)
        );
    }
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(data.join("memory.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_token_sees_only_its_session() {
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("n"), &[], 30, &[]);
    let created = call(
        &node,
        "state.createSession",
        json!({ "agentName": "agent-1" }),
    )
    .await;
    let session = created["result"]["sessionId"].as_str().unwrap().to_owned();
    let token = created["result"]["sessionToken"]
        .as_str()
        .unwrap()
        .to_owned();
    let other = store(
        &node,
        "a note of another session",
        json!({"sessionId": "other"}),
    )
    .await;
    let mut ws = support::rpc_connect_bearer(&node.rpc, &token).await;
    let mine = rpc_call(
        &mut ws,
        1,
        "memory.store",
        json!({ "content": "a note of mine" }),
    )
    .await;
    let mine_id = mine["result"]["id"].as_str().unwrap().to_owned();
    let listed = rpc_call(&mut ws, 2, "memory.list", json!({ "sessionId": session })).await;
    assert_eq!(listed["result"]["total"], 1, "{listed}");
    assert_eq!(listed["result"]["memories"][0]["id"], mine_id.as_str());
    let found = rpc_call(&mut ws, 3, "memory.search", json!({ "query": "a note" })).await;
    assert_eq!(ids(&found), vec![mine_id]);
    let hidden = rpc_call(&mut ws, 4, "memory.get", json!({ "id": other["id"] })).await;
    assert_eq!(hidden["error"]["code"], -32602, "{hidden}");
    let refused = rpc_call(&mut ws, 5, "memory.list", json!({ "sessionId": "other" })).await;
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    let refused = rpc_call(&mut ws, 6, "memory.delete", json!({ "id": other["id"] })).await;
    assert!(refused["error"].is_object(), "{refused}");
}

/// Subjects far from rate limiting, to surround the one memory that is about it.
const SUBJECTS: [(&str, &[&str]); 5] = [
    (
        "cooking",
        &[
            "Simmer the tomato sauce",
            "Knead the bread dough",
            "Roast the vegetables",
            "Whisk the eggs",
            "Season the soup",
        ],
    ),
    (
        "sport",
        &[
            "The striker scored",
            "The marathon runner paced",
            "The tennis final went",
            "The cyclist climbed",
            "The goalkeeper saved",
        ],
    ),
    (
        "travel",
        &[
            "The night train to Vienna left",
            "We hiked along the coast",
            "The ferry to the island sailed",
            "Our hotel overlooked the harbour",
            "The museum tour started",
        ],
    ),
    (
        "gardening",
        &[
            "Plant the tulip bulbs",
            "Prune the roses",
            "Water the tomatoes",
            "Mulch the flower beds",
            "Harvest the apples",
        ],
    ),
    (
        "music",
        &[
            "The orchestra tuned",
            "She practised the violin",
            "The choir rehearsed",
            "The drummer kept time",
            "The pianist played Chopin",
        ],
    ),
];

const ENDINGS: [&str; 8] = [
    "in the early morning.",
    "for about twenty minutes.",
    "while the rain kept falling.",
    "before the guests arrived.",
    "with great patience.",
    "on a quiet Sunday.",
    "after a long week.",
    "under the summer sun.",
];

const PLACES: [&str; 5] = [
    "at home",
    "in the village",
    "near the river",
    "downtown",
    "by the lake",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minilm_finds_the_spec_example_among_a_thousand_others() {
    let Some(model) = support::minilm_model() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("n");
    support::install_minilm(&data, &model);
    let node = spawn_node_env(&data, &[], 30, &[], &[("AGORA_MEMORY_EMBEDDER", "minilm")]);
    let mut ws = rpc_connect(&node.rpc).await;
    let mut n = 0u64;
    for (_, openings) in SUBJECTS {
        for opening in openings {
            for place in PLACES {
                for ending in ENDINGS {
                    n += 1;
                    let r = rpc_call(
                        &mut ws,
                        n,
                        "memory.store",
                        json!({ "content": format!("{opening} {place} {ending}") }),
                    )
                    .await;
                    assert!(r["result"]["id"].is_string(), "{r}");
                }
            }
        }
    }
    assert!(n >= 1_000, "{n} other memories");
    let example = "Exponential backoff with jitter prevents thundering herd on 429 responses. Base delay 1s, max 60s, jitter +/- 25%.";
    let id = rpc_call(
        &mut ws,
        n + 1,
        "memory.store",
        json!({ "content": example }),
    )
    .await["result"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let found = rpc_call(
        &mut ws,
        n + 2,
        "memory.search",
        json!({ "query": "error handling patterns for rate-limited APIs", "limit": 5 }),
    )
    .await;
    assert_eq!(found["result"]["embedder"], "minilm-l6-v2");
    assert_eq!(ids(&found).first(), Some(&id), "{found}");
    let sim = found["result"]["memories"][0]["similarity"]
        .as_f64()
        .unwrap();
    eprintln!(
        "spec example similarity {sim:.4}, search time {} ms",
        found["result"]["searchTime"]
    );
}

/// `embedder = "openai"`: a node embeds through an OpenAI-compatible endpoint (the Python
/// fixture), says so in `/status` and in search results, and ranks by the endpoint's vectors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_compatible_endpoint_embeds_memories() {
    let Some(server) = spawn_openai_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node_env(
        &dir.path().join("n"),
        &[],
        30,
        &[],
        &[
            ("AGORA_MEMORY_EMBEDDER", "openai"),
            ("AGORA_MEMORY_BASE_URL", &server.url),
            ("AGORA_MEMORY_MODEL", "hash-embed"),
        ],
    );
    let status = memory_status(&node).await;
    assert_eq!(status["embedder"], "openai:hash-embed", "{status}");
    let apple = store(&node, "apple pie with cinnamon and butter", json!({})).await;
    assert_eq!(apple["replicas"], 1);
    for other in [
        "the quarterly budget review meeting",
        "a train timetable for the coast line",
    ] {
        store(&node, other, json!({})).await;
    }
    let found = call(
        &node,
        "memory.search",
        json!({"query": "cinnamon apple crumble", "limit": 3}),
    )
    .await;
    assert_eq!(found["result"]["embedder"], "openai:hash-embed", "{found}");
    assert_eq!(
        ids(&found).first(),
        apple["id"].as_str().map(str::to_owned).as_ref()
    );
    // The endpoint goes away: calls that need an embedding fail with a clear error, others
    // still work.
    drop(server);
    let failed = call(&node, "memory.store", json!({"content": "one more"})).await;
    assert!(
        failed["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("embedding endpoint")),
        "{failed}"
    );
    let got = call(&node, "memory.get", json!({"id": apple["id"]})).await;
    assert_eq!(
        got["result"]["content"],
        "apple pie with cinnamon and butter"
    );
}

/// Per-peer limits on node-to-node requests: A accepts one request per second from each peer
/// (bursts of two), so B's writes soon find A refusing its replica (−32003 answered at once),
/// B's `memory.store` says so with −32007, and A stays a member (a refusal is not a failure).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_over_its_request_rate_is_refused_not_queued() {
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_node_env(
        &dir.path().join("a"),
        &[],
        30,
        &[],
        &[("AGORA_MEMORY_PEER_RATE", "1")],
    );
    let b = spawn_node(&dir.path().join("b"), &[&a.p2p], 30, &[]);
    members(&[&a, &b], 2).await;
    let mut ws = rpc_connect(&b.rpc).await;
    let mut refused = None;
    for n in 0..20u64 {
        let r = rpc_call(
            &mut ws,
            n,
            "memory.store",
            json!({ "content": format!("note number {n}") }),
        )
        .await;
        if r["error"]["code"] == -32007 {
            refused = Some(r);
            break;
        }
    }
    let refused = refused.expect("a write beyond A's per-peer rate is refused");
    assert_eq!(refused["error"]["data"]["required"], 2, "{refused}");
    assert_eq!(refused["error"]["data"]["acknowledged"], 1, "{refused}");
    let limited = memory_status(&a).await["counters"]["peer_requests_limited"].clone();
    assert!(limited.as_u64().is_some_and(|n| n >= 1), "{limited}");
    assert_eq!(memory_status(&b).await["members"], 2);
}
