//! The directory (issue 33, `agora_node::directory`) on a real node: an AGH agent's catalog and
//! a Hyperspace tool found in one `directory.search` (JSON-RPC, `GET /directory/search`, `agora
//! directory search`), each with its source, trust and explanation; the claimed AGH record
//! never shown as verified, nor kept by a `verified` filter; an agent that disconnects shown
//! offline with the instant it leaves; and `/.well-known/ai-catalog.json` valid against the AI
//! Catalog draft's schema (written from its CDDL, and checked against the draft's own example).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{self, Agent};

const WAIT: Duration = Duration::from_secs(15);

/// `directory.search` over JSON-RPC until `pred` holds on its result.
async fn search_until(rpc: &str, params: Value, pred: impl Fn(&Value) -> bool) -> Option<Value> {
    let mut ws = support::rpc_connect(rpc).await;
    let mut id = 0;
    support::eventually(WAIT, async || {
        id += 1;
        let r = support::rpc_call(&mut ws, id, "directory.search", params.clone()).await;
        let result = r.get("result")?.clone();
        pred(&result).then_some(result)
    })
    .await
}

/// An agent connected to `node`'s AGH face, greeted in `general` and present there.
async fn greeted(node: &support::Node, peer: &str, capabilities: &[&str]) -> Agent {
    let mut agent = Agent::connect(&node.agh, peer, "general").await;
    agent.greet(capabilities).await;
    support::eventually(WAIT, async || {
        support::peer_ids(&node.http, "general")
            .await
            .contains(&peer.to_owned())
            .then_some(())
    })
    .await
    .expect("the agent is present");
    agent
}

