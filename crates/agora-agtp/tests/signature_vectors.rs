//! Golden vectors (tests/vectors/agtp/jcs.json, tests/vectors/agtp/ans-signature.json) and
//! properties of the RFC 8785 canonicalization and the ES256 `ans_signature`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agora_agtp::jcs;
use agora_agtp::signature::{
    ALGORITHM, AnsSigningKey, AnsVerifyingKey, FIELD, SignatureError, verify_result_with,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const JCS_VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/vectors/agtp/jcs.json"
);
const SIGNATURE_VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/vectors/agtp/ans-signature.json"
);

/// Vector files are parsed with `jcs::parse`: `serde_json` without `float_roundtrip` misreads
/// some of their numbers (e.g. 0.11290774160688077) by one ULP.
fn load(path: &str) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    jcs::parse(&text).unwrap()
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap()
}

#[test]
fn jcs_vectors() {
    let doc = load(JCS_VECTORS);
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 60);
    for case in cases {
        let name = text(&case["name"]);
        let input = text(&case["input"]);
        match (case.get("canonical"), case.get("error")) {
            (Some(want), None) => {
                let got = jcs::canonicalize_str(input).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(String::from_utf8(got).unwrap(), text(want), "{name}");
                // Canonical text is a fixed point.
                let again = jcs::canonicalize_str(text(want)).unwrap();
                assert_eq!(again, text(want).as_bytes(), "{name}: not idempotent");
                if let Some(bits) = case.get("ieee754") {
                    let f = jcs::parse(input).unwrap().as_f64().unwrap();
                    assert_eq!(format!("{:016x}", f.to_bits()), text(bits), "{name}");
                }
            }
            (None, Some(kind)) => {
                let err = jcs::canonicalize_str(input).expect_err(name);
                assert_eq!(err.kind(), text(kind), "{name}: {err}");
            }
            _ => panic!("{name}: needs exactly one of canonical / error"),
        }
    }
}

fn secret_from_hex(hex: &str) -> [u8; 32] {
    let mut secret = [0u8; 32];
    for (i, b) in secret.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    secret
}

/// Applies one JSON-Pointer edit: `replace` / `add` set the member or element (`add` may create
/// an object member), `remove` deletes it.
fn apply(result: &Value, case: &Value) -> Value {
    let mut out = result.clone();
    let op = text(&case["op"]);
    if op == "none" {
        return out;
    }
    let path = text(&case["path"]);
    let (parent, last) = path.rsplit_once('/').unwrap();
    let parent = out.pointer_mut(parent).unwrap();
    match (op, parent) {
        ("remove", Value::Object(m)) => {
            m.remove(last).unwrap();
        }
        ("remove", Value::Array(a)) => {
            a.remove(last.parse().unwrap());
        }
        ("replace" | "add", Value::Object(m)) => {
            m.insert(last.to_owned(), case["value"].clone());
        }
        ("replace", Value::Array(a)) => {
            a[last.parse::<usize>().unwrap()] = case["value"].clone();
        }
        (op, _) => panic!("unsupported op {op} at {path}"),
    }
    out
}

fn kind(r: Result<(), SignatureError>) -> &'static str {
    match r {
        Ok(()) => "ok",
        Err(e) => e.kind(),
    }
}

#[test]
fn ans_signature_vectors() {
    let v = load(SIGNATURE_VECTORS);
    assert_eq!(v["algorithm"], ALGORITHM);
    let key = AnsSigningKey::from_secret_bytes(
        &secret_from_hex(text(&v["secret_key_hex"])),
        text(&v["key_id"]),
    )
    .unwrap();
    let vk = key.verifying_key();

    // The published key.
    assert_eq!(vk.to_jwk(), v["jwk"]);
    let from_jwk = AnsVerifyingKey::from_jwk(&v["jwk"]).unwrap();
    assert_eq!(from_jwk, vk);
    assert_eq!(from_jwk.key_id(), text(&v["key_id"]));

    // The covered bytes: the whole result without ans_signature.
    let signed = v["result"].as_object().unwrap();
    let mut unsigned = signed.clone();
    unsigned.remove(FIELD);
    let canonical = jcs::canonicalize(&Value::Object(unsigned.clone()));
    assert_eq!(
        String::from_utf8(canonical.clone()).unwrap(),
        text(&v["canonical"])
    );
    assert_eq!(
        jcs::canonicalize_object_excluding(signed, FIELD),
        canonical,
        "excluding without cloning must match removing"
    );

    // Deterministic signing reproduces the golden value, whether or not a stale signature is there.
    assert_eq!(key.sign_bytes(&canonical), text(&v["signature"]));
    for start in [unsigned.clone(), signed.clone()] {
        let mut r = start;
        key.sign_result(&mut r);
        assert_eq!(Value::Object(r), v["result"]);
    }

    // Every case, with the key itself, the key from the JWK and the key picked from a set.
    let decoy = AnsSigningKey::from_secret_bytes(&[1; 32], "ans-key-decoy").unwrap();
    let keys = [decoy.verifying_key(), from_jwk.clone()];
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() >= 20);
    for case in cases {
        let name = text(&case["name"]);
        let tampered = apply(&v["result"], case);
        let want = text(&case["expect"]);
        assert_eq!(kind(vk.verify_result(&tampered)), want, "{name}");
        assert_eq!(
            kind(from_jwk.verify_result(&tampered)),
            want,
            "{name} (jwk)"
        );
        assert_eq!(
            kind(verify_result_with(&keys, &tampered)),
            want,
            "{name} (set)"
        );
    }

    // The same result as other text (order, whitespace, escapes, number spellings) verifies.
    let variant = jcs::parse(text(&v["result_text_variant"])).unwrap();
    vk.verify_result(&variant).unwrap();
    assert_eq!(jcs::canonicalize(&variant), jcs::canonicalize(&v["result"]));
}

