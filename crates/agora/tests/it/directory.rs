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

fn find<'a>(result: &'a Value, source: &str) -> Option<&'a Value> {
    result["results"]
        .as_array()?
        .iter()
        .find(|h| h["source"] == source)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agh_agent_and_a_hyperspace_tool_are_found_in_one_search_then_the_agent_goes_offline() {
    let dir = tempfile::tempdir().unwrap();
    let node = support::spawn_node(&dir.path().join("n"), &[], 30, &[]);
    // An AGH agent greets and publishes a capability catalog.
    let mut agent = Agent::connect(&node.agh, "scribe-7", "general").await;
    agent.greet(&["transcription"]).await;
    support::eventually(WAIT, async || {
        (support::peer_ids(&node.http, "general")
            .await
            .contains(&"scribe-7".to_owned()))
        .then_some(())
    })
    .await
    .expect("the agent is present");
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
