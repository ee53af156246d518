//! Golden vectors for the AGTP/1.0 codec and Authority-Scope matching
//! (`tests/vectors/agtp/codec-requests.json`, `codec-responses.json`, `scope.json`).
//!
//! Codec case fields:
//!
//! - `name`; the input as `raw` (text) or `raw_hex` (bytes); `expand` maps a marker in `raw` to
//!   `[text, count]` (the marker is replaced by `text` repeated `count` times, for large inputs);
//!   `limits` (`{"max_head", "max_body"}`, default 16 KiB / 1 MiB).
//! - `expect`: the messages decoded one after the other from the front of the buffer, each with
//!   `method`/`target` (requests) or `status`/`reason` (responses), `headers` (`[[name, value]…]`,
//!   as sent, `Content-Length` excluded), `body` (text), and optionally `json` (what `json_body()`
//!   returns; `null` for an empty body), `json_error` (its error code), accessor results
//!   (`agent_id`, `principal_id`, `task_id`, `session_id`, `path`, `query`), `scopes` (the parsed
//!   Authority-Scope, normalised and space-separated), `scopes_error`, `grants`/`denies` (required
//!   scopes that Authority-Scope does / does not grant).
//! - After those messages: `error` (the `BadRequest::code()` the next decode fails with),
//!   `incomplete` (the next decode needs more bytes), or neither (the buffer is used up).
//! - `canonical`: re-encoding the decoded message reproduces `raw` byte for byte.
//!
//! Every decoded message is also re-encoded and decoded again, and every proper prefix of a
//! message must decode to "need more bytes".
//!
//! Scope cases: `held` (an Authority-Scope value) with `normalized` (its display form),
//! `error` (+ `token`, which the message must name), or `required` + `grants`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use agora_agtp::BadRequest;
use agora_agtp::codec::{Headers, Limits, Request, Response, decode_request, decode_response};
use agora_agtp::scope::Scopes;
use serde_json::Value;

const REQUESTS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/vectors/agtp/codec-requests.json"
));
const RESPONSES: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/vectors/agtp/codec-responses.json"
));
const SCOPE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/vectors/agtp/scope.json"
));

fn cases(text: &str) -> Vec<Value> {
    serde_json::from_str::<Value>(text)
        .expect("vector file is JSON")
        .as_array()
        .expect("vector file is an array")
        .clone()
}

fn name(case: &Value) -> String {
    case["name"].as_str().unwrap_or("<unnamed>").to_owned()
}

