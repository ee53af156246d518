//! Signed Agent Cards (A2A 1.0 §8.4; the note's §4.4): each entry of `signatures[]` is a JWS
//! (RFC 7515) with a detached payload, `{protected, signature, header?}`; the payload is the RFC
//! 8785 (JCS) canonical form of the card without `signatures`. Only ES256 is taken.
//!
//! Verification uses **keys configured on the node** only: a key named by the card (`jku`, a
//! `kid` the node does not hold) is never fetched or trusted. A card without signatures is
//! [`Verified::Unsigned`]; a signed card none of whose signatures holds under a configured key
//! is refused. Because the SDKs strip empty strings, arrays and objects before canonicalising
//! (the note's §4.4), a signature is checked over the card as it is and, failing that, over the
//! card with its empty values removed.
//!
//! Signing ([`sign_card`]) produces what both SDKs verify: protected header
//! `{alg:"ES256", kid, typ:"JOSE"}`, over the card with its empty values removed.

use agora_agtp::jcs;
use agora_agtp::signature::{AnsSigningKey, AnsVerifyingKey};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value, json};

/// The only algorithm taken and used.
pub const ALG: &str = "ES256";

/// How a card's signatures came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verified {
    /// The card has no signatures: accepted, marked unverified.
    Unsigned,
    /// A signature holds under the configured key `kid`.
    Signed {
        /// The key's id.
        kid: String,
    },
}

/// A signed card that does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwsError {
    /// `signatures` is not an array of `{protected, signature}` strings, or a header is not
    /// base64url JSON.
    #[error("the card's signatures are malformed: {0}")]
    Malformed(String),
    /// No configured key has a signature's `kid`.
    #[error(
        "the card is signed with key {0:?}, which is not configured on this node ([bridge] a2a_keys)"
    )]
    UnknownKey(String),
    /// Not ES256.
    #[error("the card is signed with {0:?}; only ES256 is accepted")]
    Algorithm(String),
    /// The signature does not hold.
    #[error("the card's signature does not verify")]
    Invalid,
}

/// `value` with every empty string, array and object removed, recursively (an object or array
/// emptied that way goes too), as the A2A SDKs do before canonicalising.
#[must_use]
pub fn without_empty(value: &Value) -> Option<Value> {
    match value {
        Value::String(s) if s.is_empty() => None,
        Value::Array(items) => {
            let kept: Vec<Value> = items.iter().filter_map(without_empty).collect();
            (!kept.is_empty()).then_some(Value::Array(kept))
        }
        Value::Object(map) => {
            let kept: Map<String, Value> = map
                .iter()
                .filter_map(|(k, v)| without_empty(v).map(|v| (k.clone(), v)))
                .collect();
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        other => Some(other.clone()),
    }
}

fn payloads(card: &Map<String, Value>) -> [Vec<u8>; 2] {
    let as_is = jcs::canonicalize_object_excluding(card, "signatures");
    let mut rest = card.clone();
    rest.remove("signatures");
    let cleaned = without_empty(&Value::Object(rest)).unwrap_or_else(|| json!({}));
    [as_is, jcs::canonicalize(&cleaned)]
}

/// Verifies a card's signatures against `keys` (the keys configured on this node).
///
/// # Errors
///
/// The card is signed but no signature holds: why (the reason of the first signature tried).
pub fn verify_card(card: &Value, keys: &[AnsVerifyingKey]) -> Result<Verified, JwsError> {
    let Some(map) = card.as_object() else {
        return Err(JwsError::Malformed("the card is not an object".into()));
    };
    let sigs = match map.get("signatures") {
        None | Some(Value::Null) => return Ok(Verified::Unsigned),
        Some(Value::Array(a)) if a.is_empty() => return Ok(Verified::Unsigned),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(JwsError::Malformed("signatures is not an array".into())),
    };
    let payloads = payloads(map);
    let mut first_error = None;
    for sig in sigs {
        match verify_one(sig, &payloads, keys) {
            Ok(kid) => return Ok(Verified::Signed { kid }),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or(JwsError::Invalid))
}

fn verify_one(
    sig: &Value,
    payloads: &[Vec<u8>; 2],
    keys: &[AnsVerifyingKey],
) -> Result<String, JwsError> {
    let malformed = |what: &str| JwsError::Malformed(what.to_owned());
    let protected = sig
        .get("protected")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("a signature has no protected header"))?;
    let signature = sig
        .get("signature")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("a signature has no signature"))?;
    let header_bytes = URL_SAFE_NO_PAD
        .decode(protected)
        .map_err(|_| malformed("a protected header is not base64url"))?;
    let header: Value = serde_json::from_slice(&header_bytes)
        .map_err(|_| malformed("a protected header is not JSON"))?;
    let alg = header.get("alg").and_then(Value::as_str).unwrap_or("");
    if alg != ALG {
        return Err(JwsError::Algorithm(alg.to_owned()));
    }
    let kid = header.get("kid").and_then(Value::as_str).unwrap_or("");
    let key = keys
        .iter()
        .find(|k| k.key_id() == kid)
        .ok_or_else(|| JwsError::UnknownKey(kid.to_owned()))?;
    for payload in payloads {
        let input = format!("{protected}.{}", URL_SAFE_NO_PAD.encode(payload));
        if key.verify_bytes(input.as_bytes(), signature).is_ok() {
            return Ok(kid.to_owned());
        }
    }
    Err(JwsError::Invalid)
}