fn find<'a>(result: &'a Value, source: &str) -> Option<&'a Value> {
    result["results"]
        .as_array()?
        .iter()
        .find(|h| h["source"] == source)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agh_agent_and_a_hyperspace_tool_are_found_in_one_search_then_the_agent_goes_offline() {
    let dir = tempfile::tempdir().unwrap();
    // Left agents stay listed as offline for 2 s, then are gone.
    let node = support::spawn_node(
        &dir.path().join("n"),
        &[],
        30,
        &["--directory-offline-ttl-secs", "2"],
    );
    // An AGH agent greets and publishes a capability catalog.
    let agent = greeted(&node, "scribe-7", &["transcription"]).await;
    let catalog = json!([{
        "id": "meeting-transcripts",
        "summary": "Transcribes recorded meetings and phone calls into text",
        "outcome": "a timestamped transcript with speaker labels"
    }]);
    let put = support::http_json(
        "PUT",
        &node.http,
        "/agh/v0/catalogs/scribe-7",
        Some(&catalog.to_string()),
    )
    .await;
    assert_eq!(put["peer_id"], "scribe-7", "{put}");
    // A Hyperspace tool, registered on the JSON-RPC face.
    let mut provider = support::rpc_connect(&node.rpc).await;
    let tool = support::register_tool(
        &mut provider,
        json!({"name": "minutes-writer", "description": "Writes meeting minutes from a transcript",
               "schema": {"input": {"type": "object"}}, "capabilities": ["minutes", "meetings"]}),
    )
    .await;
    let both = |r: &Value| find(r, "agh").is_some() && find(r, "hyperspace").is_some();
    let result = search_until(&node.rpc, json!({"query": "meeting transcripts"}), both)
        .await
        .expect("both found in one search");
    let agh = find(&result, "agh").unwrap();
    assert_eq!(agh["kind"], "agent");
    assert_eq!(
        agh["trust"]["level"], "claimed",
        "an AGH claim is never verified: {agh}"
    );
    assert_eq!(agh["provenance"]["face"], "agh");
    assert_eq!(agh["provenance"]["node"], node.peer_id.as_str());
    assert_eq!(agh["call"]["target"], "scribe-7");
    assert_eq!(agh["online"], true);
    assert!(
        agh["explain"]["text"].as_str().unwrap().contains("claimed"),
        "{agh}"
    );
    let hs = find(&result, "hyperspace").unwrap();
    assert_eq!(hs["call"]["target"], tool.as_str());
    assert_eq!(hs["call"]["method"], "tool.invoke");
    assert_eq!(hs["trust"]["level"], "signed");
    assert_eq!(result["answeredBy"], json!([node.peer_id]));
    // A `verified` filter keeps neither (nothing here went through a governance lifecycle).
    let verified = search_until(
        &node.rpc,
        json!({"query": "meeting transcripts", "filters": {"trust": "verified"}}),
        |_| true,
    )
    .await
    .unwrap();
    assert_eq!(verified["count"], 0, "{verified}");
    // The same search on the HTTP face, filtered to one source; bad parameters name the field.
    let http = support::get_json(
        &node.http,
        "/directory/search?q=meeting+transcripts&source=agh",
    )
    .await;
    assert_eq!(http["results"][0]["source"], "agh", "{http}");
    assert_eq!(http["count"], 1, "{http}");
    let bad = support::get_json(&node.http, "/directory/search?q=x&limit=0").await;
    assert_eq!(bad["field"], "limit", "{bad}");
    // And by meaning on the CLI: words the catalog does not use.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agora"))
        .args([
            "directory",
            "search",
            "write down what was said on a call",
            "--explain",
            "--rpc",
            &node.rpc,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("scribe-7") && text.contains("relevance"),
        "{text}"
    );
    // The agent leaves: shown offline, with the instant it goes, until then.
    agent.close().await;
    let offline = search_until(&node.rpc, json!({"query": "meeting transcripts"}), |r| {
        find(r, "agh").is_some_and(|h| h["online"] == false)
    })
    .await
    .expect("the agent is shown offline");
    let agh = find(&offline, "agh").unwrap();
    assert!(agh["expiresMs"].as_u64().is_some(), "{agh}");
    assert!(
        agh["explain"]["text"].as_str().unwrap().contains("offline"),
        "{agh}"
    );
    // `online` filters it out.
    let live = search_until(
        &node.rpc,
        json!({"query": "meeting transcripts", "filters": {"online": true}}),
        |_| true,
    )
    .await
    .unwrap();
    assert!(find(&live, "agh").is_none(), "{live}");
    assert!(find(&live, "hyperspace").is_some(), "{live}");
    // Gone once its offline TTL ends; the tool, still served, stays.
    let gone = search_until(&node.rpc, json!({"query": "meeting transcripts"}), |r| {
        find(r, "agh").is_none()
    })
    .await
    .expect("the agent is gone after its TTL");
    assert!(find(&gone, "hyperspace").is_some(), "{gone}");
    let left_at = agh["expiresMs"].as_u64().unwrap();
    assert!(
        agora_node::clock::now_ms() >= left_at,
        "gone no earlier than its expiry"
    );
}

fn schema() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/vectors/directory/ai-catalog.schema.json");
    let schema: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_catalog_is_valid_against_the_draft_schema() {
    let validator = schema();
    // The schema accepts the draft's own published example, and refuses an entry with both
    // `url` and `data`.
    let example: Value = serde_json::from_slice(
        &std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/vectors/directory/ai-catalog-example.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert!(validator.is_valid(&example));
    let mut both = example.clone();
    both["entries"][0]["data"] = json!({});
    assert!(!validator.is_valid(&both));
    let dir = tempfile::tempdir().unwrap();
    let node = support::spawn_node(&dir.path().join("n"), &[], 30, &[]);
    let mut provider = support::rpc_connect(&node.rpc).await;
    let tool = support::register_tool(
        &mut provider,
        json!({"name": "pdf-tables", "description": "Extracts tables from PDF files",
               "schema": {"input": {"type": "object"}}, "capabilities": ["pdf"]}),
    )
    .await;
    let wanted = format!("urn:agora:hyperspace:{}:{tool}", node.peer_id);
    let doc = support::eventually(WAIT, async || {
        let doc = support::get_json(&node.http, "/.well-known/ai-catalog.json").await;
        doc["entries"]
            .as_array()?
            .iter()
            .any(|e| e["identifier"] == wanted.as_str())
            .then_some(doc)
    })
    .await
    .expect("the tool is listed");
    let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}\n{doc}");
    assert_eq!(doc["specVersion"], "1.0");
    let card = doc["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["mediaType"] == "application/a2a-agent-card+json")
        .expect("the node's agent card");
    let url = card["url"].as_str().unwrap();
    let (base, path) = url.split_at(url.find("/.well-known").unwrap());
    assert_eq!(base, node.http);
    let agent_card = support::get_json(base, path).await;
    assert!(
        agent_card["name"].is_string(),
        "the link leads to the card: {agent_card}"
    );
}

/// Registers and activates `id` in `node`'s Agent Name Service over AGTP, governance-signed.
async fn activate(
    node: &support::Node,
    gov: &agora_agtp::signature::AnsSigningKey,
    id: &str,
    label: &str,
    job: &str,
    capabilities: &[&str],
) {
    use agora_node::faces::agtp::client::{self, Transport};
    use agora_node::faces::agtp::tls::Roots;
    let agtp = node.agtp.strip_prefix("agtp://").unwrap().to_owned();
    let transport = Transport::for_host("127.0.0.1", false, false, &Roots::WebPki).unwrap();
    let manifest = json!({
        "canonical_id": id,
        "manifest_uri": format!("agtp://127.0.0.1/agents/{id}"),
        "agent_label": label,
        "org_domain": "example.org",
        "governance_zone": "zone:test",
        "trust_tier": 2,
        "behavioral_trust_score": 0.9,
        "supported_methods": ["QUERY"],
        "capabilities": capabilities,
        "authority_scope_categories": ["documents:query"],
        "job_description": job,
    });
    let request = support::agtp_lifecycle_request(
        gov,
        agora_agtp::manifest::Transition::Activate,
        id,
        Some(&manifest),
        None,
    );
    let answer = client::request(&agtp, &transport, &request, WAIT)
        .await
        .expect("the name server answers");
    assert_eq!(
        answer.status.0,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
}

/// Two nodes, B joined to A; A with the ANS governance key (and MiniLM when `with_model`).
async fn pair(
    dir: &Path,
    model: Option<&Path>,
) -> (
    support::Node,
    support::Node,
    agora_agtp::signature::AnsSigningKey,
) {
    let gov = support::agtp_governance_key(dir);
    let cfg = dir.join("agora.toml");
    std::fs::write(&cfg, "[agtp]\ngovernance_keys = [\"gov.pub.json\"]\n").unwrap();
    if let Some(m) = model {
        support::install_minilm(&dir.join("a"), m);
        support::install_minilm(&dir.join("b"), m);
    }
    let a = support::spawn_node(
        &dir.join("a"),
        &[],
        30,
        &["--config", cfg.to_str().unwrap()],
    );
    let b = support::spawn_node(&dir.join("b"), &[&a.p2p], 30, &[]);
    support::eventually(WAIT, async || {
        support::connected(&b.http)
            .await
            .contains(&a.peer_id)
            .then_some(())
    })
    .await
    .expect("B connects to A");
    (a, b, gov)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ans_agent_and_an_agh_agent_of_one_node_are_found_from_another() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, gov) = pair(dir.path(), None).await;
    activate(
        &a,
        &gov,
        "agt-contracts",
        "contract clause reviewer",
        "reviews contract clauses and flags indemnity and liability risks",
        &["contract-review"],
    )
    .await;
    let agent = greeted(&a, "scribe-9", &["transcription"]).await;
    // Node B's own name service does not know the ANS agent ...
    let local = search_until(
        &b.rpc,
        json!({"query": "contract clauses", "scope": "local"}),
        |_| true,
    )
    .await
    .unwrap();
    assert_eq!(local["count"], 0, "{local}");
    // ... its directory search finds it on A, verified, and says A answered.
    let found = search_until(
        &b.rpc,
        json!({"query": "contract clauses liability"}),
        |r| find(r, "ans").is_some(),
    )
    .await
    .expect("found from B");
    let ans = find(&found, "ans").unwrap();
    assert_eq!(ans["trust"]["level"], "verified", "{ans}");
    assert_eq!(ans["trust"]["lifecycle"], "Active", "{ans}");
    assert_eq!(ans["answeredBy"], a.peer_id.as_str());
    assert_eq!(ans["provenance"]["node"], a.peer_id.as_str());
    assert!(
        found["answeredBy"]
            .as_array()
            .unwrap()
            .contains(&json!(a.peer_id)),
        "{found}"
    );
    // And the AGH agent of A, claimed.
    let found = search_until(&b.rpc, json!({"query": "transcription"}), |r| {
        find(r, "agh").is_some()
    })
    .await
    .expect("the AGH agent found from B");
    let agh = find(&found, "agh").unwrap();
    assert_eq!(agh["trust"]["level"], "claimed");
    // Hosted by A; B may hold it itself (its greets reach B when B relays the channel), else
    // A answered.
    assert_eq!(agh["provenance"]["node"], a.peer_id.as_str(), "{agh}");
    assert!(
        agh["answeredBy"].is_null() || agh["answeredBy"] == a.peer_id.as_str(),
        "{agh}"
    );
    agent.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agh_catalog_is_found_from_another_node_by_meaning() {
    let Some(model) = support::minilm_model() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (a, b, _gov) = pair(dir.path(), Some(&model)).await;
    let agent = greeted(&a, "scribe-11", &[]).await;
    let catalog = json!([{
        "id": "meeting-transcripts",
        "summary": "Transcribes recorded meetings and phone calls into text",
        "outcome": "a timestamped transcript with speaker labels"
    }]);
    support::http_json(
        "PUT",
        &a.http,
        "/agh/v0/catalogs/scribe-11",
        Some(&catalog.to_string()),
    )
    .await;
    // No word of the query is in the catalog: only meaning finds it.
    let found = search_until(
        &b.rpc,
        json!({"query": "put into writing what everyone said at our conference", "limit": 3}),
        |r| find(r, "agh").is_some(),
    )
    .await
    .expect("found by meaning from B");
    assert_eq!(found["embedder"], "minilm-l6-v2");
    let agh = find(&found, "agh").unwrap();
    assert_eq!(agh["name"], "scribe-11");
    assert_eq!(agh["explain"]["bm25"], 0.0, "{agh}");
    assert!(agh["explain"]["meaning"].as_f64().unwrap() > 0.3, "{agh}");
    agent.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hyperspace_tool_and_a_bridged_mcp_tool_in_one_result_list() {
    if !support::node_peers() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let node = support::spawn_node_env(
        &dir.path().join("n"),
        &[],
        30,
        &[],
        &[("AGORA_API_KEY", support::TEST_API_KEY)],
    );
    let mut admin = support::rpc_connect_bearer(&node.rpc, support::TEST_API_KEY).await;
    let everything = support::interop_dir()
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
        .display()
        .to_string();
    let r = support::rpc_call(
        &mut admin,
        1,
        "bridge.registerMCPServer",
        json!({"url": "stdio://everything", "command": "node", "args": [everything, "stdio"]}),
    )
    .await;
    assert_eq!(r["result"]["serverId"], "everything", "{r}");
    let tool = support::register_tool(
        &mut admin,
        json!({"name": "echo-back", "description": "Echoes back the message it is given",
               "schema": {"input": {"type": "object"}}, "capabilities": ["echo"]}),
    )
    .await;
    let mut id = 10;
    let result = support::eventually(WAIT, async || {
        id += 1;
        let r = support::rpc_call(
            &mut admin,
            id,
            "directory.search",
            json!({"query": "echo back the message", "limit": 20}),
        )
        .await;
        let result = r.get("result")?.clone();
        (find(&result, "mcp").is_some() && find(&result, "hyperspace").is_some()).then_some(result)
    })
    .await
    .expect("both in one list");
    let mcp = find(&result, "mcp").unwrap();
    assert_eq!(mcp["provenance"]["face"], "mcp", "{mcp}");
    assert_eq!(mcp["call"]["method"], "tool.invoke", "{mcp}");
    assert!(
        mcp["trust"]["basis"]
            .as_str()
            .unwrap()
            .contains("everything"),
        "says which server: {mcp}"
    );
    assert_ne!(mcp["trust"]["level"], "verified", "{mcp}");
    let hs = find(&result, "hyperspace").unwrap();
    assert_eq!(hs["call"]["target"], tool.as_str());
}