// ---------------------------------------------------------------------------------------------
// Properties.

/// Any JSON value (numbers: integers of every range and finite doubles; strings: any Unicode).
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<u64>().prop_map(|u| json!(u)),
        (-(1i64 << 53)..=(1i64 << 53)).prop_map(|i| json!(i)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        (0.0f64..1.0).prop_map(|f| json!(f)),
        any::<String>().prop_map(Value::String),
        "[\\x00-\\x20\"\\\\a\u{7f}\u{2028}\u{e000}\u{ffff}\u{10000}\u{1f600}]{0,6}"
            .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((arb_name(), inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

fn arb_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_]{0,8}",
        "[a\u{7f}\u{e9}\u{d7ff}\u{e000}\u{ffff}\u{10000}\u{1f600}\u{10ffff}]{0,3}",
        any::<String>(),
    ]
}

/// Equality with numbers compared as doubles (so `5` and `5.0`, `-0` and `0` are equal, as they
/// are in JSON's data model under I-JSON).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, p)| y.get(k).is_some_and(|q| json_eq(p, q)))
        }
        _ => a == b,
    }
}

/// Writes `v` as JSON text with members in the given rotation of their order and some
/// whitespace, to show the canonical form does not depend on either.
fn write_shuffled(v: &Value, rotate: usize, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut members: Vec<_> = m.iter().collect();
            if !members.is_empty() {
                let n = members.len();
                members.rotate_left(rotate % n);
                members.reverse();
            }
            out.push_str("{ ");
            for (i, (k, x)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(" ,\n");
                }
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push_str(" : ");
                write_shuffled(x, rotate + 1, out);
            }
            out.push_str(" }");
        }
        Value::Array(a) => {
            out.push_str("[\t");
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_shuffled(x, rotate + 1, out);
            }
            out.push_str("\r\n]");
        }
        other => out.push_str(&serde_json::to_string(other).unwrap()),
    }
}

fn test_key() -> AnsSigningKey {
    AnsSigningKey::from_secret_bytes(&[0x42; 32], "ans-key-prop").unwrap()
}

/// A DISCOVER-shaped result with arbitrary extra members and arbitrary result entries.
fn arb_result() -> impl Strategy<Value = Map<String, Value>> {
    (
        "[ -~]{1,24}",
        any::<u32>(),
        prop::collection::vec(prop::collection::vec((arb_name(), arb_json()), 0..5), 0..4),
        prop::collection::vec((arb_name(), arb_json()), 0..3),
    )
        .prop_map(|(query_id, total, entries, extra)| {
            let mut m: Map<String, Value> = extra.into_iter().collect();
            let results: Vec<Value> = entries
                .into_iter()
                .map(|e| Value::Object(e.into_iter().collect()))
                .collect();
            m.insert("query_id".into(), json!(query_id));
            m.insert("total_matches".into(), json!(total));
            m.insert("returned".into(), json!(results.len()));
            m.insert("results".into(), Value::Array(results));
            m.insert("federation_path".into(), json!(["ans.a.example"]));
            m.remove(FIELD);
            m
        })
}

