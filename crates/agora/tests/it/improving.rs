//! The Self-Improving primitive (`improving.*`, `selfImproving.*`) over real node processes
//! meshed on 127.0.0.1: spec Example 2 (a trajectory recorded on A is an exemplar on B,
//! attributed to A), the §5.2 request examples' response shapes, redaction of what leaves the
//! node, −32008, opt-in sharing, restarts, reputation views, and a contributor whose exemplars
//! precede failures losing its gossip standing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{self, Node, eventually, get_json, rpc_call, rpc_connect, spawn_node_env};

const TOPIC: &str = "hyperspace/trajectories/web-research";
const EMAIL: &str = "ana.lopez@agents.localhost";
const API_KEY: &str = "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD";

async fn call(node: &Node, method: &str, params: Value) -> Value {
    let mut ws = rpc_connect(&node.rpc).await;
    rpc_call(&mut ws, 1, method, params).await
}

/// The spec's §5.2 `recordTrajectory` example.
fn spec_record() -> Value {
    json!({
        "taskType": "web-research",
        "input": { "query": "latest breakthroughs in solid-state batteries" },
        "output": { "summary": "...", "confidence": 0.88 },
        "steps": [
            { "action": "search", "tool": "web-search", "params": { "q": "solid-state batteries 2026" }, "result": { "count": 47 }, "duration": 310 },
            { "action": "filter", "tool": "relevance-scorer", "params": { "threshold": 0.7 }, "result": { "kept": 12 }, "duration": 85 },
            { "action": "extract", "tool": "content-extractor", "params": { "urls": 12 }, "result": { "extracted": 11 }, "duration": 2400 },
            { "action": "synthesize", "tool": "summarizer", "result": { "tokens": 1200 }, "duration": 940 }
        ],
        "reward": 0.88,
        "metadata": { "model": "gemma-3-27b", "totalDuration": 3735 }
    })
}

/// A distinct successful run number `i` of web-research.
fn run(i: u32, reward: f64) -> Value {
    json!({
        "taskType": "web-research",
        "input": { "query": format!("question number {i}") },
        "output": { "answer": i },
        "steps": [
            { "action": "search", "tool": format!("tool-{i}"), "duration": 10 + i },
        ],
        "reward": reward,
    })
}

fn node(dir: &std::path::Path, name: &str, bootstrap: &[&str], share: bool) -> Node {
    spawn_node_env(
        &dir.join(name),
        bootstrap,
        30,
        &[],
        &[
            (
                "AGORA_IMPROVING_SHARE",
                if share { "true" } else { "false" },
            ),
            ("AGORA_IMPROVING_TASK_TYPES", "web-research"),
        ],
    )
}

/// Waits until `node` has a gossip mesh peer on the web-research trajectory topic.
async fn meshed(node: &Node) {
    eventually(Duration::from_secs(30), async || {
        let s = get_json(&node.http, "/status").await;
        (s["gossip"]["mesh"][TOPIC].as_u64().unwrap_or(0) >= 1).then_some(())
    })
    .await
    .expect("a mesh peer on the trajectory topic");
}

