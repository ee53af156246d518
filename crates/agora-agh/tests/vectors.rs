//! Conformance vectors: the shared AGH vectors (`tests/vectors/agh/*.ndjson`, copied from the
//! reference) and our own case files (`tests/vectors/agh/cases/*.json`).
//!
//! A case file is a JSON array of cases. A case is either
//! `{"name", "spec", "now", "replay_age"?, "reference_admission"?, "input_raw", "expect"}` or
//! `{"name", "spec", "sequence": [{"now"?, "input_raw", "expect"}, …]}` (validated in order with
//! one deduplication window, as a receiver would). `expect` is `{"ok": true, "kind"?}` or
//! `{"ok": false, "reason", "detail_contains"}`. Adding a vector needs no Rust change.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

use agora_agh::capability::DocRules;
use agora_agh::validate::dedup_deadline;
use agora_agh::{
    CapabilityDoc, DedupWindow, Envelope, Rejection, Validated, ValidationPolicy,
    broadcast_subject, direct_subject, route_token, validate,
};
use serde_json::Value;

const NOW: i64 = 1_775_822_400;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/agh")
}

fn lines(name: &str) -> Vec<String> {
    fs::read_to_string(dir().join(name))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn shared_valid_envelopes_validate_and_round_trip_byte_for_byte() {
    let lines = lines("envelopes-valid.ndjson");
    assert_eq!(lines.len(), 7);
    let mut kinds = Vec::new();
    for line in &lines {
        let v = validate(line.as_bytes(), NOW, &ValidationPolicy::default())
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(
            v.envelope.to_json(),
            *line,
            "reference form is our emitted form"
        );
        kinds.push(v.envelope.kind.as_str());
    }
    assert_eq!(
        kinds,
        [
            "greet",
            "whois",
            "say",
            "direct",
            "capability",
            "receipt",
            "trace"
        ]
    );
}

#[test]
fn shared_invalid_envelopes_get_their_reason_codes() {
    let inputs = lines("envelopes-invalid.ndjson");
    let expected = lines("envelopes-invalid.expected.ndjson");
    assert_eq!(inputs.len(), expected.len());
    assert!(!inputs.is_empty());
    for (input, expected) in inputs.iter().zip(&expected) {
        let want: Value = serde_json::from_str(expected).unwrap();
        let got: Value = serde_json::from_str(input).unwrap();
        assert_eq!(got["id"], want["id"]);
        let err = validate(input.as_bytes(), NOW, &ValidationPolicy::default()).unwrap_err();
        assert_eq!(
            err.reason().as_str(),
            want["reason"],
            "{}: {err}",
            want["id"]
        );
    }
}

#[test]
fn shared_capability_digests() {
    let lines = lines("capability-digests.ndjson");
    assert!(!lines.is_empty());
    for line in lines {
        let v: Value = serde_json::from_str(&line).unwrap();
        let doc =
            CapabilityDoc::from_json(&v["document"].to_string(), DocRules::Authoring).unwrap();
        assert_eq!(doc.canonical_json(), v["canonical"].as_str().unwrap());
        assert_eq!(doc.digest.as_deref(), v["digest"].as_str());
        // The sealed document verifies as a transfer.
        let sealed = CapabilityDoc::from_json(&doc.to_transfer_json(), DocRules::Transfer).unwrap();
        assert_eq!(sealed.digest, doc.digest);
    }
}

#[test]
fn shared_route_tokens_and_subjects() {
    let lines = lines("route-tokens.ndjson");
    assert!(!lines.is_empty());
    for line in lines {
        let v: Value = serde_json::from_str(&line).unwrap();
        let peer = v["peer_id"].as_str().unwrap();
        assert_eq!(
            route_token(peer).unwrap(),
            v["route_token"].as_str().unwrap()
        );
        assert_eq!(
            broadcast_subject("builders").unwrap(),
            v["broadcast_subject"].as_str().unwrap()
        );
        assert_eq!(
            direct_subject("builders", peer).unwrap(),
            v["direct_subject"].as_str().unwrap()
        );
    }
}

fn check(name: &str, got: Result<Validated<'_>, Rejection>, expect: &Value) {
    match (got, expect["ok"].as_bool().unwrap()) {
        (Ok(v), true) => {
            if let Some(kind) = expect.get("kind") {
                assert_eq!(v.envelope.kind.as_str(), kind, "{name}");
            }
        }
        (Ok(v), false) => panic!("{name}: accepted {:?}, expected {}", v.envelope.id, expect),
        (Err(e), true) => panic!("{name}: rejected: {e}"),
        (Err(e), false) => {
            assert_eq!(e.reason().as_str(), expect["reason"], "{name}: {e}");
            let needle = expect["detail_contains"].as_str().unwrap();
            assert!(
                e.detail().contains(needle),
                "{name}: detail {:?} lacks {needle:?}",
                e.detail()
            );
        }
    }
}

fn policy_of(case: &Value) -> ValidationPolicy {
    ValidationPolicy {
        replay_age: case
            .get("replay_age")
            .and_then(Value::as_i64)
            .unwrap_or(300),
        reference_admission: case
            .get("reference_admission")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    }
}

#[test]
fn own_case_files() {
    let mut files: Vec<_> = fs::read_dir(dir().join("cases"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 6);
    let mut total = 0;
    for file in files {
        let cases: Vec<Value> = serde_json::from_str(&fs::read_to_string(&file).unwrap()).unwrap();
        for case in &cases {
            let name = format!(
                "{}: {}",
                file.file_name().unwrap().to_string_lossy(),
                case["name"]
            );
            assert!(
                case["spec"].is_string(),
                "{name}: every case names its spec section"
            );
            let policy = policy_of(case);
            if let Some(seq) = case.get("sequence").and_then(Value::as_array) {
                let mut window = DedupWindow::default();
                for step in seq {
                    let now = step.get("now").and_then(Value::as_i64).unwrap_or(NOW);
                    let input = step["input_raw"].as_str().unwrap();
                    let got = validate(input.as_bytes(), now, &policy).and_then(|v| {
                        let e = &v.envelope;
                        window.insert(
                            &e.id,
                            dedup_deadline(e.ts, e.expires_at, policy.replay_age),
                            now,
                        )?;
                        Ok(v)
                    });
                    check(&name, got, &step["expect"]);
                    total += 1;
                }
            } else {
                let now = case["now"].as_i64().unwrap();
                let input = case["input_raw"].as_str().unwrap();
                check(
                    &name,
                    validate(input.as_bytes(), now, &policy),
                    &case["expect"],
                );
                total += 1;
            }
        }
    }
    assert!(total >= 150, "only {total} vectors ran");
}

#[test]
fn invalid_utf8_is_malformed() {
    let mut bytes = lines("envelopes-valid.ndjson")[2].clone().into_bytes();
    let at = bytes.windows(4).position(|w| w == b"take").unwrap();
    bytes[at] = 0xff;
    let err = validate(&bytes, NOW, &ValidationPolicy::default()).unwrap_err();
    assert_eq!(err.reason().as_str(), "malformed");
    assert!(err.detail().contains("UTF-8"), "{err}");
}

#[test]
fn size_limit_is_exactly_one_mebibyte() {
    let base = lines("envelopes-valid.ndjson")[2].clone();
    let filler_at = base.find("\"intent\"").unwrap();
    let make = |total: usize| {
        let pad = total - base.len() - "\"pad\":\"\",".len();
        let mut s = base.clone();
        s.insert_str(filler_at, &format!("\"pad\":\"{}\",", "x".repeat(pad)));
        assert_eq!(s.len(), total);
        s
    };
    let at_limit = make(agora_agh::MAX_ENVELOPE_BYTES);
    assert!(validate(at_limit.as_bytes(), NOW, &ValidationPolicy::default()).is_ok());
    let over = make(agora_agh::MAX_ENVELOPE_BYTES + 1);
    let err = validate(over.as_bytes(), NOW, &ValidationPolicy::default()).unwrap_err();
    assert_eq!(err.reason().as_str(), "malformed");
    assert!(err.detail().contains("1048576"), "{err}");
}

#[test]
fn unknown_ext_keys_survive_a_forward() {
    let line = lines("envelopes-valid.ndjson")[3].clone();
    let with_ext = line.replace(
        r#""ext":{"agh.workflow":{"ticket":"NET-42"}}"#,
        r#""ext":{"agh.workflow":{"ticket":"NET-42"},"zz.future":{"v":[1,2.50,"\u00e9"],"n":null}}"#,
    );
    let env = Envelope::parse(with_ext.as_bytes()).unwrap();
    assert_eq!(env.to_json(), with_ext);
}