/// Signs `card`: removes its empty values and any `signatures`, then adds one ES256 signature
/// (protected header `{alg:"ES256", kid, typ:"JOSE"}`) over the JCS form of the rest.
#[must_use]
pub fn sign_card(card: &Value, key: &AnsSigningKey) -> Value {
    let mut rest = card.as_object().cloned().unwrap_or_default();
    rest.remove("signatures");
    let mut cleaned = without_empty(&Value::Object(rest)).unwrap_or_else(|| json!({}));
    let header = json!({"alg": ALG, "kid": key.key_id(), "typ": "JOSE"});
    let protected = URL_SAFE_NO_PAD.encode(header.to_string());
    let input = format!(
        "{protected}.{}",
        URL_SAFE_NO_PAD.encode(jcs::canonicalize(&cleaned))
    );
    let signature = key.sign_bytes(input.as_bytes());
    if let Some(o) = cleaned.as_object_mut() {
        o.insert(
            "signatures".into(),
            json!([{"protected": protected, "signature": signature}]),
        );
    }
    cleaned
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8, kid: &str) -> AnsSigningKey {
        AnsSigningKey::from_secret_bytes(&[seed; 32], kid).unwrap()
    }

    #[test]
    fn signed_cards_verify_only_under_configured_keys() {
        let card = json!({"name": "a", "description": "", "skills": [], "version": "1"});
        let k = key(7, "k1");
        let signed = sign_card(&card, &k);
        assert!(
            signed.get("description").is_none(),
            "empty values are removed"
        );
        let keys = [k.verifying_key()];
        assert_eq!(
            verify_card(&signed, &keys),
            Ok(Verified::Signed { kid: "k1".into() })
        );
        assert_eq!(verify_card(&card, &keys), Ok(Verified::Unsigned));
        // Another key with the same kid: the signature does not hold.
        assert_eq!(
            verify_card(&signed, &[key(8, "k1").verifying_key()]),
            Err(JwsError::Invalid)
        );
        assert_eq!(
            verify_card(&signed, &[]),
            Err(JwsError::UnknownKey("k1".into()))
        );
        // A changed card (a forged name) with the old signature is refused.
        let mut forged = signed.clone();
        forged["name"] = json!("b");
        assert_eq!(verify_card(&forged, &keys), Err(JwsError::Invalid));
        // Empty values added after signing do not matter (the SDKs strip them).
        let mut padded = signed;
        padded["documentationUrl"] = json!("");
        assert!(verify_card(&padded, &keys).is_ok());
    }
}
