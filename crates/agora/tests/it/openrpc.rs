//! The OpenRPC document of the JSON-RPC face (`agora_node::openrpc`): valid OpenRPC 1.3 (against
//! `@open-rpc/meta-schema`, its embedded schemas against JSON Schema draft 7), served the same by
//! `rpc.discover` and `GET /openrpc.json`, true to what a real node serves (every method in it
//! is served, no other is, each example's params pass the node's params check), −32602 listing
//! every problem at once, and `docs/node.md`'s tables generated from it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use agora_node::openrpc;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::support::{self, TEST_API_KEY};

/// The fields whose −32602 means "no such thing" (the example names an id this fresh node does
/// not hold) rather than a params problem, as do the reasons of [`UNKNOWN_REASONS`]; any other
/// −32602 to an example is a failure.
const ID_FIELDS: [&str; 7] = [
    "toolId",
    "id",
    "trajectoryId",
    "channelId",
    "bulletId",
    "credential",
    "serverId",
];

/// `data.reason`s of a −32602 that mean the params were read and name something unknown here.
const UNKNOWN_REASONS: [&str; 2] = ["not-found", "unknown-challenge"];

/// `@open-rpc/meta-schema`'s document (embedded in its `index.js`), with its two references to
/// `https://meta.json-schema.tools` (the JSON Schema of the embedded schemas) made local: the
/// embedded schemas are checked against draft 7 separately, offline.
fn meta_schema() -> Option<Value> {
    let file = support::interop_dir().join("node_modules/@open-rpc/meta-schema/index.js");
    let present = file.is_file();
    if !support::external(
        "tests/interop/node_modules/@open-rpc/meta-schema",
        present,
        "cd tests/interop && npm ci",
    ) {
        return None;
    }
    let js = std::fs::read_to_string(file).unwrap();
    let start =
        js.find("exports.openrpcDocument = {").unwrap() + "exports.openrpcDocument = ".len();
    let end = js.rfind("};").unwrap() + 1;
    let text = js[start..end]
        .replace(
            "\"https://meta.json-schema.tools/#/definitions/JSONSchemaObject/properties/$ref\"",
            "\"#/definitions/localRef\"",
        )
        .replace(
            "\"https://meta.json-schema.tools\"",
            "\"#/definitions/localSchema\"",
        );
    let mut schema: Value = serde_json::from_str(&text).unwrap();
    let defs = schema["definitions"].as_object_mut().unwrap();
    defs.insert(
        "localRef".into(),
        json!({"type": "string", "format": "uri-reference"}),
    );
    defs.insert("localSchema".into(), json!({"type": ["object", "boolean"]}));
    schema.as_object_mut().unwrap().remove("$schema");
    assert!(
        !schema.to_string().contains("json-schema.tools\""),
        "a remote reference is left"
    );
    Some(schema)
}

/// Every schema the document embeds: params, results, components.
fn embedded_schemas(doc: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for m in doc["methods"].as_array().unwrap() {
        let name = m["name"].as_str().unwrap();
        for p in m["params"].as_array().unwrap() {
            out.push((format!("{name} {}", p["name"]), p["schema"].clone()));
        }
        out.push((format!("{name} result"), m["result"]["schema"].clone()));
    }
    for (name, s) in doc["components"]["schemas"].as_object().unwrap() {
        out.push((format!("components {name}"), s.clone()));
    }
    out
}

#[test]
fn the_document_is_valid_openrpc_1_3() {
    let doc = openrpc::document(openrpc::DEFAULT_RPC_URL);
    let Some(meta) = meta_schema() else { return };
    let validator = jsonschema::draft7::new(&meta).unwrap();
    let problems: Vec<String> = validator
        .iter_errors(&doc)
        .take(20)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
    for (at, schema) in embedded_schemas(&doc) {
        assert!(
            jsonschema::draft7::meta::is_valid(&schema),
            "{at}: not a draft 7 schema: {schema}"
        );
    }
}

#[test]
fn docs_node_md_has_the_generated_tables() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/node.md");
    let page = std::fs::read_to_string(&path).unwrap();
    let tables = openrpc::markdown(&openrpc::document(openrpc::DEFAULT_RPC_URL));
    let expected = openrpc::splice_markdown(&page, &tables).expect("docs/node.md has the markers");
    assert!(
        expected == page,
        "docs/node.md's method tables are stale: refresh them with \
         `cargo run -p agora -- openrpc --splice docs/node.md`"
    );
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Sends `calls` as one batch and returns the responses by id.
async fn batch(ws: &mut Ws, calls: &[(String, Value)]) -> Vec<Value> {
    let frame: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (m, p))| json!({"jsonrpc": "2.0", "id": i, "method": m, "params": p}))
        .collect();
    ws.send(Message::Text(Value::from(frame).to_string().into()))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("the batch's answer in time")
            .expect("the connection is open")
            .unwrap();
        if let Message::Text(text) = msg {
            let mut replies: Vec<Value> = serde_json::from_str(text.as_str()).unwrap();
            replies.sort_by_key(|r| r["id"].as_u64());
            assert_eq!(replies.len(), calls.len());
            return replies;
        }
    }
}

