//! `hs_envelope`: arbitrary bytes as a Hyperspace v2 envelope, card record and capability message.
//!
//! Properties checked: nothing panics; an envelope that parses keeps `d_json` as a substring of
//! the input (received bytes, never re-serialised) with a valid `from`-format check; a record
//! that verifies under a card key carries a card of exactly that peer; a capability message that
//! reads is the signer's own.
#![no_main]

use agora_hyperspace::announce::{self, CapabilityMessage};
use agora_hyperspace::card::CardLimits;
use agora_hyperspace::{Envelope, ReplayWindow};
use libfuzzer_sys::fuzz_target;

const NOW: u64 = 1_800_000_000_000;

fuzz_target!(|data: &[u8]| {
    let limits = CardLimits::default();
    let Ok(text) = std::str::from_utf8(data) else {
        // Records are bytes on the DHT: non-UTF-8 must be a clean error.
        assert!(announce::verify_record(data, None, NOW, &limits).is_err());
        return;
    };
    if let Ok(env) = Envelope::parse(text) {
        assert!(
            text.contains(env.d_json),
            "d_json is not the received bytes"
        );
        let topic = announce::capabilities_topic(env.from);
        if let Ok(verified) =
            agora_hyperspace::verify(text, &topic, env.ts, &mut ReplayWindow::default())
        {
            if let Ok(message) = announce::read_message(&verified) {
                let peer = match &message {
                    CapabilityMessage::Card(card) => card.peer_id.clone(),
                    CapabilityMessage::Delta(d) => d["peerId"].as_str().unwrap_or("").to_owned(),
                };
                assert_eq!(peer, verified.from);
            }
        }
        let key = announce::card_key(env.from);
        if let Ok(card) = announce::verify_card_record(&key, data, env.ts, &limits) {
            assert_eq!(card.peer_id, env.from);
            assert!(card.tools.iter().all(|t| t.peer_id == card.peer_id));
        }
    }
    let _ = announce::verify_record(data, None, NOW, &limits);
});
