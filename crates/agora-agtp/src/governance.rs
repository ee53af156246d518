//! Governance-signed registration: the wire shape of `ACTIVATE`, `DEACTIVATE`, `REINSTATE`,
//! `REVOKE` and `DEPRECATE` sent to the Agent Name Service, and its verification.
//!
//! DISC-00 §4.2 says registration is a consequence of activation, submitted by the governance
//! platform and gated on `discovery:register`, but defines no message for it. This module pins
//! one (documented in `docs/agtp-ans.md`):
//!
//! ```json
//! {"method": "ACTIVATE", "task_id": "…",
//!  "parameters": {"method": "ACTIVATE", "canonical_id": "…", "manifest": {…},
//!                 "reason": "…", "issued_at": 1790000000000, "nonce": "<32 hex>"},
//!  "governance_signature": {"algorithm": "ES256", "key_id": "…", "value": "<base64url r‖s>"}}
//! ```
//!
//! The signature is ES256 over the RFC 8785 bytes of `parameters`, which names the method (so a
//! signed `REINSTATE` cannot be replayed as an `ACTIVATE`), the agent, a time and a nonce. The
//! verifier checks the key against the configured governance keys, the time against a ±5 minute
//! skew, and refuses a `(key_id, nonce)` it has seen within the window. `manifest` is required
//! for `ACTIVATE` and must name the same `canonical_id`; `reason` is required for `REVOKE`
//! (revocation is permanent; base draft -09 makes the reason mandatory).

use serde_json::{Map, Value, json};

use agora_window::{ExpiringSet, Refused, key_of};

use crate::error::{AgtpError, BadRequest};
use crate::jcs;
use crate::manifest::Transition;
use crate::signature::{ALGORITHM, AnsSigningKey, AnsVerifyingKey};

/// Body member holding the governance signature.
pub const FIELD: &str = "governance_signature";
/// Largest accepted distance between `issued_at` and the ANS's clock.
pub const MAX_SKEW_MS: u64 = 5 * 60 * 1000;
/// Most nonces remembered at once.
pub const REPLAY_CAPACITY: usize = 100_000;
/// Longest `reason`.
pub const MAX_REASON: usize = 1024;

/// A verified lifecycle request.
#[derive(Clone, Debug, PartialEq)]
pub struct Command {
    /// What to do.
    pub transition: Transition,
    /// The agent.
    pub canonical_id: String,
    /// The manifest (`ACTIVATE` only).
    pub manifest: Option<Value>,
    /// Why (required for `REVOKE`).
    pub reason: Option<String>,
    /// The governance key that signed it.
    pub key_id: String,
    /// When the platform issued it (ms since the epoch).
    pub issued_at_ms: u64,
}

/// Builds the signed body of a lifecycle request.
///
/// `nonce` must be 32 lowercase hex characters (16 random bytes; the caller supplies the
/// randomness).
#[allow(clippy::too_many_arguments)]
pub fn signed_body(
    key: &AnsSigningKey,
    transition: Transition,
    canonical_id: &str,
    manifest: Option<&Value>,
    reason: Option<&str>,
    issued_at_ms: u64,
    nonce: &str,
    task_id: &str,
) -> Value {
    let mut p = Map::new();
    p.insert("method".into(), json!(transition.method()));
    p.insert("canonical_id".into(), json!(canonical_id));
    if let Some(m) = manifest {
        p.insert("manifest".into(), m.clone());
    }
    if let Some(r) = reason {
        p.insert("reason".into(), json!(r));
    }
    p.insert("issued_at".into(), json!(issued_at_ms));
    p.insert("nonce".into(), json!(nonce));
    let parameters = Value::Object(p);
    let value = key.sign_canonical(&parameters);
    json!({
        "method": transition.method(),
        "task_id": task_id,
        "parameters": parameters,
        FIELD: {"algorithm": ALGORITHM, "key_id": key.key_id(), "value": value},
    })
}

/// Verifies lifecycle requests against the configured governance keys.
#[derive(Debug)]
pub struct Verifier {
    keys: Vec<AnsVerifyingKey>,
    seen: ExpiringSet,
}

fn unauthorized(msg: impl Into<String>) -> AgtpError {
    AgtpError::Unauthorized(msg.into())
}

fn param(name: &str, why: &str) -> AgtpError {
    AgtpError::BadRequest(BadRequest::parameter(name, why))
}

impl Verifier {
    /// A verifier trusting `keys` (looked up by `key_id`).
    pub fn new(keys: Vec<AnsVerifyingKey>) -> Self {
        Self {
            keys,
            seen: ExpiringSet::with_capacity(REPLAY_CAPACITY),
        }
    }

    /// The trusted keys.
    pub fn keys(&self) -> &[AnsVerifyingKey] {
        &self.keys
    }