/// JSON Pointers of every string value inside `v`.
fn string_paths(v: &Value, at: String, out: &mut Vec<String>) {
    let esc = |k: &str| k.replace('~', "~0").replace('/', "~1");
    match v {
        Value::String(_) => out.push(at),
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                string_paths(x, format!("{at}/{i}"), out);
            }
        }
        Value::Object(m) => {
            for (k, x) in m {
                string_paths(x, format!("{at}/{}", esc(k)), out);
            }
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn canonical_output_reparses_to_an_equal_value(v in arb_json()) {
        let out = jcs::canonicalize(&v);
        // Valid JSON for any parser, and equal data for a correctly rounding one.
        prop_assert!(serde_json::from_slice::<Value>(&out).is_ok());
        let back = jcs::parse(std::str::from_utf8(&out).unwrap()).unwrap();
        prop_assert!(json_eq(&back, &v), "{v} -> {back}");
    }

    #[test]
    fn member_names_compare_by_utf16_code_units(a in arb_name(), b in arb_name()) {
        prop_assert_eq!(jcs::cmp_utf16(&a, &b), a.encode_utf16().cmp(b.encode_utf16()));
    }

    #[test]
    fn canonicalize_is_idempotent(v in arb_json()) {
        let once = jcs::canonicalize(&v);
        let twice = jcs::canonicalize_str(std::str::from_utf8(&once).unwrap()).unwrap();
        prop_assert_eq!(once, twice);
    }

    #[test]
    fn member_order_and_whitespace_do_not_matter(v in arb_json(), rotate in 0usize..8) {
        let mut text = String::new();
        write_shuffled(&v, rotate, &mut text);
        prop_assert_eq!(jcs::canonicalize_str(&text).unwrap(), jcs::canonicalize(&v));
    }

    #[test]
    fn sign_verify_round_trip(result in arb_result()) {
        let key = test_key();
        let vk = key.verifying_key();
        let mut r = result;
        key.sign_result(&mut r);
        let signed = Value::Object(r);
        prop_assert_eq!(vk.verify_result(&signed), Ok(()));
        // Over the wire: any serializer's text, parsed with jcs::parse, still verifies.
        let wire = serde_json::to_string_pretty(&signed).unwrap();
        prop_assert_eq!(vk.verify_result(&jcs::parse(&wire).unwrap()), Ok(()));
        let wire = String::from_utf8(jcs::canonicalize(&signed)).unwrap();
        prop_assert_eq!(vk.verify_result(&jcs::parse(&wire).unwrap()), Ok(()));
    }

    #[test]
    fn changing_any_string_breaks_verification(
        result in arb_result(),
        pick in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
    ) {
        let key = test_key();
        let mut r = result;
        key.sign_result(&mut r);
        let mut signed = Value::Object(r);
        let mut paths = Vec::new();
        string_paths(&signed, String::new(), &mut paths);
        paths.retain(|p| !p.starts_with(&format!("/{FIELD}/")));
        // query_id is always there.
        prop_assert!(!paths.is_empty());
        let path = pick.get(&paths).clone();
        let Some(Value::String(s)) = signed.pointer_mut(&path) else {
            return Err(TestCaseError::fail("path vanished"));
        };
        if s.is_empty() {
            s.push('a');
        } else {
            // Change one byte: flip a bit of an ASCII byte, or replace a non-ASCII character.
            let i = at.index(s.len());
            let start = (0..=i).rev().find(|&j| s.is_char_boundary(j)).unwrap_or(0);
            let c = s[start..].chars().next().unwrap();
            let replacement = if c.is_ascii() { char::from(c as u8 ^ 1) } else { 'x' };
            s.replace_range(start..start + c.len_utf8(), replacement.encode_utf8(&mut [0; 4]));
        }
        prop_assert_eq!(
            key.verifying_key().verify_result(&signed),
            Err(SignatureError::Invalid),
            "{}", path
        );
    }
}

/// The maintained RFC 8785 crate `serde_json_canonicalizer` on every vector, to show why it
/// does not replace [`jcs`]. It canonicalizes a `serde_json::Value`, so its whole path
/// from text is `serde_json::from_str` then `to_string`. It writes every canonical vector
/// correctly, but fails `error-duplicate-name`: RFC 8785 §3.1 takes I-JSON input only and
/// `{"a":1,"a":2}` is not I-JSON, yet the crate's path canonicalizes it to `{"a":2}` (serde_json
/// keeps the last member), so a signed body with a duplicate member would be signed or verified
/// as a different object than the one a strict reader sees. That vector is why `jcs` keeps its
/// own writer and parser (see its module documentation); this test pins exactly which vectors the
/// crate fails, so a release that fixes it is noticed.
#[test]
fn the_jcs_crate_fails_only_the_duplicate_name_vector() {
    let v = load(JCS_VECTORS);
    let (mut canonical, mut failed) = (0, Vec::new());
    for case in v["cases"].as_array().unwrap() {
        let name = text(&case["name"]);
        let input = text(&case["input"]);
        let crate_says = serde_json::from_str::<Value>(input)
            .ok()
            .and_then(|value| serde_json_canonicalizer::to_string(&value).ok());
        match (case.get("canonical"), crate_says) {
            (Some(want), Some(got)) if got == text(want) => {
                canonical += 1;
                // and ours agrees byte for byte
                let value = jcs::parse(input).unwrap();
                assert_eq!(jcs::canonicalize(&value), got.as_bytes(), "{name}");
            }
            (None, None) => {}
            _ => failed.push(name.to_owned()),
        }
    }
    assert!(canonical >= 50, "{canonical} canonical vectors");
    assert_eq!(failed, ["error-duplicate-name"]);
}