fn input(case: &Value) -> Vec<u8> {
    if let Some(hex) = case["raw_hex"].as_str() {
        return (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect();
    }
    let mut raw = case["raw"].as_str().expect("raw").to_owned();
    if let Some(expand) = case["expand"].as_object() {
        for (marker, how) in expand {
            let text = how[0].as_str().expect("expand text");
            let count = usize::try_from(how[1].as_u64().expect("expand count")).expect("count");
            raw = raw.replace(marker, &text.repeat(count));
        }
    }
    raw.into_bytes()
}

fn limits(case: &Value) -> Limits {
    match case.get("limits") {
        None => Limits::default(),
        Some(l) => Limits {
            max_head: usize::try_from(l["max_head"].as_u64().expect("max_head")).expect("usize"),
            max_body: usize::try_from(l["max_body"].as_u64().expect("max_body")).expect("usize"),
        },
    }
}

/// Checks what requests and responses have in common.
fn check_common(
    what: &str,
    expect: &Value,
    headers: &Headers,
    body: &[u8],
    json: &Result<Option<Value>, BadRequest>,
) {
    if let Some(want) = expect.get("headers") {
        let got: Vec<[&str; 2]> = headers.iter().map(|(n, v)| [n, v]).collect();
        let want: Vec<[&str; 2]> = want
            .as_array()
            .expect("headers array")
            .iter()
            .map(|p| [p[0].as_str().expect("name"), p[1].as_str().expect("value")])
            .collect();
        assert_eq!(got, want, "{what}: headers");
    }
    if let Some(want) = expect.get("body") {
        assert_eq!(
            String::from_utf8_lossy(body),
            want.as_str().expect("body text"),
            "{what}: body"
        );
    }
    if let Some(want) = expect.get("json") {
        let want = if want.is_null() {
            None
        } else {
            Some(want.clone())
        };
        assert_eq!(json, &Ok(want), "{what}: json_body");
    }
    if let Some(want) = expect.get("json_error") {
        assert_eq!(
            json.as_ref().map_err(BadRequest::code).map(|_| ()),
            Err(want.as_str().expect("code")),
            "{what}: json_body error"
        );
    }
    let accessors: [(&str, Option<&str>); 4] = [
        ("agent_id", headers.agent_id()),
        ("principal_id", headers.principal_id()),
        ("task_id", headers.task_id()),
        ("session_id", headers.session_id()),
    ];
    for (key, got) in accessors {
        if let Some(want) = expect.get(key) {
            assert_eq!(got, want.as_str(), "{what}: {key}");
        }
    }
    if let Some(want) = expect.get("scopes") {
        let scopes = headers
            .authority_scope()
            .unwrap_or_else(|e| panic!("{what}: Authority-Scope: {e}"))
            .expect("Authority-Scope present");
        assert_eq!(scopes.to_string(), want.as_str().expect("scopes"), "{what}");
        for (key, expected) in [("grants", true), ("denies", false)] {
            for required in expect[key].as_array().into_iter().flatten() {
                let required = required.as_str().expect("scope");
                assert_eq!(
                    scopes.grants(required),
                    expected,
                    "{what}: {key} {required}"
                );
            }
        }
    }
    if let Some(want) = expect.get("scopes_error") {
        assert_eq!(
            headers.authority_scope().map_err(|e| e.code()),
            Err(want.as_str().expect("code")),
            "{what}: Authority-Scope error"
        );
    }
}

fn check_request(what: &str, expect: &Value, r: &Request) {
    assert_eq!(
        r.method,
        expect["method"].as_str().expect("method"),
        "{what}"
    );
    if let Some(want) = expect.get("target") {
        assert_eq!(r.target.as_deref(), want.as_str(), "{what}: target");
    }
    if let Some(want) = expect.get("path") {
        assert_eq!(Some(r.path()), want.as_str(), "{what}: path");
    }
    if let Some(want) = expect.get("query") {
        assert_eq!(r.query(), want.as_str(), "{what}: query");
    }
    check_common(what, expect, &r.headers, &r.body, &r.json_body());
}

fn check_response(what: &str, expect: &Value, r: &Response) {
    assert_eq!(
        u64::from(r.status.0),
        expect["status"].as_u64().expect("status"),
        "{what}"
    );
    assert_eq!(
        r.reason,
        expect["reason"].as_str().expect("reason"),
        "{what}"
    );
    check_common(what, expect, &r.headers, &r.body, &r.json_body());
}

type Decode<M> = fn(&[u8], &Limits) -> Result<Option<(M, usize)>, BadRequest>;

/// Runs one decoder over every case of a file; returns the number of cases.
fn run<M: PartialEq + std::fmt::Debug>(
    text: &str,
    decode: Decode<M>,
    encode: fn(&M) -> Vec<u8>,
    check: fn(&str, &Value, &M),
) -> usize {
    let cases = cases(text);
    for case in &cases {
        let what = name(case);
        let raw = input(case);
        let limits = limits(case);
        let mut at = 0usize;
        for (i, expect) in case["expect"]
            .as_array()
            .expect("expect")
            .iter()
            .enumerate()
        {
            let what = format!("{what} [message {i}]");
            let (message, used) = decode(&raw[at..], &limits)
                .unwrap_or_else(|e| panic!("{what}: {e}"))
                .unwrap_or_else(|| panic!("{what}: incomplete"));
            check(&what, expect, &message);
            // Round trip through the encoder (which may add a `Content-Length` line and CRs, so
            // the head can grow past a limit the original just met).
            let again = encode(&message);
            let roomy = Limits {
                max_head: limits.max_head * 2 + 64,
                ..limits
            };
            assert_eq!(
                decode(&again, &roomy),
                Ok(Some((message, again.len()))),
                "{what}: re-encoded"
            );
            if case["canonical"].as_bool() == Some(true) {
                assert_eq!(
                    String::from_utf8_lossy(&again),
                    String::from_utf8_lossy(&raw[at..at + used]),
                    "{what}: canonical encoding"
                );
            }
            // Every proper prefix needs more bytes (small messages only: this is quadratic).
            if used <= 4096 {
                for k in 0..used {
                    assert_eq!(
                        decode(&raw[at..at + k], &limits),
                        Ok(None),
                        "{what}: prefix of {k} bytes"
                    );
                }
            }
            at += used;
        }
        let rest = decode(&raw[at..], &limits);
        if let Some(code) = case["error"].as_str() {
            assert_eq!(rest.map(|_| ()).map_err(|e| e.code()), Err(code), "{what}");
        } else if case["incomplete"].as_bool() == Some(true) {
            assert_eq!(rest, Ok(None), "{what}");
        } else {
            assert_eq!(at, raw.len(), "{what}: bytes left over");
        }
    }
    cases.len()
}

#[test]
fn request_vectors() {
    let n = run(REQUESTS, decode_request, Request::encode, check_request);
    assert!(n >= 60, "only {n} request vectors");
}

#[test]
fn response_vectors() {
    let n = run(RESPONSES, decode_response, Response::encode, check_response);
    assert!(n >= 20, "only {n} response vectors");
}

#[test]
fn request_vectors_cover_every_codec_error() {
    let mut seen: Vec<&str> = Vec::new();
    let requests = cases(REQUESTS);
    for case in &requests {
        for key in ["error", "json_error", "scopes_error"] {
            let codes = std::iter::once(&case[key]).chain(
                case["expect"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| &e[key]),
            );
            for code in codes.filter_map(Value::as_str) {
                if !seen.contains(&code) {
                    seen.push(code);
                }
            }
        }
    }
    seen.sort_unstable();
    assert_eq!(
        seen,
        [
            "body-too-large",
            "head-too-large",
            "invalid-body",
            "invalid-content-length",
            "malformed-header",
            "malformed-request-line",
            "unsupported-content-type",
        ]
    );
}

#[test]
fn scope_vectors() {
    let cases = cases(SCOPE);
    assert!(cases.len() >= 30);
    for case in &cases {
        let held = case["held"].as_str().expect("held");
        let parsed = held.parse::<Scopes>();
        if let Some(code) = case["error"].as_str() {
            let err = parsed.expect_err(held);
            assert_eq!(err.code(), code, "{held:?}");
            let token = case["token"].as_str().expect("token");
            assert!(err.to_string().contains(token), "{err} should name {token}");
            continue;
        }
        let scopes = parsed.unwrap_or_else(|e| panic!("{held:?}: {e}"));
        if let Some(want) = case["normalized"].as_str() {
            assert_eq!(scopes.to_string(), want, "{held:?}");
        }
        if let Some(required) = case["required"].as_str() {
            let want = case["grants"].as_bool().expect("grants");
            assert_eq!(
                scopes.grants(required),
                want,
                "{held:?} grants {required:?}"
            );
        }
    }
}
