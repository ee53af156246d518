//! The AGH runtime's own admission rules (not part of the protocol; opt-in).
//!
//! The Go reference runtime refuses, as `malformed`, envelopes whose body, proof
//! or ext carry a raw secret, and, as `verification_failed`, a Peer Card claiming `task.write`
//! without a proof. Agora applies these only when [`crate::ValidationPolicy::reference_admission`]
//! is set, so that an operator can refuse what AGH runtimes would refuse.
//!
//! # Important discrepancies
//! The reference matches strings with the redaction regexes of its diagnostics package, which are
//! not published with the protocol. This module detects the documented shapes: a secret-named key
//! with a non-empty value (names normalised by lower-casing and dropping `_ - .`; keys containing
//! `hash` are exempt), `Bearer <token>`, `<secret-name>: value` / `<secret-name>=value`, and
//! `agh_claim_…` claim tokens.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::body::Body;
use crate::envelope::Envelope;
use crate::json::Str;
use crate::reason::Rejection;
use crate::whois::WhoisBody;

/// Capability whose claim needs a proof under the reference admission rules.
pub const TASK_WRITE_CAPABILITY: &str = "task.write";

const SECRET_KEYS: [&str; 16] = [
    "apikey",
    "accesstoken",
    "refreshtoken",
    "mcpauthtoken",
    "oauthcode",
    "authorizationcode",
    "codeverifier",
    "pkceverifier",
    "secretbinding",
    "clientsecret",
    "authorization",
    "password",
    "secret",
    "token",
    "claimtoken",
    "privatekey",
];

/// Applies the reference admission rules to a validated envelope.
pub fn check(envelope: &Envelope<'_>, body: &Body<'_>) -> Result<(), Rejection> {
    let card = match body {
        Body::Greet(g) => Some(&g.peer_card),
        Body::Whois(WhoisBody::Response { peer_card }) => Some(peer_card),
        _ => None,
    };
    if let Some(card) = card
        && card.capabilities.iter().any(|c| c == TASK_WRITE_CAPABILITY)
        && envelope
            .proof
            .as_deref()
            .is_none_or(|p| p.get().trim() == "{}")
    {
        return Err(Rejection::VerificationFailed(
            "body: a Peer Card claiming `task.write` needs a non-empty `proof`".into(),
        ));
    }
    let parts = [
        ("body", Some(envelope.body.get())),
        ("proof", envelope.proof.as_deref().map(|p| p.get())),
        ("ext", envelope.ext.as_deref().map(|e| e.get())),
    ];
    for (name, raw) in parts {
        if let Some(raw) = raw
            && let Some(found) = find_secret(raw)
        {
            return Err(Rejection::Malformed(
                format!("field `{name}` carries a raw secret ({found})").into(),
            ));
        }
    }
    Ok(())
}

/// Returns a description of the first raw secret in the JSON text `raw`, if any.
pub fn find_secret(raw: &str) -> Option<String> {
    let mut scan = Scan(None);
    let mut de = serde_json::Deserializer::from_str(raw);
    let _ = ScanSeed(&mut scan).deserialize(&mut de);
    scan.0
}

struct Scan(Option<String>);
struct ScanSeed<'s>(&'s mut Scan);

impl<'de> de::DeserializeSeed<'de> for ScanSeed<'_> {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(ScanVisitor(self.0))
    }
}

impl ScanSeed<'_> {
    fn deserialize<'de, D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        de::DeserializeSeed::deserialize(self, d)
    }
}

/// Visits a value; returns whether it was non-empty.
struct ScanVisitor<'s>(&'s mut Scan);

impl<'de> Visitor<'de> for ScanVisitor<'_> {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<bool, E> {
        Ok(true)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<bool, E> {
        Ok(true)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<bool, E> {
        Ok(true)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(true)
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        if self.0.0.is_none()
            && let Some(found) = secret_in_text(v)
        {
            self.0.0 = Some(found);
        }
        Ok(!v.trim().is_empty())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        let mut any = false;
        while let Some(v) = seq.next_element_seed(ScanSeed(self.0))? {
            any |= v;
        }
        Ok(any)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut any = false;
        while let Some(Str(key)) = map.next_key::<Str<'de>>()? {
            if self.0.0.is_none()
                && let Some(found) = secret_in_text(&key)
            {
                self.0.0 = Some(found);
            }
            let non_empty = map.next_value_seed(ScanSeed(self.0))?;
            if non_empty && self.0.0.is_none() && is_secret_key(&key) {
                self.0.0 = Some(format!("key `{key}`"));
            }
            any = true;
        }
        Ok(any)
    }
}

fn normalise_key(key: &str) -> String {
    key.chars()
        .filter(|c| !matches!(c, '_' | '-' | '.'))
        .flat_map(char::to_lowercase)
        .collect()
}

fn is_secret_key(key: &str) -> bool {
    let k = normalise_key(key);
    !k.contains("hash") && SECRET_KEYS.contains(&k.as_str())
}

fn is_token_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.' | b'~' | b'+' | b'/' | b'=')
}

/// Detects secret-looking text: a claim token, a bearer token or `name: value` / `name=value`.
fn secret_in_text(text: &str) -> Option<String> {
    if let Some(i) = text.find("agh_claim_")
        && text
            .as_bytes()
            .get(i + 10)
            .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
    {
        return Some("an agh_claim_ token".into());
    }
    let lower = text.to_ascii_lowercase();
    if let Some(i) = lower.find("bearer ") {
        let rest = &lower.as_bytes()[i + 7..];
        if rest.first().is_some_and(|&c| is_token_char(c)) {
            return Some("a bearer token".into());
        }
    }
    for name in [
        "password",
        "passwd",
        "secret",
        "token",
        "api_key",
        "apikey",
        "client_secret",
    ] {
        let mut from = 0;
        while let Some(pos) = lower[from..].find(name) {
            let after = from + pos + name.len();
            let rest = lower[after..].trim_start();
            if let Some(value) = rest.strip_prefix(':').or_else(|| rest.strip_prefix('=')) {
                let value = value.trim_start();
                if value
                    .as_bytes()
                    .first()
                    .is_some_and(|&c| !c.is_ascii_whitespace())
                {
                    return Some(format!("`{name}` with a value"));
                }
            }
            from = after;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_documented_shapes() {
        for raw in [
            r#"{"access_token":"abc"}"#,
            r#"{"nested":{"Client-Secret":"abc"}}"#,
            r#"{"agh_claim_secret-token":1}"#,
            r#"{"h":"Bearer abc.def"}"#,
            r#"{"claim_token":"agh_claim_xyz"}"#,
            r#"{"text":"use password: hunter2"}"#,
            r#"{"text":"secret=abc"}"#,
            r#"[{"token":["x"]}]"#,
        ] {
            assert!(find_secret(raw).is_some(), "{raw}");
        }
        for raw in [
            r#"{"access_token":""}"#,
            r#"{"token":null}"#,
            r#"{"token_hash":"abc"}"#,
            r#"{"text":"the token is rotated daily"}"#,
            r#"{"text":"Please review the patch."}"#,
        ] {
            assert!(find_secret(raw).is_none(), "{raw}");
        }
    }
}
