//! `capability_doc`: arbitrary UTF-8 into [`agora_agh::CapabilityDoc::from_json`] with
//! [`DocRules::Authoring`].
//!
//! Properties checked (seal/verify oracle): parsing never panics, and whenever it succeeds
//! - the document is sealed with the digest of its canonical form;
//! - `canonical_json()` is valid JSON (a JSON object), and a fixed point: authoring it again gives
//!   the identical canonical form;
//! - the transfer form (`to_transfer_json()`, digest included) passes
//!   `from_json(.., DocRules::Transfer)` — i.e. the digest verifies — with the same digest and an
//!   equal document.
#![no_main]

use agora_agh::CapabilityDoc;
use agora_agh::capability::DocRules;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(doc) = CapabilityDoc::from_json(text, DocRules::Authoring) else {
        return;
    };
    let digest = doc.compute_digest();
    assert_eq!(
        doc.digest.as_deref(),
        Some(digest.as_str()),
        "authoring did not seal the document with its digest"
    );

    let canonical = doc.canonical_json();
    match serde_json::from_str::<serde_json::Value>(&canonical) {
        Ok(v) => assert!(
            v.is_object(),
            "canonical form is not a JSON object: {canonical}"
        ),
        Err(e) => panic!("canonical form is not valid JSON ({e}): {canonical}"),
    }
    match CapabilityDoc::from_json(&canonical, DocRules::Authoring) {
        Ok(again) => assert_eq!(
            again.canonical_json(),
            canonical,
            "canonical form is not a fixed point"
        ),
        Err(e) => panic!("canonical form is rejected ({e}): {canonical}"),
    }

    let transfer = doc.to_transfer_json();
    let back = match CapabilityDoc::from_json(&transfer, DocRules::Transfer) {
        Ok(back) => back,
        Err(e) => panic!("transfer form does not verify ({e}): {transfer}"),
    };
    assert_eq!(
        back.digest, doc.digest,
        "digest changed through the transfer form"
    );
    assert_eq!(back, doc, "document changed through the transfer form");
});
