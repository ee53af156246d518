//! The learning primitive (`learning.*`) over a real node's JSON-RPC face: the spec's §5.1
//! example, the six methods' shapes, bad params, restarts, session namespaces, and the LLM
//! reflector against an OpenAI-compatible chat server (the Python fixture) with its fallback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use crate::support::{
    self, Node, rpc_call, rpc_connect, spawn_node, spawn_node_env, spawn_openai_server,
};

async fn call(node: &Node, method: &str, params: Value) -> Value {
    let mut ws = rpc_connect(&node.rpc).await;
    rpc_call(&mut ws, 1, method, params).await
}

/// The execution of spec §5.1's `learning.reflect` example.
fn spec_execution() -> Value {
    json!({
        "input": { "query": "quantum computing market size 2026" },
        "output": { "summary": "...", "sources": 12 },
        "steps": [
            { "action": "search", "tool": "web-search", "duration": 340 },
            { "action": "filter", "tool": "relevance-scorer", "duration": 120 },
            { "action": "synthesize", "tool": "summarizer", "duration": 890 }
        ],
        "outcome": "success",
        "reward": 0.92
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spec_reflect_example_grows_a_playbook() {
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("n"), &[], 30, &[]);
    let r = call(
        &node,
        "learning.reflect",
        json!({"playbookId": "web-research-v3", "execution": spec_execution()}),
    )
    .await;
    let result = &r["result"];
    assert_eq!(result["playbookVersion"], 1, "{r}");
    assert_eq!(result["prunedBullets"], json!([]));
    assert_eq!(result["reflector"], "builtin");
    let bullet = &result["newBullets"][0];
    assert_eq!(bullet["id"], "str-00001");
    assert_eq!(bullet["section"], "str");
    assert_eq!(
        bullet["content"],
        "For inputs with query: web-search → relevance-scorer → summarizer worked (reward 0.92); synthesize (summarizer) took 66% of the time"
    );
    let book = call(
        &node,
        "learning.getPlaybook",
        json!({"playbookId": "web-research-v3"}),
    )
    .await;
    let book = &book["result"];
    assert_eq!(book["version"], 1);
    assert_eq!(book["bullets"][0]["helpfulCount"], 0);
    for field in ["createdAt", "updatedAt", "source", "harmfulCount"] {
        assert!(book["bullets"][0].get(field).is_some(), "{field}: {book}");
    }
    // cl100k tokens of one line of about 30 words.
    let tokens = book["tokenCount"].as_u64().unwrap();
    assert!((20..80).contains(&tokens), "{tokens}");
    // A failing run: a mistake bullet, and the strategy it contradicts loses standing.
    let failed = json!({
        "steps": [
            { "action": "search", "tool": "web-search", "duration": 300 },
            { "action": "filter", "tool": "relevance-scorer", "duration": 100 },
            { "action": "synthesize", "tool": "summarizer", "duration": 40, "error": "context window exceeded" }
        ],
        "outcome": "failure",
        "reward": 0.1,
        "usedBullets": ["str-00001"]
    });
    let r = call(
        &node,
        "learning.reflect",
        json!({"playbookId": "web-research-v3", "execution": failed}),
    )
    .await;
    assert_eq!(
        r["result"]["newBullets"][0]["content"],
        "Step 'synthesize' with tool 'summarizer' failed: context window exceeded",
        "{r}"
    );
    assert_eq!(r["result"]["updatedBullets"], json!(["str-00001"]));
    let stats = call(
        &node,
        "learning.getStats",
        json!({"playbookId": "web-research-v3"}),
    )
    .await;
    assert_eq!(
        stats["result"],
        json!({"totalBullets": 2, "bySection": {"str": 1, "cal": 0, "mis": 1, "fbk": 0},
               "avgScore": 0.375, "version": 2}),
        "{stats}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bullets_feedback_curation_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("n");
    let node = spawn_node(&data, &[], 30, &[]);
    let mut ws = rpc_connect(&node.rpc).await;
    let mut ids = Vec::new();
    for (n, (section, content)) in [
        ("str", "Search analyst reports before news articles."),
        ("cal", "Extraction of 12 pages takes about 2.4 s."),
        ("mis", "Do not summarise before filtering by date."),
        ("str", "search analyst reports, before news articles!"),
    ]
    .into_iter()
    .enumerate()
    {
        let r = rpc_call(
            &mut ws,
            n as u64,
            "learning.addBullet",
            json!({"playbookId": "pb", "section": section, "content": content}),
        )
        .await;
        ids.push((
            r["result"]["bulletId"].as_str().unwrap().to_owned(),
            r["result"]["merged"].clone(),
        ));
    }
    assert_eq!(
        ids,
        vec![
            ("str-00001".to_owned(), json!(false)),
            ("cal-00002".to_owned(), json!(false)),
            ("mis-00003".to_owned(), json!(false)),
            // The same words: a repeat of the first, whose helpfulCount goes up.
            ("str-00001".to_owned(), json!(true)),
        ]
    );
    let fb = rpc_call(
        &mut ws,
        10,
        "learning.feedback",
        json!({"playbookId": "pb", "bulletId": "mis-00003", "helpful": false}),
    )
    .await;
    assert_eq!(fb["result"], json!({"helpfulCount": 0, "harmfulCount": 1}));
    let before = rpc_call(&mut ws, 11, "learning.getPlaybook", json!(["pb"])).await;
    let total = before["result"]["tokenCount"].as_u64().unwrap();
    // A budget one token short of everything drops the lowest-value bullet: mis-00003 (−1).
    let curated = rpc_call(
        &mut ws,
        12,
        "learning.curate",
        json!({"playbookId": "pb", "maxTokens": total - 1}),
    )
    .await;
    assert_eq!(
        curated["result"]["removed"],
        json!(["mis-00003"]),
        "{curated}"
    );
    assert_eq!(curated["result"]["remaining"], 2);
    let after = rpc_call(&mut ws, 13, "learning.getPlaybook", json!(["pb"])).await;
    assert_eq!(
        after["result"]["tokenCount"],
        curated["result"]["tokenCount"]
    );
    drop(ws);
    drop(node);
    let node = spawn_node(&data, &[], 30, &[]);
    let again = call(&node, "learning.getPlaybook", json!(["pb"])).await;
    assert_eq!(
        again["result"], after["result"],
        "the playbook survives a restart"
    );
    // Numbers are never reused.
    let next = call(
        &node,
        "learning.addBullet",
        json!({"playbookId": "pb", "section": "fbk", "content": "Users prefer tables."}),
    )
    .await;
    assert_eq!(next["result"]["bulletId"], "fbk-00004");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_playbooks_bad_params_and_evaluations() {
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("n"), &[], 30, &[]);
    let missing = call(&node, "learning.getPlaybook", json!({"playbookId": "nope"})).await;
    assert_eq!(missing["error"]["code"], -32602);
    assert_eq!(missing["error"]["data"]["reason"], "not-found", "{missing}");
    // An evaluation computes bullets and creates nothing.
    let eval = call(
        &node,
        "learning.reflect",
        json!({"playbookId": "nope", "execution": spec_execution(), "mode": "eval-only"}),
    )
    .await;
    assert_eq!(eval["result"]["newBullets"][0]["id"], "str-00001", "{eval}");
    assert_eq!(eval["result"]["playbookVersion"], 0);
    let still = call(&node, "learning.getStats", json!({"playbookId": "nope"})).await;
    assert_eq!(still["error"]["data"]["reason"], "not-found");
    for (params, field) in [
        (
            json!({"playbookId": "p", "execution": {"outcome": "success", "reward": 1.5}}),
            "execution.reward",
        ),
        (
            json!({"playbookId": "../etc", "execution": spec_execution()}),
            "playbookId",
        ),
        (
            json!({"playbookId": "p", "execution": spec_execution(), "mode": "batch"}),
            "mode",
        ),
    ] {
        let r = call(&node, "learning.reflect", params).await;
        assert_eq!(r["error"]["code"], -32602, "{r}");
        assert_eq!(r["error"]["data"]["field"], field, "{r}");
    }
    let unknown = call(&node, "learning.forget", json!({})).await;
    assert_eq!(unknown["error"]["code"], -32601);
    let bad_bullet = call(
        &node,
        "learning.addBullet",
        json!({"playbookId": "p", "section": "str", "content": "fine"}),
    )
    .await;
    assert_eq!(bad_bullet["result"]["bulletId"], "str-00001");
    let no_bullet = call(
        &node,
        "learning.feedback",
        json!({"playbookId": "p", "bulletId": "str-00009", "helpful": true}),
    )
    .await;
    assert_eq!(
        no_bullet["error"]["data"]["reason"], "not-found",
        "{no_bullet}"
    );
    let status = support::get_json(&node.http, "/status").await;
    assert_eq!(status["learning"]["playbooks"], 1, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_token_has_playbooks_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_node(&dir.path().join("n"), &[], 30, &[]);
    let created = call(
        &node,
        "state.createSession",
        json!({ "agentName": "agent-1" }),
    )
    .await;
    let token = created["result"]["sessionToken"]
        .as_str()
        .unwrap()
        .to_owned();
    call(
        &node,
        "learning.addBullet",
        json!({"playbookId": "shared", "section": "str", "content": "the node's own"}),
    )
    .await;
    let mut ws = support::rpc_connect_bearer(&node.rpc, &token).await;
    let hidden = rpc_call(&mut ws, 1, "learning.getPlaybook", json!(["shared"])).await;
    assert_eq!(hidden["error"]["data"]["reason"], "not-found", "{hidden}");
    let mine = rpc_call(
        &mut ws,
        2,
        "learning.addBullet",
        json!({"playbookId": "shared", "section": "mis", "content": "the session's own"}),
    )
    .await;
    assert_eq!(mine["result"]["bulletId"], "mis-00001");
    let node_view = call(&node, "learning.getPlaybook", json!(["shared"])).await;
    assert_eq!(
        node_view["result"]["bullets"][0]["content"],
        "the node's own"
    );
    assert_eq!(node_view["result"]["bullets"].as_array().unwrap().len(), 1);
    // Operators see both playbooks, each with its scope and size, never the session's name.
    let status = support::get_json(&node.http, "/status").await;
    let mut listed: Vec<(String, String, u64)> = status["learning"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["playbookId"].as_str().unwrap().to_owned(),
                b["scope"].as_str().unwrap().to_owned(),
                b["size"]["bullets"].as_u64().unwrap(),
            )
        })
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            ("shared".to_owned(), "session".to_owned(), 1),
            ("shared".to_owned(), "shared".to_owned(), 1)
        ],
        "{status}"
    );
    let session_id = created["result"]["sessionId"].as_str().unwrap();
    let text = status["learning"].to_string();
    assert!(
        !text.contains(session_id) && !text.contains(&token),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_llm_reflector_writes_bullets_and_falls_back_when_it_answers_badly() {
    let Some(server) = spawn_openai_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for (model, reflector, content) in [
        (
            "lessons",
            "openai",
            "Check the cache before calling web-search.",
        ),
        (
            "garbage",
            "builtin",
            "For inputs with query: web-search → relevance-scorer → summarizer worked (reward 0.92); synthesize (summarizer) took 66% of the time",
        ),
    ] {
        let node = spawn_node_env(
            &dir.path().join(model),
            &[],
            30,
            &[],
            &[
                ("AGORA_LEARNING_REFLECTOR", "openai"),
                ("AGORA_LEARNING_BASE_URL", &server.url),
                ("AGORA_LEARNING_MODEL", model),
            ],
        );
        let r = call(
            &node,
            "learning.reflect",
            json!({"playbookId": "pb", "execution": spec_execution()}),
        )
        .await;
        assert_eq!(r["result"]["reflector"], reflector, "{r}");
        assert_eq!(r["result"]["newBullets"][0]["content"], content, "{r}");
        if reflector == "builtin" {
            assert!(
                r["result"]["reflectorError"]
                    .as_str()
                    .is_some_and(|e| e.contains("not the bullet schema")),
                "{r}"
            );
        } else {
            assert_eq!(r["result"]["newBullets"][0]["source"], "llm-reflector");
        }
    }
}
