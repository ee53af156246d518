//! `pulse_decode`: arbitrary bytes as the `d` of a pulse proof (`agora_hyperspace::pulse`,
//! spec §9.4), signed by the `peerId` it names, then verified at its own round.
//!
//! Properties checked: nothing panics; a decoded proof has 12 openings of 12 siblings and names
//! its signer; a refusal's reason is one of the stable labels; random bytes never verify (a
//! proof that holds is the real work of its prover, recomputed at the challenged leaves), and a
//! proof that holds is counted once per round.
#![no_main]

use agora_hyperspace::pulse::{DEPTH, OPENINGS, Participation, Proof};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const REASONS: [&str; 7] = [
    "malformed",
    "not_signer",
    "wrong_round",
    "wrong_indices",
    "bad_leaf",
    "bad_path",
    "replayed",
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let value: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    let from = value["peerId"].as_str().unwrap_or_default().to_owned();
    let round_ms = 1_000 + value["roundMs"].as_u64().unwrap_or(0) % 100_000;
    match Proof::decode(text, &from) {
        Err(e) => assert!(REASONS.contains(&e.reason())),
        Ok(p) => {
            assert_eq!(p.peer_id, from);
            assert_eq!(p.openings.len(), OPENINGS);
            assert!(p.openings.iter().all(|o| o.path.len() == DEPTH));
            match p.verify(p.round, round_ms) {
                Err(e) => assert!(REASONS.contains(&e.reason())),
                Ok(()) => {
                    let mut table = Participation::new(2);
                    assert!(table.pass(&p.peer_id, p.round).is_ok());
                    assert!(table.pass(&p.peer_id, p.round).is_err());
                }
            }
        }
    }
});
