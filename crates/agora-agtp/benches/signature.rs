//! Cost of the `ans_signature` on a DISCOVER result of 10 entries (the shape of discovery draft
//! §3.4, about 5.3 kB canonical), on one core: RFC 8785 canonicalization alone, `sign_result`
//! (canonicalize + ES256 sign + insert) and `verify_result` (parse the member, canonicalize,
//! ES256 verify). Also the strict I-JSON parse of the signed body, next to `serde_json`'s, and
//! the maintained RFC 8785 crate `serde_json_canonicalizer` on the same value (the competitor
//! the module's hand-written writer is measured against).
//!
//! Run: `cargo bench -p agora-agtp --bench signature`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use agora_agtp::jcs;
use agora_agtp::signature::AnsSigningKey;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Map, Value, json};

fn result(n: usize) -> Map<String, Value> {
    let results: Vec<Value> = (0..n)
        .map(|i| {
            let tier = 1 + (i % 3) as u64;
            let behavioral = 0.99 - 0.013 * i as f64;
            let matched = 0.95 - 0.031 * i as f64;
            json!({
                "rank": i + 1,
                "manifest_uri": format!("agtp://agtp.org{i}.example/agents/contract-auditor-{i}"),
                "canonical_id": format!("{:064x}", 0x3a9f_2c1d_8b7e_4a6f_u64.wrapping_mul(i as u64 + 1)),
                "agent_label": format!("contract-auditor-{i}"),
                "org_domain": format!("org{i}.example"),
                "trust_tier": tier,
                "behavioral_trust_score": behavioral,
                "supported_methods": ["QUERY", "VALIDATE", "REPORT"],
                "capability_match_score": matched,
                "rank_score": 0.3 * (3 - tier) as f64 / 2.0 + 0.4 * behavioral + 0.3 * matched,
                "required_scope": "audit:read code:analyze",
                "job_description": "Static and dynamic analysis of Solidity smart contracts \u{2014} revue \u{e9}tendue.",
            })
        })
        .collect();
    let v = json!({
        "query_id": "qry-7f3a9c",
        "total_matches": 23,
        "returned": n,
        "results": results,
        "federation_path": ["ans.auditor.tld", "ans.ledgerworks.example"],
    });
    v.as_object().unwrap().clone()
}

fn bench(c: &mut Criterion) {
    let key = AnsSigningKey::from_secret_bytes(&[0x42; 32], "ans-key-bench").unwrap();
    let vk = key.verifying_key();
    let unsigned = result(10);
    let unsigned_value = Value::Object(unsigned.clone());
    let canonical_len = jcs::canonicalize(&unsigned_value).len() as u64;
    let mut signed = unsigned.clone();
    key.sign_result(&mut signed);
    let signed = Value::Object(signed);
    let wire = serde_json::to_string(&signed).unwrap();

    let mut g = c.benchmark_group("ans_signature_10_results");
    g.throughput(Throughput::Bytes(canonical_len));
    g.bench_function("jcs_canonicalize", |b| {
        let mut out = Vec::with_capacity(8192);
        b.iter(|| {
            out.clear();
            jcs::write_canonical(black_box(&unsigned_value), &mut out);
            black_box(out.len())
        });
    });
    g.bench_function("serde_json_canonicalizer_same_value", |b| {
        b.iter(|| {
            black_box(serde_json_canonicalizer::to_vec(black_box(&unsigned_value)).map(|v| v.len()))
        });
    });
    g.bench_function("sign_result", |b| {
        b.iter(|| {
            let mut r = unsigned.clone();
            key.sign_result(black_box(&mut r));
            r
        });
    });
    g.bench_function("clone_result_baseline", |b| {
        b.iter(|| black_box(&unsigned).clone());
    });
    g.bench_function("verify_result", |b| {
        b.iter(|| vk.verify_result(black_box(&signed)).unwrap());
    });
    g.throughput(Throughput::Bytes(wire.len() as u64));
    g.bench_function("jcs_parse_body", |b| {
        b.iter(|| jcs::parse(black_box(&wire)).unwrap());
    });
    g.bench_function("serde_json_parse_body", |b| {
        b.iter(|| serde_json::from_str::<Value>(black_box(&wire)).unwrap());
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