/// The exemplars of web-research on `node` (limit 20, any reward).
async fn exemplars(node: &Node) -> Vec<Value> {
    let r = call(
        node,
        "improving.getExemplars",
        json!({"taskType": "web-research", "limit": 20, "minReward": -1}),
    )
    .await;
    r["result"]["exemplars"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

async fn admitted(node: &Node) -> u64 {
    let s = get_json(&node.http, "/status").await;
    s["improving"]["received"]["admitted"].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trajectory_recorded_on_a_is_an_exemplar_on_b() {
    let dir = tempfile::tempdir().unwrap();
    let a = node(dir.path(), "a", &[], true);
    let b = node(dir.path(), "b", &[&a.p2p], false);
    meshed(&a).await;

    // Spec §5.2 recordTrajectory, with an e-mail address and an API key in it.
    let mut params = spec_record();
    params["input"]["query"] = json!(format!("latest breakthroughs, mail {EMAIL}"));
    params["metadata"]["token"] = json!(API_KEY);
    let r = call(&a, "improving.recordTrajectory", params).await;
    let result = &r["result"];
    let id = result["trajectoryId"].as_str().expect("an id").to_owned();
    assert!(
        id.len() == 13 && id.starts_with("traj-"),
        "traj-<8 hex>: {r}"
    );
    assert_eq!(result["state"], "SUCCESS");
    assert!(result["gossipedTo"].as_u64().unwrap() >= 1, "{r}");
    assert_eq!(result["shared"], true);
    assert_eq!(
        result["redactions"],
        json!(["pii.email", "secret.api_key"]),
        "{r}"
    );

    // Spec Example 2 on B: the exemplar is A's, with A's PeerId.
    let got = eventually(Duration::from_secs(20), async || {
        let r = call(
            &b,
            "improving.getExemplars",
            json!({"taskType": "web-research", "limit": 3, "minReward": 0.8}),
        )
        .await;
        (r["result"]["exemplars"].as_array()?.len() == 1).then_some(r)
    })
    .await
    .expect("A's trajectory reaches B's library");
    let result = &got["result"];
    let e = &result["exemplars"][0];
    assert_eq!(e["trajectoryId"], id.as_str());
    assert_eq!(e["peerId"], a.peer_id.as_str());
    assert_eq!(e["reward"], 0.88);
    assert_eq!(e["usageCount"], 1);
    assert_eq!(e["steps"].as_array().unwrap().len(), 4);
    assert!(e["utilityScore"].as_f64().unwrap() > 0.0, "{got}");
    assert_eq!(result["librarySize"], 1);
    assert_eq!(result["avgReward"], 0.88);
    // What B received, as gossiped, holds neither the address nor the key; A keeps its own.
    let seen = got.to_string();
    assert!(
        !seen.contains(EMAIL) && !seen.contains("sk-abcdefghij"),
        "{seen}"
    );
    assert!(seen.contains("[REDACTED:pii.email]"), "{seen}");
    let own = call(
        &a,
        "improving.getExemplars",
        json!({"taskType": "web-research"}),
    )
    .await;
    assert!(own.to_string().contains(EMAIL), "A keeps the original");
    // Counted on use.
    let again = call(
        &b,
        "selfImproving.getExemplars",
        json!({"taskType": "web-research", "minReward": 0.8}),
    )
    .await;
    assert_eq!(again["result"]["exemplars"][0]["usageCount"], 2, "{again}");

    let stats = call(
        &b,
        "improving.getLibraryStats",
        json!({"taskType": "web-research"}),
    )
    .await;
    let s = &stats["result"];
    assert_eq!(s["total"], 1, "{stats}");
    assert_eq!(s["byState"]["SUCCESS"], 1);
    assert_eq!(s["byState"]["FAILED"], 0);
    assert_eq!(s["topContributors"][0]["peerId"], a.peer_id.as_str());
    let alias = call(&b, "selfImproving.getLibraryStats", json!({})).await;
    assert_eq!(alias["result"]["total"], 1, "{alias}");

    // −32008 names the problem.
    let mut bad = spec_record();
    bad["reward"] = json!(1.5);
    let r = call(&b, "improving.recordTrajectory", bad).await;
    assert_eq!(r["error"]["code"], -32008, "{r}");
    assert_eq!(r["error"]["data"]["field"], "reward");

    // B shares one run when asked: A admits it and follows B's reputation topic.
    let mut mine = run(7, 0.7);
    mine["share"] = json!(true);
    let r = call(&b, "improving.recordTrajectory", mine).await;
    assert!(r["result"]["gossipedTo"].as_u64().unwrap() >= 1, "{r}");
    eventually(Duration::from_secs(20), async || {
        (admitted(&a).await == 1).then_some(())
    })
    .await
    .expect("B's shared run reaches A");

    // B's own failed run, used with A's exemplar: a critique from A's successful run.
    let failed = json!({
        "taskType": "web-research",
        "input": { "query": "solid-state batteries" },
        "output": null,
        "steps": [
            { "action": "search", "tool": "web-search", "duration": 300 },
            { "action": "extract", "tool": "pdf-reader", "duration": 50, "error": "timeout" }
        ],
        "reward": 0.2,
        "metadata": { "exemplarIds": [id] }
    });
    let r = call(&b, "improving.recordTrajectory", failed).await;
    assert_eq!(r["result"]["state"], "FAILED", "{r}");
    assert_eq!(r["result"]["gossipedTo"], 0, "sharing is off on B");
    let failed_id = r["result"]["trajectoryId"].as_str().unwrap().to_owned();
    let aug = call(
        &b,
        "improving.augment",
        json!({"trajectoryId": failed_id, "mode": "FEEDBACK_ONLY"}),
    )
    .await;
    assert_eq!(aug["result"]["augmented"], true, "{aug}");
    assert_eq!(aug["result"]["newState"], "FAILED");
    let critique = aug["result"]["critique"].as_str().unwrap();
    assert!(
        critique.contains("timeout") && critique.contains(&id),
        "{critique}"
    );
    let full = call(
        &b,
        "improving.augment",
        json!({"trajectoryId": failed_id, "mode": "FULL_PIPELINE"}),
    )
    .await;
    assert_eq!(full["error"]["code"], -32602, "{full}");
    assert_eq!(full["error"]["data"]["reason"], "no-llm");
    // A used its exemplar and failed: A's standing on B went down.
    let stats = call(
        &b,
        "improving.getLibraryStats",
        json!({"taskType": "web-research"}),
    )
    .await;
    let top = &stats["result"]["topContributors"];
    let a_entry = top
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["peerId"] == a.peer_id.as_str())
        .unwrap();
    assert_eq!(a_entry["uses"], 1, "{stats}");
    assert!(a_entry["reputation"].as_f64().unwrap() < 0.5, "{stats}");
    // B publishes its changed view on its reputation topic; A follows it.
    let view = eventually(Duration::from_secs(30), async || {
        let s = get_json(&a.http, "/status").await;
        let v = s["improving"]["views"][b.peer_id.as_str()].clone();
        (!v.is_null()).then_some(v)
    })
    .await
    .expect("B's reputation view reaches A");
    assert_eq!(view["contributors"], 1, "{view}");

    let d = call(
        &b,
        "improving.assessDifficulty",
        json!({"taskType": "web-research", "input": {"query": "x"}, "samples": [0.9, 0.1, 0.7, 0.2]}),
    )
    .await;
    assert_eq!(d["result"]["difficulty"], "FRONTIER", "{d}");
    assert_eq!(d["result"]["passRate"], 0.5);
    assert!(d["result"]["recommendation"].is_string());
    let c = call(
        &b,
        "improving.curate",
        json!({"taskType": "web-research", "strategy": "HYBRID"}),
    )
    .await;
    assert_eq!(c["result"]["librarySize"], 3, "{c}");
    assert_eq!(c["result"]["pruned"], 0);
    assert_eq!(c["result"]["kept"], 3);

    // A restart keeps the library (usage counts are written within a flush interval, so a
    // kill right after a use may lose it).
    let b_data = b.data.clone();
    drop(b);
    let b = spawn_node_env(&b_data, &[&a.p2p], 30, &[], &[]);
    let after = exemplars(&b).await;
    assert_eq!(after.len(), 2, "{after:?}");
    let from_a = after
        .iter()
        .find(|e| e["trajectoryId"] == id.as_str())
        .unwrap();
    let uses = from_a["usageCount"].as_u64().unwrap();
    assert!((1..=3).contains(&uses), "{uses}");
    let stats = call(&b, "improving.getLibraryStats", json!({})).await;
    assert_eq!(stats["result"]["total"], 3, "{stats}");
    assert_eq!(stats["result"]["byState"]["FAILED"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_sharing_off_sends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let a = node(dir.path(), "a", &[], false);
    let b = node(dir.path(), "b", &[&a.p2p], false);
    meshed(&a).await;
    let r = call(&a, "improving.recordTrajectory", run(1, 0.9)).await;
    assert_eq!(r["result"]["gossipedTo"], 0, "{r}");
    assert_eq!(r["result"]["shared"], false);
    // A pending run is never shared, even when asked.
    let mut pending = run(2, 0.0);
    pending["reward"] = Value::Null;
    pending["share"] = json!(true);
    let r = call(&a, "improving.recordTrajectory", pending).await;
    assert_eq!(r["result"]["state"], "PENDING", "{r}");
    assert_eq!(r["result"]["gossipedTo"], 0);
    // The same node shares when the call asks: that one arrives, and only that one.
    let mut asked = run(3, 0.9);
    asked["share"] = json!(true);
    let r = call(&a, "improving.recordTrajectory", asked).await;
    assert!(r["result"]["gossipedTo"].as_u64().unwrap() >= 1, "{r}");
    let shared_id = r["result"]["trajectoryId"].clone();
    let got = eventually(Duration::from_secs(20), async || {
        let e = exemplars(&b).await;
        (!e.is_empty()).then_some(e)
    })
    .await
    .expect("the shared trajectory arrives");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["trajectoryId"], shared_id);
    assert_eq!(admitted(&b).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contributor_whose_exemplars_precede_failures_loses_mesh_standing() {
    let dir = tempfile::tempdir().unwrap();
    let a = node(dir.path(), "a", &[], true);
    let b = node(dir.path(), "b", &[&a.p2p], false);
    meshed(&a).await;
    // A shares ten runs it claims succeeded; B uses each and fails.
    let mut delivery = Duration::ZERO;
    for i in 0..10 {
        let sent = Instant::now();
        let r = call(&a, "improving.recordTrajectory", run(i, 0.9)).await;
        let id = r["result"]["trajectoryId"].as_str().unwrap().to_owned();
        eventually(Duration::from_secs(20), async || {
            exemplars(&b)
                .await
                .iter()
                .any(|e| e["trajectoryId"] == id.as_str())
                .then_some(())
        })
        .await
        .expect("A's trajectory reaches B");
        delivery = delivery.max(sent.elapsed());
        let mut mine = run(100 + i, 0.0);
        mine["metadata"] = json!({"exemplarIds": [id]});
        let r = call(&b, "improving.recordTrajectory", mine).await;
        assert_eq!(r["result"]["state"], "FAILED", "{r}");
    }
    // B's reputation of A: weight 1/12; A's gossipsub score on B: below the graylist threshold.
    let stats = call(
        &b,
        "improving.getLibraryStats",
        json!({"taskType": "web-research"}),
    )
    .await;
    let entry = stats["result"]["topContributors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["peerId"] == a.peer_id.as_str())
        .cloned()
        .unwrap();
    assert_eq!(entry["uses"], 10, "{stats}");
    assert_eq!(entry["reputation"], 0.0833);
    let score = eventually(Duration::from_secs(10), async || {
        let s = get_json(&b.http, "/status").await;
        let score = s["gossip"]["scores"][a.peer_id.as_str()].as_f64()?;
        (score < -80.0).then_some(score)
    })
    .await
    .expect("A's gossip score on B falls below the graylist threshold");
    assert!(score >= -100.0, "{score}");
    // Graylisted: what A shares now is ignored by B. A delivery took at most `delivery` before;
    // give this one five times that (at least 3 s).
    let before = admitted(&b).await;
    let r = call(&a, "improving.recordTrajectory", run(50, 0.9)).await;
    let late = r["result"]["trajectoryId"].as_str().unwrap().to_owned();
    tokio::time::sleep((delivery * 5).max(Duration::from_secs(3))).await;
    assert_eq!(admitted(&b).await, before);
    assert!(
        !exemplars(&b)
            .await
            .iter()
            .any(|e| e["trajectoryId"] == late.as_str()),
        "a graylisted peer's trajectory was admitted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_pipeline_regenerates_a_failed_run_with_a_chat_model() {
    let Some(server) = support::spawn_openai_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for (model, outcome) in [("regenerate", "AUGMENTED"), ("garbage", "error")] {
        let node = spawn_node_env(
            &dir.path().join(model),
            &[],
            30,
            &[],
            &[
                ("AGORA_IMPROVING_BASE_URL", server.url.as_str()),
                ("AGORA_IMPROVING_MODEL", model),
            ],
        );
        let mut ok = run(1, 0.9);
        ok["steps"] = json!([{ "action": "search", "tool": "web-search", "duration": 100 }]);
        call(&node, "improving.recordTrajectory", ok).await;
        let failed = json!({
            "taskType": "web-research",
            "input": { "query": "question" },
            "steps": [{ "action": "search", "tool": "pdf-reader", "error": "timeout" }],
            "reward": 0.1,
        });
        let r = call(&node, "improving.recordTrajectory", failed).await;
        let id = r["result"]["trajectoryId"].clone();
        let aug = call(
            &node,
            "improving.augment",
            json!({"trajectoryId": id, "mode": "FULL_PIPELINE"}),
        )
        .await;
        if outcome == "error" {
            // A model answer outside the schema changes nothing and says why.
            assert_eq!(aug["error"]["data"]["reason"], "llm", "{aug}");
            let stats = call(&node, "improving.getLibraryStats", json!({})).await;
            assert_eq!(stats["result"]["byState"]["FAILED"], 1, "{stats}");
            continue;
        }
        let result = &aug["result"];
        assert_eq!(result["augmented"], true, "{aug}");
        assert_eq!(result["newState"], "AUGMENTED");
        // The fixture names the first tool of its prompt: the failed run's.
        assert_eq!(
            result["regenerated"]["steps"][0],
            json!({"action": "retry", "tool": "pdf-reader"})
        );
        let stats = call(&node, "improving.getLibraryStats", json!({})).await;
        assert_eq!(stats["result"]["byState"]["AUGMENTED"], 1, "{stats}");
    }
}
