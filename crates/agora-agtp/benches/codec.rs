//! AGTP/1.0 codec cost on one core: decoding the discovery draft's §3.3 DISCOVER request (head
//! only, and with the JSON body parsed), encoding and decoding a ~2 KB JSON DISCOVER response,
//! and parsing + checking an Authority-Scope list.
//!
//! Run: `cargo bench -p agora-agtp --bench codec`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use agora_agtp::codec::{Limits, Response, decode_request, decode_response};
use agora_agtp::scope::Scopes;
use agora_agtp::status::Status;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};

/// Discovery draft §3.3, with the line-wrapped intent joined and a Content-Length added.
fn discover_3_3() -> Vec<u8> {
    let body = r#"{
  "method": "DISCOVER",
  "task_id": "task-disc-solidity-01",
  "parameters": {
    "intent": "Audit Solidity smart contracts for reentrancy, overflow, and access control misconfiguration",
    "capability_domains": ["methods", "tools", "zones"],
    "trust_tier_min": 2,
    "behavioral_trust_min": 0.88,
    "governance_zone": "zone:finance",
    "limit": 3,
    "scope_negotiate": true
  }
}"#;
    format!(
        "AGTP/1.0 DISCOVER\r\n\
         Agent-ID: agtp://agtp.finco.tld/agents/orchestrator\r\n\
         Principal-ID: usr-compliance-team\r\n\
         Authority-Scope: discovery:query agents:delegate audit:*\r\n\
         Session-ID: sess-compliance-q2\r\n\
         Task-ID: task-disc-solidity-01\r\n\
         Content-Type: application/agtp+json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A DISCOVER result of 4 entries: about 2 KB of compact JSON.
fn result_body() -> Value {
    let results: Vec<Value> = (0..4)
        .map(|i| {
            json!({
                "rank": i + 1,
                "manifest_uri": format!("agtp://agtp.org{i}.example/agents/solidity-auditor-{i}"),
                "canonical_id": format!("{:064x}", 0x3a9f_2c1d_8b7e_4a6f_u64.wrapping_mul(i + 1)),
                "agent_label": format!("solidity-auditor-{i}"),
                "org_domain": format!("org{i}.example"),
                "trust_tier": 1 + i % 2,
                "behavioral_trust_score": 0.97 - 0.01 * i as f64,
                "supported_methods": ["QUERY", "ANALYZE", "VALIDATE", "REPORT"],
                "capability_match_score": 0.96 - 0.02 * i as f64,
                "governance_zone": "zone:finance",
                "required_scope": "audit:read code:analyze",
                "job_description": "Static and dynamic analysis of Solidity smart contracts.",
            })
        })
        .collect();
    json!({
        "status": 200,
        "task_id": "task-disc-solidity-01",
        "result": {
            "query_id": "qry-sc-audit-3c9f",
            "total_matches": 7,
            "returned": results.len(),
            "results": results,
            "ans_signature": {
                "algorithm": "ES256",
                "key_id": "ans-key-finance-01",
                "value": "MEUCIQDx1m2gqU3b7kqgH4Yk0y9mX9Lh3m6v1Vb2o8Qy4u6cUQIgV0s7bq1m3Xh9Zr2c5Jp8fW4tLk6nHd1aS3eR7yT0uIo",
            },
        },
    })
}

fn response(body: &Value) -> Response {
    Response::new(Status::OK)
        .with_header("Server-ID", "agtp://ans.finco.tld")
        .with_header("Response-ID", "resp-0123456789ab")
        .with_header("Task-ID", "task-disc-solidity-01")
        .with_json_body(body)
}

fn bench(c: &mut Criterion) {
    let limits = Limits::default();
    let request = discover_3_3();
    let mut g = c.benchmark_group("agtp_codec");
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode_request_3_3", |b| {
        b.iter(|| {
            decode_request(black_box(&request), &limits)
                .unwrap()
                .unwrap()
        });
    });
    g.bench_function("decode_request_3_3_and_json_body", |b| {
        b.iter(|| {
            let (r, _) = decode_request(black_box(&request), &limits)
                .unwrap()
                .unwrap();
            (r.headers.authority_scope().unwrap(), r.json_body().unwrap())
        });
    });

    let body = result_body();
    let resp = response(&body);
    let wire = resp.encode();
    assert!(
        (1800..2600).contains(&resp.body.len()),
        "{}",
        resp.body.len()
    );
    let mut out = Vec::with_capacity(wire.len());
    g.bench_function("encode_response_2k_into", |b| {
        b.iter(|| {
            out.clear();
            black_box(&resp).encode_into(&mut out);
            out.len()
        });
    });
    g.bench_function("encode_response_2k", |b| {
        b.iter(|| black_box(&resp).encode());
    });
    g.bench_function("serialize_and_encode_response_2k", |b| {
        b.iter(|| response(black_box(&body)).encode());
    });
    g.bench_function("decode_response_2k", |b| {
        b.iter(|| decode_response(black_box(&wire), &limits).unwrap().unwrap());
    });
    g.finish();

    let mut g = c.benchmark_group("agtp_scope");
    g.throughput(Throughput::Elements(1));
    g.bench_function("parse_and_grant", |b| {
        b.iter(|| {
            let s: Scopes = black_box("discovery:query agents:delegate audit:*")
                .parse()
                .unwrap();
            s.grants(black_box("audit:read"))
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
