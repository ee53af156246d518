//! `envelope_parse`: arbitrary bytes into [`agora_agh::Envelope::parse`] (validation steps 1–2).
//!
//! Property checked (round-trip oracle): parsing never panics, and whenever it succeeds the
//! envelope's emitted form is stable — `parse ∘ to_json ∘ parse` accepts `to_json`'s output, the
//! re-parsed envelope equals the first one, and serialising it again yields the identical string.
#![no_main]

use agora_agh::Envelope;
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;
use common::clip;

fuzz_target!(|data: &[u8]| {
    let Ok(first) = Envelope::parse(data) else {
        return;
    };
    let json = first.to_json();
    // The emitted form always carries `to` and `proof` (as null), so an input just under the size
    // limit can re-emit just over it; senders check `encoded_len` before sending.
    if json.len() > agora_agh::MAX_ENVELOPE_BYTES {
        return;
    }
    let second = match Envelope::parse(json.as_bytes()) {
        Ok(env) => env,
        Err(e) => panic!(
            "to_json output ({} bytes, input {} bytes) does not parse again: {}\noutput: {}",
            json.len(),
            data.len(),
            clip(&e.to_string(), 300),
            clip(&json, 600)
        ),
    };
    assert_eq!(
        first,
        second,
        "re-parsed envelope differs from the first parse\noutput: {}",
        clip(&json, 600)
    );
    let again = second.to_json();
    assert_eq!(json, again, "to_json is not stable across a parse");
});
