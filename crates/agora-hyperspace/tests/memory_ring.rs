//! Memory ring vectors (`tests/vectors/hyperspace/memory-ring.json`), computed by an independent
//! implementation: five real PeerIds (from fixed Ed25519 seeds) and 20 memory ids → key
//! positions and owner triples, plus one regression anchor.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agora_hyperspace::memory::ring::{Ring, key_position};
use serde_json::Value;

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/vectors/hyperspace/memory-ring.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn check(peers: &[String], cases: &[Value]) {
    let mut ring = Ring::new();
    for p in peers {
        assert!(ring.add(p));
    }
    for case in cases {
        let id = case["id"].as_str().unwrap();
        assert_eq!(
            format!("{:016x}", key_position(id)),
            case["position"].as_str().unwrap(),
            "{id}"
        );
        let owners: Vec<&str> = case["owners"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_str().unwrap())
            .collect();
        assert_eq!(ring.owners(id), owners, "{id}");
    }
}

#[test]
fn owner_triples_match_the_independent_implementation() {
    let v = vectors();
    let peers: Vec<String> = v["peers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let seed: [u8; 32] = (0..32)
                .map(|i| {
                    u8::from_str_radix(&p["seed_hex"].as_str().unwrap()[2 * i..2 * i + 2], 16)
                        .unwrap()
                })
                .collect::<Vec<u8>>()
                .try_into()
                .unwrap();
            let key = ed25519_dalek::SigningKey::from_bytes(&seed);
            let id = agora_hyperspace::peer_id_of(key.verifying_key().as_bytes());
            assert_eq!(id, p["peerId"].as_str().unwrap());
            id
        })
        .collect();
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 20);
    check(&peers, cases);
    let anchor = &v["anchor"];
    let test_peers: Vec<String> = anchor["peers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect();
    check(&test_peers, anchor["cases"].as_array().unwrap());
}