/// `GET <http>/openrpc.json` with the API key.
async fn get_document(http: &str) -> Value {
    let url = format!("{http}{}", openrpc::PATH);
    tokio::task::spawn_blocking(move || {
        let mut response = ureq::get(&url)
            .header("authorization", format!("Bearer {TEST_API_KEY}"))
            .call()
            .unwrap();
        let text = response.body_mut().read_to_string().unwrap();
        serde_json::from_str::<Value>(&text).unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_node_serves_the_document_and_every_method_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let node = support::spawn_node_with_key(dir.path());
    let mut ws = support::rpc_connect_bearer(&node.rpc, TEST_API_KEY).await;

    // rpc.discover and GET /openrpc.json: the same document, naming this node's rpc face.
    let started = std::time::Instant::now();
    let discovered = support::rpc_call(&mut ws, 1, openrpc::DISCOVER, json!({})).await;
    let took = started.elapsed();
    let doc = discovered["result"].clone();
    assert_eq!(doc["servers"][0]["url"], node.rpc.as_str());
    assert_eq!(get_document(&node.http).await, doc);
    assert!(
        took < std::time::Duration::from_secs(2),
        "rpc.discover took {took:?}"
    );

    let names: Vec<String> = doc["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.len() > 50, "{names:?}");

    // Every method in it is served (`{}` is never −32601), and a name not in it is not.
    let mut calls: Vec<(String, Value)> = names.iter().map(|n| (n.clone(), json!({}))).collect();
    calls.push(("tool.doesNotExist".to_owned(), json!({})));
    let replies = batch(&mut ws, &calls).await;
    let (last, replies) = replies.split_last().unwrap();
    assert_eq!(last["error"]["code"], -32601, "{last}");
    let unserved: BTreeSet<&str> = names
        .iter()
        .zip(replies)
        .filter(|(_, r)| r["error"]["code"] == -32601)
        .map(|(n, _)| n.as_str())
        .collect();
    assert!(
        unserved.is_empty(),
        "in the document but not served: {unserved:?}"
    );

    // Each method's example passes the params check.
    let examples: Vec<(String, Value)> = doc["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let params: serde_json::Map<String, Value> = m["examples"][0]["params"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (p["name"].as_str().unwrap().to_owned(), p["value"].clone()))
                .collect();
            (
                m["name"].as_str().unwrap().to_owned(),
                Value::Object(params),
            )
        })
        .collect();
    let replies = batch(&mut ws, &examples).await;
    for ((method, params), reply) in examples.iter().zip(&replies) {
        if reply["error"]["code"] == -32602 {
            let data = &reply["error"]["data"];
            let field = data["field"].as_str().unwrap_or_default();
            assert!(
                ID_FIELDS.contains(&field)
                    || UNKNOWN_REASONS.contains(&data["reason"].as_str().unwrap_or_default()),
                "{method}'s example {params} fails the params check: {reply}"
            );
        }
    }
}

#[tokio::test]
async fn invalid_params_list_every_problem_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let node = support::spawn_node(&dir.path().join("n"), &[], 30, &[]);
    let mut ws = support::rpc_connect(&node.rpc).await;
    let r = support::rpc_call(&mut ws, 1, "tool.register", json!({})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let data = &r["error"]["data"];
    let errors = data["errors"].as_array().unwrap();
    let fields: Vec<&str> = errors.iter().filter_map(|e| e["field"].as_str()).collect();
    assert_eq!(
        fields,
        ["name", "description", "schema", "capabilities"],
        "{r}"
    );
    assert_eq!(data["field"], "name");

    // A wrong type and a value outside a set, with the allowed values.
    let r = support::rpc_call(
        &mut ws,
        2,
        "memory.search",
        json!({"query": 5, "tier": "hot", "limit": "ten"}),
    )
    .await;
    let errors = r["error"]["data"]["errors"].as_array().unwrap();
    let tier = errors
        .iter()
        .find(|e| e["field"] == "tier")
        .expect("tier listed");
    assert_eq!(tier["allowed"], json!(["working", "archival"]), "{r}");
    assert!(errors.iter().any(|e| e["field"] == "query"), "{r}");
    assert!(errors.iter().any(|e| e["field"] == "limit"), "{r}");

    // The hand-read micropayments params name every missing field at once too.
    let r = support::rpc_call(&mut ws, 3, "micropayments.channel.open", json!({})).await;
    let errors = r["error"]["data"]["errors"].as_array().unwrap();
    let fields: Vec<&str> = errors.iter().filter_map(|e| e["field"].as_str()).collect();
    assert_eq!(fields, ["payee", "budget", "currency"], "{r}");
    assert_eq!(errors[2]["allowed"], json!(["USDC", "points"]), "{r}");
    let r = support::rpc_call(&mut ws, 4, "improving.recordTrajectory", json!({})).await;
    let errors = r["error"]["data"]["errors"].as_array().unwrap();
    for field in ["taskType", "input", "output", "steps"] {
        assert!(errors.iter().any(|e| e["field"] == field), "{field}: {r}");
    }
}