    /// Checks a lifecycle request body for `method` at `now_ms` and returns the command.
    ///
    /// Errors: no or bad signature, unknown key, wrong method, stale time or replayed nonce →
    /// 401; a missing or malformed parameter → 400 naming it. A request is only remembered
    /// (its nonce consumed) once everything else has passed.
    pub fn verify(
        &mut self,
        method: &str,
        body: Option<&Value>,
        now_ms: u64,
    ) -> Result<Command, AgtpError> {
        let transition = Transition::from_method(method)
            .ok_or_else(|| AgtpError::MethodViolation(method.to_owned()))?;
        let body = body
            .and_then(Value::as_object)
            .ok_or_else(|| unauthorized("a governance-signed JSON body is required"))?;
        let sig = body
            .get(FIELD)
            .and_then(Value::as_object)
            .ok_or_else(|| unauthorized("governance_signature is missing"))?;
        let text = |k: &str| sig.get(k).and_then(Value::as_str);
        if text("algorithm") != Some(ALGORITHM) {
            return Err(unauthorized("governance_signature.algorithm must be ES256"));
        }
        let key_id =
            text("key_id").ok_or_else(|| unauthorized("governance_signature.key_id is missing"))?;
        let value =
            text("value").ok_or_else(|| unauthorized("governance_signature.value is missing"))?;
        let key = self
            .keys
            .iter()
            .find(|k| k.key_id() == key_id)
            .ok_or_else(|| unauthorized(format!("unknown governance key {key_id:?}")))?;
        let params = body
            .get("parameters")
            .ok_or_else(|| param("parameters", "is required"))?;
        let p = params
            .as_object()
            .ok_or_else(|| param("parameters", "must be an object"))?;
        key.verify_bytes(&jcs::canonicalize(params), value)
            .map_err(|e| unauthorized(format!("governance signature: {e}")))?;

        let signed_method = p.get("method").and_then(Value::as_str).unwrap_or_default();
        if !signed_method.eq_ignore_ascii_case(transition.method()) {
            return Err(unauthorized(format!(
                "the signature is for {signed_method:?}, not {}",
                transition.method()
            )));
        }
        let issued_at_ms = p
            .get("issued_at")
            .and_then(Value::as_u64)
            .ok_or_else(|| param("issued_at", "must be milliseconds since the epoch"))?;
        if issued_at_ms.abs_diff(now_ms) > MAX_SKEW_MS {
            return Err(unauthorized(
                "issued_at is more than 5 minutes from the name server's clock",
            ));
        }
        let nonce = p
            .get("nonce")
            .and_then(Value::as_str)
            .filter(|n| n.len() == 32 && n.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| param("nonce", "must be 32 hex characters"))?;
        let canonical_id = p
            .get("canonical_id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty() && s.len() <= 512)
            .ok_or_else(|| param("canonical_id", "must be a non-empty string"))?
            .to_owned();
        let reason = match p.get("reason") {
            None | Some(Value::Null) => None,
            Some(Value::String(r)) if r.len() <= MAX_REASON => Some(r.clone()),
            Some(_) => return Err(param("reason", "must be a string of at most 1024 bytes")),
        };
        if transition == Transition::Revoke && reason.as_deref().is_none_or(str::is_empty) {
            return Err(param("reason", "is required for REVOKE"));
        }
        let manifest = match (transition, p.get("manifest")) {
            (Transition::Activate, Some(m @ Value::Object(o))) => {
                let id = o
                    .get("canonical_id")
                    .or_else(|| o.get("agent_id"))
                    .and_then(Value::as_str);
                if id != Some(canonical_id.as_str()) {
                    return Err(param(
                        "manifest",
                        "must carry the same canonical_id as the request",
                    ));
                }
                Some(m.clone())
            }
            (Transition::Activate, _) => return Err(param("manifest", "is required for ACTIVATE")),
            (_, None) => None,
            (_, Some(_)) => return Err(param("manifest", "is only accepted by ACTIVATE")),
        };

        let seen = key_of(&[key_id.as_bytes(), nonce.as_bytes()]);
        self.seen.sweep(now_ms);
        match self.seen.insert(seen, now_ms + 2 * MAX_SKEW_MS, now_ms) {
            Ok(()) => {}
            Err(Refused::Duplicate) => {
                return Err(unauthorized("this governance request was already used"));
            }
            Err(Refused::Full) => {
                return Err(AgtpError::Unavailable(
                    "too many governance requests in the replay window".into(),
                ));
            }
        }
        Ok(Command {
            transition,
            canonical_id,
            manifest,
            reason,
            key_id: key_id.to_owned(),
            issued_at_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::Status;

    const NOW: u64 = 1_790_000_000_000;
    const NONCE: &str = "00112233445566778899aabbccddeeff";

    fn key() -> AnsSigningKey {
        AnsSigningKey::from_secret_bytes(&[7u8; 32], "gov-1").expect("valid scalar")
    }

    fn verifier() -> Verifier {
        Verifier::new(vec![key().verifying_key()])
    }

    fn manifest() -> Value {
        json!({"canonical_id": "agt-1", "agent_label": "a"})
    }

    fn activate(nonce: &str, at: u64) -> Value {
        signed_body(
            &key(),
            Transition::Activate,
            "agt-1",
            Some(&manifest()),
            None,
            at,
            nonce,
            "t1",
        )
    }

    #[test]
    fn a_signed_activate_verifies_once() {
        let mut v = verifier();
        let body = activate(NONCE, NOW);
        let cmd = v
            .verify("ACTIVATE", Some(&body), NOW + 1000)
            .expect("verifies");
        assert_eq!(cmd.transition, Transition::Activate);
        assert_eq!(cmd.canonical_id, "agt-1");
        assert_eq!(cmd.manifest, Some(manifest()));
        assert_eq!(cmd.key_id, "gov-1");
        let again = v
            .verify("ACTIVATE", Some(&body), NOW + 2000)
            .expect_err("replay");
        assert_eq!(again.status(), Status::UNAUTHORIZED);
    }

    #[test]
    fn tampering_another_method_unknown_keys_and_stale_times_are_refused() {
        let mut v = verifier();
        let mut body = activate(NONCE, NOW);
        body["parameters"]["canonical_id"] = json!("agt-2");
        body["parameters"]["manifest"]["canonical_id"] = json!("agt-2");
        assert_eq!(
            v.verify("ACTIVATE", Some(&body), NOW)
                .expect_err("tampered")
                .status(),
            Status::UNAUTHORIZED
        );
        let body = activate(NONCE, NOW);
        assert_eq!(
            v.verify("REINSTATE", Some(&body), NOW)
                .expect_err("method")
                .status(),
            Status::UNAUTHORIZED
        );
        let other = AnsSigningKey::from_secret_bytes(&[9u8; 32], "gov-2").expect("scalar");
        let body = signed_body(
            &other,
            Transition::Deactivate,
            "agt-1",
            None,
            None,
            NOW,
            NONCE,
            "t",
        );
        assert!(matches!(
            v.verify("DEACTIVATE", Some(&body), NOW),
            Err(AgtpError::Unauthorized(m)) if m.contains("unknown governance key")
        ));
        let stale = activate("ffffffffffffffffffffffffffffffff", NOW - MAX_SKEW_MS - 1);
        assert_eq!(
            v.verify("ACTIVATE", Some(&stale), NOW)
                .expect_err("stale")
                .status(),
            Status::UNAUTHORIZED
        );
        assert_eq!(
            v.verify("ACTIVATE", None, NOW)
                .expect_err("unsigned")
                .status(),
            Status::UNAUTHORIZED
        );
        // The failed attempts did not consume the nonce.
        v.verify("ACTIVATE", Some(&activate(NONCE, NOW)), NOW)
            .expect("first valid use");
    }

    #[test]
    fn parameters_are_checked_by_name() {
        let mut v = verifier();
        let k = key();
        let revoke = signed_body(&k, Transition::Revoke, "agt-1", None, None, NOW, NONCE, "t");
        assert!(matches!(
            v.verify("REVOKE", Some(&revoke), NOW),
            Err(AgtpError::BadRequest(BadRequest::Parameter { parameter, .. })) if parameter == "reason"
        ));
        let bare = signed_body(
            &k,
            Transition::Activate,
            "agt-1",
            None,
            None,
            NOW,
            NONCE,
            "t",
        );
        assert!(matches!(
            v.verify("ACTIVATE", Some(&bare), NOW),
            Err(AgtpError::BadRequest(BadRequest::Parameter { parameter, .. })) if parameter == "manifest"
        ));
        let other = json!({"canonical_id": "agt-9"});
        let mismatch = signed_body(
            &k,
            Transition::Activate,
            "agt-1",
            Some(&other),
            None,
            NOW,
            NONCE,
            "t",
        );
        assert!(matches!(
            v.verify("ACTIVATE", Some(&mismatch), NOW),
            Err(AgtpError::BadRequest(BadRequest::Parameter { parameter, .. })) if parameter == "manifest"
        ));
        let ok = signed_body(
            &k,
            Transition::Revoke,
            "agt-1",
            None,
            Some("compromised"),
            NOW,
            NONCE,
            "t",
        );
        let cmd = v.verify("revoke", Some(&ok), NOW).expect("verifies");
        assert_eq!(cmd.reason.as_deref(), Some("compromised"));
    }
}
