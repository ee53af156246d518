//! `validate`: the full stateless receive pipeline, [`agora_agh::validate`] (steps 1–5).
//!
//! Input layout: the first 8 bytes are the receiver clock `now` (little-endian `i64`), the rest is
//! the envelope. Properties checked:
//! - `validate` never panics, for any bytes and any `now`;
//! - re-validation oracle: when an envelope is accepted, its emitted form
//!   (`v.envelope.to_json()`) is accepted again at the same `now` with the same kind and id (and,
//!   stronger, an equal envelope and body);
//! - the opt-in reference admission rules only ever remove acceptances: an envelope accepted with
//!   `reference_admission: true` is also accepted without it.
#![no_main]

use agora_agh::{ValidationPolicy, validate};
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;
use common::clip;

fuzz_target!(|data: &[u8]| {
    let Some((head, rest)) = data.split_first_chunk::<8>() else {
        return;
    };
    let now = i64::from_le_bytes(*head);
    let policy = ValidationPolicy::default();
    let strict = ValidationPolicy {
        reference_admission: true,
        ..ValidationPolicy::default()
    };

    let result = validate(rest, now, &policy);
    let strict_result = validate(rest, now, &strict);
    if strict_result.is_ok() {
        assert!(
            result.is_ok(),
            "accepted with reference admission but rejected without it: {:?}",
            result.err()
        );
    }

    let Ok(v) = result else {
        return;
    };
    let json = v.envelope.to_json();
    // See envelope_parse: the emitted form may be a few bytes longer than the input.
    if json.len() > agora_agh::MAX_ENVELOPE_BYTES {
        return;
    }
    let w = match validate(json.as_bytes(), now, &policy) {
        Ok(w) => w,
        Err(e) => panic!(
            "accepted envelope's to_json ({} bytes, input {} bytes) is rejected at now={now}: {}\noutput: {}",
            json.len(),
            rest.len(),
            clip(&e.to_string(), 300),
            clip(&json, 600)
        ),
    };
    assert_eq!(
        v.envelope.kind, w.envelope.kind,
        "kind changed on re-validation"
    );
    assert_eq!(v.envelope.id, w.envelope.id, "id changed on re-validation");
    assert_eq!(v.envelope, w.envelope, "envelope changed on re-validation");
    assert_eq!(v.body, w.body, "body changed on re-validation");
});
