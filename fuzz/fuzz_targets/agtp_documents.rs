//! `agtp_documents`: arbitrary bytes as the JSON documents the Agent Name Service parses — an
//! Agent Manifest Document, a DISCOVER body, a governance-signed lifecycle body — and as text for
//! RFC 8785 canonicalization.
//!
//! Properties checked: nothing panics; a manifest that parses has a canonical id of the allowed
//! characters, a tier in 1..=3 and a trust score in [0, 1]; DISCOVER parameters that parse keep
//! `limit` in 1..=100 and parse again from their own normalised form to the same value (on the
//! draft's path and on `/population`, where the reference's aliases are read; the text is also
//! tried as a query string); the
//! governance verifier refuses every unsigned or foreign-signed body; canonical JSON is a fixed
//! point (canonicalizing its own output gives the same bytes).
#![no_main]

use agora_agtp::discover::{Params, Target};
use agora_agtp::governance::Verifier;
use agora_agtp::jcs;
use agora_agtp::manifest::Manifest;
use agora_agtp::signature::AnsSigningKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(canonical) = jcs::canonicalize_str(text) {
        let again = std::str::from_utf8(&canonical)
            .ok()
            .and_then(|t| jcs::canonicalize_str(t).ok());
        assert_eq!(
            again.as_deref(),
            Some(canonical.as_slice()),
            "JCS is not a fixed point"
        );
    }
    for target in [Target::Root, Target::Population] {
        if let Ok(p) = Params::from_parts(Some(text), None, &target) {
            assert!((1..=100).contains(&p.limit));
        }
    }
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
        return;
    };
    if let Ok(m) = Manifest::from_value(value.clone()) {
        assert!(!m.canonical_id.is_empty() && m.canonical_id.len() <= 128);
        assert!((1..=3).contains(&m.trust_tier));
        assert!((0.0..=1.0).contains(&m.behavioral_trust_score));
    }
    for target in [Target::Root, Target::Population] {
        if let Ok(p) = Params::from_parts(None, Some(&value), &target) {
            assert!((1..=100).contains(&p.limit));
            let body = serde_json::json!({ "parameters": p.to_value() });
            let back = Params::from_parts(None, Some(&body), &target)
                .expect("normalised parameters parse");
            assert_eq!(back, p);
        }
    }
    let key = AnsSigningKey::from_secret_bytes(&[7u8; 32], "gov").expect("valid scalar");
    let mut verifier = Verifier::new(vec![key.verifying_key()]);
    for method in ["ACTIVATE", "REVOKE"] {
        assert!(
            verifier
                .verify(method, Some(&value), 1_790_000_000_000)
                .is_err(),
            "an input nobody signed was accepted"
        );
    }
});
